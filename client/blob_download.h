// Resumable, retried, optionally parallel downloads of blobs and patches into the local store
// (the partial/ layout of client/partial_download.h).
//
// DownloadResumable(request):
//  1. Loads the partial download of request.key, if any, and keeps it when it describes the
//     same bytes (same kind, same expected digest and size); otherwise starts from zero.
//  2. When the size is unknown (patches: the registry computes them on demand), a first GET
//     asks for `Range: bytes=0-<min_part_bytes - 1>`; the 206 answer's Content-Range gives the
//     total and its Docker-Content-Digest the patch's digest (a 200 answer means the whole body
//     comes in that one stream).
//  3. Plans parts (PlanParts) and fetches the missing bytes of each with
//     `Range: bytes=<next>-<end - 1>`, up to options.parallel parts at a time, each with its
//     own HttpClient (one connection each), writing with pwrite into one preallocated file.
//     Every answer is checked against what is known: the Content-Range must start where asked
//     and announce the same total, and the Docker-Content-Digest (when sent) must not change; a
//     changed resource (say a patch recomputed differently after a registry upgrade) discards
//     the partial and starts again from zero.
//  4. Retries each part per RetryPolicy (client/retry.h): transport failures, stalls, 408,
//     429 (Retry-After honoured) and 5xx; each retry goes to options.on_retry.
//  5. When every part is complete: one SHA-256 pass over the file (parallel parts cannot be
//     hashed in stream order) against the expected digest (blobs: request.expected_digest;
//     patches: the registry's Docker-Content-Digest). A mismatch deletes the partial; when
//     bytes from an earlier run were kept, the download starts once more from zero (reported in
//     DownloadResult::notes), else kDigestMismatch. The verified file is renamed to
//     `dest_path` and the partial's sidecar removed.
//
// REQUIRES: the caller holds the FetchLock of request.for_digest (one writer per partial).
// Errors: kNotFound / kUnauthorized / kInvalidArgument for the registry's 4xx (see
// StatusFromResponse), kUnsupported for a full patch the registry does not serve (404, 405,
// 400 DIGEST_INVALID) or a registry that ignores Range on a resumed part, kTooLarge when the
// body exceeds request.max_bytes, kDigestMismatch, kUnavailable / kIOError after the last
// retry (the message names the attempts and the byte reached; the partial is kept for the next
// run).
#ifndef BLZ_CLIENT_BLOB_DOWNLOAD_H_
#define BLZ_CLIENT_BLOB_DOWNLOAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "client/http_client.h"
#include "client/retry.h"
#include "core/status.h"

namespace blz::client {

inline constexpr uint64_t kDefaultMinPartBytes = 64ull << 20;
inline constexpr uint64_t kDefaultMaxPartBytes = 512ull << 20;
inline constexpr int kDefaultParallel = 4;
inline constexpr int kMaxParallel = 64;

struct DownloadRequest {
  std::string target;                // origin-form GET target, e.g. "/v2/org/m/blobs/sha256:..."
  std::vector<HttpHeader> headers;   // Authorization, Accept
  std::string kind;                  // "blob", "patch" or "full-patch"
  std::string what;                  // for messages: "blob sha256:...", "patch A -> B"
  std::string key;                   // partial key (partial_download.h)
  std::string for_digest;            // the archive the download serves
  std::string expected_digest;       // known for blobs; "" for patches
  uint64_t expected_size = 0;        // 0 = unknown
  uint64_t max_bytes = 0;            // 0 = no cap; larger: kTooLarge before any body byte
};

struct DownloadOptions {
  std::string host;  // the registry (one HttpClient per part is made from these)
  uint16_t port = 0;
  HttpClientOptions http;  // its io_timeout is replaced by retry.stall_timeout
  std::string registry;    // "host:port", for messages
  RetryPolicy retry;
  int parallel = kDefaultParallel;
  uint64_t min_part_bytes = kDefaultMinPartBytes;
  uint64_t max_part_bytes = kDefaultMaxPartBytes;
  RetryLogFn on_retry;
  ProgressFn progress;  // (bytes held, total); called from one thread at a time
  // When set, incremented by every body byte received, also by calls that fail (the result's
  // bytes_received only exists on success).
  std::atomic<uint64_t>* bytes_counter = nullptr;
};

struct DownloadResult {
  std::string digest;          // "sha256:<hex>" of the bytes (verified)
  uint64_t size = 0;
  uint64_t bytes_received = 0; // body bytes received by this call (all attempts)
  uint64_t resumed_from = 0;   // bytes already held from an earlier run
  int retries = 0;
  int parts = 0;
  bool server_cache_hit = false;  // Blz-Patch-Cache: hit
  std::vector<std::string> notes;
};

struct PartPlan {
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive
};

// Splits [begin, end) into parts of clamp((end - begin) / parallel, min_part, max_part) bytes
// (the last one shorter); a single part when parallel <= 1 or the range is at most min_part.
std::vector<PartPlan> PlanParts(uint64_t begin, uint64_t end, int parallel, uint64_t min_part,
                                uint64_t max_part);

// See the file comment. `store_dir` is the local store's directory.
Result<DownloadResult> DownloadResumable(const std::string& store_dir,
                                         const DownloadRequest& request,
                                         const DownloadOptions& options,
                                         const std::string& dest_path);

}  // namespace blz::client

#endif  // BLZ_CLIENT_BLOB_DOWNLOAD_H_
