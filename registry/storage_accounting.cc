#include "registry/storage_accounting.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace blz::registry {
namespace {

// The full patch's key in table `patches` (registry/archive_storage.h).
constexpr std::string_view kNoBase = "";

void AddForm(StorageFigures* f, StoredForm form) { ++f->forms[std::string(StoredFormName(form))]; }

}  // namespace

std::string_view StoredFormName(StoredForm form) {
  switch (form) {
    case StoredForm::kRaw: return "raw";
    case StoredForm::kFullPatch: return "full_patch";
    case StoredForm::kChain: return "chain";
    case StoredForm::kMissing: return "missing";
  }
  return "missing";
}

std::optional<double> StorageFigures::ratio() const {
  if (model_bytes == 0) return std::nullopt;
  return double(at_rest_bytes()) / double(model_bytes);
}

Result<ArchiveAtRest> AtRest(const store::BlobStore& blobs, store::MetadataDb& db,
                             const std::string& archive_digest) {
  ArchiveAtRest out;
  out.archive_digest = archive_digest;
  Result<store::BlobInfo> raw = blobs.Stat(archive_digest);
  if (raw.ok()) {
    out.form = StoredForm::kRaw;
    out.bytes = raw->size;
    out.blob = archive_digest;
    return out;
  }
  if (raw.status().code() != Code::kNotFound) return raw.status();
  Result<store::ChainLink> link = db.FindChainLink(archive_digest);
  if (link.ok()) {
    Result<store::BlobInfo> patch = blobs.Stat(link->patch_digest);
    if (patch.ok()) {
      out.form = StoredForm::kChain;
      out.bytes = patch->size;
      out.blob = link->patch_digest;
      out.parent = link->parent_digest;
      out.depth = link->depth;
      return out;
    }
    if (patch.status().code() != Code::kNotFound) return patch.status();
    // A link whose patch is gone (quarantined): the full patch, if any, is what is left.
  } else if (link.status().code() != Code::kNotFound) {
    return link.status();
  }
  Result<store::PatchRecord> full = db.FindPatch(kNoBase, archive_digest);
  if (!full.ok()) {
    if (full.status().code() == Code::kNotFound) return out;  // missing
    return full.status();
  }
  Result<store::BlobInfo> patch = blobs.Stat(full->patch_digest);
  if (!patch.ok()) {
    if (patch.status().code() == Code::kNotFound) return out;  // quarantined or lost
    return patch.status();
  }
  out.form = StoredForm::kFullPatch;
  out.bytes = patch->size;
  out.blob = full->patch_digest;
  return out;
}

Result<StorageAccount> AccountStorage(const store::BlobStore& blobs, store::MetadataDb& db,
                                      const std::function<bool(std::string_view)>& include,
                                      std::string_view only_repository) {
  BLZ_ASSIGN_OR_RETURN(store::StorageInventory inv, db.ReadStorageInventory(only_repository));
  auto accounted = [&](const std::string& repository) {
    return !include || include(repository);
  };

  StorageAccount account;
  std::unordered_map<std::string, size_t> index;  // repository -> position in account
  auto repo = [&](const std::string& name) -> RepositoryStorage& {
    auto [it, fresh] = index.try_emplace(name, account.repositories.size());
    if (fresh) account.repositories.push_back(RepositoryStorage{name, {}, 0, {}});
    return account.repositories[it->second];
  };
  std::unordered_map<std::string, ArchiveAtRest> at_rest;  // archive digest -> its form
  // Every blob at rest (digest -> bytes) and the accounted repositories that reference it.
  std::unordered_map<std::string, uint64_t> blob_bytes;
  std::unordered_map<std::string, std::set<std::string>> referenced_by;
  std::unordered_set<std::string> archives_seen;

  for (store::VersionRecord& v : inv.versions) {
    if (!accounted(v.repository)) continue;
    auto it = at_rest.find(v.archive_digest);
    if (it == at_rest.end()) {
      BLZ_ASSIGN_OR_RETURN(ArchiveAtRest a, AtRest(blobs, db, v.archive_digest));
      it = at_rest.emplace(v.archive_digest, std::move(a)).first;
    }
    const ArchiveAtRest& a = it->second;
    RepositoryStorage& r = repo(v.repository);
    r.figures.model_bytes += v.archive_size;
    r.figures.archive_at_rest_bytes += a.bytes;
    ++r.figures.versions;
    ++r.figures.archives;
    AddForm(&r.figures, a.form);
    ++account.total.versions;
    if (archives_seen.insert(v.archive_digest).second) {
      account.total.model_bytes += v.archive_size;
      account.total.archive_at_rest_bytes += a.bytes;
      ++account.total.archives;
      AddForm(&account.total, a.form);
    }
    if (!a.blob.empty()) {
      blob_bytes.emplace(a.blob, a.bytes);
      if (referenced_by[a.blob].insert(v.repository).second) ++r.figures.blobs;
    }
    r.archives.push_back(RepositoryStorage::Version{std::move(v), a});
  }
  for (const store::StorageInventory::Blob& b : inv.other_blobs) {
    if (!accounted(b.repository)) continue;
    RepositoryStorage& r = repo(b.repository);
    // A blob that is also some archive's stored form (an archive pushed as a plain layer
    // elsewhere) is counted at that size, once.
    auto [known, fresh] = blob_bytes.emplace(b.digest, b.size);
    if (referenced_by[b.digest].insert(b.repository).second) {
      r.figures.other_bytes += known->second;
      ++r.figures.blobs;
    }
    if (fresh) account.total.other_bytes += b.size;
  }
  account.total.blobs = blob_bytes.size();
  for (const auto& [digest, repositories] : referenced_by) {
    if (repositories.size() < 2) continue;
    for (const std::string& name : repositories) repo(name).shared_bytes += blob_bytes[digest];
  }
  std::sort(account.repositories.begin(), account.repositories.end(),
            [](const RepositoryStorage& a, const RepositoryStorage& b) { return a.name < b.name; });
  return account;
}

Result<std::shared_ptr<const StorageAccount>> StorageAccountCache::Get(
    const store::BlobStore& blobs, store::MetadataDb& db) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  if (last_ != nullptr && now - computed_ < ttl_) return last_;
  BLZ_ASSIGN_OR_RETURN(StorageAccount account, AccountStorage(blobs, db));
  last_ = std::make_shared<const StorageAccount>(std::move(account));
  computed_ = now;
  return last_;
}

}  // namespace blz::registry
