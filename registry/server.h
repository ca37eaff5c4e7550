// The registry HTTP server: `blz serve`.
//
// RunServer() is the CLI's entry point. Server is the embeddable part (used by RunServer and by
// tests): a listener on one address, N I/O threads running Beast sessions
// (registry/http_session.h), and two pools of N handler threads running Registry::Handle, one
// for cheap requests and one, bounded, for slow ones (registry/handler_pools.h).
#ifndef BLZ_REGISTRY_SERVER_H_
#define BLZ_REGISTRY_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "registry/registry.h"

namespace blz::registry {

struct ServerOptions {
  std::string data_dir = "blz-data";
  std::string listen = "127.0.0.1:5000";
  int threads = 0;  // 0 = number of cores
  bool private_mode = false;
  // Storage (docs/registry-api.md, "Storage"): the soft bound on archives rebuilt into
  // <data>/cache, and whether raw archive blobs are kept next to their full patches.
  uint64_t cache_bytes = 8ull << 30;
  bool keep_raw_archives = false;
  // Before serving, re-hash every stored blob and cached archive (ScrubStorage in
  // registry/archive_storage.h): damaged blobs are moved to <data>/quarantine/; a summary line
  // goes to stderr.
  bool verify_storage = false;
  // How clients reach the registry (RegistryOptions::public_url): the realm of auth challenges
  // is this + "/v2/_blz/token". "" = "http://" + each request's Host header.
  std::string public_url;
};

// Opens/creates the data dir and DB, applies migrations, creates the admin token on first start
// (prints "admin token: <token>" on stdout once, stores only its SHA-256), binds (port 0 =
// ephemeral), prints "listening on http://<addr>:<port>" on stdout (flushed), serves until
// SIGINT/SIGTERM, then returns.
// Order in practice: open, install the SIGINT/SIGTERM handlers, bind and start serving, create
// and print the admin token (so a failed bind never consumes the one-time display), print the
// "listening on" line. Both lines are flushed; the token line (when any) comes first.
// Errors: kInvalidArgument (bad listen address), kIOError (cannot bind, data dir), those of
// Registry::Open (kUnsupported for a DB newer than the binary).
Status RunServer(const ServerOptions& options);

class Server {
 public:
  // Binds `listen` ("<host>:<port>", IPv6 as "[::1]:<port>"; port 0 = ephemeral) and starts
  // serving `registry` (which must outlive the Server) on `threads` I/O threads and as many
  // light and as many heavy handler threads (0 = number of cores).
  // Errors: kInvalidArgument (unparsable address), kIOError (bind/listen failed).
  static Result<std::unique_ptr<Server>> Start(Registry* registry, const std::string& listen,
                                               int threads);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound address and port (the real port when 0 was asked for).
  const std::string& host() const;
  uint16_t port() const;
  // "http://127.0.0.1:5000" (IPv6 hosts in brackets).
  std::string url() const;

  // Stops accepting, lets running handlers finish, closes connections and joins all threads.
  // Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_SERVER_H_
