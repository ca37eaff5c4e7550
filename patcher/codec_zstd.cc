#include "patcher/codec_zstd.h"

#include <zstd.h>

#include <memory>

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

}  // namespace

Status ZstdCompressAppend(ByteSpan src, int level, std::string* out) {
  size_t old = out->size();
  out->resize(old + ZSTD_compressBound(src.size()));
  auto n = CompressInto(src, level, reinterpret_cast<uint8_t*>(out->data()) + old,
                        out->size() - old);
  if (!n.ok()) {
    out->resize(old);
    return n.status();
  }
  out->resize(old + *n);
  return Status::Ok();
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
