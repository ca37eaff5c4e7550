// OpenDatabase: the one place that maps a metadata URL's scheme to its driver. A new engine is
// one folder (store/<engine>/) with an OpenSqlDatabase, and one line here.
#include <string>

#include "store/postgres/sql_driver.h"
#include "store/sql.h"
#include "store/sql_pool.h"
#include "store/sqlite/sql_driver.h"

namespace blz::store::sql {

Result<Database> OpenDatabase(std::string_view url) {
  if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
    BLZ_ASSIGN_OR_RETURN(PoolOptions options, TakePoolOptions(std::string(url)));  // for libpq
    return postgres::OpenSqlDatabase(options.url);
  }
  std::string_view path = url;
  if (url.rfind("sqlite:", 0) == 0) {
    path = url.substr(7);
    if (path.rfind("//", 0) == 0) path = path.substr(2);  // "sqlite://PATH" too
  } else if (url.find("://") != std::string_view::npos) {
    return InvalidArgument("metadata database '" + std::string(url.substr(0, url.find("://"))) +
                           "://...': unknown scheme (want sqlite:PATH or "
                           "postgresql://USER@HOST:PORT/DB)");
  }
  if (path.empty()) return InvalidArgument("metadata database: empty SQLite path");
  return sqlite::OpenSqlDatabase(std::string(path));
}

Result<Database> ConnectDatabase(std::string_view url) {
  if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
    BLZ_ASSIGN_OR_RETURN(PoolOptions options, TakePoolOptions(std::string(url)));
    return postgres::ConnectSqlDatabase(options.url);
  }
  return OpenDatabase(url);
}

}  // namespace blz::store::sql
