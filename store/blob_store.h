// The blob seam: a content-addressed store of immutable blobs named by their digest, with one
// driver per folder (store/fs/: a local directory, the default; store/s3/: an S3 bucket). A new
// driver (GCS, Azure) is one new folder implementing this class plus one line in
// store/open_blob_store.cc.
//
// Every driver shares the write path implemented here: bytes are written to a temporary file
// under the replica's own data directory (<root>/uploads/), hashed there (SHA-256, or SHA-512 for
// blobs pushed under such a digest), and only when they match the digest that names them handed
// to the driver's PublishVerified (fs: fsync + rename; s3: one PUT, or a multipart upload for
// large files). On a digest mismatch nothing is stored (kDigestMismatch). A finished upload is
// never copied again ("write once"). Nothing holds a blob in memory whole.
//
// Reads: Stat (size, time written; never downloads), LocalFile (a local file with the verified
// bytes, for code that must mmap or send a file: fs: the blob's own file; s3: a bounded cache
// under <root>/cache/blobs), OpenRange (a byte range streamed in bounded pieces, nothing kept
// locally: s3: one ranged GET; what the registry serves blob GETs from when
// streams_reads()), PresignGet (a URL a client may fetch directly; kUnsupported where
// the driver has none).
//
// Thread safety: all methods of every driver are safe to call concurrently. The store is held by
// pointer or reference (it is not copyable); it must outlive its BlobWriters.
#ifndef BLZ_STORE_BLOB_STORE_H_
#define BLZ_STORE_BLOB_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/status.h"

namespace blz::store {

struct BlobInfo {
  std::string digest;  // "sha256:<hex>" or "sha512:<hex>"
  uint64_t size = 0;   // bytes
  // A local file holding the bytes, when the driver has one at hand: the fs driver's Stat and
  // every driver's LocalFile set it; the s3 driver's Stat leaves it empty (nothing downloaded).
  std::string path;
  // When the stored copy was last written (fs: the file's mtime; s3: Last-Modified).
  std::chrono::system_clock::time_point modified{};
};

class BlobWriter;
class UploadSessionFile;

// A byte range of a stored blob, read in order in bounded pieces (BlobStore::OpenRange).
// Not thread-safe; it may outlive nothing but its own state (it does not refer to the store).
class BlobReader {
 public:
  virtual ~BlobReader();
  // The next bytes of the range (at most a few hundred KiB), valid until the next call or the
  // reader's destruction; an empty span once the whole range was read. Errors: kUnavailable /
  // kIOError naming the blob (the connection failed, the bytes ended early); the reader is
  // then unusable.
  virtual Result<ByteSpan> Next() = 0;
};

// Calls that reached a driver, by operation, and their wall time (store/timed_blob_store.h;
// blz_blob_store_seconds{op} on /metrics). Atomics: read from any thread.
struct BlobStoreTimings {
  struct Op {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> nanos{0};
    std::atomic<uint64_t> errors{0};
    void Add(std::chrono::steady_clock::duration d, bool ok) {
      count.fetch_add(1, std::memory_order_relaxed);
      nanos.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                      std::memory_order_relaxed);
      if (!ok) errors.fetch_add(1, std::memory_order_relaxed);
    }
    double seconds() const { return double(nanos.load(std::memory_order_relaxed)) / 1e9; }
  };
  Op stat, get, put, remove, list;  // remove: the "delete" operation
};

// What BlobStore::Scrub found.
struct ScrubReport {
  uint64_t blobs = 0;  // published blobs re-hashed
  uint64_t bytes = 0;  // their bytes
  // Digests of the blobs whose bytes no longer hashed to their name, now in quarantine.
  std::vector<std::string> quarantined;
  // Blobs that could not be read or moved (left in place), one message each.
  std::vector<std::string> errors;
};

// What a driver's HashStored found: the digest the stored bytes hash to now.
struct StoredHash {
  std::string actual;     // "sha256:<hex>" (or sha512, like the name)
  uint64_t size = 0;
  uint64_t identity = 0;  // fs: the inode hashed (for Quarantine); others: 0
};

class BlobStore {
 public:
  virtual ~BlobStore();
  BlobStore(const BlobStore&) = delete;
  BlobStore& operator=(const BlobStore&) = delete;

  // "file" or "s3" (for logs and /metrics).
  virtual std::string_view driver() const = 0;
  // Where the bytes live, for messages: the blobs directory, or "s3://BUCKET/PREFIX" (never
  // credentials).
  virtual std::string Describe() const = 0;

  // The replica's own data directory and its temporary files (<root>/uploads).
  const std::string& root() const { return root_; }
  const std::string& uploads_dir() const { return uploads_dir_; }
  // A fresh path "<root>/uploads/<prefix>-<random hex>" (the file is not created).
  std::string NewTempPath(std::string_view prefix) const;

  // Checks at start that the store is reachable and usable with the configured credentials.
  // fs: always OK. s3: a listing of the prefix; errors name the bucket and S3's error code
  // (kUnauthorized for a refused signature or key, kNotFound for a missing bucket,
  // kUnavailable for a network failure).
  virtual Status CheckReachable() const { return Status::Ok(); }

  // The calls timed so far, when this store is a TimedBlobStore (store/timed_blob_store.h);
  // nullptr for a bare driver.
  virtual const BlobStoreTimings* timings() const { return nullptr; }
  // The driver itself: this store, or the one a decorator (TimedBlobStore) wraps. For tests
  // that reach into a driver (FsBlobStore::PathFor).
  virtual BlobStore& unwrapped() { return *this; }

  // Size and time written of a published blob (fs: also its path). Never downloads.
  // Errors: kInvalidArgument (malformed digest), kNotFound, kIOError / kUnavailable.
  virtual Result<BlobInfo> Stat(std::string_view digest) const = 0;
  bool Contains(std::string_view digest) const { return Stat(digest).ok(); }

  // Size and a local file holding the blob's verified bytes (BlobInfo::path), for code that must
  // mmap it or send it as a file. fs: the blob's own file. s3: a copy in the bounded local cache
  // (downloaded and hashed on a miss; kDigestMismatch when the stored object no longer matches).
  // The file stays readable while the caller holds it open (eviction only unlinks it).
  virtual Result<BlobInfo> LocalFile(std::string_view digest) const = 0;

  // Bytes [offset, offset + length) of a published blob, streamed: nothing is held whole in
  // memory or copied to a local file. fs (the default here): read from LocalFile's file. s3: one
  // ranged GET (connect errors and 5xx retried before the first byte, never after), its body
  // read as Next() asks; the local cache is neither read nor filled. The bytes are not hashed
  // (a range cannot be): callers that serve a whole blob may hash what they stream.
  // Errors: kInvalidArgument (malformed digest, or a range past the blob's end), kNotFound,
  // kIOError / kUnavailable / the driver's errors.
  virtual Result<std::unique_ptr<BlobReader>> OpenRange(std::string_view digest, uint64_t offset,
                                                        uint64_t length) const;
  // Whether blob GETs should be served through OpenRange rather than from LocalFile's file:
  // true where LocalFile would download the whole blob first (s3); false where it is the
  // stored file itself (fs: sent with the kernel's help).
  virtual bool streams_reads() const { return false; }

  // Publishes the file at `temp_path` (which must be inside uploads_dir()) as the blob named
  // `expected_digest`: hashes it (streamed), and only when it matches hands it to the driver.
  // Errors: kInvalidArgument (malformed digest), kDigestMismatch (the file is left where it is
  // for the caller to remove; nothing stored), kNotFound / kIOError, the driver's errors.
  Result<BlobInfo> Publish(const std::string& temp_path, std::string_view expected_digest) const;
  // Same, for a file whose bytes the caller hashed as it wrote them (`computed_digest`, over
  // `hashed_bytes` bytes; a registry upload hashes while it receives): publishes only when
  // `computed_digest` equals `expected_digest` and the file holds exactly `hashed_bytes` bytes,
  // without reading the file again. Errors: as Publish (kDigestMismatch when the digests
  // differ; kIOError when the file's size is not `hashed_bytes`: nothing stored either way).
  Result<BlobInfo> PublishHashed(const std::string& temp_path, std::string_view expected_digest,
                                 std::string_view computed_digest, uint64_t hashed_bytes) const;
  // Same, naming the blob by the digest of the file's bytes.
  Result<BlobInfo> PublishComputed(const std::string& temp_path) const;

  // A streaming writer for a new blob (it refers to this store, which must outlive it).
  Result<BlobWriter> NewWriter() const;

  // Writes `data` as a blob (small content: configs, manifests in tests). An empty
  // `expected_digest` means "name it by its digest".
  Result<BlobInfo> PutBytes(std::string_view data, std::string_view expected_digest = {}) const;

  // Re-hashes a published blob (s3: streamed from the bucket, not from the cache). Errors:
  // kNotFound, kDigestMismatch (the stored bytes were damaged).
  Status Verify(std::string_view digest) const;

  // <root>/quarantine: where damaged blobs are moved (created on first use).
  std::string quarantine_dir() const { return root_ + "/quarantine"; }

  // Takes the published blob `digest` out of the store for an operator to inspect: afterwards
  // Stat is kNotFound, so it is never served again, and a client may push it again. For blobs
  // whose bytes no longer hash to their digest (callers check first; fs does not hash).
  // fs: moved to <root>/quarantine/<hex>[.<random>]; with `hashed_identity` != 0 (the inode the
  //     caller hashed) a file replaced since is left in place (kNotFound).
  // s3: the object is hashed again (streamed); an intact object stays (kNotFound: only the
  //     local cached copy was bad and is dropped); a damaged one is downloaded to
  //     <root>/quarantine/<hex>[.<random>] and deleted from the bucket.
  // Returns where the bytes went. Errors: kInvalidArgument, kNotFound, kIOError / kUnavailable.
  virtual Result<std::string> Quarantine(std::string_view digest,
                                         uint64_t hashed_identity = 0) const = 0;

  // The digests of every published blob, in no particular order. Entries not named like a blob
  // are ignored. Errors: kIOError / kUnavailable (cannot be listed).
  virtual Result<std::vector<std::string>> ListDigests() const = 0;

  // Garbage collection's removal of one blob: removes it only if it was last written before
  // `cutoff`. Returns the bytes freed: counted only once the store confirmed the removal (0
  // when the blob was not there). Errors: kUnavailable (younger than `cutoff`: kept),
  // kInvalidArgument, kIOError / the driver's errors (the blob may still be there).
  // fs: a concurrent publish of the same bytes is never lost (rename aside, judge, move back).
  // s3: HEAD (Last-Modified), then DELETE; a PUT of the same key between the two is deleted
  //     with it (the database's GC marks exclude that case, issue 25).
  virtual Result<uint64_t> RemoveIfOlder(std::string_view digest,
                                         std::chrono::system_clock::time_point cutoff) const = 0;

  // Re-hashes every published blob (streamed, one at a time) and quarantines each whose bytes
  // no longer hash to its name. `log` (may be empty) gets one line per damaged or unreadable
  // blob. Errors: those of ListDigests; a blob that cannot be read or moved is reported in
  // ScrubReport::errors and the scrub goes on.
  Result<ScrubReport> Scrub(const std::function<void(const std::string&)>& log = {}) const;

  // A URL that fetches the blob without credentials for `expiry` (s3: a presigned GET).
  // Errors: kUnsupported (fs), kInvalidArgument (expiry out of range).
  virtual Result<std::string> PresignGet(std::string_view digest,
                                         std::chrono::seconds expiry) const;

  // -- upload parts: the chunks of an open upload session (registry/upload_handlers.cc), kept
  //    where every replica using this store reads them (s3: objects
  //    <PREFIX>/uploads/<session>/<name>; fs: files <root>/uploads/parts-<session>/<name>, as
  //    local as the blobs). `session` is a session uuid, `name` a part name (both [0-9a-z-]);
  //    the order of the parts is the caller's (the metadata database records it). --
  // Stores the file at `path` (under uploads_dir()) as part `name` of `session`, consuming the
  // file (fs: renamed into place; s3: one PUT, then removed). Errors: kInvalidArgument (a bad
  // name), kIOError / the driver's errors (the file is left where it was).
  virtual Status PutUploadPart(std::string_view session, std::string_view name,
                               const std::string& path) const = 0;
  // Writes the parts `names` of `session`, in that order, into a new file at `dest` (under
  // uploads_dir()). fs: a single part is hard-linked (no copy); parts that are all kept in the
  // session file (SessionFilePartName) are hard-linked too when the caller holds that file
  // (`held`, of this session: it is first cut to the end of the last of them), else (not held,
  // or ordinary parts follow them) copied out of it. Either way the parts stay in place, so a
  // failure after this (a publish that fails) loses nothing. Errors: kNotFound (a part is missing, or the session file holds
  // fewer bytes than its parts name), kCorruption (session-file parts out of order or after an
  // ordinary part), kIOError / the driver's errors (`dest` may hold a partial file).
  virtual Status ConcatUploadParts(std::string_view session, const std::vector<std::string>& names,
                                   const std::string& dest,
                                   const UploadSessionFile* held) const = 0;
  // Removes every part of `session` (also ones no database row names). Missing: OK.
  virtual Status DeleteUploadParts(std::string_view session) const = 0;
  // The sessions that have parts stored (for purging parts whose session is gone).
  virtual Result<std::vector<std::string>> ListUploadPartSessions() const = 0;

  // -- the session file (drivers whose parts are local files: fs): a session's chunks written
  //    in place, one after the other, into one file (fs: <root>/uploads/parts-<session>/data),
  //    so that the closing PUT links that file instead of copying every chunk into a new one
  //    (issue 28: a 1 GB upload's PUT copied 1 GB). The parts kept there are recorded under
  //    SessionFilePartName(start, end); the file's bytes past the last recorded part are
  //    garbage (a chunk that failed, or lost the race to an ordinary part through another
  //    request), overwritten by the next chunk or cut off by ConcatUploadParts. --
  // Opens (creating) the session file of `session` and locks it for writing: exclusive between
  // requests, threads and processes (flock on its own open file description; released when the
  // returned object is destroyed). A file that is also linked elsewhere (being published, or
  // published by a closing PUT whose process died before removing the session) is never
  // handed out. Errors: kUnsupported (this driver has no session file: the default),
  // kUnavailable (another request holds it, or it is linked elsewhere: store the chunk as an
  // ordinary part), kInvalidArgument (a bad session id), kIOError.
  virtual Result<std::unique_ptr<UploadSessionFile>> LockSessionFile(
      std::string_view session) const;

 protected:
  // Creates <root> and <root>/uploads owner-only (0700; an existing wider one is tightened with
  // a warning on stderr).
  explicit BlobStore(std::string root);
  Status InitLocalDirs() const;

  // Stores the file at `temp_path` (under uploads_dir(), already hashed to `digest`, `size`
  // bytes) as that blob, and removes or moves the file. `synced`: the file was fsynced.
  virtual Result<BlobInfo> PublishVerified(const std::string& temp_path,
                                           const std::string& digest, uint64_t size,
                                           bool synced) const = 0;
  // Hashes the stored copy of `digest` (not a cache). Errors: kNotFound, kIOError, ...
  virtual Result<StoredHash> HashStored(std::string_view digest) const = 0;

 private:
  friend class BlobWriter;
  friend class TimedBlobStore;  // forwards the protected driver calls to the driver it wraps
  std::string root_;
  std::string uploads_dir_;
};

// OK when `id` is a non-empty name of [0-9a-z-] (an upload session or part name), else
// kInvalidArgument naming `what`. For drivers.
Status CheckUploadPartId(std::string_view what, std::string_view id);

// A session file locked for writing (BlobStore::LockSessionFile): its open descriptor, which
// holds the lock until this is destroyed. Writers write at the session's recorded size
// (pwrite: the descriptor is not O_APPEND). Not copyable; not thread-safe.
class UploadSessionFile {
 public:
  UploadSessionFile(std::string session, std::string path, int fd, uint64_t size);
  ~UploadSessionFile();  // closes the descriptor: the lock is released
  UploadSessionFile(const UploadSessionFile&) = delete;
  UploadSessionFile& operator=(const UploadSessionFile&) = delete;

  const std::string& session() const { return session_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // bytes in the file when it was locked
  // Cuts the file to `size` bytes (what a chunk that failed midway wrote past it). Errors:
  // kIOError (callers that only tidy up may ignore it: bytes past the last recorded part are
  // garbage anyway).
  Status Truncate(uint64_t size) const;

 private:
  std::string session_;
  std::string path_;
  int fd_;
  uint64_t size_;
};

// The part name recording bytes [start, end) of an upload as kept in its session file:
// "<start, 20 digits>-session-<end, 20 digits>" (ordinary parts are "<offset>-<16 hex>").
std::string SessionFilePartName(uint64_t start, uint64_t end);
// True, with the range, when `name` is a session-file part name (start <= end).
bool ParseSessionFilePart(std::string_view name, uint64_t* start, uint64_t* end);
// True when the session file holds every byte of an upload whose recorded parts are `parts`
// and size `size`: no parts and size 0, or only session-file parts covering [0, size) in order.
bool SessionFileHoldsAll(const std::vector<std::string>& parts, uint64_t size);

// Appends all of `src` to `dst` (both regular files; `dst` must exist), in the kernel where
// possible (copy_file_range). On error `dst` may hold a partial append. For drivers and the
// upload handlers.
Status AppendFileTo(const std::string& src, const std::string& dst);
// Appends the first `length` bytes of `src` to `dst`, as AppendFileTo; kNotFound when `src`
// is missing or holds fewer.
Status AppendFilePrefixTo(const std::string& src, uint64_t length, const std::string& dst);

// Creates `dir` (and parents) owner-only (0700 whatever the umask; an existing wider one is
// tightened with a warning on stderr). For drivers.
Status MakePrivateDir(const std::string& dir);

// Streams one blob into a temporary file under <root>/uploads/ (a core AtomicFile), hashing as
// it goes. Destroying an uncommitted writer removes its temporary file.
class BlobWriter {
 public:
  BlobWriter() = default;
  ~BlobWriter();
  BlobWriter(BlobWriter&& other) noexcept;
  BlobWriter& operator=(BlobWriter&& other) noexcept;
  BlobWriter(const BlobWriter&) = delete;
  BlobWriter& operator=(const BlobWriter&) = delete;

  Status Append(ByteSpan data);
  Status Append(std::string_view data) { return Append(AsBytes(data)); }
  uint64_t size() const { return file_.size(); }

  // Checks that the bytes written hash to `expected_digest` ("sha256:<hex>"), then publishes.
  // Errors: kInvalidArgument (malformed digest), kDigestMismatch (nothing stored), kIOError.
  Result<BlobInfo> Commit(std::string_view expected_digest);
  // Publishes under the digest of the bytes written (for content the server produced).
  Result<BlobInfo> CommitComputed();
  // Removes the temporary file now.
  void Abandon();

 private:
  friend class BlobStore;
  Result<BlobInfo> Finish(std::string_view expected_hex);

  const BlobStore* store_ = nullptr;
  AtomicFile file_;  // <root>/uploads/blob-<hex>, written through its own temporary file
  Sha256 hash_;
};

}  // namespace blz::store

#endif  // BLZ_STORE_BLOB_STORE_H_
