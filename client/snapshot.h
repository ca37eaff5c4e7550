// The loadable directories `blz pull` gives by default (like `hf download`'s snapshots), and
// the --include/--exclude file filters of pull.
//
// Layout, inside the local store (client/local_store.h):
//
//   <store>/files/sha256/<2 hex>/<64 hex>      one model file (config.json, a .safetensors
//                                              file, ...) named by the SHA-256 of its bytes,
//                                              read-only (0444), held once
//   <store>/snapshots/<host:port>/<name>:<tag>            a version pulled by tag
//   <store>/snapshots/<host:port>/<name>@sha256:<12 hex>  a version pulled by digest (the
//                                                         archive digest's first 12 hex)
//   <store>/snapshots/<host:port>/<dir of name>/.<base of name>:<tag>.json   (or @...) what
//        the snapshot holds: {"blz_snapshot":1,"digest","reference","include","exclude"}
//   <store>/snapshots.lock                     flock: snapshots and files/ change only under it
//
// A snapshot directory holds the model's files (those the filters keep) as hard links to
// files/: two versions (or two tags) sharing an identical file share its bytes, and a second
// pull of the same version with the same filters finds its snapshot and writes nothing. Files
// are never links to a path (no symlinks), so removing files/ entries never leaves a dangling
// link. A tag that moves to another version gets a fresh directory at the same path (the old
// one is swapped out with RENAME_EXCHANGE, then removed). A file of files/ that nothing else
// links (link count 1: no snapshot, and no version kept as files, client/local_store.h) is
// removed after each snapshot change and each ForgetVersion; a version
// removed from the store (`blz cache rm`, `blz cache prune`) takes its snapshot directories
// with it.
#ifndef BLZ_CLIENT_SNAPSHOT_H_
#define BLZ_CLIENT_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/progress.h"
#include "core/status.h"

namespace blz::formats {
class BlzArchive;
struct ArchiveHeader;
}

namespace blz::client {

class LocalStore;

// --include / --exclude of pull (as `hf download`): shell globs (fnmatch without
// FNM_PATHNAME, so '*' also matches '/'; a pattern ending in '/' matches everything below that
// directory) matched against each file's path relative to the model directory. A file is kept
// when it matches some include pattern (or none are given) and no exclude pattern. Filters
// choose whole files: a .safetensors file is kept or dropped whole.
struct FileFilter {
  std::vector<std::string> include;
  std::vector<std::string> exclude;

  bool empty() const { return include.empty() && exclude.empty(); }
  bool Keeps(std::string_view path) const;
};

// The archive's files the filter keeps, or kNotFound naming `what` and the archive's files
// when it keeps none.
Result<std::vector<size_t>> FilesKept(const formats::BlzArchive& archive,
                                      const FileFilter& filter, const std::string& what);
Result<std::vector<size_t>> FilesKept(const formats::ArchiveHeader& header,
                                      const FileFilter& filter, const std::string& what);

// Writes the archive's files that `filter` keeps into `out_dir` (which must not exist; its
// parent must), as regular files, each verified against its SHA-256. For `pull -o` with
// filters (without filters pull uses formats::Unpack).
Status UnpackFiltered(const formats::BlzArchive& archive, const std::string& out_dir,
                      const FileFilter& filter, ProgressMode progress);

// Copies the files of version `archive_digest`, which `store` keeps as files (client/
// local_store.h) and the caller verified (LocalStore::VerifyBlob), that `filter` keeps into
// `out_dir` (which must not exist; its parent must), as regular files (0644): `pull -o` of such
// a version, without rebuilding its archive. Errors: kNotFound (not kept as files; the filter
// keeps no file), kCorruption (an unsafe path), kIOError.
Status CopyKeptFiles(const LocalStore& store, std::string_view archive_digest,
                     const std::string& out_dir, const FileFilter& filter,
                     ProgressMode progress);

// "<name>:<tag>" for a tag, else "<name>@sha256:<first 12 hex of archive_digest>".
std::string SnapshotName(std::string_view repository, std::string_view tag,
                         std::string_view archive_digest);

struct SnapshotResult {
  std::string path;         // the directory
  bool reused = false;      // it held this version with these filters already
  uint64_t files = 0;       // files in it
  uint64_t bytes_written = 0;  // bytes of new files/ entries (0 when every file was held)
};

// Makes (or finds) the snapshot of archive `archive_digest` (held in `store`) for
// registry+repository as SnapshotName(repository, tag, digest). `reference` is recorded in the
// marker. `verified_files` (optional): a directory on the store's file system holding model
// files named by their SHA-256 (64 hex), each already checked against it (a patch pull wrote
// them as it applied, client/pull_stream.h): a files/ entry missing is moved from there rather
// than written from the archive again. `header` (optional): the archive's header, for a version
// the store does not hold yet in either form (a pull that keeps it as files, which it does
// after this, LocalStore::KeepAsFiles): every kept file must then be in `verified_files` or
// files/. Without a blob, a file is never written from an archive: a version kept as files
// finds its files/ entries linked by the kept form. Errors: kNotFound (the filter keeps no
// file; a file with no files/ entry and no archive to write it from), kCorruption (a file's
// bytes do not match its SHA-256), kIOError.
Result<SnapshotResult> MakeSnapshot(const LocalStore& store, std::string_view registry,
                                    std::string_view repository, std::string_view tag,
                                    std::string_view archive_digest, const std::string& reference,
                                    const FileFilter& filter, ProgressMode progress,
                                    const std::string& verified_files = "",
                                    const formats::ArchiveHeader* header = nullptr);

// Removes every snapshot directory (and marker) of `archive_digest` below <store_dir>, then
// the files/ entries no snapshot links. Returns the bytes freed (files/ entries removed).
Result<uint64_t> RemoveSnapshotsOf(const std::string& store_dir, std::string_view archive_digest);

// <store_dir>/files/sha256/<2 hex>/<hex>: the files/ entry of a file with that SHA-256.
std::string FilesEntryPath(const std::string& store_dir, std::string_view sha256_hex);

// Snapshot directories of `archive_digest` below <store_dir> (for `blz ls --json`, tests).
std::vector<std::string> SnapshotsOf(const std::string& store_dir, std::string_view archive_digest);

}  // namespace blz::client

#endif  // BLZ_CLIENT_SNAPSHOT_H_
