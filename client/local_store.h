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
//   <dir>/unpacked/sha256/<2 hex>/<64 hex>/     a version kept as its model files instead of
//                                               its archive: "prefix" (the archive's first
//                                               data_start bytes, as stored), "size" (its
//                                               total size, decimal) and "0", "1", ... hard
//                                               links to the files/ entries of its files, in
//                                               header order (they keep the entries alive)
//
// index.json: {"registry":"127.0.0.1:5000","repository":"org/model","versions":[
//   {"digest":"sha256:...","size":N,"tags":["v1"],"seq":3,"pulled_at":1700000000,
//    "manifest":"sha256:..."}, ...]}
// "seq" grows with every pull that touches a version: the highest is the most recently pulled.
// "manifest" (optional) is the digest of the version's registry manifest, when known: a
// reference by manifest digest is then served from the store without asking the registry.
// A version pushed by this client, or tagged with `blz tag`, is recorded the same way.
//
// A version is held in one of two forms. As its archive (blobs/): what `--archive-only`,
// `-o`, filtered pulls, pushes and `blz tag` keep. Or as its files (unpacked/): what a default
// `blz pull` of a whole model keeps, since its snapshot needs the files anyway and an archive
// beside them would be a second copy of every byte (an archive's pieces are 64-byte aligned, a
// file's are not, so no hard link or reflink can share them; issue 28). The archive is the
// files plus the stored prefix, byte for byte (formats::PackLayout::FromArchivePrefix): a patch
// pull and a patch push read it from the files in place (patcher/patch_sink.h, patcher/patch.h);
// whatever else needs the archive as one file gets it rebuilt and verified into blobs/ on first
// use (ArchivePath).
// Both forms are verified before they enter the store: a blob by its SHA-256, a kept version by
// the archive's SHA-256 over the bytes its files were written from and each file's SHA-256.
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

#include "core/bytes.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "formats/pack_layout.h"

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
  // The version kept as its files (see above).
  std::string UnpackedPath(std::string_view digest) const;
  bool HasUnpacked(std::string_view digest) const;
  // Held in either form.
  bool Holds(std::string_view digest) const { return HasBlob(digest) || HasUnpacked(digest); }
  // Re-hashes a held version: its blob, else the archive its files rebuild. kNotFound when
  // neither is held, kDigestMismatch when its bytes changed (a kept file written to in place).
  Status VerifyBlob(std::string_view digest) const;
  // Removes a held version's blob and its kept files (e.g. one found corrupt; the files/ entries
  // its snapshots link stay until they are unlinked). Missing is not an error.
  Status RemoveBlob(std::string_view digest);

  // Keeps archive `digest` as its files: `prefix` is its first data_start bytes (as stored),
  // `size` its total size; every file the header names must be in files/ already
  // (client/snapshot.h: a snapshot of the whole model was just made from bytes checked against
  // the archive's SHA-256 and each file's). The caller proved `prefix` part of the archive with
  // that SHA-256. Nothing happens when the version is held as files already. Errors:
  // ParseArchivePrefix's (kCorruption), kNotFound naming a files/ entry that is missing,
  // kIOError.
  Status KeepAsFiles(std::string_view digest, ByteSpan prefix, uint64_t size);
  // The version kept as files, seen as its archive (PackLayout::FromArchivePrefix over the
  // kept links). kNotFound when it is not kept so; its errors otherwise.
  Result<formats::PackLayout> OpenUnpacked(std::string_view digest) const;
  // The header of a held version, read from its blob's prefix or the kept prefix (no data).
  Result<formats::ArchiveHeader> HeldHeader(std::string_view digest) const;
  // A path to the archive of a held version as one file: its blob; for a version kept only as
  // files, the archive is first rebuilt from them into blobs/ (a write and a SHA-256 pass of
  // the whole archive, verified against `digest` before it is published; the kept form stays).
  // kNotFound when not held; kDigestMismatch when the files no longer give `digest`.
  Result<std::string> ArchivePath(std::string_view digest);

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

  // Versions held for registry+repository (in either form), most recently pulled first.
  Result<std::vector<HeldVersion>> Versions(std::string_view registry,
                                            std::string_view repository) const;
  // Records (or refreshes) `digest` as held for registry+repository: it becomes the most
  // recently pulled; `tag`, when not empty, is added to its tags (and removed from any other
  // version's tags); `manifest_digest`, when not empty, is recorded as its manifest's.
  Status RecordVersion(std::string_view registry, std::string_view repository,
                       std::string_view digest, uint64_t size, std::string_view tag,
                       std::string_view manifest_digest = {});

  // Every version held, whatever registry alias or repository it came from: one entry per
  // (registry, repository, digest) held, then one per held blob or kept version that no index
  // names (registry and repository ""; pulled_at = the blob's modification time). Most
  // recently pulled first. Indexes that cannot be read are skipped (their blobs still appear).
  Result<std::vector<HeldVersion>> AllVersions() const;
  // Removes `digest` from every index and deletes its blob or kept files, its snapshot
  // directories and the files/ entries nothing else links (client/snapshot.h). Returns the
  // bytes freed.
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
