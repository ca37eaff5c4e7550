// Where the registry's request handlers run: two thread pools beside the I/O threads.
//
// Handlers may block for seconds (hashing a finished upload, verifying an archive before its
// manifest is accepted, computing a patch or a value diff). If they shared one pool with cheap
// requests, a few slow requests would occupy every thread and every other client would wait
// (issue 9: two 20k-tensor manifest PUTs held both threads for 30-40 s). So:
//   - the light pool runs cheap handlers (ping, catalog, tags, manifest GETs, HEADs, chunk
//     appends, upload status);
//   - the heavy pool runs the rest (BodyPlan::heavy, decided by Registry::PlanBody), and at most
//     `max_heavy_pending` of them are admitted at once (running plus queued); past that, Post
//     refuses and the session answers 429 TOOMANYREQUESTS with Retry-After, rather than let an
//     unbounded queue grow.
// Thread-safe. Join() waits for posted work to finish; destroying joins too.
#ifndef BLZ_REGISTRY_HANDLER_POOLS_H_
#define BLZ_REGISTRY_HANDLER_POOLS_H_

#include <atomic>
#include <cstddef>
#include <utility>

#include "registry/net.h"

namespace blz::registry {

// Heavy requests admitted beyond the heavy threads before new ones are refused.
inline constexpr size_t kMaxHeavyQueuedPerThread = 16;

class HandlerPools {
 public:
  // light_threads, heavy_threads >= 1; max_heavy_pending >= heavy_threads.
  HandlerPools(size_t light_threads, size_t heavy_threads, size_t max_heavy_pending)
      : light_(light_threads), heavy_(heavy_threads), max_heavy_pending_(max_heavy_pending) {}
  HandlerPools(const HandlerPools&) = delete;
  HandlerPools& operator=(const HandlerPools&) = delete;
  ~HandlerPools() { Join(); }

  // Runs `fn` on the light or the heavy pool. Returns false, without running `fn`, when `heavy`
  // and max_heavy_pending heavy handlers are already running or queued.
  template <class Fn>
  [[nodiscard]] bool Post(bool heavy, Fn&& fn) {
    if (!heavy) {
      net::post(light_, std::forward<Fn>(fn));
      return true;
    }
    if (heavy_pending_.fetch_add(1) >= max_heavy_pending_) {
      heavy_pending_.fetch_sub(1);
      return false;
    }
    net::post(heavy_, [this, fn = std::forward<Fn>(fn)]() mutable {
      struct Release {
        std::atomic<size_t>* n;
        ~Release() { n->fetch_sub(1); }
      } release{&heavy_pending_};
      fn();
    });
    return true;
  }

  // Heavy handlers running or queued now (for tests and metrics).
  size_t heavy_pending() const { return heavy_pending_.load(); }

  // Waits until all posted work is done; later posts are not run.
  void Join() {
    light_.join();
    heavy_.join();
  }

 private:
  net::thread_pool light_;
  net::thread_pool heavy_;
  const size_t max_heavy_pending_;
  std::atomic<size_t> heavy_pending_{0};
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_HANDLER_POOLS_H_
