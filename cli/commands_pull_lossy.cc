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

}  // namespace

Status RunPullLossy(const std::string& reference, const client::LossyPullOptions& options,
                    bool json) {
  BLZ_ASSIGN_OR_RETURN(client::LossyPullResult r, client::PullLossy(reference, options));
  for (const std::string& note : r.notes) Note(note);
  const int64_t saved = int64_t(r.lossless_bytes) - int64_t(r.delta_bytes);
  if (json) {
    PrintOrderedJson({{"lossy", true},
                      {"reference", r.reference},
                      {"strategy", r.strategy},
                      {"params", r.params},
                      {"approximates", r.target_digest},
                      {"base", r.base_digest},
                      {"output", r.output},
                      {"output_digest", r.output_digest},
                      {"delta_digest", r.delta_digest},
                      {"delta_bytes", r.delta_bytes},
                      {"lossless_bytes", r.lossless_bytes},
                      {"bytes_saved_vs_lossless", saved},
                      {"full_bytes", r.full_bytes},
                      {"bytes_downloaded", r.bytes_downloaded},
                      {"error",
                       {{"rel_l2", Number(r.rel_l2)},
                        {"cosine", Number(r.cosine)},
                        {"max_abs", Number(r.max_abs)},
                        {"measured_by", "registry, against the true target"}}},
                      {"base_verified", r.base_verified},
                      {"label_file", r.output + "/" + client::kLossyLabelFile}});
    return Status::Ok();
  }
  using client::FormatBytes;
  const std::string saved_text =
      r.lossless_bytes == 0
          ? std::string("lossless patch size unknown")
          : (saved >= 0 ? FormatBytes(uint64_t(saved)) + " saved"
                        : FormatBytes(uint64_t(-saved)) + " MORE") +
                " vs the lossless patch of " + FormatBytes(r.lossless_bytes);
  std::fprintf(stderr,
               "pulled %s as a LOSSY approximation (%s)\n"
               "  LOSSY   %s (its own digest; approximates %s, which it is not)\n"
               "  base    %s\n"
               "  delta   %s (%s; full tensors %s)\n"
               "  error   rel_l2 %s  cosine %s  max_abs %s (measured by the registry)\n"
               "  not recorded in the local store; labelled in %s/%s\n",
               Esc(r.reference).c_str(), Esc(r.strategy).c_str(), Esc(r.output_digest).c_str(),
               Esc(r.target_digest).c_str(), Esc(r.base_digest).c_str(),
               FormatBytes(r.delta_bytes).c_str(), saved_text.c_str(),
               FormatBytes(r.full_bytes).c_str(), Figure(r.rel_l2).c_str(),
               Figure(r.cosine).c_str(), Figure(r.max_abs).c_str(), Esc(r.output).c_str(),
               client::kLossyLabelFile);
  std::printf("%s\n", Esc(r.output).c_str());
  return Status::Ok();
}

}  // namespace blz::cli
