// The SQLite driver of the engine-neutral SQL seam (store/sql.h): the embedded default.
#ifndef BLZ_STORE_SQLITE_SQL_DRIVER_H_
#define BLZ_STORE_SQLITE_SQL_DRIVER_H_

#include <string>

#include "core/status.h"
#include "store/sql.h"

namespace blz::store::sqlite {

// Opens (creating if needed, mode 0600) the database file at `path` with WAL journaling, a
// 5 s busy timeout and foreign keys on, and applies migrations/*.sql. Several processes may
// share the file. Errors: kUnsupported (DB newer than the binary), kCorruption (not a DB),
// kIOError.
Result<sql::Database> OpenSqlDatabase(const std::string& path);

}  // namespace blz::store::sqlite

#endif  // BLZ_STORE_SQLITE_SQL_DRIVER_H_
