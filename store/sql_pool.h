// A bounded pool of connections to one database (store/sql.h), for MetadataDb
// (store/metadata_db.h): a method leases a connection for its whole call and returns it when
// the lease goes out of scope.
//
// The pool opens connections on demand, up to `max_connections`, with `connect` (the first one,
// already migrated, is given to the constructor). A caller that finds every connection leased
// waits until one is returned, at most `wait` (nullopt = forever); then kUnavailable naming the
// database and the pool's size. A connection whose server went away is not dropped from the
// pool: its driver re-establishes it before its next statement (store/postgres/sql_driver.cc),
// so a lost backend never removes a slot for good. A failing `connect` gives the slot back.
//
// Every connection shares one QueryTimer (query_stats() counts all of them).
//
// Thread safety: Acquire() and the leases' destructors may be called from any thread; a lease
// is used by one thread at a time, like any sql::Database.
#ifndef BLZ_STORE_SQL_POOL_H_
#define BLZ_STORE_SQL_POOL_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "store/sql.h"

namespace blz::store::sql {

// The pool settings of a postgresql:// URL: blz's own query parameters pool=N (1..1000) and
// pool_timeout=SECONDS (1..86400), taken out so that libpq, which refuses parameters it does
// not know, gets the rest. Errors: kInvalidArgument naming the parameter.
struct PoolOptions {
  std::string url;  // without pool= and pool_timeout=
  size_t connections = 8;
  int64_t timeout_seconds = 10;
};
Result<PoolOptions> TakePoolOptions(const std::string& url);

class Pool {
 public:
  // A leased connection: an sql::Database (Prepare, Exec, Transaction::Begin(&lease), ...)
  // that goes back to its pool when destroyed.
  class Lease : public Database {
   public:
    Lease(Lease&& other) noexcept : Database(std::move(other)), pool_(other.pool_) {
      other.pool_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

   private:
    friend class Pool;
    Lease(Database db, Pool* pool) : Database(std::move(db)), pool_(pool) {}
    Pool* pool_ = nullptr;
  };

  // `first`: an open (migrated) connection. `connect` opens one more (may be empty when
  // max_connections is 1). REQUIRES max_connections >= 1.
  Pool(Database first, std::function<Result<Database>()> connect, size_t max_connections,
       std::optional<std::chrono::milliseconds> wait);

  // A free connection (opening one when fewer than max_connections are open), waiting for
  // one as the constructor's `wait` says. Errors: kUnavailable (none free in time), `connect`'s.
  Result<Lease> Acquire();

  std::string_view engine() const { return engine_; }
  const std::string& label() const { return label_; }
  size_t max_connections() const { return max_; }
  // Connections open now (leased or idle).
  size_t open_connections();
  QueryStats query_stats() const { return timer_->Get(); }

 private:
  void Release(Database db);

  const std::string engine_;
  const std::string label_;
  const std::shared_ptr<QueryTimer> timer_;
  const std::function<Result<Database>()> connect_;
  const size_t max_;
  const std::optional<std::chrono::milliseconds> wait_;

  std::mutex mu_;
  std::condition_variable freed_;
  std::vector<Database> idle_;  // guarded by mu_
  size_t open_ = 0;             // guarded by mu_: idle + leased + being opened
};

}  // namespace blz::store::sql

#endif  // BLZ_STORE_SQL_POOL_H_
