// Per-tensor lossless patches between two .blz archives (model versions). Specified in
// docs/patch-format.md.
//
// A patch from base archive A to target archive B names A's digest and B's digest (SHA-256 of
// the archive files) and carries B's archive prefix (magic + header) plus, for every piece of B
// (tensor or raw), how to produce its bytes: a reference to an identical piece of A (no
// bytes), a codec applied against A's tensor of the same name, dtype and shape (XOR split into
// byte planes, each plane zstd-compressed), or zstd of the bytes alone (new, reshaped or
// re-typed tensors, changed files). Pieces of A that B lacks are simply not referenced (the
// header lists the removed tensor names for reporting).
//
// Memory: diff and apply hold at most one tensor's worth of decoded bytes plus fixed buffers
// (per worker thread); the archives are memory-mapped, the output is written with pwrite.
#ifndef BLZ_PATCHER_PATCH_H_
#define BLZ_PATCHER_PATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace blz::patcher {

struct DiffOptions {
  int zstd_level = 9;
  int threads = 0;  // 0 = number of cores
};

struct PieceReport {
  std::string name;      // tensor name, or the file path for raw pieces
  std::string codec;     // "identical", "xor-planes", "zstd", ...
  uint64_t target_bytes = 0;
  uint64_t patch_bytes = 0;
};

struct DiffStats {
  std::string base_digest;    // "sha256:<hex>"
  std::string target_digest;  // "sha256:<hex>"
  uint64_t target_bytes = 0;  // size of the target archive
  uint64_t patch_bytes = 0;   // size of the patch file
  uint32_t identical = 0, patched = 0, added = 0, removed = 0;
  std::vector<PieceReport> pieces;
};

// Writes the patch from `base_archive` to `target_archive` to `patch_path` (atomically).
Status CreatePatch(const std::string& base_archive, const std::string& target_archive,
                   const std::string& patch_path, const DiffOptions& options, DiffStats* stats);

struct PatchInfo {
  std::string base_digest;
  std::string target_digest;
  uint64_t target_bytes = 0;
};

// Reads only the patch's fixed header. Errors: kCorruption, kUnsupported (version).
Result<PatchInfo> ReadPatchInfo(const std::string& patch_path);

struct ApplyStats {
  std::string target_digest;
  uint64_t target_bytes = 0;
};

// Rebuilds the target archive at `target_out`. Checks that `base_archive` is the base the patch
// names (its SHA-256; kDigestMismatch otherwise), checks each piece's xxh3-64 as it is written
// (kCorruption naming the tensor) and the target's SHA-256 at the end, and only then renames the
// result into place. `target_out` must not exist (kAlreadyExists). Nothing is left behind on
// failure.
Status ApplyPatch(const std::string& base_archive, const std::string& patch_path,
                  const std::string& target_out, ApplyStats* stats);

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_PATCH_H_
