#include "client/push.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "client/auth.h"
#include "client/local_store.h"
#include "client/manifest.h"
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

// Removes a staging directory when the push ends, however it ends.
class StagingGuard {
 public:
  explicit StagingGuard(std::string dir) : dir_(std::move(dir)) {}
  ~StagingGuard() {
    if (!dir_.empty()) RemoveAll(dir_);
  }
  StagingGuard(const StagingGuard&) = delete;
  StagingGuard& operator=(const StagingGuard&) = delete;

 private:
  std::string dir_;
};

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
  }
  StagingGuard guard(staging);
  if (!is_archive) {
    archive_path = staging + "/model.blz";
    formats::PackStats stats;
    ProgressMeter meter("packing " + input, WorkMeterOptions(options.progress));
    BLZ_RETURN_IF_ERROR(formats::Pack(input, archive_path, &stats, meter.Callback())
                            .WithContext("push: packing " + input));
    meter.Finish();
    result.packed = true;
    result.archive_digest = stats.digest;
  }

  BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(archive_path));
  if (!result.packed) {
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
  if (options.token.has_value()) {
    client_options.token = *options.token;
  } else {
    BLZ_ASSIGN_OR_RETURN(client_options.token, ResolveToken(ref.registry.ToString()));
  }
  RegistryClient client(ref.registry, client_options);

  // Archive first, config second, manifest last.
  // A blob the registry holds in another repository is mounted, not sent again.
  BLZ_ASSIGN_OR_RETURN(BlobStat have_archive, client.HeadBlob(ref.name, manifest.archive_digest));
  if (!have_archive.exists) {
    BLZ_ASSIGN_OR_RETURN(have_archive.exists, client.MountBlob(ref.name, manifest.archive_digest));
    have_archive.size = manifest.archive_size;
  }
  if (have_archive.exists && have_archive.size == manifest.archive_size) {
    ++result.blobs_skipped;
  } else {
    ProgressMeter meter("pushing " + ref.name + ":" + ref.tag, options.progress);
    BLZ_RETURN_IF_ERROR(client.UploadBlobFromFile(ref.name, manifest.archive_digest,
                                                  archive_path, meter.Callback()));
    meter.Finish();
    result.bytes_uploaded += manifest.archive_size;
    ++result.blobs_uploaded;
  }
  BLZ_ASSIGN_OR_RETURN(BlobStat have_config, client.HeadBlob(ref.name, manifest.config_digest));
  if (!have_config.exists) {
    BLZ_ASSIGN_OR_RETURN(have_config.exists, client.MountBlob(ref.name, manifest.config_digest));
    have_config.size = manifest.config_size;
  }
  if (have_config.exists && have_config.size == manifest.config_size) {
    ++result.blobs_skipped;
  } else {
    BLZ_RETURN_IF_ERROR(client.UploadBlob(ref.name, manifest.config_digest, config_json));
    result.bytes_uploaded += config_json.size();
    ++result.blobs_uploaded;
  }
  BLZ_ASSIGN_OR_RETURN(result.manifest_digest,
                       client.PutManifest(ref.name, ref.tag, manifest_json));
  return result;
}

}  // namespace blz::client
