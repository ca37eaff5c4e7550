#include "store/blob_store.h"

#include <fcntl.h>
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

// Creates `dir` (and its parents) if needed and makes it owner-only (0700, whatever the
// umask): the data directory holds private blobs and the metadata DB. An existing directory
// open to others is tightened with a warning on stderr.
Status MakePrivateDir(const std::string& dir) {
  struct stat st {};
  const bool existed = ::stat(dir.c_str(), &st) == 0;
  BLZ_RETURN_IF_ERROR(MakeDirs(dir));
  if (::stat(dir.c_str(), &st) != 0) return IOError(Errno("cannot stat", dir));
  if ((st.st_mode & 077) == 0) return Status::Ok();
  if (::chmod(dir.c_str(), 0700) != 0) return IOError(Errno("cannot set mode 0700", dir));
  if (existed) {
    std::fprintf(stderr, "blz: warning: %s was mode %03o (readable by others); set to 0700\n",
                 EscapeForTerminal(dir).c_str(), static_cast<unsigned>(st.st_mode & 0777));
  }
  return Status::Ok();
}

Result<uint64_t> FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IOError(Errno("cannot stat", path));
  }
  if (!S_ISREG(st.st_mode)) return IOError(path + ": not a regular file");
  return uint64_t(st.st_size);
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
  if (file_.fd() < 0) return Internal("BlobWriter: double commit");
  const uint64_t size = file_.size();
  std::string actual = hash_.FinishHex();
  if (!expected_hex.empty() && actual != expected_hex) {
    Abandon();
    return DigestMismatch("blob digest mismatch: expected sha256:" + std::string(expected_hex) +
                          ", the " + std::to_string(size) + " bytes received hash to sha256:" +
                          actual);
  }
  // Durable under its uploads name first (AtomicFile: fsync, rename), then moved into place.
  const std::string staged = file_.dest_path();
  BLZ_RETURN_IF_ERROR(file_.Commit(/*no_replace=*/true));
  Result<BlobInfo> info = store_.MoveIntoPlace(staged, MakeDigest(actual), size);
  if (!info.ok()) ::unlink(staged.c_str());
  return info;
}

void BlobWriter::Abandon() { file_.Abandon(); }

// ---- BlobStore ----

Result<BlobStore> BlobStore::Open(const std::string& root) {
  if (root.empty()) return InvalidArgument("blob store: empty data directory");
  BlobStore s;
  s.root_ = root;
  s.blobs_dir_ = root + "/blobs/sha256";
  s.uploads_dir_ = root + "/uploads";
  BLZ_RETURN_IF_ERROR(MakePrivateDir(root));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(root + "/blobs"));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(s.blobs_dir_));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(s.sha512_dir_ = root + "/blobs/sha512"));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(s.uploads_dir_));
  return s;
}

Result<std::string> BlobStore::PathFor(std::string_view digest) const {
  if (!IsValidOciDigest(digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(digest) + "'");
  }
  const std::string_view hex = digest.substr(7);
  const std::string& dir = digest.rfind("sha512:", 0) == 0 ? sha512_dir_ : blobs_dir_;
  return dir + "/" + std::string(hex.substr(0, 2)) + "/" + std::string(hex);
}

Result<BlobInfo> BlobStore::Stat(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(std::string path, PathFor(digest));
  Result<uint64_t> size = FileSize(path);
  if (!size.ok()) {
    if (size.status().code() == Code::kNotFound) {
      return NotFound("blob " + std::string(digest) + " is not in the store");
    }
    return size.status();
  }
  return BlobInfo{std::string(digest), *size, path};
}

std::string BlobStore::NewTempPath(std::string_view prefix) const {
  return uploads_dir_ + "/" + std::string(prefix) + "-" + RandomHex(12);
}

Result<BlobInfo> BlobStore::MoveIntoPlace(const std::string& temp_path,
                                          const std::string& digest, uint64_t size) const {
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
  return BlobInfo{digest, size, dest};
}

Result<BlobInfo> BlobStore::Publish(const std::string& temp_path,
                                    std::string_view expected_digest) const {
  if (!IsValidOciDigest(expected_digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(expected_digest) + "'");
  }
  if (temp_path.rfind(uploads_dir_ + "/", 0) != 0) {
    return Internal("blob store: " + temp_path + " is not under " + uploads_dir_);
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSize(temp_path));
  BLZ_ASSIGN_OR_RETURN(std::string actual, FileDigestLike(temp_path, expected_digest));
  if (actual != expected_digest) {
    return DigestMismatch("blob digest mismatch: expected " + std::string(expected_digest) +
                          ", the " + std::to_string(size) + " bytes received hash to " + actual);
  }
  BLZ_RETURN_IF_ERROR(FsyncFile(temp_path));
  return MoveIntoPlace(temp_path, actual, size);
}

Result<BlobInfo> BlobStore::PublishComputed(const std::string& temp_path) const {
  BLZ_ASSIGN_OR_RETURN(std::string actual, Sha256FileHex(temp_path));
  return Publish(temp_path, MakeDigest(actual));
}

Result<BlobWriter> BlobStore::NewWriter() const {
  BlobWriter w;
  w.store_ = *this;
  BLZ_ASSIGN_OR_RETURN(w.file_, AtomicFile::Create(NewTempPath("blob"), 0600));
  return w;
}

Result<BlobInfo> BlobStore::PutBytes(std::string_view data,
                                     std::string_view expected_digest) const {
  BLZ_ASSIGN_OR_RETURN(BlobWriter w, NewWriter());
  BLZ_RETURN_IF_ERROR(w.Append(data));
  return expected_digest.empty() ? w.CommitComputed() : w.Commit(expected_digest);
}

Result<std::string> BlobStore::Quarantine(std::string_view digest, uint64_t hashed_inode) const {
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

Result<std::vector<std::string>> BlobStore::ListDigests() const {
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

Result<uint64_t> BlobStore::RemoveIfOlder(std::string_view digest,
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
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSize(aside));
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

Result<ScrubReport> BlobStore::Scrub(const std::function<void(const std::string&)>& log) const {
  ScrubReport report;
  auto note = [&](std::vector<std::string>* list, std::string item, const std::string& line) {
    list->push_back(std::move(item));
    if (log) log(line);
  };
  // List first, then hash: quarantining while iterating would disturb the iterator.
  BLZ_ASSIGN_OR_RETURN(std::vector<std::string> digests, ListDigests());

  for (const std::string& digest : digests) {
    Result<BlobInfo> info = Stat(digest);
    if (!info.ok()) {
      if (info.status().code() == Code::kNotFound) continue;  // removed meanwhile
      note(&report.errors, info.status().ToString(), "scrub: " + info.status().ToString());
      continue;
    }
    struct stat hashed {};
    if (::stat(info->path.c_str(), &hashed) != 0) continue;  // removed meanwhile
    Result<std::string> actual = FileDigestLike(info->path, digest);
    if (!actual.ok()) {
      note(&report.errors, actual.status().ToString(), "scrub: " + actual.status().ToString());
      continue;
    }
    ++report.blobs;
    report.bytes += info->size;
    if (*actual == digest) continue;
    Result<std::string> moved = Quarantine(digest, uint64_t(hashed.st_ino));
    if (!moved.ok() && moved.status().code() == Code::kNotFound) continue;  // replaced meanwhile
    if (!moved.ok()) {
      note(&report.errors, moved.status().ToString(),
           "scrub: blob " + digest + " is damaged but could not be quarantined: " +
               moved.status().ToString());
      continue;
    }
    note(&report.quarantined, digest,
         "scrub: blob " + digest + " is damaged (its " + std::to_string(info->size) +
             " bytes hash to " + *actual + "): moved to " + *moved);
  }
  return report;
}

Status BlobStore::Verify(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(BlobInfo info, Stat(digest));
  BLZ_ASSIGN_OR_RETURN(std::string actual, FileDigestLike(info.path, digest));
  if (actual != digest) {
    return DigestMismatch(info.path + ": stored blob " + std::string(digest) +
                          " now hashes to " + actual);
  }
  return Status::Ok();
}

}  // namespace blz::store
