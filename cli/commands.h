// Command registration for the `blz` binary. Each group adds its subcommands to the app and a
// Command whose `run` is called when that subcommand was parsed. Option storage lives in the
// closures, so it outlives parsing.
#ifndef BLZ_CLI_COMMANDS_H_
#define BLZ_CLI_COMMANDS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "client/progress.h"
#include "client/pull_lossy.h"
#include "client/registry_client.h"
#include "core/status.h"

namespace blz::formats {
struct ModelStats;
}  // namespace blz::formats

namespace blz::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<Status()> run;
  // When set and `run` returned ok, the process exits with *exit_code (kExitDiffers = 1 when
  // `blz diff` finds a difference or a --fail-on-nan gate fails); otherwise with 0.
  std::shared_ptr<int> exit_code;
};

// pack, unpack, verify, inspect, diff, apply.
void AddModelCommands(CLI::App& app, std::vector<Command>* commands);
// id (structural identity, formats/identify.h).
void AddIdentityCommands(CLI::App& app, std::vector<Command>* commands);
// serve, push, pull, login, tags.
void AddRegistryCommands(CLI::App& app, std::vector<Command>* commands);

// rm, gc: registry maintenance (cli/commands_manage.cc).
void AddManageCommands(CLI::App& app, std::vector<Command>* commands);
// ls, cache prune, cache rm (cli/commands_cache.cc).
void AddCacheCommands(CLI::App& app, std::vector<Command>* commands);
// After a successful pull into the store `cache_flag` names (as --cache): the automatic
// budget of client.json (client/client_config.h), if one is set. Evicts by utility
// (client/cache_prune.h PlanBudgetPrune), never the version `pulled` nor its base, and says
// what it evicted in notes on stderr. Never fails the pull: problems become notes too.
// Returns the digests evicted (cli/commands_cache.cc).
std::vector<std::string> AutoPruneAfterPull(const std::string& cache_flag,
                                            const std::string& pulled_digest,
                                            const std::string& pulled_base);
// logout, token create|list|revoke (cli/commands_token.cc).
void AddTokenCommands(CLI::App& app, std::vector<Command>* commands);

// admin migrate (cli/commands_admin.cc).
void AddAdminCommands(CLI::App& app, std::vector<Command>* commands);

// delta create|apply (cli/commands_delta.cc).
void AddDeltaCommands(CLI::App& app, std::vector<Command>* commands);
// The .wdelta branches of `blz inspect` and `blz verify` (cli/commands_delta.cc): a file that
// starts with "wdelta\0"; inspect describes it (per tensor strategy and bytes, the error
// recorded at creation); verify checks its records and checksum and, with a base, the parent
// hash and that every tensor decodes.
bool FileHasWdeltaMagic(const std::string& path);
Status InspectWdelta(const std::string& path, bool json);
Status VerifyWdelta(const std::string& path, const std::string& base_path, bool json);

// `blz pull --lossy` (cli/commands_pull_lossy.cc): runs client::PullLossy and prints its
// report (--json: one object) stating LOSSY, the strategy, the delta's bytes and those saved
// against the lossless patch, the error the registry measured and the output's own digest.
// `quiet` (-q): no notes or summary on stderr, only the output directory on stdout.
Status RunPullLossy(const std::string& reference, const client::LossyPullOptions& options,
                    bool json, bool quiet);

// export (cli/commands_export.cc).
void AddExportCommands(CLI::App& app, std::vector<Command>* commands);

// The export options shared by `blz export` and `blz pull --export`.
struct ExportArgs {
  std::string format;  // gguf | safetensors | pytorch | squizd
  std::string cast;    // "" = keep types
  unsigned threads = 0;
  uint64_t max_shard_bytes = 5'000'000'000ull;
  bool force = false;
  std::string name;    // GGUF general.name ("" = the source's name)
  bool quiet = false;  // -q: no summary on stderr (errors only)
};
// Adds --format (or, for pull, --export), --cast, --threads, --max-shard-size, --force.
void AddExportOptions(CLI::App* sub, ExportArgs* args, bool format_required);
// Exports `source` (a path) to `output`, printing the report (--json) or a summary. `pulled`
// (when not null) is added to the JSON report as "pull" (what `pull --export` fetched).
Status RunExport(const std::string& source, const std::string& output, const ExportArgs& args,
                 bool json, client::ProgressMode progress,
                 const nlohmann::ordered_json* pulled = nullptr);

// The last component of a reference's repository ("org/model" -> "model"); "" if unparsable.
std::string RepositoryBaseName(const std::string& reference);

// Helpers shared by the command groups (cli/cli_util.cc).

// The connection options of every command that talks to a registry: --ca-cert FILE (default
// $BLZ_CA_BUNDLE, else the CA `blz login` remembered for the registry), --insecure,
// --plain-http (client/http_client.h, client/reference.h, client/client_config.h).
struct RegistryConnectionArgs {
  std::string ca_cert;
  bool insecure = false;
  bool plain_http = false;
};
// Registers --ca-cert, --insecure and --plain-http on `sub`.
void AddRegistryConnectionOptions(CLI::App* sub, RegistryConnectionArgs* args);
// What references leave out: --plain-http, $BLZ_REGISTRY (the default registry host) and the
// schemes `blz login` remembered (client.json).
client::AddressDefaults AddressDefaultsFor(const RegistryConnectionArgs& args);
// The CA bundle the user named: --ca-cert, else $BLZ_CA_BUNDLE (when set and not empty);
// file "" when neither. kNotFound "no such file: FILE (the CA bundle given by ...)" when it
// does not exist.
struct ExplicitCa {
  std::string file;
  std::string origin;  // "--ca-cert" or "BLZ_CA_BUNDLE"
};
Result<ExplicitCa> ExplicitCaFor(const RegistryConnectionArgs& args);
// HTTP options for talking to `registry`: `timeout_seconds` per single read or write, and the
// TLS trust: ExplicitCaFor(args), else (https) the CA `blz login` remembered for the registry
// (config dir certs.d/HOST:PORT/ca.crt, trusted with the system store), else the system store.
// Every command that contacts a registry takes its trust from here. (The scheme, and so
// options.tls, comes from the registry address: RegistryClient, Push and Pull set it.)
// Errors: kNotFound for a CA file that does not exist.
Result<client::HttpClientOptions> HttpOptionsFor(const RegistryConnectionArgs& args,
                                                 int timeout_seconds,
                                                 const client::RegistryAddress& registry);
// ParseReference / ParseRegistryAddress with AddressDefaultsFor(args).
Result<client::Reference> ResolveReference(const std::string& text,
                                           const RegistryConnectionArgs& args);
Result<client::RegistryAddress> ResolveRegistry(const std::string& text,
                                                const RegistryConnectionArgs& args);

// A reference as `blz pull` and `blz tag` take it (cli/commands_cache.cc): ResolveReference,
// also accepting NAME@sha256:<12+ hex> (client/local_ref.h), completed from the local store
// `cache_flag` names, else (unless `offline`) from the registry's tags of NAME.
Result<client::Reference> ResolveLocalReference(const std::string& text,
                                                const RegistryConnectionArgs& conn,
                                                const std::string& cache_flag, bool offline,
                                                int timeout_seconds);

// A registry client for `registry` with its stored (or $BLZ_TOKEN) token and
// `timeout_seconds` per single read or write. With `require_token`, having none is
// kUnauthorized, telling to run `blz login` (for commands that need a token: rm, gc, token).
Result<std::unique_ptr<client::RegistryClient>> RegistryClientFor(
    const client::RegistryAddress& registry, const RegistryConnectionArgs& conn,
    int timeout_seconds, bool require_token);
// The same for a registry given as text ("[https://]HOST[:PORT]"), resolved with `conn`.
Result<std::unique_ptr<client::RegistryClient>> RegistryClientFor(
    const std::string& registry, const RegistryConnectionArgs& conn, int timeout_seconds,
    bool require_token);

// Prints `j` (indented) and a newline on stdout.
void PrintJson(const nlohmann::json& j);
void PrintOrderedJson(const nlohmann::ordered_json& j);
// "blz: note: <text>" on stderr (one line: `text` is escaped with EscapeForTerminal).
void Note(const std::string& text);
// Writes blz-rendered multi-line text to stdout with control characters escaped
// (core/text.h EscapeTextForTerminal): newlines and tabs kept, nothing a terminal obeys.
void PrintText(const std::string& text);
// An untrusted string (path, name, tag, reference) made safe for one line of human-readable
// output: core/text.h EscapeForTerminal.
std::string Esc(const std::string& s);
// `--progress[=auto|terminal|plain|off]` and `-q,--quiet` of the commands that show progress.
// A bare `--progress` means "terminal" (draw even when stderr is not a terminal: then as plain
// lines, never '\r' frames); see client/progress.h for the modes.
struct ProgressArgs {
  std::string progress = "auto";
  bool quiet = false;
};
void AddProgressOptions(CLI::App* sub, ProgressArgs* args);
// The mode for stderr: off with --quiet, else the request resolved against isatty(2).
client::ProgressMode ProgressModeOf(const ProgressArgs& args);
// The command line with "--progress MODE" (MODE one of auto, terminal, plain, off) joined into
// "--progress=MODE", so that both spellings work while a bare `--progress` followed by a
// positional argument keeps working (CLI11 flags take a value only after '='). Nothing after a
// "--" is touched.
std::vector<std::string> JoinProgressValues(int argc, const char* const* argv);
// Adds `--config FILE` to `sub`: a TOML or INI file (read by CLI11's ConfigTOML parser) that
// sets any of `sub`'s options by their long name without dashes (`listen = "0.0.0.0:5000"`,
// `cache-size = "20GB"`, `private = true`; '_' may stand for '-'), at top level or in a
// [<sub's name>] section. Options given on the command line win over the file. Applied when
// `sub` has been parsed, through each option's own checks and transforms; a missing file, an
// unknown key (or section) or a bad value throws a CLI::ParseError naming the file (a usage
// error, exit code 2).
void AddConfigFileOption(CLI::App* sub);

// A temporary directory removed (with its contents) when the object dies.
class ScopedTempDir {
 public:
  ScopedTempDir() = default;
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  // Creates "<dir of near_path>/.blz-tmp-XXXXXX": on the output's file system, so large
  // temporary archives neither fill /tmp nor cross devices.
  Status CreateNear(const std::string& near_path);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The tensors of `stats` that hold NaN or Inf values, as one line for a message:
// "<k> tensors hold NaN/Inf: <name> (all <n> values), <name> (<m> of <n> values), ..." (at
// most 5 names, then "and <r> more"); "" when there are none. cli/cli_util.cc.
std::string NonFiniteSummary(const formats::ModelStats& stats);

// Does `path` exist (any kind, without following a final symlink)?
bool PathExists(const std::string& path);

}  // namespace blz::cli

#endif  // BLZ_CLI_COMMANDS_H_
