// Offline model commands: pack, unpack, verify, inspect, diff, apply.
#include <cstdio>
#include <exception>
#include <memory>

#include "cli/commands.h"
#include "client/progress.h"
#include "formats/blz_archive.h"
#include "formats/export/squizd.h"
#include "formats/identify.h"
#include "formats/inspect.h"
#include "formats/structural_hash.h"
#include "formats/tensor_stats.h"
#include "formats/value_diff.h"
#include "formats/value_diff_json.h"
#include "patcher/patch.h"

namespace blz::cli {
namespace {

using client::FormatBytes;

// `blz diff --fail-on-diff`: the structures differ.
constexpr int kExitDiffers = 1;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(),
                                                suffix) == 0;
}

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * double(part) / double(whole));
  return buf;
}

void AddPack(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string input, output;
    bool json = false;
    ProgressArgs progress;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "pack", "Pack a model directory (or one .safetensors file) into a .blz archive");
  sub->add_option("input", args->input, "model directory or .safetensors file")->required();
  sub->add_option("-o,--output", args->output, "archive to write (must not exist)")->required();
  sub->add_flag("--json", args->json, "print the result as JSON on stdout");
  AddProgressOptions(sub, &args->progress);
  commands->push_back({sub, [args]() -> Status {
    formats::PackStats stats;
    client::ProgressMeter meter("packing " + args->input,
                                client::WorkMeterOptions(ProgressModeOf(args->progress)));
    BLZ_RETURN_IF_ERROR(formats::Pack(args->input, args->output, &stats, meter.Callback()));
    meter.Finish();
    if (args->json) {
      PrintJson({{"input", args->input},
                 {"output", args->output},
                 {"digest", stats.digest},
                 {"archive_bytes", stats.archive_bytes},
                 {"tensor_bytes", stats.tensor_bytes},
                 {"files", stats.files},
                 {"tensors", stats.tensors}});
    } else {
      std::printf("packed %s -> %s\n  %llu files, %llu tensors, %s (%s of tensors)\n  %s\n",
                  Esc(args->input).c_str(), Esc(args->output).c_str(),
                  static_cast<unsigned long long>(stats.files),
                  static_cast<unsigned long long>(stats.tensors),
                  FormatBytes(stats.archive_bytes).c_str(),
                  FormatBytes(stats.tensor_bytes).c_str(), stats.digest.c_str());
    }
    return Status::Ok();
  }});
}

void AddUnpack(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string input, output;
    bool json = false;
    ProgressArgs progress;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "unpack", "Rebuild a model directory from a .blz archive (every file verified)");
  sub->add_option("archive", args->input, ".blz archive")->required();
  sub->add_option("-o,--output", args->output, "directory to create (must not exist)")
      ->required();
  sub->add_flag("--json", args->json, "print the result as JSON on stdout");
  AddProgressOptions(sub, &args->progress);
  commands->push_back({sub, [args]() -> Status {
    if (PathExists(args->output)) return AlreadyExists(args->output + ": already exists");
    BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(args->input));
    client::ProgressMeter meter("unpacking", ProgressModeOf(args->progress));
    BLZ_RETURN_IF_ERROR(formats::Unpack(archive, args->output, meter.Callback()));
    meter.Finish();
    const auto& h = archive.header();
    if (args->json) {
      PrintJson({{"archive", args->input}, {"output", args->output},
                 {"files", h.files.size()}, {"tensors", h.tensors.size()}});
    } else {
      std::printf("unpacked %s -> %s (%zu files)\n", Esc(args->input).c_str(),
                  Esc(args->output).c_str(), h.files.size());
    }
    return Status::Ok();
  }});
}

void AddVerify(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string input;
    std::string base;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "verify", "Check every tensor and file hash of a .blz archive (names the first bad one),\n"
                "or the records and checksum of a .wdelta");
  sub->add_option("archive", args->input, ".blz archive (or SQUIZD or .wdelta file)")->required();
  sub->add_option("--base", args->base,
                  ".wdelta only: also check that this base matches its parent_hash and that\n"
                  "every tensor decodes");
  sub->add_flag("--json", args->json, "print the result as JSON on stdout");
  commands->push_back({sub, [args]() -> Status {
    if (FileHasWdeltaMagic(args->input)) return VerifyWdelta(args->input, args->base, args->json);
    if (!args->base.empty()) return InvalidArgument("verify --base: only for .wdelta files");
    if (exporter::FileHasSquizdMagic(args->input)) {  // SQUIZD: formats/export/squizd.h
      BLZ_ASSIGN_OR_RETURN(exporter::SquizdFile f, exporter::OpenSquizd(args->input));
      BLZ_RETURN_IF_ERROR(exporter::VerifySquizd(f));
      if (args->json) PrintOrderedJson(exporter::SquizdVerifyJson(f));
      else PrintText(exporter::SquizdVerifyText(f));
      return Status::Ok();
    }
    BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(args->input));
    BLZ_RETURN_IF_ERROR(archive.Verify());
    const auto& h = archive.header();
    if (args->json) {
      PrintJson({{"archive", args->input}, {"ok", true}, {"files", h.files.size()},
                 {"tensors", h.tensors.size()}, {"archive_bytes", h.total_size}});
    } else {
      std::printf("ok: %s (%zu files, %zu tensors, %s)\n", Esc(args->input).c_str(), h.files.size(),
                  h.tensors.size(), FormatBytes(h.total_size).c_str());
    }
    return Status::Ok();
  }});
}

void AddInspect(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string input;
    bool json = false;
    bool stats = false;
    unsigned threads = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Describe a model directory, .safetensors or GGUF file, .blz archive or .wdelta delta");
  sub->add_option("path", args->input,
                  "model directory, .safetensors or GGUF file, or .blz archive")
      ->required();
  sub->add_flag("--json", args->json, "print the description as JSON on stdout");
  sub->add_flag("--stats", args->stats,
                "also read every tensor: min/max/mean/std, NaN/Inf and zero counts per tensor,\n"
                "with a warning for each tensor that is all (or partly) NaN/Inf");
  sub->add_option("--threads", args->threads, "worker threads for --stats (0 = all cores)");
  sub->footer("With --stats --json the statistics are under the key \"stats\".");
  commands->push_back({sub, [args]() -> Status {
    if (FileHasWdeltaMagic(args->input)) {
      if (args->stats) return Unsupported("inspect --stats: not available for .wdelta files");
      return InspectWdelta(args->input, args->json);
    }
    if (exporter::FileHasSquizdMagic(args->input)) {  // SQUIZD: formats/export/squizd.h
      if (args->stats) return Unsupported("inspect --stats: not available for SQUIZD files");
      BLZ_ASSIGN_OR_RETURN(exporter::SquizdFile f, exporter::OpenSquizd(args->input));
      if (args->json) PrintOrderedJson(exporter::SquizdSummaryJson(f));
      else PrintText(exporter::SquizdSummaryText(f));
      return Status::Ok();
    }
    BLZ_ASSIGN_OR_RETURN(formats::ModelSummary summary, formats::Describe(args->input));
    if (!args->stats) {
      if (args->json) {
        PrintJson(formats::SummaryJson(summary));
      } else {
        PrintText(formats::SummaryText(summary));
      }
      return Status::Ok();
    }
    formats::StatsOptions options;
    options.threads = args->threads;
    BLZ_ASSIGN_OR_RETURN(formats::ModelStats stats,
                         formats::ComputeModelStats(args->input, options));
    if (args->json) {
      nlohmann::ordered_json out;
      try {
        out = nlohmann::ordered_json::parse(formats::SummaryJson(summary).dump());
      } catch (const std::exception& e) {
        return Internal(std::string("inspect: summary JSON: ") + e.what());
      }
      out["stats"] = formats::ModelStatsJson(stats);
      PrintOrderedJson(out);
    } else {
      PrintText(formats::SummaryText(summary));
      std::fputs("\n", stdout);
      PrintText(formats::ModelStatsText(stats));
    }
    return Status::Ok();
  }});
}

// `blz diff A B` without -o: the structural diff (and with --values the value diff).
Status ReportDiff(const std::string& a, const std::string& b, bool json, bool verbose,
                  bool values, bool fail_on_diff, unsigned threads, int* exit_code) {
  BLZ_ASSIGN_OR_RETURN(formats::StructuralInput sa, formats::StructuralInputFromPath(a));
  BLZ_ASSIGN_OR_RETURN(formats::StructuralInput sb, formats::StructuralInputFromPath(b));
  const formats::StructuralDiff structure = formats::DiffStructures(sa, sb);
  if (fail_on_diff && !structure.identical()) *exit_code = kExitDiffers;
  if (!values) {
    if (json) {
      std::fputs(formats::DiffJson(structure).c_str(), stdout);
    } else {
      PrintText(formats::DiffText(structure, verbose));
    }
    return Status::Ok();
  }
  formats::DiffOptions options;
  options.threads = threads;
  BLZ_ASSIGN_OR_RETURN(formats::ModelDiff value_diff, formats::DiffModels(a, b, options));
  if (json) {
    // The same document the registry serves (formats/value_diff_json.h).
    BLZ_ASSIGN_OR_RETURN(std::string text, formats::ValueDiffJson(structure, value_diff));
    std::fputs(text.c_str(), stdout);
  } else {
    PrintText(formats::DiffText(structure, verbose));
    std::fputs("\n", stdout);
    PrintText(formats::ModelDiffText(value_diff));
  }
  return Status::Ok();
}

void AddDiff(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string base, target, output;
    bool json = false;
    bool verbose = false;
    bool values = false;
    bool fail_on_diff = false;
    int level = 9;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  auto exit_code = std::make_shared<int>(0);
  CLI::App* sub = app.add_subcommand(
      "diff",
      "Compare two models (structure, optionally values), or with -o write a patch A -> B");
  sub->add_option("A", args->base,
                  "base: .safetensors or GGUF file, .blz archive or model directory")
      ->required();
  sub->add_option("B", args->target,
                  "target: .safetensors or GGUF file, .blz archive or model directory")
      ->required();
  CLI::Option* output = sub->add_option(
      "-o,--output", args->output,
      "write a patch that turns A into B to this file (.blzpatch) instead of comparing");
  sub->add_option("--level", args->level, "zstd level (1..22), with -o")
      ->check(CLI::Range(1, 22))
      ->capture_default_str();
  sub->add_option("--threads", args->threads, "worker threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--json", args->json, "print the result as JSON on stdout");
  sub->add_flag("-v,--verbose", args->verbose,
                "structural diff: list every changed tensor and metadata key")
      ->excludes(output);
  sub->add_flag("--values", args->values,
                "also compare tensor values (changed elements, relative L2, cosine per tensor\n"
                "and layer); JSON: {\"schema\": 1, \"structure\": {...}, \"values\": {...}}")
      ->excludes(output);
  sub->add_flag("--fail-on-diff", args->fail_on_diff,
                "exit with code 1 when the structures (structural hashes) of A and B differ")
      ->excludes(output);
  sub->footer(
      "Without -o: prints the structural diff (weight-inspect compatible: IDENTICAL or\n"
      "DIFFERENT, tensor and metadata changes; --json gives {\"schema\": 1, ...}). Exit code 0\n"
      "whether or not the models differ, unless --fail-on-diff: then 1 when they differ.\n"
      "With -o: A and B must be .blz archives or model directories; directories are packed to\n"
      "temporary archives (next to the output) first.");
  commands->push_back({sub, [args, exit_code]() -> Status {
    if (args->output.empty()) {
      return ReportDiff(args->base, args->target, args->json, args->verbose, args->values,
                        args->fail_on_diff, static_cast<unsigned>(args->threads),
                        exit_code.get());
    }
    if (PathExists(args->output)) return AlreadyExists(args->output + ": already exists");
    ScopedTempDir tmp;
    bool packed_a = false, packed_b = false;
    BLZ_ASSIGN_OR_RETURN(std::string a,
                         EnsureArchive(args->base, "base", args->output, &tmp, &packed_a));
    BLZ_ASSIGN_OR_RETURN(std::string b,
                         EnsureArchive(args->target, "target", args->output, &tmp, &packed_b));
    patcher::DiffOptions options;
    options.zstd_level = args->level;
    options.threads = args->threads;
    patcher::DiffStats stats;
    BLZ_RETURN_IF_ERROR(patcher::CreatePatch(a, b, args->output, options, &stats));
    if (args->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (const patcher::PieceReport& p : stats.pieces) {
        pieces.push_back({{"name", p.name}, {"codec", p.codec},
                          {"target_bytes", p.target_bytes}, {"patch_bytes", p.patch_bytes}});
      }
      PrintJson({{"base", args->base}, {"target", args->target}, {"patch", args->output},
                 {"base_digest", stats.base_digest}, {"target_digest", stats.target_digest},
                 {"target_bytes", stats.target_bytes}, {"patch_bytes", stats.patch_bytes},
                 {"identical", stats.identical}, {"patched", stats.patched},
                 {"added", stats.added}, {"removed", stats.removed},
                 {"pieces", std::move(pieces)}});
      return Status::Ok();
    }
    std::printf("%-12s %12s %12s %8s  %s\n", "codec", "target", "patch", "ratio", "piece");
    for (const patcher::PieceReport& p : stats.pieces) {
      std::printf("%-12s %12s %12s %8s  %s\n", p.codec.c_str(),
                  FormatBytes(p.target_bytes).c_str(), FormatBytes(p.patch_bytes).c_str(),
                  Percent(p.patch_bytes, p.target_bytes).c_str(), Esc(p.name).c_str());
    }
    std::printf(
        "\n%s -> %s\n  patch %s: %s for a %s target (%s)\n"
        "  %u identical, %u patched, %u added, %u removed\n",
        stats.base_digest.c_str(), stats.target_digest.c_str(), Esc(args->output).c_str(),
        FormatBytes(stats.patch_bytes).c_str(), FormatBytes(stats.target_bytes).c_str(),
        Percent(stats.patch_bytes, stats.target_bytes).c_str(), stats.identical, stats.patched,
        stats.added, stats.removed);
    return Status::Ok();
  }, exit_code});
}

void AddApply(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string base, patch, output;
    bool json = false;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("apply", "Apply a patch to model A, producing model B");
  sub->add_option("A", args->base, "base: .blz archive or model directory")->required();
  sub->add_option("patch", args->patch, "patch file (from `blz diff`)")->required();
  sub->add_option("-o,--output", args->output,
                  "output: an archive if it ends in .blz, else a model directory")
      ->required();
  sub->add_flag("--json", args->json, "print the result as JSON on stdout");
  sub->add_option("--threads", args->threads, "decoding threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  sub->footer(
      "Output rule: -o B.blz writes the target archive; any other -o path is created as a\n"
      "model directory (the target archive is rebuilt in a temporary file next to it, verified,\n"
      "and unpacked). The output must not exist. A directory A is packed first.");
  commands->push_back({sub, [args]() -> Status {
    if (PathExists(args->output)) return AlreadyExists(args->output + ": already exists");
    const bool to_archive = EndsWith(args->output, ".blz");
    ScopedTempDir tmp;
    bool packed = false;
    BLZ_ASSIGN_OR_RETURN(std::string base,
                         EnsureArchive(args->base, "base", args->output, &tmp, &packed));
    std::string target = args->output;
    if (!to_archive) {
      BLZ_RETURN_IF_ERROR(tmp.CreateNear(args->output));
      target = tmp.path() + "/target.blz";
    }
    patcher::ApplyStats stats;
    patcher::ApplyOptions options;
    options.threads = args->threads;
    BLZ_RETURN_IF_ERROR(patcher::ApplyPatch(base, args->patch, target, &stats, options));
    if (!to_archive) {
      BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(target));
      BLZ_RETURN_IF_ERROR(formats::Unpack(archive, args->output));
    }
    if (args->json) {
      PrintJson({{"base", args->base}, {"patch", args->patch}, {"output", args->output},
                 {"output_kind", to_archive ? "archive" : "directory"},
                 {"target_digest", stats.target_digest}, {"target_bytes", stats.target_bytes}});
    } else {
      std::printf("applied %s to %s -> %s (%s)\n  %s, %s\n", Esc(args->patch).c_str(),
                  Esc(args->base).c_str(), Esc(args->output).c_str(),
                  to_archive ? "archive" : "directory", stats.target_digest.c_str(),
                  FormatBytes(stats.target_bytes).c_str());
    }
    return Status::Ok();
  }});
}

}  // namespace

void AddModelCommands(CLI::App& app, std::vector<Command>* commands) {
  AddPack(app, commands);
  AddUnpack(app, commands);
  AddVerify(app, commands);
  AddInspect(app, commands);
  AddDiff(app, commands);
  AddApply(app, commands);
}

}  // namespace blz::cli
