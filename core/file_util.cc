#include "core/file_util.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "core/digest.h"

namespace blz {
namespace {

std::string Errno(const std::string& what, const std::string& path) {
  return path + ": " + what + ": " + std::strerror(errno);
}

std::string ParentDir(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

}  // namespace

AtomicFile::~AtomicFile() { Abandon(); }

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : fd_(other.fd_), size_(other.size_), dest_(std::move(other.dest_)),
      temp_path_(std::move(other.temp_path_)) {
  other.fd_ = -1;
  other.temp_path_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    fd_ = other.fd_;
    size_ = other.size_;
    dest_ = std::move(other.dest_);
    temp_path_ = std::move(other.temp_path_);
    other.fd_ = -1;
    other.temp_path_.clear();
  }
  return *this;
}

Result<AtomicFile> AtomicFile::Create(const std::string& dest, int mode) {
  AtomicFile f;
  f.dest_ = dest;
  f.temp_path_ = dest + ".tmp-" + RandomHex(6);
  f.fd_ = ::open(f.temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (f.fd_ < 0) {
    Status s = IOError(Errno("cannot create", f.temp_path_));
    f.temp_path_.clear();
    return s;
  }
  return f;
}

Status AtomicFile::Append(ByteSpan data) { return WriteAt(size_, data); }

Status AtomicFile::WriteAt(uint64_t offset, ByteSpan data) {
  if (fd_ < 0) return Internal("AtomicFile: write after commit");
  const uint8_t* p = data.data();
  size_t n = data.size();
  uint64_t off = offset;
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, off_t(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return IOError(Errno("write failed", temp_path_));
    }
    p += w;
    n -= size_t(w);
    off += uint64_t(w);
  }
  if (off > size_) size_ = off;
  return Status::Ok();
}

Status AtomicFile::AppendFromFd(int fd, uint64_t offset, uint64_t length,
                                const std::string& what) {
  if (fd_ < 0) return Internal("AtomicFile: write after commit");
  uint64_t done = 0;
  // copy_file_range moves the bytes without a round trip through user space: for a 300 MB
  // patch payload on this machine's tmpfs and ext4 it was ~10x faster than 1 MiB read/write
  // pairs. Not every pair of file systems supports it; then the loop below does the rest.
  while (done < length) {
    loff_t in_off = loff_t(offset + done), out_off = loff_t(size_);
    ssize_t w = ::copy_file_range(fd, &in_off, fd_, &out_off,
                                  size_t(std::min<uint64_t>(length - done, uint64_t(1) << 30)), 0);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // EXDEV, ENOSYS, EINVAL, EOPNOTSUPP... or the end of `fd`
    done += uint64_t(w);
    size_ = std::max<uint64_t>(size_, uint64_t(out_off));
  }
  std::vector<uint8_t> buf(done < length ? size_t(1) << 20 : 0);
  while (done < length) {
    size_t want = size_t(std::min<uint64_t>(buf.size(), length - done));
    ssize_t r = ::pread(fd, buf.data(), want, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return IOError(Errno("read failed", what));
    }
    if (r == 0) {
      return IOError(what + ": ends at byte " + std::to_string(offset + done) + ", expected " +
                     std::to_string(offset + length));
    }
    BLZ_RETURN_IF_ERROR(Append(ByteSpan(buf.data(), size_t(r))));
    done += uint64_t(r);
  }
  return Status::Ok();
}

Status AtomicFile::Truncate(uint64_t size) {
  if (fd_ < 0) return Internal("AtomicFile: truncate after commit");
  if (::ftruncate(fd_, off_t(size)) != 0) return IOError(Errno("truncate failed", temp_path_));
  size_ = size;
  return Status::Ok();
}

Status AtomicFile::Commit(bool no_replace) {
  if (fd_ < 0) return Internal("AtomicFile: double commit");
  if (::fsync(fd_) != 0) return IOError(Errno("fsync failed", temp_path_));
  if (::close(fd_) != 0) {
    fd_ = -1;
    return IOError(Errno("close failed", temp_path_));
  }
  fd_ = -1;
  if (no_replace) {
    // link() fails with EEXIST instead of replacing: an atomic "create if absent".
    if (::link(temp_path_.c_str(), dest_.c_str()) != 0) {
      Status s = errno == EEXIST ? AlreadyExists(dest_ + ": already exists")
                                 : IOError(Errno("cannot publish", dest_));
      ::unlink(temp_path_.c_str());
      temp_path_.clear();
      return s;
    }
    ::unlink(temp_path_.c_str());
  } else if (::rename(temp_path_.c_str(), dest_.c_str()) != 0) {
    Status s = IOError(Errno("cannot rename into place", dest_));
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
    return s;
  }
  temp_path_.clear();
  return SyncDir(ParentDir(dest_));
}

void AtomicFile::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

Status WriteFileAtomic(const std::string& path, std::string_view data, int mode) {
  BLZ_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path, mode));
  BLZ_RETURN_IF_ERROR(f.Append(data));
  return f.Commit();
}

namespace {

// The bytes of CopyFileHashed in flight: kCopySlots buffers of kCopySlotBytes, filled by the
// copying thread (read, then write) and hashed, in order, by a second thread one or more
// slots behind it. A slot is read into again only after it was hashed and written; both
// threads only read it in between, so what is hashed is what was written.
constexpr size_t kCopySlots = 4;
constexpr size_t kCopySlotBytes = size_t(1) << 20;

class HashBehind {
 public:
  HashBehind() : thread_([this] { Run(); }) {}
  ~HashBehind() { Finish(); }
  HashBehind(const HashBehind&) = delete;
  HashBehind& operator=(const HashBehind&) = delete;

  // The slot to read the next chunk into, once the hasher is done with its last chunk.
  uint8_t* NextSlot() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return filled_ - hashed_ < kCopySlots; });
    return slots_[filled_ % kCopySlots].data();
  }
  // The slot NextSlot() returned now holds `n` bytes to hash.
  void Filled(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[filled_ % kCopySlots] = n;
      ++filled_;
    }
    cv_.notify_all();
  }
  // Waits for every filled slot to be hashed and ends the thread; returns the SHA-256.
  std::string Finish() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    return hex_;
  }

 private:
  void Run() {
    Sha256 sha;
    for (;;) {
      size_t slot = 0, n = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return hashed_ < filled_ || done_; });
        if (hashed_ == filled_) break;
        slot = hashed_ % kCopySlots;
        n = sizes_[slot];
      }
      sha.Update(ByteSpan(slots_[slot].data(), n));
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++hashed_;
      }
      cv_.notify_all();
    }
    hex_ = sha.FinishHex();
  }

  std::vector<std::vector<uint8_t>> slots_ =
      std::vector<std::vector<uint8_t>>(kCopySlots, std::vector<uint8_t>(kCopySlotBytes));
  size_t sizes_[kCopySlots] = {};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t filled_ = 0;  // slots handed to the hasher
  uint64_t hashed_ = 0;  // of those, hashed
  bool done_ = false;
  std::string hex_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

Result<std::string> CopyFileHashed(const std::string& src, const std::string& dest,
                                   const ProgressCallback& progress, bool sync) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return IOError(Errno("cannot open", src));
  struct stat st {};
  const uint64_t size = ::fstat(in, &st) == 0 ? uint64_t(st.st_size) : 0;
  const int out = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    if (e == EEXIST) return AlreadyExists(dest + ": already exists");
    errno = e;
    return IOError(Errno("cannot create", dest));
  }
  // SHA-256 (~1.7 GB/s here) on its own thread, beside the read and write: the copy takes
  // about the longer of the two instead of their sum (docs/benchmarks.md, issue 28).
  HashBehind hasher;
  uint64_t copied = 0;
  Status status;
  for (;;) {
    uint8_t* buf = hasher.NextSlot();
    const ssize_t n = ::read(in, buf, kCopySlotBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = IOError(Errno("read failed", src));
      break;
    }
    if (n == 0) break;
    hasher.Filled(size_t(n));
    for (ssize_t done = 0; done < n && status.ok();) {
      const ssize_t w = ::write(out, buf + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) status = IOError(Errno("write failed", dest));
      done += w < 0 ? 0 : w;
    }
    if (!status.ok()) break;
    copied += uint64_t(n);
    if (progress) progress(copied, std::max(size, copied));
  }
  ::close(in);
  std::string hex = hasher.Finish();
  if (status.ok()) {
    if (sync) {
      if (::fsync(out) != 0) status = IOError(Errno("fsync failed", dest));
    } else {
      (void)::sync_file_range(out, 0, 0, SYNC_FILE_RANGE_WRITE);  // a hint: start write-back
    }
  }
  if (::close(out) != 0 && status.ok()) status = IOError(Errno("close failed", dest));
  if (!status.ok()) {
    ::unlink(dest.c_str());
    return status;
  }
  return hex;
}

Status SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IOError(Errno("cannot open", path));
  Status status;
  if (::fsync(fd) != 0) status = IOError(Errno("fsync failed", path));
  ::close(fd);
  return status;
}

Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(Errno("cannot open", path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return IOError(Errno("cannot stat", path));
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    return TooLarge(path + ": " + std::to_string(st.st_size) + " bytes, more than the cap of " +
                    std::to_string(max_bytes));
  }
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return IOError(Errno("read failed", path));
    }
    if (n == 0) break;
    got += size_t(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Result<uint64_t> FileSizeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return IOError(path + ": not a regular file");
  return uint64_t(st.st_size);
}

Result<std::chrono::system_clock::time_point> FileModifiedTime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IOError(Errno("cannot open directory", dir));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0 && errno != EINVAL) return IOError(Errno("fsync failed", dir));
  return Status::Ok();
}

std::string RandomHex(size_t n_bytes) {
  std::vector<uint8_t> b(n_bytes);
  size_t got = 0;
  while (got < n_bytes) {
    ssize_t n = ::getrandom(b.data() + got, n_bytes - got, 0);
    if (n > 0) got += size_t(n);
  }
  return HexEncode(b);
}

Result<std::string> MakeTempDir(const std::string& parent, std::string_view prefix) {
  std::string tmpl = parent + "/" + std::string(prefix) + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return IOError(Errno("cannot create temp dir", tmpl));
  return std::string(buf.data());
}

void RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

bool IsSafeRelativePath(std::string_view rel) {
  if (rel.empty() || rel.front() == '/' || rel.size() > 4096) return false;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  for (char c : rel) {
    if (c == '\\' || c == '\0') return false;
  }
  return true;
}

}  // namespace blz
