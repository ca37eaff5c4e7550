#include "client/pull_lossy.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "client/auth.h"
#include "client/base_choice.h"
#include "client/blob_download.h"
#include "client/local_store.h"
#include "client/manifest.h"
#include "client/partial_download.h"
#include "client/progress.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "client/usage.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/tensor_stats.h"
#include "patcher/lossy/lossy_delta.h"

namespace blz::client {
namespace {

// How long the registry may compute a delta before the pull gives up asking.
constexpr std::chrono::seconds kMaxComputeWait{6 * 3600};

std::optional<double> NumberAt(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

uint64_t CountAt(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_unsigned()) return 0;
  return it->get<uint64_t>();
}

// The delta's tensor records: the report's "tensor_bytes", or (a report cached by an older
// registry) the sum of its tensors' "delta_bytes".
uint64_t DeltaTensorBytes(const nlohmann::json& report) {
  if (auto it = report.find("tensor_bytes"); it != report.end() && it->is_number_unsigned()) {
    return it->get<uint64_t>();
  }
  uint64_t n = 0;
  if (auto ts = report.find("tensors"); ts != report.end() && ts->is_array()) {
    for (const nlohmann::json& t : *ts) {
      if (t.is_object()) n += CountAt(t, "delta_bytes");
    }
  }
  return n;
}

// The tensor pieces' bytes of a lossless patch report (docs/registry-api.md, patch-report).
uint64_t PatchTensorBytes(const nlohmann::json& report) {
  uint64_t n = 0;
  if (auto ps = report.find("pieces"); ps != report.end() && ps->is_array()) {
    for (const nlohmann::json& p : *ps) {
      if (p.is_object() && p.value("kind", std::string()) == "tensor") {
        n += CountAt(p, "patch_bytes");
      }
    }
  }
  return n;
}

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

std::string DefaultLossyOutput(const std::string& repository, const std::string& strategy) {
  const size_t slash = repository.rfind('/');
  const std::string base = slash == std::string::npos ? repository : repository.substr(slash + 1);
  return "./" + base + "-lossy-" + strategy;
}

Result<LossyPullResult> PullLossy(const std::string& reference,
                                  const LossyPullOptions& options) {
  const PullOptions& po = options.pull;
  // Everything the caller gave is checked before the network or the disk is touched.
  BLZ_ASSIGN_OR_RETURN(lossy::Strategy strategy, lossy::ParseStrategy(options.strategy));
  if (options.max_error.has_value() &&
      !(std::isfinite(*options.max_error) && *options.max_error > 0 && *options.max_error <= 1)) {
    return InvalidArgument("--max-error must be a number in (0, 1], not " +
                           FormatNumber(*options.max_error));
  }
  if (options.sparsity.has_value()) {
    if (strategy != lossy::Strategy::kSparse) {
      return InvalidArgument("--sparsity applies to --lossy sparse only");
    }
    if (!(std::isfinite(*options.sparsity) && *options.sparsity >= 0 &&
          *options.sparsity < 1)) {
      return InvalidArgument("--sparsity must be a number in [0, 1), not " +
                             FormatNumber(*options.sparsity));
    }
  }
  if (options.rank_energy.has_value()) {
    if (strategy != lossy::Strategy::kLowRank && strategy != lossy::Strategy::kAuto) {
      return InvalidArgument("--rank-energy applies to --lossy lowrank and auto only");
    }
    if (!(std::isfinite(*options.rank_energy) && *options.rank_energy > 0 &&
          *options.rank_energy <= 1)) {
      return InvalidArgument("--rank-energy must be a number in (0, 1], not " +
                             FormatNumber(*options.rank_energy));
    }
  }
  BLZ_ASSIGN_OR_RETURN(Reference ref, ParseReference(reference));
  LossyPullResult result;
  result.reference = ref.ToString();
  result.strategy = std::string(lossy::StrategyName(strategy));
  std::string out_dir = po.output_dir.empty() ? DefaultLossyOutput(ref.name, result.strategy)
                                              : po.output_dir;
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  {
    struct stat st {};
    if (::lstat(out_dir.c_str(), &st) == 0) {
      return AlreadyExists(out_dir + ": already exists (pull --lossy writes a new directory)");
    }
  }

  BLZ_ASSIGN_OR_RETURN(std::string cache_dir, LocalStore::ResolveDir(po.cache_dir));
  BLZ_ASSIGN_OR_RETURN(LocalStore store, LocalStore::Open(cache_dir));
  RegistryClientOptions client_options;
  client_options.http = po.http;
  const std::string registry = ref.registry.ToString();
  BLZ_ASSIGN_OR_RETURN(client_options.token, TokenFor(po.token, registry));
  RegistryClient client(ref.registry, client_options);

  std::string manifest_digest;
  BLZ_ASSIGN_OR_RETURN(const ModelManifest manifest,
                       FetchPullManifest(&client, ref, po.retry, po.on_retry, "pull --lossy",
                                         &manifest_digest));
  result.manifest_digest = manifest_digest;
  result.target_digest = manifest.archive_digest;

  // The base: chosen as for a lossless patch (client/base_choice.h).
  BLZ_ASSIGN_OR_RETURN(BaseChoice choice, ChooseBases(&client, store, registry, ref.name,
                                                      manifest.archive_digest));
  for (std::string& note : choice.notes) result.notes.push_back(std::move(note));
  if (choice.bases.empty()) {
    return NotFound("pull --lossy needs a held base: the local store (" + store.dir() +
                    ") holds no version the registry can make a delta from to " +
                    manifest.archive_digest + "; pull an earlier version of " + ref.name +
                    " first (blz pull without --lossy)");
  }
  result.base_digest = choice.bases.front();
  result.base_name = choice.names.empty() ? result.base_digest : choice.names.front();
  if (store.Holds(manifest.archive_digest)) {
    result.notes.push_back("the store already holds " + manifest.archive_digest +
                           " exactly; writing a lossy approximation anyway, as asked");
  }

  // The report first: the error is known (and --max-error checked) before the download.
  std::string query = "from=" + result.base_digest + "&to=" + manifest.archive_digest +
                      "&strategy=" + result.strategy;
  if (strategy == lossy::Strategy::kAuto && options.max_error.has_value()) {
    query += "&max_error=" + FormatNumber(*options.max_error);
  }
  if (options.sparsity.has_value()) query += "&sparsity=" + FormatNumber(*options.sparsity);
  if (options.rank_energy.has_value()) {
    query += "&rank_energy=" + FormatNumber(*options.rank_energy);
  }
  nlohmann::json report;
  {
    ProgressMeter meter("asking for the lossy delta of " + ref.name,
                        WaitingMeterOptions(po.progress, "registry is computing the delta"));
    Result<nlohmann::json> got =
        client.GetComputedJson("/v2/" + ref.name + "/blz/delta-report?" + query + "&async=1",
                               "lossy delta report " + result.base_digest + " -> " +
                                   manifest.archive_digest,
                               kMaxComputeWait);
    meter.Finish();
    BLZ_ASSIGN_OR_RETURN(report, std::move(got));
  }
  const std::string what = "lossy delta report";
  if (!report.contains("digest") || !report["digest"].is_string() ||
      !ParseDigest(report["digest"].get<std::string>()).ok() ||
      !report.contains("size") || !report["size"].is_number_unsigned()) {
    return Corruption(what + ": no delta digest and size");
  }
  result.delta_digest = report["digest"].get<std::string>();
  result.delta_bytes = report["size"].get<uint64_t>();
  result.params = report.value("params", std::string());
  result.lossless_bytes = CountAt(report, "lossless_bytes");
  result.full_bytes = CountAt(report, "full_bytes");
  result.delta_tensor_bytes = DeltaTensorBytes(report);
  if (auto e = report.find("error"); e != report.end() && e->is_object()) {
    result.rel_l2 = NumberAt(*e, "rel_l2");
    result.delta_rel_l2 = NumberAt(*e, "delta_rel_l2");
    result.cosine = NumberAt(*e, "cosine");
    result.max_abs = NumberAt(*e, "max_abs");
  }
  // Zero error on every tensor: the model-level max_abs is the largest of the tensors'.
  const bool zero_error = result.rel_l2.has_value() && *result.rel_l2 == 0 &&
                          result.max_abs.has_value() && *result.max_abs == 0;
  result.lossy = report.value("lossy", true) && !zero_error;
  result.report = nlohmann::ordered_json::parse(report.dump());

  // auto never downloads more than the lossless patch: compare before downloading.
  if (strategy == lossy::Strategy::kAuto) {
    Result<nlohmann::json> patch = client.GetComputedJson(
        "/v2/" + ref.name + "/blz/patch-report?from=" + result.base_digest + "&to=" +
            manifest.archive_digest + "&async=1",
        "patch report " + result.base_digest + " -> " + manifest.archive_digest,
        kMaxComputeWait);
    if (patch.ok()) {
      result.patch_bytes = CountAt(*patch, "patch_bytes");
      result.patch_tensor_bytes = PatchTensorBytes(*patch);
    } else if (patch.status().code() == Code::kUnauthorized) {
      return patch.status();
    } else {
      result.notes.push_back("the registry gave no lossless patch report (" +
                             patch.status().ToString() +
                             "); comparing with the lossless codec's tensor bytes instead");
    }
    const uint64_t lossless_total =
        result.patch_bytes > 0 ? result.patch_bytes : result.lossless_bytes;
    if (lossless_total > 0 && result.delta_bytes >= lossless_total) {
      // Said once by the caller's report (result.lossless_fallback), not as a note too.
      PullOptions lossless = po;
      lossless.output_dir = out_dir;
      lossless.allow_patch = true;
      BLZ_ASSIGN_OR_RETURN(result.lossless, Pull(reference, lossless));
      for (const std::string& n : result.lossless.notes) result.notes.push_back(n);
      result.lossless_fallback = true;
      result.lossy = false;
      result.bytes_downloaded = result.lossless.bytes_downloaded;
      result.output = result.lossless.output;
      if (!result.lossless.patch_from_name.empty()) {
        result.base_name = result.lossless.patch_from_name;
      }
      if (!result.lossless.patch_from.empty()) result.base_digest = result.lossless.patch_from;
      result.rel_l2 = result.delta_rel_l2 = result.max_abs = 0.0;
      result.cosine = 1.0;
      return result;
    }
  }
  if (options.max_error.has_value()) {
    if (!result.rel_l2.has_value()) {
      return InvalidArgument("pull --lossy --max-error: the registry reported no error for the " +
                             result.strategy + " delta; nothing downloaded");
    }
    if (!(*result.rel_l2 <= *options.max_error)) {
      return InvalidArgument("pull --lossy: the " + result.strategy + " delta's error rel_l2 = " +
                             FormatNumber(*result.rel_l2) + " exceeds --max-error " +
                             FormatNumber(*options.max_error) +
                             "; nothing downloaded (try --lossy auto --max-error, or a "
                             "lossless pull)");
    }
  }

  // One fetch per target per store (the partial download is keyed by the delta).
  bool waited = false;
  BLZ_ASSIGN_OR_RETURN(FetchLock lock,
                       FetchLock::Acquire(store.dir(), manifest.archive_digest, &waited));
  BLZ_ASSIGN_OR_RETURN(std::string staging, store.MakeStagingDir());
  ScopedRemoveAll staging_guard(staging);
  const std::string wdelta = staging + "/delta.wdelta";
  {
    DownloadRequest req;
    req.target = "/v2/" + ref.name + "/blz/delta?" + query;
    req.headers.push_back({"Accept", "application/vnd.blz.wdelta"});
    if (!client_options.token.empty()) {
      req.headers.push_back({"Authorization", "Bearer " + client_options.token});
    }
    req.kind = "lossy-delta";
    req.what = "lossy delta " + result.base_digest + " -> " + manifest.archive_digest + " (" +
               result.params + ")";
    req.key = Sha256Hex("blz-lossy-delta\n" + result.base_digest + "\n" +
                        manifest.archive_digest + "\n" + result.params);
    req.for_digest = manifest.archive_digest;
    req.expected_digest = result.delta_digest;
    req.expected_size = result.delta_bytes;
    req.max_bytes = result.delta_bytes;
    DownloadOptions d = PullDownloadOptions(ref, po);
    std::atomic<uint64_t> received{0};
    d.bytes_counter = &received;
    ProgressMeter meter("pulling " + ref.name + " (lossy delta, " + result.strategy + ")",
                        po.progress);
    d.progress = meter.Callback();
    Result<DownloadResult> got = DownloadResumable(store.dir(), req, d, wdelta);
    meter.Finish();
    result.bytes_downloaded = received.load();
    BLZ_RETURN_IF_ERROR(got.status());
    for (const std::string& n : got->notes) result.notes.push_back(n);
    if (got->digest != result.delta_digest) {
      return DigestMismatch("lossy delta: received " + got->digest + ", the registry's report "
                            "names " + result.delta_digest);
    }
  }

  // Apply into a private directory beside the output, label, rename into place.
  auto opt = [](const std::optional<double>& v) {
    return v.has_value() && std::isfinite(*v) ? nlohmann::ordered_json(*v)
                                              : nlohmann::ordered_json(nullptr);
  };
  BLZ_RETURN_IF_ERROR(BuildDirAtomically(out_dir, [&](const std::string& built) -> Status {
    // A base kept as files is rebuilt into blobs/ first (LocalStore::ArchivePath).
    BLZ_ASSIGN_OR_RETURN(std::string base_path, store.ArchivePath(result.base_digest));
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors base, formats::ModelTensors::Open(base_path));
    Result<lossy::DeltaReport> applied = lossy::ApplyDelta(base, wdelta, built, {});
    if (!applied.ok()) {
      return applied.status().WithContext("pull --lossy: applying the delta to held base " +
                                          result.base_digest);
    }
    result.output_digest = applied->output_digest;
    result.base_verified = applied->base_verified;
    if (result.output_digest == manifest.archive_digest) {
      return Internal("a lossy reconstruction claims the target's digest");
    }
    const nlohmann::ordered_json label = {
        {"lossy", result.lossy},
        {"warning", result.lossy
                        ? "LOSSY reconstruction: an approximation of " +
                              manifest.archive_digest + ", not that model"
                        : "reconstructed through a delta with zero error on every tensor: the "
                          "tensor values of " + manifest.archive_digest + " exactly"},
        {"reference", result.reference},
        {"approximates", manifest.archive_digest},
        {"base", result.base_digest},
        {"base_name", result.base_name},
        {"strategy", result.strategy},
        {"params", result.params},
        {"delta_digest", result.delta_digest},
        {"output_digest", result.output_digest},
        {"error", {{"rel_l2", opt(result.rel_l2)},
                   {"delta_rel_l2", opt(result.delta_rel_l2)},
                   {"cosine", opt(result.cosine)},
                   {"max_abs", opt(result.max_abs)}}},
        {"delta_bytes", result.delta_bytes},
        {"delta_tensor_bytes", result.delta_tensor_bytes},
        {"lossless_bytes", result.lossless_bytes},
        {"full_bytes", result.full_bytes}};
    return WriteFileAtomic(built + "/" + kLossyLabelFile, label.dump(2) + "\n");
  }));
  result.output = out_dir;
  // The base served this pull: one use of it (client/usage.h); the approximation has none.
  std::string usage_warning;
  UseEvent base_use;
  base_use.digest = result.base_digest;
  if (Status s = RecordUsesNow(store.dir(), {base_use}, &usage_warning); !s.ok()) {
    result.notes.push_back("use of the base not recorded: " + s.ToString());
  }
  if (!usage_warning.empty()) result.notes.push_back(usage_warning);
  return result;
}

}  // namespace blz::client
