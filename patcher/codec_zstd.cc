#include "patcher/codec_zstd.h"

// ZSTD_c_literalCompressionMode is in zstd's experimental section (stable in every 1.5.x; the
// build pins Debian bookworm's 1.5.4). Setting it is checked: an unknown parameter is an error.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <memory>
#include <vector>

namespace blz::patcher::internal {
namespace {

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// The calling thread's contexts (nullptr only if zstd could not allocate one).
ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

Result<size_t> CompressInto(ByteSpan src, int level, uint8_t* dst, size_t cap) {
  ZSTD_CCtx* cctx = ThreadCCtx();
  if (cctx == nullptr) return Internal("zstd: cannot create a compression context");
  size_t n = ZSTD_compressCCtx(cctx, dst, cap, src.data(), src.size(), level);
  if (ZSTD_isError(n)) return Internal(std::string("zstd compress: ") + ZSTD_getErrorName(n));
  return n;
}

Status SetParameter(ZSTD_CCtx* cctx, ZSTD_cParameter p, int value, const char* name) {
  size_t rc = ZSTD_CCtx_setParameter(cctx, p, value);
  if (ZSTD_isError(rc)) {
    return Internal(std::string("zstd: cannot set ") + name + " to " + std::to_string(value) +
                    ": " + ZSTD_getErrorName(rc));
  }
  return Status::Ok();
}

Result<size_t> CompressPlaneInto(ByteSpan src, int level, uint8_t* dst, size_t cap) {
  ZSTD_CCtx* cctx = ThreadCCtx();
  if (cctx == nullptr) return Internal("zstd: cannot create a compression context");
  // Sticky parameters: reset first (ZSTD_compressCCtx above ignores them).
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  BLZ_RETURN_IF_ERROR(SetParameter(cctx, ZSTD_c_compressionLevel, level, "level"));
  BLZ_RETURN_IF_ERROR(SetParameter(cctx, ZSTD_c_strategy, ZSTD_fast, "strategy"));
  BLZ_RETURN_IF_ERROR(SetParameter(cctx, ZSTD_c_minMatch, 7, "minMatch"));
  BLZ_RETURN_IF_ERROR(SetParameter(cctx, ZSTD_c_targetLength, 1000, "targetLength"));
  BLZ_RETURN_IF_ERROR(SetParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_enable,
                                   "literalCompressionMode"));
  size_t n = ZSTD_compress2(cctx, dst, cap, src.data(), src.size());
  if (ZSTD_isError(n)) return Internal(std::string("zstd compress: ") + ZSTD_getErrorName(n));
  return n;
}

// Does `src` have runs? Every 61st byte is compared with the one before it (a deterministic
// sample of 1/61 of the plane); more than half equal: yes.
bool HasRuns(ByteSpan src) {
  constexpr size_t kStride = 61;
  size_t same = 0, n = 0;
  for (size_t i = 1; i < src.size(); i += kStride, ++n) same += src[i] == src[i - 1];
  return same * 2 > n;
}

// Compresses into the calling thread's buffer, then appends the frame: growing `out` by the
// compression bound instead would zero-fill (and, for fresh memory, page-fault in) more bytes
// than the frame has, on every call.
template <typename Compress>
Status AppendWith(ByteSpan src, int level, std::string* out, Compress compress) {
  thread_local std::vector<uint8_t> frame;
  const size_t bound = ZSTD_compressBound(src.size());
  if (frame.size() < bound) frame.resize(bound);
  BLZ_ASSIGN_OR_RETURN(size_t n, compress(src, level, frame.data(), bound));
  out->append(reinterpret_cast<const char*>(frame.data()), n);
  return Status::Ok();
}

}  // namespace

Status ZstdCompressAppend(ByteSpan src, int level, std::string* out) {
  return AppendWith(src, level, out, CompressInto);
}

Status ZstdCompressPlaneAppend(ByteSpan src, int level, std::string* out) {
  if (HasRuns(src)) return AppendWith(src, level, out, CompressInto);
  return AppendWith(src, level, out, CompressPlaneInto);
}

Result<uint64_t> ZstdCompressedSize(ByteSpan src, int level) {
  thread_local std::string scratch;
  scratch.resize(ZSTD_compressBound(src.size()));
  BLZ_ASSIGN_OR_RETURN(size_t n, CompressInto(src, level, reinterpret_cast<uint8_t*>(
                                                              scratch.data()),
                                              scratch.size()));
  return uint64_t(n);
}

Status ZstdCheckFrame(ByteSpan frame, uint64_t content_size) {
  size_t frame_size = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(frame_size) || frame_size != frame.size()) {
    return Corruption("zstd stream of " + std::to_string(frame.size()) +
                      " bytes is not exactly one frame");
  }
  unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR) {
    return Corruption("zstd frame header has no valid content size");
  }
  if (content != content_size) {
    return Corruption("zstd frame content size " + std::to_string(content) + " != expected " +
                      std::to_string(content_size));
  }
  return Status::Ok();
}

Status ZstdDecompressExact(ByteSpan frame, MutableByteSpan out) {
  BLZ_RETURN_IF_ERROR(ZstdCheckFrame(frame, out.size()));
  ZSTD_DCtx* dctx = ThreadDCtx();
  if (dctx == nullptr) return Internal("zstd: cannot create a decompression context");
  size_t n = ZSTD_decompressDCtx(dctx, out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) return Corruption(std::string("zstd decompress: ") + ZSTD_getErrorName(n));
  if (n != out.size()) {
    return Corruption("zstd frame decoded to " + std::to_string(n) + " bytes, expected " +
                      std::to_string(out.size()));
  }
  return Status::Ok();
}

}  // namespace blz::patcher::internal
