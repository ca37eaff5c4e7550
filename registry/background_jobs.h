// Background computations for the registry's `?async=1` requests (docs/registry-api.md,
// "Asynchronous requests"): a request that would block on a long computation (a patch, a value
// diff, tensor statistics) starts it here, waits a little, and answers 202 with its progress
// when it is not done yet; later polls of the same URL find the job by its key.
//
// Semantics:
//  - One job per key: Run() with the key of a queued or running job does not start another; it
//    reports that job's progress.
//  - A finished job's response (success or error) is handed to the next Run() with its key and
//    then forgotten, so a later request (e.g. a retry after an error) computes again. Finished
//    jobs nobody asks for are dropped after kFinishedJobTtl.
//  - Jobs run on a fixed number of worker threads (extra jobs wait in a queue, phase "queued").
//  - The destructor stops the workers: running jobs finish (they cannot be interrupted), queued
//    ones are dropped, and the threads are joined. Whatever a job uses must outlive this object.
//
// Thread safety: every method may be called from any thread.
#ifndef BLZ_REGISTRY_BACKGROUND_JOBS_H_
#define BLZ_REGISTRY_BACKGROUND_JOBS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/progress_fn.h"
#include "core/status.h"
#include "registry/http_message.h"
#include "store/metadata_db.h"

namespace blz::registry {

inline constexpr std::chrono::minutes kFinishedJobTtl{10};

// What a job may report while it runs: units done of total (elements, bytes...). total == 0 =
// unknown (reported as null).
using JobCounters = ProgressCounters;

// The counters of the job running on the calling thread (what Work receives), nullptr outside
// a job: code deep in a job passes it to the operation it runs (e.g. StatsOptions::counters).
JobCounters* CurrentJobCounters();

// A job's state as a poll sees it.
struct JobProgress {
  std::string phase;  // "queued", or the phase given to Run
  std::optional<uint64_t> done;
  std::optional<uint64_t> total;
  int64_t elapsed_ms = 0;  // since the job was started
};

class BackgroundJobs {
 public:
  using Work = std::function<Response(JobCounters* counters)>;

  explicit BackgroundJobs(unsigned workers);
  ~BackgroundJobs();
  BackgroundJobs(const BackgroundJobs&) = delete;
  BackgroundJobs& operator=(const BackgroundJobs&) = delete;

  struct Outcome {
    bool finished = false;
    JobProgress progress;  // !finished
    Response response;     // finished: what the job's work returned
  };

  // The job for `key`: when one finished, its response (and the job is forgotten); when one is
  // queued or running, its progress (at once: polls never wait, so they hold no request thread);
  // else `work` is queued under `key` (reporting `phase` while it runs) and this call waits up
  // to `wait` for it to finish. `work` should not throw (an exception becomes a 500 response).
  Outcome Run(const std::string& key, const std::string& phase, Work work,
              std::chrono::milliseconds wait);

  // Jobs known (queued, running or finished and not yet collected); for tests.
  size_t size() const;

 private:
  struct Job {
    std::string key;
    std::string phase;
    Work work;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point finished_at;
    bool running = false;
    bool finished = false;
    Response response;
    JobCounters counters;
  };

  void WorkerLoop();
  // REQUIRES mu_ held.
  JobProgress ProgressLocked(const Job& job) const;
  void DropExpiredLocked();

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stopping
  std::condition_variable done_cv_;  // a job finished
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};


// ---- Cluster-wide exclusion (issue 25: replicas sharing one metadata DB) ----
//
// Every `blz serve` replica of one metadata DB computes a derived object (a patch, full patch,
// value diff, statistics, lossy delta) at most once at a time, and runs garbage collection one
// at a time, through the DB's job leases (MetadataDb::TryAcquireJob, table jobs). A process
// keeps its in-process KeyedMutex as the cheap first level: only one thread per process asks
// the DB about a key.
struct LeaseOptions {
  // A lease lasts this long; its holder renews it every third of it from a background thread,
  // so only a holder that died (kill -9, lost host) lets it expire; then another takes over.
  std::chrono::seconds lease{30};
  // How often a process waiting for another's lease looks again (the result, or an expiry).
  std::chrono::milliseconds poll{200};
};

class SharedJobs {
 public:
  // `db` must outlive this object. Owner ids are "<host>/<pid>/<random>#<n>", one per lease.
  SharedJobs(store::MetadataDb* db, LeaseOptions options);

  // Produces the result of `key` exactly once across the replicas:
  //   1. `check()`: true when the result is already available (then nothing runs);
  //   2. else the key's lease is taken (TryAcquireJob) and `work()` runs while it is held
  //      (renewed in the background); the job is then marked done, or failed with work()'s
  //      error (the next caller retries);
  //   3. while another process holds a live lease: every options.poll, check() again (its
  //      result may be there), then try the lease again (it may have failed or expired).
  // A job marked done whose result check() cannot find (removed since) is redone.
  // Returns whether this call ran work() in *ran; errors: work()'s, check()'s, DB errors.
  Status Run(const std::string& key, const std::function<Result<bool>()>& check,
             const std::function<Status()>& work, bool* ran);

  // A lease held for the life of this object and renewed in the background (garbage
  // collection's "gc"). Finish()/Fail() record the outcome; destroyed without either, the
  // job is marked failed ("abandoned").
  class Hold {
   public:
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    void Finish(std::string_view result);
    void Fail(std::string_view error);
    const std::string& owner() const { return owner_; }

   private:
    friend class SharedJobs;
    Hold(SharedJobs* jobs, std::string key, std::string owner);
    void Stop();
    SharedJobs* jobs_;
    std::string key_;
    std::string owner_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool recorded_ = false;
    std::thread renewer_;
  };
  // Takes `key`'s lease without waiting (a done or failed job is taken again). kUnavailable
  // naming the holder and its lease's expiry when another process holds it.
  Result<std::unique_ptr<Hold>> TryHold(const std::string& key);

  // work() calls that ran; looks that found another process's live lease (tests, logs).
  uint64_t works_run() const { return works_run_.load(); }
  uint64_t waits() const { return waits_.load(); }

 private:
  std::string NextOwner();

  store::MetadataDb* db_;
  LeaseOptions options_;
  std::string owner_prefix_;
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> works_run_{0};
  std::atomic<uint64_t> waits_{0};
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_BACKGROUND_JOBS_H_
