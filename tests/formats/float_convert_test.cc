#include "formats/float_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace blz::formats {
namespace {

using ::testing::HasSubstr;

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }
bool IsF16NaN(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool IsBF16NaN(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

// Independent value of an F16 bit pattern, from the IEEE definition (finite patterns only).
double RefF16(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
  return (h & 0x8000) != 0 ? -mag : mag;
}

// Slow reference F32 -> F16: bracket |f| between two adjacent F16 magnitudes (binary search
// over the monotonic positive patterns) and pick the nearer, ties to the even pattern. The
// pattern 0x7C00 stands for 2^16 (the next value with an unbounded exponent), which is how
// IEEE decides overflow. Differences are exact in double (Sterbenz).
uint16_t RefF32ToF16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  auto value = [](uint16_t h) { return h == 0x7C00 ? 65536.0 : RefF16(h); };
  if (a >= 65536.0) return sign | 0x7C00;
  uint16_t lo = 0, hi = 0x7C00;  // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const uint16_t mid = uint16_t((lo + hi) / 2);
    (value(mid) <= a ? lo : hi) = mid;
  }
  const double dl = a - value(lo), dh = value(hi) - a;
  const uint16_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1) == 0 ? lo : hi);
  return sign | r;
}

// Slow reference F32 -> BF16 (same method; 0x7F80 stands for 2^128).
uint16_t RefF32ToBF16(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  const uint16_t lo = uint16_t(a >> 16), hi = uint16_t(lo + 1);
  auto value = [](uint16_t b) {
    return b == 0x7F80 ? std::ldexp(1.0, 128) : double(FromBits(uint32_t(b) << 16));
  };
  const double v = double(FromBits(a));
  if (lo >= 0x7F80) return sign | 0x7F80;  // Inf (NaN is not passed here)
  const double dl = v - value(lo), dh = value(hi) - v;
  const uint16_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1) == 0 ? lo : hi);
  return sign | r;
}

// --- F16 ------------------------------------------------------------------------------------

TEST(FloatConvert, F16ToF32EdgeValues) {
  EXPECT_EQ(Bits(F16ToF32(0x0000)), 0x00000000u);  // +0
  EXPECT_EQ(Bits(F16ToF32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0xC000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));        // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03FF), std::ldexp(1023.0f, -24));     // largest subnormal
  EXPECT_EQ(F16ToF32(0x8200), -std::ldexp(512.0f, -24));     // negative subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));        // smallest normal
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);                     // max finite
  EXPECT_EQ(F16ToF32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(F16ToF32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7C01)));  // signaling NaN stays NaN
  EXPECT_TRUE(std::signbit(F16ToF32(0xFE00)));
  EXPECT_EQ(Bits(F16ToF32(0x7E01)), 0x7FC02000u);  // payload copied
}

TEST(FloatConvert, F16ToF32MatchesDefinitionForAllFinitePatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(double(F16ToF32(uint16_t(h))), RefF16(uint16_t(h))) << std::hex << h;
  }
}

TEST(FloatConvert, F32ToF16EdgeValues) {
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);                        // max finite
  EXPECT_EQ(F32ToF16(65519.996f), 0x7BFF);                      // just below the midpoint
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);                        // midpoint: ties to even = Inf
  EXPECT_EQ(F32ToF16(1e6f), 0x7C00);                            // overflow
  EXPECT_EQ(F32ToF16(-1e6f), 0xFC00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xFC00);
  // Subnormals are kept, with RNE at the bottom of the range.
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);            // tie -> even (0)
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25) * 1.0000001f), 0x0001);  // just above the tie
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);            // 1.5 ulp: tie -> even (2)
  EXPECT_EQ(F32ToF16(std::ldexp(5.0f, -25)), 0x0002);            // 2.5 ulp: tie -> even (2)
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);         // carries into the normals
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000);  // F32 subnormal
  // Ties in the normal range.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // halfway 1 / 1+2^-10: even
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);      // halfway odd/even: even
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23)), 0x3C01);
  EXPECT_EQ(F32ToF16(2047.5f), 0x6800);  // 2047 + 0.5 rounds to 2048 (odd 2047 -> even)
}

TEST(FloatConvert, F32ToF16NaNStaysNaNAndQuiet) {
  for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFFC00000u, 0xFF800001u,
                        0x7F802000u}) {
    const uint16_t h = F32ToF16(FromBits(bits));
    EXPECT_TRUE(IsF16NaN(h)) << std::hex << bits << " -> " << h;
    EXPECT_NE(h & 0x0200, 0) << "quiet bit set";
    EXPECT_EQ((h & 0x8000) != 0, (bits & 0x80000000u) != 0) << "sign kept";
  }
}

TEST(FloatConvert, F32ToF16MatchesSlowReference) {
  // A sweep over the F32 bit space, plus the values around every rounding boundary.
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 9973) {
    const float f = FromBits(uint32_t(x));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), RefF32ToF16(f)) << std::hex << x;
  }
  std::mt19937 rng(7);
  for (uint32_t e = 90; e <= 145; ++e) {
    for (int k = 0; k < 40; ++k) {
      const uint32_t hi = rng() & 0x7FE000;
      for (uint32_t low : {0x0000u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu}) {
        for (uint32_t sign : {0u, 0x80000000u}) {
          const float f = FromBits(sign | e << 23 | hi | low);
          ASSERT_EQ(F32ToF16(f), RefF32ToF16(f)) << std::hex << Bits(f);
        }
      }
    }
  }
  // Subnormal results: every low-bit pattern of one band.
  for (uint32_t m = 0; m < 0x800000; m += 97) {
    const float f = FromBits(105u << 23 | m);
    ASSERT_EQ(F32ToF16(f), RefF32ToF16(f)) << std::hex << Bits(f);
  }
}

TEST(FloatConvert, F16RoundTripAllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t back = F32ToF16(F16ToF32(uint16_t(h)));
    if (IsF16NaN(uint16_t(h))) {
      ASSERT_TRUE(IsF16NaN(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000);
      if ((h & 0x0200) != 0) {
        ASSERT_EQ(back, h) << "quiet NaNs round-trip exactly";
      }
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

// --- BF16 -----------------------------------------------------------------------------------

TEST(FloatConvert, BF16EdgeValues) {
  EXPECT_EQ(Bits(BF16ToF32(0x8000)), 0x80000000u);
  EXPECT_EQ(BF16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(BF16ToF32(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(BF16ToF32(0x0001), FromBits(0x00010000));  // subnormal
  EXPECT_EQ(F32ToBF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16(FromBits(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(F32ToBF16(FromBits(0x3F818000)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(F32ToBF16(FromBits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(F32ToBF16(FromBits(0x3F807FFF)), 0x3F80);
  EXPECT_EQ(F32ToBF16(FromBits(0xBF808001)), 0xBF81);
  // Max finite BF16 is 0x7F7F; the F32 max rounds past it to Inf, as does the exact midpoint.
  EXPECT_EQ(F32ToBF16(FromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(F32ToBF16(FromBits(0x7F7F8000)), 0x7F80);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7F80);
  // Subnormals are rounded, not flushed.
  EXPECT_EQ(F32ToBF16(FromBits(0x00008000)), 0x0000);  // tie -> even
  EXPECT_EQ(F32ToBF16(FromBits(0x00008001)), 0x0001);
  EXPECT_EQ(F32ToBF16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(F32ToBF16(FromBits(0x007FFFFF)), 0x0080);  // largest subnormal -> smallest normal
  // NaN: a signaling NaN whose payload is only in the low bits must not become Inf.
  for (uint32_t bits : {0x7F800001u, 0x7FC00000u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = F32ToBF16(FromBits(bits));
    EXPECT_TRUE(IsBF16NaN(b)) << std::hex << bits;
    EXPECT_NE(b & 0x0040, 0);
    EXPECT_EQ((b & 0x8000) != 0, (bits & 0x80000000u) != 0);
  }
}

TEST(FloatConvert, F32ToBF16MatchesSlowReference) {
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 7919) {
    const float f = FromBits(uint32_t(x));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBF16(f), RefF32ToBF16(f)) << std::hex << x;
  }
}

TEST(FloatConvert, BF16RoundTripAllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t back = F32ToBF16(BF16ToF32(uint16_t(h)));
    if (IsBF16NaN(uint16_t(h))) {
      ASSERT_TRUE(IsBF16NaN(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000);
      if ((h & 0x0040) != 0) {
        ASSERT_EQ(back, h);
      }
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(FloatConvert, ArrayConversions) {
  const std::vector<float> in = {0.0f, -1.5f, 65504.0f, 1e6f, std::ldexp(1.0f, -24)};
  std::vector<uint16_t> h(in.size());
  ASSERT_TRUE(ConvertF32ToF16(in, h).ok());
  EXPECT_EQ(h, (std::vector<uint16_t>{0x0000, 0xBE00, 0x7BFF, 0x7C00, 0x0001}));
  std::vector<float> back(in.size());
  ASSERT_TRUE(ConvertF16ToF32(h, back).ok());
  EXPECT_EQ(back[1], -1.5f);
  EXPECT_TRUE(std::isinf(back[3]));
  std::vector<uint16_t> b(in.size());
  ASSERT_TRUE(ConvertF32ToBF16(in, b).ok());
  EXPECT_EQ(b[1], 0xBFC0);
  ASSERT_TRUE(ConvertBF16ToF32(b, back).ok());
  EXPECT_EQ(back[1], -1.5f);

  std::vector<uint16_t> short_out(2);
  Status s = ConvertF32ToF16(in, short_out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("5 elements"));
  EXPECT_EQ(ConvertF16ToF32(h, std::span<float>(back.data(), 3)).code(), Code::kInvalidArgument);
  EXPECT_EQ(ConvertF32ToBF16(in, short_out).code(), Code::kInvalidArgument);
  EXPECT_EQ(ConvertBF16ToF32(b, std::span<float>(back.data(), 1)).code(),
            Code::kInvalidArgument);
}

TEST(FloatConvert, F8Decoding) {
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);     // e=7, m=0
  EXPECT_EQ(F8E4M3ToF32(0x7E), 448.0f);   // max finite
  EXPECT_EQ(F8E4M3ToF32(0xFE), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(F8E4M3ToF32(0x3C), 1.5f);
  EXPECT_EQ(F8E4M3ToF32(0x78), 256.0f);   // e=15, m=0 is finite (no Inf in e4m3fn)
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xFF)));
  EXPECT_TRUE(std::signbit(F8E4M3ToF32(0x80)));
  EXPECT_EQ(F8E5M2ToF32(0x3C), 1.0f);
  EXPECT_EQ(F8E5M2ToF32(0x7B), 57344.0f);  // max finite
  EXPECT_EQ(F8E5M2ToF32(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(F8E5M2ToF32(0x7E)));
  EXPECT_EQ(F8E5M2ToF32(0x01), std::ldexp(1.0f, -16));
}

// --- Q8_0 / Q4_0 ----------------------------------------------------------------------------

TEST(Q8_0, KnownBlockByHand) {
  // amax = 127 -> d = 1, id = 1: q = roundf(x) (half away from zero), d stored as 0x3C00.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = -0.5f;   // -> -1 (RNE would give -0)
  x[2] = 0.5f;    // -> 1
  x[3] = 2.5f;    // -> 3 (RNE would give 2)
  x[4] = -2.5f;   // -> -3
  x[5] = 3.49f;   // -> 3
  x[6] = -127.0f;
  x[31] = 100.2f;  // -> 100
  std::vector<uint8_t> out(34);
  ASSERT_TRUE(QuantizeQ8_0(x, out).ok());
  std::vector<uint8_t> want(34, 0);
  want[0] = 0x00;
  want[1] = 0x3C;
  want[2] = 0x7F;
  want[3] = 0xFF;
  want[4] = 0x01;
  want[5] = 0x03;
  want[6] = 0xFD;
  want[7] = 0x03;
  want[8] = 0x81;
  want[33] = 100;
  EXPECT_EQ(out, want);

  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeQ8_0(out, y).ok());
  EXPECT_EQ(y[0], 127.0f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[3], 3.0f);
  EXPECT_EQ(y[6], -127.0f);
  EXPECT_EQ(y[31], 100.0f);
}

TEST(Q8_0, DequantizeByHand) {
  // d = 2.0 (fp16 0x4000), q = -128, -1, 0, 1, 127, then zeros.
  std::vector<uint8_t> blk(34, 0);
  blk[0] = 0x00;
  blk[1] = 0x40;
  blk[2] = 0x80;
  blk[3] = 0xFF;
  blk[4] = 0x00;
  blk[5] = 0x01;
  blk[6] = 0x7F;
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeQ8_0(blk, y).ok());
  EXPECT_EQ(y[0], -256.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 2.0f);
  EXPECT_EQ(y[4], 254.0f);
  EXPECT_EQ(y[31], 0.0f);
}

TEST(Q8_0, ZeroBlockAndScaleRounding) {
  std::vector<float> x(64, 0.0f);
  for (int j = 0; j < 32; ++j) x[32 + j] = float(j) / 31.0f;  // amax = 1: d = 1/127
  std::vector<uint8_t> out(68, 0xAA);
  ASSERT_TRUE(QuantizeQ8_0(x, out).ok());
  for (int i = 0; i < 34; ++i) EXPECT_EQ(out[i], 0) << i;  // all-zero block: d = 0, q = 0
  // d = 1/127 is not an fp16 value: stored rounded to nearest even (0x2008).
  EXPECT_EQ(out[34] | out[35] << 8, 0x2008);
  EXPECT_EQ(out[34 + 2 + 31], 127);
}

TEST(Q8_0, ErrorBound) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const size_t blocks = 200;
  std::vector<float> x(blocks * 32);
  for (size_t b = 0; b < blocks; ++b) {
    // Scales keep d a normal fp16 value (subnormal d has a coarser relative precision).
    const float scale = std::ldexp(1.0f, int(b % 16) - 4);
    for (size_t j = 0; j < 32; ++j) x[b * 32 + j] = u(rng) * scale;
  }
  std::vector<uint8_t> q(blocks * 34);
  ASSERT_TRUE(QuantizeQ8_0(x, q).ok());
  std::vector<float> y(x.size());
  ASSERT_TRUE(DequantizeQ8_0(q, y).ok());
  for (size_t b = 0; b < blocks; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    // Rounding (d/2) plus the fp16 rounding of d, which can move a q of up to 127 by
    // 127 * d * 2^-11.
    const float bound = d * (0.5f + 127.0f * std::ldexp(1.0f, -11)) * 1.001f;
    for (size_t j = 0; j < 32; ++j) {
      ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << b << " " << j;
    }
  }
}

TEST(Q8_0, Rejections) {
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> out(34);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  Status s = QuantizeQ8_0(x, out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("element 7 is NaN"));
  x[7] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(QuantizeQ8_0(x, out).message(), HasSubstr("element 7 is infinite"));
  x[7] = 1.0f;
  std::vector<float> odd(31, 1.0f);
  EXPECT_THAT(QuantizeQ8_0(odd, out).message(), HasSubstr("not a multiple of 32"));
  std::vector<uint8_t> short_out(33);
  EXPECT_EQ(QuantizeQ8_0(x, short_out).code(), Code::kInvalidArgument);
  std::vector<float> y(32);
  EXPECT_THAT(DequantizeQ8_0(short_out, y).message(), HasSubstr("not a whole number"));
  std::vector<float> y2(64);
  EXPECT_EQ(DequantizeQ8_0(out, y2).code(), Code::kInvalidArgument);
}

TEST(Q4_0, KnownBlockByHand) {
  // The first value of largest magnitude is -8: d = -8 / -8 = 1, id = 1, so
  // q = MIN(15, (int8_t)(x + 8.5)): truncation after adding 8.5.
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;   // 0.5 -> 0
  x[1] = 7.0f;    // 15.5 -> 15
  x[2] = 0.49f;   // 8.99 -> 8
  x[3] = 0.5f;    // 9.0 -> 9
  x[4] = -0.5f;   // 8.0 -> 8
  x[5] = -0.51f;  // 7.99 -> 7
  x[6] = -3.0f;   // 5.5 -> 5
  x[16] = 8.0f;   // same magnitude as x[0] but later: not the max; 16.5 -> 16 -> MIN 15
  x[17] = 6.6f;   // 15.1 -> 15
  x[31] = -7.7f;  // 0.8 -> 0
  std::vector<uint8_t> out(18);
  ASSERT_TRUE(QuantizeQ4_0(x, out).ok());
  std::vector<uint8_t> want(18, 0x88);  // zeros: q = 8 in both nibbles
  want[0] = 0x00;
  want[1] = 0x3C;                // d = 1.0
  want[2 + 0] = 0x00 | 15 << 4;  // x[0] low, x[16] high
  want[2 + 1] = 15 | 15 << 4;    // x[1], x[17]
  want[2 + 2] = 8 | 8 << 4;
  want[2 + 3] = 9 | 8 << 4;
  want[2 + 4] = 8 | 8 << 4;
  want[2 + 5] = 7 | 8 << 4;
  want[2 + 6] = 5 | 8 << 4;
  want[2 + 15] = 8 | 0 << 4;     // x[15], x[31]
  EXPECT_EQ(out, want);

  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeQ4_0(out, y).ok());
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[5], -1.0f);
  EXPECT_EQ(y[16], 7.0f);
  EXPECT_EQ(y[31], -8.0f);
}

TEST(Q4_0, SignOfTheLargestValue) {
  // Largest magnitude positive: d = 8 / -8 = -1, so larger x gives smaller q.
  std::vector<float> x(32, 0.0f);
  x[0] = 8.0f;    // x*id = -8 -> 0.5 -> 0
  x[16] = -8.0f;  // +8 -> 16.5 -> 16 -> 15
  x[1] = 2.0f;    // -2 -> 6.5 -> 6
  std::vector<uint8_t> out(18);
  ASSERT_TRUE(QuantizeQ4_0(x, out).ok());
  EXPECT_EQ(out[0] | out[1] << 8, 0xBC00);  // -1.0
  EXPECT_EQ(out[2], 0x00 | 15 << 4);
  EXPECT_EQ(out[3], 6 | 8 << 4);
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeQ4_0(out, y).ok());
  EXPECT_EQ(y[0], 8.0f);    // (0 - 8) * -1
  EXPECT_EQ(y[16], -7.0f);  // (15 - 8) * -1: the clamp loses one step
  EXPECT_EQ(y[1], 2.0f);
}

TEST(Q4_0, DequantizeByHand) {
  std::vector<uint8_t> blk(18, 0);
  blk[0] = 0x00;
  blk[1] = 0x38;  // d = 0.5
  blk[2] = 0x1F;  // element 0: q = 15 -> 3.5; element 16: q = 1 -> -3.5
  blk[17] = 0x80; // element 15: q = 0 -> -4; element 31: q = 8 -> 0
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeQ4_0(blk, y).ok());
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[15], -4.0f);
  EXPECT_EQ(y[31], 0.0f);
  EXPECT_EQ(y[1], -4.0f);  // q = 0
}

TEST(Q4_0, ErrorBound) {
  std::mt19937 rng(2);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const size_t blocks = 200;
  std::vector<float> x(blocks * 32);
  for (float& v : x) v = n(rng);
  std::vector<uint8_t> q(blocks * 18);
  ASSERT_TRUE(QuantizeQ4_0(x, q).ok());
  std::vector<float> y(x.size());
  ASSERT_TRUE(DequantizeQ4_0(q, y).ok());
  for (size_t b = 0; b < blocks; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 8.0f;
    // Rounding is d/2 except on the side opposite to the max, where the cap at 15 can cost a
    // whole step; plus the fp16 rounding of d (|q - 8| <= 8).
    const float bound = d * (1.0f + 8.0f * std::ldexp(1.0f, -11)) * 1.001f;
    for (size_t j = 0; j < 32; ++j) {
      ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << b << " " << j;
    }
  }
}

TEST(Q4_0, Rejections) {
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> out(18);
  x[31] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(QuantizeQ4_0(x, out).message(), HasSubstr("element 31 is infinite"));
  x[31] = 0;
  std::vector<uint8_t> big(36);
  EXPECT_EQ(QuantizeQ4_0(x, big).code(), Code::kInvalidArgument);
  std::vector<float> y(31);
  EXPECT_EQ(DequantizeQ4_0(out, y).code(), Code::kInvalidArgument);
}

// --- Decoding -------------------------------------------------------------------------------

template <typename T>
ByteSpan Raw(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

TEST(Decode, PlainTypes) {
  auto one = [](ValueType t, ByteSpan data, uint64_t n) {
    std::vector<double> out(n);
    EXPECT_TRUE(DecodeElements(t, data, n, 0, std::span<double>(out)).ok());
    return out;
  };
  EXPECT_EQ(one(ValueType::kI8, Raw(std::vector<int8_t>{-1, 127, -128}), 3),
            (std::vector<double>{-1, 127, -128}));
  EXPECT_EQ(one(ValueType::kU8, Raw(std::vector<uint8_t>{0, 255}), 2),
            (std::vector<double>{0, 255}));
  EXPECT_EQ(one(ValueType::kBool, Raw(std::vector<uint8_t>{0, 1}), 2),
            (std::vector<double>{0, 1}));
  EXPECT_EQ(one(ValueType::kU16, Raw(std::vector<uint16_t>{65535, 3}), 2),
            (std::vector<double>{65535, 3}));
  EXPECT_EQ(one(ValueType::kI16, Raw(std::vector<int16_t>{-32768, 5}), 2),
            (std::vector<double>{-32768, 5}));
  EXPECT_EQ(one(ValueType::kI32, Raw(std::vector<int32_t>{-7, 1 << 30}), 2),
            (std::vector<double>{-7, 1 << 30}));
  EXPECT_EQ(one(ValueType::kU32, Raw(std::vector<uint32_t>{4000000000u}), 1),
            (std::vector<double>{4000000000.0}));
  EXPECT_EQ(one(ValueType::kI64, Raw(std::vector<int64_t>{-5, int64_t{1} << 40}), 2),
            (std::vector<double>{-5, 1099511627776.0}));
  EXPECT_EQ(one(ValueType::kU64, Raw(std::vector<uint64_t>{uint64_t{1} << 63}), 1),
            (std::vector<double>{9223372036854775808.0}));
  EXPECT_EQ(one(ValueType::kF64, Raw(std::vector<double>{1e300, -0.25}), 2),
            (std::vector<double>{1e300, -0.25}));
  EXPECT_EQ(one(ValueType::kF32, Raw(std::vector<float>{1.5f, -2.0f}), 2),
            (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(one(ValueType::kF16, Raw(std::vector<uint16_t>{0x3C00, 0xC000}), 2),
            (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(one(ValueType::kBF16, Raw(std::vector<uint16_t>{0x3F80, 0xBFC0}), 2),
            (std::vector<double>{1.0, -1.5}));
  EXPECT_EQ(one(ValueType::kF8_E4M3, Raw(std::vector<uint8_t>{0x38, 0x7E}), 2),
            (std::vector<double>{1.0, 448.0}));
  EXPECT_EQ(one(ValueType::kF8_E5M2, Raw(std::vector<uint8_t>{0x3C, 0xC0}), 2),
            (std::vector<double>{1.0, -2.0}));
  // F64 beyond the float range narrows to Inf in the float decoder.
  std::vector<float> f(1);
  ASSERT_TRUE(DecodeElements(ValueType::kF64, Raw(std::vector<double>{1e300}), 1, 0,
                             std::span<float>(f)).ok());
  EXPECT_TRUE(std::isinf(f[0]));
}

TEST(Decode, UnalignedBytes) {
  // Tensor bytes in a file need not be aligned: decode F32 at an odd address.
  std::vector<uint8_t> buf(1 + 8);
  const float v[2] = {3.25f, -1.0f};
  std::memcpy(buf.data() + 1, v, 8);
  std::vector<double> out(2);
  ASSERT_TRUE(DecodeElements(ValueType::kF32, ByteSpan(buf).subspan(1), 2, 0,
                             std::span<double>(out)).ok());
  EXPECT_EQ(out, (std::vector<double>{3.25, -1.0}));
}

TEST(Decode, TypeMappingAndSizes) {
  EXPECT_EQ(ValueTypeOf(DType::kBF16), ValueType::kBF16);
  EXPECT_EQ(ValueTypeOf(DType::kF8_E4M3), ValueType::kF8_E4M3);
  EXPECT_EQ(ValueTypeOf(GgmlType::kF16), ValueType::kF16);
  EXPECT_EQ(ValueTypeOf(GgmlType::kI32), ValueType::kI32);
  EXPECT_EQ(ValueTypeOf(GgmlType::kQ8_0), ValueType::kQ8_0);
  EXPECT_EQ(ValueTypeOf(GgmlType::kQ4_0), ValueType::kQ4_0);
  EXPECT_EQ(ValueTypeOf(GgmlType::kQ4_K), std::nullopt);
  EXPECT_EQ(ValueTypeOf(GgmlType::kQ4_1), std::nullopt);
  EXPECT_EQ(ValueTypeName(ValueType::kQ4_0), "Q4_0");
  EXPECT_EQ(*ValueBytes(ValueType::kQ8_0, 64), 68u);
  EXPECT_EQ(*ValueBytes(ValueType::kQ4_0, 32), 18u);
  EXPECT_EQ(*ValueBytes(ValueType::kF64, 3), 24u);
  EXPECT_EQ(ValueBytes(ValueType::kQ8_0, 33).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ValueBytes(ValueType::kF64, uint64_t{1} << 62).status().code(), Code::kTooLarge);
}

TEST(Decode, QuantizedBlocksAndRanges) {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) * 0.25f;
  std::vector<uint8_t> q(3 * 34);
  ASSERT_TRUE(QuantizeQ8_0(x, q).ok());
  std::vector<float> whole(96);
  ASSERT_TRUE(DequantizeQ8_0(q, whole).ok());
  // A block-aligned range decodes the same values; a partial last chunk is fine.
  std::vector<double> part(40);
  ASSERT_TRUE(DecodeElements(ValueType::kQ8_0, q, 96, 32, std::span<double>(part)).ok());
  for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], double(whole[32 + i])) << i;
  // Misaligned start, range past the end, wrong byte length.
  Status s = DecodeElements(ValueType::kQ8_0, q, 96, 5, std::span<double>(part.data(), 3));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("block boundary"));
  EXPECT_THAT(DecodeElements(ValueType::kQ8_0, q, 96, 64, std::span<double>(part)).message(),
              HasSubstr("past the end"));
  EXPECT_THAT(DecodeElements(ValueType::kQ8_0, ByteSpan(q).first(100), 96, 0,
                             std::span<double>(part)).message(),
              HasSubstr("needs 102 bytes, got 100"));
  EXPECT_EQ(DecodeElements(ValueType::kF32, ByteSpan(q).first(7), 2, 0,
                           std::span<double>(part.data(), 2)).code(),
            Code::kInvalidArgument);
}

TEST(Decode, VisitorChunksInOrderWithBoundedBuffer) {
  const size_t n = 100'000;
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = F32ToF16(float(i % 1000) * 0.5f - 100.0f);
  uint64_t next = 0;
  size_t calls = 0, largest = 0;
  Status s = VisitAsFloat(
      ValueType::kF16, Raw(h), n, 0, n,
      [&](uint64_t first, std::span<const float> v) {
        EXPECT_EQ(first, next);
        for (size_t i = 0; i < v.size(); ++i) {
          if (v[i] != F16ToF32(h[first + i])) return Internal("value mismatch");
        }
        next += v.size();
        largest = std::max(largest, v.size());
        ++calls;
        return Status::Ok();
      },
      1000);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(next, n);
  EXPECT_EQ(largest, 992u);  // 1000 rounded down to a multiple of 32
  EXPECT_EQ(calls, (n + 991) / 992);

  // A sub-range, double values, and a visitor error that stops the visit.
  uint64_t seen = 0;
  s = VisitAsDouble(ValueType::kF16, Raw(h), n, 64, 200,
                    [&](uint64_t first, std::span<const double> v) {
                      EXPECT_EQ(first, 64u + seen);
                      seen += v.size();
                      return seen >= 64 ? Unavailable("stop") : Status::Ok();
                    },
                    32);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(seen, 64u);
  EXPECT_EQ(VisitAsDouble(ValueType::kF16, Raw(h), n, 10, 5,
                          [](uint64_t, std::span<const double>) { return Status::Ok(); })
                .code(),
            Code::kInvalidArgument);
  // Q8_0 visiting must start on a block boundary.
  std::vector<uint8_t> q(34, 0);
  EXPECT_EQ(VisitAsFloat(ValueType::kQ8_0, q, 32, 1, 32,
                         [](uint64_t, std::span<const float>) { return Status::Ok(); })
                .code(),
            Code::kInvalidArgument);
}

TEST(Decode, DecodeToFloat) {
  auto r = DecodeToFloat(ValueType::kBF16, Raw(std::vector<uint16_t>{0x4000, 0xC040}), 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<float>{2.0f, -3.0f}));
  EXPECT_EQ(DecodeToFloat(ValueType::kU8, Raw(std::vector<uint8_t>{1, 2, 3}), 3, 2)
                .status()
                .code(),
            Code::kTooLarge);
}

}  // namespace
}  // namespace blz::formats
