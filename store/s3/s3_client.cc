#include "store/s3/s3_client.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>

#include "core/digest.h"
#include "store/s3/s3_http.h"

namespace blz::store::s3 {

struct S3Client::Call {
  const char* op = "";  // "GET Object": names the operation in errors
  std::string method;
  std::string key;      // empty for bucket-level requests
  QueryParams query;
  HeaderList headers;   // extra headers to sign (Range, ...)
  std::string_view body;
  std::string body_file;
  uint64_t body_file_size = 0;
  std::string payload_hash = std::string(kEmptyPayloadSha256);
  std::string response_file;
  uint64_t max_body = 16ull << 20;
  // When set: a 2xx body is left unread on the connection, handed over here (OpenObject).
  std::unique_ptr<HttpStream>* stream = nullptr;
};

struct S3Client::Answer {
  int status = 0;
  HeaderList headers;
  std::string body;
};

namespace {

// XML text -> characters: the five predefined entities and numeric references (ASCII only).
std::string XmlUnescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out.push_back('&');
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out.push_back('&');
    else if (ent == "lt") out.push_back('<');
    else if (ent == "gt") out.push_back('>');
    else if (ent == "quot") out.push_back('"');
    else if (ent == "apos") out.push_back('\'');
    else if (!ent.empty() && ent[0] == '#') {
      long v = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                   ? std::strtol(std::string(ent.substr(2)).c_str(), nullptr, 16)
                   : std::strtol(std::string(ent.substr(1)).c_str(), nullptr, 10);
      if (v > 0 && v < 128) out.push_back(static_cast<char>(v));
    } else {
      out.append(s.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// The raw inner text of every <tag>...</tag> (tags without attributes; not nested in itself).
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    size_t start = pos + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

std::string XmlText(std::string_view xml, std::string_view tag) {
  auto e = XmlElements(xml, tag);
  return e.empty() ? std::string() : XmlUnescape(e.front());
}

uint64_t ToU64(std::string_view s) {
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') break;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

bool Retryable(int status) { return status >= 500; }

}  // namespace

S3Client::S3Client(S3Config config) : config_(std::move(config)) {}

Result<S3Client::Answer> S3Client::Execute(const Call& call) {
  const std::string object = config_.bucket + (call.key.empty() ? "" : "/" + call.key);
  const std::string where = "S3 " + std::string(call.op) + " " + object;
  BLZ_ASSIGN_OR_RETURN(S3Endpoint ep, ParseS3Endpoint(config_.endpoint));
  const std::string host = config_.path_style ? ep.host : config_.bucket + "." + ep.host;
  const bool default_port = ep.port == (ep.tls ? 443 : 80);
  const std::string host_header = default_port ? host : host + ":" + std::to_string(ep.port);
  std::string path = config_.path_style ? "/" + config_.bucket : "";
  if (!call.key.empty()) path += "/" + call.key;
  if (path.empty()) path = "/";

  HttpExchange x;
  x.method = call.method;
  x.target = UriEncode(path, false);
  if (!call.query.empty()) x.target += "?" + CanonicalQueryString(call.query);
  x.body = call.body;
  x.body_file = call.body_file;
  x.body_file_size = call.body_file_size;
  x.response_file = call.response_file;
  x.max_body = call.max_body;

  Status last;
  const int attempts = std::max(1, config_.max_attempts);
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) {
      if (config_.on_retry) config_.on_retry(attempt - 1, last);
      auto delay = config_.backoff * (1 << std::min(attempt - 2, 10));
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(delay, std::chrono::seconds(8)));
    }
    SigV4Request sreq;
    sreq.method = call.method;
    sreq.path = path;
    sreq.query = call.query;
    sreq.headers = call.headers;
    sreq.headers.emplace_back("Host", host_header);
    sreq.payload_hash = call.payload_hash;
    BLZ_ASSIGN_OR_RETURN(SigV4Signed signed_req,
                         SignRequest(sreq, config_.credentials, config_.region, "s3",
                                     static_cast<int64_t>(std::time(nullptr))));
    x.headers = std::move(signed_req.headers);
    x.headers.emplace_back("Authorization", std::move(signed_req.authorization));
    x.headers.emplace_back("User-Agent", "blz-s3");

    Result<HttpReply> reply = HttpReply{};
    if (call.stream == nullptr) {
      reply = HttpDo(ep, host, x, config_.timeout);
    } else {
      // Only what comes before the first byte of a 2xx body is retried here.
      Result<std::unique_ptr<HttpStream>> opened = OpenHttpStream(ep, host, x, config_.timeout);
      if (!opened.ok()) {
        reply = opened.status();
      } else if ((*opened)->status() / 100 == 2) {
        Answer a{(*opened)->status(), (*opened)->headers(), ""};
        *call.stream = std::move(*opened);
        return a;
      } else {
        reply->status = (*opened)->status();
        reply->headers = (*opened)->headers();
        Result<std::string> body = (*opened)->ReadAll(64 << 10);
        if (body.ok()) reply->body = std::move(*body);  // else: the status alone
      }
    }
    if (!reply.ok()) {
      last = reply.status().WithContext(where);
      // Connection-level failures are retried, except an untrusted certificate.
      if (reply.status().code() == Code::kUnavailable &&
          reply.status().message().find(kCertificateVerifyFailed) == std::string::npos) {
        continue;
      }
      return last;
    }
    const int status = reply->status;
    const std::string code = XmlText(reply->body, "Code");
    if (status / 100 == 2 || status == 304) {
      return Answer{status, std::move(reply->headers), std::move(reply->body)};
    }
    std::string message = where + ": HTTP " + std::to_string(status);
    if (!code.empty()) message += " " + code;
    const std::string detail = XmlText(reply->body, "Message");
    if (!detail.empty()) message += ": " + detail;
    if (Retryable(status)) {
      last = Unavailable(message + " (after " + std::to_string(attempt) + " attempt" +
                         (attempt == 1 ? "" : "s") + ")");
      continue;
    }
    if (status == 404) return NotFound(message);
    if (status == 401 || status == 403) return Unauthorized(message);
    if (status == 409 || status == 412) return AlreadyExists(message);
    return InvalidArgument(message);
  }
  return last;
}

Status S3Client::CreateBucket() {
  Call c;
  c.op = "CreateBucket";
  c.method = "PUT";
  return Execute(c).status();
}

Status S3Client::PutObject(std::string_view key, std::string_view bytes) {
  Call c;
  c.op = "PutObject";
  c.method = "PUT";
  c.key = std::string(key);
  c.body = bytes;
  c.payload_hash = Sha256Hex(bytes);
  return Execute(c).status();
}

Status S3Client::PutObjectFromFile(std::string_view key, const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return IOError("S3 PutObject " + config_.bucket + "/" + std::string(key) + ": " + path + ": " + ec.message());
  Call c;
  c.op = "PutObject";
  c.method = "PUT";
  c.key = std::string(key);
  c.body_file = path;
  c.body_file_size = size;
  BLZ_ASSIGN_OR_RETURN(c.payload_hash, Sha256FileHex(path));
  return Execute(c).status();
}

namespace {
std::string RangeHeader(const ByteRange& r) {
  return "bytes=" + std::to_string(r.first) + "-" + (r.last ? std::to_string(*r.last) : "");
}
}  // namespace

Result<std::string> S3Client::GetObject(std::string_view key, std::optional<ByteRange> range,
                                        uint64_t max_bytes) {
  Call c;
  c.op = "GetObject";
  c.method = "GET";
  c.key = std::string(key);
  c.max_body = max_bytes;
  if (range) c.headers.emplace_back("Range", RangeHeader(*range));
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  return std::move(a.body);
}

Status S3Client::GetObjectToFile(std::string_view key, const std::string& path,
                                 std::optional<ByteRange> range) {
  Call c;
  c.op = "GetObject";
  c.method = "GET";
  c.key = std::string(key);
  c.response_file = path;
  if (range) c.headers.emplace_back("Range", RangeHeader(*range));
  return Execute(c).status();
}

ObjectStream::ObjectStream(std::unique_ptr<HttpStream> http, std::string where, uint64_t size)
    : http_(std::move(http)), where_(std::move(where)), size_(size) {}
ObjectStream::~ObjectStream() = default;

Result<size_t> ObjectStream::Read(char* buf, size_t size) {
  const size_t want = size_t(std::min<uint64_t>(size, size_ - read_));
  if (want == 0) return size_t{0};
  Result<size_t> got = http_->Read(buf, want);
  if (!got.ok()) return got.status().WithContext(where_);
  if (*got == 0) {
    return Unavailable(where_ + ": the body ended after " + std::to_string(read_) + " of " +
                       std::to_string(size_) + " bytes");
  }
  read_ += *got;
  return got;
}

Result<std::unique_ptr<ObjectStream>> S3Client::OpenObject(std::string_view key,
                                                           std::optional<ByteRange> range) {
  Call c;
  c.op = "GetObject";
  c.method = "GET";
  c.key = std::string(key);
  if (range) c.headers.emplace_back("Range", RangeHeader(*range));
  std::unique_ptr<HttpStream> http;
  c.stream = &http;
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  const std::string where = "S3 GetObject " + config_.bucket + "/" + std::string(key);
  if (http == nullptr) return Internal(where + ": no body stream");
  const std::string length = HeaderValue(a.headers, "Content-Length");
  if (length.empty()) return Corruption(where + ": the answer has no Content-Length");
  const uint64_t size = ToU64(length);
  if (range && range->last && size < *range->last - range->first + 1) {
    // S3 clips a range that runs past the object's end (206 with fewer bytes).
    return InvalidArgument(where + ": " + RangeHeader(*range) + " runs past the end (" +
                           HeaderValue(a.headers, "Content-Range") + ")");
  }
  if (range && range->last && size != *range->last - range->first + 1) {
    return Corruption(where + ": asked for " + RangeHeader(*range) + ", got " + length +
                      " bytes (HTTP " + std::to_string(a.status) + ")");
  }
  return std::make_unique<ObjectStream>(std::move(http), where, size);
}

Result<ObjectInfo> S3Client::HeadObject(std::string_view key) {
  Call c;
  c.op = "HeadObject";
  c.method = "HEAD";
  c.key = std::string(key);
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  ObjectInfo info;
  info.size = ToU64(HeaderValue(a.headers, "Content-Length"));
  info.etag = HeaderValue(a.headers, "ETag");
  info.last_modified = HeaderValue(a.headers, "Last-Modified");
  return info;
}

Status S3Client::DeleteObject(std::string_view key) {
  Call c;
  c.op = "DeleteObject";
  c.method = "DELETE";
  c.key = std::string(key);
  return Execute(c).status();
}

Result<ListObjectsResult> S3Client::ListObjectsV2(std::string_view prefix,
                                                  std::string_view continuation_token,
                                                  int max_keys) {
  if (max_keys < 1 || max_keys > 1000) {
    return InvalidArgument("S3 ListObjectsV2 " + config_.bucket + ": max-keys must be 1..1000");
  }
  Call c;
  c.op = "ListObjectsV2";
  c.method = "GET";
  c.query = {{"list-type", "2"}, {"prefix", std::string(prefix)},
             {"max-keys", std::to_string(max_keys)}};
  if (!continuation_token.empty()) {
    c.query.emplace_back("continuation-token", std::string(continuation_token));
  }
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  if (a.body.find("<ListBucketResult") == std::string::npos) {
    return Corruption("S3 ListObjectsV2 " + config_.bucket + ": the answer is not a ListBucketResult");
  }
  ListObjectsResult out;
  for (std::string_view item : XmlElements(a.body, "Contents")) {
    out.objects.push_back({XmlText(item, "Key"), ToU64(XmlText(item, "Size")), XmlText(item, "ETag")});
  }
  if (XmlText(a.body, "IsTruncated") == "true") {
    out.next_continuation_token = XmlText(a.body, "NextContinuationToken");
    if (out.next_continuation_token.empty()) {
      return Corruption("S3 ListObjectsV2 " + config_.bucket + ": truncated without a NextContinuationToken");
    }
  }
  return out;
}

Result<std::string> S3Client::CreateMultipartUpload(std::string_view key) {
  Call c;
  c.op = "CreateMultipartUpload";
  c.method = "POST";
  c.key = std::string(key);
  c.query = {{"uploads", ""}};
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  std::string id = XmlText(a.body, "UploadId");
  if (id.empty()) {
    return Corruption("S3 CreateMultipartUpload " + config_.bucket + "/" + std::string(key) + ": no UploadId in the answer");
  }
  return id;
}

Result<std::string> S3Client::UploadPart(std::string_view key, std::string_view upload_id,
                                         int part_number, std::string_view bytes) {
  const std::string where = "S3 UploadPart " + config_.bucket + "/" + std::string(key);
  if (part_number < 1 || part_number > 10000) {
    return InvalidArgument(where + ": part number " + std::to_string(part_number) + " is not 1..10000");
  }
  Call c;
  c.op = "UploadPart";
  c.method = "PUT";
  c.key = std::string(key);
  c.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", std::string(upload_id)}};
  c.body = bytes;
  c.payload_hash = Sha256Hex(bytes);
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  std::string etag = HeaderValue(a.headers, "ETag");
  if (etag.empty()) return Corruption(where + ": no ETag in the answer for part " + std::to_string(part_number));
  return etag;
}

Status S3Client::CompleteMultipartUpload(std::string_view key, std::string_view upload_id,
                                         const std::vector<CompletedPart>& parts) {
  const std::string where = "S3 CompleteMultipartUpload " + config_.bucket + "/" + std::string(key);
  if (parts.empty()) return InvalidArgument(where + ": no parts");
  std::string xml = "<CompleteMultipartUpload>";
  for (const CompletedPart& p : parts) {
    xml += "<Part><PartNumber>" + std::to_string(p.part_number) + "</PartNumber><ETag>" +
           XmlEscape(p.etag) + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Call c;
  c.op = "CompleteMultipartUpload";
  c.method = "POST";
  c.key = std::string(key);
  c.query = {{"uploadId", std::string(upload_id)}};
  c.body = xml;
  c.payload_hash = Sha256Hex(xml);
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  // S3 may answer 200 and still fail: the body is then an <Error>.
  if (a.body.find("<Error>") != std::string::npos) {
    return Unavailable(where + ": HTTP 200 with error " + XmlText(a.body, "Code") + ": " +
                       XmlText(a.body, "Message"));
  }
  return Status::Ok();
}

Status S3Client::AbortMultipartUpload(std::string_view key, std::string_view upload_id) {
  Call c;
  c.op = "AbortMultipartUpload";
  c.method = "DELETE";
  c.key = std::string(key);
  c.query = {{"uploadId", std::string(upload_id)}};
  return Execute(c).status();
}

Result<ListMultipartUploadsResult> S3Client::ListMultipartUploads(std::string_view prefix,
                                                                  std::string_view key_marker,
                                                                  std::string_view upload_id_marker) {
  Call c;
  c.op = "ListMultipartUploads";
  c.method = "GET";
  c.query = {{"uploads", ""}};
  if (!prefix.empty()) c.query.emplace_back("prefix", std::string(prefix));
  if (!key_marker.empty()) c.query.emplace_back("key-marker", std::string(key_marker));
  if (!upload_id_marker.empty()) c.query.emplace_back("upload-id-marker", std::string(upload_id_marker));
  BLZ_ASSIGN_OR_RETURN(Answer a, Execute(c));
  if (a.body.find("<ListMultipartUploadsResult") == std::string::npos) {
    return Corruption("S3 ListMultipartUploads " + config_.bucket +
                      ": the answer is not a ListMultipartUploadsResult");
  }
  ListMultipartUploadsResult out;
  for (std::string_view item : XmlElements(a.body, "Upload")) {
    out.uploads.push_back({XmlText(item, "Key"), XmlText(item, "UploadId"), XmlText(item, "Initiated")});
  }
  if (XmlText(a.body, "IsTruncated") == "true") {
    out.next_key_marker = XmlText(a.body, "NextKeyMarker");
    out.next_upload_id_marker = XmlText(a.body, "NextUploadIdMarker");
  }
  return out;
}

Result<std::string> S3Client::PresignUrl(std::string_view method, std::string_view key,
                                         int64_t expires_seconds, int64_t unix_seconds) const {
  BLZ_ASSIGN_OR_RETURN(S3Endpoint ep, ParseS3Endpoint(config_.endpoint));
  const std::string host = config_.path_style ? ep.host : config_.bucket + "." + ep.host;
  const bool default_port = ep.port == (ep.tls ? 443 : 80);
  PresignRequest req;
  req.method = std::string(method);
  req.host = default_port ? host : host + ":" + std::to_string(ep.port);
  req.path = (config_.path_style ? "/" + config_.bucket : std::string()) + "/" + std::string(key);
  req.expires_seconds = expires_seconds;
  BLZ_ASSIGN_OR_RETURN(Presigned p, s3::PresignUrl(req, config_.credentials, config_.region, "s3",
                                                    unix_seconds));
  return std::string(ep.tls ? "https://" : "http://") + req.host + p.path_and_query;
}

}  // namespace blz::store::s3
