// Registry maintenance commands: catalog (repositories), rm (a version) and gc (garbage
// collection), through the registry's HTTP API (docs/registry-api.md: GET /v2/_catalog, DELETE
// of manifests, POST /v2/_blz/gc).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "client/auth.h"
#include "client/reference.h"
#include "client/registry_client.h"

namespace blz::cli {
namespace {

struct RegistryArgs {
  bool json = false;
  int timeout = 60;
  RegistryConnectionArgs conn;
};

void AddRm(CLI::App& app, std::vector<Command>* commands) {
  struct Args : RegistryArgs {
    std::string reference;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("rm", "Remove a version from a registry");
  sub->add_option("reference", args->reference, "HOST[:PORT]/NAME:TAG or HOST[:PORT]/NAME@DIGEST")
      ->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_flag("--json", args->json, "print {reference, digest, removed} on stdout");
  sub->add_option("--timeout", args->timeout, "seconds a single read or write may stall")
      ->check(CLI::PositiveNumber);
  sub->footer(
      "Removes the manifest the reference names, every tag that points at it and the model\n"
      "version it records (other versions are untouched). The bytes it alone used are freed\n"
      "by the registry's next garbage collection (`blz gc`). Needs a token with delete access.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::Reference ref, ResolveReference(args->reference, args->conn));
    BLZ_ASSIGN_OR_RETURN(
        std::unique_ptr<client::RegistryClient> registry,
        RegistryClientFor(ref.registry, args->conn, args->timeout, /*require_token=*/true));
    std::string digest = ref.digest;
    if (!ref.by_digest()) {
      BLZ_ASSIGN_OR_RETURN(client::ManifestResponse m, registry->GetManifest(ref.name, ref.tag));
      digest = m.digest;
    }
    BLZ_RETURN_IF_ERROR(registry->DeleteManifest(ref.name, digest));
    if (args->json) {
      PrintJson({{"reference", ref.ToString()}, {"digest", digest}, {"removed", true}});
    } else {
      std::printf("removed %s (%s)\n", Esc(ref.ToString()).c_str(), digest.c_str());
    }
    return Status::Ok();
  }});
}

void AddGc(CLI::App& app, std::vector<Command>* commands) {
  struct Args : RegistryArgs {
    std::string registry;
    bool dry_run = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("gc", "Collect a registry's garbage (unreferenced blobs)");
  sub->add_option("registry", args->registry, "[https://|http://]HOST[:PORT]")->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_flag("--dry-run", args->dry_run, "report what would be removed; remove nothing");
  sub->add_flag("--json", args->json, "print the registry's report on stdout");
  sub->add_option("--timeout", args->timeout, "seconds a single read or write may stall")
      ->check(CLI::PositiveNumber);
  sub->footer(
      "Runs on the server while it serves (docs/registry-api.md, \"Garbage collection\"):\n"
      "blobs no manifest, repository, version or cached patch references, and older than the\n"
      "server's --gc-grace, are removed. Needs an admin token.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(
        std::unique_ptr<client::RegistryClient> registry,
        RegistryClientFor(args->registry, args->conn, args->timeout, /*require_token=*/true));
    BLZ_ASSIGN_OR_RETURN(std::string body, registry->CollectGarbage(args->dry_run));
    nlohmann::json report = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (report.is_discarded() || !report.is_object()) {
      return Unavailable("gc: the registry's report is not a JSON object");
    }
    if (args->json) {
      PrintJson(report);
      return Status::Ok();
    }
    std::printf("%s%llu blobs removed, %llu bytes freed; %llu referenced, %llu kept (younger "
                "than the grace period)\n",
                report.value("dry_run", false) ? "dry run: " : "",
                (unsigned long long)report.value("blobs_removed", uint64_t(0)),
                (unsigned long long)report.value("bytes_freed", uint64_t(0)),
                (unsigned long long)report.value("blobs_marked", uint64_t(0)),
                (unsigned long long)report.value("blobs_too_young", uint64_t(0)));
    const uint64_t rebased = report.value("chain_links_rebased", uint64_t(0));
    const uint64_t rebase_failed = report.value("chain_rebases_failed", uint64_t(0));
    if (rebased > 0 || rebase_failed > 0) {
      // What a re-base onto a new parent computed on the way is young garbage (docs/storage.md).
      std::printf("chain links re-based first: %llu; failed: %llu (those links and their "
                  "parents stay)\n",
                  (unsigned long long)rebased, (unsigned long long)rebase_failed);
    }
    return Status::Ok();
  }});
}

void AddCatalog(CLI::App& app, std::vector<Command>* commands) {
  struct Args : RegistryArgs {
    std::string registry;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("catalog", "List a registry's repositories");
  sub->add_option("registry", args->registry, "[https://|http://]HOST[:PORT]")->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_flag("--json", args->json, "print {registry, repositories} on stdout");
  sub->add_option("--timeout", args->timeout, "seconds a single read or write may stall")
      ->check(CLI::PositiveNumber);
  sub->footer("GET /v2/_catalog, every page. A private registry needs a token (`blz login`).");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(
        std::unique_ptr<client::RegistryClient> registry,
        RegistryClientFor(args->registry, args->conn, args->timeout, /*require_token=*/false));
    BLZ_ASSIGN_OR_RETURN(std::vector<std::string> names, registry->ListRepositories());
    if (args->json) {
      PrintJson({{"registry", registry->registry().ToString()}, {"repositories", names}});
      return Status::Ok();
    }
    for (const std::string& n : names) std::printf("%s\n", Esc(n).c_str());
    return Status::Ok();
  }});
}

}  // namespace

void AddManageCommands(CLI::App& app, std::vector<Command>* commands) {
  AddCatalog(app, commands);
  AddRm(app, commands);
  AddGc(app, commands);
}

}  // namespace blz::cli
