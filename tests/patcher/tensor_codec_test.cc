#include "patcher/tensor_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <tuple>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "patcher/codec_internal.h"
#include "patcher/codec_zstd.h"

namespace blz::patcher {
namespace {

using Bytes = std::vector<uint8_t>;

const Codec kAllCodecs[] = {Codec::kIdentical, Codec::kZstd,   Codec::kXorPlanes,
                            Codec::kSubPlanes, Codec::kSparse, Codec::kPlanes};
const uint32_t kElemSizes[] = {1, 2, 4, 8};

bool NeedsBase(Codec c) { return CodecNeedsBase(c); }

// True if some whole element differs (the sparse codec needs one).
bool WholeElementChanged(const Bytes& a, const Bytes& b, uint32_t e) {
  size_t n = a.size() / e * e;
  return !std::equal(a.begin(), a.begin() + long(n), b.begin());
}

template <typename T>
Bytes FromValues(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Bytes RandomBytes(std::mt19937_64& rng, size_t n) {
  Bytes b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

// A fine-tune-like change: each element of `base` gets a few low bits flipped, with the given
// probability, and a rare full rewrite.
Bytes Perturb(std::mt19937_64& rng, const Bytes& base, uint32_t e, double p_change) {
  Bytes t = base;
  std::uniform_real_distribution<double> u(0, 1);
  size_t n = t.size() / e;
  for (size_t i = 0; i < n; ++i) {
    double r = u(rng);
    if (r >= p_change) continue;
    if (r < p_change * 0.02) {
      for (uint32_t k = 0; k < e; ++k) t[i * e + k] = uint8_t(rng());
    } else {
      uint64_t v = 0;
      std::memcpy(&v, &t[i * e], e);
      v ^= rng() & ((uint64_t(1) << (e * 4)) - 1);
      std::memcpy(&t[i * e], &v, e);
    }
  }
  for (size_t j = n * e; j < t.size(); ++j) t[j] ^= uint8_t(rng());
  return t;
}

// Encodes with `codec` (forced), decodes, and checks the bytes come back.
void ExpectForcedRoundTrip(Codec codec, const Bytes& base, const Bytes& target, uint32_t e,
                           const std::string& label) {
  SCOPED_TRACE(label + " codec=" + std::string(CodecName(codec)) + " e=" + std::to_string(e) +
               " size=" + std::to_string(target.size()));
  ByteSpan b = NeedsBase(codec) ? ByteSpan(base) : ByteSpan();
  auto enc = internal::EncodeWith(codec, b, target, e, CodecOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  Bytes out(target.size(), 0xA5);
  Status s = DecodeChunk(codec, b, AsBytes(*enc), e, out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, target);
}

// EncodeChunk (automatic choice) round trip, with and without a base.
void ExpectAutoRoundTrip(const Bytes& base, const Bytes& target, uint32_t e,
                         const std::string& label) {
  for (bool with_base : {true, false}) {
    SCOPED_TRACE(label + " auto e=" + std::to_string(e) + " base=" + std::to_string(with_base));
    ByteSpan b = with_base ? ByteSpan(base) : ByteSpan();
    auto enc = EncodeChunk(b, target, e, CodecOptions{});
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    if (!with_base && !target.empty()) {
      EXPECT_FALSE(CodecNeedsBase(enc->codec)) << CodecName(enc->codec);
    }
    if (with_base && base == target) {
      EXPECT_EQ(enc->codec, Codec::kIdentical);
    }
    if (enc->codec == Codec::kIdentical) {
      EXPECT_TRUE(enc->payload.empty());
    }
    Bytes out(target.size(), 0x5A);
    Status s = DecodeChunk(enc->codec, b, AsBytes(enc->payload), e, out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, target);
  }
}

void ExpectAllRoundTrips(const Bytes& base, const Bytes& target, uint32_t e,
                         const std::string& label) {
  ASSERT_EQ(base.size(), target.size());
  for (Codec c : kAllCodecs) {
    if (c == Codec::kIdentical && base != target) continue;
    if (c == Codec::kSparse && !WholeElementChanged(base, target, e)) continue;
    ExpectForcedRoundTrip(c, base, target, e, label);
  }
  ExpectAutoRoundTrip(base, target, e, label);
}

TEST(TensorCodecTest, NamesAndIds) {
  for (Codec c : kAllCodecs) {
    auto back = CodecFromId(uint8_t(c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, c);
    EXPECT_NE(CodecName(c), "unknown");
  }
  EXPECT_EQ(CodecName(Codec::kIdentical), "identical");
  EXPECT_EQ(CodecName(Codec::kZstd), "zstd");
  EXPECT_EQ(CodecName(Codec::kXorPlanes), "xor-planes");
  EXPECT_EQ(CodecName(Codec::kSubPlanes), "sub-planes");
  EXPECT_EQ(CodecName(Codec::kSparse), "sparse");
  EXPECT_EQ(CodecName(Codec::kPlanes), "planes");
  EXPECT_TRUE(CodecNeedsBase(Codec::kXorPlanes));
  EXPECT_TRUE(CodecNeedsBase(Codec::kSubPlanes));
  EXPECT_TRUE(CodecNeedsBase(Codec::kSparse));
  EXPECT_FALSE(CodecNeedsBase(Codec::kZstd));
  EXPECT_FALSE(CodecNeedsBase(Codec::kPlanes));
  for (int id = 6; id < 256; ++id) {
    auto c = CodecFromId(uint8_t(id));
    if (c.ok()) {
      EXPECT_NE(CodecName(*c), "unknown") << id;
      EXPECT_EQ(uint8_t(*c), id);
    } else {
      EXPECT_EQ(c.status().code(), Code::kCorruption) << id;
    }
  }
  EXPECT_FALSE(CodecFromId(255).ok());
}

TEST(TensorCodecTest, EmptyChunk) {
  for (uint32_t e : kElemSizes) {
    ExpectAllRoundTrips({}, {}, e, "empty");
    auto enc = EncodeChunk({}, {}, e, CodecOptions{});
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->codec, Codec::kIdentical);
    EXPECT_TRUE(enc->payload.empty());
  }
}

TEST(TensorCodecTest, OneElementAndOddLengths) {
  std::mt19937_64 rng(1);
  for (uint32_t e : kElemSizes) {
    for (size_t len : {size_t(1), size_t(e), size_t(e) + 1, size_t(3 * e) - 1, size_t(7),
                       size_t(1001), size_t(4099)}) {
      Bytes base = RandomBytes(rng, len);
      Bytes target = Perturb(rng, base, e, 0.5);
      ExpectAllRoundTrips(base, target, e, "len " + std::to_string(len));
      ExpectAllRoundTrips(base, base, e, "same len " + std::to_string(len));
    }
  }
}

TEST(TensorCodecTest, SpecialFloat32Values) {
  const float inf = std::numeric_limits<float>::infinity();
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> base = {0.0f, -0.0f, inf, -inf, qnan, denorm, -denorm, 1.0f, -1.0f,
                             3.4e38f, 1e-40f, 0.5f};
  std::vector<uint32_t> bits(base.size());
  std::memcpy(bits.data(), base.data(), base.size() * 4);
  // NaNs with payloads and signalling NaNs, which a float round trip could change.
  bits.push_back(0x7FC00001u);
  bits.push_back(0x7F800001u);
  bits.push_back(0xFFFFFFFFu);
  bits.push_back(0x00000001u);
  Bytes b = FromValues(bits);
  // Target: sign flips, NaN payload changes, 0 <-> -0, denormal <-> normal.
  std::vector<uint32_t> tbits = bits;
  for (auto& v : tbits) v ^= 0x80000000u;
  tbits[4] = 0x7FC12345u;
  tbits[13] = 0x7F800002u;
  Bytes t = FromValues(tbits);
  ExpectAllRoundTrips(b, t, 4, "f32 specials");
  ExpectAllRoundTrips(b, b, 4, "f32 specials same");
  ExpectAllRoundTrips(t, b, 4, "f32 specials reversed");
}

TEST(TensorCodecTest, SpecialHalfAndDoubleValues) {
  // BF16/F16 bit patterns: +-0, +-Inf, NaNs with payloads, denormals, max.
  std::vector<uint16_t> h = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFFF, 0x0001, 0x8001,
                             0x7C00, 0xFC00, 0x7E01, 0x03FF, 0x7BFF, 0x3C00};
  std::vector<uint16_t> ht = h;
  for (size_t i = 0; i < ht.size(); i += 2) ht[i] ^= 0x8000;
  ExpectAllRoundTrips(FromValues(h), FromValues(ht), 2, "16-bit specials");
  std::vector<double> d = {0.0, -0.0, std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::denorm_min(), 1.0, -2.5};
  std::vector<double> dt = d;
  for (auto& v : dt) v = -v;
  ExpectAllRoundTrips(FromValues(d), FromValues(dt), 8, "f64 specials");
}

TEST(TensorCodecTest, AllEqualAndAllChanged) {
  std::mt19937_64 rng(2);
  for (uint32_t e : kElemSizes) {
    Bytes constant(64 * 1024, 0x3F);
    ExpectAllRoundTrips(constant, constant, e, "all equal");
    Bytes zeros(64 * 1024, 0);
    ExpectAllRoundTrips(zeros, constant, e, "zeros to constant");
    Bytes base = RandomBytes(rng, 64 * 1024 + 3);
    Bytes changed = base;
    for (auto& x : changed) x = uint8_t(~x);  // every byte changes
    ExpectAllRoundTrips(base, changed, e, "all changed");
    ExpectAllRoundTrips(base, RandomBytes(rng, base.size()), e, "unrelated");
    ExpectAllRoundTrips(base, Perturb(rng, base, e, 0.01), e, "sparse change");
  }
}

TEST(TensorCodecTest, SignFlipsOfRealisticFloats) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(20000);
  for (auto& x : w) x = g(rng);
  std::vector<float> t = w;
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = (i % 3 == 0) ? -t[i] : t[i] + g(rng) * 1e-3f;
  }
  ExpectAllRoundTrips(FromValues(w), FromValues(t), 4, "f32 fine-tune");
}

TEST(TensorCodecTest, PicksSmallestAndBeatsZstdOnFineTunes) {
  std::mt19937_64 rng(4);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(1 << 18);
  for (auto& x : w) x = g(rng);
  std::vector<float> t = w;
  for (auto& x : t) x += g(rng) * 1e-4f;
  Bytes b = FromValues(w), tb = FromValues(t);
  auto enc = EncodeChunk(b, tb, 4, CodecOptions{});
  ASSERT_TRUE(enc.ok());
  EXPECT_NE(enc->codec, Codec::kZstd);
  auto zstd_only = internal::EncodeWith(Codec::kZstd, {}, tb, 4, CodecOptions{});
  ASSERT_TRUE(zstd_only.ok());
  EXPECT_LT(enc->payload.size(), zstd_only->size());
}

TEST(TensorCodecTest, RandomizedRoundTrips) {
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 300; ++iter) {
    uint32_t e = kElemSizes[rng() % 4];
    size_t len = rng() % 3 == 0 ? rng() % 64 : rng() % 70000;
    Bytes base = RandomBytes(rng, len);
    // Make the base float-like sometimes (small exponents vary little).
    if (iter % 2 == 0 && e >= 2) {
      for (size_t i = e - 1; i < len; i += e) base[i] = uint8_t(0x3C + rng() % 3);
    }
    double p = std::uniform_real_distribution<double>(0, 1)(rng);
    Bytes target = Perturb(rng, base, e, p);
    ExpectAllRoundTrips(base, target, e, "random iter " + std::to_string(iter));
    if (HasFatalFailure()) return;
  }
}

TEST(TensorCodecTest, EncodeRejectsBadArguments) {
  Bytes a(16, 1), b(12, 2);
  EXPECT_EQ(EncodeChunk(a, b, 4, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EncodeChunk({}, b, 3, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EncodeChunk({}, b, 0, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(internal::EncodeWith(Codec::kXorPlanes, {}, b, 4, {}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(internal::EncodeWith(Codec::kIdentical, a, Bytes(16, 3), 4, {}).status().code(),
            Code::kInvalidArgument);
}

// ---- corruption ------------------------------------------------------------------------

struct Sample {
  Codec codec;
  Bytes base, target, payload;
  uint32_t e;
};

// Payloads that exercise every stream mode (zero, raw, zstd) of the plane codecs.
std::vector<Sample> CorruptionSamples() {
  std::mt19937_64 rng(99);
  std::vector<Sample> out;
  for (uint32_t e : {2u, 4u}) {
    Bytes base = RandomBytes(rng, 3000 * e + 1);
    for (size_t i = e - 1; i < base.size(); i += e) base[i] = 0x3C;
    Bytes target = base;
    for (size_t i = 0; i + e <= target.size(); i += e) {
      target[i] ^= e == 2 ? uint8_t(rng()) : uint8_t(rng() & 0x7);  // raw vs zstd plane
    }
    target.back() ^= 0x11;
    for (Codec c : {Codec::kZstd, Codec::kXorPlanes, Codec::kSubPlanes, Codec::kSparse,
                    Codec::kPlanes}) {
      auto enc = internal::EncodeWith(c, base, target, e, CodecOptions{});
      if (!enc.ok()) continue;
      out.push_back({c, base, target, Bytes(enc->begin(), enc->end()), e});
    }
  }
  return out;
}

TEST(TensorCodecTest, SamplesExerciseAllStreamModes) {
  // Guards the corruption tests below: the xor-planes samples must contain zero, raw and zstd
  // streams (plane modes 0, 1 and 2 right after the element-size byte of each plane).
  auto samples = CorruptionSamples();
  ASSERT_FALSE(samples.empty());
  bool seen[3] = {false, false, false};
  for (const auto& s : samples) {
    if (s.codec != Codec::kXorPlanes) continue;
    size_t pos = 1;
    size_t n = s.target.size() / s.e;
    for (uint32_t k = 0; k < s.e; ++k) {
      ASSERT_LT(pos, s.payload.size());
      uint8_t mode = s.payload[pos++];
      ASSERT_LT(mode, 3);
      seen[mode] = true;
      if (mode == 1) pos += n;
      if (mode == 2) pos += 4 + LoadLE32(&s.payload[pos]);
    }
    EXPECT_EQ(pos + s.target.size() % s.e, s.payload.size());
  }
  EXPECT_TRUE(seen[0] && seen[1] && seen[2]);
}

TEST(TensorCodecTest, TruncatedPayloadIsCorruption) {
  for (const auto& s : CorruptionSamples()) {
    SCOPED_TRACE(std::string(CodecName(s.codec)));
    Bytes out(s.target.size());
    ASSERT_TRUE(DecodeChunk(s.codec, s.base, s.payload, s.e, out).ok());
    ASSERT_EQ(out, s.target);
    size_t step = std::max<size_t>(1, s.payload.size() / 500);
    for (size_t len = 0; len < s.payload.size(); len += step) {
      Status st = DecodeChunk(s.codec, s.base, ByteSpan(s.payload.data(), len), s.e, out);
      EXPECT_EQ(st.code(), Code::kCorruption) << "prefix " << len << ": " << st.ToString();
    }
  }
}

TEST(TensorCodecTest, TrailingBytesAreCorruption) {
  for (const auto& s : CorruptionSamples()) {
    Bytes p = s.payload;
    p.push_back(0);
    Bytes out(s.target.size());
    EXPECT_EQ(DecodeChunk(s.codec, s.base, p, s.e, out).code(), Code::kCorruption)
        << CodecName(s.codec);
  }
}

TEST(TensorCodecTest, WrongSizesAreCorruption) {
  for (const auto& s : CorruptionSamples()) {
    SCOPED_TRACE(std::string(CodecName(s.codec)));
    Bytes longer(s.target.size() + s.e), shorter(s.target.size() - s.e);
    Bytes base_l = s.base, base_s = s.base;
    base_l.resize(longer.size());
    base_s.resize(shorter.size());
    EXPECT_EQ(DecodeChunk(s.codec, base_l, s.payload, s.e, longer).code(), Code::kCorruption);
    EXPECT_EQ(DecodeChunk(s.codec, base_s, s.payload, s.e, shorter).code(), Code::kCorruption);
    Bytes out(s.target.size());
    uint32_t other_e = s.e == 4 ? 2 : 4;
    Status st = DecodeChunk(s.codec, s.base, s.payload, other_e, out);
    if (s.codec == Codec::kZstd) {
      EXPECT_TRUE(st.ok());  // zstd ignores the element size
    } else {
      EXPECT_EQ(st.code(), Code::kCorruption);
    }
    EXPECT_EQ(DecodeChunk(s.codec, s.base, s.payload, 3, out).code(), Code::kCorruption);
    if (NeedsBase(s.codec)) {
      EXPECT_EQ(DecodeChunk(s.codec, {}, s.payload, s.e, out).code(), Code::kCorruption);
      EXPECT_EQ(DecodeChunk(s.codec, ByteSpan(s.base).first(s.base.size() - 1), s.payload, s.e,
                            out)
                    .code(),
                Code::kCorruption);
    }
  }
}

// CheckChunkPayload judges a payload by what it declares, without decoding: it accepts what
// DecodeChunk decodes, and refuses other chunk sizes, element sizes, a missing base, and (but
// for sub-planes, whose streams are cut by the base) truncated or over-long payloads.
TEST(TensorCodecTest, CheckChunkPayloadAgreesWithDecoding) {
  for (const auto& s : CorruptionSamples()) {
    SCOPED_TRACE(std::string(CodecName(s.codec)));
    const uint64_t n = s.target.size();
    const uint64_t base = s.base.size();
    EXPECT_TRUE(CheckChunkPayload(s.codec, base, s.payload, s.e, n).ok());
    for (uint64_t other : {n - s.e, n + s.e}) {
      Status st = CheckChunkPayload(s.codec, other, s.payload, s.e, other);
      EXPECT_EQ(st.code(), Code::kCorruption) << other;
    }
    EXPECT_THAT(CheckChunkPayload(s.codec, base, s.payload, 3, n).message(),
                ::testing::HasSubstr("element size 3 is not 1, 2, 4 or 8"));
    if (s.codec != Codec::kZstd) {
      EXPECT_EQ(CheckChunkPayload(s.codec, base, s.payload, s.e == 4 ? 2 : 4, n).code(),
                Code::kCorruption);
    }
    if (NeedsBase(s.codec)) {
      EXPECT_THAT(CheckChunkPayload(s.codec, 0, s.payload, s.e, n).message(),
                  ::testing::HasSubstr("needs a base of " + std::to_string(n) + " bytes, got 0"));
    }
    if (s.codec == Codec::kSubPlanes) continue;
    Bytes longer = s.payload;
    longer.push_back(0);
    EXPECT_EQ(CheckChunkPayload(s.codec, base, longer, s.e, n).code(), Code::kCorruption);
    const size_t step = std::max<size_t>(1, s.payload.size() / 200);
    for (size_t len = 0; len < s.payload.size(); len += step) {
      EXPECT_EQ(CheckChunkPayload(s.codec, base, ByteSpan(s.payload.data(), len), s.e, n).code(),
                Code::kCorruption)
          << "prefix " << len;
    }
  }
  EXPECT_THAT(CheckChunkPayload(Codec::kZstd, 0, {}, 4, kChunkBytes + 4).message(),
              ::testing::HasSubstr("exceeds the 4194304-byte chunk size"));
}

TEST(TensorCodecTest, IdenticalRejectsPayloadAndWrongBase) {
  Bytes base(40, 7), out(40);
  EXPECT_TRUE(DecodeChunk(Codec::kIdentical, base, {}, 4, out).ok());
  EXPECT_EQ(out, base);
  Bytes one = {0};
  EXPECT_EQ(DecodeChunk(Codec::kIdentical, base, one, 4, out).code(), Code::kCorruption);
  EXPECT_EQ(DecodeChunk(Codec::kIdentical, {}, {}, 4, out).code(), Code::kCorruption);
  Bytes short_out(36);
  EXPECT_EQ(DecodeChunk(Codec::kIdentical, base, {}, 4, short_out).code(), Code::kCorruption);
}

TEST(TensorCodecTest, BadStreamModeAndElemSizeAreCorruption) {
  for (const auto& s : CorruptionSamples()) {
    if (s.codec != Codec::kXorPlanes) continue;
    Bytes out(s.target.size());
    Bytes p = s.payload;
    p[0] = uint8_t(s.e + 1);  // stored element size
    EXPECT_EQ(DecodeChunk(s.codec, s.base, p, s.e, out).code(), Code::kCorruption);
    p = s.payload;
    p[1] = 7;  // first plane's stream mode
    EXPECT_EQ(DecodeChunk(s.codec, s.base, p, s.e, out).code(), Code::kCorruption);
  }
}

TEST(TensorCodecTest, ZstdFrameSizeMismatchIsCorruption) {
  // A valid zstd frame of the wrong content size, and two concatenated frames.
  Bytes data(1000, 9);
  auto enc = internal::EncodeWith(Codec::kZstd, {}, data, 1, CodecOptions{});
  ASSERT_TRUE(enc.ok());
  Bytes out(999);
  EXPECT_EQ(DecodeChunk(Codec::kZstd, {}, AsBytes(*enc), 1, out).code(), Code::kCorruption);
  std::string two = *enc + *enc;
  Bytes out2(2000);
  EXPECT_EQ(DecodeChunk(Codec::kZstd, {}, AsBytes(two), 1, out2).code(), Code::kCorruption);
  Bytes garbage(64, 0x28);
  Bytes out3(64);
  EXPECT_EQ(DecodeChunk(Codec::kZstd, {}, garbage, 1, out3).code(), Code::kCorruption);
}

// The zstd settings for byte planes (patcher/codec_zstd.h): ordinary single frames, appended
// after what `out` holds, decoded by the plain decoder, and never larger than plain level 1 on
// either kind of plane: the exponents of BF16 weights (a skewed alphabet, no runs: coded as
// literals, smaller) and XOR planes of versions that mostly agree (zero runs broken every 4 KiB
// or every 20-120 bytes: where skipping ahead would turn zeros into literals).
TEST(TensorCodecTest, PlaneFramesAreOrdinaryAndNeverLargerThanLevelOne) {
  std::mt19937 rng(11);
  std::normal_distribution<float> weight(0.0f, 0.02f);
  Bytes exponents(1 << 20), sparse(1 << 20, 0), dense(1 << 20, 0);
  for (uint8_t& b : exponents) {
    float v = weight(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    b = uint8_t(bits >> 24);  // sign and the high exponent bits: BF16's high byte
  }
  for (size_t i = 0; i < sparse.size(); i += 4096 + rng() % 512) {
    sparse[i] = uint8_t(1 + rng() % 255);
  }
  for (size_t i = 0; i < dense.size(); i += 20 + rng() % 100) dense[i] = uint8_t(1 + rng() % 255);
  for (const Bytes* plane : {&exponents, &sparse, &dense}) {
    SCOPED_TRACE(plane == &exponents ? "exponents" : plane == &sparse ? "sparse" : "dense");
    std::string plain, tuned = "head";
    ASSERT_TRUE(internal::ZstdCompressAppend(*plane, 1, &plain).ok());
    ASSERT_TRUE(internal::ZstdCompressPlaneAppend(*plane, 1, &tuned).ok());
    ASSERT_EQ(tuned.substr(0, 4), "head");
    const ByteSpan frame = AsBytes(tuned).subspan(4);
    Bytes back(plane->size());
    Status s = internal::ZstdDecompressExact(frame, back);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(back == *plane);
    EXPECT_LE(frame.size(), plain.size());
    if (plane == &exponents) {
      EXPECT_LT(frame.size(), plain.size() * 95 / 100);
    }
  }
}

TEST(TensorCodecTest, FlippedBytesNeverCrash) {
  // A flipped byte inside compressed data may still decode (zstd frames carry no checksum;
  // the container checks each piece's hash), but it must never crash or overrun; flips in
  // headers, lengths and modes must be caught.
  std::mt19937_64 rng(7);
  for (const auto& s : CorruptionSamples()) {
    Bytes out(s.target.size());
    for (int i = 0; i < 400; ++i) {
      Bytes p = s.payload;
      size_t at = rng() % p.size();
      p[at] ^= uint8_t(1u << (rng() % 8));
      Status st = DecodeChunk(s.codec, s.base, p, s.e, out);
      if (!st.ok()) {
        EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
      }
    }
  }
}

// ---- codecs 3-5: crafted payloads (raw streams) for each rejection path ---------------------

void AppendU32(Bytes* b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->push_back(uint8_t(v >> (8 * i)));
}
// A raw stream (mode 1) of the given bytes.
void AppendRaw(Bytes* b, const Bytes& s) {
  b->push_back(1);
  b->insert(b->end(), s.begin(), s.end());
}

// A sparse payload for 4-byte elements: changes at `pos` by zigzag values `zz`.
Bytes SparsePayload(uint32_t n, uint32_t m, const std::vector<uint32_t>& gaps,
                    const std::vector<uint32_t>& zz) {
  Bytes p = {4};
  AppendU32(&p, n);
  AppendU32(&p, m);
  for (int k = 0; k < 4; ++k) {
    Bytes plane;
    for (uint32_t g : gaps) plane.push_back(uint8_t(g >> (8 * k)));
    AppendRaw(&p, plane);
  }
  for (int k = 0; k < 4; ++k) {
    Bytes plane;
    for (uint32_t z : zz) plane.push_back(uint8_t(z >> (8 * k)));
    AppendRaw(&p, plane);
  }
  return p;
}

TEST(TensorCodecTest, SparseCraftedPayloads) {
  Bytes base(40, 0);  // 10 elements of 4 bytes
  Bytes out(40);
  // Valid: element 2 += 1 (zigzag 2), element 5 -= 1 (zigzag 1).
  Bytes ok = SparsePayload(10, 2, {2, 2}, {2, 1});
  ASSERT_TRUE(DecodeChunk(Codec::kSparse, base, ok, 4, out).ok());
  EXPECT_EQ(LoadLE32(&out[8]), 1u);
  EXPECT_EQ(LoadLE32(&out[20]), 0xFFFFFFFFu);
  EXPECT_EQ(std::count(out.begin(), out.end(), 0), 40 - 5);  // 01 00 00 00, FF FF FF FF
  auto code = [&](const Bytes& p) { return DecodeChunk(Codec::kSparse, base, p, 4, out).code(); };
  EXPECT_EQ(code(SparsePayload(10, 2, {2, 7}, {2, 1})), Code::kCorruption);  // 2 + 1 + 7 = 10
  EXPECT_EQ(code(SparsePayload(10, 1, {0xFFFFFFFF}, {2})), Code::kCorruption);
  EXPECT_EQ(code(SparsePayload(10, 2, {2, 2}, {2, 0})), Code::kCorruption);  // zero change
  EXPECT_EQ(code(SparsePayload(10, 0, {}, {})), Code::kCorruption);          // m = 0
  EXPECT_EQ(code(SparsePayload(10, 11, std::vector<uint32_t>(11, 0),
                               std::vector<uint32_t>(11, 1))),
            Code::kCorruption);                                             // m > n
  EXPECT_EQ(code(SparsePayload(9, 2, {2, 2}, {2, 1})), Code::kCorruption);   // wrong n
  Bytes mismatch = SparsePayload(10, 3, {2, 2}, {2, 1});                    // m says 3
  EXPECT_EQ(code(mismatch), Code::kCorruption);
}

// A sub-planes payload for 2-byte elements with raw streams (one segment).
Bytes SubPayload(uint32_t n, uint8_t shift, uint8_t bits, uint32_t min_seg, const Bytes& lo,
                 const Bytes& hi) {
  Bytes p = {2};
  AppendU32(&p, n);
  p.push_back(shift);
  p.push_back(bits);
  AppendU32(&p, min_seg);
  AppendRaw(&p, lo);
  AppendRaw(&p, hi);
  return p;
}

TEST(TensorCodecTest, SubPlanesCraftedPayloads) {
  // Base: 3 BF16-like elements with exponent keys 2, 1, 2 (shift 7, 8 bits); sorted order is
  // element 1, then elements 0 and 2.
  std::vector<uint16_t> b = {0x0100, 0x0080, 0x0100};
  Bytes base = FromValues(b), out(6);
  // Zigzag changes in sorted order: element 1 gets +1 (2), element 0 gets -1 (1), element 2 0.
  Bytes ok = SubPayload(3, 7, 8, 100, {2, 1, 0}, {0, 0, 0});
  ASSERT_TRUE(DecodeChunk(Codec::kSubPlanes, base, ok, 2, out).ok());
  std::vector<uint16_t> got(3);
  std::memcpy(got.data(), out.data(), 6);
  EXPECT_EQ(got, (std::vector<uint16_t>{0x00FF, 0x0081, 0x0100}));
  auto code = [&](const Bytes& p) {
    return DecodeChunk(Codec::kSubPlanes, base, p, 2, out).code();
  };
  EXPECT_EQ(code(SubPayload(3, 7, 13, 100, {2, 1, 0}, {0, 0, 0})), Code::kCorruption);
  EXPECT_EQ(code(SubPayload(3, 10, 7, 100, {2, 1, 0}, {0, 0, 0})), Code::kCorruption);
  EXPECT_EQ(code(SubPayload(3, 7, 8, 0, {2, 1, 0}, {0, 0, 0})), Code::kCorruption);
  EXPECT_EQ(code(SubPayload(4, 7, 8, 100, {2, 1, 0}, {0, 0, 0})), Code::kCorruption);
  // Segments of 1 element: one stream per group with >= 1 element (3 groups -> 2 segments
  // here: keys 1 and 2), so the single-stream payload no longer parses.
  EXPECT_EQ(code(SubPayload(3, 7, 8, 1, {2, 1, 0}, {0, 0, 0})), Code::kCorruption);
  Bytes two_segments = {2};
  AppendU32(&two_segments, 3);
  two_segments.insert(two_segments.end(), {7, 8});
  AppendU32(&two_segments, 1);
  AppendRaw(&two_segments, {2});
  AppendRaw(&two_segments, {1, 0});
  AppendRaw(&two_segments, {0});
  AppendRaw(&two_segments, {0, 0});
  ASSERT_TRUE(DecodeChunk(Codec::kSubPlanes, base, two_segments, 2, out).ok());
  std::memcpy(got.data(), out.data(), 6);
  EXPECT_EQ(got, (std::vector<uint16_t>{0x00FF, 0x0081, 0x0100}));
}

TEST(TensorCodecTest, SubPlanesSortedOrderIsStableByKey) {
  // Keys (BF16 exponents) 3, 1, 3, 2, 1, 3: the sorted order is 1, 4, 3, 0, 2, 5. The low
  // plane lists the elements' zigzag changes in that order; element i changes by +(i + 1).
  std::vector<uint16_t> b = {0x0180, 0x0080, 0x0180, 0x0100, 0x0080, 0x0180};
  Bytes base = FromValues(b), out(12);
  Bytes p = SubPayload(6, 7, 8, 100, {4, 10, 8, 2, 6, 12}, Bytes(6, 0));
  ASSERT_TRUE(DecodeChunk(Codec::kSubPlanes, base, p, 2, out).ok());
  std::vector<uint16_t> got(6);
  std::memcpy(got.data(), out.data(), 12);
  EXPECT_EQ(got, (std::vector<uint16_t>{0x0181, 0x0082, 0x0183, 0x0104, 0x0085, 0x0186}));
  // The encoder produces the same order: its low plane (a raw stream after the 11-byte header:
  // E, n, S, K, M) matches; its high plane is a zero stream.
  CodecOptions o;
  o.dtype = formats::DType::kBF16;
  auto enc = internal::EncodeWith(Codec::kSubPlanes, base, FromValues(got), 2, o);
  ASSERT_TRUE(enc.ok());
  Bytes want = {2, 6, 0, 0, 0, 7, 8, 0x00, 0x10, 0, 0, 1, 4, 10, 8, 2, 6, 12, 0};
  EXPECT_EQ(Bytes(enc->begin(), enc->end()), want);
}

TEST(TensorCodecTest, PlanesCraftedPayloads) {
  Bytes p = {2};
  AppendU32(&p, 2);
  AppendRaw(&p, {0x11, 0x22});
  AppendRaw(&p, {0x33, 0x44});
  p.push_back(0x55);  // tail of a 5-byte chunk
  Bytes out(5);
  ASSERT_TRUE(DecodeChunk(Codec::kPlanes, {}, p, 2, out).ok());
  EXPECT_EQ(out, (Bytes{0x11, 0x33, 0x22, 0x44, 0x55}));
  Bytes out4(4);
  EXPECT_EQ(DecodeChunk(Codec::kPlanes, {}, p, 2, out4).code(), Code::kCorruption);
  Bytes wrong_n = p;
  wrong_n[1] = 3;
  EXPECT_EQ(DecodeChunk(Codec::kPlanes, {}, wrong_n, 2, out).code(), Code::kCorruption);
}

TEST(TensorCodecTest, AutoIsNeverWorseThanAnyCandidateOnSmallChunks) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 0.02f);
  for (double p_change : {0.01, 0.3, 1.0}) {
    std::vector<float> w(16384);
    for (auto& x : w) x = g(rng);
    std::vector<float> t = w;
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& x : t) {
      if (u(rng) < p_change) x += g(rng) * 1e-3f;
    }
    Bytes b = FromValues(w), tb = FromValues(t);
    auto enc = EncodeChunk(b, tb, 4, CodecOptions{});
    ASSERT_TRUE(enc.ok());
    // The candidates EncodeChunk tries (xor-planes is not one of them).
    for (Codec c : {Codec::kZstd, Codec::kSubPlanes, Codec::kSparse, Codec::kPlanes}) {
      auto forced = internal::EncodeWith(c, b, tb, 4, CodecOptions{});
      ASSERT_TRUE(forced.ok());
      EXPECT_LE(enc->payload.size(), forced->size()) << CodecName(c) << " p=" << p_change;
    }
  }
}

TEST(TensorCodecTest, LargeChunksUseTheSampledChoice) {
  std::mt19937_64 rng(6);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(kChunkBytes / 4);
  for (auto& x : w) x = g(rng);
  Bytes b = FromValues(w);
  // Few changes: sparse pays; many small changes: a plane codec; unrelated: no delta codec.
  std::vector<float> few = w;
  for (size_t i = 0; i < few.size(); i += 997) few[i] += 1e-3f;
  std::vector<float> many = w;
  for (auto& x : many) x += g(rng) * 1e-4f;
  std::vector<float> unrelated(w.size());
  for (auto& x : unrelated) x = g(rng);
  for (const auto& [label, t] :
       {std::pair<const char*, std::vector<float>>{"few", few}, {"many", many},
        {"unrelated", unrelated}}) {
    Bytes tb = FromValues(t);
    auto enc = EncodeChunk(b, tb, 4, CodecOptions{});
    ASSERT_TRUE(enc.ok()) << label;
    Bytes out(tb.size());
    ASSERT_TRUE(DecodeChunk(enc->codec, b, AsBytes(enc->payload), 4, out).ok()) << label;
    EXPECT_TRUE(out == tb) << label;
    auto z = internal::EncodeWith(Codec::kZstd, {}, tb, 4, CodecOptions{});
    ASSERT_TRUE(z.ok());
    EXPECT_LE(enc->payload.size(), z->size()) << label << " " << CodecName(enc->codec);
    if (std::string(label) == "few") {
      EXPECT_EQ(enc->codec, Codec::kSparse);
    }
    if (std::string(label) == "unrelated") {
      EXPECT_FALSE(CodecNeedsBase(enc->codec)) << CodecName(enc->codec);
    }
  }
}

// A choice made once for a tensor of several chunks (ChooseCodec), applied chunk by chunk
// (EncodeChunkAs): identical chunks stay identical, every chunk round-trips and is never larger
// than its zstd, and the same bytes always give the same choice.
TEST(TensorCodecTest, TensorWideChoiceAppliesToEveryChunk) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g(0.0f, 0.02f);
  const size_t per_chunk = kChunkBytes / 4;
  std::vector<float> w(3 * per_chunk + 123);
  for (auto& x : w) x = g(rng);
  std::vector<float> t = w;
  for (size_t i = per_chunk; i < t.size(); ++i) t[i] += g(rng) * 1e-4f;  // chunk 0 unchanged
  Bytes bb = FromValues(w), tb = FromValues(t);
  CodecOptions o;
  o.dtype = formats::DType::kF32;
  auto choice = ChooseCodec(bb, tb, 4, o);
  ASSERT_TRUE(choice.ok()) << choice.status().ToString();
  EXPECT_EQ(choice->codec, Codec::kSubPlanes);
  EXPECT_EQ(choice->key_shift, 23);
  EXPECT_EQ(choice->key_bits, 8);
  auto again = ChooseCodec(bb, tb, 4, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->codec, choice->codec);
  EXPECT_EQ(again->check_zstd, choice->check_zstd);
  for (size_t off = 0, c = 0; off < tb.size(); off += kChunkBytes, ++c) {
    size_t len = std::min<size_t>(kChunkBytes, tb.size() - off);
    ByteSpan b = ByteSpan(bb).subspan(off, len), tt = ByteSpan(tb).subspan(off, len);
    auto enc = EncodeChunkAs(*choice, b, tt, 4, o);
    ASSERT_TRUE(enc.ok()) << c;
    EXPECT_EQ(enc->codec, c == 0 ? Codec::kIdentical : Codec::kSubPlanes) << c;
    Bytes out(len);
    ASSERT_TRUE(DecodeChunk(enc->codec, b, AsBytes(enc->payload), 4, out).ok()) << c;
    EXPECT_TRUE(out == Bytes(tt.begin(), tt.end())) << c;
    auto z = internal::EncodeWith(Codec::kZstd, {}, tt, 4, o);
    ASSERT_TRUE(z.ok());
    EXPECT_LE(enc->payload.size(), z->size()) << c;
  }
  // Without a base a base-needing choice falls back to a codec that needs none; identical is
  // not a choice.
  auto no_base = EncodeChunkAs(*choice, {}, ByteSpan(tb).subspan(0, 4096), 4, o);
  ASSERT_TRUE(no_base.ok());
  EXPECT_FALSE(CodecNeedsBase(no_base->codec)) << CodecName(no_base->codec);
  CodecChoice identical;
  identical.codec = Codec::kIdentical;
  EXPECT_EQ(EncodeChunkAs(identical, bb, tb, 4, o).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ChooseCodec(bb, ByteSpan(tb).subspan(0, 8), 4, o).status().code(),
            Code::kInvalidArgument);  // sizes differ
  EXPECT_EQ(ChooseCodec(bb, tb, 3, o).status().code(), Code::kInvalidArgument);
}

// When the sampled choice gains nothing on a chunk (here: random bytes in a tensor chosen for
// sub-planes from its smooth part), the chunk falls back to zstd and is never larger.
TEST(TensorCodecTest, TensorWideChoiceFallsBackWhereItGainsNothing) {
  std::mt19937_64 rng(10);
  CodecChoice choice;
  choice.codec = Codec::kSubPlanes;
  choice.key_shift = 23;
  choice.key_bits = 8;
  Bytes b = RandomBytes(rng, 1 << 16), t = RandomBytes(rng, 1 << 16);
  auto enc = EncodeChunkAs(choice, b, t, 4, CodecOptions{});
  ASSERT_TRUE(enc.ok());
  auto z = internal::EncodeWith(Codec::kZstd, {}, t, 4, CodecOptions{});
  ASSERT_TRUE(z.ok());
  EXPECT_LE(enc->payload.size(), z->size());
  Bytes out(t.size());
  ASSERT_TRUE(DecodeChunk(enc->codec, b, AsBytes(enc->payload), 4, out).ok());
  EXPECT_EQ(out, t);
}

TEST(TensorCodecTest, DTypeHintPicksTheExponentField) {
  std::mt19937_64 rng(8);
  Bytes base = RandomBytes(rng, 4096), target = Perturb(rng, base, 2, 0.5);
  for (auto [dt, shift, bits] : {std::tuple{formats::DType::kBF16, 7, 8},
                                 std::tuple{formats::DType::kF16, 10, 5},
                                 std::tuple{formats::DType::kI16, 0, 0}}) {
    CodecOptions o;
    o.dtype = dt;
    auto enc = internal::EncodeWith(Codec::kSubPlanes, base, target, 2, o);
    ASSERT_TRUE(enc.ok());
    ASSERT_GE(enc->size(), 7u);
    EXPECT_EQ(uint8_t((*enc)[5]), shift);
    EXPECT_EQ(uint8_t((*enc)[6]), bits);
    Bytes out(target.size());
    ASSERT_TRUE(DecodeChunk(Codec::kSubPlanes, base, AsBytes(*enc), 2, out).ok());
    EXPECT_EQ(out, target);
  }
}

TEST(TensorCodecTest, ConcurrentThreadsRoundTrip) {
  // Contexts and scratch buffers are per thread: coding from several threads at once is safe.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 20; ++i) {
        Bytes base = RandomBytes(rng, 20000 + 4 * i);
        Bytes target = Perturb(rng, base, 4, 0.2);
        auto enc = EncodeChunk(base, target, 4, CodecOptions{});
        Bytes out(target.size());
        if (!enc.ok() || !DecodeChunk(enc->codec, base, AsBytes(enc->payload), 4, out).ok() ||
            out != target) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace blz::patcher
