#include "client/retry.h"

#include "client/http_client.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

namespace blz::client {
namespace {

int MonthIndex(std::string_view m) {
  static constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (int i = 0; i < 12; ++i) {
    if (kMonths[i] == m) return i;
  }
  return -1;
}

bool ParseDigits(std::string_view s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  int n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  *out = n;
  return true;
}

}  // namespace

std::string FormatRetryEvent(const RetryEvent& event) {
  char delay[32];
  std::snprintf(delay, sizeof delay, "%.1f s", double(event.delay.count()) / 1000.0);
  return "retry " + std::to_string(event.retry) + "/" + std::to_string(event.max_retries) +
         " after " + delay + (event.from_retry_after ? " (Retry-After)" : "") + ": " +
         event.reason;
}

std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, int retry, double unit_random) {
  const int64_t base = std::max<int64_t>(0, policy.base_delay.count());
  const int64_t cap = std::max<int64_t>(0, policy.max_delay.count());
  int64_t d = base;
  for (int i = 1; i < retry && d < cap; ++i) d *= 2;
  d = std::min(d, cap);
  unit_random = std::clamp(unit_random, 0.0, 1.0);
  const int64_t half = d / 2;
  return std::chrono::milliseconds(half + int64_t(double(d - half) * unit_random));
}

double RandomUnit() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

std::optional<std::chrono::milliseconds> ParseRetryAfter(
    std::string_view value, std::chrono::system_clock::time_point now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (value[0] >= '0' && value[0] <= '9') {
    int seconds = 0;
    if (!ParseDigits(value, &seconds)) return std::nullopt;
    return std::chrono::milliseconds(int64_t(seconds) * 1000);
  }
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" (exactly 29 characters).
  if (value.size() != 29 || value[3] != ',' || value[4] != ' ' || value[7] != ' ' ||
      value[11] != ' ' || value[16] != ' ' || value[19] != ':' || value[22] != ':' ||
      value.substr(25) != " GMT") {
    return std::nullopt;
  }
  std::tm tm{};
  int day = 0, year = 0, hour = 0, minute = 0, second = 0;
  const int month = MonthIndex(value.substr(8, 3));
  if (month < 0 || !ParseDigits(value.substr(5, 2), &day) ||
      !ParseDigits(value.substr(12, 4), &year) || !ParseDigits(value.substr(17, 2), &hour) ||
      !ParseDigits(value.substr(20, 2), &minute) || !ParseDigits(value.substr(23, 2), &second) ||
      day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  tm.tm_mday = day;
  tm.tm_mon = month;
  tm.tm_year = year - 1900;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t when = ::timegm(&tm);
  if (when == time_t(-1)) return std::nullopt;
  // In whole seconds: a date centuries ahead ("Wed, 21 Oct 4030 ...") overflows the clock's
  // nanoseconds (system_clock::from_time_t), so it is compared as time_t and capped at a year.
  const int64_t ahead = int64_t(when) - int64_t(std::chrono::system_clock::to_time_t(now));
  if (ahead <= 0) return std::chrono::milliseconds(0);
  constexpr int64_t kMaxAheadSeconds = 365LL * 86400;
  return std::chrono::milliseconds(std::min(ahead, kMaxAheadSeconds) * 1000);
}

void SleepFor(std::chrono::milliseconds delay) { std::this_thread::sleep_for(delay); }

bool IsRetryableFailure(const Status& s) {
  if (s.code() != Code::kUnavailable && s.code() != Code::kIOError) return false;
  return s.message().find(kCertificateVerifyFailed) == std::string::npos;
}

bool IsRetryableHttpStatus(int status) {
  if (status == 408 || status == 429) return true;
  return status >= 500 && status <= 599 && status != 501 && status != 505;
}

std::chrono::milliseconds RetryDelay(const RetryPolicy& policy, int retry,
                                     const std::optional<std::chrono::milliseconds>& retry_after,
                                     bool* from_retry_after) {
  if (retry_after.has_value()) {
    *from_retry_after = true;
    return std::min(*retry_after, policy.max_delay);
  }
  *from_retry_after = false;
  return BackoffDelay(policy, retry, RandomUnit());
}

}  // namespace blz::client
