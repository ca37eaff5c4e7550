// value_scan_bench MODEL [--runs N]: the NaN/Inf check `blz push` runs before it uploads
// (formats::ComputeModelStats with StatsOptions::non_finite_only), next to the full statistics
// of `blz inspect --stats` on the same model; wall and CPU seconds per run and per GB of tensor
// data, the page cache warm (one untimed pass first). Figures in docs/benchmarks.md.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/cpu_time.h"
#include "formats/tensor_stats.h"

using blz::bench::CpuSeconds;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: value_scan_bench MODEL [--runs N]\n");
    return 2;
  }
  const std::string path = argv[1];
  int runs = 3;
  if (argc >= 4 && std::string(argv[2]) == "--runs") runs = std::atoi(argv[3]);
  auto model = blz::formats::ModelTensors::Open(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), model.status().ToString().c_str());
    return 1;
  }
  uint64_t bytes = 0;
  for (const auto& t : model->tensors()) bytes += t.data.size();
  const double gb = double(bytes) / 1e9;
  std::printf("%s: %zu tensors, %.3f GB of tensor data, %d runs\n", path.c_str(),
              model->tensors().size(), gb, runs);
  for (bool non_finite_only : {false, true}) {
    blz::formats::StatsOptions options;
    options.non_finite_only = non_finite_only;
    auto warm = blz::formats::ComputeModelStats(*model, options);
    if (!warm.ok()) {
      std::fprintf(stderr, "%s\n", warm.status().ToString().c_str());
      return 1;
    }
    for (int r = 0; r < runs; ++r) {
      const double cpu0 = CpuSeconds();
      const auto t0 = std::chrono::steady_clock::now();
      auto stats = blz::formats::ComputeModelStats(*model, options);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = CpuSeconds() - cpu0;
      if (!stats.ok()) return 1;
      std::printf("%-16s run %d: wall %.3f s, CPU %.3f s; per GB: wall %.3f s, CPU %.3f s; "
                  "%llu NaN/Inf\n",
                  non_finite_only ? "non-finite only" : "full statistics", r + 1, wall, cpu,
                  wall / gb, cpu / gb,
                  static_cast<unsigned long long>(stats->nan + stats->pos_inf + stats->neg_inf));
    }
  }
  return 0;
}
