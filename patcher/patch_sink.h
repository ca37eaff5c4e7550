// Applying a patch while handing the rebuilt bytes to a sink (issue 28): a patch pull writes
// the model's files from the same decoded chunks as the archive (client/pull_stream.h) instead
// of reading the archive back to verify and unpack it.
#ifndef BLZ_PATCHER_PATCH_SINK_H_
#define BLZ_PATCHER_PATCH_SINK_H_

#include <cstdint>
#include <string>

#include "core/bytes.h"
#include "core/progress_fn.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "formats/pack_layout.h"
#include "patcher/patch.h"

namespace blz::patcher {

// Sees the target archive as it is rebuilt. Called in order, one call at a time: Begin once
// with the target's header (parsed from the patch, before any data; on the applying thread),
// then Data for every non-empty piece's bytes in data-section order (a piece in one or more
// consecutive calls, each chunk already checked against the patch's xxh3-64; on a thread of
// the apply's own, so that the sink's work overlaps the archive's hashing and writing; the
// apply has joined it before it returns). Pieces with no bytes get no Data call.
// The target's SHA-256 is checked only after the last Data call: a sink must publish nothing
// that it has not checked itself before the apply returns OK. An error returned by the sink
// stops the apply with that error (the target is then not renamed into place).
class TargetSink {
 public:
  virtual ~TargetSink() = default;
  virtual Status Begin(const formats::ArchiveHeader& target) = 0;
  // `piece` is the target piece; `offset` is where `bytes` start within it.
  virtual Status Data(const formats::ArchivePiece& piece, uint64_t offset, ByteSpan bytes) = 0;
};

// ApplyPatch / ApplyFullPatch (patcher/patch.h, same checks, errors and atomic output) with
// `sink` (not null) fed the rebuilt bytes. An empty `target_out` writes no archive (as
// VerifyPatch): the sink then gets the only copy of the target (`blz apply` to a directory).
Status ApplyPatchToSink(const std::string& base_archive, const std::string& patch_path,
                        const std::string& target_out, TargetSink* sink, ApplyStats* stats,
                        const ApplyOptions& options = {});
Status ApplyFullPatchToSink(const std::string& patch_path, const std::string& target_out,
                            TargetSink* sink, ApplyStats* stats, const ApplyOptions& options = {});
// ApplyPatchToSink with the base given as a layout over its files, read in place (an archive
// the local store keeps as its model files: formats::PackLayout::FromArchivePrefix, client/
// local_store.h). `base_name` names it in errors. As with a model directory base, the base's
// digest (layout->ArchiveDigest(), a read of every base byte) is computed only when the rebuild
// fails, to report a wrong or damaged base as kDigestMismatch.
Status ApplyPatchToSink(formats::PackLayout* base, const std::string& base_name,
                        const std::string& patch_path, const std::string& target_out,
                        TargetSink* sink, ApplyStats* stats, const ApplyOptions& options = {});

// Hands an archive that is already whole (a downloaded blob, say) to `sink` as an apply would:
// Begin with its header, then Data for every non-empty piece in data-section order, in slices
// of at most 8 MiB read from the archive's mapping. Checks nothing itself: the sink checks the
// pieces and files, the caller the archive's SHA-256 (before) and its stored headers. So a full
// download is checked and unpacked in one read instead of a verification and an unpack.
// `progress` (optional): (piece bytes handed so far, their total). Errors: the sink's.
Status FeedArchiveToSink(const formats::BlzArchive& archive, TargetSink* sink,
                         const ProgressCallback& progress = {});

}  // namespace blz::patcher

#endif  // BLZ_PATCHER_PATCH_SINK_H_
