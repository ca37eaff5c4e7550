// Schema migrations for the registry's metadata on PostgreSQL: the counterpart of
// store/migrations.h (SQLite) with the same contract.
//
// The SQL lives in migrations/postgres/NNNN_<name>.sql: for each migrations/NNNN_<name>.sql of
// SQLite, the PostgreSQL file with the same number and name creates the same tables, columns,
// keys and indexes (tests/store/postgres/migrations_test.cc checks the parity). Both sets are
// numbered from 1, without gaps, append-only, and grow together. They are embedded into the
// binary at build time (store/embed_migrations.cmake).
//
// The database records every applied migration in schema_migrations (version, name, applied
// at, Unix seconds); the schema version is the largest version there (0 = empty database).
// Tables go into the connection's current schema (normally "public"; a URL may choose
// another with ?options=-csearch_path%3DNAME).
#ifndef BLZ_STORE_POSTGRES_MIGRATIONS_H_
#define BLZ_STORE_POSTGRES_MIGRATIONS_H_

#include <cstdint>
#include <span>

#include "core/status.h"
#include "store/migrations.h"

namespace blz::store::postgres {

class Connection;

// Every PostgreSQL migration compiled into this binary, in version order (1, 2, 3, ...).
std::span<const Migration> EmbeddedMigrations();

// The key of the session-level advisory lock (pg_advisory_lock) ApplyMigrations holds while it
// runs: one runner at a time per database, whatever the number of replicas starting.
inline constexpr int64_t kMigrationLockKey = 0x626c7a2d6d696772;  // "blz-migr"

// The schema version of the database: the largest version in schema_migrations, 0 when the
// table does not exist yet. Errors: as Connection::Query.
Result<int> SchemaVersion(Connection* conn);

// Brings the database up to the last of `migrations` (which must be numbered 1..N in order,
// else kInternal). Holds the advisory lock kMigrationLockKey for the whole run, so runners on
// other connections (other replicas) wait and then find nothing left to do. Each pending
// migration runs in its own transaction together with its schema_migrations row, so a failing
// migration leaves the database at the previous version (the error names the file).
// Already-applied migrations are skipped (re-running is a no-op). A database whose version is
// newer than N is refused with kUnsupported ("newer than this binary") and left untouched.
// Returns how many migrations this call applied. Errors: as Connection::Query.
Result<int> ApplyMigrations(Connection* conn, std::span<const Migration> migrations);

}  // namespace blz::store::postgres

#endif  // BLZ_STORE_POSTGRES_MIGRATIONS_H_
