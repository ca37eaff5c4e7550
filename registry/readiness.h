// The readiness probe behind GET /readyz and the blz_ready gauge (registry/health_handlers.h):
// the metadata database answers `SELECT 1` (store::MetadataDb::Ping) and the blob store is
// reachable (store::BlobStore::CheckReachable: s3 lists the prefix; file is always reachable).
// A result is reused for `ttl` (1 s by default), so a load balancer polling every replica
// often does not turn into as many database queries; concurrent callers past the ttl wait for
// one probe and share its result.
//
// A probe whose failure differs from the last one logged (or the first failure after a success)
// writes one line to `log` (when set), with the full detail (database URL without password,
// bucket, endpoint); the answer to unauthenticated callers of /readyz names only the part.
//
// Thread safety: Check() may be called from any thread.
#ifndef BLZ_REGISTRY_READINESS_H_
#define BLZ_REGISTRY_READINESS_H_

#include <chrono>
#include <functional>
#include <mutex>
#include <string>

#include "core/status.h"

namespace blz::registry {

struct Readiness {
  bool ready = false;
  Status metadata;  // MetadataDb::Ping's result
  Status storage;   // BlobStore::CheckReachable's result
};

class ReadinessProbe {
 public:
  ReadinessProbe(std::function<Status()> ping_metadata, std::function<Status()> check_storage,
                 std::chrono::milliseconds ttl = std::chrono::milliseconds(1000),
                 std::function<void(const std::string&)> log = {})
      : ping_metadata_(std::move(ping_metadata)),
        check_storage_(std::move(check_storage)),
        ttl_(ttl),
        log_(std::move(log)) {}

  // The last result when younger than the ttl, else a fresh probe (both parts, every time).
  Readiness Check();

 private:
  std::function<Status()> ping_metadata_;
  std::function<Status()> check_storage_;
  std::chrono::milliseconds ttl_;
  std::function<void(const std::string&)> log_;
  std::mutex mu_;
  std::string logged_;                             // the last failure logged; guarded by mu_
  bool probed_ = false;                            // guarded by mu_
  std::chrono::steady_clock::time_point when_{};  // guarded by mu_
  Readiness last_;                                 // guarded by mu_
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_READINESS_H_
