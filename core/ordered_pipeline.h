// An ordered work pipeline (patch encode/decode, export): chunk i is produced (encoded or decoded)
// on a pool of worker threads, and consumed (written, hashed) on the calling thread strictly in
// index order. At most `kWindowPerThread x threads` produced results wait for consumption
// (kWindowPerThread = 4: with 2, the consumer's SHA-256 and writes, on a core shared with the
// workers, stalled them often enough that apply's 2-thread speed-up fell to 1.59-1.71x, against
// 1.75-1.96x with 4, measured alternately on the 2.1 GB pair), so memory stays
// bounded by a multiple of (chunk size x threads) whatever the number of chunks. SerialStage
// adds a second in-order consumer on a thread of its own. Internal to blz.
#ifndef BLZ_CORE_ORDERED_PIPELINE_H_
#define BLZ_CORE_ORDERED_PIPELINE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "core/status.h"

namespace blz {

inline constexpr size_t kWindowPerThread = 4;

// The number of worker threads for a `threads` option: 0 means one per core.
inline unsigned ResolveThreads(int threads) {
  if (threads > 0) return unsigned(threads);
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

namespace internal {

// f(), with an exception escaping it (std::bad_alloc, say) as kInternal. R: Status or Result.
template <typename R, typename F>
R CatchAsInternal(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Internal("out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string("unexpected exception: ") + e.what());
  }
}

}  // namespace internal

// Runs produce(i) for every i in [0, n) on up to `threads` threads, and consume(i, result) on
// the calling thread for i = 0, 1, ..., n-1 in that order. Returns the first error in index
// order (an error from produce(i) is returned when i's turn to be consumed comes, so the result
// does not depend on thread timing), or the first error from consume; once there is an error
// no new work starts. All threads have finished when this returns. `produce` must be
// thread-safe; exceptions escaping it (std::bad_alloc) become kInternal.
template <typename T>
Status RunOrdered(size_t n, unsigned threads, const std::function<Result<T>(size_t)>& produce,
                  const std::function<Status(size_t, T&)>& consume) {
  auto guarded = [&produce](size_t i) {
    return internal::CatchAsInternal<Result<T>>([&] { return produce(i); });
  };
  auto guarded_consume = [&consume](size_t i, T& v) {
    return internal::CatchAsInternal<Status>([&] { return consume(i, v); });
  };
  if (threads > n) threads = unsigned(n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) {
      Result<T> r = guarded(i);
      if (!r.ok()) return r.status();
      BLZ_RETURN_IF_ERROR(guarded_consume(i, r.value()));
    }
    return Status::Ok();
  }

  const size_t window = kWindowPerThread * size_t(threads);
  std::mutex mu;
  std::condition_variable cv;
  size_t next_take = 0;     // the next index a worker will produce
  size_t next_consume = 0;  // the next index the caller will consume
  bool stop = false;        // set on a consume error and at the end
  bool failed = false;      // a produce() failed: start no new work
  std::vector<std::optional<Result<T>>> slots(window);

  auto worker = [&]() {
    for (;;) {
      size_t i;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return stop || failed || next_take >= n || next_take < next_consume + window;
        });
        if (stop || failed || next_take >= n) return;
        i = next_take++;
      }
      Result<T> r = guarded(i);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!r.ok()) failed = true;
        slots[i % window].emplace(std::move(r));
      }
      cv.notify_all();
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // run with the threads we have
    }
  }
  Status result;
  if (pool.empty()) {
    result = Internal("cannot start worker threads");
  } else {
    for (size_t i = 0; i < n; ++i) {
      std::optional<Result<T>> got;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return slots[i % window].has_value(); });
        got = std::move(slots[i % window]);
        slots[i % window].reset();
      }
      Status s = got->ok() ? guarded_consume(i, got->value()) : got->status();
      got.reset();
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) stop = true;
        next_consume = i + 1;
      }
      cv.notify_all();
      if (!s.ok()) {
        result = s;
        break;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (std::thread& t : pool) t.join();
  return result;
}

// A second serial consumer on a thread of its own: work(item) runs for every pushed item, in
// push order, with at most `capacity` items waiting, then release(item) (whatever work did).
// After RunOrdered's consumer, it lets two serial parts of one pipeline overlap instead of
// adding up (patch apply: the archive's SHA-256 and write on the calling thread, the model
// files' writes and hashes here). After the first error of `work` (or Cancel), later items
// are only released, and Push returns that error. Finish waits for every pushed item and
// returns the first error of `work`; the destructor cancels and waits. If no thread can be
// started, Push runs work and release itself. Push, Cancel and Finish: from one thread;
// `work` and `release` run on the stage's thread and must not touch, unsynchronized, what the
// pushing thread uses.
template <typename T>
class SerialStage {
 public:
  SerialStage(size_t capacity, std::function<Status(T&)> work, std::function<void(T&)> release)
      : capacity_(capacity == 0 ? 1 : capacity),
        work_(std::move(work)),
        release_(std::move(release)) {
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::system_error&) {
      inline_ = true;
    }
  }
  ~SerialStage() {
    Cancel();
    (void)Finish();
  }
  SerialStage(const SerialStage&) = delete;
  SerialStage& operator=(const SerialStage&) = delete;

  Status Push(T item) {
    if (inline_) {
      if (error_.ok() && !cancelled_) error_ = Guarded(item);
      release_(item);
      return !error_.ok() || !cancelled_ ? error_ : Internal("the stage was cancelled");
    }
    Status failed;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return queue_.size() < capacity_ || !error_.ok() || cancelled_; });
      if (error_.ok() && !cancelled_) {
        queue_.push_back(std::move(item));
        cv_.notify_all();
        return Status::Ok();
      }
      failed = error_.ok() ? Internal("the stage was cancelled") : error_;
    }
    release_(item);
    return failed;
  }

  // Later items are only released (an error elsewhere: their work is not wanted); Push then
  // refuses new ones. Finish still returns only an error of `work`.
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

  Status Finish() {
    if (!inline_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        closed_ = true;
      }
      cv_.notify_all();
      if (thread_.joinable()) thread_.join();
    }
    return error_;  // the stage's thread has ended
  }

 private:
  Status Guarded(T& item) {
    return internal::CatchAsInternal<Status>([&] { return work_(item); });
  }

  void Run() {
    for (;;) {
      std::optional<T> item;
      bool failed = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
        if (queue_.empty()) return;
        item.emplace(std::move(queue_.front()));
        queue_.pop_front();
        failed = !error_.ok() || cancelled_;
      }
      cv_.notify_all();  // room for Push
      Status s = failed ? Status::Ok() : Guarded(*item);
      release_(*item);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.ok()) error_ = s;
        cv_.notify_all();
      }
    }
  }

  const size_t capacity_;
  std::function<Status(T&)> work_;
  std::function<void(T&)> release_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> queue_;
  bool closed_ = false;
  bool cancelled_ = false;
  bool inline_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace blz

#endif  // BLZ_CORE_ORDERED_PIPELINE_H_
