// `blz pull HOST:PORT/NAME:TAG [-o DIR]`: fetches a model version into the local store and
// optionally unpacks it.
//
// 1. GET the manifest (by tag or digest) and find its archive layer.
// 2. If the local store holds that archive (re-verified by SHA-256): nothing to download.
// 3. Else, if the store holds another version of the same registry+repository, GET a patch
//    from the most recently pulled one (/v2/<name>/blz/patch?from=&to=), apply it
//    (patcher::ApplyPatchToSink: checks the base, every chunk and the target's SHA-256) and
//    keep the result. The model's files are written while it applies, from the same decoded
//    bytes (client/pull_stream.h: each piece's xxh3-64 checked as they go, and each file's
//    SHA-256 where it names the file, in the snapshot), so the new archive is hashed once and
//    never read back (issue 28). Any failure of that route (404, a patch not smaller than the
//    archive, a bad patch) falls back to step 4; the reason is reported in PullResult::notes.
// 4. Else (no usable base) GET the archive's full patch (/v2/<name>/blz/patch?to=, no from:
//    the archive compressed per tensor, docs/patch-format.md), rebuild it with
//    patcher::ApplyFullPatch (every piece and the SHA-256 checked) and keep the result. A
//    server that does not serve full patches (404, 405, an older server's 400) falls back to
//    step 5 silently; any other failure (a full patch not smaller than the archive, a bad one)
//    falls back with a note.
// 5. Else download the archive blob, hashing it once downloaded, then feed it in one read to
//    the same file streamer as the patch routes (patcher::FeedArchiveToSink): its files are
//    checked and written in that read, not verified and then unpacked.
// allow_patch = false (`--no-patch`) skips steps 3 and 4.
// Before step 1, without asking the registry (client/local_ref.h): a reference by digest
// (archive or manifest digest) that the store holds under that registry name and repository
// is served from the store; with `offline`
// a tag is resolved from what the store last recorded for it, and a version not held is
// kNotFound naming the reference (the registry is never contacted, no token is needed).
// Every download (patch, full patch, archive) goes through DownloadResumable
// (client/blob_download.h): it is kept in the store's partial/ directory while it runs, retried
// per PullOptions::retry (each retry reported to on_retry), fetched in up to `parallel` Range
// parts when large, and resumed by the next pull after an interruption (Ctrl-C, kill -9, a
// dropped connection, a registry restart). A transport failure of the patch route is retried
// there first; only a failure after the last retry falls back (with a note).
// One fetch per archive per store: a pull holds the archive's FetchLock (partial_download.h)
// from the "already held?" check to publication, so a second pull of the same version waits,
// then finds it held.
// Downloads are published by rename only after their digest is verified; nothing is written
// to the output before that. With an output directory the model is built in a private
// ".blz-pull-<pid>-*" directory beside it and renamed into place at the end (an existing
// directory is refused before any download): by every route as it applies or reads the
// download, or, for a version held already, by unpacking the archive (formats::Unpack).
// Without one, `snapshot` makes the version's loadable directory in the store
// (client/snapshot.h); the routes write its files as they go, into a staging directory under
// the store's tmp/, from which MakeSnapshot moves them into files/. Without either, the routes
// check the files without writing them. A route's files are published only after the
// archive's SHA-256 and every piece were checked; on any failure they are removed before the
// next route runs. Checks of a pulled archive: every chunk's xxh3-64 (patch routes), the
// archive's SHA-256 (manifest), every piece's xxh3-64 and every file's size (archive header),
// each file's SHA-256 where it names the file (the snapshot's files/), the stored
// safetensors/GGUF headers (formats::CheckStoredHeaders). The header's own digest fields are
// not otherwise recomputed: the archive's SHA-256 covers the bytes they describe (see
// client/pull_stream.h; the registry checks them at push, `blz verify` on demand).
// `filter` (--include/--exclude) chooses the files written to either. A pull killed midway
// leaves only staged temp files, removed by the next run and partial downloads that the rerun
// continues.
#ifndef BLZ_CLIENT_PULL_H_
#define BLZ_CLIENT_PULL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/blob_download.h"
#include "client/http_client.h"
#include "client/progress.h"
#include "client/retry.h"
#include "client/snapshot.h"
#include "core/status.h"

namespace blz::client {

struct PullOptions {
  std::string cache_dir;   // local store; "" = from the environment
  std::string output_dir;  // unpack here; "" = keep the archive in the store only
  ProgressMode progress = ProgressMode::kOff;  // progress on stderr (client/progress.h)
  bool allow_patch = true;
  HttpClientOptions http;
  std::optional<std::string> token;  // nullopt = ResolveToken() (BLZ_TOKEN, then auth file)
  // Downloads: retries (a stall is retry.stall_timeout without a byte), parallel Range parts
  // (parts of clamp(size / parallel, min_part_bytes, max_part_bytes) bytes), and a log of
  // every retry (the CLI prints them with --verbose).
  RetryPolicy retry;
  int parallel = kDefaultParallel;
  uint64_t min_part_bytes = kDefaultMinPartBytes;
  uint64_t max_part_bytes = kDefaultMaxPartBytes;
  RetryLogFn on_retry;
  bool offline = false;    // never contact the registry (--offline, BLZ_OFFLINE=1)
  bool snapshot = false;   // without output_dir: make the snapshot directory (client/snapshot.h)
  FileFilter filter;       // files written to output_dir or the snapshot
};

struct PullResult {
  std::string reference;        // canonical form of the reference pulled
  std::string manifest_digest;
  std::string digest;           // the archive's "sha256:..." (the model version)
  std::string archive_path;     // the archive in the local store ("" when kept_as_files)
  // The store keeps the version as its files (the snapshot's), with no archive beside them
  // (client/local_store.h): a default pull of a whole model.
  bool kept_as_files = false;
  std::string output;           // the unpacked directory (output_dir or the snapshot); "" if none
  bool snapshot = false;        // output is the snapshot directory in the store
  bool snapshot_reused = false;  // ... which held this version (and filters) already
  uint64_t bytes_downloaded = 0;  // blob / patch bytes received (manifest excluded)
  uint64_t full_bytes = 0;        // size of the archive
  bool used_patch = false;        // rebuilt from a held base + a patch
  std::string patch_from;       // base archive digest when a patch was used
  std::string patch_from_name;  // and how reports name it: NAME:TAG or NAME@<12 hex>
  bool used_full_patch = false;   // rebuilt from the archive's full patch (no base)
  // How the archive arrived: "local" (already held), "patch", "full-patch" or "archive" (the
  // raw blob). Served from the store without asking the registry: "local" and `offline`.
  std::string transfer;
  bool cache_hit = false;       // the store already held the archive
  bool offline = false;         // served from the store without contacting the registry
  std::vector<std::string> notes;  // fallbacks and repairs worth telling the user
  uint64_t bytes_resumed = 0;     // bytes kept from an interrupted earlier download
  int retries = 0;                // transfer retries (all downloads of this pull)
  bool waited_for_lock = false;   // another pull of the same version held the fetch lock
};

Result<PullResult> Pull(const std::string& reference, const PullOptions& options);

class RegistryClient;
struct Reference;
struct ModelManifest;

// The manifest `ref` names, as every pull reads it: GET /v2/<name>/manifests/<tag|digest>,
// retried per `retry`. A @sha256: that names the model version (the archive digest push
// prints) rather than the manifest is resolved through /blz/bases. `*digest` is the manifest's
// digest. Errors name `what` ("pull", "pull --lossy") and the reference: the registry's,
// kCorruption (not a blz model manifest), kDigestMismatch (a by-digest reference that is
// neither the manifest's nor its archive's digest).
Result<ModelManifest> FetchPullManifest(RegistryClient* client, const Reference& ref,
                                        const RetryPolicy& retry, const RetryLogFn& on_retry,
                                        const std::string& what, std::string* digest);

// The download settings every pull's downloads share: ref's host, port and scheme, and
// `options`' http, retry, parallel parts and retry log (no progress or byte counter).
DownloadOptions PullDownloadOptions(const Reference& ref, const PullOptions& options);

// Writes a new directory `out_dir` the way pull -o does: `build` fills a private directory
// (the path it is given does not exist yet) beside out_dir, which is then renamed into place
// (RENAME_NOREPLACE) and the parent synced, so out_dir appears complete or not at all. The
// private directory is ".blz-pull-<pid>-*" and removed on every return; ones left by a killed
// process are removed first. Errors: build's, kAlreadyExists, kIOError.
Status BuildDirAtomically(const std::string& out_dir,
                          const std::function<Status(const std::string& built)>& build);

}  // namespace blz::client

#endif  // BLZ_CLIENT_PULL_H_
