// Schema migrations for the registry's metadata DB.
//
// The SQL lives in migrations/NNNN_<name>.sql (numbered from 1, no gaps, append-only) and is
// embedded into the binary at build time (store/embed_migrations.cmake generates the .cc that
// defines EmbeddedMigrations()). The DB records the last applied version in
// PRAGMA user_version (0 = empty database). The runner is each driver's:
// store/sqlite/migrations.h, store/postgres/migrations.h.
#ifndef BLZ_STORE_MIGRATIONS_H_
#define BLZ_STORE_MIGRATIONS_H_

#include <span>
#include <string_view>

#include "core/status.h"

namespace blz::store {

struct Migration {
  int version = 0;        // NNNN from the file name
  std::string_view name;  // file name, e.g. "0001_init.sql"
  std::string_view sql;   // the file's bytes
};

// Every migration compiled into this binary, in version order (1, 2, 3, ...).
std::span<const Migration> EmbeddedMigrations();

// The schema version this binary writes: the last embedded migration's version.
int LatestSchemaVersion();

}  // namespace blz::store

#endif  // BLZ_STORE_MIGRATIONS_H_
