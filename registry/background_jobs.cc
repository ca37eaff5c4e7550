#include "registry/background_jobs.h"

#include <algorithm>
#include <exception>
#include <utility>

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

}  // namespace blz::registry
