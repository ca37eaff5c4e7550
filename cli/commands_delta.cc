// `blz delta create|apply` (lossy deltas in the .wdelta container, patcher/lossy/lossy_delta.h)
// and the .wdelta branches of `blz inspect` and `blz verify`.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/mmap_file.h"
#include "formats/tensor_stats.h"
#include "formats/wdelta.h"
#include "patcher/lossy/lossy_delta.h"

namespace blz::cli {

bool FileHasWdeltaMagic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[7] = {};
  const size_t n = std::fread(magic, 1, sizeof magic, f);
  std::fclose(f);
  return n == sizeof magic &&
         std::memcmp(magic, formats::kWdeltaMagic.data(), formats::kWdeltaMagic.size()) == 0;
}

Status InspectWdelta(const std::string& path, bool json) {
  BLZ_ASSIGN_OR_RETURN(lossy::DeltaReport report, lossy::DescribeDelta(path));
  if (json) {
    PrintOrderedJson(lossy::DeltaReportJson(report));
  } else {
    PrintText(lossy::DeltaReportText(report));
  }
  return Status::Ok();
}

Status VerifyWdelta(const std::string& path, const std::string& base_path, bool json) {
  // Open() checks the layout, every record and the trailing SHA-256.
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaReader reader, formats::WdeltaReader::Open(path));
  bool base_checked = false;
  if (!base_path.empty()) {
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors base, formats::ModelTensors::Open(base_path));
    // Applying into a scratch directory checks the parent hash and decodes every tensor.
    ScopedTempDir tmp;
    BLZ_RETURN_IF_ERROR(tmp.CreateNear(path));
    lossy::ApplyOptions options;
    auto applied = lossy::ApplyDelta(base, path, tmp.path() + "/out", options);
    if (!applied.ok()) return applied.status();
    base_checked = true;
  }
  if (json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    j["path"] = path;
    j["ok"] = true;
    j["format"] = "wdelta";
    j["version"] = reader.version();
    j["strategy"] = reader.strategy();
    j["tensors"] = reader.names().size();
    j["file_bytes"] = reader.file_size();
    j["parent_hash"] = reader.parent_hash();
    j["base_verified"] = base_checked;
    PrintOrderedJson(j);
  } else {
    std::printf("ok: %s (.wdelta v%u, strategy %s, %zu tensors, %llu bytes; checksum verified%s)\n",
                Esc(path).c_str(), reader.version(), Esc(reader.strategy()).c_str(),
                reader.names().size(), static_cast<unsigned long long>(reader.file_size()),
                base_checked ? "; base matches parent_hash, every tensor decodes" : "");
  }
  return Status::Ok();
}

namespace {

void AddCreate(CLI::App* delta, std::vector<Command>* commands) {
  struct Args {
    std::string base, target, output, strategy = "bitdelta";
    double sparsity = 0.9, rank_energy = 0.95, max_error = 0.01, outlier_fraction = 0.01;
    uint32_t version = 1;
    uint64_t min_elements = 4096;
    unsigned threads = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = delta->add_subcommand(
      "create", "Write a LOSSY delta from BASE to TARGET as a .wdelta file, with its measured error");
  sub->add_option("base", args->base, "base model (directory, .safetensors, GGUF or .blz)")
      ->required();
  sub->add_option("target", args->target, "target model (same forms)")->required();
  sub->add_option("-o,--output", args->output, "the .wdelta file to write")->required();
  sub->add_option("--strategy", args->strategy,
                  "sparse | quantized | int4 (deltatensors) | bitdelta | lowrank | auto (blz)")
      ->capture_default_str();
  sub->add_option("--sparsity", args->sparsity, "sparse: share of elements dropped, in [0, 1)")
      ->capture_default_str();
  sub->add_option("--outlier-fraction", args->outlier_fraction,
                  "int4: share of elements kept as fp16 outliers")
      ->capture_default_str();
  sub->add_option("--rank-energy", args->rank_energy,
                  "lowrank: share of the squared Frobenius norm the kept rank preserves")
      ->capture_default_str();
  sub->add_option("--max-error", args->max_error,
                  "auto: the largest relative L2 error (of the reconstruction against the "
                  "target) a tensor may have; bitdelta, then lowrank, else exact")
      ->capture_default_str();
  sub->add_option("--min-elements", args->min_elements,
                  "bitdelta/lowrank/auto: tensors with fewer elements are stored exact")
      ->capture_default_str();
  sub->add_option("--format-version", args->version, ".wdelta format version to write (1 or 2)")
      ->capture_default_str();
  sub->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  sub->add_flag("--json", args->json, "print the report as JSON on stdout");
  sub->footer(
      "The reconstruction is NOT the target: every report states its error (relative L2,\n"
      "cosine, max abs) per tensor and for the model, and its size against the lossless patch.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(lossy::Strategy strategy, lossy::ParseStrategy(args->strategy));
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors base, formats::ModelTensors::Open(args->base));
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors target, formats::ModelTensors::Open(args->target));
    lossy::CreateOptions options;
    options.strategy = strategy;
    options.version = args->version;
    options.sparsity = args->sparsity;
    options.outlier_fraction = args->outlier_fraction;
    options.rank_energy = args->rank_energy;
    options.max_error = args->max_error;
    options.min_lossy_elements = args->min_elements;
    options.threads = args->threads;
    BLZ_ASSIGN_OR_RETURN(lossy::DeltaReport report,
                         lossy::CreateDelta(base, target, args->output, options));
    if (args->json) {
      PrintOrderedJson(lossy::DeltaReportJson(report));
    } else {
      PrintText(lossy::DeltaReportText(report));
    }
    return Status::Ok();
  }});
}

void AddApply(CLI::App* delta, std::vector<Command>* commands) {
  struct Args {
    std::string base, delta, output, target;
    bool no_verify = false;
    unsigned threads = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = delta->add_subcommand(
      "apply", "Rebuild a LOSSY reconstruction from BASE and a .wdelta into a new directory");
  sub->add_option("base", args->base, "the base model the delta was made from")->required();
  sub->add_option("delta", args->delta, "the .wdelta file")->required();
  sub->add_option("-o,--output", args->output,
                  "the directory to create (safetensors files laid out like the target)")
      ->required();
  sub->add_option("--target", args->target,
                  "the true target, if you have it: measure the reconstruction's error");
  sub->add_flag("--no-verify", args->no_verify,
                "skip the base check against the delta's parent_hash");
  sub->add_option("--threads", args->threads, "worker threads (0 = all cores)");
  sub->add_flag("--json", args->json, "print the report as JSON on stdout");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors base, formats::ModelTensors::Open(args->base));
    std::unique_ptr<formats::ModelTensors> target;
    lossy::ApplyOptions options;
    options.verify_base = !args->no_verify;
    options.threads = args->threads;
    if (!args->target.empty()) {
      BLZ_ASSIGN_OR_RETURN(formats::ModelTensors t, formats::ModelTensors::Open(args->target));
      target = std::make_unique<formats::ModelTensors>(std::move(t));
      options.target = target.get();
    }
    BLZ_ASSIGN_OR_RETURN(lossy::DeltaReport report,
                         lossy::ApplyDelta(base, args->delta, args->output, options));
    if (args->json) {
      PrintOrderedJson(lossy::DeltaReportJson(report));
    } else {
      PrintText(lossy::DeltaReportText(report));
      std::printf("wrote %s: a %s reconstruction, digest %s\n", Esc(args->output).c_str(),
                  report.lossy ? "LOSSY" : "exact", report.output_digest.c_str());
    }
    return Status::Ok();
  }});
}

}  // namespace

void AddDeltaCommands(CLI::App& app, std::vector<Command>* commands) {
  CLI::App* delta = app.add_subcommand(
      "delta", "Lossy deltas (.wdelta: deltatensors' sparse/quantized/int4, blz's bitdelta/lowrank)");
  delta->require_subcommand(1);
  AddCreate(delta, commands);
  AddApply(delta, commands);
}

}  // namespace blz::cli
