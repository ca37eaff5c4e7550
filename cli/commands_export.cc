// `blz export` and the export step of `blz pull --export`.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "client/local_ref.h"
#include "client/progress.h"
#include "client/pull.h"
#include "client/reference.h"
#include "formats/export/export.h"

namespace blz::cli {

void AddExportOptions(CLI::App* sub, ExportArgs* args, bool format_required) {
  CLI::Option* f = sub->add_option(format_required ? "--format" : "--export", args->format,
                                   "output format: gguf, safetensors, pytorch or squizd");
  if (format_required) f->required();
  sub->add_option("--cast", args->cast,
                  "cast floating-point weights: f32, f16, bf16, q8_0 or q4_0 (q8_0 / q4_0: GGUF "
                  "only; bit-exact with ggml's reference quantizers)");
  sub->add_option("--threads", args->threads, "worker threads (0: one per core)")
      ->capture_default_str();
  sub->add_option("--max-shard-size", args->max_shard_bytes,
                  "safetensors directory output: bytes per shard (as transformers, 5 GB)")
      ->capture_default_str();
  sub->add_flag("--force", args->force, "replace an existing output");
  sub->add_option("--name", args->name,
                  "GGUF general.name (default: the source's name; a pulled reference's "
                  "repository name)");
}

Status RunExport(const std::string& source, const std::string& output, const ExportArgs& args,
                 bool json, client::ProgressMode progress,
                 const nlohmann::ordered_json* pulled) {
  exporter::ExportOptions options;
  BLZ_ASSIGN_OR_RETURN(options.format, exporter::ParseExportFormat(args.format));
  if (!args.cast.empty()) {
    BLZ_ASSIGN_OR_RETURN(exporter::CastType c, exporter::ParseCastType(args.cast));
    options.cast = c;
  }
  if (output.empty()) return InvalidArgument("export needs an output path (-o OUT)");
  options.threads = args.threads;
  options.max_shard_bytes = args.max_shard_bytes;
  options.overwrite = args.force;
  options.model_name = args.name;
  client::ProgressMeter meter("exporting " + args.format, progress);
  options.progress = [&meter](uint64_t done, uint64_t total) { meter.Update(done, total); };
  Result<exporter::ExportReport> report = exporter::ExportModel(source, output, options);
  meter.Finish();
  if (report.status().code() == Code::kAlreadyExists &&
      report.status().message().find("--force") == std::string::npos) {
    return AlreadyExists(report.status().message() + " (use --force to replace it)");
  }
  if (!report.ok()) return report.status();
  for (const exporter::ExportTensorReport& t : report->tensors) {
    if (!t.note.empty()) Note(t.name + ": " + t.note);
  }
  if (json) {
    nlohmann::ordered_json j = exporter::ExportReportJson(*report);
    if (pulled != nullptr) j["pull"] = *pulled;
    PrintOrderedJson(j);
    return Status::Ok();
  }
  // A tensor counts as cast with loss only when some value actually changed (a lossy type
  // reproduces values it can represent exactly); the others were cast exactly.
  size_t lossy = 0, exact = 0;
  double worst = 0;
  std::string worst_name;
  for (const exporter::ExportTensorReport& t : report->tensors) {
    if (!t.lossy) continue;
    if (t.error.max_abs == 0 && t.error.sum_sq_err == 0) {
      ++exact;
      continue;
    }
    ++lossy;
    double e = t.error.RelativeL2();
    if (e >= worst) worst = e, worst_name = t.name;
  }
  if (args.quiet) {
    std::printf("%s\n", Esc(output).c_str());
    return Status::Ok();
  }
  std::fprintf(stderr, "exported %zu tensors as %s%s%s (%s)\n", report->tensors.size(),
               report->format.c_str(), report->cast.empty() ? "" : ", cast ",
               report->cast.c_str(), client::FormatBytes(report->output_bytes).c_str());
  if (lossy > 0) {
    std::fprintf(stderr, "  %zu tensors cast with loss; largest relative L2 error %.3g (%s)\n",
                 lossy, worst, Esc(worst_name).c_str());
  }
  if (exact > 0) {
    std::fprintf(stderr, "  %zu %s cast exactly (every value representable, none changed)\n",
                 exact, exact == 1 ? "tensor" : "tensors");
  }
  std::printf("%s\n", Esc(output).c_str());
  return Status::Ok();
}

std::string RepositoryBaseName(const std::string& reference) {
  auto ref = client::ParseReference(reference);
  if (!ref.ok()) return "";
  const std::string& repo = ref->name;
  return repo.substr(repo.find_last_of('/') + 1);
}

namespace {

// SRC as a registry reference when it is not a path and parses as one.
bool IsRegistryReference(const std::string& src, const RegistryConnectionArgs& conn) {
  return !PathExists(src) && src.find('/') != std::string::npos &&
         ResolveReference(src, conn).ok();
}

void AddExport(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string source, output, cache;
    ExportArgs exp;
    bool json = false;
    ProgressArgs progress;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "export", "Write a model as GGUF, safetensors, PyTorch or SQUIZD, optionally cast");
  sub->add_option("source", args->source,
                  "model directory, .safetensors, .gguf, .blz, or HOST:PORT/NAME[:TAG] "
                  "(pulled first)")
      ->required();
  sub->add_option("-o,--output", args->output, "output file or directory")->required();
  AddExportOptions(sub, &args->exp, /*format_required=*/true);
  sub->add_option("--cache", args->cache, "local store for a pulled reference");
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_flag("--json", args->json,
                "print the report (per tensor: source and output dtype, bytes, cast error)");
  AddProgressOptions(sub, &args->progress);
  sub->footer(
      "GGUF from a Hugging Face model writes what llama.cpp's convert_hf_to_gguf.py writes\n"
      "(llama, mistral, qwen2, gpt2; docs/gguf-export.md). A directory OUT gets the model's\n"
      "other files (config, tokenizer); OUT ending in .safetensors / .bin is a single file.");
  commands->push_back({sub, [args]() -> Status {
    std::string source = args->source;
    args->exp.quiet = args->progress.quiet;
    if (IsRegistryReference(source, args->conn)) {
      // As `blz pull`: short digests, BLZ_OFFLINE=1 (the store only), held digests locally.
      const bool offline = client::OfflineFromEnv();
      BLZ_ASSIGN_OR_RETURN(client::Reference ref,
                           ResolveLocalReference(source, args->conn, args->cache, offline, 60));
      client::PullOptions po;
      po.cache_dir = args->cache;
      po.offline = offline;
      po.progress = ProgressModeOf(args->progress);
      BLZ_ASSIGN_OR_RETURN(po.http, HttpOptionsFor(args->conn, 60, ref.registry));
      BLZ_ASSIGN_OR_RETURN(client::PullResult r, client::Pull(ref.ToUrl(), po));
      for (const std::string& note : r.notes) Note(note);
      (void)AutoPruneAfterPull(args->cache, r.digest, r.patch_from);
      source = r.archive_path;
      if (args->exp.name.empty()) args->exp.name = RepositoryBaseName(args->source);
    }
    return RunExport(source, args->output, args->exp, args->json,
                     ProgressModeOf(args->progress));
  }});
}

}  // namespace

void AddExportCommands(CLI::App& app, std::vector<Command>* commands) {
  AddExport(app, commands);
}

}  // namespace blz::cli
