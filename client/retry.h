// Retries of network transfers: exponential backoff with jitter, Retry-After, and the
// classification of what is worth retrying.
//
// What is retried (IsRetryableHttpStatus / the transfer code's own checks):
//   - transport failures: cannot connect, connection reset or closed mid-body, a read or write
//     that made no progress for `stall_timeout` (HttpClient's io_timeout);
//   - HTTP 408, 429 and 5xx except 501 (Not Implemented) and 505;
// What is not: other 4xx (401, 403, 404, 416 ...), digest mismatches, local disk errors.
//
// Attempts are counted per transfer (per part for parallel downloads) and reset by progress:
// an attempt that moved at least one byte before failing starts the count again, so a long
// download through a connection that drops every few hundred MiB completes, while a peer that
// never answers fails after `max_attempts` attempts.
//
// Delay before retry n (1-based): d = min(max_delay, base_delay * 2^(n-1)), then "equal
// jitter": a uniformly random value in [d/2, d]. A Retry-After header (RFC 9110 10.2.3:
// delay-seconds or an HTTP-date) replaces the computed delay, capped at max_delay.
#ifndef BLZ_CLIENT_RETRY_H_
#define BLZ_CLIENT_RETRY_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace blz::client {

struct RetryPolicy {
  int max_attempts = 6;  // attempts in a row without progress, the first included (>= 1)
  std::chrono::milliseconds base_delay{500};
  std::chrono::milliseconds max_delay{30'000};
  // No byte moved for this long: the attempt fails (and is retried). Applied as HttpClient's
  // io_timeout by the transfer code.
  std::chrono::milliseconds stall_timeout{60'000};
};

// One retry about to happen, for logs ("retry 2/6 after 1.3 s: <reason>").
struct RetryEvent {
  int retry = 0;         // 1 for the first retry
  int max_retries = 0;   // max_attempts - 1
  std::chrono::milliseconds delay{0};
  bool from_retry_after = false;  // the delay is the server's Retry-After
  std::string reason;    // what failed, e.g. "connection reset at byte 209715200 of blob ..."
};
using RetryLogFn = std::function<void(const RetryEvent&)>;

// "retry 2/6 after 1.3 s: <reason>" (with "(Retry-After)" when the server chose the delay).
std::string FormatRetryEvent(const RetryEvent& event);

// The backoff before retry `retry` (1-based). `unit_random` in [0, 1] picks the jitter (tests
// pass fixed values; RandomUnit() otherwise). Always within [d/2, d] as described above.
std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, int retry, double unit_random);
double RandomUnit();
void SleepFor(std::chrono::milliseconds delay);

// Parses a Retry-After value: delay-seconds ("120") or an IMF-fixdate HTTP-date
// ("Wed, 21 Oct 2015 07:28:00 GMT", relative to `now`; a date in the past gives 0).
// nullopt when empty or malformed.
std::optional<std::chrono::milliseconds> ParseRetryAfter(
    std::string_view value, std::chrono::system_clock::time_point now);

// Is `s` a failure worth another attempt: kUnavailable or kIOError, except an untrusted TLS
// certificate (client/http_client.h kCertificateVerifyFailed), which a retry cannot change.
bool IsRetryableFailure(const Status& s);

// 408, 429, and 5xx other than 501 and 505.
bool IsRetryableHttpStatus(int status);

// The delay to wait before retry `retry`: Retry-After (capped at max_delay) when given, else
// BackoffDelay. Sets *from_retry_after.
std::chrono::milliseconds RetryDelay(const RetryPolicy& policy, int retry,
                                     const std::optional<std::chrono::milliseconds>& retry_after,
                                     bool* from_retry_after);

// Retries a small idempotent request (a manifest GET or PUT, a HEAD, a monolithic upload of a
// small blob) while it fails with kUnavailable or kIOError (IsRetryableFailure): transport failures and the 5xx /
// 429 answers StatusFromResponse maps to kUnavailable. Backoff as above (no Retry-After: the
// answer is not visible here); each retry goes to `log` with `what` as the reason's prefix.
// `fn` returns Status or Result<T>; the last outcome is returned.
inline Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

template <typename Fn>
auto RetryTransient(const RetryPolicy& policy, const RetryLogFn& log, std::string_view what,
                    Fn&& fn) -> decltype(fn()) {
  const int max_attempts = policy.max_attempts < 1 ? 1 : policy.max_attempts;
  for (int attempt = 1;; ++attempt) {
    auto outcome = fn();
    const Status s = StatusOf(outcome);
    if (s.ok() || !IsRetryableFailure(s) || attempt >= max_attempts) return outcome;
    RetryEvent event;
    event.retry = attempt;
    event.max_retries = max_attempts - 1;
    event.delay = BackoffDelay(policy, attempt, RandomUnit());
    event.reason = std::string(what) + ": " + s.message();
    if (log) log(event);
    SleepFor(event.delay);
  }
}

}  // namespace blz::client

#endif  // BLZ_CLIENT_RETRY_H_
