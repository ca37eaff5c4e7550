// Internals of the per-chunk tensor codecs (patcher/tensor_codec.h), exposed for tests and the
// codec lab (bench/codec_lab.cc). Not for other callers: use EncodeChunk / DecodeChunk.
#ifndef BLZ_PATCHER_CODEC_INTERNAL_H_
#define BLZ_PATCHER_CODEC_INTERNAL_H_

#include <cstdint>
#include <string>

#include "core/bytes.h"
#include "core/status.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher::internal {

// Codes `target` with exactly `codec` (no choice, no fallback). Same preconditions as
// EncodeChunk; kInvalidArgument if `codec` needs a base and `base` is empty, or (for
// kIdentical) if base != target.
Result<std::string> EncodeWith(Codec codec, ByteSpan base, ByteSpan target, uint32_t elem_size,
                               const CodecOptions& options);

}  // namespace blz::patcher::internal

#endif  // BLZ_PATCHER_CODEC_INTERNAL_H_
