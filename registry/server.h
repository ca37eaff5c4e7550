// The registry HTTP server: `blz serve`.
//
// RunServer() is the CLI's entry point. Server is the embeddable part (used by RunServer and by
// tests): a listener on one address, N I/O threads running Beast sessions
// (registry/http_session.h), and two pools of N handler threads running Registry::Handle, one
// for cheap requests and one, bounded, for slow ones (registry/handler_pools.h).
#ifndef BLZ_REGISTRY_SERVER_H_
#define BLZ_REGISTRY_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/file_lock.h"
#include "core/status.h"
#include "registry/access_log.h"
#include "registry/http_message.h"
#include "registry/registry.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace blz::registry {

class TrustedProxies;  // registry/forwarded.h

// Answers requests outside the registry's API (the web view, web/web_handler.h: `blz serve`
// sets it; registry/ does not depend on web/). Called with each request's head on the I/O
// thread, so it must be cheap and must not block; nullopt = not its request (the registry
// answers it as usual). Must be callable from several threads at once.
using WebHandler = std::function<std::optional<Response>(const RequestHead&)>;

struct ServerOptions {
  std::string data_dir = "blz-data";
  // The metadata database (RegistryOptions::metadata_url): "" = "sqlite:<data>/blz.db";
  // "postgresql://USER@HOST:PORT/DB" to share it between replicas.
  std::string metadata;
  // Apply the metadata database's migrations, print "metadata: <database>: schema version N"
  // on stdout, and return without serving (`blz serve --migrate-only`).
  bool migrate_only = false;
  std::string listen = "127.0.0.1:5000";
  int threads = 0;  // 0 = number of cores
  bool private_mode = false;
  bool no_delete = false;  // DELETE of manifests, tags and blobs answers 405 UNSUPPORTED
  // Garbage collection (registry/garbage_collector.h): every `gc_interval` seconds (0 = only
  // when asked, POST /v2/_blz/gc); unreferenced blobs younger than `gc_grace` seconds stay.
  uint64_t gc_interval = 0;
  uint64_t gc_grace = 3600;
  // Leases on work shared with other replicas (registry/background_jobs.h, LeaseOptions):
  // seconds a lease lasts, so how long a dead replica's computation or collection blocks the
  // others before one takes over. >= 3 (renewed every third of it).
  uint64_t job_lease = 30;
  // Storage (docs/registry-api.md, "Storage"): the soft bound on archives rebuilt into
  // <data>/cache, and whether raw archive blobs are kept next to their full patches.
  uint64_t cache_bytes = 8ull << 30;
  bool keep_raw_archives = false;
  // Before serving, re-hash every stored blob and cached archive (ScrubStorage in
  // registry/archive_storage.h): damaged blobs are moved to <data>/quarantine/; a summary line
  // goes to stderr.
  bool verify_storage = false;
  // Chains (docs/storage.md, "Chains"): versions may be stored as a patch from a parent version,
  // at most this many links deep (0 = no chains; ArchiveStorageOptions::max_chain_depth).
  uint32_t max_chain_depth = 4;
  // The access log's format (registry/access_log.h; docs/operating.md).
  LogFormat log_format = LogFormat::kText;
  // Serve GET /metrics (Prometheus text format; docs/operating.md).
  bool metrics = true;
  // The web view (docs/operating.md, "Web view"): asked first for every request that is not
  // /metrics; unset = none (then / is a 404 like any path outside /v2/).
  WebHandler web;
  // How clients reach the registry (RegistryOptions::public_url): the realm of auth challenges
  // is this + "/v2/_blz/token". "" = "http://" + each request's Host header.
  std::string public_url;
  // HTTPS (TLS 1.2 or newer): a PEM certificate chain and its PEM private key; both empty =
  // plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // Reverse proxies whose X-Forwarded-For/-Proto/-Host are honoured (IP addresses or CIDR
  // blocks; registry/forwarded.h). Empty: those headers are ignored.
  std::vector<std::string> trusted_proxies;
  // Quotas and limits (RegistryOptions; docs/registry-api.md, "Quotas and limits").
  uint64_t max_uploads_per_token = kDefaultMaxUploadsPerToken;
  uint64_t max_uploads_per_repository = kDefaultMaxUploadsPerRepository;
  uint64_t upload_idle_timeout = 24 * 3600;  // seconds
  uint64_t delta_cache_bytes = kDefaultDeltaCacheBytes;
  double computations_per_minute = 10;
  uint64_t computation_burst = 30;
  // Blob storage (issue 25; docs/storage.md): the store's URL (RegistryOptions::blob_storage;
  // "" = file: under data_dir), the bound of a remote store's local cache, and --redirect
  // (blob GETs answer 307 to a presigned URL valid kBlobRedirectExpiry when the driver has them).
  std::string storage;
  uint64_t blob_cache_bytes = 8ull << 30;
  bool redirect = false;
};

// How long a presigned URL of `blz serve --redirect` stays valid (the issue caps it at 20 min).
inline constexpr std::chrono::seconds kBlobRedirectExpiry{600};

// The TLS versions and cipher suites offered: Mozilla's "intermediate" server configuration
// (https://ssl-config.mozilla.org, guideline 5.x): TLS 1.2 with only these ECDHE/DHE AEAD suites
// (no RSA key exchange, no CBC, no SHA-1), TLS 1.3 with these (OpenSSL's default) suites; the
// client's order of preference wins.
inline constexpr char kTls12CipherSuites[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305";
inline constexpr char kTls13CipherSuites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

// A TLS server context from a PEM certificate chain file and a PEM private key file (TLS 1.2
// minimum, kTls12CipherSuites / kTls13CipherSuites). Every response over TLS carries
// Strict-Transport-Security (registry/http_session.cc). Errors: kInvalidArgument naming the file and the reason (unreadable, not PEM, key
// does not match the certificate).
Result<std::shared_ptr<boost::asio::ssl::context>> LoadServerTlsContext(
    const std::string& cert_file, const std::string& key_file);

// The lock file `blz serve` holds in its data directory (see LockDataDir).
inline constexpr char kDataDirLockName[] = "blz.lock";

// Creates `data_dir` when missing (mode 0700) and takes the exclusive lock <data_dir>/blz.lock
// (core/file_lock.h) that RunServer holds for the server's lifetime, so that two servers never
// share a data directory. Offline commands that open the Registry without serving do not take it.
// Errors: kUnavailable when another process holds it ("data directory '<dir>' is in use by
// another blz serve: '<dir>/blz.lock' is locked by process <pid>"; exit code 6), kIOError when
// the directory or the lock file cannot be created.
Result<FileLock> LockDataDir(const std::string& data_dir);

// Opens/creates the data dir, locks it (LockDataDir), opens the DB, applies migrations, creates the admin token on first start
// (prints "admin token: <token>" on stdout once, stores only its SHA-256), binds (port 0 =
// ephemeral), prints "listening on http://<addr>:<port>" (https:// with --tls-cert) on stdout
// (flushed), serves until
// SIGINT/SIGTERM, then returns.
// Order in practice: open, install the SIGINT/SIGTERM handlers, bind and start serving, create
// and print the admin token (so a failed bind never consumes the one-time display), print the
// "listening on" line. Both lines are flushed; the token line (when any) comes first.
// Errors: kInvalidArgument (bad listen address, TLS certificate or key, --trusted-proxy entry),
// kIOError (cannot bind, data dir),
// kUnavailable (another server holds the data directory: LockDataDir), those of
// Registry::Open (kUnsupported for a DB newer than the binary).
Status RunServer(const ServerOptions& options);

// What the server adds around the registry's routes, for every connection
// (registry/http_session.h).
struct SessionOptions {
  LogFormat log_format = LogFormat::kText;
  // Where access-log lines go (registry/access_log.h); empty = StderrLogSink().
  AccessLogSink log;
  // Answer GET /metrics (registry/metrics_handlers.h); false: /metrics is a 404 like any path
  // outside /v2/.
  bool metrics = true;
  // Asked first for every request except GET /metrics (when `metrics`); a response it returns
  // is sent as is (the request body, if any, is read and discarded), logged and counted under
  // the route "web". Unset: every request goes to the registry.
  WebHandler web;
  // When set, every connection is TLS (LoadServerTlsContext): the handshake must complete
  // within kIoTimeout; a plain HTTP request gets a plain 400 answer and the connection closes.
  std::shared_ptr<boost::asio::ssl::context> tls;
  // Peers whose X-Forwarded-* headers are honoured (null or empty: none).
  std::shared_ptr<const TrustedProxies> trusted_proxies;
};

class Server {
 public:
  // Binds `listen` ("<host>:<port>", IPv6 as "[::1]:<port>"; port 0 = ephemeral) and starts
  // serving `registry` (which must outlive the Server) on `threads` I/O threads and as many
  // light and as many heavy handler threads (0 = number of cores). `session` sets the access
  // log's format and sink (default: text on stderr).
  // Errors: kInvalidArgument (unparsable address), kIOError (bind/listen failed).
  static Result<std::unique_ptr<Server>> Start(Registry* registry, const std::string& listen,
                                               int threads, SessionOptions session = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound address and port (the real port when 0 was asked for).
  const std::string& host() const;
  uint16_t port() const;
  // "http://127.0.0.1:5000" ("https://..." when serving TLS; IPv6 hosts in brackets).
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
