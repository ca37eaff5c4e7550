// The "exact" strategy: round trips, and CheckExactPayload refusing, before anything of the
// declared size is allocated, every payload that cannot produce the tensor it declares (one
// crafted payload per rejection, each asserting its message).
#include "patcher/lossy/exact.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "patcher/tensor_codec.h"
#include "tests/patcher/lossy/lossy_test_util.h"

namespace blz::lossy {
namespace {

using ::testing::HasSubstr;
using testing::AsPayload;

constexpr uint64_t kElems = 64;
const std::vector<uint64_t> kShape = {kElems};

std::vector<uint8_t> Bytes(uint64_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (uint64_t i = 0; i < n; ++i) b[i] = uint8_t(seed + i * 7 + (i >> 3));
  return b;
}

// 64 F32 elements coded alone (no base).
std::unique_ptr<testing::OwnedPayload> NoBase(const std::vector<uint8_t>& target) {
  auto out = EncodeExact("t", {}, target, "F32", 4, kShape);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return AsPayload(std::move(*out));
}

std::vector<uint8_t>& FieldBytes(testing::OwnedPayload& p, const std::string& field) {
  for (auto& [name, array] : p.out.fields) {
    if (name == field) return array.bytes;
  }
  ADD_FAILURE() << "no field " << field;
  static std::vector<uint8_t> none;
  return none;
}

TEST(ExactTest, RoundTripsWithAndWithoutBase) {
  const std::vector<uint8_t> target = Bytes(kElems * 4, 1);
  auto p = NoBase(target);
  EXPECT_TRUE(CheckExactPayload(p->payload, kShape, target.size(), 0).ok());
  std::vector<uint8_t> out(target.size());
  ASSERT_TRUE(DecodeExact(p->payload, kShape, {}, out).ok());
  EXPECT_EQ(out, target);

  std::vector<uint8_t> base = target;
  base[17] ^= 0x10;
  auto enc = EncodeExact("t", base, target, "F32", 4, kShape);
  ASSERT_TRUE(enc.ok());
  auto q = AsPayload(std::move(*enc));
  EXPECT_TRUE(CheckExactPayload(q->payload, kShape, target.size(), base.size()).ok());
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(DecodeExact(q->payload, kShape, base, out).ok());
  EXPECT_EQ(out, target);
}

// The memory defect of issue 23: a declared size the payload cannot fill is refused by a
// check that allocates nothing of that size (no output buffer exists yet when it runs).
TEST(ExactTest, HugeDeclaredShapeIsRefusedByTheCheck) {
  auto p = NoBase(Bytes(kElems * 4, 2));
  const std::vector<uint64_t> huge = {uint64_t{1} << 40};
  p->meta["shape"] = huge;
  Status s = CheckExactPayload(p->payload, huge, uint64_t{1} << 42, 0);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("tensor 't' (exact): shape [1099511627776] is "
                                     "4398046511104 bytes, 1048576 chunks of 4194304, but the "
                                     "file holds 1 chunks"));
}

TEST(ExactTest, HeaderShapeOtherThanTheTensorsIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 3));
  Status s = CheckExactPayload(p->payload, {}, 4, 0);
  EXPECT_THAT(s.message(), HasSubstr("tensor 't' (exact): the header's \"shape\" [64] is not "
                                     "the tensor's shape []"));
  p->meta["shape"] = std::vector<uint64_t>{};
  s = CheckExactPayload(p->payload, {}, 4, 0);  // agreeing on []: the chunk says 256 bytes
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("tensor 't' (exact): chunk 0: "));
}

TEST(ExactTest, ChunkBytesAboveTheCodecChunkIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 4));
  p->meta["chunk_bytes"] = patcher::kChunkBytes * 2;
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("tensor 't' (exact): chunk_bytes 8388608 is not in 1..4194304"));
}

TEST(ExactTest, BadElemSizeIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 5));
  p->meta["elem_size"] = 3;
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("tensor 't' (exact): elem_size 3 is not 1, 2, 4 or 8"));
}

TEST(ExactTest, WithBaseButNoBaseIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 6));
  p->meta["with_base"] = true;
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("tensor 't' (exact): the base tensor has 0 bytes, the target 256"));
}

TEST(ExactTest, ChunkSizePastThePayloadIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 7));
  std::vector<uint8_t>& sizes = FieldBytes(*p, "sizes");
  const int64_t too_big = 1 << 20;
  std::memcpy(sizes.data(), &too_big, 8);
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("tensor 't' (exact): chunk 0 payload size past the end of the field"));
}

TEST(ExactTest, PayloadBytesAfterTheLastChunkAreRefused) {
  auto out = EncodeExact("t", {}, Bytes(kElems * 4, 8), "F32", 4, kShape);
  ASSERT_TRUE(out.ok());
  for (auto& [name, array] : out->fields) {
    if (name != "payload") continue;
    array.bytes.push_back(0);
    array.shape = {array.bytes.size()};
  }
  auto p = AsPayload(std::move(*out));
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("tensor 't' (exact): payload has bytes after the last chunk"));
}

TEST(ExactTest, UnknownCodecIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 10));
  FieldBytes(*p, "codecs")[0] = 99;
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("tensor 't' (exact): chunk 0: "));
}

TEST(ExactTest, WrongStrategyIsRefused) {
  auto p = NoBase(Bytes(kElems * 4, 11));
  p->meta["strategy"] = "sparse";
  EXPECT_THAT(CheckExactPayload(p->payload, kShape, kElems * 4, 0).message(),
              HasSubstr("\"strategy\" is not \"exact\""));
}

}  // namespace
}  // namespace blz::lossy
