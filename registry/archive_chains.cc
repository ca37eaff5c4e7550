// Archives stored as chains: a verified patch from a parent archive instead of a full patch.
// Part of ArchiveStorage (registry/archive_storage.h); documented in docs/storage.md
// ("Chains"). In short:
// - Compressing an archive (CompressOnce) computes its full patch as before, records its large
//   tensors by content (table archive_tensors), then tries parents among the model versions
//   the registry holds (any repository; those holding identical tensors whatever their
//   structure), ranked by the link size expected from the bytes they hold identically and
//   their structure, then like pull bases (registry/base_handlers.cc): the same repository,
//   then the nearest push time. For each of the first options.chain_candidates parents whose
//   chain is short enough (depth + 1 <= max_chain_depth) and does not pass through the
//   archive: the patch parent -> archive is computed, kept only when smaller than
//   chain_max_fraction of the full patch and when the rebuild cost stays bounded (per level
//   of the chain, its stored form or, read in place, the archive's size, whichever is less;
//   in all <= chain_rebuild_factor x archive size), then verified (decoded against the
//   parent: it must rebuild exactly the archive's SHA-256), published and recorded (table
//   archive_chains and the `patches` row parent -> archive, one transaction). Only then is
//   the raw blob dropped, and after that the full patch forgotten (garbage collection
//   removes it).
// - Reads: ReadForms names the link, its parent's form and so on down to the root, and
//   OpenReader opens them as one reader (patcher/patch_reader.h) that decodes any range chunk
//   by chunk, link by link. Reads of the whole archive (File: diffs, verification) write it
//   into the cache in one pass through that reader (patcher::WriteArchive, checked by SHA-256
//   before it appears; no parent is written); blob GETs and file reads (Hub, Ollama) stream
//   from it without rebuilding anything.
// - Re-bases (RebaseOrphans, before every garbage collection): links whose archive is still
//   referenced but whose parent is not get a new parent (never a deeper chain than before) or
//   their full patch; the link switches in one transaction, only after the new form verified.
//   Until then garbage collection keeps the parent (registry/garbage_collector.cc).
// - Sharers (ChainSharersOnto, after an archive was stored): archives stored whole that hold
//   most of their tensors identically in the new archive are tried as links from it, so a
//   model assembled from two others stores neither's tensors twice.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/digest.h"
#include "core/failpoint.h"
#include "core/file_util.h"
#include "formats/blz_archive.h"
#include "patcher/archive_reader.h"
#include "patcher/patch_reader.h"
#include "registry/archive_storage.h"

namespace blz::registry {
using internal::ScrubPaths;
namespace {

// Chains deeper than this are refused when read (a corrupt, cyclic chain).
constexpr int kMaxRebuildDepth = 64;
// Same-structure versions of other repositories considered as parents.
constexpr uint64_t kMaxStructureCandidates = 64;

std::string Mb(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", double(n) / 1e6);
  return buf;
}

// Tensors at least this large are recorded by content (table archive_tensors) and steer the
// choice of parent; smaller ones save too little to matter.
constexpr uint64_t kMinSharedTensorBytes = 64 << 10;
// Archives holding identical tensors considered as parents, beyond the usual candidates.
constexpr uint64_t kMaxSharingCandidates = 16;

struct Parent {
  std::string digest;
  bool same_structure = false;
  bool same_repository = false;
  uint64_t time_distance = 0;
  // Versions pushed between the two in a repository they share (its versions in push order):
  // breaks ties of time_distance, which is in seconds (a series pushed within a second).
  uint64_t order_distance = UINT64_MAX;
  uint64_t shared_bytes = 0;  // bytes of the archive's tensors the parent holds identically
  // Rough size of the link, in quarters of a byte: what is not shared, at 3/4 when coded
  // against the same structure (XOR with the same-named tensor) and 4/4 otherwise.
  uint64_t estimate = 0;
};

bool Better(const Parent& a, const Parent& b) {
  if (a.estimate != b.estimate) return a.estimate < b.estimate;
  if (a.same_repository != b.same_repository) return a.same_repository;
  if (a.time_distance != b.time_distance) return a.time_distance < b.time_distance;
  if (a.order_distance != b.order_distance) return a.order_distance < b.order_distance;
  return a.digest < b.digest;
}

uint64_t Distance(int64_t a, int64_t b) { return uint64_t(a > b ? a - b : b - a); }

}  // namespace

Result<std::shared_ptr<const patcher::ArchiveReader>> ArchiveStorage::OpenParent(
    const std::string& digest) {
  Result<store::BlobInfo> stat = Stat(digest);
  if (stat.ok() && stat->size <= options_.cache_bytes / 4) {
    BLZ_ASSIGN_OR_RETURN(store::BlobInfo file, File(digest));
    Result<std::shared_ptr<const patcher::ArchiveFileReader>> reader =
        patcher::ArchiveFileReader::Open(file.path, digest);
    if (!reader.ok()) return reader.status();
    return std::shared_ptr<const patcher::ArchiveReader>(std::move(*reader));
  }
  return OpenReader(digest);
}

Status ArchiveStorage::TryChain(const std::string& digest, const std::string& archive_path,
                                uint64_t full_patch_size, const ChainRequest& request,
                                bool* stored) {
  *stored = false;
  const uint64_t max_depth = request.max_depth;
  const std::string& exclude = request.exclude;
  const std::string& replacing = request.replacing;
  if (max_depth == 0) return Status::Ok();
  // Its large tensors by content, for later archives to find it as the parent that holds
  // their identical tensors (and for this one to find such parents below).
  BLZ_ASSIGN_OR_RETURN(bool listed, db_->HasArchiveTensors(digest));
  if (!listed) {
    BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(archive_path));
    BLZ_RETURN_IF_ERROR(RecordTensors(digest, archive.header()));
  }
  BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> mine, db_->ListVersionsOfArchive(digest));
  if (mine.empty()) return Status::Ok();  // nobody's version (any more): not worth it
  if (replacing.empty()) {
    // Others are stored against it: chaining it would make their chains longer than their
    // rows say (RecordChainLink refuses it too, in case they appear meanwhile).
    BLZ_ASSIGN_OR_RETURN(std::vector<store::ChainLink> children, db_->ListChainChildren(digest));
    if (!children.empty()) {
      Log("storage: " + digest + ": not chained: " + std::to_string(children.size()) +
          " versions are stored as chain links from it");
      return Status::Ok();
    }
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t archive_size, FileSizeOf(archive_path));
  const std::string& hash = mine.front().structural_hash;
  const int64_t created = mine.front().created;
  std::set<std::string> my_repos;
  for (const store::VersionRecord& v : mine) my_repos.insert(v.repository);

  // Archives of any repository and structure holding tensors identical to this one's.
  BLZ_ASSIGN_OR_RETURN(std::vector<store::SharedTensors> sharing,
                       db_->ListArchivesSharingTensors(digest, kMaxSharingCandidates));
  std::map<std::string, uint64_t> held_identically;
  for (const store::SharedTensors& st : sharing) held_identically[st.archive_digest] = st.bytes;

  std::map<std::string, Parent> found;
  auto consider = [&](const store::VersionRecord& v, uint64_t order_distance = UINT64_MAX) {
    if (v.archive_digest == digest || v.archive_digest == exclude) return;
    if (!request.only.empty() && v.archive_digest != request.only) return;
    Parent p;
    p.digest = v.archive_digest;
    p.same_structure = !hash.empty() && v.structural_hash == hash;
    p.same_repository = my_repos.count(v.repository) > 0;
    p.time_distance = Distance(v.created, created);
    p.order_distance = order_distance;
    auto shared = held_identically.find(p.digest);
    p.shared_bytes = shared == held_identically.end() ? 0 : std::min(shared->second, archive_size);
    p.estimate = (archive_size - p.shared_bytes) * (p.same_structure ? 3 : 4);
    auto [it, added] = found.emplace(p.digest, p);
    if (!added && Better(p, it->second)) it->second = p;
  };
  if (!request.only.empty()) {
    BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions,
                         db_->ListVersionsOfArchive(request.only));
    for (const store::VersionRecord& v : versions) consider(v);
  }
  for (const std::string& repo : my_repos) {
    if (!request.only.empty()) break;
    BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions, db_->ListVersions(repo));
    const auto self = std::find_if(versions.begin(), versions.end(), [&](const auto& v) {
      return v.archive_digest == digest;
    });
    const int64_t at = self - versions.begin();  // oldest first
    for (size_t i = 0; i < versions.size(); ++i) {
      consider(versions[i], uint64_t(std::abs(int64_t(i) - at)));
    }
  }
  if (!hash.empty() && request.only.empty()) {
    BLZ_ASSIGN_OR_RETURN(store::StructurePage page,
                         db_->ListStructureVersions(hash, kMaxStructureCandidates, {}));
    for (const store::StructureVersion& sv : page.items) {
      if (my_repos.count(sv.repository) > 0 || found.count(sv.archive_digest) > 0) continue;
      Result<store::VersionRecord> v = db_->FindVersion(sv.repository, sv.archive_digest);
      if (v.ok()) consider(*v);
    }
  }
  for (const store::SharedTensors& st : sharing) {
    if (found.count(st.archive_digest) > 0 || !request.only.empty()) continue;
    BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions,
                         db_->ListVersionsOfArchive(st.archive_digest));
    for (const store::VersionRecord& v : versions) consider(v);
  }
  std::vector<Parent> ranked;
  for (auto& [d, p] : found) ranked.push_back(std::move(p));
  std::sort(ranked.begin(), ranked.end(), Better);

  size_t tried = 0;
  for (const Parent& p : ranked) {
    if (tried >= options_.chain_candidates || stop_) break;
    // The parent's depth, and the stored bytes a read of the archive through it takes: a
    // read decodes, per chunk of the archive, one chunk-sized range per level of the parent's
    // chain (patcher/patch_reader.h), so each level costs its stored form at most and, read
    // in place, about the archive's own size at most; where the store downloads whole blobs
    // to read them (s3's local cache), each level's whole form. The chain must not pass
    // through the archive (or the parent being re-based away).
    const bool whole_levels = blobs_->streams_reads();
    auto level_cost = [&](uint64_t form_size) {
      return whole_levels ? form_size : std::min(form_size, archive_size);
    };
    uint64_t depth = 0, rebuild = 0;
    bool usable = true;
    std::string root = p.digest;
    for (int i = 0; i < kMaxRebuildDepth; ++i) {
      Result<store::ChainLink> up = db_->FindChainLink(root);
      if (!up.ok()) {
        if (up.status().code() != Code::kNotFound) return up.status();
        break;
      }
      if (i == 0) depth = up->depth;
      rebuild += level_cost(up->patch_size);
      if (up->parent_digest == digest || up->parent_digest == exclude) usable = false;
      root = up->parent_digest;
    }
    if (!usable || depth + 1 > max_depth) continue;
    if (Result<store::PatchRecord> full = db_->FindPatch("", root); full.ok()) {
      rebuild += level_cost(full->patch_size);
    } else if (Result<store::BlobInfo> raw = blobs_->Stat(root); raw.ok()) {
      rebuild += level_cost(raw->size);
    } else {
      continue;  // its chain's root is not stored in a form we can read
    }
    ++tried;
    Result<std::shared_ptr<const patcher::ArchiveReader>> parent = OpenParent(p.digest);
    if (!parent.ok()) {
      Log("storage: " + digest + ": parent candidate " + p.digest +
          " unreadable: " + parent.status().ToString());
      continue;
    }
    // A patch parent -> archive recorded already (pushed as a patch: Registry::
    // KeepPushedPatch, or computed for a pull) is reused when it qualifies (the tests below);
    // else one is computed.
    std::optional<store::BlobInfo> known;
    if (Result<store::PatchRecord> rec = db_->FindPatch(p.digest, digest);
        rec.ok() &&
        double(rec->patch_size) < options_.chain_max_fraction * double(full_patch_size) &&
        double(rebuild + rec->patch_size) <= options_.chain_rebuild_factor * double(archive_size)) {
      if (Result<store::BlobInfo> b = blobs_->LocalFile(rec->patch_digest); b.ok()) known = *b;
    }
    const std::string temp = blobs_->NewTempPath("chain");
    Status s = known.has_value()
                   ? Status::Ok()
                   : functions_.diff(*parent, archive_path, digest, temp, &stop_);
    const std::string patch_path = known.has_value() ? known->path : temp;
    Result<uint64_t> size = s.ok() ? FileSizeOf(patch_path) : Result<uint64_t>(s);
    const std::string why_not = [&]() -> std::string {
      if (!size.ok()) return "the patch failed: " + size.status().ToString();
      if (double(*size) >= options_.chain_max_fraction * double(full_patch_size)) {
        return "the patch (" + Mb(*size) + ") is not smaller than " +
               std::to_string(options_.chain_max_fraction) + " of the full patch (" +
               Mb(full_patch_size) + ")";
      }
      if (double(rebuild + *size) > options_.chain_rebuild_factor * double(archive_size)) {
        return "rebuilding it would read " + Mb(rebuild + *size) + ", over " +
               std::to_string(options_.chain_rebuild_factor) + " x the archive";
      }
      return "";
    }();
    if (!why_not.empty()) {
      RemoveAll(temp);
      Log("storage: " + digest + ": not chained on " + p.digest + ": " + why_not);
      continue;
    }
    // Hash, verify (decode against the parent, every check of ApplyPatch, the result compared
    // with the stored archive), then publish what was hashed and verified: this job's own
    // temporary file, not written since (as GetFullPatch). A reused patch is a stored blob
    // already: verified against the parent, not published again.
    Result<std::string> hex = known.has_value() ? Result<std::string>(std::string())
                                                : Sha256FileHex(temp);
    s = hex.ok() ? functions_.verify_patch(*parent, patch_path, digest, archive_path)
                 : hex.status();
    Result<store::BlobInfo> blob =
        !s.ok()             ? Result<store::BlobInfo>(s)
        : known.has_value() ? Result<store::BlobInfo>(*known)
                            : blobs_->PublishHashed(temp, MakeDigest(*hex), MakeDigest(*hex),
                                                    *size);
    RemoveAll(temp);
    if (!blob.ok()) {
      Log("storage: " + digest + ": the patch from " + p.digest + " failed verification: " +
          blob.status().ToString());
      continue;
    }
    BLZ_RETURN_IF_ERROR(db_->RecordBlob(blob->digest, blob->size));
    store::ChainLink link{digest, p.digest, blob->digest, blob->size, depth + 1,
                          rebuild + blob->size};
    Status recorded = db_->RecordChainLink(link, replacing);
    if (!recorded.ok()) {
      if (recorded.code() != Code::kNotFound && recorded.code() != Code::kAlreadyExists) {
        return recorded;
      }
      Log("storage: " + digest + ": not chained on " + p.digest + ": " + recorded.message());
      continue;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      ++chained_;
      if (known.has_value()) ++chain_patches_reused_;
    }
    const int percent =
        full_patch_size == 0 ? 0 : int(100.0 * double(blob->size) / double(full_patch_size) + 0.5);
    Log("storage: " + digest + ": stored as a chain link from " + p.digest +
        (known.has_value() ? " (its recorded patch, " : " (") +
        Mb(blob->size) + ", " + std::to_string(percent) + "% of its full patch, depth " +
        std::to_string(link.depth) + ")");
    *stored = true;
    return Status::Ok();
  }
  return Status::Ok();
}

void ArchiveStorage::ChainSharersOnto(const std::string& parent) {
  Result<std::vector<store::SharedTensors>> sharing =
      db_->ListArchivesSharingTensors(parent, kMaxSharingCandidates);
  if (!sharing.ok()) {
    Log("storage: " + parent + ": archives sharing its tensors not listed: " +
        sharing.status().ToString());
    return;
  }
  for (const store::SharedTensors& st : *sharing) {
    if (stop_) return;
    const std::string& d = st.archive_digest;
    Status s = [&]() -> Status {
      // Stored whole: no link, a full patch, nobody stored against it (chaining it would
      // deepen their chains), not raw (then its own compression ranks `parent`, or raw blobs
      // are kept). The metadata DB first: the blob store may be a remote bucket.
      Result<store::ChainLink> link = db_->FindChainLink(d);
      if (link.ok()) return Status::Ok();
      if (link.status().code() != Code::kNotFound) return link.status();
      Result<store::PatchRecord> full = db_->FindPatch("", d);
      if (!full.ok()) return full.status().code() == Code::kNotFound ? Status::Ok() : full.status();
      BLZ_ASSIGN_OR_RETURN(std::vector<store::ChainLink> children, db_->ListChainChildren(d));
      if (!children.empty()) return Status::Ok();
      // Worth a diff only when the link can be under chain_max_fraction of the full patch:
      // the bytes it holds identically in `parent` (references in the link) must make up at
      // least 1 - chain_max_fraction of it (its size as its versions' rows record it).
      BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionRecord> versions,
                           db_->ListVersionsOfArchive(d));
      if (versions.empty()) return Status::Ok();  // listed as sharing: not any more
      if (double(st.bytes) < (1.0 - options_.chain_max_fraction) *
                                 double(versions.front().archive_size)) {
        return Status::Ok();
      }
      if (blobs_->Contains(d)) return Status::Ok();
      auto check = [&]() { return IsChained(d); };
      auto work = [&]() -> Status {
        BLZ_ASSIGN_OR_RETURN(store::BlobInfo file, File(d));
        ChainRequest request;
        request.max_depth = options_.max_chain_depth;
        request.only = parent;
        bool stored = false;
        BLZ_RETURN_IF_ERROR(TryChain(d, file.path, full->patch_size, request, &stored));
        if (stored) ForgetFullPatchOfChained(d);
        return Status::Ok();
      };
      bool ran = false;
      return shared_jobs_->Run("chain:" + d, check, work, &ran);
    }();
    if (!s.ok()) Log("storage: " + d + ": not chained on " + parent + ": " + s.ToString());
  }
}

Result<bool> ArchiveStorage::IsChained(const std::string& digest) {
  Result<store::ChainLink> link = db_->FindChainLink(digest);
  if (link.ok()) return true;
  if (link.status().code() != Code::kNotFound) return link.status();
  return false;
}

Status ArchiveStorage::RecordTensors(const std::string& digest,
                                     const formats::ArchiveHeader& header) {
  std::vector<store::ArchiveTensorRecord> rows;
  const std::vector<formats::ArchiveTensor>& tensors = header.tensors;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].length < kMinSharedTensorBytes) continue;
    rows.push_back(store::ArchiveTensorRecord{i, tensors[i].sha256, tensors[i].length});
  }
  // An archive without large tensors records none and is looked at again next time: cheap.
  return rows.empty() ? Status::Ok() : db_->RecordArchiveTensors(digest, rows);
}

Status ArchiveStorage::RecordStoredTensors(const std::string& digest) {
  BLZ_ASSIGN_OR_RETURN(bool listed, db_->HasArchiveTensors(digest));
  if (listed) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(std::shared_ptr<const patcher::ArchiveReader> reader, OpenReader(digest));
  return RecordTensors(digest, reader->header());
}

void ArchiveStorage::ForgetFullPatchOfChained(const std::string& digest) {
  Result<store::ChainLink> link = db_->FindChainLink(digest);
  if (!link.ok()) return;
  Result<store::PatchRecord> full = db_->FindPatch("", digest);
  if (!full.ok()) return;
  // ForgetDerived keeps it when it is still some link's parent's only form (it is not: the
  // archive has a link), so this drops it; garbage collection removes the blob.
  Status s = db_->ForgetDerived("patches", store::GcRoots::Derived{"", digest, full->patch_digest});
  if (!s.ok()) Log("storage: " + digest + ": cannot forget its full patch: " + s.ToString());
}

Status ArchiveStorage::RebuildFromChain(const std::string& digest, const std::string& out_path) {
  BLZ_ASSIGN_OR_RETURN(std::vector<ReadForm> forms, ReadForms(digest));
  std::vector<std::pair<std::string, std::string>> names;  // server paths -> blob names
  for (const ReadForm& f : forms) names.emplace_back(f.blob.path, FormName(f));
  names.emplace_back(out_path, "cached " + digest);
  Result<std::shared_ptr<const patcher::ArchiveReader>> reader = OpenForms(forms);
  // One pass down the chain per chunk, on every core: no intermediate archive is written.
  Status s = reader.ok() ? patcher::WriteArchive(**reader, out_path) : reader.status();
  if (!s.ok()) {
    // A stored patch damaged on disk fails its checks while decoding: find out, and quarantine
    // it rather than failing the same way on every request.
    Status damaged = QuarantineForms(forms);
    if (!damaged.ok()) {
      return damaged.WithContext("rebuilding archive " + digest + " from its chain");
    }
    return ScrubPaths(s, names).WithContext("rebuilding archive " + digest + " from its chain");
  }
  std::lock_guard<std::mutex> g(mu_);
  ++chain_rebuilds_;
  return Status::Ok();
}

Status ArchiveStorage::QuarantineForms(const std::vector<ReadForm>& forms) {
  for (const ReadForm& f : forms) {
    if (f.kind == ReadForm::Kind::kFile) continue;  // checked on read (CheckStoredBlob)
    if (blobs_->Verify(f.blob.digest).code() == Code::kDigestMismatch) {
      return QuarantineDamaged(f.blob, FormName(f));
    }
  }
  return Status::Ok();
}

Status ArchiveStorage::QuarantineDamagedForms(const std::string& digest) {
  Result<std::vector<ReadForm>> forms = ReadForms(digest);
  if (!forms.ok()) {
    // ReadForms quarantines a damaged blob within the verify-on-read bound itself.
    return forms.status().code() == Code::kCorruption ? forms.status() : Status::Ok();
  }
  return QuarantineForms(*forms);
}

Result<std::shared_ptr<const patcher::ArchiveReader>> ArchiveStorage::OpenReader(
    const std::string& digest) {
  BLZ_ASSIGN_OR_RETURN(std::vector<ReadForm> forms, ReadForms(digest));
  return OpenForms(forms);
}

Status ArchiveStorage::NameForms(const Status& s, const std::string& digest) {
  if (s.ok()) return s;
  Result<std::vector<ReadForm>> forms = ReadForms(digest);
  if (!forms.ok()) return s;
  std::vector<std::pair<std::string, std::string>> names;
  for (const ReadForm& form : *forms) names.push_back({form.blob.path, FormName(form)});
  return ScrubPaths(s, names);
}

Result<std::vector<std::shared_ptr<const patcher::ArchiveReader>>> ArchiveStorage::OpenReaders(
    const std::vector<std::string>& digests) {
  std::vector<std::vector<ReadForm>> chains;
  std::map<std::string, int> uses;  // blob path -> how many chains read it
  for (const std::string& digest : digests) {
    BLZ_ASSIGN_OR_RETURN(std::vector<ReadForm> forms, ReadForms(digest));
    for (const ReadForm& form : forms) ++uses[form.blob.path];
    chains.push_back(std::move(forms));
  }
  std::map<std::string, std::shared_ptr<const patcher::ArchiveReader>> opened;
  std::vector<std::shared_ptr<const patcher::ArchiveReader>> readers;
  for (const std::vector<ReadForm>& forms : chains) {
    BLZ_ASSIGN_OR_RETURN(std::shared_ptr<const patcher::ArchiveReader> reader,
                         OpenForms(forms, &uses, &opened));
    readers.push_back(std::move(reader));
  }
  return readers;
}

Result<std::shared_ptr<const patcher::ArchiveReader>> ArchiveStorage::OpenForms(
    const std::vector<ReadForm>& forms, const std::map<std::string, int>* uses,
    std::map<std::string, std::shared_ptr<const patcher::ArchiveReader>>* opened) {
  // From the chain's root up to the archive, each link over its parent's reader.
  std::shared_ptr<const patcher::ArchiveReader> reader;
  for (auto it = forms.rbegin(); it != forms.rend(); ++it) {
    if (opened != nullptr) {
      // A form another chain of the same OpenReaders has: its parents are shared too (a
      // link's blob names its parent; the chains are opened from their roots).
      auto same = opened->find(it->blob.path);
      if (same != opened->end()) {
        reader = same->second;
        continue;
      }
    }
    const std::vector<std::pair<std::string, std::string>> names = {
        {it->blob.path, FormName(*it)}};
    // (Opened as the concrete readers: Result<> does not convert between pointer types.)
    Status status;
    switch (it->kind) {
      case ReadForm::Kind::kFile: {
        auto f = patcher::ArchiveFileReader::Open(it->blob.path, it->digest);
        status = f.status();
        if (f.ok()) reader = std::move(*f);
        break;
      }
      case ReadForm::Kind::kFullPatch:
      case ReadForm::Kind::kLink: {
        const bool shared =
            uses != nullptr && uses->count(it->blob.path) && uses->at(it->blob.path) > 1;
        auto p = patcher::PatchReader::Open(
            it->blob.path, it->kind == ReadForm::Kind::kLink ? reader : nullptr,
            shared ? kSharedChunks : 0);
        status = p.status();
        if (p.ok()) reader = std::move(*p);
        break;
      }
    }
    if (!status.ok()) return ScrubPaths(status, names);
    if (reader->archive_digest() != it->digest) {
      return Corruption(FormName(*it) + " rebuilds " + reader->archive_digest());
    }
    if (opened != nullptr) (*opened)[it->blob.path] = reader;
  }
  if (reader == nullptr) return Internal("no stored form");
  return reader;
}

std::string ArchiveStorage::FormName(const ReadForm& form) {
  switch (form.kind) {
    case ReadForm::Kind::kFile:
      return "archive file " + form.digest;
    case ReadForm::Kind::kFullPatch:
      return "full patch " + form.blob.digest + " of archive " + form.digest;
    case ReadForm::Kind::kLink:
      return "chain link " + form.blob.digest + " of archive " + form.digest + " (from " +
             form.parent_digest + ")";
  }
  return form.digest;
}

Result<std::vector<ArchiveStorage::ReadForm>> ArchiveStorage::ReadForms(
    const std::string& digest) {
  if (!enabled()) return Unsupported("this server stores no patches");
  std::vector<ReadForm> forms;
  std::string at = digest;
  for (int depth = 0;; ++depth) {
    if (depth >= kMaxRebuildDepth) {
      return Corruption("archive " + digest + ": its chain is longer than " +
                        std::to_string(kMaxRebuildDepth) + " links (a cycle?)");
    }
    ReadForm form;
    form.digest = at;
    BLZ_ASSIGN_OR_RETURN(std::optional<store::BlobInfo> file, FileIfStored(at));
    if (file.has_value()) {
      form.kind = ReadForm::Kind::kFile;
      form.blob = std::move(*file);
      forms.push_back(std::move(form));
      return forms;
    }
    Result<store::BlobInfo> full = FindFullPatch(at);
    Status damaged;  // a full patch found damaged (quarantined): a link may still read it
    if (full.ok()) {
      damaged = CheckStoredBlob(*full);
      if (damaged.ok()) {
        form.kind = ReadForm::Kind::kFullPatch;
        form.blob = std::move(*full);
        forms.push_back(std::move(form));
        return forms;
      }
      if (damaged.code() != Code::kCorruption) return damaged;
    } else if (full.status().code() != Code::kNotFound) {
      return full.status();
    }
    Result<store::ChainLink> link = db_->FindChainLink(at);
    if (!link.ok()) {
      if (link.status().code() != Code::kNotFound) return link.status();
      if (!damaged.ok()) return damaged;
      return NotFound("archive " + at + " is not stored (neither as a file, a full patch " +
                      "nor a chain link)" +
                      (at == digest ? "" : " (in the chain of archive " + digest + ")"));
    }
    BLZ_ASSIGN_OR_RETURN(store::BlobInfo patch, blobs_->LocalFile(link->patch_digest));
    BLZ_RETURN_IF_ERROR(CheckStoredBlob(patch));
    form.kind = ReadForm::Kind::kLink;
    form.blob = std::move(patch);
    form.parent_digest = link->parent_digest;
    forms.push_back(std::move(form));
    at = link->parent_digest;
  }
}

Status ArchiveStorage::Rebase(const store::ChainLink& link) {
  const std::string& d = link.archive_digest;
  auto check = [&]() -> Result<bool> {
    Result<store::ChainLink> now = db_->FindChainLink(d);
    if (!now.ok()) {
      if (now.status().code() != Code::kNotFound) return now.status();
      return true;  // re-based onto its full patch already
    }
    return now->parent_digest != link.parent_digest;
  };
  auto work = [&]() -> Status {
    // The archive as it is now (rebuilt through the old chain and verified), its full patch
    // (computed from that when missing), then a new parent if one qualifies.
    BLZ_ASSIGN_OR_RETURN(store::BlobInfo file, File(d));
    BLZ_ASSIGN_OR_RETURN(FullPatch full, GetFullPatch(d));
    FailPoint("rebase-after-full-patch");
    bool stored = false;
    if (chains_enabled()) {
      ChainRequest request;
      request.max_depth = link.depth;
      request.exclude = link.parent_digest;
      request.replacing = link.parent_digest;
      BLZ_RETURN_IF_ERROR(TryChain(d, file.path, full.blob.size, request, &stored));
    }
    if (stored) {
      ForgetFullPatchOfChained(d);
    } else {
      BLZ_RETURN_IF_ERROR(db_->DropChainLink(d, link.parent_digest));
      Log("storage: " + d + ": re-based from " + link.parent_digest + " onto its full patch " +
          full.blob.digest);
    }
    std::lock_guard<std::mutex> g(mu_);
    ++rebased_;
    return Status::Ok();
  };
  bool ran = false;
  return shared_jobs_->Run("rebase:" + d + ">" + link.parent_digest, check, work, &ran);
}

Status ArchiveStorage::RebaseOrphans(uint64_t* rebased, uint64_t* failed) {
  if (rebased != nullptr) *rebased = 0;
  if (failed != nullptr) *failed = 0;
  if (!functions_.chains()) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(std::vector<store::ChainLink> links, db_->ListChainLinks());
  if (links.empty()) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(store::GcRoots roots, db_->ReadGcRoots(int64_t(std::time(nullptr))));
  const std::unordered_set<std::string> referenced(roots.referenced.begin(),
                                                   roots.referenced.end());
  std::vector<const store::ChainLink*> orphans;
  for (const store::ChainLink& link : links) {
    if (referenced.count(link.archive_digest) == 0) continue;  // goes with its parent
    if (referenced.count(link.parent_digest) > 0) continue;    // the parent stays
    orphans.push_back(&link);
  }
  if (orphans.empty()) return Status::Ok();
  Log("storage: re-basing " + std::to_string(orphans.size()) +
      " chain links whose parent is no longer referenced");
  for (const store::ChainLink* orphan : orphans) {
    if (stop_) break;
    const store::ChainLink& link = *orphan;
    Status s = Rebase(link);
    if (s.ok()) {
      if (rebased != nullptr) ++*rebased;
      continue;
    }
    if (failed != nullptr) ++*failed;
    Log("storage: " + link.archive_digest + ": re-base from " + link.parent_digest +
        " failed (the link stays, and so does its parent): " + s.ToString());
  }
  return Status::Ok();
}

Result<ChainScrubReport> ArchiveStorage::VerifyChains(
    const std::function<void(const std::string&)>& log) {
  ChainScrubReport report;
  BLZ_ASSIGN_OR_RETURN(std::vector<store::ChainLink> links, db_->ListChainLinks());
  for (const store::ChainLink& link : links) {
    ++report.links;
    Status s = [&]() -> Status {
      if (!functions_.chains()) return Unsupported("this server cannot apply patches");
      BLZ_ASSIGN_OR_RETURN(std::shared_ptr<const patcher::ArchiveReader> parent,
                           OpenReader(link.parent_digest));
      BLZ_ASSIGN_OR_RETURN(store::BlobInfo patch, blobs_->LocalFile(link.patch_digest));
      Status v = functions_.verify_patch(parent, patch.path, link.archive_digest,
                                         /*target_path=*/"");
      if (!v.ok() && blobs_->Verify(patch.digest).code() == Code::kDigestMismatch) {
        return QuarantineDamaged(patch, "chain link " + patch.digest + " of archive " +
                                            link.archive_digest);
      }
      return v;
    }();
    if (s.ok()) {
      ++report.verified;
      continue;
    }
    std::string line = link.archive_digest + " (chain link " + link.patch_digest + " from " +
                       link.parent_digest + "): " + s.ToString();
    if (log) log("verify-storage: broken chain: " + line);
    report.broken.push_back(std::move(line));
  }
  return report;
}

}  // namespace blz::registry
