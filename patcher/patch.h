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
// A *full patch* (format version 2) has no base: it carries every piece of B coded without
// one (byte planes + zstd, or zstd; raw pieces with zstd), so it is B compressed per tensor, as
// ZipNN does. It is what a registry stores and sends for an archive when the client holds no
// usable base (CreateFullPatch / ApplyFullPatch). Its header's "base" is null.
//
// Memory: diff and apply hold at most one tensor's worth of decoded bytes plus fixed buffers
// (per worker thread); the archives are memory-mapped, the output is written with pwrite.
#ifndef BLZ_PATCHER_PATCH_H_
#define BLZ_PATCHER_PATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/progress_fn.h"
#include "core/status.h"

namespace blz::formats {
class PackLayout;
}  // namespace blz::formats

namespace blz::patcher {

struct DiffOptions {
  int zstd_level = 9;
  int threads = 0;  // 0 = number of cores
  // When not null and set (by another thread) while a patch is being made, CreatePatch /
  // CreateFullPatch stop early with kUnavailable ("cancelled") and write nothing.
  const std::atomic<bool>* cancel = nullptr;
  // The archives' digests ("sha256:<hex>"), when the caller already holds them verified (a
  // content-addressed store that checked each blob's SHA-256 when it was written). When set,
  // the patch records them as they are and that archive is not hashed again: two SHA-256 passes
  // are a quarter of a diff's CPU time. Every tensor is still checked against its xxh3 in the
  // target's header, and ApplyPatch checks the rebuilt target's SHA-256. A malformed digest is
  // kInvalidArgument. Empty: hashed (what the CLI does).
  std::string known_base_digest;
  std::string known_target_digest;
  // Optional (core/progress_fn.h): target bytes coded so far (archive header and pieces), of
  // all of them; set while CreatePatch / CreateFullPatch code the target.
  ProgressCounters* counters = nullptr;
};

struct PieceReport {
  std::string name;      // tensor name, or the file path for raw pieces
  std::string codec;     // "identical", "xor-planes", "zstd", ...
  uint64_t target_bytes = 0;
  uint64_t patch_bytes = 0;
};

struct DiffStats {
  std::string base_digest;    // "sha256:<hex>"; "" for a full patch
  std::string target_digest;  // "sha256:<hex>"
  uint64_t target_bytes = 0;  // size of the target archive
  uint64_t patch_bytes = 0;   // size of the patch file
  uint32_t identical = 0, patched = 0, added = 0, removed = 0;
  std::vector<PieceReport> pieces;
};

// Writes the patch from `base_archive` to `target_archive` to `patch_path` (atomically).
// Either side may also be the model itself, as Pack takes it (a model directory, or one
// .safetensors or .gguf file; formats::DetectModelPath decides): it is read in place
// (formats/pack_layout.h), its header hashes computed first (both sides on two threads), and
// the patch is byte for byte the one of its packed archive; nothing is packed or written but
// the patch.
// Errors: kNotFound / kCorruption (an archive, or a model's files, naming them; a file that is
// neither is refused as an archive), kInvalidArgument (options), kAlreadyExists (patch_path
// exists), kUnavailable (cancelled), kIOError.
Status CreatePatch(const std::string& base_archive, const std::string& target_archive,
                   const std::string& patch_path, const DiffOptions& options, DiffStats* stats);

// CreatePatch with the base given as an archive laid over its files (a version the local store
// keeps as its files: formats::PackLayout::FromArchivePrefix, hashed() already, client/
// local_store.h), read in place: the same patch as from that archive, which is not rebuilt.
// `base_name` names it in errors. The base's digest is options.known_base_digest when given,
// else its ArchiveDigest (a read of every base byte). Errors: CreatePatch's; kInvalidArgument
// when `base` is not hashed.
Status CreatePatch(const formats::PackLayout& base, const std::string& base_name,
                   const std::string& target_archive, const std::string& patch_path,
                   const DiffOptions& options, DiffStats* stats);

// CreatePatch for archives that may be stored as patches themselves (patcher/archive_reader.h:
// a full patch, or a chain link over its parent's reader; or a plain file), so that nothing
// is rebuilt on disk: a registry serving the patch between two versions it stores compressed
// or chained (registry/blz_handlers.cc). The patch is byte for byte the one CreatePatch makes
// of the same two archives. A plain file (ArchiveFileReader) is read through its mapping as
// CreatePatch does; a patch's chunks are decoded as the diff reaches them, each once (the
// chunks a tensor's codec choice samples are decoded ahead, side by side on the worker
// threads, and kept until the job that codes them takes them), and every decoded chunk is
// checked against its xxh3-64 by the reader. The digests are the readers' (options' known
// digests, when given, must be the same: kInvalidArgument), so neither archive is hashed.
// Memory: as CreatePatch, plus one decoded chunk per worker thread and per chunk waiting to be
// written, and at most 24 kept chunks (4 MiB each) per archive read through a patch.
// Errors: CreatePatch's, and the readers' (kCorruption naming the patch, the piece and the
// chunk that does not decode).
class ArchiveReader;
Status CreatePatchFromReaders(std::shared_ptr<const ArchiveReader> base,
                              std::shared_ptr<const ArchiveReader> target,
                              const std::string& patch_path, DiffOptions options,
                              DiffStats* stats);

// Writes the full patch of `target_archive` (no base) to `patch_path` (atomically). Every
// piece is coded by EncodeChunk with no base; the stats count every tensor as `added` and
// base_digest is "". Errors as CreatePatch.
Status CreateFullPatch(const std::string& target_archive, const std::string& patch_path,
                       const DiffOptions& options, DiffStats* stats);

struct PatchInfo {
  bool full = false;          // a full patch: needs no base (base_digest is "")
  std::string base_digest;    // "sha256:<hex>" of the base archive; "" for a full patch
  std::string target_digest;  // "sha256:<hex>" of the archive the patch rebuilds
  uint64_t target_bytes = 0;
  uint32_t format_version = 0;
};

// Reads and validates the patch's header (the fixed bytes and the JSON; not the payloads).
// Errors: kNotFound, kCorruption, kTooLarge, kUnsupported (version).
Result<PatchInfo> ReadPatchInfo(const std::string& patch_path);

struct ApplyOptions {
  int threads = 0;  // decoding threads; 0 = number of cores
  // Optional: (target bytes rebuilt and checked so far, target size), called on the calling
  // thread as chunks are written in order; monotonic, and on success the last call has
  // done == total (before the result is renamed into place).
  ProgressCallback progress;
};

struct ApplyStats {
  std::string target_digest;
  uint64_t target_bytes = 0;
  // The target's prefix (magic, header, padding: its first data_start bytes), as decoded and
  // proven with the rest by the target's SHA-256: what a caller that keeps no archive keeps
  // of it (client/local_store.h). Set only on success.
  std::string target_prefix;
};

// Rebuilds the target archive at `target_out`. Checks each chunk's xxh3-64 as it is decoded
// (kCorruption naming the tensor and chunk) and the target's SHA-256 at the end, and
// only then renames the result into place. `base_archive` must be the base the patch names:
// a base of another size, or any failure with a base whose SHA-256 is not the one the patch
// names, is kDigestMismatch. (The base is hashed only when something failed: a correct output
// is proof enough, and that saves a full pass over the base.) `target_out` must not exist
// (kAlreadyExists). Nothing is left behind on failure. A full patch is refused
// (kInvalidArgument: it needs no base; use ApplyFullPatch).
// `base_archive` may also be the model itself, as Pack takes it (a model directory, or one
// .safetensors or .gguf file; formats::DetectModelPath decides): its pieces are then read
// from its files in place (formats/pack_layout.h), nothing is packed or written, and only when
// the rebuild fails is the archive Pack would make of it hashed (kDigestMismatch "base model
// packs to digest ..."). Errors opening it: PackLayout::Open's. So does every function below
// that takes a base.
Status ApplyPatch(const std::string& base_archive, const std::string& patch_path,
                  const std::string& target_out, ApplyStats* stats,
                  const ApplyOptions& options = {});

// Rebuilds the archive a full patch holds at `target_out`, with the checks of ApplyPatch (each
// chunk's xxh3-64, the target's SHA-256 before the rename). A patch that needs a base is refused
// (kInvalidArgument naming the base digest it needs).
Status ApplyFullPatch(const std::string& patch_path, const std::string& target_out,
                      ApplyStats* stats, const ApplyOptions& options = {});

// Decodes the whole patch with every check of ApplyPatch (ApplyFullPatch when `base_archive` is
// "") but writes nothing: OK means applying it gives exactly the archive it names
// (stats->target_digest). Used to verify a patch before relying on it (the registry drops a raw
// archive only after its full patch verified). Errors as ApplyPatch / ApplyFullPatch, except
// kAlreadyExists.
Status VerifyPatch(const std::string& base_archive, const std::string& patch_path,
                   ApplyStats* stats, const ApplyOptions& options = {});

// VerifyPatch for a caller that holds the target too: the archive at `target_archive`, whose
// SHA-256 the caller verified to be `target_digest` (a registry's stored blob). The patch must
// name that target (kDigestMismatch otherwise); it is decoded with every check of VerifyPatch
// except the SHA-256 of the result, which is compared byte for byte with `target_archive`
// instead (gaps between pieces included): kDigestMismatch naming the first chunk that differs,
// or a different size. OK proves what VerifyPatch proves, for a memcmp instead of a SHA-256 pass
// over the target (about 0.7 CPU s per GB). Errors otherwise as VerifyPatch.
Status VerifyPatchAgainst(const std::string& base_archive, const std::string& patch_path,
                          const std::string& target_archive, const std::string& target_digest,
                          ApplyStats* stats, const ApplyOptions& options = {});

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_PATCH_H_
