// Resumable chunked blob uploads (OCI distribution-spec "Pushing a blob in chunks").
//
// UploadBlobResumable:
//  1. Looks for a session remembered in the store (<store>/uploads/<key>.json, key =
//     SHA-256("<registry>\n<repository>\n<digest>"), or with "\n<patch_from>" appended for a
//     patch upload, {"registry","repository","digest","size","location"[,"patch_from"]}) and
//     asks the registry how far it got: GET <location> (204 with
//     `Range: 0-<last>` / Blz-Upload-Offset). A session the registry no longer knows (404)
//     is forgotten and a new one opened.
//  2. Otherwise opens one: POST /v2/<name>/blobs/uploads/ (202 + Location), and remembers it.
//  3. Sends the file in chunks of `chunk_bytes`: PATCH <location> with
//     `Content-Range: <first>-<last>` and the bytes streamed from the file; each 202 answer
//     gives the new Location and offset.
//  4. On a failure worth retrying (connection dropped or stalled, 408, 429, 5xx) it waits per
//     RetryPolicy, asks GET <location> for the offset the registry holds and continues from
//     there; a 416 (the registry holds a different amount than assumed) does the same.
//  5. Closes with PUT <location>?digest=<digest> (no body): 201 and a matching
//     Docker-Content-Digest. A dropped connection during the PUT is followed by HEAD of the blob
//     (the registry may have committed it). The remembered session is then removed.
// Attempts are counted as for downloads: in a row, reset by progress.
// Errors: the registry's refusals (StatusFromResponse), kDigestMismatch, kIOError reading the
// file, kUnavailable / kIOError after the last retry (the session is kept: a re-run
// continues it).
#ifndef BLZ_CLIENT_BLOB_UPLOAD_H_
#define BLZ_CLIENT_BLOB_UPLOAD_H_

#include <cstdint>
#include <string>

#include "client/http_client.h"
#include "client/retry.h"
#include "core/status.h"

namespace blz::client {

inline constexpr uint64_t kDefaultChunkBytes = 64ull << 20;

struct UploadOptions {
  std::string host;
  uint16_t port = 0;
  HttpClientOptions http;  // its io_timeout is replaced by retry.stall_timeout
  std::string registry;    // "host:port": part of the session key and of messages
  std::string token;       // bearer token; "" = anonymous
  std::string store_dir;   // where sessions are remembered; "" = not remembered
  RetryPolicy retry;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  RetryLogFn on_retry;
  ProgressFn progress;  // (bytes the registry holds, size)
  // A patch upload (docs/registry-api.md, "Patch uploads"): the file is a patch from this base
  // archive (a digest) to blob `digest`; the session is opened with ?blz-patch-from= and
  // remembered under its own key (the base is part of it), so a full upload of the same blob
  // never continues a patch session or the other way round.
  std::string patch_from;
};

struct UploadResult {
  uint64_t bytes_sent = 0;     // body bytes sent by this call (all attempts)
  uint64_t resumed_from = 0;   // bytes the registry already held from an earlier run
  int retries = 0;
  int chunks = 0;
};

// Uploads the `size` bytes of `file_path` as blob `digest` of repository `name`.
Result<UploadResult> UploadBlobResumable(const std::string& name, const std::string& digest,
                                         const std::string& file_path, uint64_t size,
                                         const UploadOptions& options);

}  // namespace blz::client

#endif  // BLZ_CLIENT_BLOB_UPLOAD_H_
