// CPU seconds of this process so far, every thread (CLOCK_PROCESS_CPUTIME_ID): the measure the
// bench/ programs report next to wall time.
#ifndef BLZ_BENCH_CPU_TIME_H_
#define BLZ_BENCH_CPU_TIME_H_

#include <time.h>

namespace blz::bench {

inline double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

}  // namespace blz::bench

#endif  // BLZ_BENCH_CPU_TIME_H_
