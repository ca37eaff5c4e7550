// Registry commands: serve, push, pull, login, tags (logout and token: commands_token.cc).
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "client/auth.h"
#include "client/client_config.h"
#include "client/http_client.h"
#include "client/local_ref.h"
#include "client/progress.h"
#include "client/pull.h"
#include "client/push.h"
#include "client/reference.h"
#include "client/registry_client.h"
#include "core/progress_fn.h"
#include "formats/tensor_stats.h"
#include "registry/server.h"
#include "web/web_handler.h"

namespace blz::cli {
namespace {

using client::FormatBytes;

nlohmann::json NullIfEmpty(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

// --retries, --stall-timeout and --verbose of pull and push (docs/client.md, "Retries").
struct TransferArgs {
  int retries = 5;
  int stall_timeout = 60;
  bool verbose = false;
};

void AddTransferOptions(CLI::App* sub, TransferArgs* args) {
  sub->add_option("--timeout,--stall-timeout", args->stall_timeout,
                  "seconds without a byte moving before a transfer attempt is abandoned (and "
                  "retried)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--retries", args->retries,
                  "retries in a row without progress (connection errors, stalls, 408, 429, "
                  "5xx), with exponential backoff")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  sub->add_flag("--verbose", args->verbose, "report every retry and resume on stderr");
}

client::RetryPolicy RetryPolicyFrom(const TransferArgs& args) {
  client::RetryPolicy p;
  p.max_attempts = args.retries + 1;
  p.stall_timeout = std::chrono::seconds(args.stall_timeout);
  return p;
}

// --verbose: every retry on stderr. Otherwise (unless -q) the first retry only, so that a
// dead registry is not minutes of silence: "blz: cannot connect to ...; retrying 1/5 ...".
client::RetryLogFn RetryLog(const TransferArgs& args, const ProgressArgs& progress) {
  if (args.verbose) {
    return [](const client::RetryEvent& e) {
      std::fprintf(stderr, "blz: %s\n", Esc(client::FormatRetryEvent(e)).c_str());
    };
  }
  if (progress.quiet) return nullptr;
  auto told = std::make_shared<std::atomic<bool>>(false);  // parts may retry in parallel
  return [told](const client::RetryEvent& e) {
    if (told->exchange(true)) return;
    std::fprintf(stderr, "blz: %s; retrying %d/%d (--verbose shows every retry)\n",
                 Esc(e.reason).c_str(), e.retry, e.max_retries);
  };
}

void AddServe(CLI::App& app, std::vector<Command>* commands) {
  auto options = std::make_shared<registry::ServerOptions>();
  CLI::App* sub = app.add_subcommand("serve", "Run the registry server (until Ctrl-C)");
  sub->add_option("--data", options->data_dir, "data directory (blobs, database)")
      ->capture_default_str();
  sub->add_option("--metadata", options->metadata,
                  "metadata database: sqlite:PATH, or postgresql://USER@HOST:PORT/DB to share "
                  "it between replicas (password from the URL, PGPASSWORD or ~/.pgpass; never "
                  "printed); migrations are applied at start (default: sqlite:<data>/blz.db)");
  sub->add_flag("--migrate-only", options->migrate_only,
                "apply the metadata database's migrations, print 'metadata: <database>: schema "
                "version N', and exit");
  sub->add_option("--listen", options->listen, "address to listen on, ADDR:PORT (port 0 = any)")
      ->capture_default_str();
  sub->add_option("--threads", options->threads, "server threads (0 = number of cores)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--private", options->private_mode, "require a token for reads too");
  sub->add_flag("--no-delete", options->no_delete,
                "refuse DELETE of manifests, tags and blobs (405 UNSUPPORTED)");
  const std::map<std::string, uint64_t> time_units = {
      {"s", 1}, {"m", 60}, {"min", 60}, {"h", 3600}, {"d", 86400}};
  sub->add_option("--gc-interval", options->gc_interval,
                  "collect garbage (unreferenced blobs) every INTERVAL, e.g. 6h, 1d (0 = only "
                  "when asked: POST /v2/_blz/gc, `blz gc`)")
      ->transform(CLI::AsNumberWithUnit(time_units, CLI::AsNumberWithUnit::CASE_INSENSITIVE))
      ->default_str("0");
  sub->add_option("--gc-grace", options->gc_grace,
                  "unreferenced blobs written less than this long ago are kept (protects pushes "
                  "in progress)")
      ->transform(CLI::AsNumberWithUnit(time_units, CLI::AsNumberWithUnit::CASE_INSENSITIVE))
      ->default_str("1h");
  sub->add_option("--job-lease", options->job_lease,
                  "how long a replica's lease on shared work (compression, patches, garbage "
                  "collection) lasts without renewal: a replica killed mid-work blocks the "
                  "others that long (at least 3s)")
      ->transform(CLI::AsNumberWithUnit(time_units, CLI::AsNumberWithUnit::CASE_INSENSITIVE))
      ->check(CLI::Range(uint64_t(3), uint64_t(86400)))
      ->default_str("30s");
  sub->add_option("--public-url", options->public_url,
                  "URL clients reach the registry at, e.g. https://models.example.com; the "
                  "realm of auth challenges is URL/v2/_blz/token (default: http://<the "
                  "request's Host header>)");
  sub->add_option("--cache-size", options->cache_bytes,
                  "soft bound on archives rebuilt from full patches into <data>/cache "
                  "(e.g. 512MiB, 20GB; kb = 1000 bytes, kib = 1024)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->default_str("8GiB");
  sub->add_flag("--keep-raw-archives", options->keep_raw_archives,
                "keep each pushed archive's raw blob next to its full patch (more disk, no "
                "rebuilds)");
  sub->add_flag("--verify-storage", options->verify_storage,
                "before serving, re-hash every stored blob (damaged ones are moved to "
                "<data>/quarantine) and rebuild every chain; a summary is printed "
                "(docs/registry-api.md, docs/storage.md)");
  sub->add_option("--max-chain-depth", options->max_chain_depth,
                  "store a version as a patch from a parent version, at most N links deep "
                  "(0 = every version stored whole as its full patch; docs/storage.md, Chains)")
      ->check(CLI::Range(0, 64))
      ->default_str("4");
  sub->add_flag("--metrics,!--no-metrics", options->metrics,
                "serve GET /metrics (Prometheus text format: request counts by route and "
                "status, bytes, durations, cache hits, storage bytes; docs/operating.md); "
                "unauthenticated, names no repository (default: on)");
  auto web_view = std::make_shared<bool>(true);
  sub->add_flag("--web,!--no-web", *web_view,
                "serve the web view at / (the browser app embedded in blz; Content-Security-"
                "Policy, immutable caching of hashed assets; docs/operating.md) (default: on); "
                "off: / is a 404 like any path outside /v2/");
  sub->add_option("--tls-cert", options->tls_cert,
                  "serve HTTPS (TLS 1.2+) with this PEM certificate chain (needs --tls-key)");
  sub->add_option("--tls-key", options->tls_key, "the PEM private key of --tls-cert");
  sub->add_option("--trusted-proxy", options->trusted_proxies,
                  "a reverse proxy (IP address or CIDR block, repeatable) whose "
                  "X-Forwarded-For/-Proto/-Host are honoured (access log client, auth realm); "
                  "from other peers they are ignored");
  // Quotas and limits (docs/registry-api.md, "Quotas and limits").
  sub->add_option("--max-uploads-per-token", options->max_uploads_per_token,
                  "open blob upload sessions per token (0 = no cap); over it: 429")
      ->capture_default_str();
  sub->add_option("--max-uploads-per-repository", options->max_uploads_per_repository,
                  "open blob upload sessions per repository (0 = no cap); over it: 429")
      ->capture_default_str();
  sub->add_option("--upload-idle-timeout", options->upload_idle_timeout,
                  "delete upload sessions that received no byte for this long, e.g. 6h, 1d")
      ->transform(CLI::AsNumberWithUnit(time_units, CLI::AsNumberWithUnit::CASE_INSENSITIVE))
      ->default_str("24h");
  sub->add_option("--delta-cache-size", options->delta_cache_bytes,
                  "bytes of cached lossy deltas kept; past it the least recently used are "
                  "evicted and their blobs removed (0 = no bound)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->default_str("8GiB");
  sub->add_option("--computations-per-minute", options->computations_per_minute,
                  "new patches, value diffs, statistics and lossy deltas (not cached yet) per "
                  "client (token, else address) and minute; admin tokens are exempt (0 = no "
                  "limit); over it: 429 with Retry-After")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--computation-burst", options->computation_burst,
                  "new computations a client may start at once before --computations-per-minute "
                  "applies (0 = no limit)")
      ->capture_default_str();
  // Blob storage (docs/storage.md, issue 25).
  sub->add_option("--storage", options->storage,
                  "where blobs live: file:DIR (default: <data>/blobs) or "
                  "s3://BUCKET/PREFIX?endpoint=URL&region=R[&path_style=1] (credentials from "
                  "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN])");
  sub->add_option("--blob-cache-size", options->blob_cache_bytes,
                  "bound of the local copy of a remote store's blobs in <data>/cache/blobs "
                  "(for patches and serving)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->default_str("8GiB");
  sub->add_flag("--redirect", options->redirect,
                "answer blob GETs with 307 to a presigned URL of the store (10 minutes) "
                "when it has them (s3); default: the server proxies the bytes");
  auto log_format = std::make_shared<std::string>("text");
  sub->add_option("--log-format", *log_format,
                  "access log on stderr, one line per request: text (space-separated fields) "
                  "or json (one object per line); fields in docs/operating.md")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddConfigFileOption(sub);
  sub->footer(
      "On first start the admin token is printed once as 'admin token: <token>'; then\n"
      "'listening on http://ADDR:PORT' (https:// with --tls-cert). Clients store the token\n"
      "with `blz login`; the admin makes scoped tokens with `blz token create`. Docker-style\n"
      "clients authenticate with Basic credentials (any user name, a token as the password)\n"
      "or the token endpoint. Behind a reverse proxy: --trusted-proxy, --public-url.\n"
      "Every option can also be set in a --config file, e.g.\n"
      "  listen = \"0.0.0.0:5000\"\n  data = \"/var/lib/blz\"\n  log-format = \"json\"\n"
      "A second server on the same --data directory refuses to start (exit code 6).\n"
      "Operating it (config, access log, /metrics, web view, systemd): docs/operating.md");
  commands->push_back({sub, [options, log_format, web_view]() -> Status {
    BLZ_ASSIGN_OR_RETURN(options->log_format, registry::ParseLogFormat(*log_format));
    if (*web_view) {
      options->web = [](const registry::RequestHead& head) { return web::HandleWeb(head); };
    }
    return registry::RunServer(*options);
  }});
}

void AddPush(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string input, reference, cache;
    bool json = false;
    ProgressArgs progress;
    uint64_t chunk_size = client::kDefaultChunkBytes;
    bool fail_on_nan = false;
    bool no_patch = false;
    bool verify_locally = false;
    TransferArgs transfer;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  auto exit_code = std::make_shared<int>(0);
  CLI::App* sub = app.add_subcommand("push", "Upload a model version to a registry");
  sub->add_option("input", args->input,
                  "model directory, .safetensors file, GGUF file or .blz archive")
      ->required();
  sub->add_option("reference", args->reference,
                  "[https://|http://]HOST[:PORT]/NAME[:TAG] (TAG defaults to latest)")
      ->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_option("--cache", args->cache, "local store (staging for packing)");
  sub->add_flag("--json", args->json, "print the result as JSON on stdout");
  AddProgressOptions(sub, &args->progress);
  AddTransferOptions(sub, &args->transfer);
  sub->add_option("--chunk-size", args->chunk_size,
                  "bytes per resumable upload chunk; archives larger than this are sent in "
                  "chunks (PATCH), smaller ones in one request")
      ->check(CLI::Range(uint64_t{64 * 1024}, uint64_t{1} << 40))
      ->capture_default_str();
  sub->add_flag("--fail-on-nan", args->fail_on_nan,
                "refuse to push (exit 1, nothing sent) when a tensor holds NaN or Inf values; "
                "without it such tensors are named in a warning and the push proceeds");
  sub->add_flag("--no-patch", args->no_patch,
                "upload the whole archive, never a patch from a version the registry holds");
  sub->add_flag("--verify-locally", args->verify_locally,
                "verify a .blz given here (as `blz verify`) before its manifest is put, also\n"
                "when the registry says it verifies archives itself (blz serve does)");
  sub->footer(
      "Every tensor is read once before the upload: tensors holding NaN/Inf values are named\n"
      "in a warning on stderr (--fail-on-nan refuses the push instead).\n"
      "Only the blobs the registry lacks are uploaded; the tag is set last.\n"
      "A new version is sent as a patch from a version both this client and the registry\n"
      "hold (pulled or pushed before) when that is smaller (--no-patch: never).\n"
      "An interrupted push continues where it stopped when run again: the packed archive\n"
      "and the upload session are kept in the local store.\n"
      "Token: $BLZ_TOKEN, else the one stored by `blz login HOST:PORT`.");
  commands->push_back({sub, [args, exit_code]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::Reference ref, ResolveReference(args->reference, args->conn));
    {  // NaN/Inf check: streams every tensor from the memory-mapped input, as raw bits.
      ProgressCounters counters;
      formats::StatsOptions stats_options;
      stats_options.counters = &counters;
      stats_options.non_finite_only = true;
      client::ProgressMeter meter(
          "checking values of " + args->input,
          client::WorkMeterOptions(ProgressModeOf(args->progress)));
      std::future<Result<formats::ModelStats>> computing = std::async(
          std::launch::async,
          [&] { return formats::ComputeModelStats(args->input, stats_options); });
      while (computing.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        meter.Update(counters.done.load(), counters.total.load());
      }
      meter.Finish();
      BLZ_ASSIGN_OR_RETURN(formats::ModelStats stats, computing.get());
      const std::string bad = NonFiniteSummary(stats);
      if (!bad.empty() && args->fail_on_nan) {
        std::fprintf(stderr, "blz: push --fail-on-nan: not pushed: %s: %s\n",
                     Esc(args->input).c_str(), Esc(bad).c_str());
        *exit_code = kExitDiffers;
        return Status::Ok();
      }
      if (!bad.empty()) {
        std::fprintf(stderr, "blz: warning: %s: %s (pushing anyway; --fail-on-nan refuses)\n",
                     Esc(args->input).c_str(), Esc(bad).c_str());
      }
    }
    client::PushOptions options;
    options.cache_dir = args->cache;
    options.progress = ProgressModeOf(args->progress);
    options.retry = RetryPolicyFrom(args->transfer);
    options.on_retry = RetryLog(args->transfer, args->progress);
    options.chunk_bytes = args->chunk_size;
    options.allow_patch = !args->no_patch;
    options.verify_locally = args->verify_locally;
    BLZ_ASSIGN_OR_RETURN(options.http, HttpOptionsFor(args->conn, args->transfer.stall_timeout,
                                                      ref.registry));
    BLZ_ASSIGN_OR_RETURN(client::PushResult r, client::Push(args->input, ref.ToUrl(), options));
    for (const std::string& note : r.notes) Note(note);
    // References as pull takes them back whatever its defaults: with the scheme.
    client::Reference by_digest = ref;
    by_digest.tag.clear();
    by_digest.digest = r.manifest_digest;
    if (args->transfer.verbose && r.reused_pack) Note("reused the archive packed by an earlier push");
    if (args->transfer.verbose && r.bytes_resumed > 0) {
      Note("continued an interrupted upload at byte " + std::to_string(r.bytes_resumed));
    }
    if (args->json) {
      PrintJson({{"reference", ref.ToUrl()}, {"reference_by_digest", by_digest.ToUrl()},
                 {"manifest_digest", r.manifest_digest},
                 {"digest", r.archive_digest}, {"archive_size", r.archive_size},
                 {"config_digest", r.config_digest}, {"bytes_uploaded", r.bytes_uploaded},
                 {"total_bytes", r.total_bytes}, {"blobs_uploaded", r.blobs_uploaded},
                 {"blobs_skipped", r.blobs_skipped}, {"packed", r.packed},
                 {"reused_pack", r.reused_pack}, {"bytes_resumed", r.bytes_resumed},
                 {"retries", r.retries}, {"kept", r.kept},
                 {"uploaded_as_patch", r.uploaded_as_patch},
                 {"patch_from", NullIfEmpty(r.patch_from)},
                 {"patch_from_name", NullIfEmpty(r.patch_from_name)},
                 {"patch_bytes", r.patch_bytes}});
    } else {
      const std::string as_patch =
          r.uploaded_as_patch ? " as a patch from " + r.patch_from_name : "";
      std::printf("pushed %s\n  model %s (%s)\n  manifest %s\n  by digest %s\n  uploaded %s "
                  "of %s%s (%d blobs sent, %d already present)\n",
                  Esc(ref.ToUrl()).c_str(), Esc(r.archive_digest).c_str(),
                  FormatBytes(r.archive_size).c_str(), Esc(r.manifest_digest).c_str(),
                  Esc(by_digest.ToUrl()).c_str(),
                  FormatBytes(r.bytes_uploaded).c_str(), FormatBytes(r.total_bytes).c_str(),
                  Esc(as_patch).c_str(), r.blobs_uploaded, r.blobs_skipped);
    }
    return Status::Ok();
  }, exit_code});
}

void AddPull(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string reference, output, cache;
    bool json = false, no_patch = false;
    bool offline = false, archive_only = false;      // docs/client.md, "Loadable directories"
    std::vector<std::string> include, exclude;
    std::string lossy;                 // pull --lossy (cli/commands_pull_lossy.cc)
    std::optional<double> max_error;
    std::optional<double> sparsity;
    std::optional<double> rank_energy;
    ProgressArgs progress;
    int parallel = client::kDefaultParallel;
    TransferArgs transfer;
    ExportArgs exp;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "pull", "Fetch a model version (as a patch from a version held locally when possible)");
  sub->add_option("reference", args->reference,
                  "[https://|http://]HOST[:PORT]/NAME[:TAG] or HOST[:PORT]/NAME@sha256:<manifest "
                  "digest>; NAME[:TAG] alone uses $BLZ_REGISTRY")
      ->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_option("-o,--output", args->output,
                  "unpack into this new directory (with --export: the export's output); "
                  "default: the version's snapshot directory in the local store");
  sub->add_flag("--offline", args->offline,
                "never contact the registry: NAME:TAG is the version the local store last "
                "recorded for it (also BLZ_OFFLINE=1)");
  sub->add_flag("--archive-only", args->archive_only,
                "keep the .blz archive in the local store only and print its path (no snapshot "
                "directory)");
  sub->add_option("--include", args->include,
                  "only files matching this glob (repeatable; '*' matches '/' too), as `hf "
                  "download`");
  sub->add_option("--exclude", args->exclude, "no files matching this glob (repeatable)");
  AddExportOptions(sub, &args->exp, /*format_required=*/false);
  sub->add_option("--cache", args->cache,
                  "local store (default $BLZ_CACHE_DIR, $XDG_CACHE_HOME/blz, ~/.cache/blz)");
  sub->add_flag("--json", args->json,
                "print {reference, digest, archive_path (null when the store keeps the version "
                "as its files: a default pull of a whole model), kept_as_files, output, "
                "bytes_downloaded, full_bytes, "
                "transfer (local, patch, full-patch or archive), used_patch, patch_from, "
                "used_full_patch, ...} on stdout");
  AddProgressOptions(sub, &args->progress);
  sub->add_flag("--no-patch", args->no_patch,
                "always download the raw archive (no patch from a held version, no full patch)");
  sub->add_option("--lossy", args->lossy,
                  "a LOSSY approximation instead: a lossy delta (sparse, quantized, int4, "
                  "bitdelta, lowrank or auto) from a held version, into a new directory (-o, "
                  "default ./<name>-lossy-<strategy>); never stored as the version");
  sub->add_option("--max-error", args->max_error,
                  "with --lossy: refuse a delta whose measured rel_l2 exceeds E (auto: the "
                  "error it aims for)");
  sub->add_option("--sparsity", args->sparsity,
                  "with --lossy sparse: the share of each delta dropped, in [0, 1) (registry "
                  "default 0.9)");
  sub->add_option("--rank-energy", args->rank_energy,
                  "with --lossy lowrank or auto: the share of the delta's squared Frobenius norm "
                  "kept, in (0, 1] (registry default 0.95)");
  AddTransferOptions(sub, &args->transfer);
  sub->add_option("--parallel", args->parallel,
                  "Range parts fetched at once for downloads of 128 MiB and more (parts of "
                  "64-512 MiB)")
      ->check(CLI::Range(1, client::kMaxParallel))
      ->capture_default_str();
  sub->footer(
      "Without -o the model's files are given in a loadable snapshot directory in the local\n"
      "store (<store>/snapshots/HOST:PORT/NAME:TAG, files hard-linked and shared between\n"
      "versions); the directory (or -o's, or with --archive-only the .blz) is the last line\n"
      "on stdout: dir=$(blz pull REF | tail -1). @sha256:<12+ hex> takes a short digest.\n"
      "A digest already held is served without contacting the registry; --offline does the\n"
      "same for tags. Every digest is verified before anything\n"
      "is written to the output. With --export FORMAT the pulled version is exported to -o\n"
      "(as `blz export`, same --cast options) instead of unpacked.\n"
      "An interrupted pull (Ctrl-C, kill, a dropped connection) keeps what it downloaded in\n"
      "the store's partial/ directory; running it again continues from there.");
  commands->push_back({sub, [args]() -> Status {
    const bool exporting = !args->exp.format.empty();
    if ((args->max_error.has_value() || args->sparsity.has_value() ||
         args->rank_energy.has_value()) &&
        args->lossy.empty()) {
      return InvalidArgument("--max-error, --sparsity and --rank-energy need --lossy STRATEGY");
    }
    const bool offline = args->offline || client::OfflineFromEnv();
    if (!args->lossy.empty() && offline) {
      return InvalidArgument("pull --lossy needs the registry: not with --offline (BLZ_OFFLINE)");
    }
    if ((!args->include.empty() || !args->exclude.empty()) &&
        (exporting || args->archive_only || !args->lossy.empty())) {
      return InvalidArgument("--include/--exclude choose the files written to a directory: not "
                             "with --export, --archive-only or --lossy");
    }
    if (args->archive_only && !args->output.empty()) {
      return InvalidArgument("--archive-only keeps the archive only: not with -o");
    }
    if (!args->lossy.empty()) {
      if (exporting || args->no_patch) {
        return InvalidArgument("pull --lossy cannot be combined with --export or --no-patch");
      }
      client::LossyPullOptions lossy;
      lossy.strategy = args->lossy;
      lossy.max_error = args->max_error;
      lossy.sparsity = args->sparsity;
      lossy.rank_energy = args->rank_energy;
      lossy.pull.cache_dir = args->cache;
      lossy.pull.output_dir = args->output;
      lossy.pull.progress = ProgressModeOf(args->progress);
      lossy.pull.retry = RetryPolicyFrom(args->transfer);
      lossy.pull.on_retry = RetryLog(args->transfer, args->progress);
      lossy.pull.parallel = args->parallel;
      BLZ_ASSIGN_OR_RETURN(client::Reference ref, ResolveReference(args->reference, args->conn));
      BLZ_ASSIGN_OR_RETURN(lossy.pull.http, HttpOptionsFor(args->conn,
                                                           args->transfer.stall_timeout,
                                                           ref.registry));
      return RunPullLossy(ref.ToUrl(), lossy, args->json, args->progress.quiet);
    }
    if (exporting && args->output.empty()) {
      return InvalidArgument("pull --export needs -o OUT (the exported file or directory)");
    }
    client::PullOptions options;
    options.cache_dir = args->cache;
    options.output_dir = exporting ? std::string() : args->output;
    options.progress = ProgressModeOf(args->progress);
    options.allow_patch = !args->no_patch;
    options.retry = RetryPolicyFrom(args->transfer);
    options.on_retry = RetryLog(args->transfer, args->progress);
    options.parallel = args->parallel;
    options.offline = offline;
    options.snapshot = !exporting && args->output.empty() && !args->archive_only;
    options.filter.include = args->include;
    options.filter.exclude = args->exclude;
    BLZ_ASSIGN_OR_RETURN(client::Reference ref,
                         ResolveLocalReference(args->reference, args->conn, args->cache, offline,
                                               args->transfer.stall_timeout));
    BLZ_ASSIGN_OR_RETURN(options.http, HttpOptionsFor(args->conn, args->transfer.stall_timeout,
                                                      ref.registry));
    BLZ_ASSIGN_OR_RETURN(client::PullResult r, client::Pull(ref.ToUrl(), options));
    for (const std::string& note : r.notes) Note(note);
    // client.json's automatic budget (notes on stderr; never fails the pull).
    const std::vector<std::string> auto_pruned =
        AutoPruneAfterPull(args->cache, r.digest, r.patch_from);
    if (args->transfer.verbose && r.waited_for_lock) {
      Note("waited for another pull of the same version into this store");
    }
    if (exporting) {
      args->exp.quiet = args->progress.quiet;
      if (!args->progress.quiet) {
        std::fprintf(stderr, "pulled %s (downloaded %s of %s)\n", Esc(ref.ToUrl()).c_str(),
                     FormatBytes(r.bytes_downloaded).c_str(), FormatBytes(r.full_bytes).c_str());
      }
      if (args->exp.name.empty()) args->exp.name = RepositoryBaseName(ref.ToUrl());
      nlohmann::ordered_json pulled = {
          {"reference", ref.ToUrl()}, {"digest", r.digest},
          {"bytes_downloaded", r.bytes_downloaded}, {"full_bytes", r.full_bytes},
          {"transfer", r.transfer}, {"used_patch", r.used_patch},
          {"patch_from", r.patch_from.empty() ? nlohmann::ordered_json() :
                                                nlohmann::ordered_json(r.patch_from)}};
      return RunExport(r.archive_path, args->output, args->exp, args->json,
                       options.progress, &pulled);
    }
    if (args->json) {
      PrintJson({{"reference", ref.ToUrl()}, {"digest", r.digest},
                 {"manifest_digest", r.manifest_digest},
                 {"archive_path", NullIfEmpty(r.archive_path)},
                 {"kept_as_files", r.kept_as_files},
                 {"output", NullIfEmpty(r.output)}, {"bytes_downloaded", r.bytes_downloaded},
                 {"full_bytes", r.full_bytes}, {"transfer", r.transfer},
                 {"used_patch", r.used_patch}, {"patch_from", NullIfEmpty(r.patch_from)},
                 {"patch_from_name", NullIfEmpty(r.patch_from_name)},
                 {"used_full_patch", r.used_full_patch}, {"cache_hit", r.cache_hit},
                 {"bytes_resumed", r.bytes_resumed}, {"retries", r.retries},
                 {"auto_pruned", auto_pruned}, {"snapshot", r.snapshot},
                 {"offline", r.offline}});
      return Status::Ok();
    }
    std::string how = r.offline           ? "held locally; registry not contacted"
                      : r.cache_hit         ? "already held locally"
                      : r.used_patch      ? "as a patch from " +
                                           (r.patch_from_name.empty()
                                                ? r.patch_from
                                                : r.patch_from_name + " (" + r.patch_from + ")")
                      : r.used_full_patch ? "as a full patch (the archive compressed, no base)"
                                          : "full archive";
    if (!args->progress.quiet) {  // -q: errors only on stderr
      std::fprintf(stderr, "pulled %s\n  model %s\n  downloaded %s of %s (%s)\n",
                   Esc(ref.ToUrl()).c_str(), Esc(r.digest).c_str(),
                   FormatBytes(r.bytes_downloaded).c_str(), FormatBytes(r.full_bytes).c_str(),
                   Esc(how).c_str());
    }
    std::printf("%s\n", Esc(r.output.empty() ? r.archive_path : r.output).c_str());
    return Status::Ok();
  }});
}

// Reads one line from stdin, without echo when stdin is a terminal.
Result<std::string> ReadTokenFromStdin(const std::string& registry) {
  const bool tty = ::isatty(STDIN_FILENO) == 1;
  termios saved {};
  if (tty) {
    std::fprintf(stderr, "Token for %s: ", Esc(registry).c_str());
    std::fflush(stderr);
    if (::tcgetattr(STDIN_FILENO, &saved) == 0) {
      termios quiet = saved;
      quiet.c_lflag &= ~tcflag_t(ECHO);
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
  }
  std::string line;
  bool got = static_cast<bool>(std::getline(std::cin, line));
  if (tty) {
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    std::fputc('\n', stderr);
  }
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.pop_back();
  }
  if (!got && line.empty()) return InvalidArgument("no token given on stdin");
  return line;
}

void AddLogin(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string registry, token;
    bool token_stdin = false;
    int timeout = 30;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "login", "Check a registry token against the registry and store it for push/pull");
  sub->add_option("registry", args->registry, "[https://|http://]HOST[:PORT]")->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  CLI::Option* token_stdin = sub->add_flag(
      "--token-stdin", args->token_stdin,
      "read the token as one line from stdin (the default when --token is not given)");
  sub->add_option("--token", args->token,
                  "the token on the command line: visible to other local users in the process\n"
                  "list (prefer stdin: `blz login HOST:PORT --token-stdin < token.txt`)")
      ->excludes(token_stdin);
  sub->add_option("--timeout", args->timeout, "seconds a single read or write may stall")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->footer(
      "The token is checked first (GET /v2/ with it): a rejected token (exit 5) or an\n"
      "unreachable registry (exit 6) stores nothing. Use `blz logout HOST:PORT` to forget it.\n"
      "Pipe the token on stdin (or type it at the prompt, without echo); --token works but\n"
      "prints a warning, as the command line is visible to every local user.\n"
      "The token is stored in $BLZ_CONFIG_DIR/auth.json, else $XDG_CONFIG_HOME/blz/auth.json,\n"
      "else ~/.config/blz/auth.json (mode 0600). $BLZ_TOKEN overrides it when set.\n"
      "Login also remembers the registry's scheme (https, or http for http:// and --plain-http)\n"
      "in client.json next to auth.json, and copies the CA of --ca-cert (or $BLZ_CA_BUNDLE) to\n"
      "certs.d/HOST:PORT/ca.crt there (as docker does): later commands need neither https://\n"
      "nor --ca-cert for that registry; an explicit scheme, --plain-http, --ca-cert or\n"
      "$BLZ_CA_BUNDLE still win.");
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::RegistryAddress addr, ResolveRegistry(args->registry, args->conn));
    const std::string registry = addr.ToString();
    std::string token = args->token;
    if (!token.empty()) {
      std::fprintf(stderr,
                   "blz: warning: a token given with --token is visible to other local users "
                   "(process list, shell history); pipe it on stdin instead: "
                   "blz login %s --token-stdin < token.txt\n",
                   Esc(registry).c_str());
    } else {
      BLZ_ASSIGN_OR_RETURN(token, ReadTokenFromStdin(registry));
    }
    if (!client::IsValidToken(token)) {
      return InvalidArgument("token must be 1..4096 printable ASCII characters without spaces");
    }
    BLZ_ASSIGN_OR_RETURN(std::string path, client::AuthFilePath());
    // Check it before storing anything: the registry answers GET /v2/ with 200 only to valid
    // credentials.
    client::RegistryClientOptions options;
    BLZ_ASSIGN_OR_RETURN(options.http, HttpOptionsFor(args->conn, args->timeout, addr));
    BLZ_ASSIGN_OR_RETURN(ExplicitCa ca, ExplicitCaFor(args->conn));
    options.token = token;
    Status check = client::RegistryClient(addr, options).Ping();
    if (!check.ok()) {
      if (check.code() == Code::kUnauthorized) {
        return Unauthorized("login to " + registry +
                            " failed: the registry rejected the token (nothing stored): " +
                            check.message());
      }
      if (check.message().find(client::kCertificateVerifyFailed) != std::string::npos) {
        return check.WithContext("login to " + registry +
                                 " failed: the registry's certificate is not trusted (nothing "
                                 "stored)");
      }
      if (check.code() == Code::kNotFound) {
        return check.WithContext("login to " + registry + " failed (nothing stored)");
      }
      return check.WithContext("login to " + registry +
                               " failed: cannot reach the registry (nothing stored)");
    }
    BLZ_RETURN_IF_ERROR(client::StoreToken(path, registry, token));
    // Later commands need neither the scheme nor the CA again (client/client_config.h).
    BLZ_ASSIGN_OR_RETURN(std::string config_dir, client::ClientConfigDir());
    BLZ_RETURN_IF_ERROR(client::RememberRegistry(config_dir, registry, addr.tls,
                                                 addr.tls ? ca.file : std::string()));
    std::fprintf(stderr, "token for %s checked and stored in %s\n", Esc(registry).c_str(),
                 Esc(path).c_str());
    std::fprintf(stderr, "remembered %s as %s", Esc(registry).c_str(), addr.tls ? "https" : "http");
    if (addr.tls && !ca.file.empty()) {
      std::fprintf(stderr, " with the CA %s (copied to %s)", Esc(ca.file).c_str(),
                   Esc(config_dir + "/certs.d/" + registry + "/ca.crt").c_str());
    }
    std::fprintf(stderr, " in %s\n", Esc(config_dir + "/client.json").c_str());
    return Status::Ok();
  }});
}

void AddTags(CLI::App& app, std::vector<Command>* commands) {
  struct Args {
    std::string repository;
    bool json = false;
    int timeout = 60;
    RegistryConnectionArgs conn;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tags", "List the tags of a repository");
  sub->add_option("repository", args->repository, "[https://|http://]HOST[:PORT]/NAME")
      ->required();
  AddRegistryConnectionOptions(sub, &args->conn);
  sub->add_flag("--json", args->json, "print {repository, tags} on stdout");
  sub->add_option("--timeout", args->timeout, "seconds a single read or write may stall")
      ->check(CLI::PositiveNumber);
  commands->push_back({sub, [args]() -> Status {
    BLZ_ASSIGN_OR_RETURN(client::Reference ref, ResolveReference(args->repository, args->conn));
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<client::RegistryClient> registry_client,
                         RegistryClientFor(ref.registry, args->conn, args->timeout,
                                           /*require_token=*/false));
    BLZ_ASSIGN_OR_RETURN(std::vector<std::string> tags, registry_client->ListTags(ref.name));
    if (args->json) {
      PrintJson({{"repository", ref.registry.ToString() + "/" + ref.name}, {"tags", tags}});
    } else {
      for (const std::string& t : tags) std::printf("%s\n", Esc(t).c_str());
    }
    return Status::Ok();
  }});
}

}  // namespace

void AddRegistryCommands(CLI::App& app, std::vector<Command>* commands) {
  AddServe(app, commands);
  AddPush(app, commands);
  AddPull(app, commands);
  AddLogin(app, commands);
  AddTags(app, commands);
}

}  // namespace blz::cli
