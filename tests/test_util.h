// Helpers shared by blz tests: temp directories, the shared corpus, small file I/O.
#ifndef BLZ_TESTS_TEST_UTIL_H_
#define BLZ_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace blz::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "blz-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// The shared corpus of real model files ("" when absent).
inline std::string CorpusDir() {
  const char* env = std::getenv("BLZ_CORPUS_DIR");
  std::string dir = env != nullptr ? env : BLZ_CORPUS_DIR;
  return std::filesystem::is_directory(dir) ? dir : std::string();
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFileBytes(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), std::streamsize(data.size()));
}

// Every regular file below `dir` (relative path -> bytes); empty when `dir` is not a directory.
inline std::map<std::string, std::string> ReadTree(const std::string& dir) {
  std::map<std::string, std::string> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) {
      out[std::filesystem::relative(e.path(), dir).string()] = ReadFileBytes(e.path().string());
    }
  }
  return out;
}

// A safetensors file with one F32 tensor "w" of `floats` noise values; `version` > 0 changes
// every 16th value slightly (a fine-tune of version 0: a patch between them is a fraction of
// the archive).
inline std::string FineTuneSafetensors(size_t floats, int version) {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(floats) +
                       "],\"data_offsets\":[0," + std::to_string(floats * 4) + "]}}";
  while (header.size() % 8 != 0) header += " ";
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  std::string data(floats * 4, '\0');
  uint32_t x = 12345;
  for (size_t i = 0; i < floats; ++i) {
    x = x * 1664525u + 1013904223u;
    float f = float(int32_t(x >> 8) - (1 << 23)) / float(1 << 23);
    if (version > 0 && i % 16 == 0) f *= 1.0f + 0.001f * float(version);
    std::memcpy(&data[i * 4], &f, 4);
  }
  return out + data;
}

}  // namespace blz::testing

// Skips the current test with a clear message when the shared corpus is missing.
#define BLZ_REQUIRE_CORPUS(var)                                                        \
  std::string var = ::blz::testing::CorpusDir();                                       \
  if (var.empty()) {                                                                   \
    GTEST_SKIP() << "shared corpus not found (looked in BLZ_CORPUS_DIR and "           \
                 << BLZ_CORPUS_DIR << "); skipping test that needs real model files"; \
  }

#endif  // BLZ_TESTS_TEST_UTIL_H_
