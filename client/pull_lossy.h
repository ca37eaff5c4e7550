// `blz pull REF --lossy STRATEGY [--max-error E] [-o DIR]`: a LOSSY approximation of a model
// version, rebuilt from a version held locally plus a lossy delta (.wdelta) the registry
// computes (GET /v2/<name>/blz/delta, docs/registry-api.md "Lossy deltas"; docs/client.md).
//
// 1. Refuses an existing output directory (kAlreadyExists) before anything else. Without -o the
//    output is ./<repository base name>-lossy-<strategy>.
// 2. GETs the manifest of REF (as Pull does) and chooses a held base the way a lossless pull
//    does (client/base_choice.h). No held base: kNotFound "pull --lossy needs a held base ...",
//    and nothing is downloaded or written.
// 3. GETs the delta's report (/blz/delta-report?...&async=1, polled while the registry
//    computes): its digest, size (total and tensor records), error against the true target
//    and the lossless codec's tensor bytes. With max_error, a model rel_l2 above it is refused
//    (kInvalidArgument) before the delta is downloaded; with strategy "auto" max_error is also
//    what the registry codes to.
// 3a. Strategy "auto" never downloads more than the lossless patch: it also GETs the lossless
//    patch's report (/blz/patch-report?from=&to=&async=1: its total and tensor bytes) and,
//    when the delta is not smaller than that patch (total against total), pulls the version
//    losslessly instead (Pull, into the same output directory; recorded in the store like any
//    pull) and says so in `notes` (lossless_fallback = true, lossy = false). Without a patch
//    report (an older registry) the delta's total is compared with the lossless codec's
//    tensor bytes, a lower bound of the patch.
// 4. Downloads the delta resumably (client/blob_download.h, kind "lossy-delta") and verifies its
//    SHA-256 against the report's digest (and the Docker-Content-Digest).
// 5. lossy::ApplyDelta on the held base's archive (its parent hash checked) into a staging
//    directory beside the output, adds the label file blz-lossy.json (below) and renames the
//    result into place: the output appears complete or not at all. A result whose error is
//    zero on every tensor (the registry's "lossy": false, or rel_l2 and max_abs both 0) is
//    labelled exact ("lossy": false), not LOSSY.
// 6. Records a use of the held base in <store>/usage.json (client/usage.h): the base served
//    this pull, so a budgeted prune weighs it. A failure to record is a note, not an error.
//
// A lossy reconstruction is a different model: it is NEVER recorded in the local store (not
// under the target's digest, not under its own: the store holds registry versions, which later
// pulls offer as patch bases). Its own digest is ApplyDelta's output_digest. The label file
// <output>/blz-lossy.json: {"lossy": true|false, "warning", "reference", "approximates" (the
// target archive digest), "base", "base_name", "strategy", "params", "delta_digest",
// "output_digest", "error" {rel_l2, delta_rel_l2, cosine, max_abs}, "delta_bytes",
// "delta_tensor_bytes", "lossless_bytes", "full_bytes"}.
#ifndef BLZ_CLIENT_PULL_LOSSY_H_
#define BLZ_CLIENT_PULL_LOSSY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/pull.h"
#include "core/status.h"

namespace blz::client {

inline constexpr char kLossyLabelFile[] = "blz-lossy.json";

struct LossyPullOptions {
  // cache_dir, output_dir ("" = the default above), progress, http, token, retry, parallel;
  // allow_patch is ignored.
  PullOptions pull;
  std::string strategy;             // sparse | quantized | int4 | bitdelta | lowrank | auto
  std::optional<double> max_error;  // see step 3; (0, 1]
  // Passed to the registry (docs/registry-api.md "Lossy deltas"); unset = its default.
  std::optional<double> sparsity;     // strategy sparse only; [0, 1)
  std::optional<double> rank_energy;  // strategies lowrank and auto only; (0, 1]
};

struct LossyPullResult {
  std::string reference;
  std::string manifest_digest;
  std::string target_digest;   // the version approximated (NOT what was written)
  std::string base_digest;     // the held archive the delta applies to
  std::string base_name;       // how reports name it: NAME:TAG or NAME@<12 hex>
  std::string strategy;
  std::string params;          // the registry's canonical key of strategy and options
  std::string delta_digest;
  uint64_t delta_bytes = 0;         // the .wdelta's size
  uint64_t delta_tensor_bytes = 0;  // its tensor records (without header and verbatim files)
  uint64_t lossless_bytes = 0;  // the lossless patch codec's bytes for the same tensors
  uint64_t full_bytes = 0;      // the target tensors' bytes
  // The lossless patch base -> target (auto only; 0 when unknown): total and tensor pieces.
  uint64_t patch_bytes = 0;
  uint64_t patch_tensor_bytes = 0;
  uint64_t bytes_downloaded = 0;
  // The error against the true target, as the registry measured it (the client lacks it).
  // delta_rel_l2 = ||r - t|| / ||t - b||: the share of the update (target - base) lost.
  std::optional<double> rel_l2, delta_rel_l2, cosine, max_abs;
  // False when the result has zero error on every tensor (or is the lossless fallback).
  bool lossy = true;
  // auto only: the delta was not smaller than the lossless patch, so the version was pulled
  // losslessly (`lossless` is that pull; output_digest and delta_digest stay empty).
  bool lossless_fallback = false;
  PullResult lossless;
  std::string output;          // the directory written
  std::string output_digest;   // the reconstruction's own digest (docs/wdelta.md)
  bool base_verified = false;
  std::vector<std::string> notes;
  nlohmann::ordered_json report;  // the registry's report document
};

// See the file comment. Errors: kInvalidArgument (unknown strategy; max_error, sparsity or
// rank_energy out of range or given for a strategy that does not read it; an error above
// max_error), kAlreadyExists (output exists), kNotFound (no held base, unknown
// version), the registry's and the download's errors, ApplyDelta's (kDigestMismatch: the held
// base does not match the delta).
Result<LossyPullResult> PullLossy(const std::string& reference, const LossyPullOptions& options);

// "./<last component of the repository>-lossy-<strategy>".
std::string DefaultLossyOutput(const std::string& repository, const std::string& strategy);

}  // namespace blz::client

#endif  // BLZ_CLIENT_PULL_LOSSY_H_
