// `blz pull REF --lossy STRATEGY [--max-error E] [-o DIR]`: the report of client::PullLossy.
// A lossy reconstruction is a different model: every line of output says LOSSY and names its
// own digest apart from the version it approximates.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "client/progress.h"
#include "client/pull_lossy.h"

namespace blz::cli {
namespace {

std::string Figure(const std::optional<double>& v) {
  if (!v.has_value()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", *v);
  return buf;
}

nlohmann::ordered_json Number(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json Count(uint64_t v) {
  return v > 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json NullIfEmptyOrdered(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

// "57%" of the update lost (delta_rel_l2 as a percentage); "n/a" when unknown.
std::string Percent(const std::optional<double>& v) {
  if (!v.has_value()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g%%", *v * 100);
  return buf;
}

// "NAME:TAG (sha256:...)", or the digest alone when no name is known.
std::string BaseText(const std::string& name, const std::string& digest) {
  if (name.empty() || name == digest) return digest;
  return name + " (" + digest + ")";
}

}  // namespace

Status RunPullLossy(const std::string& reference, const client::LossyPullOptions& options,
                    bool json, bool quiet) {
  BLZ_ASSIGN_OR_RETURN(client::LossyPullResult r, client::PullLossy(reference, options));
  if (!quiet) {
    for (const std::string& note : r.notes) Note(note);
  }
  using client::FormatBytes;
  if (r.lossless_fallback) {
    // auto found the lossless patch no larger than the delta: an ordinary (exact) pull.
    const client::PullResult& p = r.lossless;
    if (json) {
      PrintOrderedJson({{"lossy", false},
                        {"lossless_fallback", true},
                        {"reference", r.reference},
                        {"strategy", r.strategy},
                        {"digest", p.digest},
                        {"base", NullIfEmptyOrdered(p.patch_from)},
                        {"base_name", NullIfEmptyOrdered(p.patch_from_name)},
                        {"output", r.output},
                        {"transfer", p.transfer},
                        {"delta_bytes", r.delta_bytes},
                        {"lossless_patch_bytes", Count(r.patch_bytes)},
                        {"bytes_downloaded", r.bytes_downloaded}});
      return Status::Ok();
    }
    if (quiet) {
      std::printf("%s\n", Esc(r.output).c_str());
      return Status::Ok();
    }
    std::fprintf(stderr,
                 "pulled %s losslessly: the %s delta (%s) is not smaller than the lossless "
                 "patch (%s)\n"
                 "  model   %s (exact, recorded in the local store)\n"
                 "  base    %s\n"
                 "  downloaded %s\n",
                 Esc(r.reference).c_str(), Esc(r.strategy).c_str(),
                 FormatBytes(r.delta_bytes).c_str(),
                 r.patch_bytes ? FormatBytes(r.patch_bytes).c_str() : "size unknown",
                 Esc(p.digest).c_str(),
                 p.patch_from.empty() ? "none"
                                      : Esc(BaseText(p.patch_from_name, p.patch_from)).c_str(),
                 FormatBytes(r.bytes_downloaded).c_str());
    std::printf("%s\n", Esc(r.output).c_str());
    return Status::Ok();
  }
  // Like for like: the delta's tensor records against the lossless patch's tensor bytes (the
  // patch's own pieces when the registry reported them, else the lossless codec's bytes).
  const uint64_t lossless_tensors = r.patch_tensor_bytes ? r.patch_tensor_bytes
                                                         : r.lossless_bytes;
  const int64_t saved = int64_t(lossless_tensors) - int64_t(r.delta_tensor_bytes);
  if (json) {
    PrintOrderedJson({{"lossy", r.lossy},
                      {"lossless_fallback", false},
                      {"reference", r.reference},
                      {"strategy", r.strategy},
                      {"params", r.params},
                      {"approximates", r.target_digest},
                      {"base", r.base_digest},
                      {"base_name", r.base_name},
                      {"output", r.output},
                      {"output_digest", r.output_digest},
                      {"delta_digest", r.delta_digest},
                      {"delta_bytes", r.delta_bytes},
                      {"delta_tensor_bytes", r.delta_tensor_bytes},
                      {"lossless_bytes", r.lossless_bytes},
                      {"lossless_patch_bytes", Count(r.patch_bytes)},
                      {"lossless_patch_tensor_bytes", Count(r.patch_tensor_bytes)},
                      {"bytes_saved_vs_lossless", saved},
                      {"full_bytes", r.full_bytes},
                      {"bytes_downloaded", r.bytes_downloaded},
                      {"error",
                       {{"rel_l2", Number(r.rel_l2)},
                        {"delta_rel_l2", Number(r.delta_rel_l2)},
                        {"cosine", Number(r.cosine)},
                        {"max_abs", Number(r.max_abs)},
                        {"measured_by", "registry, against the true target"}}},
                      {"base_verified", r.base_verified},
                      {"label_file", r.output + "/" + client::kLossyLabelFile}});
    return Status::Ok();
  }
  if (quiet) {  // -q: errors only on stderr; the output directory carries the LOSSY label
    std::printf("%s\n", Esc(r.output).c_str());
    return Status::Ok();
  }
  const std::string saved_text =
      lossless_tensors == 0
          ? std::string("lossless patch size unknown")
          : (saved >= 0 ? FormatBytes(uint64_t(saved)) + " saved"
                        : FormatBytes(uint64_t(-saved)) + " MORE") +
                " vs the lossless patch's " + FormatBytes(lossless_tensors) + " of tensors";
  std::string totals = "whole delta " + FormatBytes(r.delta_bytes);
  if (r.patch_bytes) totals += ", whole lossless patch " + FormatBytes(r.patch_bytes);
  if (r.lossy) {
    std::fprintf(stderr,
                 "pulled %s as a LOSSY approximation (%s)\n"
                 "  LOSSY   %s (its own digest; approximates %s, which it is not)\n",
                 Esc(r.reference).c_str(), Esc(r.strategy).c_str(),
                 Esc(r.output_digest).c_str(), Esc(r.target_digest).c_str());
  } else {
    std::fprintf(stderr,
                 "pulled %s through a %s delta with zero error on every tensor\n"
                 "  exact   %s (tensor values of %s exactly; its own digest)\n",
                 Esc(r.reference).c_str(), Esc(r.strategy).c_str(),
                 Esc(r.output_digest).c_str(), Esc(r.target_digest).c_str());
  }
  std::fprintf(stderr,
               "  base    %s\n"
               "  delta   tensors %s (%s); %s; full tensors %s\n"
               "  error   rel_l2 %s  delta_rel_l2 %s (%s of the update lost)  cosine %s  "
               "max_abs %s (measured by the registry)\n"
               "  not recorded in the local store; labelled in %s/%s\n",
               Esc(BaseText(r.base_name, r.base_digest)).c_str(),
               FormatBytes(r.delta_tensor_bytes).c_str(), saved_text.c_str(), totals.c_str(),
               FormatBytes(r.full_bytes).c_str(), Figure(r.rel_l2).c_str(),
               Figure(r.delta_rel_l2).c_str(), Percent(r.delta_rel_l2).c_str(),
               Figure(r.cosine).c_str(), Figure(r.max_abs).c_str(), Esc(r.output).c_str(),
               client::kLossyLabelFile);
  std::printf("%s\n", Esc(r.output).c_str());
  return Status::Ok();
}

}  // namespace blz::cli
