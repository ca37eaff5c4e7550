#include "core/status.h"

#include <gtest/gtest.h>

namespace blz {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument("odd: " + std::to_string(v));
  return v / 2;
}

Result<int> Quarter(int v) {
  BLZ_ASSIGN_OR_RETURN(int h, Half(v));
  return Half(h);
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Corruption("tensor 'w': bad offset");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_EQ(s.ToString(), "corruption: tensor 'w': bad offset");
  EXPECT_EQ(s.WithContext("a.safetensors").message(), "a.safetensors: tensor 'w': bad offset");
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(Quarter(8).value(), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "odd: 3");
}

TEST(StatusTest, ResultFromOkStatusIsInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

}  // namespace
}  // namespace blz
