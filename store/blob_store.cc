#include "store/blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/file_util.h"

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
  Result<BlobInfo> info = store_.MoveIntoPlace(staged, actual, size);
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
  BLZ_RETURN_IF_ERROR(MakeDirs(s.blobs_dir_));
  BLZ_RETURN_IF_ERROR(MakeDirs(s.uploads_dir_));
  return s;
}

Result<std::string> BlobStore::PathFor(std::string_view digest) const {
  Result<std::string> hex = ParseDigest(digest);
  if (!hex.ok()) return InvalidArgument("invalid blob digest '" + std::string(digest) + "'");
  return blobs_dir_ + "/" + hex->substr(0, 2) + "/" + *hex;
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

Result<BlobInfo> BlobStore::MoveIntoPlace(const std::string& temp_path, const std::string& hex,
                                          uint64_t size) const {
  const std::string shard = blobs_dir_ + "/" + hex.substr(0, 2);
  if (::mkdir(shard.c_str(), 0755) == 0) {
    BLZ_RETURN_IF_ERROR(SyncDir(blobs_dir_));
  } else if (errno != EEXIST) {
    return IOError(Errno("cannot create directory", shard));
  }
  const std::string dest = shard + "/" + hex;
  if (::rename(temp_path.c_str(), dest.c_str()) != 0) {
    return IOError(Errno("cannot rename " + temp_path + " into place", dest));
  }
  BLZ_RETURN_IF_ERROR(SyncDir(shard));
  return BlobInfo{MakeDigest(hex), size, dest};
}

Result<BlobInfo> BlobStore::Publish(const std::string& temp_path,
                                    std::string_view expected_digest) const {
  Result<std::string> expected = ParseDigest(expected_digest);
  if (!expected.ok()) {
    return InvalidArgument("invalid blob digest '" + std::string(expected_digest) + "'");
  }
  if (temp_path.rfind(uploads_dir_ + "/", 0) != 0) {
    return Internal("blob store: " + temp_path + " is not under " + uploads_dir_);
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t size, FileSize(temp_path));
  BLZ_ASSIGN_OR_RETURN(std::string actual, Sha256FileHex(temp_path));
  if (actual != *expected) {
    return DigestMismatch("blob digest mismatch: expected " + std::string(expected_digest) +
                          ", the " + std::to_string(size) + " bytes received hash to sha256:" +
                          actual);
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
  BLZ_ASSIGN_OR_RETURN(w.file_, AtomicFile::Create(NewTempPath("blob")));
  return w;
}

Result<BlobInfo> BlobStore::PutBytes(std::string_view data,
                                     std::string_view expected_digest) const {
  BLZ_ASSIGN_OR_RETURN(BlobWriter w, NewWriter());
  BLZ_RETURN_IF_ERROR(w.Append(data));
  return expected_digest.empty() ? w.CommitComputed() : w.Commit(expected_digest);
}

Status BlobStore::Verify(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(BlobInfo info, Stat(digest));
  BLZ_ASSIGN_OR_RETURN(std::string actual, Sha256FileHex(info.path));
  if (MakeDigest(actual) != digest) {
    return DigestMismatch(info.path + ": stored blob " + std::string(digest) +
                          " now hashes to sha256:" + actual);
  }
  return Status::Ok();
}

}  // namespace blz::store
