// `blz push DIR|M.blz HOST:PORT/NAME:TAG`: uploads a model version to a registry.
//
// A directory (or a single .safetensors file) is first packed to a temporary archive in the
// local store's staging area (formats::Pack); a .blz archive is pushed as is: hashed, then
// checked with BlzArchive::Verify() before its manifest is PUT: by a registry whose answers
// carry `Blz-Verifies-Archives: true` (blz serve: 400 MANIFEST_INVALID naming the tensor, see
// docs/registry-api.md), otherwise, or with `verify_locally`, here as well, on other threads
// while its blobs are sent, the manifest PUT only when that passed (kCorruption otherwise).
// Either way the blobs sent are left to the registry's garbage collection. The config blob
// and the manifest are built exactly as docs/registry-api.md specifies. Each blob is HEADed
// first and uploaded (POST, then PUT ?digest=, streamed from the file) only when the registry
// lacks it; the manifest is PUT by tag last, so a tag never points at missing blobs.
//
// Surviving interruptions (docs/client.md):
// - An archive larger than `chunk_bytes` is uploaded in resumable chunks
//   (client/blob_upload.h): the session is remembered in the store, so a re-run after Ctrl-C or
//   a dropped connection asks the registry how much it holds and sends only the rest; failures
//   are retried per `retry`.
// - Packing is not repeated: the packed archive of a directory (or .safetensors file) is kept
//   in <store>/packed/<fingerprint>.blz with <fingerprint>.json {"digest":...}. The
//   fingerprint is the SHA-256 of "blz-pack-v1" and, for every regular file of the input in
//   path order, its relative path, size, mtime (ns), inode and device: any edit, replacement
//   or touch of an input file changes it. It is computed before and after packing, and the
//   archive is kept only when both agree (the input did not change while being packed). A
//   kept archive is used only when its SHA-256 still equals the recorded digest (else it is
//   deleted and the input packed again). Concurrent pushes from one machine (any inputs)
//   share <store>/packed/ safely: an archive in use is never removed, and a new one replaces
//   only those no running push uses (client/pack_cache.h).
//
// Sent as a patch (issue 27; docs/registry-api.md "Patch uploads"): when the registry lacks the
// archive, the client offers the archives it holds (the version a pushed snapshot directory was
// pulled as, client/snapshot.h; then those of the same registry+repository, most recent first;
// then any other) to GET /v2/<name>/blz/bases?push=1, which keeps the versions the caller may
// read of the same structure or repository, best first. The patch from the first one is
// computed locally (patcher::CreatePatch) and, when smaller than the archive, uploaded with
// ?blz-patch-from= (resumable like any chunked upload, client/blob_upload.h); the registry
// applies it and checks the archive digest. A patch not smaller, a registry without the
// extension or any failure falls back to the full upload, with a note saying why, except a
// patch upload the network cut (kUnavailable once the retries are spent): that fails the push
// like a cut full upload, and running the same push again continues the kept patch session.
//
// Kept as a local version (as docker keeps what it pushes): once the tag is set, the archive
// enters the local store (hard-linked from packed/; a .blz given was copied into the store's
// staging area in the pass that hashed it, before anything was sent, and is moved in) and is
// recorded under the reference and tag pushed, with its manifest digest, as a pull would
// record it: later pulls patch from it, a pull of the same reference finds it held, and it is
// available offline. A failure to keep it does not fail the push (a note says why).
#ifndef BLZ_CLIENT_PUSH_H_
#define BLZ_CLIENT_PUSH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/blob_upload.h"
#include "client/http_client.h"
#include "client/progress.h"
#include "client/retry.h"
#include "core/status.h"

namespace blz::client {

struct PushOptions {
  std::string cache_dir;  // local store (staging for packing); "" = from the environment
  ProgressMode progress = ProgressMode::kOff;  // progress on stderr (client/progress.h)
  HttpClientOptions http;
  std::optional<std::string> token;  // nullopt = ResolveToken() (BLZ_TOKEN, then auth file)
  RetryPolicy retry;                      // chunked uploads (see above)
  uint64_t chunk_bytes = kDefaultChunkBytes;
  RetryLogFn on_retry;
  bool keep = true;  // keep the version in the local store (see above)
  bool allow_patch = true;  // try a patch upload (see above); false = `blz push --no-patch`
  // Verify a .blz given here even when the registry says it does (see above; `blz push
  // --verify-locally`): the error is then this client's, before the manifest is PUT.
  bool verify_locally = false;
};

struct PushResult {
  std::string reference;        // canonical "host:port/name:tag"
  std::string manifest_digest;  // "sha256:..." of the manifest as pushed
  std::string archive_digest;   // the model version
  uint64_t archive_size = 0;
  std::string config_digest;
  uint64_t bytes_uploaded = 0;  // blob bytes actually sent
  uint64_t total_bytes = 0;     // archive + config sizes
  int blobs_uploaded = 0;
  int blobs_skipped = 0;        // already in the registry
  bool packed = false;          // the input was packed first
  bool reused_pack = false;     // ... or its packed archive was kept from an earlier run
  uint64_t bytes_resumed = 0;   // archive bytes the registry held from an interrupted push
  int retries = 0;
  bool kept = false;            // the version is held in the local store
  std::vector<std::string> notes;  // why it was not kept / not sent as a patch
  bool uploaded_as_patch = false;  // the archive was sent as a patch (see above)
  std::string patch_from;          // ... from this archive digest
  std::string patch_from_name;     // ... named NAME:TAG (or NAME@<12 hex>) as the registry does
  uint64_t patch_bytes = 0;        // ... of this many bytes
};

// Errors: kInvalidArgument (bad reference, a digest reference), kNotFound (input), the
// packing / archive errors of formats, and the registry's (see registry_client.h).
Result<PushResult> Push(const std::string& input, const std::string& reference,
                        const PushOptions& options);

}  // namespace blz::client

#endif  // BLZ_CLIENT_PUSH_H_
