// The client's local content store: model archives by digest, and per registry+repository the
// versions the client holds (so a pull can ask for a patch from one of them).
//
// Location: the --cache flag, else $BLZ_CACHE_DIR, else $XDG_CACHE_HOME/blz, else
// $HOME/.cache/blz. Layout:
//
//   <dir>/blobs/sha256/<first 2 hex>/<64 hex>   archives, named by the SHA-256 of their bytes
//   <dir>/repos/<host:port>/<name>/index.json   versions held for that registry+repository
//   <dir>/tmp/                                  staging area of running operations
//   <dir>/packed/, <dir>/packed.lock            archives kept by push (client/pack_cache.h)
//   <dir>/lock                                  flock: shared while a store is open
//   <dir>/usage.json                            decayed use counts and how each version
//                                               arrived (client/usage.h; cache prune --budget)
//   <dir>/files/, <dir>/snapshots/              unpacked model files and the loadable
//                                               directories of `blz pull` (client/snapshot.h)
//
// index.json: {"registry":"127.0.0.1:5000","repository":"org/model","versions":[
//   {"digest":"sha256:...","size":N,"tags":["v1"],"seq":3,"pulled_at":1700000000,
//    "manifest":"sha256:..."}, ...]}
// "seq" grows with every pull that touches a version: the highest is the most recently pulled.
// "manifest" (optional) is the digest of the version's registry manifest, when known: a
// reference by manifest digest is then served from the store without asking the registry.
// A version pushed by this client, or tagged with `blz tag`, is recorded the same way.
//
// The archive of every version pulled is kept whole even when its files are also unpacked
// (files/): it is the base of later patch pulls and patch pushes (memory-mapped by the codec).
// The two cannot share bytes (an archive's pieces are 64-byte aligned, a file's are not, so no
// hard link or reflink fits); a patch pull writes both from the same decoded bytes instead of
// reading the archive back (client/pull_stream.h, issue 28).
// Everything is written to a temporary file and renamed into place, so a reader never sees a
// half-written blob or index. Downloads and patch results are staged under tmp/ and published
// with PublishBlob(). Open() removes what an interrupted run left in tmp/ (and stray "*.tmp-*"
// files) when no other blz process has the store open (checked with flock).
#ifndef BLZ_CLIENT_LOCAL_STORE_H_
#define BLZ_CLIENT_LOCAL_STORE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace blz::client {

inline constexpr uint64_t kMaxIndexBytes = 16ull << 20;

struct HeldVersion {
  std::string digest;  // "sha256:<hex>" of the archive
  uint64_t size = 0;
  std::vector<std::string> tags;
  uint64_t seq = 0;        // higher = pulled more recently
  int64_t pulled_at = 0;   // unix seconds
  std::string registry;    // "host:port" it was pulled from ("" for a blob no index names)
  std::string repository;  // repository it was pulled from ("" likewise)
  std::string manifest_digest;  // its manifest's digest when recorded ("" = unknown)
};

class LocalStore {
 public:
  // The store directory: `flag_dir` if not empty, else the environment (see above).
  // kNotFound when nothing is set.
  static Result<std::string> ResolveDir(const std::string& flag_dir);

  // Opens the store at `dir`, creating its layout. Takes a shared lock held until the object
  // dies; removes stale temp files first when no other process holds the store.
  static Result<LocalStore> Open(const std::string& dir);

  LocalStore() = default;
  ~LocalStore();
  LocalStore(LocalStore&& other) noexcept;
  LocalStore& operator=(LocalStore&& other) noexcept;
  LocalStore(const LocalStore&) = delete;
  LocalStore& operator=(const LocalStore&) = delete;

  const std::string& dir() const { return dir_; }
  // Stale temp entries removed by Open().
  uint64_t stale_removed() const { return stale_removed_; }

  // REQUIRES: digest is "sha256:<64 lower hex>" (check with ParseDigest first).
  std::string BlobPath(std::string_view digest) const;
  bool HasBlob(std::string_view digest) const;
  // Re-hashes a held blob. kNotFound when absent, kDigestMismatch when its bytes changed.
  Status VerifyBlob(std::string_view digest) const;
  // Removes a held blob (e.g. one found corrupt). Missing is not an error.
  Status RemoveBlob(std::string_view digest);

  // A fresh, empty directory under tmp/ for staging one operation's files (removed by the
  // caller when done, or by a later Open() after a crash).
  Result<std::string> MakeStagingDir() const;

  // Moves `staged_path` (a complete file under tmp/ whose SHA-256 the caller has verified
  // equals `digest`, and whose data pull verified completely, formats::BlzArchive::Verify:
  // nothing unverified enters the store) to BlobPath(digest). If the blob is already held the staged file is
  // simply removed. Returns the blob path.
  Result<std::string> PublishBlob(const std::string& staged_path, std::string_view digest);

  // Puts a copy of `path` (an archive the caller has verified completely, whose SHA-256 is
  // `digest`: one `blz push` packed or verified) into the store: hard-linked when `path` is on
  // the store's file system and `may_link` (the file must then never change in place), else
  // copied through tmp/. Nothing happens when the blob is held already. Returns the blob path.
  Result<std::string> AdoptBlob(const std::string& path, std::string_view digest, bool may_link);

  // Versions held for registry+repository whose blob is present, most recently pulled first.
  Result<std::vector<HeldVersion>> Versions(std::string_view registry,
                                            std::string_view repository) const;
  // Records (or refreshes) `digest` as held for registry+repository: it becomes the most
  // recently pulled; `tag`, when not empty, is added to its tags (and removed from any other
  // version's tags); `manifest_digest`, when not empty, is recorded as its manifest's.
  Status RecordVersion(std::string_view registry, std::string_view repository,
                       std::string_view digest, uint64_t size, std::string_view tag,
                       std::string_view manifest_digest = {});

  // Every version held, whatever registry alias or repository it came from: one entry per
  // (registry, repository, digest) whose blob is present, then one per held blob that no index
  // names (registry and repository ""; pulled_at = the blob's modification time). Most
  // recently pulled first. Indexes that cannot be read are skipped (their blobs still appear).
  Result<std::vector<HeldVersion>> AllVersions() const;
  // Removes `digest` from every index and deletes its blob, its snapshot directories and the
  // unpacked files no other snapshot uses (client/snapshot.h). Returns the bytes freed.
  Result<uint64_t> ForgetVersion(std::string_view digest);

 private:
  std::string IndexPath(std::string_view registry, std::string_view repository) const;
  void Release();

  std::string dir_;
  int lock_fd_ = -1;
  uint64_t stale_removed_ = 0;
};

}  // namespace blz::client

#endif  // BLZ_CLIENT_LOCAL_STORE_H_
