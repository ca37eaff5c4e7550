// The PostgreSQL driver of the engine-neutral SQL seam (store/sql.h), over
// store/postgres/connection.h. A Statement collects its bound values and runs at its first
// Step() (one round trip), then walks the rows of the result.
#ifndef BLZ_STORE_POSTGRES_SQL_DRIVER_H_
#define BLZ_STORE_POSTGRES_SQL_DRIVER_H_

#include <string>
#include <string_view>

#include "core/status.h"
#include "store/sql.h"

namespace blz::store::postgres {

// Connects to `url` ("postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?...]" or "postgres://...")
// and applies migrations/postgres/*.sql under the advisory migration lock. Errors: those of
// Connection::Open and ApplyMigrations (kUnsupported for a database newer than the binary);
// messages name the server without its password.
Result<sql::Database> OpenSqlDatabase(std::string_view url);
// Connects to `url` without migrating (one more connection of a pool, store/sql_pool.h).
// Errors: Connection::Open's.
Result<sql::Database> ConnectSqlDatabase(std::string_view url);

// SQLite's parameter syntax in PostgreSQL's: "?N" -> "$N", "?" -> "$K" where K is one more
// than the largest number so far (SQLite's rule), outside '...' literals, "..." identifiers
// and comments. Sets *count (when not null) to the largest parameter number.
std::string TranslatePlaceholders(std::string_view sql, int* count = nullptr);

// The advisory lock key of Transaction::LockKey(name): FNV-1a (64-bit) of "blz:" + name.
int64_t LockKeyOf(std::string_view name);

}  // namespace blz::store::postgres

#endif  // BLZ_STORE_POSTGRES_SQL_DRIVER_H_
