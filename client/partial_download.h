// Partial downloads kept in the local store, so that an interrupted pull (Ctrl-C, kill -9, a
// dropped connection, a registry restart) continues where it stopped.
//
// Layout (outside tmp/, so LocalStore::Open's stale cleanup leaves it alone):
//
//   <store>/partial/sha256/<key>        the bytes, preallocated to the full size once known
//   <store>/partial/sha256/<key>.json   sidecar: what is known about them (below)
//   <store>/partial/sha256/<hex>.lock   flock held by the pull fetching archive <hex>
//
// <key> is the 64-hex SHA-256 naming the download: for a blob its digest; for a patch, whose
// own digest is not known before the registry computes it, SHA-256("blz-patch\n" FROM "\n" TO)
// (PatchKey), and for a full patch SHA-256("blz-full-patch\n" TO) (FullPatchKey).
//
// Sidecar: {"kind":"blob"|"patch"|"full-patch", "what":"...", "for":"sha256:<archive>",
//   "digest":"sha256:..." (expected digest of the bytes; for patches the registry's
//   Docker-Content-Digest, "" when not sent), "size":N (0 = not known yet),
//   "parts":[{"begin":B,"end":E,"done":D}, ...]}
// Bytes [begin, begin+done) of each part have been written. The sidecar is rewritten (write to
// "<key>.json.new", rename) at most every few MiB or second of progress and at the end of every
// attempt, without fsync: after a machine crash it may claim bytes that never reached the disk,
// which the final SHA-256 over every byte catches (the partial is then deleted and downloaded
// again). A download is published (renamed to its destination) only after that check.
#ifndef BLZ_CLIENT_PARTIAL_DOWNLOAD_H_
#define BLZ_CLIENT_PARTIAL_DOWNLOAD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace blz::client {

struct PartState {
  uint64_t begin = 0;
  uint64_t end = 0;   // exclusive
  uint64_t done = 0;  // bytes written from `begin`
  bool complete() const { return begin + done >= end; }
};

struct PartialState {
  std::string kind;        // "blob", "patch", "full-patch"
  std::string what;        // for messages, e.g. "blob sha256:..."
  std::string for_digest;  // the archive this download serves
  std::string digest;      // expected digest of the bytes; "" = not known (yet)
  uint64_t size = 0;       // 0 = not known yet
  std::vector<PartState> parts;

  uint64_t Done() const;
};

// Keys (64 lower hex) of patch downloads.
std::string PatchKey(std::string_view from_digest, std::string_view to_digest);
std::string FullPatchKey(std::string_view to_digest);

class PartialStore {
 public:
  explicit PartialStore(std::string store_dir);

  // Creates <store>/partial/sha256.
  Status Init() const;
  std::string DataPath(std::string_view key) const;
  std::string SidecarPath(std::string_view key) const;

  // The sidecar of `key`; nullopt when there is none or it is unreadable (a damaged sidecar is
  // removed with its data: the download starts again).
  std::optional<PartialState> Load(std::string_view key) const;
  // Writes the sidecar (rename into place, no fsync: see the file comment).
  Status Save(std::string_view key, const PartialState& state) const;
  // Removes the data and the sidecar of `key`. Missing is not an error.
  void Remove(std::string_view key) const;
  // Removes every partial download whose "for" is `archive_digest` (after a pull completed by
  // another route, its other partials are of no use). Returns how many were removed.
  int RemoveFor(std::string_view archive_digest) const;
  // `blz cache prune --older-than`: removes the partial downloads whose sidecar was last written
  // more than `max_age` seconds before `now`, unless a pull holds their archive's FetchLock
  // (it is resuming them). Returns (downloads removed, bytes freed).
  std::pair<int, uint64_t> RemoveIdle(int64_t max_age, int64_t now) const;

 private:
  std::string dir_;  // <store>/partial/sha256
};

// An exclusive flock on <store>/partial/sha256/<hex of archive_digest>.lock: one fetch of an
// archive per store at a time. A second pull of the same archive blocks in Acquire until the
// first ends, then finds the archive published (or continues its partial download).
// The lock file lives only while a fetch holds it: the holder unlinks it (still locked) when
// the lock is released, and Acquire, once it holds a lock, checks that its file is still the
// one at the path (same inode) and otherwise starts again on the new file, so that two pulls
// never both hold "the" lock. A process killed while holding it leaves a 0-byte file that the
// next fetch of that archive reuses and removes.
class FetchLock {
 public:
  // *waited is set when another process held the lock.
  static Result<FetchLock> Acquire(const std::string& store_dir, std::string_view archive_digest,
                                   bool* waited);
  FetchLock() = default;
  ~FetchLock();
  FetchLock(FetchLock&& other) noexcept;
  FetchLock& operator=(FetchLock&& other) noexcept;
  FetchLock(const FetchLock&) = delete;
  FetchLock& operator=(const FetchLock&) = delete;

  // The lock file's path ("" when not held).
  const std::string& path() const { return path_; }

 private:
  void Release();

  int fd_ = -1;
  std::string path_;
};

}  // namespace blz::client

#endif  // BLZ_CLIENT_PARTIAL_DOWNLOAD_H_
