// Schema migrations for the registry's metadata DB.
//
// The SQL lives in migrations/NNNN_<name>.sql (numbered from 1, no gaps, append-only) and is
// embedded into the binary at build time (store/embed_migrations.cmake generates the .cc that
// defines EmbeddedMigrations()). The DB records the last applied version in
// PRAGMA user_version (0 = empty database).
#ifndef BLZ_STORE_MIGRATIONS_H_
#define BLZ_STORE_MIGRATIONS_H_

#include <span>
#include <string_view>

#include "core/status.h"

namespace blz::store {

namespace sqlite {
class Database;
}

struct Migration {
  int version = 0;        // NNNN from the file name
  std::string_view name;  // file name, e.g. "0001_init.sql"
  std::string_view sql;   // the file's bytes
};

// Every migration compiled into this binary, in version order (1, 2, 3, ...).
std::span<const Migration> EmbeddedMigrations();

// The schema version this binary writes: the last embedded migration's version.
int LatestSchemaVersion();

// Brings `db` up to the last of `migrations` (which must be numbered 1..N in order, else
// kInternal). Each pending migration runs in its own transaction together with the
// PRAGMA user_version update, so a failing migration leaves the DB at the previous version.
// Already-applied migrations are skipped (re-running is a no-op). A DB whose user_version is
// newer than N is refused with kUnsupported ("newer than this binary") and left untouched.
Status ApplyMigrations(sqlite::Database* db, std::span<const Migration> migrations);

}  // namespace blz::store

#endif  // BLZ_STORE_MIGRATIONS_H_
