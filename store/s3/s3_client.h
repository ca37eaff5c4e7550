// A small synchronous S3 client: objects, ranges, listings and multipart uploads, signed with
// SigV4 (store/s3/sigv4.h) over its own minimal HTTP/1.1 (Boost.Beast over TCP, TLS via Asio SSL
// for https endpoints, peer certificate verified against the system store). store/ must not
// depend on client/, hence no shared HTTP code.
//
// Keys are full object keys inside S3Config::bucket: the client does NOT apply
// S3Config::prefix (the storage driver does). Addressing: path style
// (http://HOST/BUCKET/KEY) when S3Config::path_style, else virtual-host style
// (http://BUCKET.HOST/KEY).
//
// Every request: a fresh connection (no keep-alive), a timeout of S3Config::timeout on connect
// and on every read and write, and up to S3Config::max_attempts attempts with exponential
// backoff (S3Config::backoff, doubled each time, capped at 8 s) when the connection fails or
// the server answers 5xx (incl. 503 SlowDown). 4xx answers and untrusted TLS certificates are
// never retried.
//
// Errors (messages name the operation, bucket, key, HTTP status and S3 error Code, never the
// credentials):
//   kNotFound      404 (NoSuchKey, NoSuchBucket, NoSuchUpload)
//   kUnauthorized  403 (SignatureDoesNotMatch, InvalidAccessKeyId, AccessDenied)
//   kAlreadyExists 409, 412 (a conditional write lost)
//   kInvalidArgument other 4xx (EntityTooSmall, InvalidRange, ...), or bad arguments
//   kUnavailable   5xx after the last attempt; connect/read/write failures and timeouts
//   kIOError       a local file could not be read or written
//   kCorruption    an unparsable XML answer
//
// Not thread-safe: one S3Client per thread (they are cheap).
#ifndef BLZ_STORE_S3_S3_CLIENT_H_
#define BLZ_STORE_S3_S3_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/s3/s3_config.h"

namespace blz::store::s3 {

// Inclusive byte range, as in HTTP "Range: bytes=first-last". last = nullopt: to the end.
struct ByteRange {
  uint64_t first = 0;
  std::optional<uint64_t> last;
};

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;           // as sent, with its quotes
  std::string last_modified;  // HTTP date as sent
};

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  std::string etag;
};

struct ListObjectsResult {
  std::vector<ListedObject> objects;
  // Set when the listing is truncated: pass it back to get the next page.
  std::string next_continuation_token;
};

struct CompletedPart {
  int part_number = 0;  // 1..10000
  std::string etag;     // as UploadPart returned it
};

struct MultipartUpload {
  std::string key;
  std::string upload_id;
  std::string initiated;  // ISO 8601 as S3 sends it, e.g. "2026-11-27T01:02:03.000Z"
};

struct ListMultipartUploadsResult {
  std::vector<MultipartUpload> uploads;
  // Set when truncated: pass both back as markers for the next page.
  std::string next_key_marker;
  std::string next_upload_id_marker;
};

class HttpStream;  // store/s3/s3_http.h

// The body of a GET (S3Client::OpenObject), read as the caller asks: the connection stays open
// until it is read or the stream destroyed. Owns its connection (it may outlive the client).
class ObjectStream {
 public:
  ObjectStream(std::unique_ptr<HttpStream> http, std::string where, uint64_t size);
  ~ObjectStream();
  ObjectStream(const ObjectStream&) = delete;
  ObjectStream& operator=(const ObjectStream&) = delete;
  // The body's length (Content-Length).
  uint64_t size() const { return size_; }
  // Up to `size` more bytes into `buf`; 0 once all size() bytes were read. Never retried (the
  // bytes before were handed out). Errors: kUnavailable naming the object (the connection
  // failed or timed out; the body ended early).
  Result<size_t> Read(char* buf, size_t size);

 private:
  std::unique_ptr<HttpStream> http_;
  std::string where_;
  uint64_t size_ = 0;
  uint64_t read_ = 0;
};

// S3 requires every part but the last of a multipart upload to be at least this large.
inline constexpr uint64_t kMinMultipartPartSize = 5ull << 20;

class S3Client {
 public:
  // `config` must have bucket, endpoint, region and credentials set (ParseS3Url +
  // ApplyS3Environment). The endpoint is parsed on first use.
  explicit S3Client(S3Config config);

  const S3Config& config() const { return config_; }

  // PUT Bucket (no LocationConstraint). An existing bucket of the same owner is OK.
  Status CreateBucket();

  // PUT Object from memory; the payload hash is the SHA-256 of `bytes`.
  Status PutObject(std::string_view key, std::string_view bytes);
  // PUT Object streamed from `path` (hashed first, then sent in chunks; the file must not
  // change in between).
  Status PutObjectFromFile(std::string_view key, const std::string& path);

  // GET Object (or a range of it) to memory. A body larger than `max_bytes` is kTooLarge.
  // A range past the end is kInvalidArgument (416 InvalidRange).
  Result<std::string> GetObject(std::string_view key, std::optional<ByteRange> range = {},
                                uint64_t max_bytes = 256ull << 20);
  // GET Object (or a range) streamed to `path` (created or truncated). On error the file may
  // hold a partial body.
  Status GetObjectToFile(std::string_view key, const std::string& path,
                         std::optional<ByteRange> range = {});

  // GET Object (or a range), its body streamed: returns once the headers are read, so the
  // connect/5xx retries happen only before the first byte. A closed range must come back
  // exactly that long (kInvalidArgument when it runs past the object's end, which S3 clips;
  // kCorruption when longer). A range starting past the end is kInvalidArgument too.
  Result<std::unique_ptr<ObjectStream>> OpenObject(std::string_view key,
                                                   std::optional<ByteRange> range = {});

  Result<ObjectInfo> HeadObject(std::string_view key);
  // DELETE Object. Deleting a missing key is OK (S3 answers 204).
  Status DeleteObject(std::string_view key);

  // ListObjectsV2: up to `max_keys` (1..1000) keys starting with `prefix`, after
  // `continuation_token` (empty: from the start).
  Result<ListObjectsResult> ListObjectsV2(std::string_view prefix,
                                          std::string_view continuation_token = {},
                                          int max_keys = 1000);

  // Multipart upload: Create returns the upload id; UploadPart returns the part's ETag.
  Result<std::string> CreateMultipartUpload(std::string_view key);
  Result<std::string> UploadPart(std::string_view key, std::string_view upload_id,
                                 int part_number, std::string_view bytes);
  Status CompleteMultipartUpload(std::string_view key, std::string_view upload_id,
                                 const std::vector<CompletedPart>& parts);
  Status AbortMultipartUpload(std::string_view key, std::string_view upload_id);
  // Uploads started and neither completed nor aborted (for stale-upload cleanup), keys
  // starting with `prefix`.
  Result<ListMultipartUploadsResult> ListMultipartUploads(std::string_view prefix,
                                                          std::string_view key_marker = {},
                                                          std::string_view upload_id_marker = {});

  // A presigned URL ("http://HOST/BUCKET/KEY?X-Amz-...") for `method` on `key`, valid
  // `expires_seconds` (1..604800) from `unix_seconds`. kInvalidArgument outside that range.
  Result<std::string> PresignUrl(std::string_view method, std::string_view key,
                                 int64_t expires_seconds, int64_t unix_seconds) const;

 private:
  struct Call;
  struct Answer;
  Result<Answer> Execute(const Call& call);

  S3Config config_;
};

}  // namespace blz::store::s3

#endif  // BLZ_STORE_S3_S3_CLIENT_H_
