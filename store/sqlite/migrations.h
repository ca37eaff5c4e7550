// The SQLite migration runner: brings a database file to the schema of migrations/*.sql
// (store/migrations.h), recording the version in PRAGMA user_version.
#ifndef BLZ_STORE_SQLITE_MIGRATIONS_H_
#define BLZ_STORE_SQLITE_MIGRATIONS_H_

#include <span>

#include "core/status.h"
#include "store/migrations.h"

namespace blz::store::sqlite {

class Database;

// Brings `db` up to the last of `migrations` (which must be numbered 1..N in order, else
// kInternal). Each pending migration runs in its own transaction together with the
// PRAGMA user_version update, so a failing migration leaves the DB at the previous version.
// Already-applied migrations are skipped (re-running is a no-op). A DB whose user_version is
// newer than N is refused with kUnsupported ("newer than this binary") and left untouched.
Status ApplyMigrations(sqlite::Database* db, std::span<const Migration> migrations);

}  // namespace blz::store::sqlite

#endif  // BLZ_STORE_SQLITE_MIGRATIONS_H_
