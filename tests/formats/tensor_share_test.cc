// formats/tensor_share.h: the tensor bytes of a target that a base holds as a patch would find
// them (same name and type, or identical bytes under any name), from the headers alone.
#include "formats/tensor_share.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace blz::formats {
namespace {

ArchiveTensor Tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                     uint64_t length, char content) {
  ArchiveTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.length = length;
  t.sha256 = std::string(64, content);
  return t;
}

TEST(TensorShareTest, CountsSameNameAndTypeAndIdenticalBytesUnderAnyName) {
  ArchiveHeader base, target;
  base.tensors = {Tensor("embed", DType::kF32, {100, 4}, 1600, 'a'),
                  Tensor("layer.w", DType::kF32, {4, 4}, 64, 'b'),
                  Tensor("head", DType::kF16, {8}, 16, 'c')};
  target.tensors = {
      Tensor("lm.embed", DType::kF32, {100, 4}, 1600, 'a'),  // identical, renamed
      Tensor("layer.w", DType::kF32, {4, 4}, 64, 'x'),       // same name and type, changed
      Tensor("head", DType::kF32, {8}, 32, 'c'),             // same name, another dtype
      Tensor("flat", DType::kF32, {400}, 1600, 'a'),         // embed's bytes, another shape
      Tensor("new", DType::kF32, {2}, 8, 'n')};
  const TensorShare share = ShareOf(target, base);
  EXPECT_EQ(share.target_bytes, 1600u + 64 + 32 + 1600 + 8);
  EXPECT_EQ(share.shared_bytes, 1600u + 64);
  EXPECT_EQ(share.identical_bytes, 1600u);
  EXPECT_DOUBLE_EQ(share.fraction(), double(1664) / double(3304));
  EXPECT_EQ(ShareOf(ArchiveHeader{}, base).fraction(), 0.0);
  EXPECT_EQ(ShareOf(target, ArchiveHeader{}).shared_bytes, 0u);
}

}  // namespace
}  // namespace blz::formats
