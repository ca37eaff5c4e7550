#include "store/sql.h"

namespace blz::store::sql {
namespace {

// Runs `f` and adds its time to `timer` (may be null) as one counted statement.
template <class F>
auto Timed(QueryTimer* timer, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  auto result = f();
  if (timer != nullptr) timer->Add(std::chrono::steady_clock::now() - t0, true, result.ok());
  return result;
}

}  // namespace

Result<bool> Statement::Step() {
  const auto t0 = std::chrono::steady_clock::now();
  Result<bool> row = impl_->Step();
  if (timer_ != nullptr) {
    timer_->Add(std::chrono::steady_clock::now() - t0, fresh_, row.ok());
  }
  fresh_ = false;
  return row;
}

Status Database::Exec(std::string_view sql) {
  return Timed(timer_.get(), [&] { return impl_->Exec(sql); });
}

Status Statement::Run() {
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

Result<std::vector<std::string>> Statement::ColumnTexts() {
  std::vector<std::string> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return out;
    out.push_back(ColumnText(0));
  }
}

Result<Statement> Database::Prepare(std::string_view sql) {
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<StatementImpl> st, impl_->Prepare(sql));
  return Statement(std::move(st), timer_);
}

Result<Transaction> Transaction::Begin(Database* db, TransactionMode mode) {
  BLZ_RETURN_IF_ERROR(Timed(db->timer(), [&] { return db->impl()->Begin(mode); }));
  return Transaction(db);
}

Transaction::~Transaction() {
  if (db_ != nullptr) (void)db_->impl()->Rollback();
}

Status Transaction::LockKey(std::string_view name) {
  if (db_ == nullptr) return Internal("sql: lock in a finished transaction");
  return Timed(db_->timer(), [&] { return db_->impl()->LockKey(name); });
}

Status Transaction::Commit() {
  if (db_ == nullptr) return Internal("sql: transaction already finished");
  Status s = Timed(db_->timer(), [&] { return db_->impl()->Commit(); });
  if (!s.ok()) return s;  // the destructor rolls back
  db_ = nullptr;
  return Status::Ok();
}

}  // namespace blz::store::sql
