#include "store/sql.h"

namespace blz::store::sql {

Status Statement::Run() {
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

Result<Statement> Database::Prepare(std::string_view sql) {
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<StatementImpl> st, impl_->Prepare(sql));
  return Statement(std::move(st));
}

Result<Transaction> Transaction::Begin(Database* db, TransactionMode mode) {
  BLZ_RETURN_IF_ERROR(db->impl()->Begin(mode));
  return Transaction(db);
}

Transaction::~Transaction() {
  if (db_ != nullptr) (void)db_->impl()->Rollback();
}

Status Transaction::LockKey(std::string_view name) {
  if (db_ == nullptr) return Internal("sql: lock in a finished transaction");
  return db_->impl()->LockKey(name);
}

Status Transaction::Commit() {
  if (db_ == nullptr) return Internal("sql: transaction already finished");
  Status s = db_->impl()->Commit();
  if (!s.ok()) return s;  // the destructor rolls back
  db_ = nullptr;
  return Status::Ok();
}

}  // namespace blz::store::sql
