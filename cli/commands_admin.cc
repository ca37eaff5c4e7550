// Operator commands that act on a registry's storage directly (not over HTTP): `blz admin
// migrate` (registry/migrate.h, docs/storage.md "Moving a single box to PostgreSQL + S3").
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "registry/migrate.h"
#include "registry/registry.h"

namespace blz::cli {
namespace {

struct MigrateArgs {
  std::string from;
  std::string to;
  std::string from_data;
  bool resume = false;
  bool quiet = false;
  std::string work_dir;
};

// "METADATA_URL,STORAGE_URL" -> the two URLs. The metadata URL never holds a comma (a
// PostgreSQL URL's options are joined by '&'), so the split is at the first comma.
Status SplitPair(const std::string& flag, const std::string& text, std::string* metadata,
                 std::string* storage) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos || comma == 0 || comma + 1 == text.size()) {
    return InvalidArgument(flag + " takes METADATA_URL,STORAGE_URL (e.g. sqlite:DIR/blz.db," +
                           "file:DIR or postgresql://USER@HOST:PORT/DB,s3://BUCKET/PREFIX?" +
                           "endpoint=URL&region=R)");
  }
  *metadata = text.substr(0, comma);
  *storage = text.substr(comma + 1);
  return Status::Ok();
}

std::string Mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", double(bytes) / 1e6);
  return buf;
}

// A shell word: single-quoted unless it is plain.
std::string ShellWord(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./:@=,+") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Status RunMigrate(const MigrateArgs& args) {
  registry::MigrateOptions o;
  if (!args.from_data.empty()) {
    if (!args.from.empty()) return InvalidArgument("give either --from or --from-data, not both");
    o.from_metadata = "sqlite:" + args.from_data + "/" + registry::kMetadataFileName;
    o.from_storage = "file:" + args.from_data;
  } else if (args.from.empty()) {
    return InvalidArgument("--from METADATA_URL,STORAGE_URL or --from-data DIR is required");
  } else {
    BLZ_RETURN_IF_ERROR(SplitPair("--from", args.from, &o.from_metadata, &o.from_storage));
  }
  BLZ_RETURN_IF_ERROR(SplitPair("--to", args.to, &o.to_metadata, &o.to_storage));
  o.resume = args.resume;
  o.work_dir = args.work_dir;
  if (!args.quiet) {
    o.log = [](const std::string& line) {
      std::fprintf(stderr, "migrate: %s\n", Esc(line).c_str());
    };
  }
  BLZ_ASSIGN_OR_RETURN(registry::MigrateReport r, registry::MigrateRegistry(o));
  std::cout << "migrated " << Esc(r.from_label) << " -> " << Esc(r.to_label) << "\n";
  for (const registry::MigrateTableReport& t : r.tables) {
    std::cout << "  table " << t.table << ": " << t.source_rows << " rows (" << t.copied
              << " copied, " << t.present << " already present)\n";
  }
  std::cout << "  blobs: " << r.blobs_copied << " copied (" << Mb(r.bytes_copied) << "), "
            << r.blobs_present << " already present (" << Mb(r.bytes_present) << ")\n";
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.2f", r.seconds);
  std::cout << "verified: " << r.tables.size() << " tables, " << (r.rows_copied + r.rows_present)
            << " rows, " << r.blobs_verified << " blobs in the target";
  if (r.absent_in_source > 0) {
    std::cout << " (" << r.absent_in_source
              << " recorded blobs were already absent from the source store, e.g. raw "
                 "archives kept as full patches)";
  }
  std::cout << "; " << r.sequences_reset << " sequences reset; " << secs << " s\n";
  std::cout << "next: stop using the old registry and start every replica with\n"
            << "  blz serve --data DIR --metadata " << ShellWord(r.to_metadata_label)
            << " --storage " << ShellWord(o.to_storage) << "\n"
            << "(DIR: each replica's own local directory; the database password, if any, "
               "from PGPASSWORD or ~/.pgpass; the S3 keys from AWS_ACCESS_KEY_ID / "
               "AWS_SECRET_ACCESS_KEY)"
            << std::endl;
  return Status::Ok();
}

}  // namespace

void AddAdminCommands(CLI::App& app, std::vector<Command>* commands) {
  CLI::App* admin =
      app.add_subcommand("admin", "Operate on a registry's storage directly (not over HTTP)");
  admin->require_subcommand(1);
  auto args = std::make_shared<MigrateArgs>();
  CLI::App* sub = admin->add_subcommand(
      "migrate",
      "Copy a stopped registry (metadata and blobs) to other engines, e.g. from one box's "
      "SQLite + directory to PostgreSQL + S3; verifies, then prints the `blz serve` line");
  sub->add_option("--from", args->from,
                  "source METADATA_URL,STORAGE_URL, e.g. sqlite:DIR/blz.db,file:DIR");
  sub->add_option("--from-data", args->from_data,
                  "source data directory of a single box: same as --from "
                  "sqlite:DIR/blz.db,file:DIR");
  sub->add_option("--to", args->to,
                  "target METADATA_URL,STORAGE_URL, e.g. postgresql://USER@HOST:PORT/DB,"
                  "s3://BUCKET/PREFIX?endpoint=URL&region=R (S3 keys from AWS_ACCESS_KEY_ID / "
                  "AWS_SECRET_ACCESS_KEY)")
      ->required();
  sub->add_flag("--resume", args->resume,
                "continue into a target that already holds rows (a migration that stopped); "
                "rows and blobs already there are skipped");
  sub->add_option("--work-dir", args->work_dir,
                  "temporary files of S3 stores during the run (default: a fresh directory "
                  "under $TMPDIR, removed afterwards)");
  sub->add_flag("-q,--quiet", args->quiet, "no progress lines on stderr");
  commands->push_back({sub, [args] { return RunMigrate(*args); }, nullptr});
}

}  // namespace blz::cli
