// `blz id`: the structural identity of a model (formats/identify.h), compatible with
// las7/weight-inspect's `identity`.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "formats/identify.h"
#include "formats/structural_hash.h"

namespace blz::cli {
namespace {

void AddId(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string input;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "id", "Print the structural identity (hash of header, names, shapes, dtypes) of a model");
  sub->add_option("path", args->input,
                  ".safetensors or .gguf file, .blz archive or model directory")
      ->required();
  sub->add_flag("--json", args->json, "print the identity as JSON on stdout");
  sub->footer(
      "Reads headers only (tensor data may be missing or truncated). A directory and its .blz\n"
      "archive have the same identity. Compatible with weight-inspect's `identity`; the rules\n"
      "are in docs/structural-hash.md.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(formats::StructuralIdentity identity,
                         formats::IdentifyPath(args->input));
    if (args->json) {
      std::fputs(formats::IdentityJson(identity).c_str(), stdout);
    } else {
      PrintText(formats::IdentityText(identity));
    }
    return Status::Ok();
  }});
}

}  // namespace

void AddIdentityCommands(CLI::App& app, std::vector<Command>* commands) { AddId(app, commands); }

}  // namespace blz::cli
