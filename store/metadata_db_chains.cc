// MetadataDb's queries for archives stored as chains (table archive_chains, migrations/0012):
// registry/archive_chains.cc (docs/storage.md, "Chains").
#include <ctime>
#include <string>
#include <unordered_set>
#include <vector>

#include "store/metadata_db.h"

namespace blz::store {
namespace {

using sql::Statement;
using sql::Transaction;

constexpr char kLinkColumns[] =
    "archive_digest, parent_digest, patch_digest, patch_size, depth, rebuild_bytes";

ChainLink LinkFromRow(const Statement& st) {
  ChainLink l;
  l.archive_digest = st.ColumnText(0);
  l.parent_digest = st.ColumnText(1);
  l.patch_digest = st.ColumnText(2);
  l.patch_size = uint64_t(st.ColumnInt(3));
  l.depth = uint64_t(st.ColumnInt(4));
  l.rebuild_bytes = uint64_t(st.ColumnInt(5));
  return l;
}

// The link of `archive` on the connection `db_` (inside the caller's transaction, if any).
Result<std::optional<ChainLink>> LinkOf(sql::Database& db_, std::string_view archive) {
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare(std::string("SELECT ") + kLinkColumns +
                                   " FROM archive_chains WHERE archive_digest = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<ChainLink>();
  return std::optional<ChainLink>(LinkFromRow(st));
}

Result<std::vector<ChainLink>> Links(sql::Database& db_, const std::string& where,
                                     std::string_view arg) {
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(std::string("SELECT ") + kLinkColumns +
                                                 " FROM archive_chains" + where +
                                                 " ORDER BY archive_digest"));
  if (!arg.empty()) {
    BLZ_RETURN_IF_ERROR(st.Bind(1, arg));
  }
  std::vector<ChainLink> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    out.push_back(LinkFromRow(st));
  }
}

}  // namespace

Result<ChainLink> MetadataDb::FindChainLink(std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(std::optional<ChainLink> link, LinkOf(db_, archive_digest));
  if (!link.has_value()) {
    return NotFound("archive " + std::string(archive_digest) + " is not stored as a chain link");
  }
  return std::move(*link);
}

Result<StoredForm> MetadataDb::FindStoredForm(std::string_view archive_digest) {
  Result<ChainLink> link = FindChainLink(archive_digest);
  if (link.ok()) {
    return StoredForm{link->parent_digest, link->patch_digest, link->patch_size, link->depth};
  }
  if (link.status().code() != Code::kNotFound) return link.status();
  Result<PatchRecord> full = FindPatch("", archive_digest);
  if (!full.ok()) {
    if (full.status().code() != Code::kNotFound) return full.status();
    return NotFound("archive " + std::string(archive_digest) +
                    " has no stored form (it is stored raw, or unknown)");
  }
  return StoredForm{"", full->patch_digest, full->patch_size, 0};
}

Result<std::vector<ChainLink>> MetadataDb::ListChainLinks() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Links(db_, "", "");
}

Result<std::vector<ChainLink>> MetadataDb::ListChainChildren(std::string_view parent_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Links(db_, " WHERE parent_digest = ?1", parent_digest);
}

Status MetadataDb::RecordChainLink(const ChainLink& link, std::string_view replacing) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Retrying<Status>([&]() -> Status {
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
    BLZ_RETURN_IF_ERROR(tx.LockKey("chains"));
    if (replacing.empty()) {
      BLZ_ASSIGN_OR_RETURN(Statement st,
                           db_.Prepare("SELECT 1 FROM versions WHERE archive_digest = ?1"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, link.parent_digest));
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) {
        return NotFound("archive " + link.parent_digest + " is no longer a model version");
      }
    } else {
      BLZ_ASSIGN_OR_RETURN(std::optional<ChainLink> current, LinkOf(db_, link.archive_digest));
      if (!current.has_value() || current->parent_digest != replacing) {
        return NotFound("the chain link of " + link.archive_digest + " changed meanwhile");
      }
    }
    if (replacing.empty()) {
      // An archive others are stored against stays as it is: a link would make each of their
      // chains one longer than its row says (and than the depth bound it was checked against).
      BLZ_ASSIGN_OR_RETURN(Statement st,
                           db_.Prepare("SELECT 1 FROM archive_chains WHERE parent_digest = ?1"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, link.archive_digest));
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (row) {
        return AlreadyExists("archive " + link.archive_digest +
                             " is the parent of other chain links: it stays unchained");
      }
    }
    // The parent's chain must not reach the archive (a cycle could never be rebuilt), and the
    // link's depth is its parent's chain as it is now, plus one: no deeper than the caller
    // checked (another replica may have chained the parent meanwhile).
    std::unordered_set<std::string> seen;
    std::string at = link.parent_digest;
    uint64_t depth = 1;
    while (true) {
      if (at == link.archive_digest) {
        return AlreadyExists("archive " + link.parent_digest + " is stored against " +
                             link.archive_digest + " (directly or through its chain)");
      }
      if (!seen.insert(at).second) break;  // a cycle elsewhere: not ours to report
      BLZ_ASSIGN_OR_RETURN(std::optional<ChainLink> up, LinkOf(db_, at));
      if (!up.has_value()) break;
      ++depth;
      at = up->parent_digest;
    }
    if (depth > link.depth) {
      return NotFound("the chain of parent " + link.parent_digest + " is now " +
                      std::to_string(depth - 1) + " links deep, over the " +
                      std::to_string(link.depth - 1) + " checked");
    }
    const int64_t now = int64_t(std::time(nullptr));
    {
      BLZ_ASSIGN_OR_RETURN(
          Statement st,
          db_.Prepare("INSERT INTO archive_chains (archive_digest, parent_digest, patch_digest, "
                      "patch_size, depth, rebuild_bytes, created) VALUES (?1, ?2, ?3, ?4, ?5, "
                      "?6, ?7) ON CONFLICT (archive_digest) DO UPDATE SET "
                      "parent_digest = excluded.parent_digest, "
                      "patch_digest = excluded.patch_digest, patch_size = excluded.patch_size, "
                      "depth = excluded.depth, rebuild_bytes = excluded.rebuild_bytes, "
                      "created = excluded.created"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, link.archive_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(2, link.parent_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(3, link.patch_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(link.patch_size)));
      BLZ_RETURN_IF_ERROR(st.Bind(5, int64_t(link.depth)));
      BLZ_RETURN_IF_ERROR(st.Bind(6, int64_t(link.rebuild_bytes)));
      BLZ_RETURN_IF_ERROR(st.Bind(7, now));
      BLZ_RETURN_IF_ERROR(st.Run());
    }
    {
      BLZ_ASSIGN_OR_RETURN(
          Statement st,
          db_.Prepare("INSERT INTO patches (from_digest, to_digest, patch_digest, patch_size, "
                      "repository_id, created) VALUES (?1, ?2, ?3, ?4, NULL, ?5) "
                      "ON CONFLICT (from_digest, to_digest) DO UPDATE SET "
                      "patch_digest = excluded.patch_digest, patch_size = excluded.patch_size"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, link.parent_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(2, link.archive_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(3, link.patch_digest));
      BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(link.patch_size)));
      BLZ_RETURN_IF_ERROR(st.Bind(5, now));
      BLZ_RETURN_IF_ERROR(st.Run());
    }
    return tx.Commit();
  });
}

Status MetadataDb::DropChainLink(std::string_view archive_digest,
                                 std::string_view parent_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Retrying<Status>([&]() -> Status {
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
    BLZ_RETURN_IF_ERROR(tx.LockKey("chains"));
    {
      BLZ_ASSIGN_OR_RETURN(
          Statement st,
          db_.Prepare("SELECT 1 FROM patches WHERE from_digest = '' AND to_digest = ?1"));
      BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
      BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) {
        return NotFound("archive " + std::string(archive_digest) +
                        " has no recorded full patch: its chain link stays");
      }
    }
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("DELETE FROM archive_chains WHERE archive_digest = ?1 AND "
                                     "parent_digest = ?2"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
    BLZ_RETURN_IF_ERROR(st.Bind(2, parent_digest));
    BLZ_RETURN_IF_ERROR(st.Run());
    return tx.Commit();
  });
}

}  // namespace blz::store
