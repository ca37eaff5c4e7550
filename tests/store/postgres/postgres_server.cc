#include "tests/store/postgres/postgres_server.h"

#include <stdlib.h>

#include <chrono>
#include <filesystem>

#include "tests/e2e/subprocess.h"

namespace blz::testing {
namespace {

// By value, not a function-local static: servers are stopped from static destructors.
std::string Script() {
  return std::string(BLZ_SOURCE_DIR) + "/tests/store/postgres/postgres_server.sh";
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<std::unique_ptr<PostgresServer>> PostgresServer::Start() {
  // The directory's parent must be traversable by the server's user (nobody), so the server
  // gets a directory of its own directly under the temp dir, not one inside a test's TempDir.
  std::string tmpl = (std::filesystem::temp_directory_path() / "blz-pg-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return IOError("mkdtemp " + tmpl + " failed");
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->dir_ = tmpl;
  // RunProcess's capture files go to the parent temp dir, not into the server's directory.
  const std::string scratch = std::filesystem::temp_directory_path().string();
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = RunProcess({"/bin/bash", Script(), "start", server->dir_}, {}, scratch, 120);
  server->start_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.exit_code == 77) {
    server->Stop();
    return Unsupported(Trim(r.err));
  }
  if (r.exit_code != 0) {
    server->Stop();
    return Unavailable("postgres_server.sh start failed (exit " + std::to_string(r.exit_code) +
                       "): " + r.err);
  }
  server->url_ = Trim(r.out);
  const size_t colon = server->url_.rfind(':');
  server->port_ = colon == std::string::npos ? 0 : std::atoi(server->url_.c_str() + colon + 1);
  return server;
}

PostgresServer::~PostgresServer() { Stop(); }

Result<std::string> PostgresServer::CreateDatabase(const std::string& name) {
  if (dir_.empty()) return Internal("CreateDatabase on a stopped server");
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return InvalidArgument("database name must be [a-z0-9_]+: " + name);
    }
  }
  ProcessResult r = RunProcess({"/bin/bash", Script(), "createdb", dir_, name}, {},
                               std::filesystem::temp_directory_path().string(), 60);
  if (r.exit_code != 0) return Unavailable("createdb " + name + ": " + r.err);
  return Trim(r.out);
}

Status PostgresServer::Halt() {
  if (dir_.empty()) return Internal("Halt on a stopped server");
  ProcessResult r = RunProcess({"/bin/bash", Script(), "halt", dir_}, {},
                               std::filesystem::temp_directory_path().string(), 60);
  if (r.exit_code != 0) return Unavailable("postgres_server.sh halt: " + r.err);
  return Status::Ok();
}

Status PostgresServer::Resume() {
  if (dir_.empty()) return Internal("Resume on a stopped server");
  ProcessResult r = RunProcess({"/bin/bash", Script(), "resume", dir_}, {},
                               std::filesystem::temp_directory_path().string(), 60);
  if (r.exit_code != 0) return Unavailable("postgres_server.sh resume: " + r.err);
  return Status::Ok();
}

void PostgresServer::Stop() {
  if (dir_.empty()) return;
  (void)RunProcess({"/bin/bash", Script(), "stop", dir_}, {},
                   std::filesystem::temp_directory_path().string(), 60);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  dir_.clear();
}

}  // namespace blz::testing
