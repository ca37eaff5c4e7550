// Per-client rate limits (docs/registry-api.md, "Quotas and limits"): a token bucket per key.
//
// Each key starts with `burst` tokens; a Take spends one; tokens come back at `per_minute`
// per minute, up to `burst`. The registry keys callers with ClientKey (token name, else the
// client's address) and charges new derived computations (patches, value diffs, statistics,
// lossy deltas that are not cached yet): an empty bucket answers 429 TOOMANYREQUESTS with
// Retry-After.
//
// Memory is bounded: when more than kMaxKeys keys are held, the full buckets (clients idle long
// enough to be back at `burst`) are forgotten, and if that is not enough, the oldest ones.
// Thread safety: every method may be called from any thread.
#ifndef BLZ_REGISTRY_RATE_LIMITER_H_
#define BLZ_REGISTRY_RATE_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "registry/auth.h"
#include "registry/http_message.h"

namespace blz::registry {

class RateLimiter {
 public:
  static constexpr size_t kMaxKeys = 10000;

  // `per_minute` <= 0 or `burst` == 0: no limit (Take always succeeds).
  RateLimiter(double per_minute, uint64_t burst) : per_minute_(per_minute), burst_(burst) {}

  bool unlimited() const { return per_minute_ <= 0 || burst_ == 0; }

  // Spends one token of `key` at `now`: 0 when one was there, else the whole seconds (>= 1)
  // until one will be (nothing spent).
  uint64_t Take(const std::string& key, std::chrono::steady_clock::time_point now);

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point updated;
  };
  // REQUIRES mu_ held: tops `b` up to `now`.
  void Refill(Bucket* b, std::chrono::steady_clock::time_point now) const;

  double per_minute_;
  uint64_t burst_;
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
};

// The key rate limits charge for a caller: "token:<API token name>" for credentials, else
// "addr:<address>" (the host part of RequestHead::client_address, without the port).
std::string ClientKey(const Principal& who, const RequestHead& head);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_RATE_LIMITER_H_
