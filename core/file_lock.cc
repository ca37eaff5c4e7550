#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace blz {
namespace {

std::string Errno() { return std::strerror(errno); }

// The PID recorded in the lock file by its holder ("" when it names none).
std::string RecordedPid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, size_t(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return "";
  return s;
}

}  // namespace

FileLock::~FileLock() { Release(); }

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

void FileLock::Release() {
  if (fd_ < 0) return;
  ::close(fd_);  // closing the only descriptor of the open file releases the flock
  fd_ = -1;
}

Result<FileLock> FileLock::Acquire(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IOError("cannot open lock file '" + path + "': " + Errno());
  FileLock lock;
  lock.fd_ = fd;
  lock.path_ = path;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      const std::string pid = RecordedPid(fd);
      return Unavailable("'" + path + "' is locked by " +
                         (pid.empty() ? std::string("another process") : "process " + pid));
    }
    return IOError("cannot lock '" + path + "': " + Errno());
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    return IOError("cannot write lock file '" + path + "': " + Errno());
  }
  return lock;
}

Result<FileLock> FileLock::Wait(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IOError("cannot open lock file '" + path + "': " + Errno());
  FileLock lock;
  lock.fd_ = fd;
  lock.path_ = path;
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return IOError("cannot lock '" + path + "': " + Errno());
  }
  return lock;
}

}  // namespace blz
