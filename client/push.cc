#include "client/push.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "client/auth.h"
#include "client/local_store.h"
#include "client/manifest.h"
#include "client/pack_cache.h"
#include "client/progress.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"

namespace blz::client {
namespace {

constexpr char kArchiveMagic[8] = {'B', 'L', 'Z', 'A', 'R', 'C', 'H', '\n'};

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
    // Only to remember chunked upload sessions: an archive push works without a store.
    if (Result<LocalStore> opened = LocalStore::Open(*cache_dir); opened.ok()) {
      store.emplace(std::move(opened).value());
    }
  }
  ScopedRemoveAll guard(staging);
  KeptPack kept;  // held until the push ends (client/pack_cache.h)
  if (!is_archive) {
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
  if (!result.packed && !result.reused_pack) {
    ProgressMeter verify_meter("verifying " + input, options.progress);
    BLZ_RETURN_IF_ERROR(archive.Verify(verify_meter.Callback()).WithContext("push: " + input));
    verify_meter.Finish();
    ProgressMeter hash_meter("hashing " + input, options.progress);
    BLZ_ASSIGN_OR_RETURN(std::string hex, Sha256FileHex(archive_path, hash_meter.Callback()));
    hash_meter.Finish();
    result.archive_digest = MakeDigest(hex);
  }
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
  if (!have_archive.exists) {
    BLZ_ASSIGN_OR_RETURN(have_archive.exists, retried("mount archive", [&] {
                           return client.MountBlob(ref.name, manifest.archive_digest);
                         }));
    have_archive.size = manifest.archive_size;
  }
  if (have_archive.exists && have_archive.size == manifest.archive_size) {
    ++result.blobs_skipped;
  } else {
    ProgressMeter meter("pushing " + ref.name + ":" + ref.tag, options.progress);
    if (manifest.archive_size > options.chunk_bytes) {
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
  BLZ_ASSIGN_OR_RETURN(result.manifest_digest, retried("manifest", [&] {
                         return client.PutManifest(ref.name, ref.tag, manifest_json);
                       }));
  if (options.keep) {
    // The pushed version becomes a local one (push.h): a base for later pulls and pushes.
    Status kept_status = [&]() -> Status {
      if (!store.has_value()) {
        BLZ_ASSIGN_OR_RETURN(std::string cache_dir, LocalStore::ResolveDir(options.cache_dir));
        BLZ_ASSIGN_OR_RETURN(LocalStore opened, LocalStore::Open(cache_dir));
        store.emplace(std::move(opened));
      }
      // A packed archive lives in the store and never changes: linked. A .blz given is the
      // user's file, which may change later: copied.
      BLZ_RETURN_IF_ERROR(
          store->AdoptBlob(archive_path, result.archive_digest, /*may_link=*/!is_archive)
              .status());
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
