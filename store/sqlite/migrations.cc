#include "store/sqlite/migrations.h"

#include <string>

#include "store/sqlite/sqlite.h"

namespace blz::store::sqlite {

Status ApplyMigrations(sqlite::Database* db, std::span<const Migration> migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != int(i) + 1) {
      return Internal("migrations: " + std::string(migrations[i].name) + " has version " +
                      std::to_string(migrations[i].version) + ", expected " +
                      std::to_string(i + 1));
    }
  }
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  BLZ_ASSIGN_OR_RETURN(int64_t current, db->PragmaInt("user_version"));
  if (current > latest) {
    return Unsupported(db->path() + ": database schema version " + std::to_string(current) +
                       " is newer than this binary (which knows up to version " +
                       std::to_string(latest) + "); upgrade blz");
  }
  if (current < 0) {
    return Corruption(db->path() + ": negative schema version " + std::to_string(current));
  }
  for (const Migration& m : migrations) {
    if (m.version <= current) continue;
    BLZ_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db));
    // Re-read inside the write lock: another process may have migrated meanwhile.
    BLZ_ASSIGN_OR_RETURN(int64_t now, db->PragmaInt("user_version"));
    if (now >= m.version) continue;  // tx rolls back (nothing was written)
    Status s = db->Exec(m.sql);
    if (!s.ok()) return s.WithContext("migration " + std::string(m.name));
    BLZ_RETURN_IF_ERROR(db->Exec("PRAGMA user_version = " + std::to_string(m.version)));
    BLZ_RETURN_IF_ERROR(tx.Commit());
  }
  return Status::Ok();
}

}  // namespace blz::store::sqlite
