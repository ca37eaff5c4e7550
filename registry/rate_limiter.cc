#include "registry/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

namespace blz::registry {

void RateLimiter::Refill(Bucket* b, std::chrono::steady_clock::time_point now) const {
  const double minutes = std::chrono::duration<double, std::ratio<60>>(now - b->updated).count();
  if (minutes > 0) {
    b->tokens = std::min(double(burst_), b->tokens + minutes * per_minute_);
    b->updated = now;
  }
}

uint64_t RateLimiter::Take(const std::string& key, std::chrono::steady_clock::time_point now) {
  if (unlimited()) return 0;
  std::lock_guard lock(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxKeys) {
      // Forget the clients that are back at a full bucket (indistinguishable from new ones),
      // then, if still too many, the least recently charged half.
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        Refill(&b->second, now);
        b = b->second.tokens >= double(burst_) ? buckets_.erase(b) : std::next(b);
      }
      if (buckets_.size() >= kMaxKeys) {
        std::vector<std::chrono::steady_clock::time_point> times;
        times.reserve(buckets_.size());
        for (const auto& [k, b] : buckets_) times.push_back(b.updated);
        std::nth_element(times.begin(), times.begin() + ptrdiff_t(times.size() / 2), times.end());
        const auto median = times[times.size() / 2];
        for (auto b = buckets_.begin(); b != buckets_.end();) {
          b = b->second.updated <= median ? buckets_.erase(b) : std::next(b);
        }
      }
    }
    it = buckets_.emplace(key, Bucket{double(burst_), now}).first;
  }
  Bucket& b = it->second;
  Refill(&b, now);
  constexpr double kEpsilon = 1e-9;  // refills add up in floating point
  if (b.tokens >= 1 - kEpsilon) {
    b.tokens = std::max(0.0, b.tokens - 1);
    return 0;
  }
  const double seconds = (1 - b.tokens) * 60 / per_minute_;
  return std::max<uint64_t>(1, uint64_t(std::ceil(seconds - kEpsilon)));
}

std::string ClientKey(const Principal& who, const RequestHead& head) {
  if (!who.anonymous()) return "token:" + who.token_name;
  std::string_view a = head.client_address;
  if (!a.empty() && a.front() == '[') {  // "[v6]:port"
    const size_t close = a.find(']');
    a = a.substr(1, close == std::string_view::npos ? a.size() - 1 : close - 1);
  } else if (std::count(a.begin(), a.end(), ':') == 1) {  // "v4:port"
    a = a.substr(0, a.find(':'));
  }
  return "addr:" + std::string(a);
}

}  // namespace blz::registry
