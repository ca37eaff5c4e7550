// The only registry translation unit that calls into the patcher's implementation: binaries that
// never compute patches (most registry tests) do not need to link it.
#include "core/file_util.h"
#include "patcher/archive_reader.h"
#include "patcher/patch.h"
#include "patcher/patch_reader.h"
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

PatchFromReadersFunction PatcherPatchFromReadersFunction() {
  return [](std::shared_ptr<const patcher::ArchiveReader> base,
            std::shared_ptr<const patcher::ArchiveReader> target,
            const std::string& out_path) -> Status {
    patcher::DiffOptions options;
    options.counters = CurrentJobCounters();  // as PatcherPatchFunction
    patcher::DiffStats stats;
    return patcher::CreatePatchFromReaders(std::move(base), std::move(target), out_path,
                                           options, &stats);
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
  f.verify = [](const std::string& patch_path, const std::string& archive_path,
                const std::string& archive_digest) -> Status {
    BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
    if (!info.full || info.target_digest != archive_digest) {
      return Corruption(patch_path + ": not the full patch of " + archive_digest);
    }
    // The archive is the stored blob, verified when it was written: compared, not hashed.
    patcher::ApplyStats stats;
    return patcher::VerifyPatchAgainst("", patch_path, archive_path, archive_digest, &stats);
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
  // Chains (registry/archive_chains.cc): the parent as a reader (ArchiveStorage::OpenParent).
  f.diff = [](std::shared_ptr<const patcher::ArchiveReader> base, const std::string& target_path,
              const std::string& target_digest, const std::string& out_path,
              const std::atomic<bool>* cancel) -> Status {
    Result<std::shared_ptr<const patcher::ArchiveFileReader>> target =
        patcher::ArchiveFileReader::Open(target_path, target_digest);
    if (!target.ok()) return target.status();
    patcher::DiffOptions options;
    options.cancel = cancel;
    patcher::DiffStats stats;
    return patcher::CreatePatchFromReaders(std::move(base), std::move(*target), out_path,
                                           options, &stats);
  };
  // The patch must name exactly this base and target (a link read back from the store is
  // checked against the DB's row, not only against itself).
  f.verify_patch = [](std::shared_ptr<const patcher::ArchiveReader> base,
                      const std::string& patch_path, const std::string& target_digest,
                      const std::string& target_path) -> Status {
    BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
    if (info.full || info.base_digest != base->archive_digest() ||
        info.target_digest != target_digest) {
      return Corruption(patch_path + ": not the patch from " + base->archive_digest() + " to " +
                        target_digest);
    }
    // Every chunk decoded against the parent's and checked against its xxh3 (PatchReader),
    // the whole compared with the verified archive, or hashed.
    Result<std::shared_ptr<const patcher::PatchReader>> link =
        patcher::PatchReader::Open(patch_path, std::move(base));
    if (!link.ok()) return link.status();
    return patcher::VerifyReader(**link, target_path);
  };
  return f;
}

ApplyPatchFunction PatcherApplyPatchFunction() {
  return [](const std::string& base_archive, const std::string& base_digest,
            const std::string& patch_path, const std::string& target_digest,
            uint64_t max_bytes, const std::string& out_path) -> Status {
    BLZ_ASSIGN_OR_RETURN(patcher::PatchInfo info, patcher::ReadPatchInfo(patch_path));
    if (info.full) {
      return InvalidArgument("the upload is a full patch (it needs no base), not a patch from " +
                             base_digest);
    }
    if (info.base_digest != base_digest) {
      return InvalidArgument("the upload is a patch from " + info.base_digest +
                             ", but the session was opened for base " + base_digest);
    }
    if (info.target_digest != target_digest) {
      return DigestMismatch("the patch rebuilds " + info.target_digest + ", not " +
                            target_digest);
    }
    if (info.target_bytes > max_bytes) {
      return TooLarge("the patch rebuilds an archive of " + std::to_string(info.target_bytes) +
                      " bytes, over the blob size limit of " + std::to_string(max_bytes));
    }
    // ApplyPatch checks every chunk's xxh3-64 and the result's SHA-256 against the patch's
    // target (checked above to be `target_digest`) before the file appears.
    patcher::ApplyStats stats;
    BLZ_RETURN_IF_ERROR(patcher::ApplyPatch(base_archive, patch_path, out_path, &stats));
    if (stats.target_digest != target_digest) {
      RemoveAll(out_path);
      return DigestMismatch("the patch rebuilt " + stats.target_digest + ", not " +
                            target_digest);
    }
    return Status::Ok();
  };
}

}  // namespace blz::registry
