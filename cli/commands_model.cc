// Offline model commands: pack, unpack, verify, inspect, diff, apply.
#include <fcntl.h>
#include <stdio.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/model_source.h"
#include "client/progress.h"
#include "client/pull_stream.h"
#include "formats/blz_archive.h"
#include "formats/content_diff.h"
#include "formats/export/squizd.h"
#include "formats/identify.h"
#include "formats/inspect.h"
#include "formats/structural_hash.h"
#include "formats/tensor_stats.h"
#include "formats/value_diff.h"
#include "formats/value_diff_json.h"
#include "patcher/patch.h"
#include "patcher/patch_sink.h"

namespace blz::cli {
namespace {

using client::FormatBytes;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(),
                                                suffix) == 0;
}

// Every line of `text` (which ends with a newline) indented by two spaces.
std::string Indent(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && c != '\n') out += "  ";
    out += c;
    line_start = c == '\n';
  }
  return out;
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
    bool fail_on_nan = false;
    unsigned threads = 0;
    ModelSourceArgs source;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Describe a model directory, .safetensors or GGUF file, .blz archive or .wdelta delta");
  sub->add_option("path", args->input,
                  "model directory, .safetensors or GGUF file, .blz archive, or a registry\n"
                  "reference [https://]HOST[:PORT]/NAME[:TAG|@sha256:...]")
      ->required();
  AddModelSourceOptions(sub, &args->source);
  sub->add_flag("--json", args->json, "print the description as JSON on stdout");
  sub->add_flag("--stats", args->stats,
                "also read every tensor: min/max/mean/std, NaN/Inf and zero counts per tensor,\n"
                "with a warning for each tensor that is all (or partly) NaN/Inf");
  sub->add_flag("--fail-on-nan", args->fail_on_nan,
                "a gate (implies --stats): exit 1 when any tensor holds a NaN or Inf value,\n"
                "naming the tensors on stderr");
  sub->add_option("--threads", args->threads, "worker threads for --stats (0 = all cores)");
  sub->footer("With --stats --json the statistics are under the key \"stats\".");
  auto exit_code = std::make_shared<int>(0);
  commands->push_back({sub, [args, exit_code]() -> Status {
    if (args->fail_on_nan) args->stats = true;
    // A registry reference: its manifest and archive headers (--stats: the whole version,
    // pulled into the local store).
    std::string path = args->input;
    ScopedTempDir fetched;
    if (IsModelReference(args->input, args->source.conn)) {
      if (args->stats) {
        BLZ_ASSIGN_OR_RETURN(path, PullModelSource(args->input, args->source,
                                                   ProgressModeOf(ProgressArgs{})));
      } else {
        std::string digest;
        BLZ_ASSIGN_OR_RETURN(path,
                             FetchArchiveHeaders(args->input, args->source, &fetched, &digest));
      }
    }
    if (FileHasWdeltaMagic(path)) {
      if (args->stats) return Unsupported("inspect --stats: not available for .wdelta files");
      return InspectWdelta(path, args->json);
    }
    if (exporter::FileHasSquizdMagic(path)) {  // SQUIZD: formats/export/squizd.h
      if (args->stats) return Unsupported("inspect --stats: not available for SQUIZD files");
      BLZ_ASSIGN_OR_RETURN(exporter::SquizdFile f, exporter::OpenSquizd(path));
      if (args->json) PrintOrderedJson(exporter::SquizdSummaryJson(f));
      else PrintText(exporter::SquizdSummaryText(f));
      return Status::Ok();
    }
    BLZ_ASSIGN_OR_RETURN(formats::ModelSummary summary, formats::Describe(path));
    summary.path = args->input;
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
                         formats::ComputeModelStats(path, options));
    stats.path = args->input;
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
    if (args->fail_on_nan) {
      const std::string bad = NonFiniteSummary(stats);
      if (!bad.empty()) {
        std::fflush(stdout);
        std::fprintf(stderr, "blz: inspect --fail-on-nan: %s: %s\n", Esc(args->input).c_str(),
                     Esc(bad).c_str());
        *exit_code = kExitDiffers;
      }
    }
    return Status::Ok();
  }, exit_code});
}

// `blz diff A B` without -o. `structure_only`: weight-inspect's structural diff alone, exit 1
// when the structures differ. Otherwise the verdict on everything (structure, tensor values,
// non-tensor files; formats/content_diff.h) comes first, exit 1 when anything differs; with
// `values` the value statistics follow.
// `labels`: how A and B were named on the command line (paths, or references pulled to a and b).
Status ReportDiff(const std::string& a, const std::string& b,
                  const std::array<std::string, 2>& labels, bool json, bool verbose,
                  bool values, bool structure_only, unsigned threads, int* exit_code) {
  BLZ_ASSIGN_OR_RETURN(formats::StructuralInput sa, formats::StructuralInputFromPath(a));
  BLZ_ASSIGN_OR_RETURN(formats::StructuralInput sb, formats::StructuralInputFromPath(b));
  const formats::StructuralDiff structure = formats::DiffStructures(sa, sb);
  if (structure_only) {
    if (!structure.identical()) *exit_code = kExitDiffers;
    if (json) {
      std::fputs(formats::DiffJson(structure).c_str(), stdout);
    } else {
      PrintText(formats::DiffText(structure, verbose));
    }
    return Status::Ok();
  }
  BLZ_ASSIGN_OR_RETURN(
      formats::ContentDiff content,
      formats::DiffContent(a, b, formats::StructurallyChangedTensors(structure)));
  if (!structure.identical() || !content.identical()) *exit_code = kExitDiffers;
  std::optional<formats::ModelDiff> value_diff;
  if (values) {
    formats::DiffOptions options;
    options.threads = threads;
    BLZ_ASSIGN_OR_RETURN(value_diff, formats::DiffModels(a, b, options));
    value_diff->a_path = labels[0];  // a registry reference rather than its store path
    value_diff->b_path = labels[1];
  }
  if (json) {
    // {"schema", verdict keys, "structure", "content", and with --values "values"}: the
    // registry's value diff document (formats/value_diff_json.h) plus the verdict.
    nlohmann::ordered_json out;
    out["schema"] = 1;
    formats::AddDiffVerdictJson(structure, content, &out);
    try {
      out["structure"] = nlohmann::ordered_json::parse(formats::DiffJson(structure));
    } catch (const std::exception& e) {
      return Internal(std::string("diff: structural JSON: ") + e.what());
    }
    out["content"] = formats::ContentDiffJson(content);
    if (value_diff) out["values"] = formats::ModelDiffJson(*value_diff);
    try {
      std::fputs((out.dump(2, ' ', /*ensure_ascii=*/false,
                           nlohmann::ordered_json::error_handler_t::replace) +
                  "\n")
                     .c_str(),
                 stdout);
    } catch (const std::exception& e) {
      return Internal(std::string("diff: serializing JSON: ") + e.what());
    }
    return Status::Ok();
  }
  // weight-inspect's text opens with its own verdict word and a rule ("IDENTICAL\n----\n"),
  // which under a DIFFERENT verdict reads as a contradiction (issue 24 item 1): the section
  // says "unchanged" or "changed" instead; --structure-only prints weight-inspect's text as is.
  std::string structure_text = formats::DiffText(structure, verbose);
  for (int line = 0; line < 2; ++line) {
    const size_t eol = structure_text.find('\n');
    structure_text.erase(0, eol == std::string::npos ? structure_text.size() : eol + 1);
  }
  std::string text = formats::DiffVerdictLine(structure, content) + "\n\nStructure:        " +
                     (structure.identical() ? "unchanged" : "changed") + "\n";
  text += Indent(structure_text);
  text += "\n" + formats::ContentDiffText(content, verbose);
  PrintText(text);
  if (value_diff) {
    std::fputs("\n", stdout);
    PrintText(formats::ModelDiffText(*value_diff));
  }
  return Status::Ok();
}

void AddDiff(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string base, target, output;
    bool json = false;
    bool verbose = false;
    bool values = false;
    bool fail_on_diff = false;  // the default now; accepted for old scripts
    bool structure_only = false;
    int level = 9;
    int threads = 0;
    ModelSourceArgs source;
  };
  auto args = std::make_shared<Args>();
  auto exit_code = std::make_shared<int>(0);
  CLI::App* sub = app.add_subcommand(
      "diff",
      "Did anything change between two models (structure, tensor values, files; exit 1 when\n"
      "so)? With --values: how much each tensor changed. With -o: write a patch A -> B");
  sub->add_option("A", args->base,
                  "base: .safetensors or GGUF file, .blz archive, model directory or registry\n"
                  "reference (pulled into the local store first)")
      ->required();
  sub->add_option("B", args->target,
                  "target: .safetensors or GGUF file, .blz archive, model directory or registry\n"
                  "reference")
      ->required();
  AddModelSourceOptions(sub, &args->source);
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
                "list every changed tensor, metadata key and file")
      ->excludes(output);
  CLI::Option* values = sub->add_flag(
      "--values", args->values,
      "also measure how much the values changed (changed elements, relative L2, cosine per\n"
      "tensor and layer; reads every tensor); JSON: adds \"values\": {...}")
      ->excludes(output);
  sub->add_flag("--fail-on-diff", args->fail_on_diff,
                "accepted for compatibility: exiting 1 when A and B differ is now the default")
      ->excludes(output);
  sub->add_flag("--structure-only", args->structure_only,
                "compare only the structures (weight-inspect's diff of headers: tensor names,\n"
                "dtypes, shapes, metadata); exit 1 only when the structures differ")
      ->excludes(output)
      ->excludes(values);
  sub->footer(
      "Without -o: answers \"did anything change?\" like cmp or `git diff --exit-code`. The\n"
      "first line is the verdict: IDENTICAL, or DIFFERENT: and what differs (structure, values\n"
      "of N tensors, files ...); then the structural diff (weight-inspect compatible), the\n"
      "changed tensors and the changed non-tensor files (config, tokenizer, ...). Tensor values\n"
      "of two .blz archives are compared by the digests in their headers; other inputs byte\n"
      "for byte, one tensor at a time. --json: {\"schema\": 1, \"identical\", \"verdict\",\n"
      "\"differences\", \"structure\", \"content\", and with --values \"values\"}.\n"
      "Exit code: 0 identical in everything, 1 something differs (with --structure-only: the\n"
      "structures differ), other codes for trouble (see blz --help).\n"
      "With -o: A and B are .blz archives, model directories, .safetensors or .gguf files;\n"
      "a model is read where it is (hashed as the archive `blz pack` would make, not packed).");
  commands->push_back({sub, [args, exit_code]() -> Status {
    // Registry references: pulled into the local store (as `blz pull`), compared from there.
    const std::array<std::string, 2> labels = {args->base, args->target};
    for (std::string* side : {&args->base, &args->target}) {
      if (!IsModelReference(*side, args->source.conn)) continue;
      BLZ_ASSIGN_OR_RETURN(*side, PullModelSource(*side, args->source,
                                                  ProgressModeOf(ProgressArgs{})));
    }
    if (args->output.empty()) {
      return ReportDiff(args->base, args->target, labels, args->json, args->verbose, args->values,
                        args->structure_only, static_cast<unsigned>(args->threads),
                        exit_code.get());
    }
    if (PathExists(args->output)) return AlreadyExists(args->output + ": already exists");
    // Model directories (and .safetensors / .gguf files) are read in place, never packed
    // (patcher/patch.h CreatePatch).
    const std::string& a = args->base;
    const std::string& b = args->target;
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
      "model directory (its files are written as the patch is decoded, into a temporary\n"
      "directory next to it, checked and renamed into place). The output must not exist. A\n"
      "model directory (or .safetensors / .gguf file) A is read in place, not packed.");
  commands->push_back({sub, [args]() -> Status {
    if (PathExists(args->output)) return AlreadyExists(args->output + ": already exists");
    const bool to_archive = EndsWith(args->output, ".blz");
    ScopedTempDir tmp;
    // A base directory is read where it is (patcher/patch.h), never packed: apply needs its
    // pieces, not its digest.
    const std::string& base = args->base;
    patcher::ApplyStats stats;
    patcher::ApplyOptions options;
    options.threads = args->threads;
    if (to_archive) {
      BLZ_RETURN_IF_ERROR(patcher::ApplyPatch(base, args->patch, args->output, &stats, options));
    } else {
      // The model files are written as the patch is decoded (each chunk's xxh3-64 checked by
      // the apply as it is decoded, the target archive's SHA-256, which covers every byte, at
      // the end), into a directory beside the output renamed into place only then: no target
      // archive is written or read back (issue 28).
      BLZ_RETURN_IF_ERROR(tmp.CreateNear(args->output));
      const std::string built = tmp.path() + "/model";
      client::FileStreamer files(client::FileStreamer::Mode::kDirectory, built, "",
                                 client::FileFilter{}, "target of " + args->patch,
                                 client::FileStreamer::PieceCheck::kCheckedBySource);
      BLZ_RETURN_IF_ERROR(
          patcher::ApplyPatchToSink(base, args->patch, "", &files, &stats, options));
      BLZ_RETURN_IF_ERROR(files.Finish());
      if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, args->output.c_str(),
                      RENAME_NOREPLACE) != 0) {
        return IOError(args->output + ": cannot rename " + built + " into place: " +
                       std::strerror(errno));
      }
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
