#include "client/push.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/auth.h"
#include "client/base_choice.h"
#include "client/local_store.h"
#include "client/manifest.h"
#include "client/pack_cache.h"
#include "client/progress.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "formats/pack_layout.h"
#include "formats/structural_hash.h"
#include "formats/tensor_share.h"
#include "patcher/patch.h"

namespace blz::client {
namespace {

constexpr char kArchiveMagic[8] = {'B', 'L', 'Z', 'A', 'R', 'C', 'H', '\n'};
// A held version of another structure and repository is offered as related (a base for
// the registry to consider) when it holds at least this share of the pushed archive's tensor
// bytes, as the registry's own test for pull bases (registry/base_handlers.cc).
constexpr double kMinRelatedFraction = 0.5;
constexpr size_t kMaxRelated = 16;

// Does `path` start with the .blz archive magic?
Result<bool> HasArchiveMagic(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IOError(path + ": cannot open: " + std::strerror(errno));
  char buf[8] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  return n == ssize_t(sizeof buf) && std::memcmp(buf, kArchiveMagic, sizeof buf) == 0;
}

// The fingerprint of a pack input (see push.h): 64 hex.
Result<std::string> InputFingerprint(const std::string& input) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> entries;  // relative path -> stat line
  auto add = [&](const std::string& path, const std::string& rel) -> Status {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      return IOError(path + ": cannot stat: " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return Status::Ok();
    entries.emplace_back(rel, std::to_string(st.st_size) + ":" +
                                  std::to_string(int64_t(st.st_mtim.tv_sec)) + "." +
                                  std::to_string(st.st_mtim.tv_nsec) + ":" +
                                  std::to_string(st.st_ino) + ":" + std::to_string(st.st_dev));
    return Status::Ok();
  };
  struct stat top {};
  if (::stat(input.c_str(), &top) != 0) return IOError(input + ": cannot stat");
  if (S_ISDIR(top.st_mode)) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(input, ec), end; !ec && it != end; it.increment(ec)) {
      BLZ_RETURN_IF_ERROR(add(it->path().string(), fs::relative(it->path(), input).string()));
    }
    if (ec) return IOError(input + ": cannot list: " + ec.message());
  } else {
    BLZ_RETURN_IF_ERROR(add(input, "."));
  }
  std::sort(entries.begin(), entries.end());
  std::string text = "blz-pack-v1\n";
  for (const auto& [rel, line] : entries) text += rel + '\0' + line + '\n';
  return Sha256Hex(text);
}

// The archive a directory was pulled as, when `input` is a snapshot directory of the local
// store (client/snapshot.h): its "<parent>/.<name>.json" names the archive digest. "" when not.
std::string SnapshotOrigin(const std::string& input) {
  std::string dir = input;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
  const std::string base = slash == std::string::npos ? dir : dir.substr(slash + 1);
  Result<std::string> text = ReadSmallFile(parent + "/." + base + ".json", 64 * 1024);
  if (!text.ok()) return "";
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("blz_snapshot") || !j.contains("digest") ||
      !j["digest"].is_string()) {
    return "";
  }
  const std::string digest = j["digest"].get<std::string>();
  return ParseDigest(digest).ok() ? digest : "";
}

// The archives this client holds that may serve as the base of a patch upload of `target` to
// registry/repository, best guess first: the version the pushed directory was pulled as, then
// those of the same registry+repository (most recent first), then every other held one
// (client/base_choice.h CandidateBases).
std::vector<std::string> PushCandidates(const std::vector<HeldVersion>& held,
                                        const LocalStore& store, const std::string& input,
                                        std::string_view registry, std::string_view repository,
                                        const std::string& target) {
  std::vector<std::string> out;
  if (std::string origin = SnapshotOrigin(input);
      !origin.empty() && origin != target && store.Holds(origin)) {
    out.push_back(origin);
  }
  for (std::string& d : CandidateBases(held, registry, repository, target)) {
    if (out.size() >= kMaxBaseCandidates) break;
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
  }
  return out;
}

// Tries to send the archive as a patch from a version both sides hold (push.h). OK with
// result->uploaded_as_patch set when it was; OK without it when there was nothing to patch
// from; an error (the caller falls back to the full upload, with a note) otherwise.
Status TryPatchUpload(RegistryClient* client, LocalStore* store, const Reference& ref,
                      const std::string& input, const formats::BlzArchive& archive,
                      const std::string& archive_path, const ModelManifest& manifest,
                      UploadOptions upload, const PushOptions& options, PushResult* result,
                      bool* transfer_failed) {
  BLZ_ASSIGN_OR_RETURN(std::vector<HeldVersion> held, store->AllVersions());
  const std::vector<std::string> candidates =
      PushCandidates(held, *store, input, ref.registry.ToString(), ref.name,
                     manifest.archive_digest);
  if (candidates.empty()) return Status::Ok();
  std::string structure;
  if (Result<formats::StructuralInput> in = formats::StructuralInputFromArchive(archive);
      in.ok()) {
    structure = formats::StructuralHash(*in);
  }
  // Held versions of another structure or repository that hold most of this archive's
  // tensors (the same name and type, or identical bytes under any name: a model built on
  // another, such as a classifier or a LLaVA-style model on a language model): headers only.
  // The best kMaxRelated by share, so that the query stays short (proxies cap a request line
  // at 8 KiB; `have` takes up to 4.6 KB).
  std::vector<std::pair<double, std::string>> shares;
  for (const std::string& d : candidates) {
    Result<formats::ArchiveHeader> held_header = store->HeldHeader(d);
    if (!held_header.ok()) continue;
    const double f = formats::ShareOf(archive.header(), *held_header).fraction();
    if (f >= kMinRelatedFraction) shares.emplace_back(-f, d);
  }
  std::stable_sort(shares.begin(), shares.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> related;
  for (size_t i = 0; i < shares.size() && i < kMaxRelated; ++i) related.push_back(shares[i].second);
  Result<std::vector<RemoteVersion>> ranked =
      client->GetPushBases(ref.name, candidates, structure, manifest.archive_digest, related);
  if (!ranked.ok()) {
    if (ranked.status().code() == Code::kUnsupported) return Status::Ok();  // an older registry
    return ranked.status().WithContext("asking the registry for bases");
  }
  if (ranked->empty()) return Status::Ok();
  const RemoteVersion& base = ranked->front();
  const std::string name = base.name.empty() ? BaseDisplayName(held, base.digest) : base.name;
  result->patch_from = base.digest;
  result->patch_from_name = name;

  BLZ_ASSIGN_OR_RETURN(std::string staging, store->MakeStagingDir());
  ScopedRemoveAll guard(staging);
  const std::string patch_path = staging + "/push.blzpatch";
  patcher::DiffOptions diff;
  // Both digests are known: the base's is its name in the content-addressed store, the
  // archive's was computed above. A damaged local base gives a patch the registry refuses
  // (it checks the result's SHA-256), and the push falls back.
  diff.known_base_digest = base.digest;
  diff.known_target_digest = manifest.archive_digest;
  patcher::DiffStats stats;
  {
    ProgressMeter meter("computing the patch from " + name, WorkMeterOptions(options.progress));
    // A base kept as files is read from them in place (its archive is not rebuilt).
    Status made;
    if (store->HasBlob(base.digest)) {
      made = patcher::CreatePatch(store->BlobPath(base.digest), archive_path, patch_path, diff,
                                  &stats);
    } else {
      Result<formats::PackLayout> layout = store->OpenUnpacked(base.digest);
      made = layout.ok() ? patcher::CreatePatch(*layout, "held version " + base.digest,
                                                archive_path, patch_path, diff, &stats)
                         : layout.status();
    }
    BLZ_RETURN_IF_ERROR(made.WithContext("computing the patch from " + name));
    meter.Finish();
  }
  result->patch_bytes = stats.patch_bytes;
  if (stats.patch_bytes >= manifest.archive_size) {
    return Unavailable("the patch from " + name + " (" + std::to_string(stats.patch_bytes) +
                       " bytes) is not smaller than the archive (" +
                       std::to_string(manifest.archive_size) + " bytes)");
  }
  upload.patch_from = base.digest;
  ProgressMeter meter("pushing " + ref.name + ":" + ref.tag + " (patch from " + name + ")",
                      options.progress);
  upload.progress = meter.Callback();
  Result<UploadResult> up = UploadBlobResumable(ref.name, manifest.archive_digest, patch_path,
                                                stats.patch_bytes, upload);
  if (!up.ok()) {
    // The network gave out during the upload (the session is kept): the full upload would
    // meet the same network, and re-running the push continues this patch upload.
    *transfer_failed = up.status().code() == Code::kUnavailable;
    return up.status().WithContext("uploading the patch from " + name);
  }
  meter.Finish();
  result->bytes_resumed = up->resumed_from;
  result->retries += up->retries;
  result->bytes_uploaded += up->bytes_sent;
  result->uploaded_as_patch = true;
  return Status::Ok();
}

}  // namespace

Result<PushResult> Push(const std::string& input, const std::string& reference,
                        const PushOptions& options) {
  BLZ_ASSIGN_OR_RETURN(Reference ref, ParseReference(reference));
  if (ref.by_digest()) {
    return InvalidArgument("push needs a tag (HOST:PORT/NAME:TAG), not a digest: " + reference);
  }
  struct stat st {};
  if (::stat(input.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(input + ": no such file or directory");
    return IOError(input + ": cannot stat: " + std::strerror(errno));
  }
  bool is_archive = false;
  if (S_ISREG(st.st_mode)) {
    BLZ_ASSIGN_OR_RETURN(is_archive, HasArchiveMagic(input));
  } else if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument(input + ": not a directory, .blz archive or .safetensors file");
  }

  PushResult result;
  result.reference = ref.ToString();

  // A directory (or safetensors file) is packed first, into the store's staging area.
  std::string archive_path = input;
  std::string staging;
  std::optional<LocalStore> store;
  if (!is_archive) {
    BLZ_ASSIGN_OR_RETURN(std::string cache_dir, LocalStore::ResolveDir(options.cache_dir));
    BLZ_ASSIGN_OR_RETURN(LocalStore opened, LocalStore::Open(cache_dir));
    store.emplace(std::move(opened));
    BLZ_ASSIGN_OR_RETURN(staging, store->MakeStagingDir());
  } else if (Result<std::string> cache_dir = LocalStore::ResolveDir(options.cache_dir);
             cache_dir.ok()) {
    // To remember chunked upload sessions and to keep the version: an archive push works
    // without a store.
    if (Result<LocalStore> opened = LocalStore::Open(*cache_dir); opened.ok()) {
      store.emplace(std::move(opened).value());
      if (options.keep) {
        if (Result<std::string> dir = store->MakeStagingDir(); dir.ok()) staging = *dir;
      }
    }
  }
  ScopedRemoveAll guard(staging);
  KeptPack kept;  // held until the push ends (client/pack_cache.h)
  // A .blz given is copied into the store's staging area as it is hashed, when the version
  // is to be kept: what is sent, verified and kept is then exactly what was hashed, whatever
  // happens to the user's file meanwhile, and keeping it is a rename. The copy's write-back
  // runs during the upload; it is fsynced before it is kept (on a disk, seconds per GB).
  std::string staged_copy;
  if (is_archive) {
    ProgressMeter meter("reading " + input, WorkMeterOptions(options.progress));
    Result<std::string> hex = [&]() -> Result<std::string> {
      if (staging.empty()) return Sha256FileHex(input, meter.Callback());
      staged_copy = staging + "/pushed.blz";
      return CopyFileHashed(input, staged_copy, meter.Callback(), /*sync=*/false);
    }();
    if (!hex.ok()) return hex.status().WithContext("push: reading " + input);
    meter.Finish();
    result.archive_digest = MakeDigest(*hex);
    if (!staged_copy.empty()) archive_path = staged_copy;
  } else {
    BLZ_ASSIGN_OR_RETURN(std::string fingerprint, InputFingerprint(input));
    kept = FindKeptPack(store->dir(), fingerprint);
    if (!kept.path().empty()) {
      archive_path = kept.path();
      result.archive_digest = kept.digest();
      result.reused_pack = true;
    } else {
      archive_path = staging + "/model.blz";
      formats::PackStats stats;
      ProgressMeter meter("packing " + input, WorkMeterOptions(options.progress));
      BLZ_RETURN_IF_ERROR(formats::Pack(input, archive_path, &stats, meter.Callback())
                              .WithContext("push: packing " + input));
      meter.Finish();
      result.packed = true;
      result.archive_digest = stats.digest;
      Result<std::string> after = InputFingerprint(input);
      if (after.ok() && *after == fingerprint) {
        kept = KeepPack(store->dir(), fingerprint, archive_path, stats.digest);
        archive_path = kept.path();
      }
    }
  }

  BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(archive_path));
  // A .blz given is verified (BlzArchive::Verify: every tensor's xxh3-64 and SHA-256, every
  // file's SHA-256) before its manifest is PUT: by the registry, when its first answer says it
  // does so (Blz-Verifies-Archives; blz serve refuses the manifest of an archive that fails,
  // naming the tensor), else (or with `verify_locally`) here too, on other threads while the
  // blobs go out, the manifest PUT waiting for it. A failure leaves only blobs no manifest
  // refers to, which the registry's garbage collection removes. The check costs about 1.3 CPU
  // s per GB: run by both sides on a machine they share, the second one took 8% of a 256 MB
  // push's wall time (docs/benchmarks.md, issue 28). Declared after `archive`, so that it is
  // joined before `archive` is destroyed, on every path.
  std::future<Status> verified;
  if (!ParseDigest(result.archive_digest).ok()) {
    return Internal("push: invalid archive digest '" + result.archive_digest + "'");
  }

  ModelConfig config;
  config.archive_digest = result.archive_digest;
  config.archive_size = archive.bytes().size();
  config.files = archive.header().files.size();
  config.tensors = archive.header().tensors.size();
  for (const formats::ArchiveTensor& t : archive.header().tensors) config.tensor_bytes += t.length;
  const std::string config_json = BuildConfigJson(config);

  ModelManifest manifest;
  manifest.config_digest = MakeDigest(Sha256Hex(config_json));
  manifest.config_size = config_json.size();
  manifest.archive_digest = result.archive_digest;
  manifest.archive_size = config.archive_size;
  const std::string manifest_json = BuildManifestJson(manifest);

  result.archive_size = config.archive_size;
  result.config_digest = manifest.config_digest;
  result.total_bytes = config.archive_size + config_json.size();

  RegistryClientOptions client_options;
  client_options.http = options.http;
  BLZ_ASSIGN_OR_RETURN(client_options.token, TokenFor(options.token, ref.registry.ToString()));
  RegistryClient client(ref.registry, client_options);

  // Archive first, config second, manifest last.
  // A blob the registry holds in another repository is mounted, not sent again.
  // Small idempotent requests are retried on transport failures and 5xx (client/retry.h).
  auto retried = [&](std::string_view what, auto fn) {
    return RetryTransient(options.retry, options.on_retry, what, fn);
  };
  BLZ_ASSIGN_OR_RETURN(BlobStat have_archive, retried("HEAD archive", [&] {
                         return client.HeadBlob(ref.name, manifest.archive_digest);
                       }));
  if (is_archive && (options.verify_locally || !have_archive.registry_verifies_archives)) {
    verified = std::async(std::launch::async, [&archive] { return archive.Verify(nullptr); });
  }
  if (!have_archive.exists) {
    BLZ_ASSIGN_OR_RETURN(have_archive.exists, retried("mount archive", [&] {
                           return client.MountBlob(ref.name, manifest.archive_digest);
                         }));
    have_archive.size = manifest.archive_size;
  }
  UploadOptions u;
  u.host = ref.registry.host;
  u.port = ref.registry.port;
  u.http = options.http;
  u.http.tls = ref.registry.tls;  // the scheme comes from the reference
  u.registry = ref.registry.ToString();
  u.token = client_options.token;
  u.store_dir = store.has_value() ? store->dir() : std::string();
  u.retry = options.retry;
  u.chunk_bytes = options.chunk_bytes;
  u.on_retry = options.on_retry;
  bool patch_transfer_failed = false;
  Status patch_status;
  if (have_archive.exists && have_archive.size == manifest.archive_size) {
    ++result.blobs_skipped;
  } else if (options.allow_patch && store.has_value() &&
             [&] {
               // A patch against a version both sides hold, when smaller (push.h); any failure
               // but a broken transfer falls back to the full upload below, and says so.
               Status s = TryPatchUpload(&client, &*store, ref, input, archive, archive_path,
                                         manifest, u, options, &result, &patch_transfer_failed);
               if (patch_transfer_failed) {
                 patch_status = s;
                 return false;
               }
               if (!s.ok() && s.code() != Code::kUnauthorized) {  // the full upload says that
                 result.notes.push_back("not sent as a patch: " + s.ToString() +
                                        "; uploading the full archive");
               }
               if (!result.uploaded_as_patch) {
                 result.patch_from.clear();
                 result.patch_from_name.clear();
                 result.patch_bytes = 0;
               }
               return result.uploaded_as_patch;
             }()) {
    ++result.blobs_uploaded;
  } else if (patch_transfer_failed) {
    return patch_status;
  } else {
    ProgressMeter meter("pushing " + ref.name + ":" + ref.tag, options.progress);
    if (manifest.archive_size > options.chunk_bytes) {
      u.progress = meter.Callback();
      BLZ_ASSIGN_OR_RETURN(UploadResult up,
                           UploadBlobResumable(ref.name, manifest.archive_digest, archive_path,
                                               manifest.archive_size, u));
      result.bytes_resumed = up.resumed_from;
      result.retries += up.retries;
      result.bytes_uploaded += up.bytes_sent;
    } else {
      BLZ_RETURN_IF_ERROR(retried("archive upload", [&] {
        return client.UploadBlobFromFile(ref.name, manifest.archive_digest, archive_path,
                                         meter.Callback());
      }));
      result.bytes_uploaded += manifest.archive_size;
    }
    meter.Finish();
    ++result.blobs_uploaded;
  }
  BLZ_ASSIGN_OR_RETURN(BlobStat have_config, retried("HEAD config", [&] {
                         return client.HeadBlob(ref.name, manifest.config_digest);
                       }));
  if (!have_config.exists) {
    BLZ_ASSIGN_OR_RETURN(have_config.exists, retried("mount config", [&] {
                           return client.MountBlob(ref.name, manifest.config_digest);
                         }));
    have_config.size = manifest.config_size;
  }
  if (have_config.exists && have_config.size == manifest.config_size) {
    ++result.blobs_skipped;
  } else {
    BLZ_RETURN_IF_ERROR(retried("config upload", [&] {
      return client.UploadBlob(ref.name, manifest.config_digest, config_json);
    }));
    result.bytes_uploaded += config_json.size();
    ++result.blobs_uploaded;
  }
  if (verified.valid()) {
    Status v = verified.get();
    if (!v.ok()) {
      return v.WithContext("push: " + input + " (no manifest was put)");
    }
  }
  Result<std::string> put = retried("manifest", [&] {
    return client.PutManifest(ref.name, ref.tag, manifest_json);
  });
  if (!put.ok()) {
    // The registry's refusal names the archive as its reason (blz serve: "layers[0] <digest>
    // fails verification" or "is not a model archive"): the input is damaged, as when this
    // client's own check fails (exit code 4, not a usage error).
    const Status& s = put.status();
    if (is_archive && s.code() == Code::kInvalidArgument &&
        s.message().find("MANIFEST_INVALID: layers[0] " + result.archive_digest) !=
            std::string::npos) {
      return Corruption("push: " + input + ": " + s.message() + " (no manifest was put)");
    }
    return s;
  }
  result.manifest_digest = *put;
  if (options.keep) {
    // The pushed version becomes a local one (push.h): a base for later pulls and pushes.
    Status kept_status = [&]() -> Status {
      if (!store.has_value()) {
        BLZ_ASSIGN_OR_RETURN(std::string cache_dir, LocalStore::ResolveDir(options.cache_dir));
        BLZ_ASSIGN_OR_RETURN(LocalStore opened, LocalStore::Open(cache_dir));
        store.emplace(std::move(opened));
      }
      // A packed archive lives in the store and never changes: linked. A .blz given is the
      // user's file, which may change later: the copy made while hashing it is moved in, or,
      // without one, the file is copied.
      if (!staged_copy.empty()) {
        BLZ_RETURN_IF_ERROR(SyncFile(staged_copy));
        BLZ_RETURN_IF_ERROR(store->PublishBlob(staged_copy, result.archive_digest).status());
      } else {
        BLZ_RETURN_IF_ERROR(
            store->AdoptBlob(archive_path, result.archive_digest, /*may_link=*/!is_archive)
                .status());
      }
      return store->RecordVersion(ref.registry.ToString(), ref.name, result.archive_digest,
                                  result.archive_size, ref.tag, result.manifest_digest);
    }();
    result.kept = kept_status.ok();
    if (!kept_status.ok()) {
      result.notes.push_back("not kept in the local store: " + kept_status.ToString());
    }
  }
  return result;
}

}  // namespace blz::client
