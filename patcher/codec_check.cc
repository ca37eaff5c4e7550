// CheckChunkPayload (patcher/tensor_codec.h): the payload layouts are specified atop
// patcher/tensor_codec.cc.
#include <string>

#include "patcher/codec_stream.h"
#include "patcher/codec_zstd.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher {

using internal::PayloadReader;

Status CheckChunkPayload(Codec codec, uint64_t base_size, ByteSpan payload, uint32_t elem_size,
                         uint64_t out_size) {
  const uint32_t e = elem_size;
  if (e != 1 && e != 2 && e != 4 && e != 8) {
    return Corruption("element size " + std::to_string(e) + " is not 1, 2, 4 or 8");
  }
  if (out_size > kChunkBytes) {
    return Corruption("a chunk of " + std::to_string(out_size) + " bytes exceeds the " +
                      std::to_string(kChunkBytes) + "-byte chunk size");
  }
  const std::string name(CodecName(codec));
  PayloadReader r(payload);
  switch (codec) {
    case Codec::kIdentical:
      if (out_size != 0) BLZ_RETURN_IF_ERROR(internal::CheckBase(base_size, out_size, "identical"));
      return r.ExpectEnd("identical");
    case Codec::kZstd:
      return internal::ZstdCheckFrame(payload, out_size);
    case Codec::kSubPlanes: {
      BLZ_RETURN_IF_ERROR(
          internal::ReadPayloadHeader(r, name, true, true, base_size, out_size, e).status());
      return Status::Ok();
    }
    case Codec::kXorPlanes:
    case Codec::kSparse:
    case Codec::kPlanes: {
      const bool has_count = codec != Codec::kXorPlanes;
      const bool needs_base = codec != Codec::kPlanes;
      BLZ_ASSIGN_OR_RETURN(size_t n, internal::ReadPayloadHeader(r, name, needs_base, has_count,
                                                                  base_size, out_size, e));
      uint64_t len = n;
      uint32_t streams = e;
      if (codec == Codec::kSparse) {
        BLZ_ASSIGN_OR_RETURN(uint32_t m, r.U32("sparse change count"));
        if (m == 0 || m > n) {
          return Corruption("sparse change count " + std::to_string(m) + " is not in 1.." +
                            std::to_string(n));
        }
        len = m;
        streams = 4 + e;  // positions, then values
      }
      for (uint32_t k = 0; k < streams; ++k) {
        BLZ_RETURN_IF_ERROR(r.SkipStream(len, (name + " stream").c_str()));
      }
      BLZ_RETURN_IF_ERROR(r.Bytes(out_size - n * e, (name + " tail").c_str()).status());
      return r.ExpectEnd(name.c_str());
    }
  }
  return Corruption("unknown codec " + name);
}

}  // namespace blz::patcher
