// full_patch_bench: the registry's background compression of one archive, step by step, as
// registry/archive_storage.cc (GetFullPatch) and registry/patch_function.cc run it: create the
// full patch (the archive's digest known), hash the patch, verify it against the archive
// (patcher::VerifyPatchAgainst: decode every piece, compare with the archive), and the hash of
// the stored patch before the raw archive is dropped (DropRaw); for comparison also
// patcher::VerifyPatch (decode and hash the rebuilt archive), what the registry ran before.
//
//   full_patch_bench ARCHIVE.blz WORK_DIR [--levels 9,3,...] [--runs N] [--create-only 1]
//
// --levels sets DiffOptions::zstd_level (whole-chunk zstd; the byte planes have their own
// settings, patcher/codec_zstd.h). For each level and run one line: wall and CPU seconds of
// each step, the patch's size as a fraction of the archive, and CPU seconds per GB of archive
// for the job (create + 2 x sha256 of the patch + verify against the archive). CPU time is
// CLOCK_PROCESS_CPUTIME_ID (all threads). WORK_DIR must exist; the patch is written there and
// removed. --create-only 1 runs only the first step (for a profile of it). Exit codes: 0 ok,
// 1 failure, 2 usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cpu_time.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "patcher/patch.h"

namespace {

using blz::bench::CpuSeconds;

struct Timed {
  double wall = 0, cpu = 0;
};

template <typename F>
Timed Time(F&& f) {
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  Timed t;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.cpu = CpuSeconds() - cpu0;
  return t;
}

[[noreturn]] void Fail(const blz::Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::exit(1);
}

uint64_t SizeOrDie(const std::string& path) {
  blz::Result<uint64_t> size = blz::FileSizeOf(path);
  if (!size.ok()) Fail(size.status());
  return *size;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: full_patch_bench ARCHIVE.blz WORK_DIR [--levels 9,3] [--runs N] "
                 "[--create-only 1]\n");
    return 2;
  }
  const std::string archive = argv[1];
  const std::string patch = std::string(argv[2]) + "/full_patch_bench.blzpatch";
  std::vector<int> levels = {9};
  int runs = 1;
  bool create_only = false;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--runs") {
      runs = std::atoi(argv[i + 1]);
    } else if (flag == "--create-only") {
      create_only = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--levels") {
      levels.clear();
      std::stringstream in(argv[i + 1]);
      std::string item;
      while (std::getline(in, item, ',')) levels.push_back(std::atoi(item.c_str()));
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  auto digest = blz::Sha256FileHex(archive);
  if (!digest.ok()) Fail(digest.status());
  const uint64_t size = SizeOrDie(archive);
  const double gb = double(size) / 1e9;
  std::printf("%s: %.3f GB; columns: level, wall/CPU s of create, sha256(patch), verify "
              "(hashing), verify against the archive; patch/archive; job CPU s per GB (create + "
              "2 x sha256(patch) + verify against)\n",
              archive.c_str(), gb);
  for (int level : levels) {
    for (int r = 0; r < runs; ++r) {
      blz::RemoveAll(patch);
      blz::patcher::DiffOptions options;
      options.zstd_level = level;
      options.known_target_digest = "sha256:" + *digest;
      Timed create = Time([&] {
        if (blz::Status s = blz::patcher::CreateFullPatch(archive, patch, options, nullptr);
            !s.ok()) {
          Fail(s);
        }
      });
      if (create_only) {
        std::printf("level %2d: create %.2f/%.2f\n", level, create.wall, create.cpu);
        continue;
      }
      Timed hash = Time([&] {
        if (auto h = blz::Sha256FileHex(patch); !h.ok()) Fail(h.status());
      });
      Timed verify = Time([&] {
        blz::patcher::ApplyStats stats;
        if (blz::Status s = blz::patcher::VerifyPatch("", patch, &stats); !s.ok()) Fail(s);
        if (stats.target_digest != options.known_target_digest) {
          std::fprintf(stderr, "the patch rebuilds %s\n", stats.target_digest.c_str());
          std::exit(1);
        }
      });
      Timed against = Time([&] {
        blz::patcher::ApplyStats stats;
        if (blz::Status s = blz::patcher::VerifyPatchAgainst("", patch, archive,
                                                             options.known_target_digest, &stats);
            !s.ok()) {
          Fail(s);
        }
      });
      const double job = create.cpu + 2 * hash.cpu + against.cpu;
      std::printf("level %2d: create %.2f/%.2f  sha256 %.2f/%.2f  verify %.2f/%.2f  "
                  "against %.2f/%.2f  ratio %.4f  job %.2f CPU s per GB\n",
                  level, create.wall, create.cpu, hash.wall, hash.cpu, verify.wall, verify.cpu,
                  against.wall, against.cpu, double(SizeOrDie(patch)) / double(size), job / gb);
      std::fflush(stdout);
    }
  }
  blz::RemoveAll(patch);
  return 0;
}
