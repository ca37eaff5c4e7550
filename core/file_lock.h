// An exclusive advisory lock on a file (flock(2)), held for the lifetime of a FileLock.
//
// Used by `blz serve` to own its data directory (<data>/blz.lock, registry/run_server.cc): a
// second server on the same directory is refused instead of silently sharing it; and, waiting
// (Wait), around the client store's read-modify-write of its index and usage files. The lock
// belongs to the open file description, so two FileLocks on one path conflict even inside one
// process, and it is released by the kernel when the process dies (no stale locks after a
// crash or SIGKILL). The holder's PID is written into the file for the error message of the
// next one; the file itself is left in place (removing it would race with a new holder).
#ifndef BLZ_CORE_FILE_LOCK_H_
#define BLZ_CORE_FILE_LOCK_H_

#include <string>

#include "core/status.h"

namespace blz {

class FileLock {
 public:
  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Opens (creating, mode 0644) `path` and takes an exclusive lock without waiting; then
  // replaces the file's contents with "<pid>\n". The parent directory must exist.
  // Errors: kUnavailable when another open file holds the lock ("'<path>' is locked by process
  // <pid>", or "by another process" when the file names no PID); kIOError when the file
  // cannot be opened, locked or written.
  static Result<FileLock> Acquire(const std::string& path);

  // Opens (creating, mode 0644) `path` and takes an exclusive lock, waiting for the holder to
  // release it; writes nothing to the file. For short critical sections between cooperating
  // processes (the client's store indexes and usage record). Errors: kIOError.
  static Result<FileLock> Wait(const std::string& path);

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Releases the lock now (the destructor does it too). Idempotent.
  void Release();

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace blz

#endif  // BLZ_CORE_FILE_LOCK_H_
