// Runs child processes for end-to-end tests: argv (no shell), extra environment, stdout and
// stderr captured to files.
#ifndef BLZ_TESTS_E2E_SUBPROCESS_H_
#define BLZ_TESTS_E2E_SUBPROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace blz::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
};

// Starts argv[0] (a path) with the current environment plus `env`; stdout/stderr go to the
// given files. Returns the pid (or -1).
pid_t StartProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                   const std::string& stdout_path, const std::string& stderr_path);

// Runs to completion and captures both streams (bounded by `timeout_seconds`, then killed).
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env, const std::string& scratch_dir,
                         int timeout_seconds = 300);

// The backend pair of every `blz serve` a test starts (issue 25): a hook that may add flags
// (--metadata, --storage) to a serve argv and variables (AWS_*) to its environment.
// tests/e2e/e2e_backends.cc installs one that honours BLZ_TEST_METADATA / BLZ_TEST_STORAGE;
// binaries without it start `blz serve` as given.
using ServeBackendHook = void (*)(std::vector<std::string>* argv,
                                  std::map<std::string, std::string>* env);
void SetServeBackendHook(ServeBackendHook hook);

// StartProcess for a `blz serve` argv ({binary, "serve", ...}): applies the backend hook first.
// Every e2e test starts its servers through this (or StartServe, which calls it).
pid_t StartServeProcess(std::vector<std::string> argv, std::map<std::string, std::string> env,
                        const std::string& stdout_path, const std::string& stderr_path);

// A `blz serve` a test started on 127.0.0.1:<free port>.
struct ServeProcess {
  pid_t pid = -1;
  std::string addr;   // "127.0.0.1:PORT"; empty when it did not start
  std::string token;  // the admin token it printed (on a data directory's first start only)
};

// Starts `binary serve --data DATA --listen 127.0.0.1:0 EXTRA...` with stdout and stderr in
// "<log_prefix>.out" / "<log_prefix>.err", and waits (at most 15 s) for its "listening on
// http(s)://" line and, when it prints one, its admin token.
// `env` is added to the server's environment (e.g. BLZ_FAILPOINT, core/failpoint.h).
ServeProcess StartServe(const std::string& binary, const std::string& data,
                        const std::vector<std::string>& extra, const std::string& log_prefix,
                        std::map<std::string, std::string> env = {});
// SIGTERM, then waits for it to exit. Idempotent.
void StopServe(ServeProcess* server);

}  // namespace blz::testing

#endif  // BLZ_TESTS_E2E_SUBPROCESS_H_
