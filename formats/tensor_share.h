// How much of one archive's tensor bytes another archive holds, as a patch from it would find
// them (patcher/patch.cc, MakePlan; docs/patch-format.md, step 2): a tensor of the same name
// with the same dtype and shape (coded against it, XOR or better), or a tensor of any name
// with the same SHA-256, dtype and shape (identical: it costs nothing). The registry uses it to
// tell related versions of another structure when choosing a base (registry/base_handlers.cc);
// `blz push` to find held versions that share a model's tensors (client/push.cc).
#ifndef BLZ_FORMATS_TENSOR_SHARE_H_
#define BLZ_FORMATS_TENSOR_SHARE_H_

#include <cstdint>

#include "formats/blz_archive.h"

namespace blz::formats {

struct TensorShare {
  uint64_t target_bytes = 0;  // every tensor byte of the target
  uint64_t shared_bytes = 0;  // those the base holds (same name and type, or identical)
  uint64_t identical_bytes = 0;  // of those, held with the same SHA-256 (any name)
  // shared_bytes / target_bytes; 0 for a target without tensor bytes.
  double fraction() const {
    return target_bytes == 0 ? 0.0 : double(shared_bytes) / double(target_bytes);
  }
};

// Can `a` serve as the patch base of `b`: the same dtype and shape (and, for GGUF tensors, the
// same ggml type), hence the same length? The one rule for the patcher (matching by name or by
// content; checked again when a patch is applied) and for ShareOf.
bool SameTensorType(const ArchiveTensor& a, const ArchiveTensor& b);

// Headers only (the SHA-256 of each tensor is the header's); no tensor byte is read.
TensorShare ShareOf(const ArchiveHeader& target, const ArchiveHeader& base);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_TENSOR_SHARE_H_
