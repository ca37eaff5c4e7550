#include "client/blob_upload.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "client/registry_client.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/text.h"

namespace blz::client {
namespace {

constexpr uint64_t kMinChunkBytes = 64 * 1024;

// The origin-form path of an upload Location ("http://host/v2/..." -> "/v2/..."), or "".
std::string LocationPath(const std::string& location) {
  std::string target = location;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.rfind(scheme, 0) == 0) {
      size_t path = target.find('/', scheme.size());
      target = path == std::string::npos ? "/" : target.substr(path);
    }
  }
  if (target.empty() || target[0] != '/' || target.find_first_of(" \r\n") != std::string::npos) {
    return "";
  }
  return target;
}

// Bytes the registry holds for an upload session, from Blz-Upload-Offset or Range "0-<last>".
std::optional<uint64_t> HeldBytes(const HttpResponse& r) {
  uint64_t n = 0;
  if (ParseDecimalU64(r.Header("Blz-Upload-Offset"), &n)) return n;
  std::string range = r.Header("Range");
  if (range.rfind("bytes=", 0) == 0) range = range.substr(6);
  size_t dash = range.find('-');
  uint64_t first = 0, last = 0;
  if (dash == std::string::npos || !ParseDecimalU64(range.substr(0, dash), &first) ||
      !ParseDecimalU64(range.substr(dash + 1), &last) || first != 0) {
    return std::nullopt;
  }
  return last == 0 ? 0 : last + 1;  // "0-0" is ambiguous: assume empty (the registry re-checks)
}

struct AttemptInfo {
  bool retryable = false;
  std::optional<std::chrono::milliseconds> retry_after;
};

class Upload {
 public:
  Upload(const std::string& name, const std::string& digest, const std::string& file,
         uint64_t size, const UploadOptions& options)
      : name_(name), digest_(digest), file_(file), size_(size), options_(options),
        http_(options.host, options.port, WithStall(options)) {
    chunk_ = std::max(options_.chunk_bytes, kMinChunkBytes);
    options_.retry.max_attempts = std::max(1, options_.retry.max_attempts);
    if (!options_.store_dir.empty()) {
      std::string key = options_.registry + "\n" + name_ + "\n" + digest_;
      if (!options_.patch_from.empty()) key += "\n" + options_.patch_from;
      session_path_ = options_.store_dir + "/uploads/" + Sha256Hex(key) + ".json";
    }
  }

  Result<UploadResult> Run();

 private:
  static HttpClientOptions WithStall(const UploadOptions& o) {
    HttpClientOptions h = o.http;
    h.io_timeout = o.retry.stall_timeout;
    return h;
  }
  HttpRequest NewRequest(std::string method, std::string target) const {
    HttpRequest req;
    req.method = std::move(method);
    req.target = std::move(target);
    if (!options_.token.empty()) req.headers.push_back({"Authorization", "Bearer " + options_.token});
    return req;
  }
  Status Refused(const HttpResponse& r, AttemptInfo* info) const {
    Status s = StatusFromResponse(r, "push", "blob " + digest_, !options_.token.empty(),
                                  options_.registry);
    if (IsRetryableHttpStatus(r.status)) {
      info->retryable = true;
      info->retry_after = ParseRetryAfter(r.Header("Retry-After"), std::chrono::system_clock::now());
    }
    return s;
  }
  Status Transport(const Status& s, AttemptInfo* info) const {
    info->retryable = IsRetryableFailure(s);
    return s;
  }
  void LoadSession();
  void SaveSession() const;
  void ForgetSession() const {
    if (!session_path_.empty()) ::unlink(session_path_.c_str());
  }
  Status Open(AttemptInfo* info);
  Status Query(AttemptInfo* info);
  Status SendChunk(AttemptInfo* info);
  Status Finish(AttemptInfo* info);

  const std::string name_, digest_, file_;
  const uint64_t size_;
  UploadOptions options_;
  HttpClient http_;
  std::string session_path_;
  std::string location_;  // origin-form path of the session; "" = none open
  uint64_t offset_ = 0;   // bytes the registry holds
  uint64_t chunk_ = 0;
  bool done_ = false;
  UploadResult result_;
};

void Upload::LoadSession() {
  if (session_path_.empty()) return;
  Result<std::string> text = ReadSmallFile(session_path_, 64 * 1024);
  if (!text.ok()) return;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("registry", "") != options_.registry ||
      j.value("repository", "") != name_ || j.value("digest", "") != digest_ ||
      j.value("patch_from", "") != options_.patch_from || !j.contains("size") ||
      !j["size"].is_number_unsigned() || j["size"].get<uint64_t>() != size_) {
    ForgetSession();
    return;
  }
  location_ = LocationPath(j.value("location", ""));
}

void Upload::SaveSession() const {
  if (session_path_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(options_.store_dir + "/uploads", ec);
  nlohmann::ordered_json j = {{"registry", options_.registry}, {"repository", name_},
                              {"digest", digest_}, {"size", size_}, {"location", location_}};
  if (!options_.patch_from.empty()) j["patch_from"] = options_.patch_from;
  (void)WriteFileAtomic(session_path_, j.dump() + "\n");  // best effort: costs only a resume
}

Status Upload::Open(AttemptInfo* info) {
  std::string target = "/v2/" + name_ + "/blobs/uploads/";
  if (!options_.patch_from.empty()) target += "?blz-patch-from=" + options_.patch_from;
  Result<HttpResponse> r = http_.Send(NewRequest("POST", target));
  if (!r.ok()) return Transport(r.status(), info);
  if (r->status != 202) return Refused(*r, info);
  location_ = LocationPath(r->Header("Location"));
  if (location_.empty()) {
    return Unavailable("push failed: the registry opened an upload without a usable Location");
  }
  offset_ = 0;
  SaveSession();
  return Status::Ok();
}

Status Upload::Query(AttemptInfo* info) {
  Result<HttpResponse> r = http_.Send(NewRequest("GET", location_));
  if (!r.ok()) return Transport(r.status(), info);
  if (r->status == 404) {
    // The session is gone: either the registry committed the blob (a PUT whose answer was
    // lost) or it dropped the session. HEAD tells which.
    location_.clear();
    ForgetSession();
    Result<HttpResponse> head = http_.Send(NewRequest("HEAD", "/v2/" + name_ + "/blobs/" + digest_));
    if (!head.ok()) return Transport(head.status(), info);
    if (head->status == 200) done_ = true;
    offset_ = 0;
    return Status::Ok();
  }
  if (r->status != 204 && r->status != 200) return Refused(*r, info);
  std::optional<uint64_t> held = HeldBytes(*r);
  if (!held.has_value() || *held > size_) {
    location_.clear();
    ForgetSession();
    return Unavailable("push: the registry reports an upload offset that does not fit a " +
                       std::to_string(size_) + "-byte blob; starting a new upload");
  }
  offset_ = *held;
  if (std::string next = LocationPath(r->Header("Location")); !next.empty()) location_ = next;
  return Status::Ok();
}

Status Upload::SendChunk(AttemptInfo* info) {
  const uint64_t len = std::min(chunk_, size_ - offset_);
  HttpRequest req = NewRequest("PATCH", location_);
  req.headers.push_back({"Content-Type", "application/octet-stream"});
  req.headers.push_back(
      {"Content-Range", std::to_string(offset_) + "-" + std::to_string(offset_ + len - 1)});
  req.body_file = file_;
  req.body_file_offset = offset_;
  req.body_file_length = len;
  uint64_t sent = 0;
  TransferOptions t;
  t.upload_progress = [&](uint64_t done, uint64_t) {
    sent = done;
    if (options_.progress) options_.progress(offset_ + done, size_);
  };
  Result<HttpResponse> r = http_.Send(req, t);
  result_.bytes_sent += sent;
  if (!r.ok()) {
    Status s = Transport(r.status(), info);
    return Status(s.code(), s.message() + " (blob " + digest_ + ": chunk at byte " +
                                std::to_string(offset_) + " of " + std::to_string(size_) + ")");
  }
  if (r->status == 416 || r->status == 404) {
    info->retryable = true;  // resynchronise with GET (or a new session)
    if (r->status == 404) location_.clear();
    return Unavailable("push: the registry did not take the chunk at byte " +
                       std::to_string(offset_) + " (HTTP " + std::to_string(r->status) + ")");
  }
  if (r->status != 202) return Refused(*r, info);
  std::optional<uint64_t> held = HeldBytes(*r);
  offset_ = held.has_value() && *held <= size_ ? *held : offset_ + len;
  ++result_.chunks;
  if (std::string next = LocationPath(r->Header("Location")); !next.empty() && next != location_) {
    location_ = next;
    SaveSession();
  }
  return Status::Ok();
}

Status Upload::Finish(AttemptInfo* info) {
  std::string target = location_ + (location_.find('?') == std::string::npos ? "?" : "&") +
                       "digest=" + digest_;
  HttpRequest req = NewRequest("PUT", target);
  req.headers.push_back({"Content-Type", "application/octet-stream"});
  Result<HttpResponse> r = http_.Send(req);
  if (!r.ok()) return Transport(r.status(), info);
  if (r->status == 404) {
    info->retryable = true;  // Query's HEAD tells whether the blob arrived
    return Unavailable("push: the upload session of blob " + digest_ + " vanished");
  }
  if (r->status != 201) {
    Status s = Refused(*r, info);
    // The registry discarded the session (a patch it could not apply, too).
    if (s.code() == Code::kDigestMismatch ||
        (!options_.patch_from.empty() && r->status >= 400 && r->status < 500)) {
      ForgetSession();
    }
    return s;
  }
  const std::string server_digest = r->Header("Docker-Content-Digest");
  if (!server_digest.empty() && server_digest != digest_) {
    return DigestMismatch("push: registry stored blob as " + server_digest + ", expected " +
                          digest_);
  }
  done_ = true;
  return Status::Ok();
}

Result<UploadResult> Upload::Run() {
  LoadSession();
  bool need_query = !location_.empty();
  bool first_query = need_query;
  int failures = 0;
  while (!done_) {
    AttemptInfo info;
    const uint64_t before = offset_;
    Status s;
    if (location_.empty()) {
      s = Open(&info);
    } else if (need_query) {
      s = Query(&info);
      if (s.ok()) {
        need_query = false;
        if (first_query) result_.resumed_from = offset_;
      }
      first_query = false;
    } else if (offset_ < size_) {
      s = SendChunk(&info);
    } else {
      s = Finish(&info);
    }
    if (s.ok()) {
      if (offset_ > before) failures = 0;
      continue;
    }
    if (!info.retryable) return s;
    if (offset_ > before) failures = 0;
    ++failures;
    if (failures >= options_.retry.max_attempts) {
      return Status(s.code(), s.message() + "; gave up after " + std::to_string(failures) +
                                  " attempts in a row" +
                                  (location_.empty() ? "" : " (the upload session is kept: run "
                                                            "the same push again to continue)"));
    }
    // A chunk that keeps failing is sent in smaller pieces.
    if (failures >= 2) chunk_ = std::max(chunk_ / 2, kMinChunkBytes);
    RetryEvent event;
    event.retry = failures;
    event.max_retries = options_.retry.max_attempts - 1;
    event.delay = RetryDelay(options_.retry, failures, info.retry_after, &event.from_retry_after);
    event.reason = s.message();
    ++result_.retries;
    if (options_.on_retry) options_.on_retry(event);
    http_.Close();
    std::this_thread::sleep_for(event.delay);
    need_query = !location_.empty();
  }
  ForgetSession();
  if (options_.progress) options_.progress(size_, size_);
  return result_;
}

}  // namespace

Result<UploadResult> UploadBlobResumable(const std::string& name, const std::string& digest,
                                         const std::string& file_path, uint64_t size,
                                         const UploadOptions& options) {
  BLZ_RETURN_IF_ERROR(ParseDigest(digest).status());
  if (size == 0) return InvalidArgument("push: chunked upload of an empty blob");
  Upload upload(name, digest, file_path, size, options);
  return upload.Run();
}

}  // namespace blz::client
