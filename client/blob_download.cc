#include "client/blob_download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "client/partial_download.h"
#include "client/registry_client.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/text.h"

namespace blz::client {
namespace {

using Clock = std::chrono::steady_clock;

// The sidecar is rewritten after this much progress or time (and after every attempt).
constexpr uint64_t kFlushBytes = 4ull << 20;
constexpr auto kFlushInterval = std::chrono::seconds(1);
// Largest download whose size is not announced up front (1 TiB).
constexpr uint64_t kMaxUnknownBytes = 1ull << 40;
// Starts from zero at most this often per call (a changed resource, a corrupt partial).
constexpr int kMaxRestarts = 2;

struct ContentRange {
  uint64_t first = 0, last = 0, total = 0;
};

// "bytes FIRST-LAST/TOTAL" (RFC 9110 14.4).
std::optional<ContentRange> ParseContentRange(std::string_view v) {
  if (v.substr(0, 6) != "bytes ") return std::nullopt;
  v.remove_prefix(6);
  size_t dash = v.find('-'), slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return std::nullopt;
  }
  ContentRange r;
  if (!ParseDecimalU64(v.substr(0, dash), &r.first) ||
      !ParseDecimalU64(v.substr(dash + 1, slash - dash - 1), &r.last) ||
      !ParseDecimalU64(v.substr(slash + 1), &r.total) || r.last < r.first || r.last >= r.total) {
    return std::nullopt;
  }
  return r;
}

struct AttemptInfo {
  bool retryable = false;
  bool restart = false;  // the resource changed: discard the partial, start from zero
  std::optional<std::chrono::milliseconds> retry_after;
  uint64_t progressed = 0;
};

class Download {
 public:
  Download(const std::string& store_dir, const DownloadRequest& request,
           const DownloadOptions& options, const std::string& dest_path)
      : request_(request), options_(options), dest_(dest_path), partial_(store_dir) {
    options_.http.io_timeout = options_.retry.stall_timeout;
    options_.parallel = std::clamp(options_.parallel, 1, kMaxParallel);
    options_.retry.max_attempts = std::max(1, options_.retry.max_attempts);
    options_.min_part_bytes = std::max<uint64_t>(options_.min_part_bytes, 1);
    options_.max_part_bytes = std::max(options_.max_part_bytes, options_.min_part_bytes);
  }
  ~Download() { CloseData(); }

  Result<DownloadResult> Run();

 private:
  Status Prepare(bool fresh);
  Status OpenData(bool truncate);
  Status Preallocate(uint64_t size);
  void CloseData() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  Status RunParts();
  Status FetchPart(size_t index, HttpClient* http);
  Status Attempt(size_t index, HttpClient* http, AttemptInfo* info);
  // REQUIRES: mu_ held.
  void FlushLocked(bool force);
  void RequestRestart(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!restart_) restart_reason_ = why;
    restart_ = true;
    stop_ = true;
  }
  std::string Where(uint64_t offset) const {
    return request_.what + " at byte " + std::to_string(offset) +
           (state_.size > 0 ? " of " + std::to_string(state_.size) : "");
  }

  const DownloadRequest& request_;
  DownloadOptions options_;
  const std::string dest_;
  PartialStore partial_;

  std::mutex mu_;  // guards state_, the sidecar, progress and the retry log
  PartialState state_;
  int fd_ = -1;
  uint64_t unflushed_ = 0;
  Clock::time_point last_flush_ = Clock::now();
  std::atomic<bool> stop_{false};
  bool restart_ = false;  // guarded by mu_
  std::string restart_reason_;
  std::atomic<uint64_t> received_{0};
  std::atomic<int> retries_{0};
  std::atomic<bool> cache_hit_{false};
  std::atomic<bool> ranges_ignored_{false};  // the registry answered 200 to a Range request
};

Status Download::OpenData(bool truncate) {
  CloseData();
  const std::string path = partial_.DataPath(request_.key);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd_ < 0) return IOError(path + ": cannot open: " + std::strerror(errno));
  return Status::Ok();
}

Status Download::Preallocate(uint64_t size) {
  int err = ::posix_fallocate(fd_, 0, off_t(size));
  if (err == 0) return Status::Ok();
  if (err == ENOSPC) {
    return IOError(partial_.DataPath(request_.key) + ": no space for the " +
                   std::to_string(size) + " bytes of " + request_.what);
  }
  // Not supported by the file system: a sparse file of the right size does as well.
  if (::ftruncate(fd_, off_t(size)) != 0) {
    return IOError(partial_.DataPath(request_.key) + ": cannot size to " + std::to_string(size) +
                   " bytes: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status Download::Prepare(bool fresh) {
  std::optional<PartialState> old;
  if (!fresh) old = partial_.Load(request_.key);
  bool keep = old.has_value() && old->kind == request_.kind && old->size > 0 &&
              !old->parts.empty() && !old->digest.empty() &&
              (request_.expected_digest.empty() || old->digest == request_.expected_digest) &&
              (request_.expected_size == 0 || old->size == request_.expected_size);
  if (keep) {
    struct stat st {};
    keep = ::stat(partial_.DataPath(request_.key).c_str(), &st) == 0 &&
           uint64_t(st.st_size) == old->size;
  }
  if (keep) {
    state_ = std::move(*old);
    state_.for_digest = request_.for_digest;
    return OpenData(/*truncate=*/false);
  }
  partial_.Remove(request_.key);
  state_ = PartialState{};
  state_.kind = request_.kind;
  state_.what = request_.what;
  state_.for_digest = request_.for_digest;
  state_.digest = request_.expected_digest;
  state_.size = request_.expected_size;
  BLZ_RETURN_IF_ERROR(OpenData(/*truncate=*/true));
  if (state_.size > 0) {
    BLZ_RETURN_IF_ERROR(Preallocate(state_.size));
    for (const PartPlan& p : PlanParts(0, state_.size, options_.parallel, options_.min_part_bytes,
                                       options_.max_part_bytes)) {
      state_.parts.push_back(PartState{p.begin, p.end, 0});
    }
  }
  return partial_.Save(request_.key, state_);
}

void Download::FlushLocked(bool force) {
  const Clock::time_point now = Clock::now();
  if (!force && unflushed_ < kFlushBytes && now - last_flush_ < kFlushInterval) return;
  if (state_.size == 0) return;  // nothing worth keeping before the size is known
  // Best effort: a sidecar that cannot be written only costs a resume.
  (void)partial_.Save(request_.key, state_);
  unflushed_ = 0;
  last_flush_ = now;
}

Status Download::Attempt(size_t index, HttpClient* http, AttemptInfo* info) {
  uint64_t from = 0, end = 0, size = 0, part_begin = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const PartState& p = state_.parts[index];
    part_begin = p.begin;
    from = p.begin + p.done;
    end = p.end;
    size = state_.size;
  }
  const bool probing = size == 0;
  const bool whole_ok = from == 0 && (probing || end == size);

  HttpRequest req;
  req.method = "GET";
  req.target = request_.target;
  req.headers = request_.headers;
  req.headers.push_back({"Range", "bytes=" + std::to_string(from) + "-" + std::to_string(end - 1)});

  bool local_error = false;
  bool stopped = false;
  uint64_t offset = from;
  TransferOptions t;
  t.max_sink_body = probing ? (request_.max_bytes > 0 ? request_.max_bytes : kMaxUnknownBytes)
                            : end - part_begin;  // a whole answer to a single part fits
  t.on_headers = [&](const HttpResponse& h) -> Status {
    uint64_t total = 0;
    bool partial_content = false;
    if (h.status == 206) {
      std::optional<ContentRange> cr = ParseContentRange(h.Header("Content-Range"));
      if (!cr.has_value() || cr->first != from) {
        info->restart = true;
        return Corruption(request_.what + ": asked for bytes from " + std::to_string(from) +
                          ", the registry answered Content-Range '" + h.Header("Content-Range") +
                          "'");
      }
      total = cr->total;
      partial_content = true;
    } else if (h.status == 200) {
      if (!whole_ok) {
        // The registry ignores Range: it sends the whole body. With a single part, take it
        // from byte 0; with several, start again as one part (RunParts' caller sees
        // ranges_ignored_).
        ranges_ignored_ = true;
        std::lock_guard<std::mutex> lock(mu_);
        if (state_.parts.size() != 1 || state_.size == 0) {
          info->restart = true;
          return Unsupported(request_.what + ": the registry ignores Range requests (" +
                             options_.registry + " answered 200 to a request for bytes " +
                             std::to_string(from) + "-" + std::to_string(end - 1) + ")");
        }
        state_.parts[0].done = 0;
        offset = 0;
      }
      if (!h.ContentLength(&total)) {
        if (!probing) total = size;
        else return Unsupported(request_.what + ": the registry sent no Content-Length");
      }
    } else {
      return Status::Ok();  // an error answer: its body goes to memory
    }
    cache_hit_ = h.Header("Blz-Patch-Cache") == "hit";
    const std::string server_digest = h.Header("Docker-Content-Digest");
    const bool digest_ok = ParseDigest(server_digest).ok();
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.size == 0) {
      if (total == 0) return Corruption(request_.what + ": the registry announces 0 bytes");
      if (request_.max_bytes > 0 && total > request_.max_bytes) {
        return TooLarge("pull: " + request_.what + " is " + std::to_string(total) +
                        " bytes, more than the " + std::to_string(request_.max_bytes) +
                        " allowed");
      }
      state_.size = total;
      PartState& p = state_.parts[index];
      p.end = partial_content ? std::min(p.end, total) : total;
      if (request_.expected_digest.empty() && state_.digest.empty() && digest_ok) {
        state_.digest = server_digest;
      }
      if (Status s = Preallocate(total); !s.ok()) {
        local_error = true;  // a full disk is not worth a retry
        return s;
      }
      FlushLocked(/*force=*/true);
    } else {
      if (total != state_.size) {
        info->restart = true;
        return Corruption(request_.what + " changed on the registry: it now has " +
                          std::to_string(total) + " bytes, the partial download " +
                          std::to_string(state_.size));
      }
      // Patches only: a blob is named by its digest (a registry sending other bytes fails the
      // final check), a patch by its from/to pair, so its bytes may change between runs.
      if (request_.expected_digest.empty() && digest_ok && !state_.digest.empty() &&
          server_digest != state_.digest) {
        info->restart = true;
        return Corruption(request_.what + " changed on the registry: it is now " + server_digest +
                          ", the partial download is of " + state_.digest);
      }
    }
    return Status::Ok();
  };
  t.sink = [&](ByteSpan chunk) -> Status {
    if (stop_) {
      stopped = true;
      return Unavailable("stopped");
    }
    uint64_t part_end = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      part_end = state_.parts[index].end;
    }
    if (offset + chunk.size() > part_end) {
      local_error = true;
      return Corruption(request_.what + ": the registry sent more bytes than asked for (" +
                        std::to_string(part_end - from) + " from byte " + std::to_string(from) +
                        ")");
    }
    size_t written = 0;
    while (written < chunk.size()) {
      ssize_t n = ::pwrite(fd_, chunk.data() + written, chunk.size() - written,
                           off_t(offset + written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        local_error = true;
        return IOError(partial_.DataPath(request_.key) + ": write failed: " +
                       std::strerror(errno));
      }
      written += size_t(n);
    }
    offset += chunk.size();
    info->progressed += chunk.size();
    received_ += chunk.size();
    if (options_.bytes_counter != nullptr) *options_.bytes_counter += chunk.size();
    std::lock_guard<std::mutex> lock(mu_);
    state_.parts[index].done += chunk.size();
    unflushed_ += chunk.size();
    FlushLocked(/*force=*/false);
    if (options_.progress) options_.progress(state_.Done(), state_.size);
    return Status::Ok();
  };

  // Blob and patch GETs follow redirects (object stores), as RegistryClient's do.
  const RegistryAddress origin{options_.host, options_.port, options_.http.tls};
  Result<HttpResponse> r = SendGetFollowingRedirects(http, origin, req, options_.http, t);
  if (!r.ok()) {
    if (info->restart || local_error || stopped) return r.status();
    const Code c = r.status().code();
    info->retryable = IsRetryableFailure(r.status());
    return Status(c, r.status().message() + " (" + Where(offset) + ")");
  }
  const HttpResponse& res = *r;
  if (res.status == 200 || res.status == 206) {
    std::lock_guard<std::mutex> lock(mu_);
    const PartState& p = state_.parts[index];
    if (p.complete()) return Status::Ok();
    info->retryable = true;
    return IOError(request_.what + ": the answer ended early (" + Where(offset) + ", part ends at " +
                   std::to_string(p.end) + ")");
  }
  if (res.status == 416) {
    info->restart = true;
    return InvalidArgument(request_.what + ": the registry cannot serve bytes from " +
                           std::to_string(from) + " (416)");
  }
  const bool have_token = std::any_of(request_.headers.begin(), request_.headers.end(),
                                      [](const HttpHeader& h) { return h.name == "Authorization"; });
  Status failed = StatusFromResponse(res, "pull", request_.what, have_token, options_.registry);
  if (IsRetryableHttpStatus(res.status)) {
    info->retryable = true;
    info->retry_after = ParseRetryAfter(res.Header("Retry-After"), std::chrono::system_clock::now());
    return Status(failed.code(), "HTTP " + std::to_string(res.status) + ": " + failed.message());
  }
  if (request_.kind == "full-patch" &&
      (res.status == 404 || res.status == 405 ||
       (res.status == 400 && failed.code() == Code::kDigestMismatch))) {
    return Status(Code::kUnsupported, failed.message());
  }
  return failed;
}

Status Download::FetchPart(size_t index, HttpClient* http) {
  int failures = 0;
  uint64_t high_water = 0;  // most bytes of the part held so far: progress is going past it
  {
    std::lock_guard<std::mutex> lock(mu_);
    high_water = state_.parts[index].done;
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_.size > 0 && state_.parts[index].complete()) return Status::Ok();
    }
    if (stop_) return Unavailable(request_.what + ": stopped");
    AttemptInfo info;
    Status s = Attempt(index, http, &info);
    bool progressed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      FlushLocked(/*force=*/true);
      progressed = state_.parts[index].done > high_water;
      high_water = std::max(high_water, state_.parts[index].done);
    }
    if (s.ok()) continue;  // the loop head sees the part complete
    if (info.restart) {
      RequestRestart(s.message());
      return s;
    }
    if (!info.retryable || stop_) return s;
    if (progressed) failures = 0;
    ++failures;
    if (failures >= options_.retry.max_attempts) {
      return Status(s.code(), s.message() + "; gave up after " + std::to_string(failures) +
                                  " attempts in a row (the partial download is kept: run the "
                                  "same pull again to continue)");
    }
    RetryEvent event;
    event.retry = failures;
    event.max_retries = options_.retry.max_attempts - 1;
    event.delay = RetryDelay(options_.retry, failures, info.retry_after, &event.from_retry_after);
    event.reason = s.message();
    ++retries_;
    if (options_.on_retry) {
      std::lock_guard<std::mutex> lock(mu_);
      options_.on_retry(event);
    }
    http->Close();
    const Clock::time_point until = Clock::now() + event.delay;
    while (!stop_ && Clock::now() < until) {
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(20),
                                                            until - Clock::now()));
    }
  }
}

Status Download::RunParts() {
  if (state_.parts.empty()) {
    // Size unknown: the first part doubles as the probe that learns it.
    state_.parts.push_back(PartState{0, options_.min_part_bytes, 0});
    HttpClient http(options_.host, options_.port, options_.http);
    BLZ_RETURN_IF_ERROR(FetchPart(0, &http));
    std::lock_guard<std::mutex> lock(mu_);
    for (const PartPlan& p : PlanParts(state_.parts[0].end, state_.size, options_.parallel,
                                       options_.min_part_bytes, options_.max_part_bytes)) {
      state_.parts.push_back(PartState{p.begin, p.end, 0});
    }
    FlushLocked(/*force=*/true);
  } else if (state_.parts.back().end < state_.size) {
    // Killed between the probe and planning the rest: plan it now.
    const uint64_t from = state_.parts.back().end;
    for (const PartPlan& p : PlanParts(from, state_.size, options_.parallel,
                                       options_.min_part_bytes, options_.max_part_bytes)) {
      state_.parts.push_back(PartState{p.begin, p.end, 0});
    }
  }
  std::vector<size_t> pending;
  for (size_t i = 0; i < state_.parts.size(); ++i) {
    if (!state_.parts[i].complete()) pending.push_back(i);
  }
  const size_t threads = std::min<size_t>(size_t(options_.parallel), pending.size());
  if (threads <= 1) {
    HttpClient http(options_.host, options_.port, options_.http);
    for (size_t i : pending) BLZ_RETURN_IF_ERROR(FetchPart(i, &http));
    return Status::Ok();
  }
  std::atomic<size_t> next{0};
  std::mutex error_mu;
  Status first_error;
  auto worker = [&]() {
    HttpClient http(options_.host, options_.port, options_.http);
    for (size_t k = next++; k < pending.size(); k = next++) {
      Status s = FetchPart(pending[k], &http);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error.ok()) first_error = s;
        stop_ = true;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (std::thread& th : pool) th.join();
  return first_error;
}

Result<DownloadResult> Download::Run() {
  BLZ_RETURN_IF_ERROR(partial_.Init());
  DownloadResult result;
  bool fresh = false;
  for (int round = 0;; ++round) {
    stop_ = false;
    restart_ = false;
    BLZ_RETURN_IF_ERROR(Prepare(fresh));
    const uint64_t kept = state_.Done();
    if (round == 0) result.resumed_from = kept;
    if (kept > 0) {
      result.notes.push_back("resuming " + request_.what + " at byte " + std::to_string(kept) +
                             " of " + std::to_string(state_.size) +
                             " (kept from an interrupted download)");
    }
    Status s = RunParts();
    bool restart = false;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      restart = restart_;
      why = restart_reason_;
      if (!restart) FlushLocked(/*force=*/true);
    }
    if (restart) {
      CloseData();
      partial_.Remove(request_.key);
      if (round >= kMaxRestarts) return s;
      result.notes.push_back("partial download of " + request_.what + " discarded (" + why +
                             "); downloading it again from the start");
      if (ranges_ignored_) options_.parallel = 1;  // one part: a whole answer is usable
      fresh = true;
      continue;
    }
    if (!s.ok()) {
      CloseData();
      return s;
    }
    if (::fdatasync(fd_) != 0) {
      return IOError(partial_.DataPath(request_.key) + ": fdatasync failed: " +
                     std::strerror(errno));
    }
    CloseData();
    const std::string data = partial_.DataPath(request_.key);
    BLZ_ASSIGN_OR_RETURN(std::string hex, Sha256FileHex(data));
    const std::string got = MakeDigest(hex);
    const std::string want =
        request_.expected_digest.empty() ? state_.digest : request_.expected_digest;
    if (!want.empty() && got != want) {
      partial_.Remove(request_.key);
      const std::string msg = request_.what + " from " + options_.registry + ": the " +
                              std::to_string(state_.size) + " bytes hash to " + got +
                              ", expected " + want;
      if (kept > 0 && round < kMaxRestarts) {
        result.notes.push_back("partial download was corrupt (" + msg +
                               "); deleted, downloading it again from the start");
        fresh = true;
        continue;
      }
      return DigestMismatch("pull: " + msg + "; nothing was stored");
    }
    if (::rename(data.c_str(), dest_.c_str()) != 0) {
      return IOError("cannot move " + data + " to " + dest_ + ": " + std::strerror(errno));
    }
    partial_.Remove(request_.key);
    result.digest = got;
    result.size = state_.size;
    result.bytes_received = received_;
    result.retries = retries_;
    result.parts = int(state_.parts.size());
    result.server_cache_hit = cache_hit_;
    return result;
  }
}

}  // namespace

std::vector<PartPlan> PlanParts(uint64_t begin, uint64_t end, int parallel, uint64_t min_part,
                                uint64_t max_part) {
  std::vector<PartPlan> parts;
  if (end <= begin) return parts;
  const uint64_t span = end - begin;
  min_part = std::max<uint64_t>(min_part, 1);
  max_part = std::max(max_part, min_part);
  if (parallel <= 1 || span <= min_part) {
    parts.push_back({begin, end});
    return parts;
  }
  const uint64_t part = std::clamp<uint64_t>(span / uint64_t(parallel), min_part, max_part);
  for (uint64_t at = begin; at < end; at += std::min(part, end - at)) {
    parts.push_back({at, at + std::min(part, end - at)});
  }
  return parts;
}

Result<DownloadResult> DownloadResumable(const std::string& store_dir,
                                         const DownloadRequest& request,
                                         const DownloadOptions& options,
                                         const std::string& dest_path) {
  if (request.key.size() != 64) {
    return InvalidArgument("download of " + request.what + ": invalid partial key");
  }
  Download download(store_dir, request, options, dest_path);
  return download.Run();
}

}  // namespace blz::client
