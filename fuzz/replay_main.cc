// A main() for the fuzz targets when they are built without libFuzzer (gcc, the test build):
// runs LLVMFuzzerTestOneInput once on each input given, as libFuzzer does when given files, so
// the targets' crafted seeds and the corpus files are replayed under ASan+UBSan by ctest
// (fuzz/CMakeLists.txt, scripts/fuzz_replay.sh). Fuzzing itself needs clang: scripts/fuzz.sh.
//
//   fuzz_<what> PATH...   each PATH a file, or a directory whose regular files are run in
//                         name order; exits 0 after all ran, 2 on an unreadable path; a finding
//                         aborts (the sanitizer's or the target's report on stderr).
// LLVMFuzzerInitialize runs first when the target defines it (with BLZ_FUZZ_WRITE_SEEDS set it
// writes the seeds and exits, as under libFuzzer).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (std::filesystem::is_directory(argv[i], ec)) {
      std::vector<std::string> files;
      for (const auto& entry : std::filesystem::directory_iterator(argv[i], ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path().string());
      }
      if (ec) {
        std::fprintf(stderr, "%s: cannot list: %s\n", argv[i], ec.message().c_str());
        return 2;
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (std::filesystem::is_regular_file(argv[i], ec)) {
      inputs.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "%s: not a file or directory\n", argv[i]);
      return 2;
    }
  }
  for (const std::string& path : inputs) {
    std::fprintf(stderr, "replay: %s\n", path.c_str());
    // ReadAll returns "" for an unreadable file; an empty input is a valid one, so check first.
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
    } else {
      std::perror(path.c_str());
      return 2;
    }
    std::string bytes = blz::fuzz::ReadAll(path);
    // A copy of exactly the input's size on the heap, as libFuzzer passes it, so that ASan sees
    // a read past its end (never a null pointer, also for an empty input).
    std::unique_ptr<uint8_t[]> data(new uint8_t[bytes.size()]);
    std::copy(bytes.begin(), bytes.end(), data.get());
    LLVMFuzzerTestOneInput(data.get(), bytes.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
