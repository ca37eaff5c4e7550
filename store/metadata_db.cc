#include "store/metadata_db.h"

#include <ctime>
#include <limits>
#include <utility>

#include <openssl/crypto.h>

#include "core/digest.h"
#include "core/file_util.h"

namespace blz::store {
namespace {

using sql::Statement;
using sql::Transaction;

int64_t Now() { return int64_t(std::time(nullptr)); }

// LIMIT argument that fetches one row more than asked, to learn whether more exist. "No limit"
// is the largest LIMIT (SQLite's -1 is an error on PostgreSQL).
int64_t LimitPlusOne(std::optional<uint64_t> limit) {
  constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
  if (!limit.has_value() || *limit >= uint64_t(kAll)) return kAll;
  return int64_t(*limit) + 1;
}

Result<Page> CollectPage(Statement* st, std::optional<uint64_t> limit) {
  Page page;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    if (limit.has_value() && page.items.size() >= *limit) {
      page.more = true;
      break;
    }
    page.items.push_back(st->ColumnText(0));
  }
  return page;
}

}  // namespace

Result<std::unique_ptr<MetadataDb>> MetadataDb::Open(const std::string& url) {
  if (url.rfind("postgresql://", 0) != 0 && url.rfind("postgres://", 0) != 0) {
    // SQLite: one connection, calls wait for it without a bound (its writers rely on it).
    BLZ_ASSIGN_OR_RETURN(sql::Database db, sql::OpenDatabase(url));
    return std::unique_ptr<MetadataDb>(new MetadataDb(
        std::make_unique<sql::Pool>(std::move(db), nullptr, 1, std::nullopt)));
  }
  BLZ_ASSIGN_OR_RETURN(sql::PoolOptions options, sql::TakePoolOptions(url));
  BLZ_ASSIGN_OR_RETURN(sql::Database db, sql::OpenDatabase(options.url));  // migrates
  auto connect = [target = options.url] { return sql::ConnectDatabase(target); };
  return std::unique_ptr<MetadataDb>(new MetadataDb(std::make_unique<sql::Pool>(
      std::move(db), connect, options.connections,
      std::chrono::milliseconds(options.timeout_seconds * 1000))));
}

Result<int64_t> MetadataDb::SchemaVersion() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return db_.SchemaVersion();
}

Status MetadataDb::Ping() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("SELECT 1"));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row || st.ColumnInt(0) != 1) return Unavailable(db_.label() + ": SELECT 1 returned no row");
  return Status::Ok();
}

Status MetadataDb::RecordBlob(std::string_view digest, uint64_t size) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  std::optional<Transaction> tx;  // PostgreSQL: holds the epoch's share lock to the commit
  if (db_.engine() == "postgresql") {
    BLZ_ASSIGN_OR_RETURN(Transaction t, Transaction::Begin(&db_));
    tx.emplace(std::move(t));
  }
  BLZ_ASSIGN_OR_RETURN(std::string epoch, GcEpochForTouchLocked(db_));
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare(std::string("INSERT INTO blobs (digest, size, created, "
                                               "touched) VALUES (?1, ?2, ?3, ") +
                                   epoch +
                                   ") ON CONFLICT (digest) DO UPDATE SET "
                                   "touched = excluded.touched"));  // a touch: see GC
  BLZ_RETURN_IF_ERROR(st.Bind(1, digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, int64_t(size)));
  BLZ_RETURN_IF_ERROR(st.Bind(3, Now()));
  BLZ_RETURN_IF_ERROR(st.Run());
  return tx.has_value() ? tx->Commit() : Status::Ok();
}

Result<int64_t> MetadataDb::RepositoryIdLocked(sql::Database& db_, std::string_view repository) {
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("SELECT id FROM repositories WHERE name = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound("repository '" + std::string(repository) + "' is unknown");
  return st.ColumnInt(0);
}

Status MetadataDb::PutManifest(const ManifestPut& put) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  // Every insert of a PUT is an upsert, so a unique violation can only be a concurrent
  // transaction's row that this one did not see yet: the retry sees it (unique_races).
  return Retrying<Status>([&] { return PutManifestLocked(db_, put); }, /*unique_races=*/true);
}

Status MetadataDb::PutManifestLocked(sql::Database& db_, const ManifestPut& put) {
  const int64_t now = Now();
  BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
  // One push or delete per repository at a time across replicas: the tag move and the version
  // row are decided together (SQLite's BEGIN IMMEDIATE already serializes every writer).
  BLZ_RETURN_IF_ERROR(tx.LockKey("repository:" + put.repository));
  {
    BLZ_ASSIGN_OR_RETURN(Statement st,
                         db_.Prepare("INSERT INTO repositories (name, created) VALUES (?1, ?2) "
                                     "ON CONFLICT (name) DO NOTHING"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, put.repository));
    BLZ_RETURN_IF_ERROR(st.Bind(2, now));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  BLZ_ASSIGN_OR_RETURN(int64_t repo_id, RepositoryIdLocked(db_, put.repository));
  {
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare("INSERT INTO manifests (repository_id, digest, media_type, content, created, "
                    "subject_digest, artifact_type, annotations) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
                    "ON CONFLICT (repository_id, digest) DO NOTHING"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repo_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, put.digest));
    BLZ_RETURN_IF_ERROR(st.Bind(3, put.media_type));
    BLZ_RETURN_IF_ERROR(st.BindBlob(4, put.content));
    BLZ_RETURN_IF_ERROR(st.Bind(5, now));
    const std::string* optional_text[] = {&put.subject_digest, &put.artifact_type,
                                          &put.annotations};
    for (int i = 0; i < 3; ++i) {
      BLZ_RETURN_IF_ERROR(optional_text[i]->empty() ? st.BindNull(6 + i)
                                                    : st.Bind(6 + i, *optional_text[i]));
    }
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  for (const std::string& blob : put.blobs) {
    BLZ_RETURN_IF_ERROR(LinkBlobLocked(db_, put.repository, blob));
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare("INSERT INTO manifest_blobs (repository_id, manifest_digest, blob_digest) "
                    "VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repo_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, put.digest));
    BLZ_RETURN_IF_ERROR(st.Bind(3, blob));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  if (!put.tag.empty()) {
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare("INSERT INTO tags (repository_id, tag, manifest_digest, updated) "
                    "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (repository_id, tag) DO UPDATE SET "
                    "manifest_digest = excluded.manifest_digest, updated = excluded.updated"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repo_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, put.tag));
    BLZ_RETURN_IF_ERROR(st.Bind(3, put.digest));
    BLZ_RETURN_IF_ERROR(st.Bind(4, now));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  if (!put.archive_digest.empty()) {
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare("INSERT INTO versions (repository_id, archive_digest, manifest_digest, "
                    "archive_size, created, structural_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                    "ON CONFLICT (repository_id, archive_digest) DO UPDATE SET structural_hash "
                    "= coalesce(versions.structural_hash, excluded.structural_hash)"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, repo_id));
    BLZ_RETURN_IF_ERROR(st.Bind(2, put.archive_digest));
    BLZ_RETURN_IF_ERROR(st.Bind(3, put.digest));
    BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(put.archive_size)));
    BLZ_RETURN_IF_ERROR(st.Bind(5, now));
    BLZ_RETURN_IF_ERROR(put.structural_hash.empty() ? st.BindNull(6)
                                                    : st.Bind(6, put.structural_hash));
    BLZ_RETURN_IF_ERROR(st.Run());
  }
  return tx.Commit();
}

Result<ManifestRecord> MetadataDb::GetManifest(std::string_view repository,
                                               std::string_view digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT m.media_type, m.content FROM manifests m JOIN repositories r "
                  "ON r.id = m.repository_id WHERE r.name = ?1 AND m.digest = ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return NotFound("manifest " + std::string(digest) + " is not in repository '" +
                    std::string(repository) + "'");
  }
  return ManifestRecord{std::string(digest), st.ColumnText(0), st.ColumnBlob(1)};
}

Result<std::string> MetadataDb::ResolveTag(std::string_view repository, std::string_view tag) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT t.manifest_digest FROM tags t JOIN repositories r "
                                   "ON r.id = t.repository_id WHERE r.name = ?1 AND t.tag = ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, tag));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return NotFound("tag '" + std::string(tag) + "' is not in repository '" +
                    std::string(repository) + "'");
  }
  return st.ColumnText(0);
}

Result<bool> MetadataDb::RepositoryExists(std::string_view repository) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  Result<int64_t> id = RepositoryIdLocked(db_, repository);
  if (id.ok()) return true;
  if (id.status().code() == Code::kNotFound) return false;
  return id.status();
}

Result<Page> MetadataDb::ListTags(std::string_view repository, std::optional<uint64_t> limit,
                                  std::string_view last) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(int64_t repo_id, RepositoryIdLocked(db_, repository));
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT tag FROM tags WHERE repository_id = ?1 AND tag > ?2 "
                                   "ORDER BY tag LIMIT ?3"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repo_id));
  BLZ_RETURN_IF_ERROR(st.Bind(2, last));
  BLZ_RETURN_IF_ERROR(st.Bind(3, LimitPlusOne(limit)));
  return CollectPage(&st, limit);
}

Result<Page> MetadataDb::ListRepositories(std::optional<uint64_t> limit, std::string_view last) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT name FROM repositories WHERE name > ?1 "
                                   "ORDER BY name LIMIT ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, last));
  BLZ_RETURN_IF_ERROR(st.Bind(2, LimitPlusOne(limit)));
  return CollectPage(&st, limit);
}

Result<VersionRecord> MetadataDb::FindVersion(std::string_view repository,
                                              std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT v.manifest_digest, v.archive_size, v.created, v.structural_hash "
                  "FROM versions v JOIN repositories r ON r.id = v.repository_id "
                  "WHERE r.name = ?1 AND v.archive_digest = ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(2, archive_digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return NotFound("archive " + std::string(archive_digest) + " is not a version of '" +
                    std::string(repository) + "'");
  }
  return VersionRecord{std::string(repository), std::string(archive_digest), st.ColumnText(0),
                       uint64_t(st.ColumnInt(1)), st.ColumnInt(2), st.ColumnText(3)};
}

Result<std::vector<VersionRecord>> MetadataDb::ListVersions(std::string_view repository) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT v.archive_digest, v.manifest_digest, v.archive_size, v.created, "
                  "v.structural_hash FROM versions v JOIN repositories r "
                  "ON r.id = v.repository_id WHERE r.name = ?1 ORDER BY v.created, v.rowid"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, repository));
  std::vector<VersionRecord> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(VersionRecord{std::string(repository), st.ColumnText(0), st.ColumnText(1),
                                uint64_t(st.ColumnInt(2)), st.ColumnInt(3), st.ColumnText(4)});
  }
  return out;
}

Result<std::vector<VersionRecord>> MetadataDb::ListVersionsOfArchive(
    std::string_view archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT r.name, v.manifest_digest, v.archive_size, v.created, "
                  "v.structural_hash FROM versions v JOIN repositories r "
                  "ON r.id = v.repository_id WHERE v.archive_digest = ?1 ORDER BY r.name"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
  std::vector<VersionRecord> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(VersionRecord{st.ColumnText(0), std::string(archive_digest), st.ColumnText(1),
                                uint64_t(st.ColumnInt(2)), st.ColumnInt(3), st.ColumnText(4)});
  }
  return out;
}

// ---- structural hashes and value diffs (migrations/0002_structures.sql) ----

Result<std::vector<std::string>> MetadataDb::ArchivesWithoutStructure() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT DISTINCT archive_digest FROM versions "
                                   "WHERE structural_hash IS NULL ORDER BY archive_digest"));
  return st.ColumnTexts();
}

Status MetadataDb::SetStructuralHash(std::string_view archive_digest,
                                     std::string_view structural_hash) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("UPDATE versions SET structural_hash = ?2 "
                                   "WHERE archive_digest = ?1 AND structural_hash IS NULL"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, archive_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, structural_hash));
  return st.Run();
}

Result<StructurePage> MetadataDb::ListStructureVersions(std::string_view structural_hash,
                                                        std::optional<uint64_t> limit,
                                                        const StructureCursor& after) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT r.name, t.tag, v.archive_digest, v.manifest_digest FROM versions v "
                  "JOIN repositories r ON r.id = v.repository_id "
                  "LEFT JOIN tags t ON t.repository_id = v.repository_id "
                  "AND t.manifest_digest = v.manifest_digest "
                  "WHERE v.structural_hash = ?1 "
                  "AND (r.name, coalesce(t.tag, ''), v.archive_digest) > (?2, ?3, ?4) "
                  "ORDER BY r.name, coalesce(t.tag, ''), v.archive_digest LIMIT ?5"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, structural_hash));
  BLZ_RETURN_IF_ERROR(st.Bind(2, after.repository));
  BLZ_RETURN_IF_ERROR(st.Bind(3, after.tag));
  BLZ_RETURN_IF_ERROR(st.Bind(4, after.archive_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(5, LimitPlusOne(limit)));
  StructurePage page;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    if (limit.has_value() && page.items.size() >= *limit) {
      page.more = true;
      break;
    }
    StructureVersion v;
    v.repository = st.ColumnText(0);
    if (!st.ColumnIsNull(1)) v.tag = st.ColumnText(1);
    v.archive_digest = st.ColumnText(2);
    v.manifest_digest = st.ColumnText(3);
    page.items.push_back(std::move(v));
  }
  return page;
}

Result<ValueDiffRecord> MetadataDb::FindValueDiff(std::string_view from_digest,
                                                  std::string_view to_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT diff_digest, diff_size FROM value_diffs "
                                   "WHERE from_digest = ?1 AND to_digest = ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, to_digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return NotFound("no value diff from " + std::string(from_digest) + " to " +
                    std::string(to_digest));
  }
  return ValueDiffRecord{std::string(from_digest), std::string(to_digest), st.ColumnText(0),
                         uint64_t(st.ColumnInt(1))};
}

Status MetadataDb::RecordValueDiff(const ValueDiffRecord& diff) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO value_diffs (from_digest, to_digest, diff_digest, diff_size, "
                  "created) VALUES (?1, ?2, ?3, ?4, ?5) "
                  "ON CONFLICT (from_digest, to_digest) DO UPDATE SET "
                  "diff_digest = excluded.diff_digest, diff_size = excluded.diff_size"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, diff.from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, diff.to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, diff.diff_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(diff.diff_size)));
  BLZ_RETURN_IF_ERROR(st.Bind(5, Now()));
  return st.Run();
}

Result<PatchRecord> MetadataDb::FindPatch(std::string_view from_digest,
                                          std::string_view to_digest) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT patch_digest, patch_size FROM patches "
                                   "WHERE from_digest = ?1 AND to_digest = ?2"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, to_digest));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) {
    return NotFound("no patch from " + std::string(from_digest) + " to " +
                    std::string(to_digest));
  }
  return PatchRecord{std::string(from_digest), std::string(to_digest), st.ColumnText(0),
                     uint64_t(st.ColumnInt(1))};
}

Status MetadataDb::RecordPatch(std::string_view repository, const PatchRecord& patch) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  std::optional<int64_t> repo_id;
  if (!repository.empty()) {
    Result<int64_t> id = RepositoryIdLocked(db_, repository);
    if (id.ok()) {
      repo_id = *id;
    } else if (id.status().code() != Code::kNotFound) {
      return id.status();
    }
  }
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("INSERT INTO patches (from_digest, to_digest, patch_digest, patch_size, "
                  "repository_id, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                  "ON CONFLICT (from_digest, to_digest) DO UPDATE SET "
                  "patch_digest = excluded.patch_digest, patch_size = excluded.patch_size"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, patch.from_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(2, patch.to_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(3, patch.patch_digest));
  BLZ_RETURN_IF_ERROR(st.Bind(4, int64_t(patch.patch_size)));
  BLZ_RETURN_IF_ERROR(repo_id.has_value() ? st.Bind(5, *repo_id) : st.BindNull(5));
  BLZ_RETURN_IF_ERROR(st.Bind(6, Now()));
  return st.Run();
}

namespace {

constexpr char kTokenColumns[] = "rowid, name, scope, created, expires, revoked";

TokenRecord TokenFromRow(const Statement& st) {
  TokenRecord t;
  t.id = st.ColumnInt(0);
  t.name = st.ColumnText(1);
  t.scope = st.ColumnText(2);
  t.created = st.ColumnInt(3);
  if (!st.ColumnIsNull(4)) t.expires = st.ColumnInt(4);
  if (!st.ColumnIsNull(5)) t.revoked = st.ColumnInt(5);
  return t;
}

}  // namespace

Result<std::string> MetadataDb::CreateToken(std::string_view name, std::string_view scope,
                                            std::optional<int64_t> expires) {
  std::string token = RandomHex(32);
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
  // The name check and the insert are one step on every replica.
  BLZ_RETURN_IF_ERROR(tx.LockKey("tokens"));
  {
    BLZ_ASSIGN_OR_RETURN(
        Statement st, db_.Prepare("SELECT 1 FROM tokens WHERE name = ?1 AND revoked IS NULL"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, name));
    BLZ_ASSIGN_OR_RETURN(bool taken, st.Step());
    if (taken) {
      return AlreadyExists("a token named '" + std::string(name) +
                           "' already exists (revoke it first)");
    }
  }
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("INSERT INTO tokens (token_sha256, name, created, scope, "
                                   "expires) VALUES (?1, ?2, ?3, ?4, ?5)"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, Sha256Hex(token)));
  BLZ_RETURN_IF_ERROR(st.Bind(2, name));
  BLZ_RETURN_IF_ERROR(st.Bind(3, Now()));
  BLZ_RETURN_IF_ERROR(st.Bind(4, scope));
  BLZ_RETURN_IF_ERROR(expires.has_value() ? st.Bind(5, *expires) : st.BindNull(5));
  BLZ_RETURN_IF_ERROR(st.Run());
  BLZ_RETURN_IF_ERROR(tx.Commit());
  return token;
}

Result<TokenRecord> MetadataDb::FindToken(std::string_view token) {
  if (!IsLowerHex(token, 64)) return NotFound("not a token");
  const std::string hash = Sha256Hex(token);
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare(std::string("SELECT ") + kTokenColumns +
                                   ", token_sha256 FROM tokens WHERE token_sha256 = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, hash));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  // The index lookup found the row; compare the whole hash again in constant time, so that
  // nothing about a stored hash depends on how early a comparison stopped.
  const std::string stored = row ? st.ColumnText(6) : std::string(hash.size(), '0');
  const bool same = stored.size() == hash.size() &&
                    CRYPTO_memcmp(stored.data(), hash.data(), hash.size()) == 0;
  if (!row || !same) return NotFound("unknown token");
  return TokenFromRow(st);
}

Result<TokenRecord> MetadataDb::GetTokenById(int64_t id) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(std::string("SELECT ") + kTokenColumns +
                                                 " FROM tokens WHERE rowid = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, id));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound("no token with id " + std::to_string(id));
  return TokenFromRow(st);
}

Result<bool> MetadataDb::VerifyToken(std::string_view token) {
  Result<TokenRecord> t = FindToken(token);
  if (!t.ok()) {
    if (t.status().code() == Code::kNotFound) return false;
    return t.status();
  }
  return t->ActiveAt(Now());
}

Result<int64_t> MetadataDb::CountTokens(std::string_view name) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("SELECT count(*) FROM tokens WHERE name = ?1 AND revoked IS NULL"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, name));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal("count(*) returned no row");
  return st.ColumnInt(0);
}

Result<std::vector<TokenRecord>> MetadataDb::ListTokens() {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare(std::string("SELECT ") + kTokenColumns +
                                   " FROM tokens WHERE revoked IS NULL ORDER BY name"));
  std::vector<TokenRecord> out;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(TokenFromRow(st));
  }
  return out;
}

Status MetadataDb::RevokeToken(std::string_view name) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(
      Statement st,
      db_.Prepare("UPDATE tokens SET revoked = ?2 WHERE name = ?1 AND revoked IS NULL "
                  "RETURNING rowid"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, name));
  BLZ_RETURN_IF_ERROR(st.Bind(2, Now()));
  BLZ_ASSIGN_OR_RETURN(bool changed, st.Step());
  if (changed) BLZ_RETURN_IF_ERROR(st.Run());  // finish the statement
  if (!changed) {
    return NotFound("no active token named '" + std::string(name) + "'");
  }
  return Status::Ok();
}

Status MetadataDb::CreateUpload(std::string_view uuid, std::string_view repository,
                                std::string_view owner, uint64_t max_per_owner,
                                uint64_t max_per_repository, std::string_view patch_from) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  return Retrying<Status>([&]() -> Status {
    BLZ_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(&db_));
    // The counts and the insert are one step for every process and replica.
    BLZ_RETURN_IF_ERROR(tx.LockKey("uploads"));
    BLZ_RETURN_IF_ERROR(
        CreateUploadLocked(db_, uuid, repository, owner, max_per_owner, max_per_repository,
                           patch_from));
    return tx.Commit();
  });
}

Status MetadataDb::CreateUploadLocked(sql::Database& db_, std::string_view uuid,
                                      std::string_view repository,
                                      std::string_view owner, uint64_t max_per_owner,
                                      uint64_t max_per_repository,
                                      std::string_view patch_from) {
  auto count = [&](const char* sql, std::string_view key) -> Result<uint64_t> {
    BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
    BLZ_RETURN_IF_ERROR(st.Bind(1, key));
    BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
    return row ? uint64_t(st.ColumnInt(0)) : 0;
  };
  if (max_per_owner > 0 && !owner.empty()) {
    BLZ_ASSIGN_OR_RETURN(uint64_t n, count("SELECT COUNT(*) FROM uploads WHERE owner = ?1", owner));
    if (n >= max_per_owner) {
      return TooLarge(std::to_string(n) + " upload sessions are open for " + std::string(owner) +
                      ", the most allowed per token (" + std::to_string(max_per_owner) +
                      "): finish or cancel some first");
    }
  }
  if (max_per_repository > 0) {
    BLZ_ASSIGN_OR_RETURN(uint64_t n, count("SELECT COUNT(*) FROM uploads WHERE repository = ?1",
                                           repository));
    if (n >= max_per_repository) {
      return TooLarge(std::to_string(n) + " upload sessions are open in repository '" +
                      std::string(repository) + "', the most allowed per repository (" +
                      std::to_string(max_per_repository) + "): finish or cancel some first");
    }
  }
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("INSERT INTO uploads (uuid, repository, started, owner, "
                                   "updated, patch_from) VALUES (?1, ?2, ?3, ?4, ?3, ?5)"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, uuid));
  BLZ_RETURN_IF_ERROR(st.Bind(2, repository));
  BLZ_RETURN_IF_ERROR(st.Bind(3, Now()));
  BLZ_RETURN_IF_ERROR(st.Bind(4, owner));
  BLZ_RETURN_IF_ERROR(st.Bind(5, patch_from));
  return st.Run();
}

Result<UploadRecord> MetadataDb::GetUpload(std::string_view uuid) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st,
                       db_.Prepare("SELECT repository, started, size, parts, updated, "
                                   "patch_from FROM uploads WHERE uuid = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, uuid));
  BLZ_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return NotFound("upload session '" + std::string(uuid) + "' is unknown");
  UploadRecord up{std::string(uuid), st.ColumnText(0), st.ColumnInt(1)};
  up.size = uint64_t(st.ColumnInt(2));
  const std::string parts = st.ColumnText(3);
  for (size_t begin = 0; begin < parts.size();) {
    size_t end = parts.find(';', begin);
    if (end == std::string::npos) end = parts.size();
    if (end > begin) up.parts.push_back(parts.substr(begin, end - begin));
    begin = end + 1;
  }
  up.updated = st.ColumnInt(4);
  up.patch_from = st.ColumnText(5);
  return up;
}

Result<std::vector<std::string>> MetadataDb::ListUploadsIdleSince(int64_t unix_seconds) {
  return ListUploadUuids("SELECT uuid FROM uploads WHERE updated <= ?1 ORDER BY updated, uuid",
                             unix_seconds);
}

Status MetadataDb::AdvanceUpload(std::string_view uuid, uint64_t old_size, uint64_t new_size,
                                 std::string_view part) {
  if (part.find(';') != std::string_view::npos) {
    return InvalidArgument("upload part name '" + std::string(part) + "' contains ';'");
  }
  {
    BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
    BLZ_ASSIGN_OR_RETURN(
        Statement st,
        db_.Prepare("UPDATE uploads SET size = ?3, parts = parts || ?4, updated = ?5 "
                    "WHERE uuid = ?1 AND size = ?2 RETURNING uuid"));
    BLZ_RETURN_IF_ERROR(st.Bind(1, uuid));
    BLZ_RETURN_IF_ERROR(st.Bind(2, int64_t(old_size)));
    BLZ_RETURN_IF_ERROR(st.Bind(3, int64_t(new_size)));
    BLZ_RETURN_IF_ERROR(st.Bind(4, part.empty() ? std::string() : std::string(part) + ";"));
    BLZ_RETURN_IF_ERROR(st.Bind(5, Now()));
    BLZ_ASSIGN_OR_RETURN(bool changed, st.Step());
    if (changed) {
      BLZ_RETURN_IF_ERROR(st.Run());  // finish the statement
      return Status::Ok();
    }
  }
  BLZ_ASSIGN_OR_RETURN(UploadRecord up, GetUpload(uuid));
  return InvalidArgument("upload session '" + std::string(uuid) + "' is at byte " +
                         std::to_string(up.size) + ", not " + std::to_string(old_size));
}

Result<std::vector<std::string>> MetadataDb::ListUploadsStartedBy(int64_t unix_seconds) {
  return ListUploadUuids("SELECT uuid FROM uploads WHERE started <= ?1 ORDER BY started, uuid",
                             unix_seconds);
}

Result<std::vector<std::string>> MetadataDb::ListUploadUuids(std::string_view sql,
                                                                 int64_t unix_seconds) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare(sql));
  BLZ_RETURN_IF_ERROR(st.Bind(1, unix_seconds));
  return st.ColumnTexts();
}

Status MetadataDb::DeleteUpload(std::string_view uuid) {
  BLZ_ASSIGN_OR_RETURN(Conn db_, Acquire());
  BLZ_ASSIGN_OR_RETURN(Statement st, db_.Prepare("DELETE FROM uploads WHERE uuid = ?1"));
  BLZ_RETURN_IF_ERROR(st.Bind(1, uuid));
  return st.Run();
}

}  // namespace blz::store
