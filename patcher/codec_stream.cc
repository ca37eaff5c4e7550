#include "patcher/codec_stream.h"

#include <cstring>
#include <vector>

#include "patcher/codec_zstd.h"

namespace blz::patcher::internal {
namespace {

bool AllZero(ByteSpan s) {
  const uint8_t* p = s.data();
  size_t n = s.size(), i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t v[4];
    std::memcpy(v, p + i, 32);
    if ((v[0] | v[1] | v[2] | v[3]) != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

uint8_t* Scratch(int slot, size_t n) {
  thread_local std::vector<uint8_t> bufs[4];
  std::vector<uint8_t>& buf = bufs[slot & 3];
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

Status AppendStream(ByteSpan s, int level, std::string* out) {
  if (AllZero(s)) {
    out->push_back(char(StreamMode::kZero));
    return Status::Ok();
  }
  size_t head = out->size();
  out->push_back(char(StreamMode::kZstd));
  AppendLE32(out, 0);
  BLZ_RETURN_IF_ERROR(ZstdCompressPlaneAppend(s, level, out));
  uint64_t c = out->size() - head - 5;
  // Keep the frame only if it saves at least 1/32 of the bytes: decoding a near-incompressible
  // Huffman stream runs at ~1 GB/s, copying raw bytes many times faster (bench/codec_lab.cc:
  // +1% size at most on a low mantissa plane, for up to 25% faster decoding of F32 chunks).
  constexpr uint64_t kMinGainDiv = 32;
  if (c + s.size() / kMinGainDiv >= s.size() || c > UINT32_MAX) {
    out->resize(head);
    out->push_back(char(StreamMode::kRaw));
    out->append(reinterpret_cast<const char*>(s.data()), s.size());
    return Status::Ok();
  }
  StoreLE32(reinterpret_cast<uint8_t*>(out->data()) + head + 1, uint32_t(c));
  return Status::Ok();
}

Result<uint8_t> PayloadReader::U8(const char* what) {
  if (left() < 1) return Truncated(what, 1);
  return p_[pos_++];
}

Result<uint32_t> PayloadReader::U32(const char* what) {
  if (left() < 4) return Truncated(what, 4);
  uint32_t v = LoadLE32(p_.data() + pos_);
  pos_ += 4;
  return v;
}

Result<ByteSpan> PayloadReader::Bytes(uint64_t n, const char* what) {
  if (n > left()) return Truncated(what, n);
  ByteSpan s = p_.subspan(pos_, n);
  pos_ += n;
  return s;
}

Result<PayloadReader::StreamBytes> PayloadReader::NextStream(uint64_t len, const char* what) {
  const size_t at = pos_;
  BLZ_ASSIGN_OR_RETURN(uint8_t mode, U8(what));
  switch (StreamMode(mode)) {
    case StreamMode::kZero:
      return StreamBytes{StreamMode::kZero, {}, at};
    case StreamMode::kRaw: {
      BLZ_ASSIGN_OR_RETURN(ByteSpan raw, Bytes(len, what));
      return StreamBytes{StreamMode::kRaw, raw, at};
    }
    case StreamMode::kZstd: {
      BLZ_ASSIGN_OR_RETURN(uint32_t c, U32(what));
      BLZ_ASSIGN_OR_RETURN(ByteSpan frame, Bytes(c, what));
      return StreamBytes{StreamMode::kZstd, frame, at};
    }
  }
  return Corruption(std::string(what) + ": unknown stream mode " + std::to_string(mode) +
                    " at payload offset " + std::to_string(at));
}

Status PayloadReader::Stream(MutableByteSpan out, const char* what) {
  BLZ_ASSIGN_OR_RETURN(StreamBytes s, NextStream(out.size(), what));
  switch (s.mode) {
    case StreamMode::kZero:
      if (!out.empty()) std::memset(out.data(), 0, out.size());
      return Status::Ok();
    case StreamMode::kRaw:
      if (!s.bytes.empty()) std::memcpy(out.data(), s.bytes.data(), s.bytes.size());
      return Status::Ok();
    case StreamMode::kZstd: {
      Status st = ZstdDecompressExact(s.bytes, out);
      if (st.ok()) return st;
      return st.WithContext(std::string(what) + " at payload offset " + std::to_string(s.at));
    }
  }
  return Internal("unreachable stream mode");
}

Status PayloadReader::SkipStream(uint64_t len, const char* what) {
  BLZ_ASSIGN_OR_RETURN(StreamBytes s, NextStream(len, what));
  if (s.mode != StreamMode::kZstd) return Status::Ok();
  Status st = ZstdCheckFrame(s.bytes, len);
  if (st.ok()) return st;
  return st.WithContext(std::string(what) + " at payload offset " + std::to_string(s.at));
}

Status PayloadReader::ExpectEnd(const char* codec) const {
  if (left() != 0) {
    return Corruption(std::string(codec) + " payload has " + std::to_string(left()) +
                      " trailing bytes at offset " + std::to_string(pos_));
  }
  return Status::Ok();
}

Status PayloadReader::Truncated(const char* what, uint64_t need) const {
  return Corruption(std::string(what) + ": payload truncated at offset " + std::to_string(pos_) +
                    " (need " + std::to_string(need) + " bytes, " + std::to_string(left()) +
                    " left)");
}

namespace {

Status CheckElemByte(PayloadReader& r, uint32_t e, const char* codec) {
  BLZ_ASSIGN_OR_RETURN(uint8_t stored, r.U8(codec));
  if (stored != e) {
    return Corruption(std::string(codec) + " payload element size " + std::to_string(stored) +
                      " != expected " + std::to_string(e));
  }
  return Status::Ok();
}

Status CheckCount(PayloadReader& r, size_t n, const char* codec) {
  BLZ_ASSIGN_OR_RETURN(uint32_t stored, r.U32(codec));
  if (stored != n) {
    return Corruption(std::string(codec) + " payload has " + std::to_string(stored) +
                      " elements, the chunk " + std::to_string(n));
  }
  return Status::Ok();
}

}  // namespace

Status CheckBase(uint64_t base_size, uint64_t out_size, const char* codec) {
  if (base_size != out_size) {
    return Corruption(std::string(codec) + " chunk needs a base of " + std::to_string(out_size) +
                      " bytes, got " + std::to_string(base_size));
  }
  return Status::Ok();
}

Result<size_t> ReadPayloadHeader(PayloadReader& r, const std::string& codec, bool needs_base,
                                 bool has_count, uint64_t base_size, uint64_t out_size,
                                 uint32_t e) {
  if (needs_base) BLZ_RETURN_IF_ERROR(CheckBase(base_size, out_size, codec.c_str()));
  BLZ_RETURN_IF_ERROR(CheckElemByte(r, e, (codec + " element size").c_str()));
  const size_t n = out_size / e;
  if (has_count) BLZ_RETURN_IF_ERROR(CheckCount(r, n, (codec + " element count").c_str()));
  return n;
}

}  // namespace blz::patcher::internal
