// The driver-independent half of the blob seam: temporary files, hashing before publishing,
// the streaming writer and the scrub loop (store/blob_store.h).
#include "store/blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/text.h"

namespace blz::store {

Status CheckUploadPartId(std::string_view what, std::string_view id) {
  bool ok = !id.empty() && id.size() <= 128;
  for (char c : id) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-');
  if (!ok) return InvalidArgument("invalid upload " + std::string(what) + " '" + std::string(id) + "'");
  return Status::Ok();
}

namespace {

// Appends at most `limit` bytes of `src` (from its start) to `dst`; `*copied` = bytes appended.
Status AppendUpTo(const std::string& src, uint64_t limit, const std::string& dst,
                  uint64_t* copied) {
  *copied = 0;
  int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return IOError(src + ": cannot open: " + std::strerror(errno));
  // Not O_APPEND: copy_file_range refuses such descriptors. Write from the end instead.
  int out = ::open(dst.c_str(), O_WRONLY | O_CLOEXEC);
  if (out < 0 || ::lseek(out, 0, SEEK_END) < 0) {
    Status s = IOError(dst + ": cannot open for appending: " + std::strerror(errno));
    ::close(in);
    if (out >= 0) ::close(out);
    return s;
  }
  Status status;
  bool fallback = false;
  while (!fallback && *copied < limit) {
    const size_t want = size_t(std::min<uint64_t>(limit - *copied, 1 << 30));
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, want, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) {
        fallback = true;
        break;
      }
      status = IOError(dst + ": append failed: " + std::strerror(errno));
      break;
    }
    *copied += uint64_t(n);
  }
  if (fallback) {
    std::vector<char> buf(1 << 20);
    while (*copied < limit) {
      ssize_t n = ::read(in, buf.data(), size_t(std::min<uint64_t>(buf.size(), limit - *copied)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = IOError(src + ": read failed: " + std::strerror(errno));
        break;
      }
      if (n == 0) break;
      const char* p = buf.data();
      size_t left = size_t(n);
      while (left > 0) {
        ssize_t w = ::write(out, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) break;
        p += w;
        left -= size_t(w);
      }
      if (left > 0) {
        status = IOError(dst + ": write failed: " + std::strerror(errno));
        break;
      }
      *copied += uint64_t(n);
    }
  }
  ::close(in);
  if (::close(out) != 0 && status.ok()) status = IOError(dst + ": close failed");
  return status;
}

}  // namespace

Status AppendFileTo(const std::string& src, const std::string& dst) {
  uint64_t copied = 0;
  return AppendUpTo(src, UINT64_MAX, dst, &copied);
}

Status AppendFilePrefixTo(const std::string& src, uint64_t length, const std::string& dst) {
  if (::access(src.c_str(), F_OK) != 0 && errno == ENOENT) return NotFound(src + ": missing");
  uint64_t copied = 0;
  BLZ_RETURN_IF_ERROR(AppendUpTo(src, length, dst, &copied));
  if (copied < length) {
    return NotFound(src + ": holds " + std::to_string(copied) + " bytes, " +
                    std::to_string(length) + " expected");
  }
  return Status::Ok();
}

// ---- the session file ----

UploadSessionFile::UploadSessionFile(std::string session, std::string path, int fd,
                                     uint64_t size)
    : session_(std::move(session)), path_(std::move(path)), fd_(fd), size_(size) {}

UploadSessionFile::~UploadSessionFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status UploadSessionFile::Truncate(uint64_t size) const {
  while (::ftruncate(fd_, off_t(size)) != 0) {
    if (errno != EINTR) {
      return IOError(path_ + ": cannot cut to " + std::to_string(size) + " bytes: " +
                     std::strerror(errno));
    }
  }
  return Status::Ok();
}

namespace {
constexpr std::string_view kSessionPartInfix = "-session-";
constexpr size_t kOffsetDigits = 20;
}  // namespace

std::string SessionFilePartName(uint64_t start, uint64_t end) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%020llu-session-%020llu", static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(end));
  return buf;
}

bool ParseSessionFilePart(std::string_view name, uint64_t* start, uint64_t* end) {
  if (name.size() != 2 * kOffsetDigits + kSessionPartInfix.size() ||
      name.substr(kOffsetDigits, kSessionPartInfix.size()) != kSessionPartInfix) {
    return false;
  }
  auto parse = [](std::string_view digits, uint64_t* out) {
    uint64_t v = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      const uint64_t d = uint64_t(c - '0');
      if (v > (UINT64_MAX - d) / 10) return false;
      v = v * 10 + d;
    }
    *out = v;
    return true;
  };
  uint64_t s = 0, e = 0;
  if (!parse(name.substr(0, kOffsetDigits), &s) ||
      !parse(name.substr(kOffsetDigits + kSessionPartInfix.size()), &e) || s > e) {
    return false;
  }
  *start = s;
  *end = e;
  return true;
}

bool SessionFileHoldsAll(const std::vector<std::string>& parts, uint64_t size) {
  uint64_t covered = 0;
  for (const std::string& name : parts) {
    uint64_t start = 0, end = 0;
    if (!ParseSessionFilePart(name, &start, &end) || start != covered) return false;
    covered = end;
  }
  return covered == size;
}

Status MakePrivateDir(const std::string& dir) {
  struct stat st {};
  const bool existed = ::stat(dir.c_str(), &st) == 0;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError(dir + ": cannot create directory: " + ec.message());
  if (::stat(dir.c_str(), &st) != 0) {
    return IOError(dir + ": cannot stat: " + std::strerror(errno));
  }
  if ((st.st_mode & 077) == 0) return Status::Ok();
  if (::chmod(dir.c_str(), 0700) != 0) {
    return IOError(dir + ": cannot set mode 0700: " + std::strerror(errno));
  }
  if (existed) {
    std::fprintf(stderr, "blz: warning: %s was mode %03o (readable by others); set to 0700\n",
                 EscapeForTerminal(dir).c_str(), static_cast<unsigned>(st.st_mode & 0777));
  }
  return Status::Ok();
}

// ---- BlobWriter ----

BlobWriter::~BlobWriter() = default;
BlobWriter::BlobWriter(BlobWriter&&) noexcept = default;
BlobWriter& BlobWriter::operator=(BlobWriter&&) noexcept = default;

Status BlobWriter::Append(ByteSpan data) {
  if (file_.fd() < 0) return Internal("BlobWriter: append after commit");
  BLZ_RETURN_IF_ERROR(file_.Append(data));
  hash_.Update(data);
  return Status::Ok();
}

Result<BlobInfo> BlobWriter::Commit(std::string_view expected_digest) {
  BLZ_ASSIGN_OR_RETURN(std::string hex, ParseDigest(expected_digest));
  return Finish(hex);
}

Result<BlobInfo> BlobWriter::CommitComputed() { return Finish({}); }

Result<BlobInfo> BlobWriter::Finish(std::string_view expected_hex) {
  if (file_.fd() < 0 || store_ == nullptr) return Internal("BlobWriter: double commit");
  const uint64_t size = file_.size();
  std::string actual = hash_.FinishHex();
  if (!expected_hex.empty() && actual != expected_hex) {
    Abandon();
    return DigestMismatch("blob digest mismatch: expected sha256:" + std::string(expected_hex) +
                          ", the " + std::to_string(size) + " bytes received hash to sha256:" +
                          actual);
  }
  // Durable under its uploads name first (AtomicFile: fsync, rename), then published.
  const std::string staged = file_.dest_path();
  BLZ_RETURN_IF_ERROR(file_.Commit(/*no_replace=*/true));
  Result<BlobInfo> info =
      store_->PublishVerified(staged, MakeDigest(actual), size, /*synced=*/true);
  if (!info.ok()) ::unlink(staged.c_str());
  return info;
}

void BlobWriter::Abandon() { file_.Abandon(); }

// ---- BlobStore ----

BlobStore::BlobStore(std::string root)
    : root_(std::move(root)), uploads_dir_(root_ + "/uploads") {}

BlobStore::~BlobStore() = default;

Status BlobStore::InitLocalDirs() const {
  if (root_.empty()) return InvalidArgument("blob store: empty data directory");
  BLZ_RETURN_IF_ERROR(MakePrivateDir(root_));
  return MakePrivateDir(uploads_dir_);
}

std::string BlobStore::NewTempPath(std::string_view prefix) const {
  return uploads_dir_ + "/" + std::string(prefix) + "-" + RandomHex(12);
}

Result<BlobInfo> BlobStore::Publish(const std::string& temp_path,
                                    std::string_view expected_digest) const {
  if (!IsValidOciDigest(expected_digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(expected_digest) + "'");
  }
  if (temp_path.rfind(uploads_dir_ + "/", 0) != 0) {
    return Internal("blob store: " + temp_path + " is not under " + uploads_dir_);
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(temp_path));
  BLZ_ASSIGN_OR_RETURN(std::string actual, FileDigestLike(temp_path, expected_digest));
  if (actual != expected_digest) {
    return DigestMismatch("blob digest mismatch: expected " + std::string(expected_digest) +
                          ", the " + std::to_string(size) + " bytes received hash to " + actual);
  }
  return PublishVerified(temp_path, actual, size, /*synced=*/false);
}

Result<BlobInfo> BlobStore::PublishHashed(const std::string& temp_path,
                                          std::string_view expected_digest,
                                          std::string_view computed_digest,
                                          uint64_t hashed_bytes) const {
  if (!IsValidOciDigest(expected_digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(expected_digest) + "'");
  }
  if (temp_path.rfind(uploads_dir_ + "/", 0) != 0) {
    return Internal("blob store: " + temp_path + " is not under " + uploads_dir_);
  }
  if (computed_digest != expected_digest) {
    return DigestMismatch("blob digest mismatch: expected " + std::string(expected_digest) +
                          ", the " + std::to_string(hashed_bytes) + " bytes received hash to " +
                          std::string(computed_digest));
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(temp_path));
  if (size != hashed_bytes) {
    return IOError(temp_path + ": holds " + std::to_string(size) + " bytes but " +
                   std::to_string(hashed_bytes) + " were received and hashed");
  }
  return PublishVerified(temp_path, std::string(expected_digest), size, /*synced=*/false);
}

Result<BlobInfo> BlobStore::PublishComputed(const std::string& temp_path) const {
  // Hashed once: the digest is the name, so there is nothing to check it against again.
  BLZ_ASSIGN_OR_RETURN(std::string actual, Sha256FileHex(temp_path));
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(temp_path));
  const std::string digest = MakeDigest(actual);
  return PublishHashed(temp_path, digest, digest, size);
}

Result<BlobWriter> BlobStore::NewWriter() const {
  BlobWriter w;
  w.store_ = this;
  BLZ_ASSIGN_OR_RETURN(w.file_, AtomicFile::Create(NewTempPath("blob"), 0600));
  return w;
}

Result<BlobInfo> BlobStore::PutBytes(std::string_view data,
                                     std::string_view expected_digest) const {
  BLZ_ASSIGN_OR_RETURN(BlobWriter w, NewWriter());
  BLZ_RETURN_IF_ERROR(w.Append(data));
  return expected_digest.empty() ? w.CommitComputed() : w.Commit(expected_digest);
}

Status BlobStore::Verify(std::string_view digest) const {
  if (!IsValidOciDigest(digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(digest) + "'");
  }
  BLZ_ASSIGN_OR_RETURN(StoredHash hashed, HashStored(digest));
  if (hashed.actual != digest) {
    return DigestMismatch(Describe() + ": stored blob " + std::string(digest) +
                          " now hashes to " + hashed.actual);
  }
  return Status::Ok();
}

BlobReader::~BlobReader() = default;

namespace {

// A range of a local file, read in 256 KiB pieces.
class FileRangeReader final : public BlobReader {
 public:
  FileRangeReader(std::string digest, std::string path, int fd, uint64_t offset, uint64_t length)
      : digest_(std::move(digest)), path_(std::move(path)), fd_(fd), at_(offset),
        left_(length), buf_(length == 0 ? 0 : size_t(std::min<uint64_t>(length, 256 << 10))) {}
  ~FileRangeReader() override { ::close(fd_); }

  Result<ByteSpan> Next() override {
    if (left_ == 0) return ByteSpan();
    const size_t want = size_t(std::min<uint64_t>(left_, buf_.size()));
    ssize_t n;
    do {
      n = ::pread(fd_, buf_.data(), want, off_t(at_));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      return IOError("blob " + digest_ + ": cannot read " + path_ + ": " + std::strerror(errno));
    }
    if (n == 0) {
      return IOError("blob " + digest_ + ": " + path_ + " ended " + std::to_string(left_) +
                     " bytes before the range did");
    }
    at_ += uint64_t(n);
    left_ -= uint64_t(n);
    return ByteSpan(buf_.data(), size_t(n));
  }

 private:
  std::string digest_, path_;
  int fd_;
  uint64_t at_, left_;
  std::vector<uint8_t> buf_;
};

}  // namespace

Result<std::unique_ptr<BlobReader>> BlobStore::OpenRange(std::string_view digest, uint64_t offset,
                                                         uint64_t length) const {
  BLZ_ASSIGN_OR_RETURN(BlobInfo info, LocalFile(digest));
  if (offset > info.size || length > info.size - offset) {
    return InvalidArgument("blob " + std::string(digest) + ": range of " + std::to_string(length) +
                           " bytes at " + std::to_string(offset) + " is past its end (" +
                           std::to_string(info.size) + " bytes)");
  }
  const int fd = ::open(info.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("blob " + std::string(digest) + " is not stored");
    return IOError("blob " + std::string(digest) + ": cannot open " + info.path + ": " +
                   std::strerror(errno));
  }
  return std::unique_ptr<BlobReader>(
      new FileRangeReader(std::string(digest), info.path, fd, offset, length));
}

Result<std::unique_ptr<UploadSessionFile>> BlobStore::LockSessionFile(std::string_view) const {
  return Unsupported(std::string(driver()) + " blob store: no session file");
}

Result<std::string> BlobStore::PresignGet(std::string_view digest,
                                          std::chrono::seconds /*expiry*/) const {
  return Unsupported("blob " + std::string(digest) + ": the " + std::string(driver()) +
                     " storage driver has no presigned URLs");
}

Result<ScrubReport> BlobStore::Scrub(const std::function<void(const std::string&)>& log) const {
  ScrubReport report;
  auto note = [&](std::vector<std::string>* list, std::string item, const std::string& line) {
    list->push_back(std::move(item));
    if (log) log(line);
  };
  // List first, then hash: quarantining while iterating would disturb a listing.
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> digests, ListDigests());
  for (const std::string& digest : digests) {
    Result<StoredHash> hashed = HashStored(digest);
    if (!hashed.ok()) {
      if (hashed.status().code() == Code::kNotFound) continue;  // removed meanwhile
      note(&report.errors, hashed.status().ToString(), "scrub: " + hashed.status().ToString());
      continue;
    }
    ++report.blobs;
    report.bytes += hashed->size;
    if (hashed->actual == digest) continue;
    Result<std::string> moved = Quarantine(digest, hashed->identity);
    if (!moved.ok() && moved.status().code() == Code::kNotFound) continue;  // replaced meanwhile
    if (!moved.ok()) {
      note(&report.errors, moved.status().ToString(),
           "scrub: blob " + digest + " is damaged but could not be quarantined: " +
               moved.status().ToString());
      continue;
    }
    note(&report.quarantined, digest,
         "scrub: blob " + digest + " is damaged (its " + std::to_string(hashed->size) +
             " bytes hash to " + hashed->actual + "): moved to " + *moved);
  }
  return report;
}

}  // namespace blz::store
