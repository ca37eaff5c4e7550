// Files written atomically, and small-file helpers.
//
// AtomicFile writes to a temporary file in the destination's directory
// ("<dest>.tmp-<random>"), and Commit() flushes it (fsync), renames it over the destination
// and fsyncs the directory. If Commit() is never called the destructor removes the temporary
// file, so a crash or an error never leaves a half-written destination visible.
#ifndef BLZ_CORE_FILE_UTIL_H_
#define BLZ_CORE_FILE_UTIL_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <string_view>

#include "core/bytes.h"
#include "core/progress_fn.h"
#include "core/status.h"

namespace blz {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Creates the temporary file (mode 0644 unless `mode` given). The parent directory must exist.
  static Result<AtomicFile> Create(const std::string& dest, int mode = 0644);

  // Appends at the current end.
  Status Append(ByteSpan data);
  Status Append(std::string_view data) { return Append(AsBytes(data)); }
  // Appends bytes [offset, offset + length) of the open file `fd` (read with pread, so its
  // file position is unchanged). Copies inside the kernel where it can (copy_file_range),
  // else through a buffer. kIOError if `fd` ends early or a read or write fails; `what` names
  // `fd` in messages.
  Status AppendFromFd(int fd, uint64_t offset, uint64_t length, const std::string& what);
  // Writes at an absolute offset (the file grows as needed; holes read as zeros).
  Status WriteAt(uint64_t offset, ByteSpan data);
  // Sets the file length (for pre-sizing before WriteAt).
  Status Truncate(uint64_t size);
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& temp_path() const { return temp_path_; }
  const std::string& dest_path() const { return dest_; }

  // fsync, rename over dest (replacing it unless `no_replace`), fsync the directory.
  // With no_replace, fails with kAlreadyExists if dest exists.
  Status Commit(bool no_replace = false);
  // Removes the temporary file now.
  void Abandon();

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string dest_;
  std::string temp_path_;
};

// Writes `data` to `path` atomically.
Status WriteFileAtomic(const std::string& path, std::string_view data, int mode = 0644);

// Copies the file at `src` to `dest`, which must not exist (kAlreadyExists), hashing the bytes
// as they are written, in 1 MiB reads (the hash on a second thread, a few reads behind), and
// returns their SHA-256 (64 hex): what `dest` holds is exactly what was hashed, whatever
// happens to `src` meanwhile. `dest` is written in place (give a staging path and rename it
// into place); on an error it is removed. With `sync` the
// copy is fsynced before this returns; without, its write-back is only started
// (sync_file_range), so that it proceeds while the caller works on, and the caller must
// SyncFile(dest) before it relies on the copy surviving a crash. `progress` (may be empty) gets
// (bytes copied, size of `src` at open) after each read. Errors: kIOError (naming the file).
Result<std::string> CopyFileHashed(const std::string& src, const std::string& dest,
                                   const ProgressCallback& progress, bool sync = true);

// fsyncs the file at `path`. Errors: kIOError.
Status SyncFile(const std::string& path);

// Reads a whole file, refusing files larger than `max_bytes`.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes);

// The size of the regular file at `path`, in bytes. Errors: kNotFound (no such file), kIOError
// (cannot stat; not a regular file).
Result<uint64_t> FileSizeOf(const std::string& path);

// When the file at `path` was last written (its mtime). Errors: kNotFound, kIOError.
Result<std::chrono::system_clock::time_point> FileModifiedTime(const std::string& path);

// fsyncs a directory (after a rename into it).
Status SyncDir(const std::string& dir);

// A random lower-case hex string of 2*n_bytes digits (from the OS's CSPRNG).
std::string RandomHex(size_t n_bytes);

// Creates a fresh empty directory "<parent>/<prefix>XXXXXX". Returns its path.
Result<std::string> MakeTempDir(const std::string& parent, std::string_view prefix);

// Removes a file or directory tree; ignores a missing path.
void RemoveAll(const std::string& path);

// RemoveAll(path) when it goes out of scope, unless Release() was called first: for staging
// files and directories that must not outlive a failed operation.
class ScopedRemoveAll {
 public:
  explicit ScopedRemoveAll(std::string path) : path_(std::move(path)) {}
  ~ScopedRemoveAll() {
    if (!path_.empty()) RemoveAll(path_);
  }
  ScopedRemoveAll(const ScopedRemoveAll&) = delete;
  ScopedRemoveAll& operator=(const ScopedRemoveAll&) = delete;
  // Keeps the path (it was renamed into place, say).
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

// Is `rel` a safe relative path: not empty, not absolute, no "." / ".." / empty components,
// no backslashes or NUL? Archive file names must pass this before being joined to a directory.
bool IsSafeRelativePath(std::string_view rel);

}  // namespace blz

#endif  // BLZ_CORE_FILE_UTIL_H_
