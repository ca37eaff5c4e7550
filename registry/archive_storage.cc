// Archives stored as verified full patches. Interface and design: registry/archive_storage.h;
// documented in docs/registry-api.md ("Storage").
#include "registry/archive_storage.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "store/open_blob_store.h"

namespace blz::registry {
namespace internal {

Status ScrubPaths(const Status& s,
                  const std::vector<std::pair<std::string, std::string>>& names) {
  if (s.ok()) return s;
  std::string m = s.message();
  for (const auto& [path, name] : names) {
    if (path.empty()) continue;
    for (size_t pos = m.find(path); pos != std::string::npos;
         pos = m.find(path, pos + name.size())) {
      m.replace(pos, path.size(), name);
    }
  }
  return Status(s.code(), std::move(m));
}

}  // namespace internal

using internal::ScrubPaths;

namespace {

// A full patch is recorded in the `patches` table as the patch from "" (no base) to the
// archive. Such a row is written only once the patch verified.
constexpr std::string_view kNoBase = "";

std::string ParentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Bound on the remembered "found intact" file versions (a cleared map only costs re-hashing).
constexpr size_t kMaxIntactEntries = 100000;

std::string Megabytes(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", double(n) / 1e6);
  return buf;
}

}  // namespace

ArchiveStorage::ArchiveStorage(store::BlobStore* blobs, store::MetadataDb* db,
                               std::string cache_dir, FullPatchFunctions functions,
                               ArchiveStorageOptions options)
    : blobs_(blobs),
      db_(db),
      cache_dir_(std::move(cache_dir)),
      functions_(std::move(functions)),
      options_(std::move(options)),
      shared_jobs_(std::make_unique<SharedJobs>(db_, options_.job_leases)) {}

Result<std::unique_ptr<ArchiveStorage>> ArchiveStorage::Open(store::BlobStore* blobs,
                                                             store::MetadataDb* db,
                                                             const std::string& data_dir,
                                                             FullPatchFunctions functions,
                                                             ArchiveStorageOptions options) {
  const std::string cache_dir = data_dir + "/cache/sha256";
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) return IOError(cache_dir + ": cannot create: " + ec.message());
  std::unique_ptr<ArchiveStorage> s(new ArchiveStorage(blobs, db, cache_dir, std::move(functions),
                                                       std::move(options)));
  // Index the cached archives (each was verified before it was renamed into place); anything
  // else is a temporary file of an interrupted rebuild.
  const Clock::time_point long_ago = Clock::now() - s->options_.grace;
  std::vector<std::string> leftovers;
  for (std::filesystem::directory_iterator it(cache_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code fec;
    if (IsLowerHex(name, 64) && it->is_regular_file(fec)) {
      uint64_t size = it->file_size(fec);
      if (!fec) {
        s->cache_[MakeDigest(name)] = CacheEntry{size, long_ago};
        s->cache_total_ += size;
        continue;
      }
    }
    leftovers.push_back(it->path().string());
  }
  if (ec) return IOError(cache_dir + ": cannot list: " + ec.message());
  for (const std::string& path : leftovers) RemoveAll(path);
  {
    std::lock_guard<std::mutex> lock(s->mu_);
    s->EvictLocked(Clock::now());
  }
  if (s->options_.background && s->enabled()) {
    try {
      s->thread_ = std::thread([p = s.get()] { p->Run(); });
    } catch (const std::system_error& e) {
      return Internal(std::string("cannot start the storage thread: ") + e.what());
    }
  }
  return s;
}

ArchiveStorage::~ArchiveStorage() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string ArchiveStorage::CachePath(const std::string& digest) const {
  return cache_dir_ + "/" + digest.substr(7);
}

void ArchiveStorage::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Result<store::BlobInfo> ArchiveStorage::FindFullPatch(const std::string& digest) {
  BLZ_ASSIGN_OR_RETURN(store::PatchRecord record, db_->FindPatch(kNoBase, digest));
  return blobs_->LocalFile(record.patch_digest);  // kNotFound when the blob went missing
}

Result<store::BlobInfo> ArchiveStorage::Stat(std::string_view digest) {
  Result<store::BlobInfo> raw = blobs_->Stat(digest);
  if (raw.ok() || raw.status().code() != Code::kNotFound || !enabled()) return raw;
  const std::string d(digest);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(d);
    if (it != sizes_.end()) return store::BlobInfo{d, it->second, ""};
  }
  Result<store::BlobInfo> patch = FindFullPatch(d);
  if (!patch.ok() && patch.status().code() == Code::kNotFound) {
    // Stored as a chain link (registry/archive_chains.cc): its patch's header has the size.
    Result<store::ChainLink> link = db_->FindChainLink(d);
    if (!link.ok()) return link.status().code() == Code::kNotFound ? raw.status() : link.status();
    patch = blobs_->LocalFile(link->patch_digest);
  }
  if (!patch.ok()) return patch.status().code() == Code::kNotFound ? raw.status() : patch.status();
  Result<uint64_t> size = functions_.archive_size(patch->path);
  if (!size.ok()) {
    return ScrubPaths(size.status(), {{patch->path, "full patch " + patch->digest}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  sizes_[d] = *size;
  return store::BlobInfo{d, *size, ""};
}

Status ArchiveStorage::MarkServed(std::string_view digest) {
  if (!ParseDigest(digest).ok()) return Status::Ok();  // not an archive (sha512, malformed)
  return HoldRaw(std::string(digest));
}

namespace {
int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Status ArchiveStorage::HoldRaw(const std::string& d) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    dropped_cv_.wait(lock, [&] { return dropping_.count(d) == 0; });
    // The database keeps a mark for 2 * grace: one made less than `grace` ago still covers a
    // whole grace period from now.
    auto it = served_.find(d);
    if (it != served_.end() && Clock::now() - it->second < options_.grace) return Status::Ok();
  }
  const int64_t grace_ms = int64_t(options_.grace.count());
  const Clock::time_point give_up =
      Clock::now() + options_.job_leases.lease + 2 * options_.grace + std::chrono::seconds(1);
  while (true) {
    const Clock::time_point at = Clock::now();
    const int64_t now = UnixMillis();
    Result<bool> marked = db_->MarkRawArchiveServed(d, now, now + 2 * grace_ms);
    if (!marked.ok()) return marked.status().WithContext("recording that " + d + " is read");
    if (*marked) {
      std::lock_guard<std::mutex> lock(mu_);
      served_[d] = at;
      if (served_.size() > 4096) {
        for (auto it = served_.begin(); it != served_.end();) {
          it = at - it->second > options_.grace ? served_.erase(it) : std::next(it);
        }
      }
      return Status::Ok();
    }
    // Another replica is deleting the raw blob: once it is done, the lookup after this finds
    // the blob gone and serves it from its full patch.
    if (Clock::now() > give_up) {
      return Unavailable("raw archive " + d + " is being replaced by its full patch on another "
                         "replica; try again");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<store::BlobInfo> ArchiveStorage::File(std::string_view digest) {
  // Not an archive (a sha512 blob, or malformed: kInvalidArgument): the store's file as it is.
  if (!ParseDigest(digest).ok()) return blobs_->LocalFile(digest);
  const std::string d(digest);
  // Marked (here and in the database) before the lookup, so a DropRaw of any replica either
  // sees the mark and keeps the blob, or is waited for here until its delete is done, which
  // the lookup below then sees. The lookup itself (a HEAD on S3) runs outside mu_.
  BLZ_RETURN_IF_ERROR(HoldRaw(d));
  Result<store::BlobInfo> raw = blobs_->Stat(d);
  // A remote driver's Stat names no local file: fetch one (outside mu_; the mark above keeps
  // DropRaw away meanwhile).
  if (raw.ok() && raw->path.empty()) raw = blobs_->LocalFile(d);
  if (raw.ok()) {
    BLZ_RETURN_IF_ERROR(CheckStoredBlob(*raw));
    return raw;
  }
  if (raw.status().code() != Code::kNotFound || !enabled()) return raw;

  // A dropped archive: its cached copy, rebuilt once per digest at a time.
  KeyedMutex::Lock lock(&locks_, "cache:" + d);
  const std::string path = CachePath(d);
  // Damaged (or unreadable): a cache entry is only a copy; dropped, and rebuilt below.
  if (std::optional<store::BlobInfo> cached = CachedCopy(d, /*have_lock=*/true)) return *cached;
  raw = blobs_->LocalFile(d);  // pushed again meanwhile?
  if (raw.ok() || raw.status().code() != Code::kNotFound) return raw;
  Result<store::BlobInfo> patch = FindFullPatch(d);
  RemoveAll(path);  // not indexed, so not a verified copy (only a hand-edited cache has one)
  if (!patch.ok() && patch.status().code() == Code::kNotFound && functions_.chains()) {
    // Stored as a chain link: rebuilt through it in one pass.
    Status s = RebuildFromChain(d, path);
    // kAlreadyExists: a streamed GET's verified copy (CacheCopy) was published meanwhile.
    if (!s.ok() && s.code() != Code::kAlreadyExists) {
      if (s.code() == Code::kNotFound && !db_->FindChainLink(d).ok()) return raw.status();
      return ScrubPaths(s, {{path, "cached " + d}});
    }
  } else if (!patch.ok()) {
    return patch.status().code() == Code::kNotFound ? raw.status() : patch.status();
  } else if (Status s = functions_.rebuild(patch->path, d, path);
             !s.ok() && s.code() != Code::kAlreadyExists) {
    // A full patch damaged on disk fails its checks while rebuilding: find out, and quarantine
    // it rather than failing the same way on every request.
    if (blobs_->Verify(patch->digest).code() == Code::kDigestMismatch) {
      return QuarantineDamaged(*patch, "full patch " + patch->digest + " of archive " + d)
          .WithContext("rebuilding archive " + d + " from its full patch");
    }
    return ScrubPaths(s, {{patch->path, "full patch " + patch->digest}, {path, "cached " + d}})
        .WithContext("rebuilding archive " + d + " from its full patch");
  }
  Result<uint64_t> size = FileSizeOf(path);
  if (!size.ok()) return ScrubPaths(size.status(), {{path, "cached " + d}});
  std::lock_guard<std::mutex> g(mu_);
  sizes_[d] = *size;
  ++rebuilds_;
  IndexCachedLocked(d, *size, Clock::now());
  return store::BlobInfo{d, *size, path};
}

void ArchiveStorage::IndexCachedLocked(const std::string& digest, uint64_t size,
                                       Clock::time_point now) {
  auto [it, added] = cache_.try_emplace(digest, CacheEntry{size, now});
  if (added) {
    cache_total_ += size;
  } else {
    it->second.last_used = now;
  }
  EvictLocked(now);
}

std::unique_ptr<ArchiveStorage::CacheCopy> ArchiveStorage::StartCacheCopy(
    const std::string& digest, uint64_t size) {
  if (!ParseDigest(digest).ok() || size > options_.cache_bytes) return nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (cache_.count(digest) > 0 || !copying_.insert(digest).second) return nullptr;
  }
  // "<hex>.tmp-<random>": removed at start if the process dies before Publish.
  Result<AtomicFile> file = AtomicFile::Create(CachePath(digest));
  if (!file.ok()) {
    Log("storage: no cache copy of " + digest + ": " +
        ScrubPaths(file.status(), {{CachePath(digest), "its cache file"}}).ToString());
    std::lock_guard<std::mutex> g(mu_);
    copying_.erase(digest);
    return nullptr;
  }
  return std::unique_ptr<CacheCopy>(new CacheCopy(this, digest, size, std::move(*file)));
}

ArchiveStorage::CacheCopy::~CacheCopy() {
  if (!done_) file_.Abandon();
  std::lock_guard<std::mutex> g(storage_->mu_);
  storage_->copying_.erase(digest_);
}

Status ArchiveStorage::CacheCopy::Append(ByteSpan bytes) {
  if (done_) return Internal("cache copy of " + digest_ + ": appended after it ended");
  if (bytes.size() > size_ - file_.size()) {
    return InvalidArgument("cache copy of " + digest_ + ": more bytes than its " +
                           std::to_string(size_));
  }
  Status s = file_.Append(bytes);
  if (!s.ok()) {
    done_ = true;
    s = ScrubPaths(s, {{file_.temp_path(), "the cache copy of " + digest_}});
    file_.Abandon();
    storage_->Log("storage: cache copy of " + digest_ + " given up: " + s.ToString());
  }
  return s;
}

Status ArchiveStorage::CacheCopy::Publish() {
  if (done_) return Internal("cache copy of " + digest_ + ": published after it ended");
  done_ = true;
  if (file_.size() != size_) {
    file_.Abandon();
    return InvalidArgument("cache copy of " + digest_ + ": " + std::to_string(file_.size()) +
                           " of " + std::to_string(size_) + " bytes");
  }
  const std::string temp = file_.temp_path();
  Status s = file_.Commit(/*no_replace=*/true);
  if (s.code() == Code::kAlreadyExists) {
    file_.Abandon();  // File() rebuilt it meanwhile: that copy stays
    return Status::Ok();
  }
  if (!s.ok()) {
    file_.Abandon();
    s = ScrubPaths(s, {{temp, "the cache copy of " + digest_},
                       {storage_->CachePath(digest_), "the cache copy of " + digest_}});
    storage_->Log("storage: cache copy of " + digest_ + " given up: " + s.ToString());
    return s;
  }
  std::lock_guard<std::mutex> g(storage_->mu_);
  storage_->sizes_[digest_] = size_;
  ++storage_->rebuilds_;
  storage_->IndexCachedLocked(digest_, size_, Clock::now());
  return Status::Ok();
}

Result<std::optional<store::BlobInfo>> ArchiveStorage::FileIfStored(std::string_view digest) {
  if (!ParseDigest(digest).ok() || !enabled()) {
    BLZ_ASSIGN_OR_RETURN(store::BlobInfo blob, File(digest));
    return std::optional<store::BlobInfo>(std::move(blob));
  }
  const std::string d(digest);
  // As File: marked before the lookup, so DropRaw keeps the blob or has finished deleting it.
  BLZ_RETURN_IF_ERROR(HoldRaw(d));
  Result<store::BlobInfo> raw = blobs_->Stat(d);
  if (raw.ok() && raw->path.empty()) raw = blobs_->LocalFile(d);
  if (raw.ok()) {
    BLZ_RETURN_IF_ERROR(CheckStoredBlob(*raw));
    return std::optional<store::BlobInfo>(std::move(*raw));
  }
  if (raw.status().code() != Code::kNotFound) return raw.status();
  // A damaged copy is dropped: the stored form serves it, and a streamed copy replaces it.
  return CachedCopy(d, /*have_lock=*/false);
}

std::optional<store::BlobInfo> ArchiveStorage::CachedCopy(const std::string& d, bool have_lock) {
  std::optional<uint64_t> cached_size;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = cache_.find(d);
    if (it != cache_.end()) {
      it->second.last_used = Clock::now();
      cached_size = it->second.size;
    }
  }
  if (!cached_size.has_value()) return std::nullopt;
  const std::string path = CachePath(d);
  Result<bool> intact = IntactOnRead(path, d, *cached_size);
  if (intact.ok() && *intact) return store::BlobInfo{d, *cached_size, path};
  if (!have_lock) {
    // Never delete a copy File() is writing: look again under its lock.
    KeyedMutex::Lock lock(&locks_, "cache:" + d);
    return CachedCopy(d, /*have_lock=*/true);
  }
  DropDamagedCopy(d, intact);
  return std::nullopt;
}

void ArchiveStorage::DropDamagedCopy(const std::string& d, const Result<bool>& intact) {
  const std::string path = CachePath(d);
  Log("storage: cached copy of " + d + " is damaged (" +
      (intact.ok() ? std::string("its bytes do not hash to its name")
                   : intact.status().ToString()) +
      "): deleted");
  std::lock_guard<std::mutex> g(mu_);
  auto it = cache_.find(d);
  if (it != cache_.end()) {
    cache_total_ -= it->second.size;
    cache_.erase(it);
  }
  intact_.erase(path);
  RemoveAll(path);
}

Result<ArchiveStorage::FullPatch> ArchiveStorage::GetFullPatch(const std::string& digest) {
  if (!enabled()) return Unsupported("this server cannot compute full patches");
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid archive digest '" + digest + "'");
  KeyedMutex::Lock lock(&locks_, "full:" + digest);  // this process; shared_jobs_: replicas
  std::optional<FullPatch> result;
  Status damaged;  // a stored full patch found damaged (now quarantined)
  auto check = [&]() -> Result<bool> {
    Result<store::BlobInfo> found = FindFullPatch(digest);
    if (found.ok()) {
      Status intact = CheckStoredBlob(*found);
      if (intact.ok()) {
        result = FullPatch{std::move(*found), /*hit=*/true};
        return true;
      }
      if (intact.code() != Code::kCorruption) return intact;
      damaged = intact;
      return false;
    }
    if (found.status().code() != Code::kNotFound) return found.status();
    return false;
  };
  auto work = [&]() -> Status {
    Result<store::BlobInfo> raw = blobs_->LocalFile(digest);
    // Stored as a chain link: computed from the archive rebuilt from its chain.
    if (!raw.ok() && raw.status().code() == Code::kNotFound && db_->FindChainLink(digest).ok()) {
      raw = File(digest);
    }
    if (!raw.ok()) {
      if (raw.status().code() != Code::kNotFound) return raw.status();
      if (!damaged.ok()) return damaged;
      return NotFound("archive " + digest + " is not stored (neither raw nor as a full patch)");
    }
    // Create, hash, verify (compared with the stored archive), then publish what was hashed and
    // verified, then record: a recorded full patch is a verified one. The temporary file is
    // this job's own (the replica's private uploads/ directory) and nothing writes it after
    // `create`, so it is published under the digest taken before verifying without a second
    // read (PublishHashed still checks its size). DropRaw checks the stored copy again before
    // the raw archive goes (CheckStillIntact: the xxh3-64 taken in the same read).
    const std::string temp = blobs_->NewTempPath("fullpatch");
    const std::vector<std::pair<std::string, std::string>> names = {
        {raw->path, "archive " + digest}, {temp, "full patch of " + digest}};
    Status s = functions_.create(raw->path, digest, temp, &stop_);
    Result<FileSums> sums = s.ok() ? Sha256AndXxh3File(temp) : Result<FileSums>(s);
    Result<uint64_t> hashed_size = sums.ok() ? FileSizeOf(temp) : Result<uint64_t>(sums.status());
    if (hashed_size.ok()) {
      s = functions_.verify(temp, raw->path, digest);
      if (!s.ok()) s = s.WithContext("the full patch of " + digest + " failed verification");
    } else {
      s = hashed_size.status();
    }
    Result<store::BlobInfo> blob =
        s.ok() ? blobs_->PublishHashed(temp, MakeDigest(sums->sha256_hex),
                                       MakeDigest(sums->sha256_hex), *hashed_size)
               : Result<store::BlobInfo>(s);
    RemoveAll(temp);  // gone after a successful publish; removes leftovers otherwise
    if (!blob.ok()) return ScrubPaths(blob.status(), names);
    BLZ_RETURN_IF_ERROR(db_->RecordBlob(blob->digest, blob->size));
    BLZ_RETURN_IF_ERROR(db_->RecordPatch(
        "", store::PatchRecord{std::string(kNoBase), digest, blob->digest, blob->size}));
    {
      std::lock_guard<std::mutex> g(mu_);
      ++computed_;
      sizes_[digest] = raw->size;
      if (fresh_sums_.size() >= kMaxFreshSums) fresh_sums_.clear();
      fresh_sums_[blob->digest] = FreshSum{blob->size, sums->xxh3};
    }
    result = FullPatch{std::move(*blob), /*hit=*/false};
    return Status::Ok();
  };
  bool ran = false;
  BLZ_RETURN_IF_ERROR(shared_jobs_->Run("fullpatch:" + digest, check, work, &ran));
  if (!result.has_value()) return Internal("full patch of " + digest + ": no result");
  return std::move(*result);
}

Status ArchiveStorage::CheckStillIntact(const store::BlobInfo& blob) {
  std::optional<FreshSum> fresh;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = fresh_sums_.find(blob.digest); it != fresh_sums_.end()) fresh = it->second;
  }
  if (!fresh.has_value() || blobs_->streams_reads()) return blobs_->Verify(blob.digest);
  BLZ_ASSIGN_OR_RETURN(store::BlobInfo local, blobs_->LocalFile(blob.digest));
  BLZ_ASSIGN_OR_RETURN(uint64_t sum, Xxh3File(local.path));
  if (local.size != fresh->size || sum != fresh->xxh3) {
    return DigestMismatch(blobs_->Describe() + ": stored blob " + blob.digest + " (" +
                          std::to_string(local.size) + " bytes, xxh3-64 " + Hex64(sum) +
                          ") no longer holds the bytes it was published with (" +
                          std::to_string(fresh->size) + " bytes, xxh3-64 " + Hex64(fresh->xxh3) +
                          ")");
  }
  return Status::Ok();
}

std::optional<ArchiveStorage::Clock::time_point> ArchiveStorage::ServedUntilLocked(
    const std::string& digest) const {
  auto it = served_.find(digest);
  if (it == served_.end() || Clock::now() >= it->second + options_.grace) return std::nullopt;
  return it->second + options_.grace;
}

std::optional<ArchiveStorage::Clock::time_point> ArchiveStorage::ServedUntil(
    const std::string& digest) const {
  std::lock_guard<std::mutex> g(mu_);
  return ServedUntilLocked(digest);
}

Status ArchiveStorage::DropRaw(const std::string& digest, const store::BlobInfo& full_patch,
                               std::optional<Clock::time_point>* retry_at) {
  retry_at->reset();
  KeyedMutex::Lock lock(&locks_, "full:" + digest);
  // The recorded full patch must still be intact (CheckStillIntact).
  Result<store::BlobInfo> recorded = FindFullPatch(digest);
  if (!recorded.ok() && recorded.status().code() == Code::kNotFound) {
    // Stored as a chain link, whose full patch a collection may already have forgotten: the
    // link is what must be intact then.
    Result<store::ChainLink> link = db_->FindChainLink(digest);
    if (link.ok()) recorded = blobs_->LocalFile(link->patch_digest);
  } else if (recorded.ok() && recorded->digest != full_patch.digest) {
    return Internal("full patch of " + digest + " changed while compressing");
  }
  if (!recorded.ok()) return recorded.status().WithContext("full patch of " + digest);
  // Served within the grace period: postponed before the hash below, which the retry takes
  // anyway (it used to run on both calls: a second SHA-256 pass over the full patch).
  if (std::optional<Clock::time_point> until = ServedUntil(digest); until.has_value()) {
    *retry_at = *until;
    return Status::Ok();
  }
  Status intact = CheckStillIntact(*recorded);
  if (intact.code() == Code::kDigestMismatch) {
    return QuarantineDamaged(*recorded, "full patch " + recorded->digest + " of archive " + digest)
        .WithContext("keeping the raw archive " + digest);
  }
  if (!intact.ok()) {
    return ScrubPaths(intact, {{recorded->path, "full patch " + recorded->digest}})
        .WithContext("keeping the raw archive " + digest);
  }
  // The store's calls (a HEAD and a DELETE on S3) run outside mu_; "full:<digest>" keeps any
  // other DropRaw of this digest away meanwhile.
  Result<store::BlobInfo> raw = blobs_->Stat(digest);
  if (!raw.ok()) return raw.status().code() == Code::kNotFound ? Status::Ok() : raw.status();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (std::optional<Clock::time_point> until = ServedUntilLocked(digest); until.has_value()) {
      *retry_at = *until;  // served while the full patch was being checked
      return Status::Ok();
    }
    // Not served here within the grace period: File waits for the delete from here on (see
    // File).
    dropping_.insert(digest);
  }
  // Nor on another replica: the database's record of raw archives being read (HoldRaw) is
  // checked and the drop recorded in one statement, so a replica about to read it either
  // came first (the drop waits) or waits for the drop to end.
  const int64_t now_ms = UnixMillis();
  const int64_t lease_until =
      now_ms + std::chrono::duration_cast<std::chrono::milliseconds>(options_.job_leases.lease)
                   .count();
  Result<std::optional<int64_t>> begun = db_->BeginRawArchiveDrop(digest, now_ms, lease_until);
  if (!begun.ok() || begun->has_value()) {
    std::lock_guard<std::mutex> g(mu_);
    dropping_.erase(digest);
    dropped_cv_.notify_all();
    if (!begun.ok()) return begun.status().WithContext("keeping the raw archive " + digest);
    *retry_at = Clock::now() + std::chrono::milliseconds(**begun - now_ms) +
                std::chrono::milliseconds(1);
    return Status::Ok();
  }
  // Removed through the driver (any age: the cutoff is in the future); bytes counted only once
  // the store confirmed it.
  Result<uint64_t> removed =
      blobs_->RemoveIfOlder(digest, std::chrono::system_clock::time_point::max());
  // Readers waiting on other replicas go on (and find the blob gone). A failure here only
  // delays them until the lease passes.
  (void)db_->EndRawArchiveDrop(digest, lease_until, UnixMillis());
  {
    std::lock_guard<std::mutex> g(mu_);
    dropping_.erase(digest);
    dropped_cv_.notify_all();
    if (removed.ok()) {
      sizes_[digest] = raw->size;
      ++compressed_;
    }
  }
  if (!removed.ok()) {
    return removed.status().WithContext("cannot delete the raw archive " + digest);
  }
  const std::string raw_path = raw->path;
  const uint64_t raw_size = raw->size;
  if (!raw_path.empty()) BLZ_RETURN_IF_ERROR(SyncDir(ParentDir(raw_path)));
  const int percent =
      raw_size == 0 ? 0 : int(100.0 * double(full_patch.size) / double(raw_size) + 0.5);
  Log("storage: " + digest + ": raw archive (" + Megabytes(raw_size) +
      ") replaced by its verified full patch " + full_patch.digest + " (" +
      Megabytes(full_patch.size) + ", " + std::to_string(percent) + "%)");
  return Status::Ok();
}

Status ArchiveStorage::CompressOnce(const std::string& digest,
                                    std::optional<Clock::time_point>* retry_at) {
  retry_at->reset();
  // Deleted since it was scheduled (no repository has it as a version any more): nothing to
  // store; its raw blob goes with the next collection. A re-push schedules it again.
  BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions,
                       db_->ListVersionsOfArchive(digest));
  if (versions.empty()) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(FullPatch full, GetFullPatch(digest));
  // A chain link when a parent qualifies (registry/archive_chains.cc), once across replicas.
  bool chained = false;
  if (chains_enabled()) {
    bool tried = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      tried = !chain_tried_.insert(digest).second;
      if (chain_tried_.size() > 100000) chain_tried_.clear();  // only costs a retry
    }
    Result<store::BlobInfo> raw =
        tried ? Result<store::BlobInfo>(NotFound("tried")) : blobs_->LocalFile(digest);
    if (raw.ok()) {
      // (Its parent first, then archives stored whole that hold its tensors onto it.)
      auto check = [&]() { return IsChained(digest); };
      auto work = [&]() -> Status {
        bool stored = false;
        ChainRequest request;
        request.max_depth = options_.max_chain_depth;
        return TryChain(digest, raw->path, full.blob.size, request, &stored);
      };
      bool ran = false;
      Status s = shared_jobs_->Run("chain:" + digest, check, work, &ran);
      if (!s.ok()) Log("storage: " + digest + ": not chained: " + s.ToString());
      ChainSharersOnto(digest);
    }
    chained = db_->FindChainLink(digest).ok();
  }
  if (!options_.drop_raw_archives) return Status::Ok();
  BLZ_RETURN_IF_ERROR(DropRaw(digest, full.blob, retry_at));
  // The raw blob is gone (or was gone): the link is the stored form, the full patch goes.
  if (chained && !retry_at->has_value() && !blobs_->Contains(digest)) {
    ForgetFullPatchOfChained(digest);
  }
  return Status::Ok();
}

Status ArchiveStorage::Compress(const std::string& digest) {
  for (;;) {
    std::optional<Clock::time_point> retry_at;
    BLZ_RETURN_IF_ERROR(CompressOnce(digest, &retry_at));
    if (!retry_at.has_value()) return Status::Ok();
    std::this_thread::sleep_until(*retry_at);
  }
}

void ArchiveStorage::Schedule(const std::string& archive_digest) {
  if (!options_.background || !enabled()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    queue_.emplace(archive_digest, Clock::now());
  }
  cv_.notify_all();
}

Status ArchiveStorage::ScheduleAll() {
  if (!options_.background || !enabled()) return Status::Ok();
  // Archives whose tensors are not listed (one query, not one per version).
  std::set<std::string> unlisted;
  if (options_.max_chain_depth > 0) {
    BLZ_ASSIGN_OR_RETURN(std::vector<std::string> digests,
                         db_->ListVersionArchivesWithoutTensors());
    unlisted.insert(digests.begin(), digests.end());
  }
  BLZ_ASSIGN_OR_RETURN(store::Page repos, db_->ListRepositories(std::nullopt, ""));
  for (const std::string& repo : repos.items) {
    BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions, db_->ListVersions(repo));
    for (const store::VersionRecord& v : versions) {
      if (!blobs_->Contains(v.archive_digest)) {  // dropped already (or lost)
        if (unlisted.count(v.archive_digest) == 0) continue;
        std::lock_guard<std::mutex> lock(mu_);
        unlisted_.insert(v.archive_digest);
        continue;
      }
      if (!options_.drop_raw_archives && FindFullPatch(v.archive_digest).ok()) continue;
      Schedule(v.archive_digest);
    }
  }
  cv_.notify_all();
  return Status::Ok();
}

void ArchiveStorage::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return stop_ || (queue_.empty() && current_.empty() && unlisted_.empty());
  });
}

StorageStatus ArchiveStorage::status() {
  std::lock_guard<std::mutex> lock(mu_);
  StorageStatus st;
  st.pending = queue_.size() + unlisted_.size() + (current_.empty() ? 0 : 1);
  st.compressing = current_;
  st.compressed = compressed_;
  st.failed = failed_;
  st.full_patches_computed = computed_;
  st.rebuilds = rebuilds_;
  st.cache_bytes = cache_total_;
  st.cache_entries = cache_.size();
  st.cache_limit = options_.cache_bytes;
  st.quarantined = quarantined_;
  st.chained = chained_;
  st.rebased = rebased_;
  st.chain_rebuilds = chain_rebuilds_;
  st.chain_patches_reused = chain_patches_reused_;
  return st;
}

Result<bool> ArchiveStorage::IntactOnRead(const std::string& path, const std::string& digest,
                                          uint64_t size, uint64_t* hashed_inode) {
  if (hashed_inode != nullptr) *hashed_inode = 0;
  if (options_.verify_on_read_bytes == 0 || size > options_.verify_on_read_bytes) return true;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(digest + " is no longer stored");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  const FileStamp stamp{uint64_t(st.st_size), uint64_t(st.st_ino),
                        int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = intact_.find(path);
    if (it != intact_.end() && it->second == stamp) return true;
  }
  BLZ_ASSIGN_OR_RETURN(std::string actual, FileDigestLike(path, digest));
  if (actual != digest) {
    if (hashed_inode != nullptr) *hashed_inode = stamp.inode;
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (intact_.size() >= kMaxIntactEntries) intact_.clear();
  intact_[path] = stamp;
  return true;
}

Status ArchiveStorage::QuarantineDamaged(const store::BlobInfo& blob, const std::string& what,
                                         uint64_t hashed_inode) {
  Result<std::string> moved = blobs_->Quarantine(blob.digest, hashed_inode);
  {
    std::lock_guard<std::mutex> lock(mu_);
    intact_.erase(blob.path);
    if (moved.ok()) ++quarantined_;
  }
  if (moved.ok()) {
    Log("storage: " + what + " is damaged on disk (its bytes no longer hash to its digest): " +
        "moved to " + *moved);
  } else if (moved.status().code() != Code::kNotFound) {  // kNotFound: quarantined already
    Log("storage: " + what + " is damaged on disk but could not be quarantined: " +
        moved.status().ToString());
  }
  return Corruption(what + " is damaged on the server's disk (its bytes no longer hash to " +
                    blob.digest + "); it was moved to quarantine");
}

Status ArchiveStorage::CheckStoredBlob(const store::BlobInfo& blob) {
  uint64_t inode = 0;
  Result<bool> intact = IntactOnRead(blob.path, blob.digest, blob.size, &inode);
  if (!intact.ok()) return ScrubPaths(intact.status(), {{blob.path, "blob " + blob.digest}});
  if (*intact) return Status::Ok();
  return QuarantineDamaged(blob, "blob " + blob.digest, inode);
}

Status ArchiveStorage::VerifyArchive(const std::string& digest) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (verified_archives_.count(digest) != 0) return Status::Ok();
  }
  KeyedMutex::Lock lock(&locks_, "verify:" + digest);  // one verification per archive at once
  {
    std::lock_guard<std::mutex> g(mu_);
    if (verified_archives_.count(digest) != 0) return Status::Ok();
  }
  BLZ_ASSIGN_OR_RETURN(store::BlobInfo file, File(digest));
  Status s;
  {
    Result<formats::BlzArchive> archive = formats::BlzArchive::Open(file.path);
    s = archive.ok() ? archive->Verify() : archive.status();
  }
  if (!s.ok()) return ScrubPaths(s, {{file.path, "archive " + digest}});
  std::lock_guard<std::mutex> g(mu_);
  verified_archives_.insert(digest);
  return Status::Ok();
}

Result<StorageScrubReport> ScrubStorage(const std::string& data_dir,
                                        const std::function<void(const std::string&)>& log,
                                        std::string_view storage_url) {
  StorageScrubReport report;
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<store::BlobStore> blobs,
                       store::OpenBlobStore(storage_url, data_dir));
  BLZ_ASSIGN_OR_RETURN(report.blobs, blobs->Scrub(log));
  // Rebuilt archives: copies, so a damaged one is simply deleted (rebuilt on demand).
  const std::string cache_dir = data_dir + "/cache/sha256";
  std::error_code ec;
  if (!std::filesystem::exists(cache_dir, ec)) return report;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(cache_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code fec;
    if (IsLowerHex(name, 64) && it->is_regular_file(fec)) names.push_back(std::move(name));
  }
  if (ec) return IOError(cache_dir + ": cannot list: " + ec.message());
  for (const std::string& hex : names) {
    const std::string path = cache_dir + "/" + hex;
    Result<std::string> actual = Sha256FileHex(path);
    Result<uint64_t> size = FileSizeOf(path);
    if (!actual.ok() || !size.ok()) {
      const Status& e = actual.ok() ? size.status() : actual.status();
      report.blobs.errors.push_back(e.ToString());
      if (log) log("scrub: " + e.ToString());
      continue;
    }
    ++report.cache_checked;
    report.cache_bytes += *size;
    if (*actual == hex) continue;
    RemoveAll(path);
    report.cache_removed.push_back(MakeDigest(hex));
    if (log) log("scrub: cached archive " + path + " is damaged: deleted (rebuilt on demand)");
  }
  return report;
}

void ArchiveStorage::EvictLocked(Clock::time_point now) {
  if (cache_total_ <= options_.cache_bytes) return;
  std::vector<std::pair<Clock::time_point, std::string>> order;
  for (const auto& [digest, entry] : cache_) {
    if (now - entry.last_used >= options_.grace) order.emplace_back(entry.last_used, digest);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [used, digest] : order) {
    if (cache_total_ <= options_.cache_bytes) break;
    auto it = cache_.find(digest);
    if (::unlink(CachePath(digest).c_str()) != 0 && errno != ENOENT) continue;
    cache_total_ -= it->second.size;
    cache_.erase(it);
  }
}

void ArchiveStorage::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    EvictLocked(now);
    if (queue_.empty() && !unlisted_.empty()) {
      // No compression waits: list the tensors of an archive stored before they were listed.
      const std::string digest = *unlisted_.begin();
      unlisted_.erase(unlisted_.begin());
      current_ = digest;
      lock.unlock();
      Status s;
      try {
        s = RecordStoredTensors(digest);
      } catch (const std::exception& e) {
        s = Internal(std::string("unexpected exception: ") + e.what());
      }
      if (!s.ok()) Log("storage: " + digest + ": its tensors are not listed: " + s.ToString());
      lock.lock();
      current_.clear();
      cv_.notify_all();
      continue;
    }
    if (queue_.empty()) {
      // Idle: wake up now and then to evict cache entries whose grace has passed.
      cv_.wait_for(lock, std::max(options_.grace, std::chrono::milliseconds(100)));
      continue;
    }
    auto next = std::min_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
      return a.second < b.second;
    });
    if (next->second > now) {
      cv_.wait_until(lock, next->second);
      continue;
    }
    const std::string digest = next->first;
    queue_.erase(next);
    current_ = digest;
    lock.unlock();
    std::optional<Clock::time_point> retry_at;
    Status s;
    try {
      s = CompressOnce(digest, &retry_at);
    } catch (const std::exception& e) {
      s = Internal(std::string("unexpected exception: ") + e.what());
    }
    lock.lock();
    current_.clear();
    if (retry_at.has_value() && !stop_) {
      queue_[digest] = *retry_at;
    } else if (!s.ok() && !stop_) {
      ++failed_;
      Log("storage: " + digest + ": not compressed, the raw archive is kept: " + s.ToString());
    }
    cv_.notify_all();
  }
  cv_.notify_all();
}

}  // namespace blz::registry
