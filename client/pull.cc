#include "client/pull.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

#include "client/auth.h"
#include "client/base_choice.h"
#include "client/local_store.h"
#include "client/manifest.h"
#include "client/progress.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "patcher/patch.h"

namespace blz::client {
namespace {

// Largest archive a manifest may announce (1 TiB).
constexpr uint64_t kMaxArchiveBytes = 1ull << 40;

class StagingGuard {
 public:
  explicit StagingGuard(std::string dir) : dir_(std::move(dir)) {}
  ~StagingGuard() { RemoveAll(dir_); }
  StagingGuard(const StagingGuard&) = delete;
  StagingGuard& operator=(const StagingGuard&) = delete;

 private:
  std::string dir_;
};

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

// Unpacks into a private temporary directory next to `out_dir`, then renames the result into
// place, so `out_dir` appears complete or not at all, and a killed run's leftovers are
// recognizable (".blz-pull-<pid>-*") and removed by the next pull into the same parent.
Status UnpackAtomically(const std::string& archive_path, const std::string& out_dir,
                        ProgressMode progress) {
  std::string dir = out_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string parent = ParentOf(dir);
  RemoveStaleUnpackDirs(parent);
  BLZ_ASSIGN_OR_RETURN(std::string tmp,
                       MakeTempDir(parent, std::string(kUnpackPrefix) +
                                               std::to_string(::getpid()) + "-"));
  StagingGuard guard(tmp);
  BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(archive_path));
  ProgressMeter meter("unpacking", progress);
  BLZ_RETURN_IF_ERROR(formats::Unpack(archive, tmp + "/model", meter.Callback()));
  meter.Finish();
  const std::string built = tmp + "/model";
  if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) return AlreadyExists(out_dir + ": already exists");
    return IOError(out_dir + ": cannot rename " + built + " into place: " + std::strerror(errno));
  }
  return SyncDir(parent);
}

// Checks an archive's data completely, as `blz verify` does (every tensor's xxh3-64 and SHA-256,
// every file's SHA-256, the stored file headers), before it may enter the local store: its
// SHA-256 matching the manifest only proves it is the archive the registry holds, not that that
// archive is sound. Errors: those of BlzArchive::Open / Verify (kCorruption naming the tensor
// and byte offset), with the archive's digest instead of the staging path.
Status VerifyArchiveData(const std::string& path, const std::string& digest,
                         ProgressMode progress) {
  Status s;
  {
    ProgressMeter meter("verifying", progress);
    Result<formats::BlzArchive> archive = formats::BlzArchive::Open(path);
    s = archive.ok() ? archive->Verify(meter.Callback()) : archive.status();
  }
  if (s.ok()) return s;
  std::string m = s.message();
  const std::string name = "archive " + digest;
  for (size_t pos = m.find(path); pos != std::string::npos; pos = m.find(path, pos + name.size())) {
    m.replace(pos, path.size(), name);
  }
  return Status(s.code(), "archive " + digest + " fails verification, not kept: " + m);
}

std::string Label(const Reference& ref) {
  return ref.name + (ref.by_digest() ? "@" + ref.digest.substr(0, 19) : ":" + ref.tag);
}

// Tries to rebuild the target archive from a held version plus a patch. On success the target
// is published in the store and OK is returned; any error means "fall back to the blob".
Status PullViaPatch(const Reference& ref, const ModelManifest& manifest, const HeldVersion& base,
                    const PullOptions& options, LocalStore* store, RegistryClient* client,
                    PullResult* result) {
  BLZ_ASSIGN_OR_RETURN(std::string staging, store->MakeStagingDir());
  StagingGuard guard(staging);
  const std::string patch_path = staging + "/patch.blzpatch";
  const std::string target_path = staging + "/target.blz";

  // A patch at least as large as the archive is not worth it: the server tells its size
  // before the body, and the download stops there.
  ProgressMeter meter("pulling " + Label(ref) + " (patch)",
                      WaitingMeterOptions(options.progress, "registry is computing the patch"));
  const uint64_t before = client->bytes_received();
  Result<PatchDownload> patch =
      client->GetPatch(ref.name, base.digest, manifest.archive_digest, patch_path,
                       manifest.archive_size, meter.Callback());
  meter.Finish();
  result->bytes_downloaded += client->bytes_received() - before;
  if (!patch.ok()) return patch.status();

  BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
  if (info.base_digest != base.digest || info.target_digest != manifest.archive_digest) {
    return DigestMismatch("patch names " + info.base_digest + " -> " + info.target_digest +
                          ", expected " + base.digest + " -> " + manifest.archive_digest);
  }
  patcher::ApplyStats stats;
  ProgressMeter apply_meter("applying patch", options.progress);
  patcher::ApplyOptions apply_options;
  apply_options.progress = apply_meter.Callback();
  Status applied = patcher::ApplyPatch(store->BlobPath(base.digest), patch_path, target_path,
                                       &stats, apply_options);
  apply_meter.Finish();
  if (!applied.ok()) {
    if (applied.code() == Code::kDigestMismatch && !store->VerifyBlob(base.digest).ok()) {
      // The held base itself is damaged: drop it so later pulls do not trip on it again.
      (void)store->RemoveBlob(base.digest);
      result->notes.push_back("removed damaged local copy of " + base.digest);
    }
    return applied;
  }
  if (stats.target_digest != manifest.archive_digest) {
    return DigestMismatch("patch produced " + stats.target_digest + ", expected " +
                          manifest.archive_digest);
  }
  // Apply checked each chunk against the patch's xxh3 and the whole file's SHA-256, not the
  // archive's own tensor hashes.
  BLZ_RETURN_IF_ERROR(VerifyArchiveData(target_path, manifest.archive_digest, options.progress));
  BLZ_ASSIGN_OR_RETURN(result->archive_path,
                       store->PublishBlob(target_path, manifest.archive_digest));
  result->used_patch = true;
  result->patch_from = base.digest;
  result->transfer = "patch";
  return Status::Ok();
}

// Fetches the archive as its full patch (no base) and rebuilds it. On success the archive is
// published in the store; any error means "fall back to the blob" (kUnsupported: the server
// serves no full patches).
Status PullViaFullPatch(const Reference& ref, const ModelManifest& manifest,
                        const PullOptions& options, LocalStore* store, RegistryClient* client,
                        PullResult* result) {
  BLZ_ASSIGN_OR_RETURN(std::string staging, store->MakeStagingDir());
  StagingGuard guard(staging);
  const std::string patch_path = staging + "/full.blzpatch";
  const std::string target_path = staging + "/target.blz";

  // Not worth it unless smaller than the archive (the download stops at the headers).
  ProgressMeter meter("pulling " + Label(ref) + " (full patch)",
                      WaitingMeterOptions(options.progress, "waiting for the registry"));
  const uint64_t before = client->bytes_received();
  Result<PatchDownload> patch = client->GetPatch(ref.name, "", manifest.archive_digest,
                                                 patch_path, manifest.archive_size,
                                                 meter.Callback());
  meter.Finish();
  result->bytes_downloaded += client->bytes_received() - before;
  if (!patch.ok()) return patch.status();

  BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
  if (!info.full || info.target_digest != manifest.archive_digest) {
    return DigestMismatch("the full patch received rebuilds " + info.target_digest +
                          (info.full ? "" : " from base " + info.base_digest) + ", expected " +
                          manifest.archive_digest + " with no base");
  }
  patcher::ApplyStats stats;
  ProgressMeter apply_meter("applying full patch", options.progress);
  patcher::ApplyOptions apply_options;
  apply_options.progress = apply_meter.Callback();
  Status applied = patcher::ApplyFullPatch(patch_path, target_path, &stats, apply_options);
  apply_meter.Finish();
  BLZ_RETURN_IF_ERROR(applied);
  if (stats.target_digest != manifest.archive_digest) {
    return DigestMismatch("full patch produced " + stats.target_digest + ", expected " +
                          manifest.archive_digest);
  }
  BLZ_RETURN_IF_ERROR(VerifyArchiveData(target_path, manifest.archive_digest, options.progress));
  BLZ_ASSIGN_OR_RETURN(result->archive_path,
                       store->PublishBlob(target_path, manifest.archive_digest));
  result->used_full_patch = true;
  result->transfer = "full-patch";
  return Status::Ok();
}

}  // namespace

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

  BLZ_ASSIGN_OR_RETURN(std::string cache_dir, LocalStore::ResolveDir(options.cache_dir));
  BLZ_ASSIGN_OR_RETURN(LocalStore store, LocalStore::Open(cache_dir));

  RegistryClientOptions client_options;
  client_options.http = options.http;
  const std::string registry = ref.registry.ToString();
  if (options.token.has_value()) {
    client_options.token = *options.token;
  } else {
    BLZ_ASSIGN_OR_RETURN(client_options.token, ResolveToken(registry));
  }
  RegistryClient client(ref.registry, client_options);

  Result<ManifestResponse> fetched = client.GetManifest(ref.name, ref.reference());
  if (!fetched.ok() && fetched.status().code() == Code::kNotFound && ref.by_digest()) {
    // @sha256: may name the model version (the archive digest push prints) rather than the
    // manifest: the registry tells the manifest of that version.
    Result<BaseAdvice> version = client.GetBases(ref.name, ref.digest, {});
    if (version.ok()) fetched = client.GetManifest(ref.name, version->to.manifest_digest);
  }
  BLZ_ASSIGN_OR_RETURN(ManifestResponse raw, std::move(fetched));
  Result<ModelManifest> parsed = ParseManifest(raw.bytes);
  if (!parsed.ok()) return parsed.status().WithContext("pull " + result.reference);
  const ModelManifest manifest = std::move(parsed).value();
  if (manifest.archive_size > kMaxArchiveBytes) {
    return TooLarge("pull " + result.reference + ": archive of " +
                    std::to_string(manifest.archive_size) + " bytes exceeds the 1 TiB limit");
  }
  if (ref.by_digest() && raw.digest != ref.digest && manifest.archive_digest != ref.digest) {
    return DigestMismatch("pull " + result.reference + ": the registry's manifest " + raw.digest +
                          " is of archive " + manifest.archive_digest + ", not " + ref.digest);
  }
  result.manifest_digest = raw.digest;
  result.digest = manifest.archive_digest;
  result.full_bytes = manifest.archive_size;

  // 1. Already held? Re-hash it: a damaged copy is dropped and fetched again.
  if (store.HasBlob(manifest.archive_digest)) {
    Status held = store.VerifyBlob(manifest.archive_digest);
    if (held.ok()) {
      result.cache_hit = true;
      result.transfer = "local";
      result.archive_path = store.BlobPath(manifest.archive_digest);
    } else {
      BLZ_RETURN_IF_ERROR(store.RemoveBlob(manifest.archive_digest));
      result.notes.push_back("local copy was damaged (" + held.message() + "); fetching again");
    }
  }

  // 2. A patch from the held version the registry expects to give the smallest patch, of
  // whatever repository or registry alias it was pulled from (client/base_choice.h).
  if (result.archive_path.empty() && options.allow_patch) {
    BLZ_ASSIGN_OR_RETURN(BaseChoice choice, ChooseBases(&client, store, registry, ref.name,
                                                        manifest.archive_digest));
    for (std::string& note : choice.notes) result.notes.push_back(std::move(note));
    if (!choice.bases.empty()) {
      HeldVersion base;
      base.digest = choice.bases.front();
      Status s = PullViaPatch(ref, manifest, base, options, &store, &client, &result);
      if (!s.ok()) {
        if (s.code() == Code::kUnauthorized) return s;
        result.notes.push_back("patch from " + base.digest + " not used (" + s.ToString() +
                               "); downloading the full archive");
      }
    }
  }

  // 3. No usable base: the archive as its full patch.
  if (result.archive_path.empty() && options.allow_patch) {
    Status s = PullViaFullPatch(ref, manifest, options, &store, &client, &result);
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
  if (result.archive_path.empty()) {
    BLZ_ASSIGN_OR_RETURN(std::string staging, store.MakeStagingDir());
    StagingGuard guard(staging);
    const std::string staged = staging + "/archive.blz";
    ProgressMeter meter("pulling " + Label(ref), options.progress);
    const uint64_t before = client.bytes_received();
    Status s = client.GetBlob(ref.name, manifest.archive_digest, manifest.archive_size, staged,
                              meter.Callback());
    meter.Finish();
    result.bytes_downloaded += client.bytes_received() - before;
    BLZ_RETURN_IF_ERROR(s);
    BLZ_RETURN_IF_ERROR(VerifyArchiveData(staged, manifest.archive_digest, options.progress)
                            .WithContext("pull " + result.reference));
    BLZ_ASSIGN_OR_RETURN(result.archive_path,
                         store.PublishBlob(staged, manifest.archive_digest));
    result.transfer = "archive";
  }

  BLZ_RETURN_IF_ERROR(store.RecordVersion(registry, ref.name, manifest.archive_digest,
                                          manifest.archive_size, ref.tag));

  if (!options.output_dir.empty()) {
    BLZ_RETURN_IF_ERROR(UnpackAtomically(result.archive_path, options.output_dir, options.progress)
                            .WithContext("pull: unpacking to " + options.output_dir));
    result.output = options.output_dir;
  }
  return result;
}

}  // namespace blz::client
