// FormatRfc3339Utc and FormatRfc3339UtcSeconds (core/time_format.h).
#include "core/time_format.h"

#include <gtest/gtest.h>

namespace blz {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

TEST(TimeFormatTest, Rfc3339UtcWithMilliseconds) {
  EXPECT_EQ(FormatRfc3339Utc(system_clock::time_point(milliseconds(1795516130123LL))),
            "2026-11-24T10:28:50.123Z");
  EXPECT_EQ(FormatRfc3339Utc(system_clock::time_point()), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339Utc(system_clock::time_point(milliseconds(-1))),
            "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatRfc3339Utc(system_clock::time_point(milliseconds(951782400007LL))),
            "2000-02-29T00:00:00.007Z");  // a leap day
}

TEST(TimeFormatTest, Rfc3339UtcInSeconds) {
  EXPECT_EQ(FormatRfc3339UtcSeconds(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339UtcSeconds(1795516130), "2026-11-24T10:28:50Z");
  EXPECT_EQ(FormatRfc3339UtcSeconds(951782399), "2000-02-28T23:59:59Z");
}

}  // namespace
}  // namespace blz
