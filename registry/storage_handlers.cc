// GET /v2/_blz/storage (docs/registry-api.md, "Storage status" and "Bytes at rest"): bytes at
// rest against the models' own size per repository the caller may pull
// (registry/storage_accounting.h), the total and the archive storage's status for an admin.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/storage_accounting.h"
#include "registry/wire.h"

namespace blz::registry {
namespace {

using ojson = nlohmann::ordered_json;

ojson FiguresJson(const StorageFigures& f) {
  const std::optional<double> ratio = f.ratio();
  ojson forms = ojson::object();
  for (const auto& [form, n] : f.forms) forms[form] = n;
  return ojson{{"model_bytes", f.model_bytes},
               {"at_rest_bytes", f.at_rest_bytes()},
               {"ratio", ratio.has_value() ? ojson(*ratio) : ojson(nullptr)},
               {"archive_at_rest_bytes", f.archive_at_rest_bytes},
               {"other_bytes", f.other_bytes},
               {"versions", f.versions},
               {"archives", f.archives},
               {"blobs", f.blobs},
               {"forms", std::move(forms)}};
}

ojson RepositoryJson(const RepositoryStorage& r) {
  ojson doc = {{"name", r.name}};
  const ojson figures = FiguresJson(r.figures);
  for (const auto& [key, value] : figures.items()) doc[key] = value;
  doc["shared_bytes"] = r.shared_bytes;
  ojson archives = ojson::array();
  for (const RepositoryStorage::Version& v : r.archives) {
    ojson a = {{"digest", v.version.archive_digest},
               {"manifest", v.version.manifest_digest},
               {"model_bytes", v.version.archive_size},
               {"at_rest_bytes", v.at_rest.bytes},
               {"form", std::string(StoredFormName(v.at_rest.form))},
               {"stored_as", v.at_rest.blob.empty() ? ojson(nullptr) : ojson(v.at_rest.blob)}};
    if (v.at_rest.form == StoredForm::kChain) {
      a["parent"] = v.at_rest.parent;
      a["depth"] = v.at_rest.depth;
    }
    archives.push_back(std::move(a));
  }
  doc["by_archive"] = std::move(archives);
  return doc;
}

}  // namespace

Response Registry::GetStorage(const Route& route) {
  const bool admin = route.caller.grants.IsAdmin();
  // ?repository=NAME: that repository only (one that does not exist and one the caller may
  // not pull answer alike).
  std::string only;
  if (std::optional<std::string> name = route.Query("repository"); name.has_value()) {
    if (Status s = ValidateRepositoryName(*name); !s.ok()) {
      return ErrorResponse(OciError::kNameInvalid, s.message(), nlohmann::json{{"name", *name}});
    }
    if (!internal::MayPull(route, *name, options_.private_mode)) {
      return ErrorResponse(OciError::kNameUnknown, "repository '" + *name + "' is not known",
                           nlohmann::json{{"name", *name}});
    }
    only = *name;
  }
  Result<StorageAccount> account = AccountStorage(
      *blobs_, *db_,
      [&](std::string_view repository) {
        return internal::MayPull(route, repository, options_.private_mode);
      },
      only);
  if (!account.ok()) return ErrorResponse(account.status(), ErrorContext::kGeneral);
  if (!only.empty() && account->repositories.empty()) {
    return ErrorResponse(OciError::kNameUnknown, "repository '" + only + "' is not known",
                         nlohmann::json{{"name", only}});
  }

  ojson doc = ojson::object();
  if (admin) {  // the archive storage's state concerns every repository
    const StorageStatus st = storage_->status();
    doc = {{"full_patches", storage_->enabled()},
           {"drop_raw_archives", storage_->enabled() && options_.storage.drop_raw_archives},
           {"pending", st.pending},
           {"compressing",
            st.compressing.empty() ? ojson(nullptr) : ojson(st.compressing)},
           {"compressed", st.compressed},
           {"failed", st.failed},
           {"full_patches_computed", st.full_patches_computed},
           {"rebuilds", st.rebuilds},
           {"quarantined", st.quarantined},
           {"chains",
            {{"max_depth", storage_->chains_enabled() ? options_.storage.max_chain_depth : 0},
             {"chained", st.chained},
             {"rebased", st.rebased},
             {"rebuilds", st.chain_rebuilds},
             {"reused_patches", st.chain_patches_reused}}},
           {"cache",
            {{"bytes", st.cache_bytes}, {"entries", st.cache_entries}, {"limit", st.cache_limit}}}};
  }
  doc["total"] = admin ? FiguresJson(account->total) : ojson(nullptr);
  ojson repositories = ojson::array();
  for (const RepositoryStorage& r : account->repositories) repositories.push_back(RepositoryJson(r));
  doc["repositories"] = std::move(repositories);
  Response res;
  res.body = doc.dump();
  res.Set("Content-Type", "application/json");
  res.Set("Cache-Control", "no-store");
  return res;
}

}  // namespace blz::registry
