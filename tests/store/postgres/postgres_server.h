// A real, throwaway PostgreSQL server for tests (issue 25): tests/store/postgres/postgres_server.sh
// runs initdb + pg_ctl in a fresh directory under the system temp dir, on a free loopback port,
// with trust authentication (superuser "blz", no password) and fsync off, and creates the
// database "blz". As root (CI), the server runs as `nobody` (PostgreSQL refuses root) and the
// directory is handed to that user. Stopping (or destroying the object) stops the server with
// `pg_ctl -m immediate` and deletes the directory.
//
// Start takes about 1.3 s (initdb is most of it), so a test suite starts one server in
// SetUpTestSuite and gives each test a database of its own (CreateDatabase).
//
// Link tests/store/postgres/postgres_server.cc and tests/e2e/subprocess.cc into the test.
#ifndef BLZ_TESTS_STORE_POSTGRES_POSTGRES_SERVER_H_
#define BLZ_TESTS_STORE_POSTGRES_POSTGRES_SERVER_H_

#include <memory>
#include <string>

#include "core/status.h"

namespace blz::testing {

class PostgresServer {
 public:
  // Starts a server. Errors: kUnsupported when the PostgreSQL binaries (initdb, pg_ctl) are
  // not installed (tests GTEST_SKIP on it), kUnavailable when the server did not start (the
  // message holds initdb's / the server's log).
  static Result<std::unique_ptr<PostgresServer>> Start();

  ~PostgresServer();  // Stop()
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // "postgresql://blz@127.0.0.1:PORT/blz".
  const std::string& url() const { return url_; }
  int port() const { return port_; }
  // The server's directory (data/, server.log, the unix socket).
  const std::string& dir() const { return dir_; }
  // Wall time Start() took, in seconds (informational: never assert on it).
  double start_seconds() const { return start_seconds_; }

  // Creates an empty database `name` ([a-z0-9_]+) and returns its URL.
  Result<std::string> CreateDatabase(const std::string& name);

  // A fault for tests: stops the server (pg_ctl -m fast), keeping its directory and port.
  Status Halt();
  // Starts a halted server again on the same port and data directory.
  Status Resume();

  // Stops the server and deletes its directory. Idempotent.
  void Stop();

 private:
  PostgresServer() = default;

  std::string dir_;
  std::string url_;
  int port_ = 0;
  double start_seconds_ = 0;
};

}  // namespace blz::testing

#endif  // BLZ_TESTS_STORE_POSTGRES_POSTGRES_SERVER_H_
