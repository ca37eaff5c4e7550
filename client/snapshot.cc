#include "client/snapshot.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "client/local_store.h"
#include "core/digest.h"
#include "core/file_lock.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"

namespace blz::client {
namespace {

namespace fs = std::filesystem;

constexpr size_t kCopyChunk = 8u << 20;
constexpr std::string_view kBuildPrefix = ".blz-snap-";

bool GlobMatches(const std::string& pattern, std::string_view path) {
  std::string p = pattern;
  if (!p.empty() && p.back() == '/') p += '*';
  return ::fnmatch(p.c_str(), std::string(path).c_str(), 0) == 0;
}


// <store>/snapshots/<registry>/<repository's dirs>/ : where a snapshot and its marker live.
std::string SnapshotParent(const std::string& store_dir, std::string_view registry,
                           std::string_view repository) {
  std::string parent = store_dir + "/snapshots/" + std::string(registry);
  const size_t slash = repository.rfind('/');
  if (slash != std::string_view::npos) parent += "/" + std::string(repository.substr(0, slash));
  return parent;
}

std::string MarkerPath(const std::string& snapshot_dir) {
  const size_t slash = snapshot_dir.rfind('/');
  return snapshot_dir.substr(0, slash + 1) + "." + snapshot_dir.substr(slash + 1) + ".json";
}

nlohmann::json MarkerJson(std::string_view digest, const std::string& reference,
                          const FileFilter& filter) {
  return {{"blz_snapshot", 1},
          {"digest", std::string(digest)},
          {"reference", reference},
          {"include", filter.include},
          {"exclude", filter.exclude}};
}

// Copies one archive file's bytes into `out` (positioned at its start), checking its SHA-256.
Status WriteArchiveFile(const formats::BlzArchive& archive, const formats::ArchiveFile& f,
                        AtomicFile* out, uint64_t* written, const ProgressCallback& progress,
                        uint64_t total) {
  Sha256 sha;
  for (const formats::ArchivePiece& p : f.pieces) {
    const bool raw = p.kind == formats::ArchivePiece::Kind::kRaw;
    const ByteSpan data = raw ? archive.RawData(p.index) : archive.TensorData(p.index);
    for (size_t done = 0; done < data.size(); done += kCopyChunk) {
      const ByteSpan chunk = data.subspan(done, std::min(kCopyChunk, data.size() - done));
      sha.Update(chunk);
      BLZ_RETURN_IF_ERROR(out->Append(chunk));
      *written += chunk.size();
      if (progress) progress(*written, total);
    }
  }
  const std::string got = sha.FinishHex();
  if (got != f.sha256 || out->size() != f.size) {
    return Corruption(archive.path() + ": file '" + f.path + "': rebuilt bytes have SHA-256 " +
                      got + ", header says " + f.sha256);
  }
  return Status::Ok();
}

Status MakeParentDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return IOError(path + ": cannot create directory: " + ec.message());
  return Status::Ok();
}

// Ensures files/ holds archive file `f`; returns its path.
// A file of `verified_files` (when not "") named by its SHA-256 is moved in instead of
// being written from the archive.
// `archive` is null when the store holds no archive of the version (kept as files, or a pull
// that kept none): the file must then be in files/ or `verified_files` already.
Result<std::string> EnsureFileEntry(const std::string& store_dir,
                                    const formats::BlzArchive* archive, const std::string& what,
                                    const formats::ArchiveFile& f, uint64_t* written,
                                    const ProgressCallback& progress, uint64_t total,
                                    const std::string& verified_files) {
  if (f.sha256.size() != 64) {
    return Corruption(what + ": file '" + f.path + "': bad SHA-256");
  }
  const std::string path = FilesEntryPath(store_dir, f.sha256);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) == f.size) {
    return path;
  }
  BLZ_RETURN_IF_ERROR(MakeParentDirs(path));
  if (!verified_files.empty()) {
    const std::string ready = verified_files + "/" + f.sha256;
    if (::stat(ready.c_str(), &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) == f.size &&
        ::rename(ready.c_str(), path.c_str()) == 0) {
      BLZ_RETURN_IF_ERROR(SyncDir(path.substr(0, path.rfind('/'))));
      *written += f.size;
      if (progress) progress(*written, total);
      return path;
    }
  }
  if (archive == nullptr) {
    return NotFound(what + ": file '" + f.path + "' has no files/ entry (" + path +
                    ") and the store holds no archive to write it from");
  }
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path, 0444));
  BLZ_RETURN_IF_ERROR(WriteArchiveFile(*archive, f, &out, written, progress, total));
  BLZ_RETURN_IF_ERROR(out.Commit());
  return path;
}

// Links (or, where the file system refuses a hard link, copies) `from` to `to`.
Status LinkOrCopy(const std::string& from, const std::string& to) {
  BLZ_RETURN_IF_ERROR(MakeParentDirs(to));
  if (::link(from.c_str(), to.c_str()) == 0) return Status::Ok();
  std::error_code ec;
  fs::copy_file(from, to, ec);
  if (ec) return IOError("cannot link or copy " + from + " to " + to + ": " + ec.message());
  return Status::Ok();
}

// Removes files/ entries no snapshot links (link count 1). Caller holds snapshots.lock.
uint64_t CollectUnlinkedFiles(const std::string& store_dir) {
  uint64_t freed = 0;
  std::error_code ec;
  std::vector<std::pair<fs::path, uint64_t>> doomed;
  for (fs::recursive_directory_iterator it(store_dir + "/files", ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_nlink == 1) doomed.emplace_back(it->path(), uint64_t(st.st_size));
  }
  for (const auto& [p, size] : doomed) {
    if (::unlink(p.c_str()) == 0) freed += size;
  }
  return freed;
}

// Marker paths below <store>/snapshots with the snapshot digest each names.
std::vector<std::pair<std::string, std::string>> Markers(const std::string& store_dir) {
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(store_dir + "/snapshots", ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !it->is_symlink(type_ec)) {
      // A snapshot directory (its marker beside it) holds model files only: do not descend.
      const std::string marker = MarkerPath(it->path().string());
      if (fs::exists(marker, type_ec) || name.rfind(kBuildPrefix, 0) == 0) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (name.size() < 6 || name[0] != '.' || name.substr(name.size() - 5) != ".json") continue;
    Result<std::string> text = ReadSmallFile(it->path().string(), 1 << 20);
    if (!text.ok()) continue;
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object() || !j.contains("blz_snapshot") || !j.contains("digest") ||
        !j["digest"].is_string()) {
      continue;
    }
    out.emplace_back(it->path().string(), j["digest"].get<std::string>());
  }
  return out;
}

std::string SnapshotOfMarker(const std::string& marker) {
  const size_t slash = marker.rfind('/');
  std::string base = marker.substr(slash + 2);  // without the leading '.'
  base.resize(base.size() - 5);                 // without ".json"
  return marker.substr(0, slash + 1) + base;
}

// Removes ".blz-snap-*" build directories left by a killed pull (caller holds the lock).
void RemoveStaleBuilds(const std::string& parent) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(kBuildPrefix, 0) == 0) stale.push_back(it->path());
  }
  for (const fs::path& p : stale) RemoveAll(p.string());
}

}  // namespace

bool FileFilter::Keeps(std::string_view path) const {
  bool in = include.empty();
  for (const std::string& p : include) in = in || GlobMatches(p, path);
  if (!in) return false;
  for (const std::string& p : exclude) {
    if (GlobMatches(p, path)) return false;
  }
  return true;
}

Result<std::vector<size_t>> FilesKept(const formats::BlzArchive& archive,
                                      const FileFilter& filter, const std::string& what) {
  return FilesKept(archive.header(), filter, what);
}

Result<std::vector<size_t>> FilesKept(const formats::ArchiveHeader& header,
                                      const FileFilter& filter, const std::string& what) {
  std::vector<size_t> kept;
  const auto& files = header.files;
  for (size_t i = 0; i < files.size(); ++i) {
    if (filter.Keeps(files[i].path)) kept.push_back(i);
  }
  if (kept.empty()) {
    std::string names;
    for (size_t i = 0; i < files.size() && i < 20; ++i) names += (i ? ", " : "") + files[i].path;
    if (files.size() > 20) names += ", ...";
    return NotFound(what + ": no file matches --include/--exclude (its files: " + names + ")");
  }
  return kept;
}

Status UnpackFiltered(const formats::BlzArchive& archive, const std::string& out_dir,
                      const FileFilter& filter, ProgressMode progress) {
  BLZ_ASSIGN_OR_RETURN(std::vector<size_t> kept, FilesKept(archive, filter, archive.path()));
  std::error_code ec;
  fs::create_directory(out_dir, ec);
  if (ec) return IOError(out_dir + ": cannot create directory: " + ec.message());
  uint64_t total = 0, written = 0;
  for (size_t i : kept) total += archive.header().files[i].size;
  ProgressMeter meter("unpacking", progress);
  for (size_t i : kept) {
    const formats::ArchiveFile& f = archive.header().files[i];
    if (!IsSafeRelativePath(f.path)) {
      return Corruption(archive.path() + ": file path '" + f.path +
                        "' is not a safe relative path");
    }
    const std::string dest = out_dir + "/" + f.path;
    BLZ_RETURN_IF_ERROR(MakeParentDirs(dest));
    BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(dest));
    BLZ_RETURN_IF_ERROR(WriteArchiveFile(archive, f, &out, &written, meter.Callback(), total));
    BLZ_RETURN_IF_ERROR(out.Commit());
  }
  meter.Finish();
  return SyncDir(out_dir);
}

Status CopyKeptFiles(const LocalStore& store, std::string_view archive_digest,
                     const std::string& out_dir, const FileFilter& filter,
                     ProgressMode progress) {
  const std::string what = "archive " + std::string(archive_digest);
  if (!store.HasUnpacked(archive_digest)) return NotFound(what + " is not kept as files");
  BLZ_ASSIGN_OR_RETURN(formats::ArchiveHeader h, store.HeldHeader(archive_digest));
  BLZ_ASSIGN_OR_RETURN(std::vector<size_t> kept, FilesKept(h, filter, what));
  std::error_code ec;
  fs::create_directory(out_dir, ec);
  if (ec) return IOError(out_dir + ": cannot create directory: " + ec.message());
  uint64_t total = 0, written = 0;
  for (size_t i : kept) total += h.files[i].size;
  ProgressMeter meter("unpacking", progress);
  const ProgressCallback progress_fn = meter.Callback();
  for (size_t i : kept) {
    const formats::ArchiveFile& f = h.files[i];
    if (!IsSafeRelativePath(f.path)) {
      return Corruption(what + ": file path '" + f.path + "' is not a safe relative path");
    }
    const std::string src = store.UnpackedPath(archive_digest) + "/" + std::to_string(i);
    const int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IOError(src + ": cannot open: " + std::strerror(errno));
    const std::string dest = out_dir + "/" + f.path;
    Status s = MakeParentDirs(dest);
    Result<AtomicFile> out = s.ok() ? AtomicFile::Create(dest) : Result<AtomicFile>(s);
    if (out.ok()) s = out->AppendFromFd(fd, 0, f.size, src);
    if (out.ok() && s.ok()) s = out->Commit();
    ::close(fd);
    BLZ_RETURN_IF_ERROR(out.ok() ? s : out.status());
    written += f.size;
    if (progress_fn) progress_fn(written, total);
  }
  meter.Finish();
  return SyncDir(out_dir);
}

std::string SnapshotName(std::string_view repository, std::string_view tag,
                         std::string_view archive_digest) {
  if (!tag.empty()) return std::string(repository) + ":" + std::string(tag);
  std::string_view hex = archive_digest.substr(archive_digest.find(':') + 1);
  return std::string(repository) + "@sha256:" + std::string(hex.substr(0, 12));
}

Result<SnapshotResult> MakeSnapshot(const LocalStore& store, std::string_view registry,
                                    std::string_view repository, std::string_view tag,
                                    std::string_view archive_digest, const std::string& reference,
                                    const FileFilter& filter, ProgressMode progress,
                                    const std::string& verified_files,
                                    const formats::ArchiveHeader* header) {
  const std::string& store_dir = store.dir();
  SnapshotResult result;
  const std::string name = SnapshotName(repository, tag, archive_digest);
  result.path = store_dir + "/snapshots/" + std::string(registry) + "/" + name;
  const std::string parent = SnapshotParent(store_dir, registry, repository);
  const std::string marker = MarkerPath(result.path);
  const std::string want = MarkerJson(archive_digest, reference, filter).dump();

  BLZ_ASSIGN_OR_RETURN(FileLock lock, FileLock::Wait(store_dir + "/snapshots.lock"));
  // The archive when the store holds it as a blob; else only its header: the version is kept
  // as files, or the caller's pull kept no archive (its files are in `verified_files`).
  std::optional<formats::BlzArchive> archive;
  std::optional<formats::ArchiveHeader> held_header;
  if (store.HasBlob(archive_digest)) {
    BLZ_ASSIGN_OR_RETURN(archive, formats::BlzArchive::Open(store.BlobPath(archive_digest)));
    header = &archive->header();
  } else if (header == nullptr) {
    BLZ_ASSIGN_OR_RETURN(held_header, store.HeldHeader(archive_digest));
    header = &*held_header;
  }
  const formats::BlzArchive* source = archive ? &*archive : nullptr;
  const std::string what = archive ? archive->path() : "archive " + std::string(archive_digest);
  BLZ_ASSIGN_OR_RETURN(std::vector<size_t> kept, FilesKept(*header, filter, reference));
  result.files = kept.size();

  // Held already, complete, with the same filters?
  if (Result<std::string> text = ReadSmallFile(marker, 1 << 20); text.ok()) {
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    nlohmann::json w = nlohmann::json::parse(want);
    bool same = j.is_object() && j.value("digest", "") == w["digest"] &&
                j.value("include", nlohmann::json()) == w["include"] &&
                j.value("exclude", nlohmann::json()) == w["exclude"];
    for (size_t i : kept) {
      if (!same) break;
      const formats::ArchiveFile& f = header->files[i];
      struct stat st {};
      same = ::stat((result.path + "/" + f.path).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
             uint64_t(st.st_size) == f.size;
    }
    if (same) {
      result.reused = true;
      return result;
    }
  }

  BLZ_RETURN_IF_ERROR(MakeParentDirs(result.path));
  RemoveStaleBuilds(parent);
  BLZ_ASSIGN_OR_RETURN(std::string build,
                       MakeTempDir(parent, std::string(kBuildPrefix) +
                                               std::to_string(::getpid()) + "-"));
  ScopedRemoveAll guard(build);
  const std::string built = build + "/model";
  std::error_code ec;
  fs::create_directory(built, ec);
  if (ec) return IOError(built + ": cannot create directory: " + ec.message());
  uint64_t total = 0;
  for (size_t i : kept) total += header->files[i].size;
  ProgressMeter meter("unpacking", progress);
  for (size_t i : kept) {
    const formats::ArchiveFile& f = header->files[i];
    if (!IsSafeRelativePath(f.path)) {
      return Corruption(what + ": file path '" + f.path + "' is not a safe relative path");
    }
    BLZ_ASSIGN_OR_RETURN(std::string entry,
                         EnsureFileEntry(store_dir, source, what, f, &result.bytes_written,
                                         meter.Callback(), total, verified_files));
    BLZ_RETURN_IF_ERROR(LinkOrCopy(entry, built + "/" + f.path));
  }
  meter.Finish();
  // Into place: swap with an older snapshot of the same name (a tag that moved, other filters).
  struct stat st {};
  if (::lstat(result.path.c_str(), &st) == 0) {
    if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, result.path.c_str(), RENAME_EXCHANGE) != 0) {
      return IOError(result.path + ": cannot replace with " + built + ": " + std::strerror(errno));
    }
  } else if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, result.path.c_str(),
                         RENAME_NOREPLACE) != 0) {
    return IOError(result.path + ": cannot rename " + built + " into place: " +
                   std::strerror(errno));
  }
  BLZ_RETURN_IF_ERROR(WriteFileAtomic(marker, want + "\n"));
  BLZ_RETURN_IF_ERROR(SyncDir(parent));
  // The old snapshot (now at `built`, if any) goes before the files/ sweep.
  RemoveAll(build);
  guard.Release();
  CollectUnlinkedFiles(store_dir);
  return result;
}

Result<uint64_t> RemoveSnapshotsOf(const std::string& store_dir, std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(FileLock lock, FileLock::Wait(store_dir + "/snapshots.lock"));
  for (const auto& [marker, digest] : Markers(store_dir)) {
    if (digest != archive_digest) continue;
    RemoveAll(SnapshotOfMarker(marker));
    ::unlink(marker.c_str());
  }
  return CollectUnlinkedFiles(store_dir);
}

std::string FilesEntryPath(const std::string& store_dir, std::string_view sha256_hex) {
  const std::string hex(sha256_hex);
  return store_dir + "/files/sha256/" + hex.substr(0, 2) + "/" + hex;
}

std::vector<std::string> SnapshotsOf(const std::string& store_dir,
                                     std::string_view archive_digest) {
  std::vector<std::string> out;
  for (const auto& [marker, digest] : Markers(store_dir)) {
    if (digest == archive_digest) out.push_back(SnapshotOfMarker(marker));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace blz::client
