// RunServer lives apart from Server so that only binaries that call it link the patcher
// (through PatcherPatchFunction and PatcherFullPatchFunctions).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "core/file_lock.h"
#include "core/time_format.h"
#include <boost/asio/ssl.hpp>

#include "registry/forwarded.h"
#include "registry/net.h"
#include "registry/server.h"

namespace blz::registry {
namespace {

// Runs a garbage collection every `interval` (none when it is zero) on its own thread, logging
// one line per run on stderr, until Stop().
class PeriodicGc {
 public:
  PeriodicGc(Registry* registry, std::chrono::seconds interval) : registry_(registry) {
    if (interval.count() > 0) thread_ = std::thread([this, interval] { Loop(interval); });
  }
  ~PeriodicGc() { Stop(); }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop(std::chrono::seconds interval) {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
      lock.unlock();
      Result<GcReport> r = registry_->CollectGarbage(/*dry_run=*/false);
      std::string line =
          r.ok() ? "gc: " + std::to_string(r->blobs_removed) + " blobs removed, " +
                       std::to_string(r->bytes_freed) + " bytes freed, " +
                       std::to_string(r->blobs_marked) + " referenced, " +
                       std::to_string(r->errors.size()) + " errors\n"
                 : "gc: failed: " + r.status().ToString() + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines never interleave
      lock.lock();
    }
  }

  Registry* registry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Result<FileLock> LockDataDir(const std::string& data_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(data_dir, ec);
  fs::create_directories(data_dir, ec);
  // A new data directory is private from the start (store/blob_store.cc would otherwise
  // tighten it and warn).
  if (!ec && !existed) {
    fs::permissions(data_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  if (ec) return IOError("cannot create data directory '" + data_dir + "': " + ec.message());
  Result<FileLock> lock = FileLock::Acquire(data_dir + "/" + kDataDirLockName);
  if (lock.ok()) return lock;
  if (lock.status().code() == Code::kUnavailable) {
    return lock.status().WithContext("data directory '" + data_dir +
                                     "' is in use by another blz serve");
  }
  return lock.status().WithContext("data directory '" + data_dir + "'");
}

static Status MigrateOnly(const ServerOptions& options) {
  std::string url = options.metadata;
  if (url.empty()) {
    // The default SQLite file lives in the data directory: create it (private) when missing.
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool existed = fs::exists(options.data_dir, ec);
    fs::create_directories(options.data_dir, ec);
    if (!ec && !existed) {
      fs::permissions(options.data_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    }
    if (ec) {
      return IOError("cannot create data directory '" + options.data_dir + "': " + ec.message());
    }
    url = options.data_dir + "/" + kMetadataFileName;
  }
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::MetadataDb> db, store::MetadataDb::Open(url));
  BLZ_ASSIGN_OR_RETURN(int64_t version, db->SchemaVersion());
  std::cout << "metadata: " << db->label() << ": schema version " << version << std::endl;
  return Status::Ok();
}

Status RunServer(const ServerOptions& options) {
  if (options.migrate_only) return MigrateOnly(options);
  // Checked before anything else: a bad certificate, key or proxy entry fails the start cleanly.
  std::shared_ptr<net::ssl::context> tls;
  if (!options.tls_cert.empty() || !options.tls_key.empty()) {
    BLZ_ASSIGN_OR_RETURN(tls, LoadServerTlsContext(options.tls_cert, options.tls_key));
  }
  BLZ_ASSIGN_OR_RETURN(TrustedProxies trusted, TrustedProxies::Parse(options.trusted_proxies));
  // Held until we return: before --verify-storage, which moves blobs, and before the registry
  // opens the directory.
  BLZ_ASSIGN_OR_RETURN(FileLock lock, LockDataDir(options.data_dir));
  RegistryOptions ropts;
  ropts.metadata_url = options.metadata;
  ropts.private_mode = options.private_mode;
  ropts.allow_delete = !options.no_delete;
  ropts.gc_grace = std::chrono::seconds(options.gc_grace);
  ropts.job_leases.lease = std::chrono::seconds(options.job_lease);
  ropts.public_url = options.public_url;
  ropts.create_patch = PatcherPatchFunction();
  // Patches between archives stored compressed or chained read them as stored (no rebuild).
  ropts.create_patch_from_readers = PatcherPatchFromReadersFunction();
  // Archives are stored as verified full patches, compressed in the background after a push.
  ropts.full_patch = PatcherFullPatchFunctions();
  ropts.apply_patch = PatcherApplyPatchFunction();  // patch uploads (?blz-patch-from=)
  ropts.create_delta = LossyDeltaFunction();
  ropts.max_uploads_per_token = options.max_uploads_per_token;
  ropts.max_uploads_per_repository = options.max_uploads_per_repository;
  ropts.upload_idle_timeout = std::chrono::seconds(options.upload_idle_timeout);
  ropts.delta_cache_bytes = options.delta_cache_bytes;
  ropts.computations_per_minute = options.computations_per_minute;
  ropts.computation_burst = options.computation_burst;
  ropts.storage.cache_bytes = options.cache_bytes;
  ropts.storage.drop_raw_archives = !options.keep_raw_archives;
  ropts.storage.max_chain_depth = options.max_chain_depth;
  ropts.blob_storage = options.storage;
  ropts.blob_cache_bytes = options.blob_cache_bytes;
  if (options.redirect) ropts.blob_redirect_expiry = kBlobRedirectExpiry;
  ropts.storage.log = [](const std::string& line) {
    // Timestamped like the access log's lines, which it interleaves with.
    std::string l = FormatRfc3339Utc(std::chrono::system_clock::now()) + " " + line + "\n";
    std::fwrite(l.data(), 1, l.size(), stderr);  // one call: lines never interleave
  };
  if (options.verify_storage) {
    // Before the registry opens the directory: nothing is served or compressed meanwhile.
    BLZ_ASSIGN_OR_RETURN(StorageScrubReport scrub,
                         ScrubStorage(options.data_dir, ropts.storage.log, options.storage));
    char mb[32];
    std::snprintf(mb, sizeof(mb), "%.2f MB", double(scrub.blobs.bytes) / 1e6);
    const std::string line =
        "verify-storage: " + std::to_string(scrub.blobs.blobs) + " blobs (" + mb +
        ") re-hashed, " + std::to_string(scrub.blobs.quarantined.size()) + " damaged (moved to " +
        options.data_dir + "/quarantine), " + std::to_string(scrub.blobs.errors.size()) +
        " unreadable; " + std::to_string(scrub.cache_checked) + " cached archives re-hashed, " +
        std::to_string(scrub.cache_removed.size()) + " damaged (deleted)\n";
    std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines never interleave
  }
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Registry> registry,
                       Registry::Open(options.data_dir, std::move(ropts)));
  if (options.verify_storage) {
    // Every chain rebuilt and checked (docs/storage.md, "Chains"), before serving.
    BLZ_ASSIGN_OR_RETURN(ChainScrubReport chains,
                         registry->storage().VerifyChains(registry->options().storage.log));
    const std::string line = "verify-storage: " + std::to_string(chains.links) +
                             " chain links, " + std::to_string(chains.verified) +
                             " rebuilt exactly, " + std::to_string(chains.broken.size()) +
                             " broken\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  // Install the signal handlers before announcing the address, so a supervisor that signals us
  // as soon as it reads "listening on" is handled gracefully.
  net::io_context signals_ioc(1);
  net::signal_set signals(signals_ioc, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const beast::error_code& ec, int signo) {
    if (!ec) received = signo;
  });

  SessionOptions session;
  session.log_format = options.log_format;
  session.log = StderrLogSink();
  session.metrics = options.metrics;
  session.web = options.web;
  session.tls = std::move(tls);
  session.trusted_proxies = std::make_shared<const TrustedProxies>(std::move(trusted));
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Server> server,
                       Server::Start(registry.get(), options.listen, options.threads,
                                     std::move(session)));
  // Created only once binding succeeded, so a failed start never consumes the one-time display.
  BLZ_ASSIGN_OR_RETURN(std::optional<std::string> token, registry->EnsureAdminToken());
  if (token.has_value()) {
    std::cout << "admin token: " << *token << std::endl;  // shown once; only its hash is kept
  }
  std::cout << "listening on " << server->url() << std::endl;

  PeriodicGc gc(registry.get(), std::chrono::seconds(options.gc_interval));
  signals_ioc.run();  // returns once a signal arrived
  std::fprintf(stderr, "signal %d: shutting down\n", received);
  gc.Stop();
  server->Stop();
  return Status::Ok();
}

}  // namespace blz::registry
