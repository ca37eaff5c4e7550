#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "client/auth.h"
#include "client/client_config.h"
#include "core/file_util.h"
#include "core/text.h"
#include "formats/blz_archive.h"
#include "formats/tensor_stats.h"

namespace blz::cli {
namespace {

std::string ParentOf(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto pos = p.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return p.substr(0, pos);
}

}  // namespace

void PrintJson(const nlohmann::json& j) {
  std::cout << j.dump(2) << std::endl;
}

void PrintOrderedJson(const nlohmann::ordered_json& j) {
  std::cout << j.dump(2) << std::endl;
}

std::string NonFiniteSummary(const formats::ModelStats& stats) {
  constexpr size_t kShown = 5;
  std::vector<std::string> named;
  size_t count = 0;
  for (const formats::TensorStatsEntry& t : stats.tensors) {
    const formats::TensorStats& s = t.stats;
    const uint64_t bad = s.nan + s.pos_inf + s.neg_inf;
    if (!t.supported || bad == 0) continue;
    ++count;
    if (named.size() == kShown) continue;
    named.push_back(t.name + (s.all_non_finite
                                  ? " (all " + std::to_string(s.count) + " values)"
                                  : " (" + std::to_string(bad) + " of " +
                                        std::to_string(s.count) + " values)"));
  }
  if (count == 0) return "";
  std::string out = std::to_string(count) + (count == 1 ? " tensor holds" : " tensors hold") +
                    " NaN/Inf: ";
  for (size_t i = 0; i < named.size(); ++i) out += (i == 0 ? "" : ", ") + named[i];
  if (count > named.size()) out += " and " + std::to_string(count - named.size()) + " more";
  return out;
}

void Note(const std::string& text) {
  std::fprintf(stderr, "blz: note: %s\n", EscapeForTerminal(text).c_str());
}

void PrintText(const std::string& text) {
  std::fputs(EscapeTextForTerminal(text).c_str(), stdout);
}

std::string Esc(const std::string& s) { return EscapeForTerminal(s); }

namespace {

// Sets the options of `sub` that the command line left alone from the config file `path`.
void ApplyConfigFile(CLI::App* sub, const std::string& path) {
  CLI::ConfigTOML formatter;  // reads TOML and INI
  std::vector<CLI::ConfigItem> items;
  try {
    items = formatter.from_file(path);
  } catch (const CLI::ParseError& e) {
    throw CLI::ConfigError("config file " + path + ": cannot be read: " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section start and end markers
    const std::string where = "config file " + path + ": ";
    if (!item.parents.empty() &&
        !(item.parents.size() == 1 && item.parents[0] == sub->get_name())) {
      throw CLI::ConfigError(where + "unknown section [" + item.parents[0] + "] (options go at " +
                             "top level or in [" + sub->get_name() + "])");
    }
    std::string name = item.name;
    for (char& c : name) c = c == '_' ? '-' : c;
    CLI::Option* op = name == "config" || name == "help" || name.rfind('-', 0) == 0
                          ? nullptr
                          : sub->get_option_no_throw("--" + name);
    if (op == nullptr) {
      throw CLI::ConfigError(where + "unknown option '" + item.name + "' (see blz " +
                             sub->get_name() + " --help)");
    }
    if (op->count() > 0) continue;  // the command line wins
    try {
      if (op->get_expected_min() == 0) {  // a flag: true/false/1/0/on/off/yes/no
        op->add_result(op->get_flag_value(name, formatter.to_flag(item)));
      } else {
        op->add_result(item.inputs);
      }
      op->run_callback();  // checks and transforms, then stores the value
    } catch (const CLI::ParseError& e) {
      throw CLI::ConfigError(where + item.name + ": " + e.what());
    }
  }
}

}  // namespace

void AddConfigFileOption(CLI::App* sub) {
  auto path = std::make_shared<std::string>();
  sub->add_option("--config", *path,
                  "read options from this TOML/INI file (key = value, the option's long name "
                  "without dashes); options on the command line override it")
      ->check(CLI::ExistingFile);
  sub->final_callback([sub, path]() {
    if (!path->empty()) ApplyConfigFile(sub, *path);
  });
}

void AddProgressOptions(CLI::App* sub, ProgressArgs* args) {
  sub->add_flag("--progress{terminal}", args->progress,
                "progress on stderr: auto (default: a redrawn bar on a terminal, else a line "
                "per phase that took a second or more), terminal (a bare --progress: draw even "
                "when stderr is not a terminal, as lines), plain (a line every few seconds and "
                "one per phase, no '\\r': for CI logs), off")
      ->check(CLI::IsMember({"auto", "terminal", "always", "plain", "off"}));
  sub->add_flag("-q,--quiet", args->quiet, "no progress on stderr (same as --progress=off)");
}

client::ProgressMode ProgressModeOf(const ProgressArgs& args) {
  if (args.quiet) return client::ProgressMode::kOff;
  Result<client::ProgressRequest> request = client::ParseProgressRequest(args.progress);
  // The option's check admits only valid values.
  return client::ResolveProgressMode(request.ok() ? *request : client::ProgressRequest::kAuto);
}

std::vector<std::string> JoinProgressValues(int argc, const char* const* argv) {
  std::vector<std::string> out;
  bool rest_positional = false;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!rest_positional && arg == "--progress" && i + 1 < argc &&
        client::ParseProgressRequest(argv[i + 1]).ok()) {
      out.push_back(arg + "=" + argv[i + 1]);
      ++i;
      continue;
    }
    if (arg == "--") rest_positional = true;
    out.push_back(arg);
  }
  return out;
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

ScopedTempDir::~ScopedTempDir() {
  if (!path_.empty()) RemoveAll(path_);
}

Status ScopedTempDir::CreateNear(const std::string& near_path) {
  if (!path_.empty()) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(path_, MakeTempDir(ParentOf(near_path), ".blz-tmp-"));
  return Status::Ok();
}

void AddRegistryConnectionOptions(CLI::App* sub, RegistryConnectionArgs* args) {
  sub->add_option("--ca-cert", args->ca_cert,
                  "PEM file of CA certificates to trust for https:// registries instead of the "
                  "system store (default: $BLZ_CA_BUNDLE, else the CA `blz login --ca-cert` "
                  "remembered for the registry)");
  sub->add_flag("--insecure", args->insecure,
                "https:// without verifying the registry's certificate or host name (the "
                "connection is encrypted but not authenticated)");
  sub->add_flag("--plain-http", args->plain_http,
                "plain HTTP for registries written without a scheme (default: the scheme `blz "
                "login` remembered, else https, except localhost and 127.0.0.0/8)");
}

client::AddressDefaults AddressDefaultsFor(const RegistryConnectionArgs& args) {
  client::AddressDefaults d;
  d.plain_http = args.plain_http;
  if (const char* env = std::getenv("BLZ_REGISTRY"); env != nullptr) d.registry = env;
  // The schemes `blz login` remembered (best effort: a damaged client.json is reported by the
  // commands that read its other settings).
  if (Result<std::string> path = client::ClientConfigPath(); path.ok()) {
    Result<std::map<std::string, bool>> schemes = client::LoadRememberedSchemes(*path);
    if (schemes.ok()) d.remembered_tls = std::move(schemes).value();
  }
  return d;
}

Result<ExplicitCa> ExplicitCaFor(const RegistryConnectionArgs& args) {
  ExplicitCa ca;
  if (!args.ca_cert.empty()) {
    ca.file = args.ca_cert;
    ca.origin = "--ca-cert";
  } else if (const char* env = std::getenv("BLZ_CA_BUNDLE"); env != nullptr && *env != '\0') {
    ca.file = env;
    ca.origin = "BLZ_CA_BUNDLE";
  }
  if (!ca.file.empty() && !PathExists(ca.file)) {
    return NotFound("no such file: " + ca.file + " (the CA bundle given by " + ca.origin + ")");
  }
  return ca;
}

Result<client::HttpClientOptions> HttpOptionsFor(const RegistryConnectionArgs& args,
                                                 int timeout_seconds,
                                                 const client::RegistryAddress& registry) {
  client::HttpClientOptions o;
  o.io_timeout = std::chrono::seconds(timeout_seconds);
  o.insecure = args.insecure;
  BLZ_ASSIGN_OR_RETURN(ExplicitCa ca, ExplicitCaFor(args));
  if (!ca.file.empty()) {
    o.ca_file = ca.file;
    o.ca_origin = ca.origin;
  } else if (registry.tls) {
    if (Result<std::string> dir = client::ClientConfigDir(); dir.ok()) {
      o.ca_file = client::RememberedCaFile(*dir, registry.ToString(), registry.host,
                                           registry.port);
      if (!o.ca_file.empty()) {
        o.ca_origin = "remembered by `blz login`";
        o.ca_adds_to_system = true;
      }
    }
  }
  return o;
}

Result<client::Reference> ResolveReference(const std::string& text,
                                           const RegistryConnectionArgs& args) {
  return client::ParseReference(text, AddressDefaultsFor(args));
}

Result<client::RegistryAddress> ResolveRegistry(const std::string& text,
                                                const RegistryConnectionArgs& args) {
  return client::ParseRegistryAddress(text, AddressDefaultsFor(args));
}

Result<std::unique_ptr<client::RegistryClient>> RegistryClientFor(
    const std::string& registry, const RegistryConnectionArgs& conn, int timeout_seconds,
    bool require_token) {
  BLZ_ASSIGN_OR_RETURN(client::RegistryAddress addr, ResolveRegistry(registry, conn));
  return RegistryClientFor(addr, conn, timeout_seconds, require_token);
}

Result<std::unique_ptr<client::RegistryClient>> RegistryClientFor(
    const client::RegistryAddress& addr, const RegistryConnectionArgs& conn, int timeout_seconds,
    bool require_token) {
  client::RegistryClientOptions options;
  BLZ_ASSIGN_OR_RETURN(options.http, HttpOptionsFor(conn, timeout_seconds, addr));
  BLZ_ASSIGN_OR_RETURN(options.token, client::ResolveToken(addr.ToString()));
  if (require_token && options.token.empty()) {
    return Unauthorized("no token for " + addr.ToString() + ": run `blz login " +
                        addr.ToString() + "` with a token that may do this, or set BLZ_TOKEN");
  }
  return std::make_unique<client::RegistryClient>(addr, options);
}

}  // namespace blz::cli
