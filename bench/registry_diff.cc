// registry_diff: times a patch computed the way `blz serve` computes it, i.e. with the two
// archives' digests already known (the blob store verified them when the blobs were written),
// so the patcher does not hash the archives (patcher::DiffOptions::known_*_digest).
//
//   registry_diff BASE.blz TARGET.blz OUT.blzpatch [--threads N]
//
// The digests are computed first and not timed; then patcher::CreatePatch runs and one line is
// printed: "<wall s> <CPU s of the process during CreatePatch> <patch bytes>". CPU time is
// CLOCK_PROCESS_CPUTIME_ID (all threads). OUT must not exist. Exit codes: 0 ok, 1 failure,
// 2 usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/cpu_time.h"
#include "core/digest.h"
#include "patcher/patch.h"

using blz::bench::CpuSeconds;

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 6 && std::string(argv[4]) == "--threads")) {
    std::fprintf(stderr, "usage: registry_diff BASE.blz TARGET.blz OUT.blzpatch [--threads N]\n");
    return 2;
  }
  blz::patcher::DiffOptions options;
  if (argc == 6) options.threads = std::atoi(argv[5]);
  for (int k : {1, 2}) {
    auto hex = blz::Sha256FileHex(argv[k]);
    if (!hex.ok()) {
      std::fprintf(stderr, "registry_diff: %s\n", hex.status().ToString().c_str());
      return 1;
    }
    (k == 1 ? options.known_base_digest : options.known_target_digest) = blz::MakeDigest(*hex);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = CpuSeconds();
  blz::patcher::DiffStats stats;
  blz::Status s = blz::patcher::CreatePatch(argv[1], argv[2], argv[3], options, &stats);
  const double cpu = CpuSeconds() - c0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) {
    std::fprintf(stderr, "registry_diff: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%.3f %.3f %llu\n", wall, cpu, static_cast<unsigned long long>(stats.patch_bytes));
  return 0;
}
