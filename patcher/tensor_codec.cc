// Per-chunk tensor codecs. Interface: patcher/tensor_codec.h.
//
// PAYLOAD LAYOUTS (all integers little-endian; a payload must be consumed exactly: trailing
// bytes are kCorruption). N = out.size() (the chunk's byte size), E = elem_size (1, 2, 4, 8),
// n = N / E whole elements, t = N % E bytes of a trailing partial element. Elements are
// little-endian unsigned integers of E bytes; "byte k" of an element is bits 8k..8k+7 (so byte
// E-1 holds the sign and the high exponent bits of a float).
//
// Stream (a building block of several codecs; its decoded length L is known from context):
//   u8 mode
//   mode 0 (zero): nothing follows; the L decoded bytes are all 0x00
//   mode 1 (raw):  L bytes, stored as is
//   mode 2 (zstd): u32 C, then C bytes that are exactly one zstd frame whose header records
//                  content size L (checked before decompressing)
//   other modes: kCorruption
//
// Codecs 3, 4 and 5 record n, so chunks are limited to n < 2^32 elements (chunks are at most
// kChunkBytes).
//
// Codec 0 kIdentical: empty payload. Output = base (base.size() must equal N). Also used for
//   an empty chunk (N == 0), with or without a base.
//
// Codec 1 kZstd: the payload is exactly one zstd frame of the N target bytes, content size N
//   recorded in the frame header. No base needed (the base, if any, is ignored).
//
// Codec 2 kXorPlanes: needs base.size() == N. X = base XOR target, byte by byte.
//   u8 E                         must equal the elem_size given to DecodeChunk
//   E streams, k = 0 .. E-1      stream k (L = n) is byte k of every whole element of X, in
//                                element order
//   t bytes                      the last t bytes of X (the partial element), raw
//
// Codec 3 kSubPlanes: needs base.size() == N. For element i, D[i] = zigzag((T[i] - B[i]) mod
//   2^(8E)) where zigzag(d) = (d << 1) XOR (all ones if the top bit of d is set, else 0), in
//   E-byte arithmetic (so a difference of -1 codes as 1, +1 as 2). Elements are grouped by a
//   key read from the base: key[i] = (B[i] >> S) & (2^K - 1) (the exponent field of a float:
//   F32 S=23 K=8, BF16 S=7 K=8, F16 S=10 K=5, F64 S=52 K=11, F8_E4M3 S=3 K=4, F8_E5M2 S=2
//   K=5; integers K=0: one group; the encoder picks, the decoder reads S and K). The sorted order
//   lists the element indices by ascending key, ties by ascending index (a stable sort).
//   Segments: walking the groups in key order, elements are accumulated into the current
//   segment, which is closed after a group once it holds >= M elements; a last segment with
//   fewer than M elements is merged into the previous one (if any). n == 0: no segments.
//   u8 E                         must equal elem_size
//   u32 n                        must equal N / E
//   u8 S, u8 K                   K <= 12, S + K <= 8E
//   u32 M                        M >= 1
//   for plane k = 0 .. E-1, for each segment s in order: one stream (L = the segment's element
//                                count) holding byte k of D of the segment's elements, in
//                                sorted order
//   t bytes                      the last t bytes of base XOR target, raw
//
// Codec 4 kSparse: needs base.size() == N. The changed whole elements are those
//   with T[i] != B[i], at indices p_0 < p_1 < ... < p_{m-1}; every other element equals the
//   base. G_0 = p_0, G_j = p_j - p_{j-1} - 1 (u32). D_j = zigzag(T[p_j] - B[p_j]) as in codec
//   3 (never 0).
//   u8 E                         must equal elem_size
//   u32 n                        must equal N / E
//   u32 m                        1 <= m <= n
//   4 streams (L = m)            stream k = byte k of G_0 .. G_{m-1}
//   E streams (L = m)            stream k = byte k of D_0 .. D_{m-1}
//   t bytes                      the last t bytes of base XOR target, raw
//   Decoding checks p_{m-1} < n and D_j != 0.
//
// Codec 5 kPlanes (no base; a base, if given, is ignored):
//   u8 E                         must equal elem_size
//   u32 n                        must equal N / E
//   E streams (L = n)            stream k = byte k of every whole target element
//   t bytes                      the last t target bytes, raw
#include "patcher/tensor_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "patcher/codec_internal.h"
#include "patcher/codec_stream.h"
#include "patcher/codec_zstd.h"

namespace blz::patcher {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the codecs load little-endian elements with memcpy");

using internal::AppendStream;
using internal::CheckBase;
using internal::PayloadReader;
using internal::ReadPayloadHeader;
using internal::Scratch;
using internal::ZstdCompressAppend;
using internal::ZstdDecompressExact;

constexpr uint32_t kMaxKeyBits = 12;
constexpr uint32_t kSegmentMinElems = 4096;      // M written by the encoder (measured)
constexpr uint64_t kSampleSlices = 8;
constexpr uint64_t kSampleSliceBytes = 16 << 10;

bool ValidElemSize(uint32_t e) { return e == 1 || e == 2 || e == 4 || e == 8; }

template <typename T>
T LoadT(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void StoreT(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Zigzag(T d) {
  return T(T(d << 1) ^ T(T(0) - T(d >> (sizeof(T) * 8 - 1))));
}
template <typename T>
T Unzigzag(T z) {
  return T(T(z >> 1) ^ T(T(0) - T(z & 1)));
}

// Dispatches `f.template operator()<T>()` on the unsigned type of `e` bytes.
template <typename F>
auto WithElemType(uint32_t e, F&& f) {
  switch (e) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

// Scatters the E bytes of v into planes at column j (plane k at planes + k * n).
template <typename T>
inline void PutPlanes(uint8_t* planes, size_t n, size_t j, T v) {
  for (size_t k = 0; k < sizeof(T); ++k) planes[k * n + j] = uint8_t(v >> (8 * k));
}
template <typename T>
inline T GetPlanes(const uint8_t* planes, size_t n, size_t j) {
  T v = 0;
  for (size_t k = 0; k < sizeof(T); ++k) v = T(v | T(T(planes[k * n + j]) << (8 * k)));
  return v;
}

// Element loops as plain functions with __restrict pointers and the element size known at
// compile time (LoadT at i * sizeof(T)): written with the runtime size (i * e) in lambdas
// capturing spans, GCC kept them scalar, e.g. CountChanged was 7% of a diff.
// SplitToPlanes: plane k, column i = byte k of (src[i] XOR base[i] if kXor, else src[i]).
template <typename T, bool kXor>
void SplitToPlanes(const uint8_t* __restrict base, const uint8_t* __restrict src, size_t n,
                   uint8_t* __restrict planes) {
  for (size_t i = 0; i < n; ++i) {
    T v = LoadT<T>(src + i * sizeof(T));
    if constexpr (kXor) v = T(v ^ LoadT<T>(base + i * sizeof(T)));
    PutPlanes<T>(planes, n, i, v);
  }
}
// The inverse: out[i] = the element in column i of the planes (XOR base[i] if kXor).
template <typename T, bool kXor>
void JoinFromPlanes(const uint8_t* __restrict base, const uint8_t* __restrict planes, size_t n,
                    uint8_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    T v = GetPlanes<T>(planes, n, i);
    if constexpr (kXor) v = T(v ^ LoadT<T>(base + i * sizeof(T)));
    StoreT<T>(out + i * sizeof(T), v);
  }
}
template <typename T>
uint64_t CountChangedT(const uint8_t* __restrict a, const uint8_t* __restrict b, size_t n) {
  uint64_t m = 0;
  for (size_t i = 0; i < n; ++i) m += LoadT<T>(a + i * sizeof(T)) != LoadT<T>(b + i * sizeof(T));
  return m;
}

Status AppendPlanes(const uint8_t* planes, size_t n, uint32_t e, int level, std::string* out) {
  for (uint32_t k = 0; k < e; ++k) {
    BLZ_RETURN_IF_ERROR(AppendStream(ByteSpan(planes + k * n, n), level, out));
  }
  return Status::Ok();
}
Status ReadPlanes(PayloadReader& r, uint8_t* planes, size_t n, uint32_t e, const char* what) {
  for (uint32_t k = 0; k < e; ++k) {
    BLZ_RETURN_IF_ERROR(r.Stream(MutableByteSpan(planes + k * n, n), what));
  }
  return Status::Ok();
}

// Writes the element count of codecs 3, 4, 5 (checked by ReadPayloadHeader).
Status AppendCount(size_t n, const char* codec, std::string* out) {
  if (n > UINT32_MAX) {
    return InvalidArgument(std::string(codec) + ": chunk has more than 2^32 elements");
  }
  AppendLE32(out, uint32_t(n));
  return Status::Ok();
}
void AppendXorTail(ByteSpan base, ByteSpan target, size_t from, std::string* out) {
  for (size_t j = from; j < target.size(); ++j) out->push_back(char(base[j] ^ target[j]));
}
Status ReadXorTail(PayloadReader& r, ByteSpan base, size_t from, MutableByteSpan out,
                   const char* what) {
  BLZ_ASSIGN_OR_RETURN(ByteSpan t, r.Bytes(out.size() - from, what));
  for (size_t j = 0; j < t.size(); ++j) out[from + j] = base[from + j] ^ t[j];
  return Status::Ok();
}

// ---- codec 2: xor planes -----------------------------------------------------------------

Result<std::string> EncodeXorPlanes(ByteSpan base, ByteSpan target, uint32_t e, int level) {
  size_t n = target.size() / e;
  uint8_t* planes = Scratch(0, n * e);
  WithElemType(e, [&]<typename T>() {
    SplitToPlanes<T, true>(base.data(), target.data(), n, planes);
  });
  std::string out;
  out.push_back(char(e));
  BLZ_RETURN_IF_ERROR(AppendPlanes(planes, n, e, level, &out));
  AppendXorTail(base, target, n * e, &out);
  return out;
}

Status DecodeXorPlanes(ByteSpan base, ByteSpan payload, uint32_t e, MutableByteSpan out) {
  PayloadReader r(payload);
  BLZ_ASSIGN_OR_RETURN(size_t n, ReadPayloadHeader(r, "xor-planes", true, false, base.size(), out.size(), e));
  uint8_t* planes = Scratch(0, n * e);
  BLZ_RETURN_IF_ERROR(ReadPlanes(r, planes, n, e, "xor-planes plane"));
  BLZ_RETURN_IF_ERROR(ReadXorTail(r, base, n * e, out, "xor-planes tail"));
  BLZ_RETURN_IF_ERROR(r.ExpectEnd("xor-planes"));
  WithElemType(e, [&]<typename T>() {
    JoinFromPlanes<T, true>(base.data(), planes, n, out.data());
  });
  return Status::Ok();
}

// ---- codec 3: sub planes, grouped by the base exponent ----------------------------------

struct GroupKey {
  uint32_t shift = 0;
  uint32_t bits = 0;
};

// The exponent field of `dtype` (K = 0 for integer types).
GroupKey KeyForDType(formats::DType t) {
  using formats::DType;
  switch (t) {
    case DType::kF32: return {23, 8};
    case DType::kBF16: return {7, 8};
    case DType::kF16: return {10, 5};
    case DType::kF64: return {52, 11};
    case DType::kF8_E4M3: return {3, 4};
    case DType::kF8_E5M2: return {2, 5};
    default: return {0, 0};
  }
}

// Group layout shared by encoder and decoder. The stable sort by key is computed as kParts
// independent runs over the kParts contiguous parts of the chunk (part q covers elements
// [begin[q], begin[q+1])): cursor[q * 2^K + k] is the position in the sorted order of the next
// element of part q with key k. Keys repeat a lot in weights (few exponents), so a single run
// would wait on the same counter element after element; kParts runs interleave and overlap.
// segments are the segment lengths.
constexpr size_t kParts = 4;
struct Groups {
  size_t begin[kParts + 1] = {};
  std::vector<uint32_t> cursor;
  std::vector<uint64_t> segments;
};

// ForEachInParts calls op(cursors of part q, i, args...) for every element i of every part q:
// the parts' first `len` elements interleaved (element i of part 0, of part 1, ...), then each
// part's remaining elements (at most one: parts differ in length by at most one element).
// `op` is a plain function whose pointer parameters are __restrict and `args` are passed by
// value: a lambda capturing the buffers by reference loses the no-alias facts and the loops
// ran at half speed (measured with bench/codec_lab).
static_assert(kParts == 4);

template <auto op, typename... Args>
inline void ForEachInParts(const Groups& g, uint32_t* __restrict cursors, size_t ng,
                           Args... args) {
  uint32_t* __restrict c0 = cursors;
  uint32_t* __restrict c1 = c0 + ng;
  uint32_t* __restrict c2 = c1 + ng;
  uint32_t* __restrict c3 = c2 + ng;
  const size_t len = g.begin[1], o1 = g.begin[1], o2 = g.begin[2], o3 = g.begin[3];
  for (size_t i = 0; i < len; ++i) {
    op(c0, i, args...);
    op(c1, o1 + i, args...);
    op(c2, o2 + i, args...);
    op(c3, o3 + i, args...);
  }
  for (size_t q = 0; q < kParts; ++q) {
    for (size_t i = g.begin[q] + len; i < g.begin[q + 1]; ++i) op(cursors + q * ng, i, args...);
  }
}

// The element operations: histogram, encoder scatter, decoder gather. The encoder writes each
// element's zigzagged difference straight into the byte planes at its sorted position; the
// decoder reads it back from there (one scattered access per plane and element, within at most
// a few hundred sequential runs: the groups).
template <typename T>
inline void CountOne(uint32_t* __restrict c, size_t i, const uint8_t* __restrict base,
                     uint32_t shift, T mask) {
  ++c[size_t((LoadT<T>(base + i * sizeof(T)) >> shift) & mask)];
}
template <typename T>
inline void ScatterOne(uint32_t* __restrict c, size_t i, const uint8_t* __restrict base,
                       const uint8_t* __restrict target, size_t n, uint32_t shift, T mask,
                       uint8_t* __restrict planes) {
  T b = LoadT<T>(base + i * sizeof(T));
  uint32_t p = c[size_t((b >> shift) & mask)]++;
  PutPlanes<T>(planes, n, p, Zigzag<T>(T(LoadT<T>(target + i * sizeof(T)) - b)));
}
template <typename T>
inline void GatherOne(uint32_t* __restrict c, size_t i, const uint8_t* __restrict base,
                      const uint8_t* __restrict planes, size_t n, uint32_t shift, T mask,
                      uint8_t* __restrict out) {
  T b = LoadT<T>(base + i * sizeof(T));
  uint32_t p = c[size_t((b >> shift) & mask)]++;
  StoreT<T>(out + i * sizeof(T), T(b + Unzigzag<T>(GetPlanes<T>(planes, n, p))));
}

template <typename T>
T KeyMask(GroupKey key) {
  return T((uint64_t(1) << key.bits) - 1);
}

template <typename T>
Groups BuildGroups(const uint8_t* __restrict base, size_t n, GroupKey key, uint32_t min_seg) {
  Groups g;
  for (size_t q = 0; q <= kParts; ++q) g.begin[q] = n * q / kParts;
  const size_t ng = size_t(1) << key.bits;
  std::vector<uint32_t> count(kParts * ng, 0);
  if (key.bits == 0) {
    for (size_t q = 0; q < kParts; ++q) count[q] = uint32_t(g.begin[q + 1] - g.begin[q]);
  } else {
    ForEachInParts<CountOne<T>>(g, count.data(), ng, base, key.shift, KeyMask<T>(key));
  }
  g.cursor.resize(kParts * ng);
  uint64_t at = 0, cur = 0;
  for (size_t k = 0; k < ng; ++k) {
    uint64_t c = 0;
    for (size_t q = 0; q < kParts; ++q) {
      g.cursor[q * ng + k] = uint32_t(at + c);
      c += count[q * ng + k];
    }
    at += c;
    cur += c;
    if (cur >= min_seg) {
      g.segments.push_back(cur);
      cur = 0;
    }
  }
  if (cur > 0) {
    if (g.segments.empty()) {
      g.segments.push_back(cur);
    } else {
      g.segments.back() += cur;
    }
  }
  return g;
}

// Sorted-order passes (K > 0), consuming the cursors.
template <typename T>
void ScatterToPlanes(const uint8_t* base, const uint8_t* target, size_t n, GroupKey key,
                     Groups& g, uint8_t* planes) {
  ForEachInParts<ScatterOne<T>>(g, g.cursor.data(), size_t(1) << key.bits, base, target, n,
                                key.shift, KeyMask<T>(key), planes);
}
template <typename T>
void GatherFromPlanes(const uint8_t* base, const uint8_t* planes, size_t n, GroupKey key,
                      Groups& g, uint8_t* out) {
  ForEachInParts<GatherOne<T>>(g, g.cursor.data(), size_t(1) << key.bits, base, planes, n,
                               key.shift, KeyMask<T>(key), out);
}

// K == 0: the sorted order is the identity.
template <typename T>
void SplitPlain(const uint8_t* __restrict base, const uint8_t* __restrict target, size_t n,
                uint8_t* __restrict planes) {
  for (size_t i = 0; i < n; ++i) {
    T b = LoadT<T>(base + i * sizeof(T));
    PutPlanes<T>(planes, n, i, Zigzag<T>(T(LoadT<T>(target + i * sizeof(T)) - b)));
  }
}
template <typename T>
void MergePlain(const uint8_t* __restrict base, const uint8_t* __restrict planes, size_t n,
                uint8_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    T b = LoadT<T>(base + i * sizeof(T));
    StoreT<T>(out + i * sizeof(T), T(b + Unzigzag<T>(GetPlanes<T>(planes, n, i))));
  }
}

Result<std::string> EncodeSubPlanes(ByteSpan base, ByteSpan target, uint32_t e, GroupKey key,
                                    int level) {
  size_t n = target.size() / e;
  if (n > UINT32_MAX) return InvalidArgument("sub-planes: chunk has more than 2^32 elements");
  uint8_t* planes = Scratch(0, n * e);
  Groups g = WithElemType(e, [&]<typename T>() {
    Groups groups = BuildGroups<T>(base.data(), n, key, kSegmentMinElems);
    if (key.bits == 0) {
      SplitPlain<T>(base.data(), target.data(), n, planes);
    } else {
      ScatterToPlanes<T>(base.data(), target.data(), n, key, groups, planes);
    }
    return groups;
  });
  std::string out;
  out.push_back(char(e));
  BLZ_RETURN_IF_ERROR(AppendCount(n, "sub-planes", &out));
  out.push_back(char(key.shift));
  out.push_back(char(key.bits));
  AppendLE32(&out, kSegmentMinElems);
  for (uint32_t k = 0; k < e; ++k) {
    uint64_t at = 0;
    for (uint64_t len : g.segments) {
      BLZ_RETURN_IF_ERROR(AppendStream(ByteSpan(planes + k * n + at, len), level, &out));
      at += len;
    }
  }
  AppendXorTail(base, target, n * e, &out);
  return out;
}

Status DecodeSubPlanes(ByteSpan base, ByteSpan payload, uint32_t e, MutableByteSpan out) {
  PayloadReader r(payload);
  BLZ_ASSIGN_OR_RETURN(size_t n, ReadPayloadHeader(r, "sub-planes", true, true, base.size(), out.size(), e));
  BLZ_ASSIGN_OR_RETURN(uint8_t shift, r.U8("sub-planes key shift"));
  BLZ_ASSIGN_OR_RETURN(uint8_t bits, r.U8("sub-planes key bits"));
  if (bits > kMaxKeyBits || uint32_t(shift) + bits > 8 * e) {
    return Corruption("sub-planes group key (shift " + std::to_string(shift) + ", bits " +
                      std::to_string(bits) + ") does not fit a " + std::to_string(e) +
                      "-byte element or has more than " + std::to_string(kMaxKeyBits) + " bits");
  }
  BLZ_ASSIGN_OR_RETURN(uint32_t min_seg, r.U32("sub-planes segment size"));
  if (min_seg == 0) return Corruption("sub-planes segment size is 0");
  GroupKey key{shift, bits};
  Groups g = WithElemType(
      e, [&]<typename T>() { return BuildGroups<T>(base.data(), n, key, min_seg); });
  uint8_t* planes = Scratch(0, n * e);
  for (uint32_t k = 0; k < e; ++k) {
    uint64_t at = 0;
    for (uint64_t len : g.segments) {
      BLZ_RETURN_IF_ERROR(
          r.Stream(MutableByteSpan(planes + k * n + at, len), "sub-planes segment"));
      at += len;
    }
  }
  BLZ_RETURN_IF_ERROR(ReadXorTail(r, base, n * e, out, "sub-planes tail"));
  BLZ_RETURN_IF_ERROR(r.ExpectEnd("sub-planes"));
  WithElemType(e, [&]<typename T>() {
    if (key.bits == 0) {
      MergePlain<T>(base.data(), planes, n, out.data());
    } else {
      GatherFromPlanes<T>(base.data(), planes, n, key, g, out.data());
    }
  });
  return Status::Ok();
}

// ---- codec 4: sparse ----------------------------------------------------------------------

// Number of whole elements that differ.
uint64_t CountChanged(ByteSpan base, ByteSpan target, uint32_t e) {
  return WithElemType(e, [&]<typename T>() {
    return CountChangedT<T>(base.data(), target.data(), target.size() / e);
  });
}

// Bit k of the result: byte k of `a` differs from byte k of `b` (len <= 64).
inline uint64_t DiffMask64(const uint8_t* __restrict a, const uint8_t* __restrict b, size_t len) {
#if defined(__SSE2__)
  if (len == 64) {
    uint64_t m = 0;
    for (int q = 0; q < 4; ++q) {
      __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * q));
      __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * q));
      m |= uint64_t(uint16_t(~_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)))) << (16 * q);
    }
    return m;
  }
#endif
  uint64_t m = 0;
  for (size_t k = 0; k < len; ++k) m |= uint64_t(a[k] != b[k]) << k;
  return m;
}

// Writes the changed elements' gaps (4 planes) and zigzagged differences (sizeof(T) planes),
// both with plane stride n, in element order; returns their number m. The changed elements
// are found 64 bytes at a time from a byte mask, so the work is per changed element, not per
// element, and there is no branch per element (a change is a coin flip in a fine-tune).
template <typename T>
size_t SparseSplit(const uint8_t* __restrict base, const uint8_t* __restrict target, size_t n,
                   uint8_t* __restrict gaps, uint8_t* __restrict vals) {
  constexpr uint64_t kElemBits = (uint64_t(1) << sizeof(T)) - 1;
  const size_t bytes = n * sizeof(T);
  size_t j = 0;
  uint64_t next = 0;
  for (size_t off = 0; off < bytes; off += 64) {  // 64 is a multiple of sizeof(T)
    uint64_t mask = DiffMask64(base + off, target + off, std::min<size_t>(64, bytes - off));
    while (mask != 0) {
      const size_t first = size_t(std::countr_zero(mask)) / sizeof(T) * sizeof(T);
      mask &= ~(kElemBits << first);
      const size_t i = (off + first) / sizeof(T);
      T b = LoadT<T>(base + i * sizeof(T)), t = LoadT<T>(target + i * sizeof(T));
      PutPlanes<uint32_t>(gaps, n, j, uint32_t(i - next));
      PutPlanes<T>(vals, n, j, Zigzag<T>(T(t - b)));
      next = i + 1;
      ++j;
    }
  }
  return j;
}

Result<std::string> EncodeSparse(ByteSpan base, ByteSpan target, uint32_t e, int level) {
  size_t n = target.size() / e;
  if (n > UINT32_MAX) return InvalidArgument("sparse: chunk has more than 2^32 elements");
  uint8_t* gaps = Scratch(0, n * 4);
  uint8_t* vals = Scratch(1, n * e);
  const size_t m = WithElemType(e, [&]<typename T>() {
    return SparseSplit<T>(base.data(), target.data(), n, gaps, vals);
  });
  if (m == 0) return InvalidArgument("sparse: no whole element changed");
  const size_t stride = n;
  std::string out;
  out.push_back(char(e));
  BLZ_RETURN_IF_ERROR(AppendCount(n, "sparse", &out));
  AppendLE32(&out, uint32_t(m));
  for (uint32_t k = 0; k < 4; ++k) {
    BLZ_RETURN_IF_ERROR(AppendStream(ByteSpan(gaps + k * stride, m), level, &out));
  }
  for (uint32_t k = 0; k < e; ++k) {
    BLZ_RETURN_IF_ERROR(AppendStream(ByteSpan(vals + k * stride, m), level, &out));
  }
  AppendXorTail(base, target, n * e, &out);
  return out;
}

Status DecodeSparse(ByteSpan base, ByteSpan payload, uint32_t e, MutableByteSpan out) {
  PayloadReader r(payload);
  BLZ_ASSIGN_OR_RETURN(size_t n, ReadPayloadHeader(r, "sparse", true, true, base.size(), out.size(), e));
  BLZ_ASSIGN_OR_RETURN(uint32_t m, r.U32("sparse change count"));
  if (m == 0 || m > n) {
    return Corruption("sparse change count " + std::to_string(m) + " is not in 1.." +
                      std::to_string(n));
  }
  uint8_t* gaps = Scratch(0, uint64_t(m) * 4);
  uint8_t* vals = Scratch(1, uint64_t(m) * e);
  BLZ_RETURN_IF_ERROR(ReadPlanes(r, gaps, m, 4, "sparse positions"));
  BLZ_RETURN_IF_ERROR(ReadPlanes(r, vals, m, e, "sparse values"));
  BLZ_RETURN_IF_ERROR(ReadXorTail(r, base, n * e, out, "sparse tail"));
  BLZ_RETURN_IF_ERROR(r.ExpectEnd("sparse"));
  if (n > 0) std::memcpy(out.data(), base.data(), n * e);
  return WithElemType(e, [&]<typename T>() -> Status {
    uint64_t next = 0;
    for (size_t j = 0; j < m; ++j) {
      uint64_t i = next + GetPlanes<uint32_t>(gaps, m, j);
      if (i >= n) {
        return Corruption("sparse change " + std::to_string(j) + " is at element " +
                          std::to_string(i) + ", past the chunk's " + std::to_string(n));
      }
      T d = GetPlanes<T>(vals, m, j);
      if (d == 0) return Corruption("sparse change " + std::to_string(j) + " is a zero change");
      StoreT<T>(&out[i * e], T(LoadT<T>(&base[i * e]) + Unzigzag<T>(d)));
      next = i + 1;
    }
    return Status::Ok();
  });
}

// ---- codec 5: planes of the target alone ---------------------------------------------------

Result<std::string> EncodePlanes(ByteSpan target, uint32_t e, int level) {
  size_t n = target.size() / e;
  uint8_t* planes = Scratch(0, n * e);
  WithElemType(e, [&]<typename T>() {
    SplitToPlanes<T, false>(nullptr, target.data(), n, planes);
  });
  std::string out;
  out.push_back(char(e));
  BLZ_RETURN_IF_ERROR(AppendCount(n, "planes", &out));
  BLZ_RETURN_IF_ERROR(AppendPlanes(planes, n, e, level, &out));
  out.append(reinterpret_cast<const char*>(target.data()) + n * e, target.size() - n * e);
  return out;
}

Status DecodePlanes(ByteSpan payload, uint32_t e, MutableByteSpan out) {
  PayloadReader r(payload);
  BLZ_ASSIGN_OR_RETURN(size_t n, ReadPayloadHeader(r, "planes", false, true, 0, out.size(), e));
  uint8_t* planes = Scratch(0, n * e);
  BLZ_RETURN_IF_ERROR(ReadPlanes(r, planes, n, e, "planes plane"));
  BLZ_ASSIGN_OR_RETURN(ByteSpan tail, r.Bytes(out.size() - n * e, "planes tail"));
  BLZ_RETURN_IF_ERROR(r.ExpectEnd("planes"));
  if (!tail.empty()) std::memcpy(out.data() + n * e, tail.data(), tail.size());
  WithElemType(e, [&]<typename T>() {
    JoinFromPlanes<T, false>(nullptr, planes, n, out.data());
  });
  return Status::Ok();
}

// ---- choice --------------------------------------------------------------------------------

struct Candidate {
  Codec codec;
  GroupKey key;  // kSubPlanes only
};

Result<std::string> EncodeCandidate(const Candidate& c, ByteSpan base, ByteSpan target,
                                    uint32_t e, const CodecOptions& o) {
  switch (c.codec) {
    case Codec::kZstd: {
      std::string out;
      BLZ_RETURN_IF_ERROR(ZstdCompressAppend(target, o.zstd_level, &out));
      return out;
    }
    case Codec::kXorPlanes: return EncodeXorPlanes(base, target, e, o.plane_zstd_level);
    case Codec::kSubPlanes: return EncodeSubPlanes(base, target, e, c.key, o.plane_zstd_level);
    case Codec::kSparse: return EncodeSparse(base, target, e, o.plane_zstd_level);
    case Codec::kPlanes: return EncodePlanes(target, e, o.plane_zstd_level);
    case Codec::kIdentical: break;
  }
  return Internal("EncodeCandidate: codec " + std::string(CodecName(c.codec)));
}

// The group keys kSubPlanes tries for this chunk.
std::vector<GroupKey> KeysToTry(uint32_t e, const CodecOptions& o) {
  if (o.dtype.has_value()) return {KeyForDType(*o.dtype)};
  switch (e) {
    case 2: return {KeyForDType(formats::DType::kBF16), KeyForDType(formats::DType::kF16)};
    case 4: return {KeyForDType(formats::DType::kF32)};
    case 8: return {KeyForDType(formats::DType::kF64)};
    default: return {GroupKey{}};
  }
}

// Copies the slices SampleSlices names of `s` into `out`.
void TakeSample(ByteSpan s, uint32_t e, std::vector<uint8_t>* out) {
  out->clear();
  for (const SampleSlice& slice : SampleSlices(s.size(), e)) {
    const uint8_t* p = s.data() + slice.offset;
    out->insert(out->end(), p, p + slice.length);
  }
}

}  // namespace

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kIdentical: return "identical";
    case Codec::kZstd: return "zstd";
    case Codec::kXorPlanes: return "xor-planes";
    case Codec::kSubPlanes: return "sub-planes";
    case Codec::kSparse: return "sparse";
    case Codec::kPlanes: return "planes";
  }
  return "unknown";
}

Result<Codec> CodecFromId(uint8_t id) {
  switch (id) {
    case uint8_t(Codec::kIdentical): return Codec::kIdentical;
    case uint8_t(Codec::kZstd): return Codec::kZstd;
    case uint8_t(Codec::kXorPlanes): return Codec::kXorPlanes;
    case uint8_t(Codec::kSubPlanes): return Codec::kSubPlanes;
    case uint8_t(Codec::kSparse): return Codec::kSparse;
    case uint8_t(Codec::kPlanes): return Codec::kPlanes;
    default: break;
  }
  return Corruption("unknown chunk codec id " + std::to_string(id));
}

bool CodecNeedsBase(Codec codec) {
  switch (codec) {
    case Codec::kIdentical:
    case Codec::kXorPlanes:
    case Codec::kSubPlanes:
    case Codec::kSparse:
      return true;
    case Codec::kZstd:
    case Codec::kPlanes:
      return false;
  }
  return false;
}

namespace internal {

Result<std::string> EncodeWith(Codec codec, ByteSpan base, ByteSpan target, uint32_t elem_size,
                               const CodecOptions& options) {
  if (!ValidElemSize(elem_size)) {
    return InvalidArgument("element size " + std::to_string(elem_size) + " is not 1, 2, 4 or 8");
  }
  if (!base.empty() && base.size() != target.size()) {
    return InvalidArgument("base chunk has " + std::to_string(base.size()) + " bytes, target " +
                           std::to_string(target.size()));
  }
  if (CodecNeedsBase(codec) && base.empty() && !target.empty()) {
    return InvalidArgument(std::string(CodecName(codec)) + " needs a base");
  }
  if (codec == Codec::kIdentical) {
    if (!target.empty() && std::memcmp(base.data(), target.data(), target.size()) != 0) {
      return InvalidArgument("identical: base and target differ");
    }
    return std::string();
  }
  return EncodeCandidate({codec, KeysToTry(elem_size, options)[0]}, base, target, elem_size,
                         options);
}

}  // namespace internal

namespace {

Status CheckEncodeArgs(ByteSpan base, ByteSpan target, uint32_t elem_size, const char* fn) {
  if (!ValidElemSize(elem_size)) {
    return InvalidArgument(std::string(fn) + ": element size " + std::to_string(elem_size) +
                           " is not 1, 2, 4 or 8");
  }
  if (!base.empty() && base.size() != target.size()) {
    return InvalidArgument(std::string(fn) + ": base has " + std::to_string(base.size()) +
                           " bytes, target " + std::to_string(target.size()));
  }
  return Status::Ok();
}

bool SameBytes(ByteSpan base, ByteSpan target) {
  return target.empty() ||
         (!base.empty() && std::memcmp(base.data(), target.data(), target.size()) == 0);
}

// The estimate behind EncodeChunk and ChooseCodec: codes the sample (sb, st) with every
// candidate and keeps the smallest. `exact`: the sample is the whole input; then the winner's
// payload is handed back in `payload` (unless the winner is kZstd, which is recoded at the
// configured level) and sparse is tried only if something changed.
Result<CodecChoice> Estimate(ByteSpan sb, ByteSpan st, uint32_t e, bool exact,
                             const CodecOptions& options, std::string* payload) {
  const bool has_base = !sb.empty();
  const bool whole = st.size() >= e;  // at least one whole element

  // Candidates. xor-planes is not among them: sub-planes codes the same information smaller
  // on every corpus pair (bench/codec_lab.cc); decoders still read it.
  std::vector<Candidate> cands = {{Codec::kZstd, {}}};
  if (whole && e > 1) cands.push_back({Codec::kPlanes, {}});
  uint64_t sample_changed = 0;
  if (has_base && whole) {
    for (GroupKey k : KeysToTry(e, options)) cands.push_back({Codec::kSubPlanes, k});
    sample_changed = CountChanged(sb, st, e);
    if (sample_changed * 2 <= st.size() / e && (sample_changed > 0 || !exact)) {
      cands.push_back({Codec::kSparse, {}});
    }
  }

  // Estimate each on the sample (whole-target zstd at a fast level: on tensor bytes levels
  // 1..9 differ by < 1%), keep the smallest.
  CodecOptions estimate = options;
  estimate.zstd_level = std::min(options.zstd_level, 1);
  size_t best_i = 0;
  uint64_t best_size = UINT64_MAX, zstd_estimate = UINT64_MAX;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].codec == Codec::kSparse && sample_changed == 0) {
      // No change in the sample (of a large input): sparse costs its header and zero streams.
      if (uint64_t size = 14 + e; size < best_size) {
        best_size = size;
        best_i = i;
      }
      continue;
    }
    BLZ_ASSIGN_OR_RETURN(std::string p, EncodeCandidate(cands[i], sb, st, e, estimate));
    if (cands[i].codec == Codec::kZstd) zstd_estimate = p.size();
    if (p.size() < best_size) {
      best_size = p.size();
      best_i = i;
      if (exact) *payload = std::move(p);
    }
  }
  const Candidate win = cands[best_i];
  CodecChoice choice;
  choice.codec = win.codec;
  choice.key_shift = uint8_t(win.key.shift);
  choice.key_bits = uint8_t(win.key.bits);
  // Whole-target zstd at the configured level may still beat the winner when its fast-level
  // estimate came close: then it is computed and compared (EncodeChunkAs).
  choice.check_zstd = win.codec != Codec::kZstd && zstd_estimate != UINT64_MAX &&
                      zstd_estimate <= best_size + best_size / 16 &&
                      estimate.zstd_level != options.zstd_level;
  if (!exact || win.codec == Codec::kZstd) payload->clear();
  return choice;
}

// EncodeChunkAs with, optionally, the winner's payload already computed (`ready`).
Result<EncodedChunk> EncodeChosen(const CodecChoice& choice, ByteSpan base, ByteSpan target,
                                  uint32_t e, const CodecOptions& options,
                                  std::string* ready) {
  EncodedChunk best;
  if (SameBytes(base, target)) {
    best.codec = Codec::kIdentical;
    return best;
  }
  Codec codec = choice.codec;
  if (CodecNeedsBase(codec) && base.empty()) codec = Codec::kZstd;  // a choice made with a base
  const Candidate win{codec, GroupKey{choice.key_shift, choice.key_bits}};
  best.codec = win.codec;
  Result<std::string> p = std::string();
  if (ready != nullptr && !ready->empty()) {
    p = std::move(*ready);
  } else {
    p = EncodeCandidate(win, base, target, e, options);
  }
  if (!p.ok() && win.codec == Codec::kSparse) {
    // No whole element changed (only the partial tail): sub-planes codes that in a few bytes.
    best.codec = Codec::kSubPlanes;
    p = EncodeCandidate({Codec::kSubPlanes, KeysToTry(e, options)[0]}, base, target, e, options);
  }
  if (!p.ok()) return p.status();
  best.payload = std::move(p).value();
  if (best.codec != Codec::kZstd &&
      (choice.check_zstd || best.payload.size() >= target.size())) {
    // A close call, or the sample misled and nothing was gained: keep whole-chunk zstd if it
    // is smaller.
    BLZ_ASSIGN_OR_RETURN(std::string z,
                         EncodeCandidate({Codec::kZstd, {}}, base, target, e, options));
    if (z.size() < best.payload.size()) {
      best.codec = Codec::kZstd;
      best.payload = std::move(z);
    }
  }
  return best;
}

// The sample of `s`: the input itself if small (`exact`), else kSampleSlices evenly spaced
// slices copied into `buf`.
ByteSpan SampleOf(ByteSpan s, uint32_t e, bool exact, std::vector<uint8_t>* buf) {
  if (exact || s.empty()) return s;
  TakeSample(s, e, buf);
  return *buf;
}

// Estimate on the sample of (base, target): the input itself up to kSampleSlices x
// kSampleSliceBytes, else evenly spaced slices (copied into per-thread buffers).
Result<CodecChoice> EstimateOnSample(ByteSpan base, ByteSpan target, uint32_t e,
                                     const CodecOptions& options, std::string* payload) {
  thread_local std::vector<uint8_t> sample_t, sample_b;
  const bool exact = target.size() <= kSampleSlices * kSampleSliceBytes;
  return Estimate(SampleOf(base, e, exact, &sample_b), SampleOf(target, e, exact, &sample_t), e,
                  exact, options, payload);
}

}  // namespace

Result<CodecChoice> ChooseCodec(ByteSpan base, ByteSpan target, uint32_t elem_size,
                                const CodecOptions& options) {
  BLZ_RETURN_IF_ERROR(CheckEncodeArgs(base, target, elem_size, "ChooseCodec"));
  std::string unused;
  return EstimateOnSample(base, target, elem_size, options, &unused);
}

std::vector<SampleSlice> SampleSlices(uint64_t size, uint32_t elem_size) {
  if (size <= kSampleSlices * kSampleSliceBytes) return {SampleSlice{0, size}};
  const uint32_t e = ValidElemSize(elem_size) ? elem_size : 1;
  const uint64_t slice = kSampleSliceBytes / e * e;
  const uint64_t stride = (size / kSampleSlices) / e * e;  // >= slice: size > 8 slices
  std::vector<SampleSlice> slices;
  for (uint64_t k = 0; k < kSampleSlices; ++k) slices.push_back({k * stride, slice});
  return slices;
}

Result<CodecChoice> ChooseCodecOnSample(ByteSpan base_sample, ByteSpan target_sample,
                                        uint64_t size, uint32_t elem_size,
                                        const CodecOptions& options) {
  BLZ_RETURN_IF_ERROR(
      CheckEncodeArgs(base_sample, target_sample, elem_size, "ChooseCodecOnSample"));
  uint64_t sampled = 0;
  for (const SampleSlice& slice : SampleSlices(size, elem_size)) sampled += slice.length;
  if (target_sample.size() != sampled) {
    return InvalidArgument("ChooseCodecOnSample: a sample of " +
                           std::to_string(target_sample.size()) + " bytes, not the " +
                           std::to_string(sampled) + " SampleSlices names for " +
                           std::to_string(size) + " bytes");
  }
  std::string unused;
  return Estimate(base_sample, target_sample, elem_size,
                  /*exact=*/size <= kSampleSlices * kSampleSliceBytes, options, &unused);
}

Result<EncodedChunk> EncodeChunkAs(const CodecChoice& choice, ByteSpan base, ByteSpan target,
                                   uint32_t elem_size, const CodecOptions& options) {
  BLZ_RETURN_IF_ERROR(CheckEncodeArgs(base, target, elem_size, "EncodeChunkAs"));
  if (choice.codec == Codec::kIdentical) {
    return InvalidArgument("EncodeChunkAs: identical is not a choice (it is found per chunk)");
  }
  return EncodeChosen(choice, base, target, elem_size, options, nullptr);
}

Result<EncodedChunk> EncodeChunk(ByteSpan base, ByteSpan target, uint32_t elem_size,
                                 const CodecOptions& options) {
  BLZ_RETURN_IF_ERROR(CheckEncodeArgs(base, target, elem_size, "EncodeChunk"));
  if (SameBytes(base, target)) return EncodedChunk{Codec::kIdentical, {}};
  std::string payload;
  BLZ_ASSIGN_OR_RETURN(CodecChoice choice,
                       EstimateOnSample(base, target, elem_size, options, &payload));
  return EncodeChosen(choice, base, target, elem_size, options, &payload);
}

Status DecodeChunk(Codec codec, ByteSpan base, ByteSpan payload, uint32_t elem_size,
                   MutableByteSpan out) {
  if (!ValidElemSize(elem_size)) {
    return Corruption("chunk element size " + std::to_string(elem_size) +
                      " is not 1, 2, 4 or 8");
  }
  switch (codec) {
    case Codec::kIdentical:
      if (!payload.empty()) {
        return Corruption("identical chunk has a payload of " + std::to_string(payload.size()) +
                          " bytes");
      }
      if (out.empty()) return Status::Ok();
      BLZ_RETURN_IF_ERROR(CheckBase(base.size(), out.size(), "identical"));
      if (base.data() != out.data()) std::memmove(out.data(), base.data(), out.size());
      return Status::Ok();
    case Codec::kZstd:
      return ZstdDecompressExact(payload, out).WithContext("zstd chunk");
    case Codec::kXorPlanes:
      return DecodeXorPlanes(base, payload, elem_size, out);
    case Codec::kSubPlanes:
      return DecodeSubPlanes(base, payload, elem_size, out);
    case Codec::kSparse:
      return DecodeSparse(base, payload, elem_size, out);
    case Codec::kPlanes:
      return DecodePlanes(payload, elem_size, out);
  }
  return Corruption("unknown chunk codec id " + std::to_string(int(codec)));
}

}  // namespace blz::patcher
