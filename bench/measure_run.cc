// measure_run: runs one command and records its wall time, CPU time and peak anonymous
// resident memory, for bench/patch_bench.sh.
//
//   measure_run --out FILE -- CMD [ARGS...]
//
// CMD inherits stdin, stdout and stderr. While it runs, its RssAnon (/proc/PID/status: heap
// and other private memory; memory-mapped input files do not count) is polled every 1 ms for
// the first 2 s, then every 10 ms, so short commands (tens of ms) are sampled too; the peak is
// the largest sample (a spike shorter than the interval can be missed). Only the process
// itself is measured, not its children.
// FILE receives one line: "<wall s> <user+sys CPU s> <peak RssAnon KiB> <exit status>", where
// the exit status is CMD's exit code, or 128 + signal number if a signal ended it. FILE is
// written even when CMD fails; measure_run then exits with that status.
// Exit codes: CMD's status; 2 usage; 127 CMD could not be started.
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/file_util.h"
#include "core/status.h"

namespace {

// The RssAnon of `pid` in KiB, or -1 when it cannot be read (the process has exited).
long long RssAnonKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::atoll(line.c_str() + 8);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int cmd = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (std::strcmp(argv[i], "--") == 0) {
      cmd = i + 1;
      break;
    } else {
      break;
    }
  }
  if (out.empty() || cmd < 0 || cmd >= argc) {
    std::fprintf(stderr, "usage: measure_run --out FILE -- CMD [ARGS...]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "measure_run: fork: %s\n", std::strerror(errno));
    return 127;
  }
  if (pid == 0) {
    execvp(argv[cmd], argv + cmd);
    std::fprintf(stderr, "measure_run: %s: %s\n", argv[cmd], std::strerror(errno));
    _exit(127);
  }
  long long peak = 0;
  int wstatus = 0;
  rusage usage{};
  for (;;) {
    const pid_t r = wait4(pid, &wstatus, WNOHANG, &usage);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "measure_run: wait4: %s\n", std::strerror(errno));
      return 127;
    }
    peak = std::max(peak, RssAnonKiB(pid));
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(elapsed < 2.0 ? 1 : 10));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = double(usage.ru_utime.tv_sec) + double(usage.ru_utime.tv_usec) * 1e-6 +
                     double(usage.ru_stime.tv_sec) + double(usage.ru_stime.tv_usec) * 1e-6;
  const int status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus)
                     : WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus)
                                            : 127;
  char line[128];
  std::snprintf(line, sizeof line, "%.6f %.6f %lld %d\n", wall, cpu, peak, status);
  blz::Status st = blz::WriteFileAtomic(out, line);
  if (!st.ok()) {
    std::fprintf(stderr, "measure_run: %s\n", st.ToString().c_str());
    return 127;
  }
  return status;
}
