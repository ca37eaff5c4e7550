#include "client/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace blz::client {
namespace {

TEST(ProgressTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(12ull << 20), "12.0 MiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.00 GiB");
}

TEST(ProgressTest, DisabledMeterPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressMeter meter("pulling", /*enabled=*/false, f);
    meter.Callback()(10, 100);
    meter.Finish();
  }
  EXPECT_EQ(std::ftell(f), 0L);
  std::fclose(f);
}

}  // namespace
}  // namespace blz::client
