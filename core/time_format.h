// Timestamps as text: RFC 3339 in UTC ("Z"), as logs, JSON reports and token answers write
// them.
#ifndef BLZ_CORE_TIME_FORMAT_H_
#define BLZ_CORE_TIME_FORMAT_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace blz {

// "YYYY-MM-DDTHH:MM:SS.mmmZ": UTC, milliseconds truncated (floored, also before 1970).
std::string FormatRfc3339Utc(std::chrono::system_clock::time_point time);

// "YYYY-MM-DDTHH:MM:SSZ": UTC, whole seconds since the Unix epoch.
std::string FormatRfc3339UtcSeconds(int64_t unix_seconds);

}  // namespace blz

#endif  // BLZ_CORE_TIME_FORMAT_H_
