// The file-system blob driver (store/fs/fs_blob_store.h).
#include "store/fs/fs_blob_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/file_util.h"
#include "core/text.h"

namespace blz::store {
namespace {

std::string Errno(std::string_view what, const std::string& path) {
  return path + ": " + std::string(what) + ": " + std::strerror(errno);
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError(dir + ": cannot create directory: " + ec.message());
  return Status::Ok();
}

Status FsyncFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IOError(Errno("cannot open", path));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return IOError(Errno("fsync failed", path));
  return Status::Ok();
}

}  // namespace

// ---- FsBlobStore ----

FsBlobStore::FsBlobStore(std::string root)
    : BlobStore(root), blobs_dir_(root + "/blobs/sha256"), sha512_dir_(root + "/blobs/sha512") {}

Result<std::unique_ptr<FsBlobStore>> FsBlobStore::Open(const std::string& root) {
  if (root.empty()) return InvalidArgument("blob store: empty data directory");
  std::unique_ptr<FsBlobStore> s(new FsBlobStore(root));
  BLZ_RETURN_IF_ERROR(s->InitLocalDirs());
  BLZ_RETURN_IF_ERROR(MakePrivateDir(root + "/blobs"));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(s->blobs_dir_));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(s->sha512_dir_));
  return s;
}

Result<std::string> FsBlobStore::PathFor(std::string_view digest) const {
  if (!IsValidOciDigest(digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(digest) + "'");
  }
  const std::string_view hex = digest.substr(7);
  const std::string& dir = digest.rfind("sha512:", 0) == 0 ? sha512_dir_ : blobs_dir_;
  return dir + "/" + std::string(hex.substr(0, 2)) + "/" + std::string(hex);
}

Result<BlobInfo> FsBlobStore::Stat(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(std::string path, PathFor(digest));
  Result<uint64_t> size = FileSizeOf(path);
  if (!size.ok()) {
    if (size.status().code() == Code::kNotFound) {
      return NotFound("blob " + std::string(digest) + " is not in the store");
    }
    return size.status();
  }
  BlobInfo info{std::string(digest), *size, path, {}};
  if (Result<std::chrono::system_clock::time_point> t = FileModifiedTime(path); t.ok()) {
    info.modified = *t;
  }
  return info;
}

Result<BlobInfo> FsBlobStore::PublishVerified(const std::string& temp_path,
                                              const std::string& digest, uint64_t size,
                                              bool synced) const {
  if (!synced) BLZ_RETURN_IF_ERROR(FsyncFile(temp_path));
  BLZ_ASSIGN_OR_RETURN(std::string dest, PathFor(digest));
  const std::string shard = dest.substr(0, dest.rfind('/'));
  const std::string algorithm_dir = shard.substr(0, shard.rfind('/'));
  if (::mkdir(shard.c_str(), 0700) == 0) {
    BLZ_RETURN_IF_ERROR(SyncDir(algorithm_dir));
  } else if (errno != EEXIST) {
    return IOError(Errno("cannot create directory", shard));
  }
  if (::rename(temp_path.c_str(), dest.c_str()) != 0) {
    return IOError(Errno("cannot rename " + temp_path + " into place", dest));
  }
  BLZ_RETURN_IF_ERROR(SyncDir(shard));
  return BlobInfo{digest, size, dest, std::chrono::system_clock::now()};
}

Result<std::string> FsBlobStore::Quarantine(std::string_view digest, uint64_t hashed_inode) const {
  BLZ_ASSIGN_OR_RETURN(std::string path, PathFor(digest));
  if (hashed_inode != 0) {
    struct stat now {};
    if (::lstat(path.c_str(), &now) != 0 || uint64_t(now.st_ino) != hashed_inode) {
      return NotFound("blob " + std::string(digest) +
                      " was replaced since it was hashed; the new copy stays");
    }
  }
  const std::string hex = path.substr(path.rfind('/') + 1);
  const std::string dir = quarantine_dir();
  BLZ_RETURN_IF_ERROR(MakeDirs(dir));
  std::string dest = dir + "/" + hex;
  struct stat st {};
  if (::lstat(dest.c_str(), &st) == 0) dest += "." + RandomHex(6);  // quarantined before
  if (::rename(path.c_str(), dest.c_str()) != 0) {
    if (errno == ENOENT) return NotFound("blob " + std::string(digest) + " is not in the store");
    return IOError(Errno("cannot move to " + dest, path));
  }
  BLZ_RETURN_IF_ERROR(SyncDir(dir));
  BLZ_RETURN_IF_ERROR(SyncDir(path.substr(0, path.rfind('/'))));
  return dest;
}

Result<std::vector<std::string>> FsBlobStore::ListDigests() const {
  std::vector<std::string> digests;
  const struct {
    const std::string* dir;
    const char* algorithm;
    size_t hex_digits;
  } trees[] = {{&blobs_dir_, "sha256:", 64}, {&sha512_dir_, "sha512:", 128}};
  for (const auto& tree : trees) {
    std::error_code ec;
    for (std::filesystem::directory_iterator shard(*tree.dir, ec), end; !ec && shard != end;
         shard.increment(ec)) {
      const std::string prefix = shard->path().filename().string();
      std::error_code sec;
      if (!IsLowerHex(prefix, 2) || !shard->is_directory(sec)) continue;
      std::error_code fec;
      for (std::filesystem::directory_iterator f(shard->path(), fec), fend; !fec && f != fend;
           f.increment(fec)) {
        const std::string name = f->path().filename().string();
        if (IsLowerHex(name, tree.hex_digits) && name.compare(0, 2, prefix) == 0) {
          digests.push_back(tree.algorithm + name);
        }
      }
      if (fec) return IOError(shard->path().string() + ": cannot list: " + fec.message());
    }
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return IOError(*tree.dir + ": cannot list: " + ec.message());
    }
  }
  return digests;
}

Result<uint64_t> FsBlobStore::RemoveIfOlder(std::string_view digest,
                                          std::chrono::system_clock::time_point cutoff) const {
  BLZ_ASSIGN_OR_RETURN(std::string path, PathFor(digest));
  const std::string young =
      "blob " + std::string(digest) + " is younger than the grace period";
  // A young file is never moved, not even for a moment: a push that just wrote it may be
  // checking it is there.
  Result<std::chrono::system_clock::time_point> before = FileModifiedTime(path);
  if (!before.ok()) {
    if (before.status().code() == Code::kNotFound) return uint64_t(0);
    return before.status();
  }
  if (*before >= cutoff) return Unavailable(young);
  // Move the file aside, then judge the very file moved: a copy published between the check
  // above and the move (a push of the same bytes) is young, and goes back.
  const std::string aside = NewTempPath("gc");
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    if (errno == ENOENT) return uint64_t(0);
    return IOError(Errno("cannot move blob aside", path));
  }
  BLZ_ASSIGN_OR_RETURN(std::chrono::system_clock::time_point mtime, FileModifiedTime(aside));
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSizeOf(aside));
  if (mtime >= cutoff) {
    // Identical bytes by construction: replacing a copy published meanwhile is harmless.
    if (::rename(aside.c_str(), path.c_str()) != 0) {
      return IOError(Errno("cannot move blob back", path));
    }
    return Unavailable(young);
  }
  if (::unlink(aside.c_str()) != 0) return IOError(Errno("cannot remove", aside));
  return size;
}

Result<StoredHash> FsBlobStore::HashStored(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(std::string path, PathFor(digest));
  struct stat hashed {};
  if (::stat(path.c_str(), &hashed) != 0) {
    if (errno == ENOENT) return NotFound("blob " + std::string(digest) + " is not in the store");
    return IOError(Errno("cannot stat", path));
  }
  BLZ_ASSIGN_OR_RETURN(std::string actual, FileDigestLike(path, digest));
  return StoredHash{actual, uint64_t(hashed.st_size), uint64_t(hashed.st_ino)};
}

// -- upload parts: <root>/uploads/parts-<session>/<name> --

Status FsBlobStore::PutUploadPart(std::string_view session, std::string_view name,
                                  const std::string& path) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("part", name));
  const std::string dir = uploads_dir() + "/parts-" + std::string(session);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return IOError(dir + ": cannot create: " + std::strerror(errno));
  }
  const std::string part = dir + "/" + std::string(name);
  // Same file system (both under uploads/): the chunk is moved, never copied.
  if (::rename(path.c_str(), part.c_str()) != 0) {
    return IOError(part + ": cannot move the chunk into place: " + std::strerror(errno));
  }
  return Status::Ok();
}

namespace {
constexpr const char* kSessionFileName = "data";
}  // namespace

Status FsBlobStore::ConcatUploadParts(std::string_view session,
                                      const std::vector<std::string>& names,
                                      const std::string& dest,
                                      const UploadSessionFile* held) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  const std::string dir = uploads_dir() + "/parts-" + std::string(session);
  for (const std::string& name : names) BLZ_RETURN_IF_ERROR(CheckUploadPartId("part", name));
  // The leading parts kept in the session file: bytes [0, in_file) of it.
  size_t first_ordinary = 0;
  uint64_t in_file = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    uint64_t start = 0, end = 0;
    if (!ParseSessionFilePart(names[i], &start, &end)) continue;
    if (i != first_ordinary || start != in_file) {
      return Corruption("upload session " + std::string(session) + ": part " + names[i] +
                        " is out of order (the session file holds bytes [0, " +
                        std::to_string(in_file) + ") before it)");
    }
    in_file = end;
    first_ordinary = i + 1;
  }
  const std::string session_file = dir + "/" + kSessionFileName;
  if (first_ordinary > 0) {
    if (held != nullptr && held->session() == session && held->path() == session_file &&
        first_ordinary == names.size()) {
      // Cut what failed chunks left past the last part, then link: no byte is copied, and the
      // session keeps its file (a publish that fails loses nothing). While the link exists
      // LockSessionFile hands the file to nobody, so the blob published from it never changes.
      struct stat st {};
      if (::fstat(held->fd(), &st) != 0) return IOError(Errno("cannot stat", session_file));
      if (uint64_t(st.st_size) < in_file) {
        return NotFound(session_file + ": holds " + std::to_string(st.st_size) +
                        " bytes, its parts name " + std::to_string(in_file));
      }
      BLZ_RETURN_IF_ERROR(held->Truncate(in_file));
      if (::link(session_file.c_str(), dest.c_str()) != 0) {
        return IOError(Errno("cannot link " + session_file + " to", dest));
      }
      return Status::Ok();
    }
    int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return IOError(dest + ": cannot create: " + std::strerror(errno));
    ::close(fd);
    Status copied = AppendFilePrefixTo(session_file, in_file, dest);
    if (copied.code() == Code::kNotFound) {
      return NotFound("upload session " + std::string(session) + " lost bytes of its session "
                      "file: " + copied.message());
    }
    BLZ_RETURN_IF_ERROR(copied);
    for (size_t i = first_ordinary; i < names.size(); ++i) {
      const std::string part = dir + "/" + names[i];
      if (::access(part.c_str(), F_OK) != 0) return NotFound(part + ": upload part is missing");
      BLZ_RETURN_IF_ERROR(AppendFileTo(part, dest));
    }
    return Status::Ok();
  }
  if (names.size() == 1) {
    // One chunk, then the closing PUT: the part itself, linked, not copied.
    const std::string part = dir + "/" + names[0];
    if (::link(part.c_str(), dest.c_str()) == 0) return Status::Ok();
    if (errno == ENOENT) return NotFound(part + ": upload part is missing");
  }
  int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IOError(dest + ": cannot create: " + std::strerror(errno));
  ::close(fd);
  for (const std::string& name : names) {
    const std::string part = dir + "/" + name;
    if (::access(part.c_str(), F_OK) != 0) return NotFound(part + ": upload part is missing");
    BLZ_RETURN_IF_ERROR(AppendFileTo(part, dest));
  }
  return Status::Ok();
}

Result<std::unique_ptr<UploadSessionFile>> FsBlobStore::LockSessionFile(
    std::string_view session) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  const std::string dir = uploads_dir() + "/parts-" + std::string(session);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return IOError(Errno("cannot create", dir));
  }
  const std::string path = dir + "/" + kSessionFileName;
  // A few tries: the file may be removed (the session finished or was purged) between the open
  // and the lock, and then the lock is on a file that no longer has this name.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return IOError(Errno("cannot open", path));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return Unavailable(path + ": another request is writing it");
      return IOError(path + ": cannot lock: " + std::strerror(err));
    }
    struct stat held {}, named {};
    if (::fstat(fd, &held) != 0) {
      const int err = errno;
      ::close(fd);
      return IOError(path + ": cannot stat: " + std::strerror(err));
    }
    if (::stat(path.c_str(), &named) != 0 || named.st_ino != held.st_ino ||
        named.st_dev != held.st_dev) {
      ::close(fd);
      continue;  // replaced or removed since the open: try the name again
    }
    if (held.st_nlink != 1) {
      // Linked as a blob being (or already) published: never written again.
      ::close(fd);
      return Unavailable(path + ": linked elsewhere (published by a closing PUT)");
    }
    return std::make_unique<UploadSessionFile>(std::string(session), path, fd,
                                               uint64_t(held.st_size));
  }
  return Unavailable(path + ": replaced while it was being locked");
}

Status FsBlobStore::DeleteUploadParts(std::string_view session) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  RemoveAll(uploads_dir() + "/parts-" + std::string(session));
  return Status::Ok();
}

Result<std::vector<std::string>> FsBlobStore::ListUploadPartSessions() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(uploads_dir(), ec)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("parts-", 0) == 0) out.push_back(fname.substr(6));
  }
  if (ec) return IOError(uploads_dir() + ": cannot list: " + ec.message());
  return out;
}

}  // namespace blz::store
