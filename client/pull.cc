#include "client/pull.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "client/auth.h"
#include "client/base_choice.h"
#include "client/blob_download.h"
#include "client/local_ref.h"
#include "client/local_store.h"
#include "client/manifest.h"
#include "client/partial_download.h"
#include "client/progress.h"
#include "client/pull_stream.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "client/snapshot.h"
#include "client/usage.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "formats/blz_archive_check.h"
#include "formats/pack_layout.h"
#include "patcher/patch.h"
#include "patcher/patch_sink.h"

namespace blz::client {
namespace {

// Largest archive a manifest may announce (1 TiB).
constexpr uint64_t kMaxArchiveBytes = 1ull << 40;

std::string ParentOf(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

constexpr std::string_view kUnpackPrefix = ".blz-pull-";

// Removes "<dir>/.blz-pull-<pid>-*" directories whose process is gone: what a pull killed
// while unpacking left behind.
void RemoveStaleUnpackDirs(const std::string& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind(kUnpackPrefix, 0) != 0) continue;
    std::string rest = name.substr(kUnpackPrefix.size());
    size_t dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 || dash > 9) continue;
    long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) stale.push_back(it->path());
  }
  for (const auto& p : stale) RemoveAll(p.string());
}

// The private directory beside `out_dir` in which pull -o builds the model (see
// BuildDirAtomically): Create() makes ".blz-pull-<pid>-*" (removing ones of dead processes
// first); built() is where the model goes (it does not exist yet); Place() renames it to
// out_dir. The private directory is removed when the object dies.
class StagedDir {
 public:
  static Result<StagedDir> Create(const std::string& out_dir) {
    StagedDir d;
    d.dir_ = out_dir;
    while (d.dir_.size() > 1 && d.dir_.back() == '/') d.dir_.pop_back();
    d.parent_ = ParentOf(d.dir_);
    RemoveStaleUnpackDirs(d.parent_);
    BLZ_ASSIGN_OR_RETURN(d.tmp_, MakeTempDir(d.parent_, std::string(kUnpackPrefix) +
                                                            std::to_string(::getpid()) + "-"));
    d.built_ = d.tmp_ + "/model";
    return d;
  }
  StagedDir() = default;
  StagedDir(StagedDir&& o) noexcept { *this = std::move(o); }
  StagedDir& operator=(StagedDir&& o) noexcept {
    std::swap(dir_, o.dir_);
    std::swap(parent_, o.parent_);
    std::swap(tmp_, o.tmp_);
    std::swap(built_, o.built_);
    return *this;
  }
  ~StagedDir() {
    if (!tmp_.empty()) RemoveAll(tmp_);
  }
  const std::string& built() const { return built_; }
  Status Place(const std::string& out_dir) const {
    if (::renameat2(AT_FDCWD, built_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST || errno == ENOTEMPTY) {
        return AlreadyExists(out_dir + ": already exists");
      }
      return IOError(out_dir + ": cannot rename " + built_ + " into place: " +
                     std::strerror(errno));
    }
    return SyncDir(parent_);
  }

 private:
  std::string dir_, parent_, tmp_, built_;
};

// Unpacks into `staged` (BuildDirAtomically).
Status UnpackInto(const std::string& archive_path, const std::string& built,
                  ProgressMode progress) {
  BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(archive_path));
  ProgressMeter meter("unpacking", progress);
  BLZ_RETURN_IF_ERROR(formats::Unpack(archive, built, meter.Callback()));
  meter.Finish();
  return Status::Ok();
}

// `s` (failed) with the archive's digest in place of `path`, the staging file it names.
Status NamedByDigest(const Status& s, const std::string& path, const std::string& digest) {
  std::string m = s.message();
  const std::string name = "archive " + digest;
  for (size_t pos = m.find(path); pos != std::string::npos; pos = m.find(path, pos + name.size())) {
    m.replace(pos, path.size(), name);
  }
  return Status(s.code(), "archive " + digest + " fails verification, not kept: " + m);
}

// The stored safetensors/GGUF headers of the archive at `path` (BlzArchive::CheckStoredHeaders):
// the part of `blz verify` a FileStreamer does not do (client/pull_stream.h). Errors:
// kCorruption naming the file, with the archive's digest instead of the staging path.
Status CheckArchiveHeaders(const std::string& path, const std::string& digest) {
  Result<formats::BlzArchive> archive = formats::BlzArchive::Open(path);
  Status s = archive.ok() ? formats::CheckStoredHeaders(*archive) : archive.status();
  return s.ok() ? s : NamedByDigest(s, path, digest);
}

// Where a patch route writes the model's files while it applies (client/pull_stream.h):
// pull -o's build directory (kDirectory), the snapshot's files (kByDigest, into a staging
// directory MakeSnapshot moves them from), or nowhere (kVerifyOnly: checked only).
struct StreamTarget {
  FileStreamer::Mode mode = FileStreamer::Mode::kVerifyOnly;
  std::string dir;           // kDirectory / kByDigest: must not exist; the route creates it
  std::string held_store;    // kByDigest: the store whose files/ entries need no new copy
  const FileFilter* filter = nullptr;
  // kByDigest of the whole model (no filter): the routes keep no archive; the version is kept
  // as its files (LocalStore::KeepAsFiles) with `prefix` once the snapshot holds them.
  bool keep_as_files = false;
  bool written = false;      // set when a route succeeded: `dir` holds the files
  std::string prefix;        // set when a route kept no archive: the target's proven prefix

  // Whether the next route keeps no archive: it writes the files (no earlier route did).
  bool KeepsNoArchive() const { return keep_as_files && !written; }
};

// What every download of one pull shares.
struct FetchContext {
  const Reference* ref = nullptr;
  const PullOptions* options = nullptr;
  std::string store_dir;
  std::string token;
  StreamTarget* stream = nullptr;
};

// Runs `feed`, which hands the target archive's bytes to a FileStreamer writing the model's
// files where ctx.stream says (and checking, as they go by, each piece's length and, as
// `pieces` says, its xxh3-64, and each file's SHA-256 in the snapshot), then checks that every
// piece came whole, then `check_headers` (the archive's stored headers, over the archive or
// over the files: formats::CheckStoredHeaders). Any failure removes what the stream wrote
// (kDirectory / kByDigest directory); errors name the archive `digest`.
Status StreamFiles(const FetchContext& ctx, const std::string& digest,
                   FileStreamer::PieceCheck pieces,
                   const std::function<Status(FileStreamer* files)>& feed,
                   const std::function<Status()>& check_headers) {
  StreamTarget& stream = *ctx.stream;
  // A route after one that wrote the files (and then failed, say to publish) checks only.
  const FileStreamer::Mode mode = stream.written ? FileStreamer::Mode::kVerifyOnly : stream.mode;
  FileStreamer files(mode, stream.dir, stream.held_store, *stream.filter, "archive " + digest,
                     pieces);
  Status s = feed(&files);
  if (s.ok()) s = files.Finish();
  if (s.ok()) s = check_headers();
  if (!s.ok()) {
    if (mode != FileStreamer::Mode::kVerifyOnly) RemoveAll(stream.dir);
    return s;
  }
  if (mode != FileStreamer::Mode::kVerifyOnly) stream.written = true;
  return s;
}

// The stored headers of an archive that was never written as one file (a patch route that
// kept the version as its files): checked over the files the stream wrote into ctx.stream->dir,
// or, for those another version shares, their files/ entries. `prefix` is the target's, proven
// by the apply.
Status CheckKeptHeaders(const FetchContext& ctx, const std::string& prefix, uint64_t size,
                        const std::string& digest) {
  const std::string what = "archive " + digest;
  Result<formats::ArchiveHeader> h = formats::ParseArchivePrefix(AsBytes(prefix), size);
  if (!h.ok()) return h.status().WithContext(what);
  std::vector<std::string> paths;
  for (const formats::ArchiveFile& f : h->files) {
    const std::string staged = ctx.stream->dir + "/" + f.sha256;
    struct stat st {};
    const bool here = ::stat(staged.c_str(), &st) == 0;
    paths.push_back(here ? staged : FilesEntryPath(ctx.store_dir, f.sha256));
  }
  Result<formats::PackLayout> layout =
      formats::PackLayout::FromArchivePrefix(AsBytes(prefix), size, paths);
  if (!layout.ok()) return layout.status().WithContext(what);
  Status s = formats::CheckStoredHeaders(*layout, what);
  return s.ok() ? s : Corruption(what + " fails verification, not kept: " + s.message());
}

// Applies a patch (`base_path` "" and no `base_layout` = a full patch) into `target_path`,
// writing the model's files as it goes (StreamFiles), so the archive is hashed once (by apply,
// against the digest the patch names, checked against `digest` before) and not read back for a
// second verification. `base_layout` (optional): a base kept as files, read in place. An empty
// `target_path` writes no archive: the stream's files are then the only copy.
Status ApplyStreaming(const FetchContext& ctx, const std::string& base_path,
                      formats::PackLayout* base_layout, const std::string& patch_path,
                      const std::string& target_path, const std::string& digest,
                      const std::string& label, patcher::ApplyStats* stats) {
  // The apply checks every decoded chunk (xxh3-64) and the whole target (SHA-256) itself.
  return StreamFiles(
      ctx, digest, FileStreamer::PieceCheck::kCheckedBySource,
      [&](FileStreamer* files) -> Status {
        patcher::ApplyOptions apply_options;
        ProgressMeter apply_meter(label, ctx.options->progress);
        apply_options.progress = apply_meter.Callback();
        Status s =
            base_layout != nullptr
                ? patcher::ApplyPatchToSink(base_layout, base_path, patch_path, target_path,
                                            files, stats, apply_options)
            : base_path.empty()
                ? patcher::ApplyFullPatchToSink(patch_path, target_path, files, stats,
                                                apply_options)
                : patcher::ApplyPatchToSink(base_path, patch_path, target_path, files, stats,
                                            apply_options);
        apply_meter.Finish();
        if (s.ok() && stats->target_digest != digest) {
          s = DigestMismatch(label + " produced " + stats->target_digest + ", expected " +
                             digest);
        }
        return s;
      },
      [&]() -> Status {
        return target_path.empty()
                   ? CheckKeptHeaders(ctx, stats->target_prefix, stats->target_bytes, digest)
                   : CheckArchiveHeaders(target_path, digest);
      });
}

// Checks a downloaded archive whose SHA-256 the download proved equal to `digest` and writes
// the model's files from it in the same read (StreamFiles): each piece's xxh3-64, each file's
// size (and SHA-256 in the snapshot), the stored headers. As on the patch routes
// (client/pull_stream.h), the header's other digest fields are not recomputed: the registry
// checked them when the version was pushed.
Status CheckAndStreamDownload(const FetchContext& ctx, const std::string& archive_path,
                              const std::string& digest) {
  Status s = StreamFiles(
      ctx, digest, FileStreamer::PieceCheck::kXxh3,
      [&](FileStreamer* files) -> Status {
        Result<formats::BlzArchive> archive = formats::BlzArchive::Open(archive_path);
        if (!archive.ok()) return NamedByDigest(archive.status(), archive_path, digest);
        ProgressMeter meter("verifying", ctx.options->progress);
        Status fed = patcher::FeedArchiveToSink(*archive, files, meter.Callback());
        meter.Finish();
        return fed;
      },
      [&] { return CheckArchiveHeaders(archive_path, digest); });
  // The registry served an archive whose data contradict its own header.
  const std::string named = "archive " + digest + ": ";
  if (s.code() != Code::kCorruption || s.message().rfind(named, 0) != 0) return s;
  return Corruption("archive " + digest + " fails verification, not kept: " +
                    s.message().substr(named.size()));
}

// Downloads one blob or patch resumably (client/blob_download.h) into `dest_path`, adding its
// bytes, retries and notes to *result.
Result<DownloadResult> Fetch(const FetchContext& ctx, DownloadRequest request,
                             const std::string& dest_path, const ProgressFn& progress,
                             PullResult* result) {
  if (!ctx.token.empty()) request.headers.push_back({"Authorization", "Bearer " + ctx.token});
  DownloadOptions d = PullDownloadOptions(*ctx.ref, *ctx.options);
  d.progress = progress;
  std::atomic<uint64_t> received{0};
  d.bytes_counter = &received;
  Result<DownloadResult> r = DownloadResumable(ctx.store_dir, request, d, dest_path);
  result->bytes_downloaded += received.load();  // failed attempts cost bytes too
  if (r.ok()) {
    result->bytes_resumed += r->resumed_from;
    result->retries += r->retries;
    result->notes.insert(result->notes.end(), r->notes.begin(), r->notes.end());
  }
  return r;
}

// After a patch route succeeded: keeps what it proved. With no archive written (an empty
// `target_path`) the target's prefix, for LocalStore::KeepAsFiles once the snapshot holds the
// files; else the archive, published in the store.
Status KeepOrPublish(const FetchContext& ctx, const std::string& target_path,
                     const std::string& digest, patcher::ApplyStats* stats, LocalStore* store,
                     PullResult* result) {
  if (target_path.empty()) {
    ctx.stream->prefix = std::move(stats->target_prefix);
    result->kept_as_files = true;
    return Status::Ok();
  }
  BLZ_ASSIGN_OR_RETURN(result->archive_path, store->PublishBlob(target_path, digest));
  return Status::Ok();
}

DownloadRequest PatchRequest(const Reference& ref, std::string_view from_digest,
                             std::string_view to_digest, uint64_t max_bytes) {
  const bool full = from_digest.empty();
  DownloadRequest req;
  req.target = "/v2/" + ref.name + "/blz/patch?" +
               (full ? "" : "from=" + std::string(from_digest) + "&") + "to=" +
               std::string(to_digest);
  req.headers.push_back({"Accept", std::string(kPatchMediaType)});
  req.kind = full ? "full-patch" : "patch";
  req.what = full ? "full patch of " + std::string(to_digest)
                  : "patch " + std::string(from_digest) + " -> " + std::string(to_digest);
  req.key = full ? FullPatchKey(to_digest) : PatchKey(from_digest, to_digest);
  req.for_digest = std::string(to_digest);
  req.max_bytes = max_bytes;
  return req;
}

std::string Label(const Reference& ref) {
  return ref.name + (ref.by_digest() ? "@" + ref.digest.substr(0, 19) : ":" + ref.tag);
}

// Tries to rebuild the target archive from a held version plus a patch. On success the target
// is published in the store and OK is returned; any error means "fall back to the blob".
Status PullViaPatch(const FetchContext& ctx, const ModelManifest& manifest,
                    const HeldVersion& base, LocalStore* store, PullResult* result) {
  const Reference& ref = *ctx.ref;
  const PullOptions& options = *ctx.options;
  BLZ_ASSIGN_OR_RETURN(std::string staging, store->MakeStagingDir());
  ScopedRemoveAll guard(staging);
  const std::string patch_path = staging + "/patch.blzpatch";
  // Kept as files: no archive is written (the stream's files are the only copy).
  const bool keep = ctx.stream->KeepsNoArchive();
  const std::string target_path = keep ? "" : staging + "/target.blz";

  // A patch at least as large as the archive is not worth it: the server tells its size
  // before the body, and the download stops there.
  ProgressMeter meter("pulling " + Label(ref) + " (patch)",
                      WaitingMeterOptions(options.progress, "registry is computing the patch"));
  Result<DownloadResult> patch =
      Fetch(ctx, PatchRequest(ref, base.digest, manifest.archive_digest, manifest.archive_size),
            patch_path, meter.Callback(), result);
  meter.Finish();
  if (!patch.ok()) return patch.status();

  BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
  if (info.base_digest != base.digest || info.target_digest != manifest.archive_digest) {
    return DigestMismatch("patch names " + info.base_digest + " -> " + info.target_digest +
                          ", expected " + base.digest + " -> " + manifest.archive_digest);
  }
  patcher::ApplyStats stats;
  // A base kept as files is read from them in place (no archive of it is written).
  std::optional<formats::PackLayout> base_layout;
  std::string base_path = store->BlobPath(base.digest);
  if (!store->HasBlob(base.digest)) {
    BLZ_ASSIGN_OR_RETURN(base_layout, store->OpenUnpacked(base.digest));
    base_path = "held version " + base.digest;
  }
  Status applied = ApplyStreaming(ctx, base_path, base_layout ? &*base_layout : nullptr,
                                  patch_path, target_path, manifest.archive_digest,
                                  "applying patch", &stats);
  if (!applied.ok()) {
    if (applied.code() == Code::kDigestMismatch && !store->VerifyBlob(base.digest).ok()) {
      // The held base itself is damaged: drop it so later pulls do not trip on it again.
      (void)store->RemoveBlob(base.digest);
      result->notes.push_back("removed damaged local copy of " + base.digest);
    }
    return applied;
  }
  BLZ_RETURN_IF_ERROR(KeepOrPublish(ctx, target_path, manifest.archive_digest, &stats, store,
                                    result));
  result->used_patch = true;
  result->patch_from = base.digest;
  result->transfer = "patch";
  return Status::Ok();
}

// Fetches the archive as its full patch (no base) and rebuilds it. On success the archive is
// published in the store; any error means "fall back to the blob" (kUnsupported: the server
// serves no full patches).
Status PullViaFullPatch(const FetchContext& ctx, const ModelManifest& manifest,
                        LocalStore* store, PullResult* result) {
  const Reference& ref = *ctx.ref;
  const PullOptions& options = *ctx.options;
  BLZ_ASSIGN_OR_RETURN(std::string staging, store->MakeStagingDir());
  ScopedRemoveAll guard(staging);
  const std::string patch_path = staging + "/full.blzpatch";
  const bool keep = ctx.stream->KeepsNoArchive();
  const std::string target_path = keep ? "" : staging + "/target.blz";

  // Not worth it unless smaller than the archive (the download stops at the headers).
  ProgressMeter meter("pulling " + Label(ref) + " (full patch)",
                      WaitingMeterOptions(options.progress, "waiting for the registry"));
  Result<DownloadResult> patch =
      Fetch(ctx, PatchRequest(ref, "", manifest.archive_digest, manifest.archive_size),
            patch_path, meter.Callback(), result);
  meter.Finish();
  if (!patch.ok()) return patch.status();

  BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
  if (!info.full || info.target_digest != manifest.archive_digest) {
    return DigestMismatch("the full patch received rebuilds " + info.target_digest +
                          (info.full ? "" : " from base " + info.base_digest) + ", expected " +
                          manifest.archive_digest + " with no base");
  }
  patcher::ApplyStats stats;
  BLZ_RETURN_IF_ERROR(ApplyStreaming(ctx, "", nullptr, patch_path, target_path,
                                     manifest.archive_digest, "applying full patch", &stats));
  BLZ_RETURN_IF_ERROR(KeepOrPublish(ctx, target_path, manifest.archive_digest, &stats, store,
                                    result));
  result->used_full_patch = true;
  result->transfer = "full-patch";
  return Status::Ok();
}

// Writes what the pull gives besides the archive in the store: the output directory (-o), or
// else, with options.snapshot, the snapshot directory (client/snapshot.h).
// `staged` (pull -o) is the build directory made up front; `stream` says whether a patch
// route wrote the files already (into staged->built(), or the snapshot's verified files).
Status WriteOutput(const Reference& ref, const LocalStore& store, const PullOptions& options,
                   PullResult* result, const StagedDir* staged = nullptr,
                   const StreamTarget* stream = nullptr) {
  const bool streamed = stream != nullptr && stream->written;
  if (!options.output_dir.empty()) {
    std::optional<StagedDir> own;
    if (staged == nullptr) {
      BLZ_ASSIGN_OR_RETURN(own, StagedDir::Create(options.output_dir));
      staged = &*own;
    }
    if (!streamed) {
      Status s = result->archive_path.empty()
                     ? CopyKeptFiles(store, result->digest, staged->built(), options.filter,
                                     options.progress)
                 : options.filter.empty()
                     ? UnpackInto(result->archive_path, staged->built(), options.progress)
                     : [&]() -> Status {
                         BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive,
                                              formats::BlzArchive::Open(result->archive_path));
                         return UnpackFiltered(archive, staged->built(), options.filter,
                                               options.progress);
                       }();
      BLZ_RETURN_IF_ERROR(
          s.WithContext("pull " + result->reference + ": unpacking to " + options.output_dir));
    }
    BLZ_RETURN_IF_ERROR(staged->Place(options.output_dir)
                            .WithContext("pull " + result->reference + ": unpacking to " +
                                         options.output_dir));
    result->output = options.output_dir;
  } else if (options.snapshot) {
    // A route that kept no archive: the header is the one its prefix holds.
    std::optional<formats::ArchiveHeader> header;
    if (stream != nullptr && !stream->prefix.empty()) {
      BLZ_ASSIGN_OR_RETURN(header, formats::ParseArchivePrefix(AsBytes(stream->prefix),
                                                               result->full_bytes));
    }
    BLZ_ASSIGN_OR_RETURN(SnapshotResult snap,
                         MakeSnapshot(store, ref.registry.ToString(), ref.name, ref.tag,
                                      result->digest, result->reference, options.filter,
                                      options.progress, streamed ? stream->dir : "",
                                      header ? &*header : nullptr));
    result->output = snap.path;
    result->snapshot = true;
    result->snapshot_reused = snap.reused;
  }
  return Status::Ok();
}

// Sets where the pull finds held version `digest` (verified): its blob; for a version kept as
// files, nothing more unless the caller needs the archive as one file (`need_archive`: no
// snapshot and no -o, as --archive-only, --export and library callers), which then gets it
// rebuilt into blobs/ (LocalStore::ArchivePath). The snapshot and -o take the kept files.
Status TakeHeld(LocalStore* store, const std::string& digest, bool need_archive,
                PullResult* result) {
  if (!store->HasBlob(digest) && !need_archive) {
    result->kept_as_files = true;
    return Status::Ok();
  }
  BLZ_ASSIGN_OR_RETURN(result->archive_path, store->ArchivePath(digest));
  return Status::Ok();
}

// The tags of registry/name the store has recorded, for the offline error.
std::string KnownTags(const LocalStore& store, const std::string& registry,
                      const std::string& name) {
  Result<std::vector<HeldVersion>> held = store.Versions(registry, name);
  std::string tags;
  if (held.ok()) {
    for (const HeldVersion& v : *held) {
      for (const std::string& t : v.tags) tags += (tags.empty() ? "" : ", ") + t;
    }
  }
  return tags.empty() ? "none" : tags;
}

}  // namespace

DownloadOptions PullDownloadOptions(const Reference& ref, const PullOptions& options) {
  DownloadOptions d;
  d.host = ref.registry.host;
  d.port = ref.registry.port;
  d.http = options.http;
  d.http.tls = ref.registry.tls;  // the scheme comes from the reference
  d.registry = ref.registry.ToString();
  d.retry = options.retry;
  d.parallel = options.parallel;
  d.min_part_bytes = options.min_part_bytes;
  d.max_part_bytes = options.max_part_bytes;
  d.on_retry = options.on_retry;
  return d;
}

Status BuildDirAtomically(const std::string& out_dir,
                          const std::function<Status(const std::string& built)>& build) {
  BLZ_ASSIGN_OR_RETURN(StagedDir staged, StagedDir::Create(out_dir));
  BLZ_RETURN_IF_ERROR(build(staged.built()));
  return staged.Place(out_dir);
}

Result<ModelManifest> FetchPullManifest(RegistryClient* client, const Reference& ref,
                                        const RetryPolicy& retry, const RetryLogFn& on_retry,
                                        const std::string& what, std::string* digest) {
  auto get_manifest = [&](const std::string& which) {
    return RetryTransient(retry, on_retry, "manifest",
                          [&] { return client->GetManifest(ref.name, which); });
  };
  Result<ManifestResponse> fetched = get_manifest(ref.reference());
  if (!fetched.ok() && fetched.status().code() == Code::kNotFound && ref.by_digest()) {
    // @sha256: may name the model version (the archive digest push prints) rather than the
    // manifest: the registry tells the manifest of that version.
    Result<BaseAdvice> version = client->GetBases(ref.name, ref.digest, {});
    if (version.ok()) fetched = get_manifest(version->to.manifest_digest);
  }
  BLZ_ASSIGN_OR_RETURN(ManifestResponse raw, std::move(fetched));
  Result<ModelManifest> parsed = ParseManifest(raw.bytes);
  if (!parsed.ok()) return parsed.status().WithContext(what + " " + ref.ToString());
  if (ref.by_digest() && raw.digest != ref.digest && parsed->archive_digest != ref.digest) {
    return DigestMismatch(what + " " + ref.ToString() + ": the registry's manifest " +
                          raw.digest + " is of archive " + parsed->archive_digest + ", not " +
                          ref.digest);
  }
  *digest = raw.digest;
  return parsed;
}

Result<PullResult> Pull(const std::string& reference, const PullOptions& options) {
  BLZ_ASSIGN_OR_RETURN(Reference ref, ParseReference(reference));
  PullResult result;
  result.reference = ref.ToString();

  if (!options.output_dir.empty()) {
    struct stat st {};
    if (::lstat(options.output_dir.c_str(), &st) == 0) {
      return AlreadyExists(options.output_dir + ": already exists (pull -o needs a new "
                                                "directory)");
    }
  }

  if (options.snapshot && !options.output_dir.empty()) {
    return InvalidArgument("pull: a snapshot directory and -o exclude each other");
  }

  BLZ_ASSIGN_OR_RETURN(std::string cache_dir, LocalStore::ResolveDir(options.cache_dir));
  BLZ_ASSIGN_OR_RETURN(LocalStore store, LocalStore::Open(cache_dir));
  const std::string registry = ref.registry.ToString();
  // A default pull of a whole model keeps the version as its files, with no archive beside
  // them (client/local_store.h); -o, filters and callers that want the archive keep that.
  const bool keep_as_files = options.snapshot && options.filter.empty();
  const bool need_archive = !options.snapshot && options.output_dir.empty();
  // Whether the version is held by now, in the form this pull keeps.
  auto obtained = [&] { return !result.archive_path.empty() || result.kept_as_files; };

  // 0. Held already, by digest (or by tag, offline)? Served without asking the registry.
  if (ref.by_digest() || options.offline) {
    BLZ_ASSIGN_OR_RETURN(std::optional<HeldVersion> held, FindHeld(store, ref));
    if (!held.has_value() && options.offline) {
      return NotFound(
          "pull --offline " + result.reference + ": " +
          (ref.by_digest() ? ref.digest + " is not held in the local store " + store.dir()
                           : "tag '" + ref.tag + "' of " + registry + "/" + ref.name +
                                 " was never pulled, pushed or tagged into the local store " +
                                 store.dir() + " (tags it knows: " +
                                 KnownTags(store, registry, ref.name) + ")") +
          "; drop --offline (and BLZ_OFFLINE) to ask the registry");
    }
    if (held.has_value()) {
      Status sound = store.VerifyBlob(held->digest);
      if (sound.ok()) {
        result.digest = held->digest;
        result.manifest_digest = held->manifest_digest;
        result.full_bytes = held->size;
        BLZ_RETURN_IF_ERROR(TakeHeld(&store, held->digest, need_archive, &result));
        result.transfer = "local";
        result.cache_hit = true;
        result.offline = true;
        BLZ_RETURN_IF_ERROR(store.RecordVersion(registry, ref.name, held->digest, held->size,
                                                ref.tag, held->manifest_digest));
        std::string usage_warning;
        if (Status s = RecordPullUse(store.dir(), result, &usage_warning); !s.ok()) {
          result.notes.push_back("use not recorded: " + s.ToString());
        }
        if (!usage_warning.empty()) result.notes.push_back(usage_warning);
        BLZ_RETURN_IF_ERROR(WriteOutput(ref, store, options, &result));
        return result;
      }
      if (options.offline) {
        return sound.WithContext("pull --offline " + result.reference +
                                 ": the local copy is damaged and the registry may not be asked");
      }
      // Online: the steps below find it damaged again, drop it and fetch it.
    }
  }

  RegistryClientOptions client_options;
  client_options.http = options.http;
  BLZ_ASSIGN_OR_RETURN(client_options.token, TokenFor(options.token, registry));
  RegistryClient client(ref.registry, client_options);

  std::string manifest_digest;
  BLZ_ASSIGN_OR_RETURN(const ModelManifest manifest,
                       FetchPullManifest(&client, ref, options.retry, options.on_retry, "pull",
                                         &manifest_digest));
  if (manifest.archive_size > kMaxArchiveBytes) {
    return TooLarge("pull " + result.reference + ": archive of " +
                    std::to_string(manifest.archive_size) + " bytes exceeds the 1 TiB limit");
  }
  result.manifest_digest = manifest_digest;
  result.digest = manifest.archive_digest;
  result.full_bytes = manifest.archive_size;

  // One fetch of this archive per store at a time: a concurrent pull of it waits here, then
  // finds it held (step 1) or continues its partial download.
  BLZ_ASSIGN_OR_RETURN(FetchLock fetch_lock,
                       FetchLock::Acquire(store.dir(), manifest.archive_digest,
                                          &result.waited_for_lock));
  // Where a patch route writes the model's files as it applies: pull -o's build directory, or
  // a staging directory whose verified files the snapshot takes (client/pull_stream.h).
  std::optional<StagedDir> out_staged;
  std::string stream_staging;
  StreamTarget stream;
  stream.filter = &options.filter;
  stream.keep_as_files = keep_as_files;
  if (!options.output_dir.empty()) {
    BLZ_ASSIGN_OR_RETURN(out_staged, StagedDir::Create(options.output_dir));
    stream.mode = FileStreamer::Mode::kDirectory;
    stream.dir = out_staged->built();
  } else if (options.snapshot) {
    BLZ_ASSIGN_OR_RETURN(stream_staging, store.MakeStagingDir());
    stream.mode = FileStreamer::Mode::kByDigest;
    stream.dir = stream_staging + "/files";
    stream.held_store = store.dir();
  }
  ScopedRemoveAll stream_guard(stream_staging);  // "" removes nothing
  FetchContext ctx;
  ctx.ref = &ref;
  ctx.options = &options;
  ctx.store_dir = store.dir();
  ctx.token = client_options.token;
  ctx.stream = &stream;

  // 1. Already held? Re-hash it: a damaged copy is dropped and fetched again.
  if (store.Holds(manifest.archive_digest)) {
    Status held = store.VerifyBlob(manifest.archive_digest);
    if (held.ok()) {
      result.cache_hit = true;
      result.transfer = "local";
      BLZ_RETURN_IF_ERROR(TakeHeld(&store, manifest.archive_digest, need_archive, &result));
    } else {
      BLZ_RETURN_IF_ERROR(store.RemoveBlob(manifest.archive_digest));
      result.notes.push_back("local copy was damaged (" + held.message() + "); fetching again");
    }
  }

  // 2. A patch from the held version the registry expects to give the smallest patch, of
  // whatever repository or registry alias it was pulled from (client/base_choice.h).
  if (!obtained() && options.allow_patch) {
    BLZ_ASSIGN_OR_RETURN(BaseChoice choice, ChooseBases(&client, store, registry, ref.name,
                                                        manifest.archive_digest));
    for (std::string& note : choice.notes) result.notes.push_back(std::move(note));
    if (!choice.bases.empty()) {
      HeldVersion base;
      base.digest = choice.bases.front();
      Status s = PullViaPatch(ctx, manifest, base, &store, &result);
      if (s.ok() && !choice.names.empty()) result.patch_from_name = choice.names.front();
      if (!s.ok()) {
        if (s.code() == Code::kUnauthorized) return s;
        result.notes.push_back("patch from " + base.digest + " not used (" + s.ToString() +
                               "); downloading the full archive");
      }
    }
  }

  // 3. No usable base: the archive as its full patch.
  if (!obtained() && options.allow_patch) {
    Status s = PullViaFullPatch(ctx, manifest, &store, &result);
    if (!s.ok()) {
      if (s.code() == Code::kUnauthorized) return s;
      // An older server without full patches is not worth a note; other failures are.
      if (s.code() != Code::kUnsupported) {
        result.notes.push_back("full patch not used (" + s.ToString() +
                               "); downloading the full archive");
      }
    }
  }

  // 4. The whole archive.
  if (!obtained()) {
    BLZ_ASSIGN_OR_RETURN(std::string staging, store.MakeStagingDir());
    ScopedRemoveAll guard(staging);
    const std::string staged = staging + "/archive.blz";
    ProgressMeter meter("pulling " + Label(ref), options.progress);
    DownloadRequest req;
    req.target = "/v2/" + ref.name + "/blobs/" + manifest.archive_digest;
    req.kind = "blob";
    req.what = "blob " + manifest.archive_digest;
    BLZ_ASSIGN_OR_RETURN(req.key, ParseDigest(manifest.archive_digest));
    req.for_digest = manifest.archive_digest;
    req.expected_digest = manifest.archive_digest;
    req.expected_size = manifest.archive_size;
    req.max_bytes = manifest.archive_size;
    Result<DownloadResult> got = Fetch(ctx, req, staged, meter.Callback(), &result);
    meter.Finish();
    BLZ_RETURN_IF_ERROR(got.status());
    const bool keep = stream.KeepsNoArchive();
    BLZ_RETURN_IF_ERROR(CheckAndStreamDownload(ctx, staged, manifest.archive_digest)
                            .WithContext("pull " + result.reference));
    if (keep) {
      // Kept as the files just written: the downloaded archive is not kept beside them.
      BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(staged));
      const ByteSpan prefix = archive.Prefix();
      stream.prefix.assign(reinterpret_cast<const char*>(prefix.data()), prefix.size());
      result.kept_as_files = true;
    } else {
      BLZ_ASSIGN_OR_RETURN(result.archive_path,
                           store.PublishBlob(staged, manifest.archive_digest));
    }
    result.transfer = "archive";
  }

  BLZ_RETURN_IF_ERROR(store.RecordVersion(registry, ref.name, manifest.archive_digest,
                                          manifest.archive_size, ref.tag, manifest_digest));
  // The use (and how the version arrived) for `blz cache prune --budget` (client/usage.h).
  // Never fails the pull: the archive is already held and indexed.
  std::string usage_warning;
  if (Status s = RecordPullUse(store.dir(), result, &usage_warning); !s.ok()) {
    result.notes.push_back("use not recorded: " + s.ToString());
  }
  if (!usage_warning.empty()) result.notes.push_back(usage_warning);
  // Partial downloads for this archive by routes not taken (say a full patch interrupted
  // earlier, before a base arrived) are of no further use.
  (void)PartialStore(store.dir()).RemoveFor(manifest.archive_digest);

  BLZ_RETURN_IF_ERROR(WriteOutput(ref, store, options, &result,
                                  out_staged ? &*out_staged : nullptr, &stream));
  if (!stream.prefix.empty()) {
    // The snapshot holds every file now: the version is kept as those files and its prefix.
    BLZ_RETURN_IF_ERROR(
        store.KeepAsFiles(manifest.archive_digest, AsBytes(stream.prefix), manifest.archive_size)
            .WithContext("pull " + result.reference + ": keeping the version as its files"));
  }
  return result;
}

}  // namespace blz::client
