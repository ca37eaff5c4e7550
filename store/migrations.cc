#include "store/migrations.h"

namespace blz::store {

int LatestSchemaVersion() {
  auto all = EmbeddedMigrations();
  return all.empty() ? 0 : all.back().version;
}

}  // namespace blz::store
