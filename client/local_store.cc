#include "client/local_store.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "client/reference.h"
#include "client/snapshot.h"
#include "client/usage.h"
#include "core/digest.h"
#include "core/file_lock.h"
#include "core/file_util.h"

namespace blz::client {
namespace {

namespace fs = std::filesystem;

// A kept prefix is at most magic + archive header + padding (formats/blz_archive.h).
constexpr uint64_t kMaxKeptPrefixBytes =
    24 + formats::kMaxArchiveHeaderBytes + formats::kArchiveAlignment;
// Bytes read, hashed and written per step when a kept version is rebuilt into blobs/.
constexpr uint64_t kRebuildChunk = 8ull << 20;

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

Status MakeDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return IOError(path + ": cannot create directory: " + ec.message());
  return Status::Ok();
}

// <root>/sha256/<first 2 hex>/<64 hex> for "sha256:<hex>".
std::string ByDigest(const std::string& root, std::string_view digest) {
  std::string_view hex = digest.substr(digest.find(':') + 1);
  return root + "/sha256/" + std::string(hex.substr(0, 2)) + "/" + std::string(hex);
}

bool IsRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsTempName(const std::string& name) { return name.find(".tmp-") != std::string::npos; }

// Removes "*.tmp-*" entries anywhere below `root`. Returns how many were removed.
uint64_t RemoveTempFilesBelow(const std::string& root) {
  uint64_t removed = 0;
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (IsTempName(it->path().filename().string())) doomed.push_back(it->path());
  }
  for (const fs::path& p : doomed) {
    std::error_code rm_ec;
    if (fs::remove_all(p, rm_ec) > 0) ++removed;
  }
  return removed;
}

Status ValidateRepo(std::string_view registry, std::string_view repository) {
  Result<RegistryAddress> addr = ParseRegistryAddress(registry);
  if (!addr.ok() || addr->ToString() != registry) {
    return InvalidArgument("local store: invalid registry '" + std::string(registry) + "'");
  }
  if (!IsValidRepositoryName(repository)) {
    return InvalidArgument("local store: invalid repository name '" + std::string(repository) +
                           "'");
  }
  return Status::Ok();
}

struct Index {
  std::vector<HeldVersion> versions;
};

Result<Index> ReadIndex(const std::string& path) {
  Index index;
  Result<std::string> text = ReadSmallFile(path, kMaxIndexBytes);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return index;
    return text.status();
  }
  try {
    nlohmann::json doc = nlohmann::json::parse(*text);
    for (const nlohmann::json& v : doc.at("versions")) {
      HeldVersion hv;
      hv.digest = v.at("digest").get<std::string>();
      if (!ParseDigest(hv.digest).ok()) {
        return Corruption(path + ": invalid digest '" + hv.digest + "'");
      }
      hv.size = v.at("size").get<uint64_t>();
      hv.seq = v.at("seq").get<uint64_t>();
      hv.pulled_at = v.value("pulled_at", int64_t{0});
      if (v.contains("tags")) hv.tags = v.at("tags").get<std::vector<std::string>>();
      hv.manifest_digest = v.value("manifest", std::string());
      if (!hv.manifest_digest.empty() && !ParseDigest(hv.manifest_digest).ok()) {
        hv.manifest_digest.clear();
      }
      index.versions.push_back(std::move(hv));
    }
  } catch (const nlohmann::json::exception& e) {
    return Corruption(path + ": invalid index: " + e.what());
  }
  return index;
}

Status WriteIndex(const std::string& path, std::string_view registry,
                  std::string_view repository, const Index& index) {
  nlohmann::ordered_json doc;
  doc["registry"] = registry;
  doc["repository"] = repository;
  doc["versions"] = nlohmann::ordered_json::array();
  for (const HeldVersion& v : index.versions) {
    nlohmann::ordered_json e;
    e["digest"] = v.digest;
    e["size"] = v.size;
    e["tags"] = v.tags;
    e["seq"] = v.seq;
    e["pulled_at"] = v.pulled_at;
    if (!v.manifest_digest.empty()) e["manifest"] = v.manifest_digest;
    doc["versions"].push_back(std::move(e));
  }
  return WriteFileAtomic(path, doc.dump(1) + "\n");
}

// The registry and repository an index.json names; false when it is unreadable or they are
// not valid (such an index is skipped).
bool ReadIndexNames(const std::string& path, std::string* registry, std::string* repository) {
  Result<std::string> text = ReadSmallFile(path, kMaxIndexBytes);
  if (!text.ok()) return false;
  try {
    nlohmann::json doc = nlohmann::json::parse(*text);
    *registry = doc.at("registry").get<std::string>();
    *repository = doc.at("repository").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return ValidateRepo(*registry, *repository).ok();
}

}  // namespace

Result<std::string> LocalStore::ResolveDir(const std::string& flag_dir) {
  if (!flag_dir.empty()) return flag_dir;
  std::string env = EnvOrEmpty("BLZ_CACHE_DIR");
  if (!env.empty()) return env;
  std::string xdg = EnvOrEmpty("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/blz";
  std::string home = EnvOrEmpty("HOME");
  if (!home.empty()) return home + "/.cache/blz";
  return NotFound("cannot locate the local store: pass --cache or set BLZ_CACHE_DIR");
}

Result<LocalStore> LocalStore::Open(const std::string& dir) {
  LocalStore store;
  store.dir_ = dir;
  while (store.dir_.size() > 1 && store.dir_.back() == '/') store.dir_.pop_back();
  BLZ_RETURN_IF_ERROR(MakeDir(store.dir_ + "/blobs/sha256"));
  BLZ_RETURN_IF_ERROR(MakeDir(store.dir_ + "/repos"));
  BLZ_RETURN_IF_ERROR(MakeDir(store.dir_ + "/tmp"));

  std::string lock_path = store.dir_ + "/lock";
  store.lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (store.lock_fd_ < 0) {
    return IOError(lock_path + ": cannot open lock file: " + std::strerror(errno));
  }
  if (::flock(store.lock_fd_, LOCK_EX | LOCK_NB) == 0) {
    // Nobody else has the store open: whatever is staged is left over from a dead run.
    std::error_code ec;
    for (fs::directory_iterator it(store.dir_ + "/tmp", ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code rm_ec;
      if (fs::remove_all(it->path(), rm_ec) > 0) ++store.stale_removed_;
    }
    store.stale_removed_ += RemoveTempFilesBelow(store.dir_ + "/blobs");
    store.stale_removed_ += RemoveTempFilesBelow(store.dir_ + "/repos");
    store.stale_removed_ += RemoveTempFilesBelow(store.dir_ + "/files");
    // Top-level files written atomically (usage.json, client/usage.h) only while the store is
    // open: a "<name>.tmp-*" here is from a writer that died.
    std::error_code ec2;
    for (fs::directory_iterator it(store.dir_, ec2), end; !ec2 && it != end; it.increment(ec2)) {
      std::error_code type_ec;
      if (IsTempName(it->path().filename().string()) && it->is_regular_file(type_ec)) {
        std::error_code rm_ec;
        if (fs::remove(it->path(), rm_ec)) ++store.stale_removed_;
      }
    }
  }
  // Downgrade (or take) the shared lock that marks the store as in use.
  while (::flock(store.lock_fd_, LOCK_SH) != 0) {
    if (errno != EINTR) return IOError(lock_path + ": cannot lock: " + std::strerror(errno));
  }
  return store;
}

LocalStore::~LocalStore() { Release(); }

LocalStore::LocalStore(LocalStore&& other) noexcept
    : dir_(std::move(other.dir_)), lock_fd_(other.lock_fd_),
      stale_removed_(other.stale_removed_) {
  other.lock_fd_ = -1;
}

LocalStore& LocalStore::operator=(LocalStore&& other) noexcept {
  if (this != &other) {
    Release();
    dir_ = std::move(other.dir_);
    lock_fd_ = other.lock_fd_;
    stale_removed_ = other.stale_removed_;
    other.lock_fd_ = -1;
  }
  return *this;
}

void LocalStore::Release() {
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
}

std::string LocalStore::BlobPath(std::string_view digest) const {
  return ByDigest(dir_ + "/blobs", digest);
}

bool LocalStore::HasBlob(std::string_view digest) const {
  return ParseDigest(digest).ok() && IsRegularFile(BlobPath(digest));
}

std::string LocalStore::UnpackedPath(std::string_view digest) const {
  return ByDigest(dir_ + "/unpacked", digest);
}

bool LocalStore::HasUnpacked(std::string_view digest) const {
  return ParseDigest(digest).ok() && IsRegularFile(UnpackedPath(digest) + "/prefix");
}

namespace {

// The kept prefix and size of the version kept at `dir` (LocalStore::UnpackedPath).
Status ReadKept(const std::string& dir, std::string* prefix, uint64_t* size) {
  BLZ_ASSIGN_OR_RETURN(*prefix, ReadSmallFile(dir + "/prefix", kMaxKeptPrefixBytes));
  BLZ_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(dir + "/size", 32));
  while (!text.empty() && text.back() == '\n') text.pop_back();
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return Corruption(dir + "/size: not a decimal size: '" + text + "'");
  }
  *size = v;
  return Status::Ok();
}

}  // namespace

Status LocalStore::KeepAsFiles(std::string_view digest, ByteSpan prefix, uint64_t size) {
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid digest " + std::string(digest));
  const std::string what = "kept version " + std::string(digest);
  BLZ_ASSIGN_OR_RETURN(formats::ArchiveHeader h, formats::ParseArchivePrefix(prefix, size));
  if (HasUnpacked(digest)) return Status::Ok();
  const std::string dest = UnpackedPath(digest);
  BLZ_RETURN_IF_ERROR(MakeDir(dest.substr(0, dest.rfind('/'))));
  BLZ_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir());
  ScopedRemoveAll guard(staging);
  const std::string built = staging + "/kept";
  BLZ_RETURN_IF_ERROR(MakeDir(built));
  const ByteSpan stored = prefix.subspan(0, size_t(h.data_start));
  BLZ_RETURN_IF_ERROR(WriteFileAtomic(
      built + "/prefix",
      std::string_view(reinterpret_cast<const char*>(stored.data()), stored.size()), 0444));
  BLZ_RETURN_IF_ERROR(WriteFileAtomic(built + "/size", std::to_string(size) + "\n", 0444));
  // The files/ entries are linked under snapshots.lock: a snapshot change sweeps the entries
  // nothing else links (client/snapshot.h), and these links are what keeps them from then on.
  BLZ_ASSIGN_OR_RETURN(FileLock lock, FileLock::Wait(dir_ + "/snapshots.lock"));
  for (size_t i = 0; i < h.files.size(); ++i) {
    const formats::ArchiveFile& f = h.files[i];
    const std::string entry = FilesEntryPath(dir_, f.sha256);
    const std::string link = built + "/" + std::to_string(i);
    if (::link(entry.c_str(), link.c_str()) != 0) {
      if (errno == ENOENT) {
        return NotFound(what + ": file '" + f.path + "' has no files/ entry " + entry);
      }
      return IOError(what + ": cannot link " + entry + " to " + link + ": " +
                     std::strerror(errno));
    }
  }
  if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) return Status::Ok();  // kept by another pull
    return IOError(what + ": cannot rename " + built + " to " + dest + ": " +
                   std::strerror(errno));
  }
  return SyncDir(dest.substr(0, dest.rfind('/')));
}

Result<formats::PackLayout> LocalStore::OpenUnpacked(std::string_view digest) const {
  if (!HasUnpacked(digest)) {
    return NotFound("local store: " + std::string(digest) + " is not kept as files");
  }
  const std::string dir = UnpackedPath(digest);
  std::string prefix;
  uint64_t size = 0;
  BLZ_RETURN_IF_ERROR(ReadKept(dir, &prefix, &size));
  BLZ_ASSIGN_OR_RETURN(formats::ArchiveHeader h,
                       formats::ParseArchivePrefix(AsBytes(prefix), size));
  std::vector<std::string> files;
  files.reserve(h.files.size());
  for (size_t i = 0; i < h.files.size(); ++i) files.push_back(dir + "/" + std::to_string(i));
  return formats::PackLayout::FromArchivePrefix(AsBytes(prefix), size, files);
}

Result<formats::ArchiveHeader> LocalStore::HeldHeader(std::string_view digest) const {
  if (HasBlob(digest)) {
    BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(BlobPath(digest)));
    return archive.header();
  }
  if (!HasUnpacked(digest)) return NotFound("local store: " + std::string(digest) + " is not held");
  std::string prefix;
  uint64_t size = 0;
  BLZ_RETURN_IF_ERROR(ReadKept(UnpackedPath(digest), &prefix, &size));
  return formats::ParseArchivePrefix(AsBytes(prefix), size);
}

Result<std::string> LocalStore::ArchivePath(std::string_view digest) {
  if (HasBlob(digest)) return BlobPath(digest);
  BLZ_ASSIGN_OR_RETURN(formats::PackLayout layout, OpenUnpacked(digest));
  BLZ_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir());
  ScopedRemoveAll guard(staging);
  const std::string staged = staging + "/rebuilt.blz";
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(staged));
  Sha256 sha;
  std::vector<uint8_t> buf(kRebuildChunk);
  const uint64_t total = layout.header().total_size;
  for (uint64_t at = 0; at < total;) {
    const uint64_t n = std::min<uint64_t>(kRebuildChunk, total - at);
    BLZ_RETURN_IF_ERROR(layout.ReadInto(at, n, buf.data()));
    const ByteSpan chunk(buf.data(), size_t(n));
    sha.Update(chunk);
    BLZ_RETURN_IF_ERROR(out.Append(chunk));
    at += n;
  }
  const std::string got = "sha256:" + HexEncode(sha.Finish());
  if (got != digest) {
    return DigestMismatch("local store: the files kept for " + std::string(digest) +
                          " rebuild an archive with digest " + got +
                          " (a kept file was changed in place)");
  }
  BLZ_RETURN_IF_ERROR(out.Commit());
  return PublishBlob(staged, digest);
}

Status LocalStore::VerifyBlob(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(std::string want, ParseDigest(digest));
  std::string path = BlobPath(digest);
  if (!HasBlob(digest) && HasUnpacked(digest)) {
    BLZ_ASSIGN_OR_RETURN(formats::PackLayout layout, OpenUnpacked(digest));
    BLZ_ASSIGN_OR_RETURN(std::string got, layout.ArchiveDigest());
    if (got != digest) {
      return DigestMismatch(UnpackedPath(digest) + ": the kept files give " + got + ", not " +
                            std::string(digest));
    }
    return Status::Ok();
  }
  if (!HasBlob(digest)) return NotFound(path + ": blob " + std::string(digest) + " is not held");
  BLZ_ASSIGN_OR_RETURN(std::string got, Sha256FileHex(path));
  if (got != want) {
    return DigestMismatch(path + ": held blob hashes to sha256:" + got + ", not " +
                          std::string(digest));
  }
  return Status::Ok();
}

Status LocalStore::RemoveBlob(std::string_view digest) {
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid digest " + std::string(digest));
  std::string path = BlobPath(digest);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return IOError(path + ": cannot remove: " + std::strerror(errno));
  }
  const std::string kept = UnpackedPath(digest);
  std::error_code ec;
  fs::remove_all(kept, ec);
  if (ec) return IOError(kept + ": cannot remove: " + ec.message());
  return Status::Ok();
}

Result<std::string> LocalStore::MakeStagingDir() const {
  return MakeTempDir(dir_ + "/tmp", "op-");
}

Result<std::string> LocalStore::PublishBlob(const std::string& staged_path,
                                            std::string_view digest) {
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid digest " + std::string(digest));
  std::string path = BlobPath(digest);
  std::string parent = path.substr(0, path.rfind('/'));
  BLZ_RETURN_IF_ERROR(MakeDir(parent));
  if (HasBlob(digest)) {
    ::unlink(staged_path.c_str());
    return path;
  }
  if (::rename(staged_path.c_str(), path.c_str()) != 0) {
    return IOError("cannot move " + staged_path + " to " + path + ": " + std::strerror(errno));
  }
  BLZ_RETURN_IF_ERROR(SyncDir(parent));
  return path;
}

Result<std::string> LocalStore::AdoptBlob(const std::string& path, std::string_view digest,
                                          bool may_link) {
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid digest " + std::string(digest));
  if (HasBlob(digest)) return BlobPath(digest);
  BLZ_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir());
  ScopedRemoveAll guard(staging);
  const std::string staged = staging + "/adopted.blz";
  bool linked = may_link && ::link(path.c_str(), staged.c_str()) == 0;
  if (!linked) {
    std::error_code ec;
    fs::copy_file(path, staged, ec);
    if (ec) return IOError("cannot copy " + path + " into the local store: " + ec.message());
  }
  return PublishBlob(staged, digest);
}

std::string LocalStore::IndexPath(std::string_view registry, std::string_view repository) const {
  return dir_ + "/repos/" + std::string(registry) + "/" + std::string(repository) +
         "/index.json";
}

Result<std::vector<HeldVersion>> LocalStore::Versions(std::string_view registry,
                                                      std::string_view repository) const {
  BLZ_RETURN_IF_ERROR(ValidateRepo(registry, repository));
  BLZ_ASSIGN_OR_RETURN(Index index, ReadIndex(IndexPath(registry, repository)));
  std::vector<HeldVersion> held;
  for (HeldVersion& v : index.versions) {
    if (Holds(v.digest)) held.push_back(std::move(v));
  }
  std::sort(held.begin(), held.end(),
            [](const HeldVersion& a, const HeldVersion& b) { return a.seq > b.seq; });
  return held;
}

Status LocalStore::RecordVersion(std::string_view registry, std::string_view repository,
                                 std::string_view digest, uint64_t size, std::string_view tag,
                                 std::string_view manifest_digest) {
  BLZ_RETURN_IF_ERROR(ValidateRepo(registry, repository));
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid digest " + std::string(digest));
  if (!tag.empty() && !IsValidTag(tag)) return InvalidArgument("invalid tag " + std::string(tag));
  std::string path = IndexPath(registry, repository);
  BLZ_RETURN_IF_ERROR(MakeDir(path.substr(0, path.rfind('/'))));

  BLZ_ASSIGN_OR_RETURN(FileLock lock, FileLock::Wait(dir_ + "/index.lock"));
  BLZ_ASSIGN_OR_RETURN(Index index, ReadIndex(path));
  uint64_t next_seq = 1;
  for (const HeldVersion& v : index.versions) next_seq = std::max(next_seq, v.seq + 1);
  // Drop versions whose blob is gone, and move the tag to this version.
  std::vector<HeldVersion> kept;
  HeldVersion* mine = nullptr;
  for (HeldVersion& v : index.versions) {
    if (v.digest != digest && !Holds(v.digest)) continue;
    if (!tag.empty() && v.digest != digest) {
      v.tags.erase(std::remove(v.tags.begin(), v.tags.end(), tag), v.tags.end());
    }
    kept.push_back(std::move(v));
  }
  for (HeldVersion& v : kept) {
    if (v.digest == digest) mine = &v;
  }
  if (mine == nullptr) {
    kept.push_back(HeldVersion{});
    mine = &kept.back();
    mine->digest = std::string(digest);
  }
  mine->size = size;
  mine->seq = next_seq;
  mine->pulled_at = ClientNow();  // $BLZ_NOW in tests (client/usage.h)
  if (!manifest_digest.empty() && ParseDigest(manifest_digest).ok()) {
    mine->manifest_digest = std::string(manifest_digest);
  }
  if (!tag.empty() &&
      std::find(mine->tags.begin(), mine->tags.end(), tag) == mine->tags.end()) {
    mine->tags.emplace_back(tag);
  }
  index.versions = std::move(kept);
  return WriteIndex(path, registry, repository, index);
}

Result<std::vector<HeldVersion>> LocalStore::AllVersions() const {
  std::vector<HeldVersion> all;
  std::vector<std::string> indexed;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir_ + "/repos", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename() != "index.json" || !it->is_regular_file()) continue;
    std::string registry, repository;
    if (!ReadIndexNames(it->path().string(), &registry, &repository)) continue;
    Result<std::vector<HeldVersion>> held = Versions(registry, repository);
    if (!held.ok()) continue;
    for (HeldVersion& v : *held) {
      v.registry = registry;
      v.repository = repository;
      indexed.push_back(v.digest);
      all.push_back(std::move(v));
    }
  }
  std::sort(indexed.begin(), indexed.end());
  for (fs::recursive_directory_iterator it(dir_ + "/blobs/sha256", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string digest = "sha256:" + it->path().filename().string();
    if (!ParseDigest(digest).ok() || BlobPath(digest) != it->path().string()) continue;
    if (std::binary_search(indexed.begin(), indexed.end(), digest)) continue;
    HeldVersion v;
    v.digest = digest;
    std::error_code size_ec;
    v.size = it->file_size(size_ec);
    Result<std::chrono::system_clock::time_point> mtime = FileModifiedTime(it->path().string());
    v.pulled_at = mtime.ok() ? int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                                           mtime->time_since_epoch())
                                           .count())
                             : 0;
    all.push_back(std::move(v));
  }
  for (fs::recursive_directory_iterator it(dir_ + "/unpacked/sha256", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it.depth() != 1 || !it->is_directory()) continue;
    it.disable_recursion_pending();
    const std::string digest = "sha256:" + it->path().filename().string();
    if (!ParseDigest(digest).ok() || UnpackedPath(digest) != it->path().string()) continue;
    if (HasBlob(digest) || !HasUnpacked(digest)) continue;  // the blob was listed above
    if (std::binary_search(indexed.begin(), indexed.end(), digest)) continue;
    HeldVersion v;
    v.digest = digest;
    std::string prefix;
    if (!ReadKept(it->path().string(), &prefix, &v.size).ok()) continue;
    Result<std::chrono::system_clock::time_point> mtime =
        FileModifiedTime(it->path().string() + "/prefix");
    v.pulled_at = mtime.ok() ? int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                                           mtime->time_since_epoch())
                                           .count())
                             : 0;
    all.push_back(std::move(v));
  }
  std::stable_sort(all.begin(), all.end(), [](const HeldVersion& a, const HeldVersion& b) {
    return a.pulled_at > b.pulled_at;
  });
  return all;
}

Result<uint64_t> LocalStore::ForgetVersion(std::string_view digest) {
  if (!ParseDigest(digest).ok()) return InvalidArgument("invalid digest " + std::string(digest));
  BLZ_ASSIGN_OR_RETURN(FileLock lock, FileLock::Wait(dir_ + "/index.lock"));
  std::error_code ec;
  std::vector<fs::path> indexes;
  for (fs::recursive_directory_iterator it(dir_ + "/repos", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename() == "index.json" && it->is_regular_file()) {
      indexes.push_back(it->path());
    }
  }
  for (const fs::path& path : indexes) {
    std::string registry, repository;
    if (!ReadIndexNames(path.string(), &registry, &repository)) continue;
    Result<Index> index = ReadIndex(path.string());
    if (!index.ok()) continue;
    const size_t before = index->versions.size();
    std::erase_if(index->versions, [&](const HeldVersion& v) { return v.digest == digest; });
    if (index->versions.size() != before) {
      BLZ_RETURN_IF_ERROR(WriteIndex(path.string(), registry, repository, *index));
    }
  }
  uint64_t freed = 0;
  if (HasBlob(digest)) {
    std::error_code size_ec;
    freed = fs::file_size(BlobPath(digest), size_ec);
    if (size_ec) freed = 0;
  }
  BLZ_RETURN_IF_ERROR(RemoveBlob(digest));  // and its kept files
  // Its loadable directories go with it (client/snapshot.h), and the files only they used.
  BLZ_ASSIGN_OR_RETURN(uint64_t files_freed, RemoveSnapshotsOf(dir_, digest));
  return freed + files_freed;
}

}  // namespace blz::client
