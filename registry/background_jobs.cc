#include "registry/background_jobs.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <exception>
#include <utility>

#include "core/file_util.h"
#include "registry/errors.h"

namespace blz::registry {

namespace {
thread_local JobCounters* current_counters = nullptr;
}  // namespace

JobCounters* CurrentJobCounters() { return current_counters; }

BackgroundJobs::BackgroundJobs(unsigned workers) {
  if (workers == 0) workers = 1;
  for (unsigned i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

BackgroundJobs::~BackgroundJobs() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void BackgroundJobs::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      job->running = true;
    }
    Response response;
    current_counters = &job->counters;
    try {
      response = job->work(&job->counters);
    } catch (const std::exception& e) {
      response = ErrorResponse(OciError::kUnknown, std::string("internal error: ") + e.what());
    }
    current_counters = nullptr;
    {
      std::lock_guard lock(mu_);
      job->response = std::move(response);
      job->running = false;
      job->finished = true;
      job->finished_at = std::chrono::steady_clock::now();
      job->work = nullptr;  // releases what the work captured
    }
    done_cv_.notify_all();
  }
}

JobProgress BackgroundJobs::ProgressLocked(const Job& job) const {
  JobProgress p;
  p.phase = job.running ? job.phase : "queued";
  const uint64_t total = job.counters.total.load();
  if (total > 0) {
    p.total = total;
    p.done = std::min(job.counters.done.load(), total);
  }
  p.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - job.started)
                     .count();
  return p;
}

void BackgroundJobs::DropExpiredLocked() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->finished && now - it->second->finished_at > kFinishedJobTtl) {
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

BackgroundJobs::Outcome BackgroundJobs::Run(const std::string& key, const std::string& phase,
                                            Work work, std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  DropExpiredLocked();
  std::shared_ptr<Job>& slot = jobs_[key];
  const bool created = !slot;
  if (created) {
    slot = std::make_shared<Job>();
    slot->key = key;
    slot->phase = phase;
    slot->work = std::move(work);
    slot->started = std::chrono::steady_clock::now();
    if (!stopping_) queue_.push_back(slot);
    work_cv_.notify_one();
  }
  std::shared_ptr<Job> job = slot;
  if (created && wait.count() > 0) {
    done_cv_.wait_for(lock, wait, [&] { return job->finished || stopping_; });
  }
  Outcome out;
  if (job->finished) {
    out.finished = true;
    out.response = std::move(job->response);
    auto it = jobs_.find(key);
    if (it != jobs_.end() && it->second == job) jobs_.erase(it);
    return out;
  }
  out.progress = ProgressLocked(*job);
  return out;
}

size_t BackgroundJobs::size() const {
  std::lock_guard lock(mu_);
  return jobs_.size();
}


// ---- SharedJobs ----

namespace {
int64_t UnixNow() { return int64_t(std::time(nullptr)); }
}  // namespace

SharedJobs::SharedJobs(store::MetadataDb* db, LeaseOptions options)
    : db_(db), options_(options) {
  if (options_.lease.count() < 1) options_.lease = std::chrono::seconds(1);
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  owner_prefix_ = std::string(host[0] ? host : "host") + "/" + std::to_string(::getpid()) + "/" +
                  RandomHex(4);
}

std::string SharedJobs::NextOwner() {
  return owner_prefix_ + "#" + std::to_string(next_.fetch_add(1) + 1);
}

SharedJobs::Hold::Hold(SharedJobs* jobs, std::string key, std::string owner)
    : jobs_(jobs), key_(std::move(key)), owner_(std::move(owner)) {
  renewer_ = std::thread([this] {
    const auto every = std::chrono::duration_cast<std::chrono::milliseconds>(
                           jobs_->options_.lease) / 3;
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, every, [&] { return stopping_; })) {
      // Best effort: a failed renewal (the lease was lost) shows in FinishJob's answer.
      (void)jobs_->db_->RenewJobLease(key_, owner_, UnixNow(), jobs_->options_.lease.count());
    }
  });
}

void SharedJobs::Hold::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  renewer_.join();
}

void SharedJobs::Hold::Finish(std::string_view result) {
  Stop();
  if (recorded_) return;
  recorded_ = true;
  // kUnavailable: the lease was lost to a takeover; the result (already recorded where it
  // belongs, e.g. the patches table) stands, the row is the new holder's.
  (void)jobs_->db_->FinishJob(key_, owner_, result, UnixNow());
}

void SharedJobs::Hold::Fail(std::string_view error) {
  Stop();
  if (recorded_) return;
  recorded_ = true;
  (void)jobs_->db_->FailJob(key_, owner_, error, UnixNow());
}

SharedJobs::Hold::~Hold() { Fail("abandoned"); }

Result<std::unique_ptr<SharedJobs::Hold>> SharedJobs::TryHold(const std::string& key) {
  const std::string owner = NextOwner();
  BLZ_ASSIGN_OR_RETURN(store::JobAcquisition acq,
                       db_->TryAcquireJob(key, owner, UnixNow(), options_.lease.count(),
                                          /*redo_done=*/true));
  if (acq.outcome != store::JobAcquire::kAcquired) {
    return Unavailable("'" + key + "' is running on " + acq.job.owner +
                       " (its lease expires at Unix time " +
                       std::to_string(acq.job.lease_expires) + " unless renewed)");
  }
  return std::unique_ptr<Hold>(new Hold(this, key, owner));
}

Status SharedJobs::Run(const std::string& key, const std::function<Result<bool>()>& check,
                       const std::function<Status()>& work, bool* ran) {
  *ran = false;
  bool saw_done = false;  // the last look found the job done
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool available, check());
    if (available) return Status::Ok();
    const std::string owner = NextOwner();
    // Done, yet check() misses its result twice in a row: the result is gone, redo it.
    BLZ_ASSIGN_OR_RETURN(store::JobAcquisition acq,
                         db_->TryAcquireJob(key, owner, UnixNow(), options_.lease.count(),
                                            /*redo_done=*/saw_done));
    saw_done = acq.outcome == store::JobAcquire::kDone;
    if (acq.outcome == store::JobAcquire::kAcquired) {
      Hold hold(this, key, owner);
      works_run_.fetch_add(1);
      *ran = true;
      Status s;
      try {
        s = work();
      } catch (const std::exception& e) {
        s = Internal(std::string("job '") + key + "': " + e.what());
      }
      if (s.ok()) {
        hold.Finish("");
      } else {
        hold.Fail(s.ToString());
      }
      return s;
    }
    if (acq.outcome == store::JobAcquire::kHeld) {
      waits_.fetch_add(1);
      std::this_thread::sleep_for(options_.poll);
    }
  }
}

}  // namespace blz::registry
