// blz strategy "exact": a tensor stored losslessly inside a .wdelta, with the lossless patch
// codec (patcher/tensor_codec.h) of the target bytes against the base bytes (or alone, when
// the base has no tensor of the same byte length). Decoding gives the target bytes bit for
// bit. Used for tensors the lossy strategies must not or cannot touch (other dtypes, 1-D and
// small tensors under bitdelta/lowrank, tensors auto finds no lossy strategy good enough for).
//
// Meta (key order): {"strategy":"exact","shape":[..],"dtype":<safetensors dtype of the
// target, e.g. "BF16">,"elem_size":k,"chunk_bytes":C,"with_base":bool}; fields (records):
//   "codecs"  uint8 [chunks]   codec id of each chunk (tensor_codec.h Codec)
//   "sizes"   int64 [chunks]   payload bytes of each chunk
//   "payload" uint8 [total]    the chunks' payloads, concatenated
// Chunk c covers target bytes [c*C, min((c+1)*C, size)); with_base, the same range of the
// base tensor is its base. A tensor of 0 bytes has 0 chunks.
#ifndef BLZ_PATCHER_LOSSY_EXACT_H_
#define BLZ_PATCHER_LOSSY_EXACT_H_

#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// `base` is empty or exactly target.size() bytes. `dtype` is the target's safetensors dtype
// name; elem_size 1, 2, 4 or 8.
Result<formats::WdeltaTensorOut> EncodeExact(const std::string& name, ByteSpan base,
                                             ByteSpan target, const std::string& dtype,
                                             uint32_t elem_size,
                                             const std::vector<uint64_t>& shape);

// Checks an "exact" payload against the output it must produce, `out_bytes` (the tensor's
// declared shape x dtype), and the base tensor's size, WITHOUT decoding or allocating
// anything of out_bytes' size: so a caller checks a file before it allocates the output (a
// shape of [2^40] over a few bytes of payload is refused here). Checked: the meta ("strategy"
// "exact", "shape" == `shape`, elem_size 1/2/4/8, 1 <= chunk_bytes <= patcher::kChunkBytes),
// with_base only with a base of out_bytes bytes, the fields' dtypes, one codec and one size
// per chunk of out_bytes, the sizes adding up to the payload exactly, and per chunk what its
// payload declares (patcher::CheckChunkPayload: its decoded size, element size and count).
// A payload that passes can still fail to decode (its compressed bytes are not inspected),
// but it cannot declare more than out_bytes. kCorruption "tensor '<name>' (exact): ...".
Status CheckExactPayload(const TensorPayload& p, const std::vector<uint64_t>& shape,
                         uint64_t out_bytes, uint64_t base_bytes);

// The target bytes into `out` (exactly the tensor's size, whose shape is `shape`). `base`: the
// base tensor's bytes (ignored unless the meta says with_base). Runs CheckExactPayload first.
// kCorruption naming the tensor and chunk.
Status DecodeExact(const TensorPayload& p, const std::vector<uint64_t>& shape, ByteSpan base,
                   MutableByteSpan out);

// Bytes the lossless patch codec spent on an EncodeExact result (the sum of its chunks'
// payloads): what a lossless blz patch would spend on the tensor, for comparison in reports.
uint64_t LosslessBytes(const formats::WdeltaTensorOut& exact);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_EXACT_H_
