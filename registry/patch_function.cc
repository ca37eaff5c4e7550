// The only registry translation unit that calls into the patcher's implementation: binaries that
// never compute patches (most registry tests) do not need to link it.
#include "patcher/patch.h"
#include "registry/archive_storage.h"
#include "registry/background_jobs.h"
#include "registry/registry.h"

namespace blz::registry {

PatchFunction PatcherPatchFunction() {
  return [](const std::string& base_archive, const std::string& base_digest,
            const std::string& target_archive, const std::string& target_digest,
            const std::string& out_path) -> Status {
    patcher::DiffOptions options;
    options.known_base_digest = base_digest;
    options.known_target_digest = target_digest;
    // A ?async=1 request's job (registry/background_jobs.h): its poll shows the bytes coded.
    options.counters = CurrentJobCounters();
    patcher::DiffStats stats;
    return patcher::CreatePatch(base_archive, target_archive, out_path, options, &stats);
  };
}

FullPatchFunctions PatcherFullPatchFunctions() {
  FullPatchFunctions f;
  f.create = [](const std::string& archive_path, const std::string& archive_digest,
                const std::string& out_path, const std::atomic<bool>* cancel) -> Status {
    patcher::DiffOptions options;
    options.cancel = cancel;
    options.known_target_digest = archive_digest;
    return patcher::CreateFullPatch(archive_path, out_path, options, nullptr);
  };
  f.verify = [](const std::string& patch_path, const std::string& archive_digest) -> Status {
    BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
    if (!info.full || info.target_digest != archive_digest) {
      return Corruption(patch_path + ": not the full patch of " + archive_digest);
    }
    patcher::ApplyStats stats;
    BLZ_RETURN_IF_ERROR(patcher::VerifyPatch("", patch_path, &stats));
    if (stats.target_digest != archive_digest) {
      return DigestMismatch(patch_path + ": rebuilds " + stats.target_digest + ", not " +
                            archive_digest);
    }
    return Status::Ok();
  };
  f.rebuild = [](const std::string& patch_path, const std::string& archive_digest,
                 const std::string& out_path) -> Status {
    // ApplyFullPatch checks the SHA-256 against the patch's target before the file appears;
    // the patch must name the archive asked for.
    BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
    if (!info.full || info.target_digest != archive_digest) {
      return Corruption(patch_path + ": not the full patch of " + archive_digest);
    }
    patcher::ApplyStats stats;
    return patcher::ApplyFullPatch(patch_path, out_path, &stats);
  };
  f.archive_size = [](const std::string& patch_path) -> Result<uint64_t> {
    BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
    return info.target_bytes;
  };
  return f;
}

}  // namespace blz::registry
