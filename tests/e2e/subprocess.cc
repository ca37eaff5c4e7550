#include "tests/e2e/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <utility>

#include "tests/test_util.h"

extern char** environ;

namespace blz::testing {

pid_t StartProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                   const std::string& stdout_path, const std::string& stderr_path) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env, const std::string& scratch_dir,
                         int timeout_seconds) {
  static int counter = 0;
  std::string base = scratch_dir + "/proc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  ProcessResult r;
  pid_t pid = StartProcess(argv, env, base + ".out", base + ".err");
  if (pid < 0) {
    r.err = "could not start " + argv[0];
    return r;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFileBytes(base + ".out");
  r.err = ReadFileBytes(base + ".err");
  ::unlink((base + ".out").c_str());
  ::unlink((base + ".err").c_str());
  return r;
}

namespace {
ServeBackendHook serve_backend_hook = nullptr;
}  // namespace

void SetServeBackendHook(ServeBackendHook hook) { serve_backend_hook = hook; }

pid_t StartServeProcess(std::vector<std::string> argv, std::map<std::string, std::string> env,
                        const std::string& stdout_path, const std::string& stderr_path) {
  if (serve_backend_hook != nullptr) serve_backend_hook(&argv, &env);
  return StartProcess(argv, env, stdout_path, stderr_path);
}

ServeProcess StartServe(const std::string& binary, const std::string& data,
                        const std::vector<std::string>& extra, const std::string& log_prefix,
                        std::map<std::string, std::string> env) {
  std::vector<std::string> argv = {binary, "serve", "--data", data, "--listen", "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::string out = log_prefix + ".out";
  ServeProcess server;
  server.pid = StartServeProcess(argv, std::move(env), out, log_prefix + ".err");
  if (server.pid <= 0) return server;
  for (int i = 0; i < 300 && server.addr.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string text = ReadFileBytes(out);
    size_t l = text.find("listening on ");
    if (l == std::string::npos || text.find('\n', l) == std::string::npos) continue;
    if (size_t t = text.find("admin token: "); t != std::string::npos) {
      server.token = text.substr(t + 13, text.find('\n', t) - t - 13);
    }
    std::string url = text.substr(l + 13, text.find('\n', l) - l - 13);
    server.addr = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
  }
  return server;
}

void StopServe(ServeProcess* server) {
  if (server->pid <= 0) return;
  ::kill(server->pid, SIGTERM);
  int status = 0;
  ::waitpid(server->pid, &status, 0);
  server->pid = -1;
}

}  // namespace blz::testing
