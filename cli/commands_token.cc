// Credential commands: logout, and `token create|list|revoke` (the registry's token admin API,
// docs/registry-api.md). `login` is with the other registry commands (commands_registry.cc).
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/time_format.h"
#include "client/auth.h"
#include "client/reference.h"
#include "client/registry_client.h"

namespace blz::cli {
namespace {

// "30d", "12h", "90m", "45s" or plain seconds -> seconds. Errors: kInvalidArgument.
Result<int64_t> ParseDuration(const std::string& text) {
  if (text.empty()) return InvalidArgument("--expires is empty (e.g. 30d, 12h, 90m, 3600)");
  int64_t unit = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'd': unit = 86400; digits.pop_back(); break;
    case 'h': unit = 3600; digits.pop_back(); break;
    case 'm': unit = 60; digits.pop_back(); break;
    case 's': digits.pop_back(); break;
    default: break;
  }
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("--expires '" + text +
                           "' is not a duration (a number with d, h, m or s, e.g. 30d)");
  }
  const int64_t seconds = std::stoll(digits) * unit;
  if (seconds <= 0) return InvalidArgument("--expires must be positive");
  return seconds;
}

void AddLogout(CLI::App& app, std::vector<Command>* commands) {
  auto registry = std::make_shared<std::string>();
  auto plain_http = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("logout", "Forget the token stored for a registry");
  sub->add_option("registry", *registry, "[https://|http://]HOST[:PORT]")->required();
  sub->add_flag("--plain-http", *plain_http,
                "the registry is plain HTTP (its default port is then 80, as for login)");
  sub->footer("Removes the entry `blz login` stored; other registries' tokens are kept.");
  commands->push_back({sub, [registry, plain_http]() -> Status {
    RegistryConnectionArgs conn;
    conn.plain_http = *plain_http;
    BLZ_ASSIGN_OR_RETURN(client::RegistryAddress addr, ResolveRegistry(*registry, conn));
    BLZ_ASSIGN_OR_RETURN(std::string path, client::AuthFilePath());
    BLZ_ASSIGN_OR_RETURN(bool removed, client::RemoveToken(path, addr.ToString()));
    std::fprintf(stderr, removed ? "token for %s removed from %s\n"
                                 : "no token stored for %s in %s\n",
                 Esc(addr.ToString()).c_str(), Esc(path).c_str());
    return Status::Ok();
  }});
}

void AddToken(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string registry, name, scope, expires;
    bool json = false;
    int timeout = 60;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  CLI::App* token = app.add_subcommand(
      "token", "Manage a registry's API tokens (needs an admin token: `blz login` with it)");
  token->require_subcommand(1);
  token->footer(
      "Scopes: PATTERN:ACTIONS[;PATTERN:ACTIONS...], ACTIONS from pull, push, delete, admin;\n"
      "PATTERN is a repository (org/model), a namespace (org/* : org/x and org/a/b, not orgx/y)\n"
      "or * (admin only with *). E.g. 'org/*:pull,push' or '*:pull'.");
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--registry", args->registry, "[https://|http://]HOST[:PORT] of the registry")
        ->required();
    AddRegistryConnectionOptions(sub, &args->conn);
    sub->add_option("--timeout", args->timeout, "seconds a single read or write may stall")
        ->check(CLI::PositiveNumber);
    sub->add_flag("--json", args->json, "print the registry's JSON answer on stdout");
  };

  CLI::App* create = token->add_subcommand("create", "Create a token; prints it (once) on stdout");
  create->add_option("name", args->name, "token name: letters, digits, '.', '_', '-'")
      ->required();
  create->add_option("--scope", args->scope, "what it may do, e.g. 'org/*:pull,push'")
      ->required();
  create->add_option("--expires", args->expires,
                     "lifetime: 30d, 12h, 90m, 45s or seconds (default: never expires)");
  add_common(create);
  create->footer("The token is shown only now; the registry keeps only its hash.");
  commands->push_back({create, [args]() -> Status {
    int64_t expires_in = 0;
    if (!args->expires.empty()) {
      BLZ_ASSIGN_OR_RETURN(expires_in, ParseDuration(args->expires));
    }
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<client::RegistryClient> c,
                         RegistryClientFor(args->registry, args->conn, args->timeout,
                                           /*require_token=*/true));
    BLZ_ASSIGN_OR_RETURN(nlohmann::json j, c->CreateToken(args->name, args->scope, expires_in));
    if (args->json) {
      PrintJson(j);
      return Status::Ok();
    }
    std::string expires = j.contains("expires") && j["expires"].is_number_integer()
                              ? "expires " +
                                    FormatRfc3339UtcSeconds(j["expires"].get<int64_t>())
                              : std::string("never expires");
    std::fprintf(stderr, "token '%s' (scope %s, %s) created on %s; it is shown only once:\n",
                 Esc(j.value("name", "")).c_str(), Esc(j.value("scope", "")).c_str(),
                 expires.c_str(), Esc(c->registry().ToString()).c_str());
    std::printf("%s\n", Esc(j["token"].get<std::string>()).c_str());
    return Status::Ok();
  }});

  CLI::App* list = token->add_subcommand("list", "List the active tokens (never their values)");
  add_common(list);
  commands->push_back({list, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<client::RegistryClient> c,
                         RegistryClientFor(args->registry, args->conn, args->timeout,
                                           /*require_token=*/true));
    BLZ_ASSIGN_OR_RETURN(nlohmann::json j, c->ListTokens());
    if (args->json) {
      PrintJson(j);
      return Status::Ok();
    }
    std::printf("%-24s %-40s %s\n", "NAME", "SCOPE", "EXPIRES");
    for (const nlohmann::json& t : j["tokens"]) {
      if (!t.is_object()) continue;
      std::string expires = "never";
      if (t.contains("expires") && t["expires"].is_number_integer()) {
        expires = FormatRfc3339UtcSeconds(t["expires"].get<int64_t>());
      }
      if (t.value("expired", false)) expires += " (expired)";
      std::printf("%-24s %-40s %s\n", Esc(t.value("name", "")).c_str(),
                  Esc(t.value("scope", "")).c_str(), expires.c_str());
    }
    return Status::Ok();
  }});

  CLI::App* revoke = token->add_subcommand("revoke", "Revoke a token (at once, for good)");
  revoke->add_option("name", args->name, "token name")->required();
  add_common(revoke);
  commands->push_back({revoke, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<client::RegistryClient> c,
                         RegistryClientFor(args->registry, args->conn, args->timeout,
                                           /*require_token=*/true));
    BLZ_RETURN_IF_ERROR(c->RevokeToken(args->name));
    if (args->json) {
      PrintJson({{"revoked", args->name}});
    } else {
      std::fprintf(stderr, "token '%s' revoked on %s\n", Esc(args->name).c_str(),
                   Esc(c->registry().ToString()).c_str());
    }
    return Status::Ok();
  }});
}

}  // namespace

void AddTokenCommands(CLI::App& app, std::vector<Command>* commands) {
  AddLogout(app, commands);
  AddToken(app, commands);
}

}  // namespace blz::cli
