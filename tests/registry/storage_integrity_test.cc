// Integrity of what the registry stores and accepts (docs/registry-api.md, "Storage integrity"
// and PUT manifest): an archive whose data fail `blz verify` is refused at manifest PUT and
// stores no version; stored bytes damaged on disk are detected on read (or by the
// --verify-storage scrub), quarantined, and answered with an error instead of wrong bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "store/fs/fs_blob_store.h"
#include "registry/archive_storage.h"
#include "registry/registry.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::TinyArchive;
namespace fs = std::filesystem;

RegistryOptions StorageOptions() {
  RegistryOptions o;
  o.create_patch = PatcherPatchFunction();
  o.full_patch = PatcherFullPatchFunctions();
  o.storage.background = false;
  o.storage.grace = std::chrono::milliseconds(0);
  return o;
}

struct Damaged {
  std::string bytes;   // the archive with one tensor byte flipped
  std::string tensor;  // the damaged tensor's name
  uint64_t offset = 0; // its absolute byte offset in the archive
};

// `archive` with the first byte of its last tensor flipped: the archive is well-formed (its
// header parses, its SHA-256 names it) but its data fail `blz verify`.
Damaged DamageTensor(const std::string& archive) {
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "a.blz", archive);
  auto opened = formats::BlzArchive::Open(tmp / "a.blz");
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  const auto& h = opened->header();
  const formats::ArchiveTensor& t = h.tensors.back();
  Damaged d;
  d.tensor = t.name;
  d.offset = h.data_start + t.offset;
  d.bytes = archive;
  d.bytes[size_t(d.offset)] ^= 0x01;
  return d;
}

void FlipByte(const std::string& path, size_t from_end) {
  std::string bytes = blz::testing::ReadFileBytes(path);
  ASSERT_GT(bytes.size(), from_end);
  bytes[bytes.size() - 1 - from_end] ^= 0x01;
  blz::testing::WriteFileBytes(path, bytes);
}

size_t FileCount(const std::string& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

std::string ErrorMessageOf(const Response& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("errors")) return "";
  return j["errors"][0].value("message", "");
}

// ---- defect 4: archives whose data fail verification are refused at manifest PUT ----

TEST(ManifestVerificationTest, CorruptArchiveIsRefusedAndNoVersionIsStored) {
  Harness h(StorageOptions());
  const Damaged bad = DamageTensor(TinyArchive(1));
  const std::string digest = MakeDigest(Sha256Hex(bad.bytes));
  Response r = h.PutManifest("org/m", "v1", h.ManifestFor("org/m", bad.bytes));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_INVALID") << r.body;
  const std::string message = ErrorMessageOf(r);
  EXPECT_NE(message.find(bad.tensor), std::string::npos) << message;
  EXPECT_NE(message.find("byte offset " + std::to_string(bad.offset)), std::string::npos)
      << message;
  EXPECT_NE(message.find(digest), std::string::npos) << message;
  EXPECT_EQ(r.body.find(h.data()), std::string::npos) << "leaks the data directory: " << r.body;
  // Nothing visible: no tag, no manifest, no version; so nothing to compress or patch.
  EXPECT_EQ(h.Call("GET", "/v2/org/m/manifests/v1").status, 404);
  Response tags = h.Call("GET", "/v2/org/m/tags/list");
  EXPECT_EQ(tags.body.find("v1"), std::string::npos) << tags.body;
  EXPECT_EQ(h.registry().db().FindVersion("org/m", digest).status().code(), Code::kNotFound);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blz/patch?to=" + digest).status, 404);

  // The same archive already stored (another repository's push of the blob): still refused.
  r = h.PutManifest("org/other", "v1", h.ManifestFor("org/other", bad.bytes));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_INVALID");

  // A sound archive is accepted (and verified once: a second tag does not fail).
  const std::string good = TinyArchive(2);
  EXPECT_EQ(h.PutManifest("org/m", "v2", h.ManifestFor("org/m", good)).status, 201);
  EXPECT_EQ(h.PutManifest("org/m", "v3", h.ManifestFor("org/m", good, false)).status, 201);
}

TEST(ManifestVerificationTest, VerifyArchiveNamesTheTensorAndRemembersSuccess) {
  Harness h(StorageOptions());
  const Damaged bad = DamageTensor(TinyArchive(3));
  const std::string bad_digest = h.PushBlob("org/m", bad.bytes);
  Status s = h.registry().storage().VerifyArchive(bad_digest);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("archive " + bad_digest), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(h.data()), std::string::npos) << s.message();
  EXPECT_EQ(h.registry().storage().VerifyArchive(bad_digest).code(), Code::kCorruption);

  const std::string good = h.PushBlob("org/m", TinyArchive(4));
  ASSERT_TRUE(h.registry().storage().VerifyArchive(good).ok());
  // Remembered: damaging the stored copy afterwards is not re-checked by this call (the
  // verify-on-read and the scrub are for that).
  EXPECT_TRUE(h.registry().storage().VerifyArchive(good).ok());
  EXPECT_EQ(h.registry().storage().VerifyArchive(MakeDigest(std::string(64, 'a'))).code(),
            Code::kNotFound);
}

// ---- defect 6: stored bytes damaged on disk ----

TEST(StorageIntegrityTest, DamagedBlobIsQuarantinedInsteadOfServed) {
  Harness h(StorageOptions());
  const std::string bytes = "{\"a config\":1}";
  const std::string digest = h.PushBlob("org/m", bytes);
  const std::string path = *dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped()).PathFor(digest);
  FlipByte(path, 3);

  Response r = h.Call("GET", "/v2/org/m/blobs/" + digest);
  EXPECT_NE(r.status, 200);
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(ErrorCodeOf(r), "UNKNOWN") << r.body;
  EXPECT_NE(ErrorMessageOf(r).find("damaged"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(h.data()), std::string::npos) << "leaks the data directory: " << r.body;
  EXPECT_TRUE(r.file_path.empty());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(FileCount(h.data() + "/quarantine"), 1u);
  EXPECT_EQ(h.registry().storage().status().quarantined, 1u);
  // Later: simply unknown, and the client may push it again.
  r = h.Call("GET", "/v2/org/m/blobs/" + digest);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorCodeOf(r), "BLOB_UNKNOWN");
  h.PushBlob("org/m", bytes);
  r = h.Call("GET", "/v2/org/m/blobs/" + digest);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(BodyOf(r), bytes);
}

TEST(StorageIntegrityTest, IntactBlobIsHashedOncePerFileVersion) {
  RegistryOptions o = StorageOptions();
  Harness h(o);
  const std::string digest = h.PushBlob("org/m", "twice served");
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blobs/" + digest).status, 200);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blobs/" + digest).status, 200);
  // Over the bound, blobs are not hashed on read (the scrub covers them).
  o.storage.verify_on_read_bytes = 4;
  h.Reopen(o);
  FlipByte(*dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped()).PathFor(digest), 0);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blobs/" + digest).status, 200);
}

TEST(StorageIntegrityTest, DamagedFullPatchIsNotServed) {
  Harness h(StorageOptions());
  const std::string archive = TinyArchive(5);
  ASSERT_EQ(h.PutManifest("org/m", "v1", h.ManifestFor("org/m", archive)).status, 201);
  const std::string d = MakeDigest(Sha256Hex(archive));
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());  // the raw archive is dropped
  auto rec = h.registry().db().FindPatch("", d);
  ASSERT_TRUE(rec.ok());
  const std::string patch_path = *dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped()).PathFor(rec->patch_digest);
  FlipByte(patch_path, 10);

  Response r = h.Call("GET", "/v2/org/m/blz/patch?to=" + d);
  EXPECT_NE(r.status, 200) << "served a full patch that does not match its digest";
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(ErrorMessageOf(r).find("damaged"), std::string::npos) << r.body;
  EXPECT_FALSE(fs::exists(patch_path));
  EXPECT_EQ(FileCount(h.data() + "/quarantine"), 1u);
  // The archive is gone with it (its raw blob was dropped): unknown, never wrong bytes.
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blz/patch?to=" + d).status, 404);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blobs/" + d).status, 404);
}

TEST(StorageIntegrityTest, DamagedFullPatchIsRecomputedWhileTheRawArchiveIsKept) {
  RegistryOptions o = StorageOptions();
  o.storage.drop_raw_archives = false;
  Harness h(o);
  const std::string archive = TinyArchive(6);
  ASSERT_EQ(h.PutManifest("org/m", "v1", h.ManifestFor("org/m", archive)).status, 201);
  const std::string d = MakeDigest(Sha256Hex(archive));
  auto full = h.registry().storage().GetFullPatch(d);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const std::string good = blz::testing::ReadFileBytes(full->blob.path);
  FlipByte(full->blob.path, 10);

  Response r = h.Call("GET", "/v2/org/m/blz/patch?to=" + d);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Get("Blz-Patch-Cache").value_or(""), "miss");
  EXPECT_EQ(BodyOf(r), good);  // computed again (deterministic), and verified
  EXPECT_EQ(FileCount(h.data() + "/quarantine"), 1u);
}

TEST(StorageIntegrityTest, RebuildFromADamagedFullPatchQuarantinesIt) {
  // Full patches over the verify-on-read bound are not hashed before they are used; the
  // rebuild's own checks find the damage, and the full patch is quarantined.
  RegistryOptions o = StorageOptions();
  o.storage.verify_on_read_bytes = 0;
  Harness h(o);
  const std::string archive = TinyArchive(7);
  ASSERT_EQ(h.PutManifest("org/m", "v1", h.ManifestFor("org/m", archive)).status, 201);
  const std::string d = MakeDigest(Sha256Hex(archive));
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  auto rec = h.registry().db().FindPatch("", d);
  ASSERT_TRUE(rec.ok());
  const std::string patch_path = *dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped()).PathFor(rec->patch_digest);
  FlipByte(patch_path, 10);

  // The GET streams the archive from its full patch: the damaged chunk ends the response
  // early (its status was sent already), and the full patch is quarantined then.
  Response r = h.Call("GET", "/v2/org/m/blobs/" + d);
  if (r.producer != nullptr) {
    EXPECT_EQ(r.status, 200);
    const std::string body = BodyOf(r);
    EXPECT_NE(body.find("<producer error: "), std::string::npos) << "not cut short";
    EXPECT_NE(body.find("damaged"), std::string::npos) << body.substr(body.rfind('<'));
    EXPECT_EQ(body.find(h.data()), std::string::npos) << "leaks the data directory";
  } else {  // the damage was found before the first byte
    EXPECT_EQ(r.status, 500) << r.body;
    EXPECT_NE(ErrorMessageOf(r).find("damaged"), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find(h.data()), std::string::npos) << "leaks the data directory: " << r.body;
  }
  EXPECT_FALSE(fs::exists(patch_path));
  EXPECT_EQ(FileCount(h.data() + "/quarantine"), 1u);
  EXPECT_EQ(h.Call("GET", "/v2/org/m/blobs/" + d).status, 404);
}

// A patch computed from two archives read as they are stored (create_patch_from_readers, what
// `blz serve` does): a damaged chunk of the target's full patch fails the request with a
// message that names the stored blob, not a server path; the full patch is quarantined and
// no patch is recorded.
TEST(StorageIntegrityTest, APatchReadFromADamagedFullPatchQuarantinesIt) {
  RegistryOptions o = StorageOptions();
  o.storage.verify_on_read_bytes = 0;
  o.create_patch_from_readers = PatcherPatchFromReadersFunction();
  Harness h(o);
  const std::string a = TinyArchive(7), b = TinyArchive(8);
  ASSERT_EQ(h.PutManifest("org/m", "v1", h.ManifestFor("org/m", a)).status, 201);
  ASSERT_EQ(h.PutManifest("org/m", "v2", h.ManifestFor("org/m", b)).status, 201);
  const std::string da = MakeDigest(Sha256Hex(a)), db = MakeDigest(Sha256Hex(b));
  ASSERT_TRUE(h.registry().storage().Compress(da).ok());
  ASSERT_TRUE(h.registry().storage().Compress(db).ok());
  auto rec = h.registry().db().FindPatch("", db);
  ASSERT_TRUE(rec.ok());
  ASSERT_FALSE(h.registry().blobs().Contains(db)) << "the raw archive was kept";
  const std::string patch_path =
      *dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped())
           .PathFor(rec->patch_digest);
  FlipByte(patch_path, 10);
  const uint64_t cached = h.registry().storage().status().cache_entries;

  Response r = h.Call("GET", "/v2/org/m/blz/patch?from=" + da + "&to=" + db);
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(ErrorMessageOf(r).find(rec->patch_digest), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(h.data()), std::string::npos) << "leaks the data directory: " << r.body;
  EXPECT_FALSE(fs::exists(patch_path));
  EXPECT_EQ(FileCount(h.data() + "/quarantine"), 1u);
  EXPECT_FALSE(h.registry().db().FindPatch(da, db).ok());
  EXPECT_EQ(h.registry().storage().status().cache_entries, cached) << "an archive was rebuilt";
}

TEST(StorageIntegrityTest, DamagedCachedArchiveIsRebuilt) {
  Harness h(StorageOptions());
  const std::string archive = TinyArchive(8);
  ASSERT_EQ(h.PutManifest("org/m", "v1", h.ManifestFor("org/m", archive)).status, 201);
  const std::string d = MakeDigest(Sha256Hex(archive));
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  ASSERT_TRUE(BodyOf(h.Call("GET", "/v2/org/m/blobs/" + d)) == archive);  // copied to the cache
  const std::string cached = h.data() + "/cache/sha256/" + d.substr(7);
  ASSERT_TRUE(fs::exists(cached));
  FlipByte(cached, 100);
  Response r = h.Call("GET", "/v2/org/m/blobs/" + d);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(BodyOf(r) == archive);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 2u);
}

TEST(StorageIntegrityTest, DamagedCachedPatchIsRecomputed) {
  Harness h(StorageOptions());
  const std::string a = TinyArchive(9), b = TinyArchive(9, 1, 0.01);
  ASSERT_EQ(h.PutManifest("org/m", "v1", h.ManifestFor("org/m", a)).status, 201);
  ASSERT_EQ(h.PutManifest("org/m", "v2", h.ManifestFor("org/m", b)).status, 201);
  const std::string da = MakeDigest(Sha256Hex(a)), db = MakeDigest(Sha256Hex(b));
  const std::string target = "/v2/org/m/blz/patch?from=" + da + "&to=" + db;
  Response first = h.Call("GET", target);
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string good = BodyOf(first);
  const std::string patch_digest = first.Get("Docker-Content-Digest").value_or("");
  FlipByte(*dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped()).PathFor(patch_digest), 5);
  Response again = h.Call("GET", target);
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.Get("Blz-Patch-Cache").value_or(""), "miss");
  EXPECT_EQ(BodyOf(again), good);
  EXPECT_EQ(FileCount(h.data() + "/quarantine"), 1u);
}

TEST(StorageIntegrityTest, ScrubStorageQuarantinesDamagedBlobsAndCachedCopies) {
  blz::testing::TempDir tmp;
  const std::string data = tmp / "data";
  RegistryOptions o = StorageOptions();
  auto reg = Registry::Open(data, o);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  auto put = [&](const std::string& bytes) {
    auto info = (*reg)->blobs().PutBytes(bytes);
    EXPECT_TRUE(info.ok());
    return info.ok() ? info->digest : "";
  };
  const std::string good = put("an intact blob");
  const std::string bad = put("a blob the disk will damage");
  reg->reset();
  FlipByte(data + "/blobs/sha256/" + bad.substr(7, 2) + "/" + bad.substr(7), 2);
  const std::string cached_hex(64, 'c');
  blz::testing::WriteFileBytes(data + "/cache/sha256/" + cached_hex, "not what its name says");

  std::vector<std::string> lines;
  auto report = ScrubStorage(data, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blobs.blobs, 2u);
  EXPECT_EQ(report->blobs.quarantined, std::vector<std::string>{bad});
  EXPECT_EQ(report->cache_checked, 1u);
  EXPECT_EQ(report->cache_removed, std::vector<std::string>{MakeDigest(cached_hex)});
  EXPECT_EQ(lines.size(), 2u);
  EXPECT_TRUE(fs::exists(data + "/quarantine/" + bad.substr(7)));
  EXPECT_FALSE(fs::exists(data + "/cache/sha256/" + cached_hex));

  reg = Registry::Open(data, o);
  ASSERT_TRUE(reg.ok());
  EXPECT_TRUE((*reg)->blobs().Contains(good));
  EXPECT_FALSE((*reg)->blobs().Contains(bad));
}

}  // namespace
}  // namespace blz::registry
