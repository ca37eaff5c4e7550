// Archives stored as verified full patches (registry/archive_storage.h) and the full-patch
// endpoint (GET /v2/<name>/blz/patch?to= without from), with the real patcher: computed once
// and cached, raw blobs dropped only after verification and rebuilt on demand (GET, HEAD,
// Range, patch computation), crash leftovers cleaned at restart, the cache bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "patcher/patch.h"
#include "store/fs/fs_blob_store.h"
#include "registry/archive_storage.h"
#include "registry/registry.h"
#include "store/timed_blob_store.h"
#include "tests/formats/test_models.h"
#include "tests/registry/handler_harness.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::ErrorCodeOf;
using testing::Harness;
using testing::PushVersion;
namespace fs = std::filesystem;

// The real patcher; compression only when asked (unless `background`); no grace period, so
// tests need not wait.
RegistryOptions StorageOptions(bool background = false) {
  RegistryOptions o;
  o.create_patch = PatcherPatchFunction();
  o.full_patch = PatcherFullPatchFunctions();
  o.storage.background = background;
  o.storage.grace = std::chrono::milliseconds(0);
  // Versions stored whole: these tests count rebuilds and cache files of full patches (chains,
  // which rebuild parents to try them: archive_chains_test.cc).
  o.storage.max_chain_depth = 0;
  return o;
}

// A packed synthetic model large enough for its planes to compress (F32/BF16/F16 in [-0.5,
// 0.5)): about 140 KB. `perturb` > 0 makes a fine-tune of seed's model.
std::string ModelArchive(uint64_t seed, double perturb = 0) {
  return blz::testing::PackedTestModel(seed, perturb);
}

bool RawStored(Harness& h, const std::string& digest) {
  return h.registry().blobs().Contains(digest);
}

uint64_t TreeBytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

size_t FileCount(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

std::string FullPatchTarget(const std::string& repo, const std::string& digest) {
  return "/v2/" + repo + "/blz/patch?to=" + digest;
}

TEST(FullPatchEndpointTest, ComputedOnceVerifiedAndCached) {
  Harness h(StorageOptions());
  const std::string archive = ModelArchive(1);
  const std::string d = PushVersion(&h, "org/m", "v1", archive);

  Response miss = h.Call("GET", FullPatchTarget("org/m", d), "", {}, /*auth=*/false);
  ASSERT_EQ(miss.status, 200) << miss.body;
  EXPECT_EQ(miss.Get("Blz-Patch-Cache"), "miss");
  EXPECT_EQ(miss.Get("Content-Type"), kBlzPatchMediaType);
  const std::string patch = BodyOf(miss);
  EXPECT_EQ(miss.Get("Docker-Content-Digest"), MakeDigest(Sha256Hex(patch)));
  EXPECT_LT(patch.size(), archive.size());

  Response hit = h.Call("GET", FullPatchTarget("org/m", d), "", {}, false);
  ASSERT_EQ(hit.status, 200) << hit.body;
  EXPECT_EQ(hit.Get("Blz-Patch-Cache"), "hit");
  EXPECT_EQ(hit.Get("Docker-Content-Digest"), miss.Get("Docker-Content-Digest"));
  Response head = h.Call("HEAD", FullPatchTarget("org/m", d), "", {}, false);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.BodySize(), patch.size());
  EXPECT_EQ(h.registry().storage().status().full_patches_computed, 1u);
  // Recorded as the patch from no base; the raw archive is kept (not compressed yet).
  auto record = h.registry().db().FindPatch("", d);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->patch_digest, miss.Get("Docker-Content-Digest"));
  EXPECT_TRUE(RawStored(h, d));

  // The client's side: it rebuilds exactly the archive.
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "p.blzpatch", patch);
  auto info = patcher::ReadPatchInfo(tmp / "p.blzpatch");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->full);
  EXPECT_EQ(info->target_digest, d);
  patcher::ApplyStats st;
  Status s = patcher::ApplyFullPatch(tmp / "p.blzpatch", tmp / "out.blz", &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(blz::testing::ReadFileBytes(tmp / "out.blz") == archive);
  EXPECT_EQ(h.UploadsCount(), 0u);
}

TEST(FullPatchEndpointTest, Errors) {
  Harness h(StorageOptions());
  const std::string d = PushVersion(&h, "org/m", "v1", ModelArchive(1));
  const std::string other = MakeDigest(std::string(64, 'a'));
  Response r = h.Call("GET", FullPatchTarget("org/m", other));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorCodeOf(r), "MANIFEST_UNKNOWN");
  r = h.Call("GET", FullPatchTarget("org/other", d));
  EXPECT_EQ(r.status, 404);
  r = h.Call("GET", "/v2/org/m/blz/patch?to=sha256:xyz");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID");
  r = h.Call("GET", "/v2/org/m/blz/patch");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCodeOf(r), "DIGEST_INVALID");
  EXPECT_EQ(h.registry().storage().status().full_patches_computed, 0u);

  // A server without the patcher: 405, and archives stay raw.
  Harness plain;
  const std::string d2 = PushVersion(&plain, "org/m", "v1", testing::TinyArchive(1));
  r = plain.Call("GET", FullPatchTarget("org/m", d2));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(ErrorCodeOf(r), "UNSUPPORTED");
  EXPECT_FALSE(plain.registry().storage().enabled());
  EXPECT_EQ(plain.registry().storage().Compress(d2).code(), Code::kUnsupported);
  EXPECT_TRUE(RawStored(plain, d2));
}

TEST(ArchiveStorageTest, CompressedArchiveIsServedRebuiltWithHeadAndRange) {
  Harness h(StorageOptions());
  const std::string archive = ModelArchive(3);
  const std::string d = PushVersion(&h, "org/m", "v1", archive);
  const uint64_t before = TreeBytes(h.data() + "/blobs");

  Status s = h.registry().storage().Compress(d);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(RawStored(h, d));
  EXPECT_EQ(h.registry().storage().status().compressed, 1u);
  // Storage shrank: the archive is held as its (smaller) full patch only.
  EXPECT_LT(TreeBytes(h.data() + "/blobs"), before);

  // HEAD answers from the full patch's header: no rebuild.
  Response head = h.Call("HEAD", "/v2/org/m/blobs/" + d, "", {}, false);
  EXPECT_EQ(head.status, 200) << head.body;
  EXPECT_EQ(head.BodySize(), archive.size());
  EXPECT_EQ(head.Get("Docker-Content-Digest"), d);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);

  // The first GET streams it from the full patch, leaving a verified copy in the cache; the
  // next one is served from that file.
  Response get = h.Call("GET", "/v2/org/m/blobs/" + d, "", {}, false);
  ASSERT_EQ(get.status, 200) << get.body;
  EXPECT_NE(get.producer, nullptr);
  EXPECT_TRUE(BodyOf(get) == archive);
  Response again = h.Call("GET", "/v2/org/m/blobs/" + d, "", {}, false);
  EXPECT_EQ(again.file_path.rfind(h.data() + "/cache/", 0), 0u) << again.file_path;
  EXPECT_TRUE(BodyOf(again) == archive);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 1u);
  EXPECT_EQ(h.registry().storage().status().cache_entries, 1u);
  EXPECT_EQ(h.registry().storage().status().cache_bytes, archive.size());

  // Ranges on the rebuilt blob.
  Response part = h.Call("GET", "/v2/org/m/blobs/" + d, "", {{"Range", "bytes=100-1099"}}, false);
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(part.Get("Content-Range"), "bytes 100-1099/" + std::to_string(archive.size()));
  EXPECT_TRUE(BodyOf(part) == archive.substr(100, 1000));
  Response tail = h.Call("GET", "/v2/org/m/blobs/" + d, "", {{"Range", "bytes=-10"}}, false);
  EXPECT_EQ(tail.status, 206);
  EXPECT_TRUE(BodyOf(tail) == archive.substr(archive.size() - 10));
  Response bad = h.Call("GET", "/v2/org/m/blobs/" + d, "",
                        {{"Range", "bytes=" + std::to_string(archive.size()) + "-"}}, false);
  EXPECT_EQ(bad.status, 416);
  EXPECT_EQ(bad.Get("Content-Range"), "bytes */" + std::to_string(archive.size()));

  // Compressing again is a no-op; the full patch endpoint serves the stored one.
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  Response full = h.Call("GET", FullPatchTarget("org/m", d), "", {}, false);
  EXPECT_EQ(full.status, 200);
  EXPECT_EQ(full.Get("Blz-Patch-Cache"), "hit");
  EXPECT_EQ(h.registry().storage().status().full_patches_computed, 1u);
}

TEST(ArchiveStorageTest, PatchesBetweenCompressedVersionsAndRepushes) {
  Harness h(StorageOptions(/*background=*/true));
  const std::string a = ModelArchive(5), b = ModelArchive(5, 0.01);
  const std::string da = PushVersion(&h, "org/m", "v1", a);
  const std::string db = PushVersion(&h, "org/m", "v2", b);
  h.registry().storage().WaitIdle();
  EXPECT_FALSE(RawStored(h, da));
  EXPECT_FALSE(RawStored(h, db));
  EXPECT_EQ(h.registry().storage().status().compressed, 2u);
  EXPECT_EQ(h.registry().storage().status().failed, 0u);

  // A patch between two compressed versions: both are rebuilt to compute it.
  Response r = h.Call("GET", "/v2/org/m/blz/patch?from=" + da + "&to=" + db, "", {}, false);
  ASSERT_EQ(r.status, 200) << r.body;
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "a.blz", a);
  blz::testing::WriteFileBytes(tmp / "p", BodyOf(r));
  Status s = patcher::ApplyPatch(tmp / "a.blz", tmp / "p", tmp / "b.blz", nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(blz::testing::ReadFileBytes(tmp / "b.blz") == b);

  // The same archive pushed to another repository without uploading it again (the client
  // mounts what the registry holds, as blz push does): the manifest is accepted and it becomes
  // a version there too.
  EXPECT_EQ(h.Call("HEAD", "/v2/org/copy/blobs/" + da, "", {}, false).status, 404);
  Response mount = h.Call("POST", "/v2/org/copy/blobs/uploads/?mount=" + da + "&from=org/m");
  ASSERT_EQ(mount.status, 201) << mount.body;
  Response head = h.Call("HEAD", "/v2/org/copy/blobs/" + da, "", {}, false);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.BodySize(), a.size());
  const std::string config = "{\"archive_size\":" + std::to_string(a.size()) + "}";
  h.PushBlob("org/copy", config);
  Response put =
      h.PutManifest("org/copy", "v1", h.ManifestFor("org/copy", a, /*push_blobs=*/false));
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_TRUE(h.registry().db().FindVersion("org/copy", da).ok());
  h.registry().storage().WaitIdle();
  EXPECT_FALSE(RawStored(h, da));
  auto st = h.registry().storage().status();
  EXPECT_EQ(st.failed, 0u);
  EXPECT_EQ(st.pending, 0u);
}

TEST(ArchiveStorageTest, VerificationFailureKeepsTheRawArchive) {
  RegistryOptions o = StorageOptions();
  o.full_patch.verify = [](const std::string&, const std::string&, const std::string&) {
    return Corruption("stand-in: the full patch does not rebuild the archive");
  };
  Harness h(o);
  const std::string archive = ModelArchive(7);
  const std::string d = PushVersion(&h, "org/m", "v1", archive);
  const size_t blobs = h.BlobCount();
  Status s = h.registry().storage().Compress(d);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("failed verification"), std::string::npos) << s.message();
  EXPECT_TRUE(RawStored(h, d));
  EXPECT_EQ(h.BlobCount(), blobs);  // nothing published
  EXPECT_EQ(h.registry().db().FindPatch("", d).status().code(), Code::kNotFound);
  EXPECT_EQ(h.UploadsCount(), 0u);
  // The raw archive is still served; the full patch endpoint reports the failure.
  Response get = h.Call("GET", "/v2/org/m/blobs/" + d, "", {}, false);
  EXPECT_EQ(get.status, 200);
  EXPECT_TRUE(BodyOf(get) == archive);
  Response full = h.Call("GET", FullPatchTarget("org/m", d), "", {}, false);
  EXPECT_EQ(full.status, 500);
  EXPECT_EQ(full.body.find(h.data()), std::string::npos)
      << "leaks the data directory: " << full.body;
}

TEST(ArchiveStorageTest, RawIsKeptWhenTheRecordedFullPatchWasDamaged) {
  // No verify-on-read: the damage is found by the check before the raw blob is deleted.
  RegistryOptions o = StorageOptions();
  o.storage.verify_on_read_bytes = 0;
  Harness h(o);
  const std::string d = PushVersion(&h, "org/m", "v1", ModelArchive(15));
  auto full = h.registry().storage().GetFullPatch(d);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  // The disk damages the full patch after it was verified and recorded: the raw archive must
  // not be deleted on its strength; the damaged full patch is quarantined.
  std::string bytes = blz::testing::ReadFileBytes(full->blob.path);
  bytes[bytes.size() / 2] ^= 0x01;
  blz::testing::WriteFileBytes(full->blob.path, bytes);
  Status s = h.registry().storage().Compress(d);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_TRUE(RawStored(h, d));
  EXPECT_EQ(h.registry().storage().status().compressed, 0u);
  EXPECT_FALSE(fs::exists(full->blob.path));
  EXPECT_EQ(h.registry().storage().status().quarantined, 1u);
  // The next compression computes a sound full patch again, then drops the raw archive.
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  EXPECT_FALSE(RawStored(h, d));
  EXPECT_EQ(h.registry().storage().status().compressed, 1u);
}

TEST(ArchiveStorageTest, DamagedFullPatchIsReplacedBeforeTheRawIsDropped) {
  Harness h(StorageOptions());  // verify on read: the damage is found when the patch is used
  const std::string d = PushVersion(&h, "org/m", "v1", ModelArchive(16));
  auto full = h.registry().storage().GetFullPatch(d);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const std::string good = blz::testing::ReadFileBytes(full->blob.path);
  std::string bytes = good;
  bytes[bytes.size() / 2] ^= 0x01;
  blz::testing::WriteFileBytes(full->blob.path, bytes);
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  EXPECT_FALSE(RawStored(h, d));
  EXPECT_EQ(blz::testing::ReadFileBytes(full->blob.path), good);
  EXPECT_EQ(h.registry().storage().status().quarantined, 1u);
  Response get = h.Call("GET", "/v2/org/m/blobs/" + d, "", {}, false);
  EXPECT_EQ(get.status, 200);
}

TEST(ArchiveStorageTest, RebuildIsCheckedBeforeItIsPublished) {
  Harness h(StorageOptions());
  const std::string a = ModelArchive(8), b = ModelArchive(9);
  const std::string da = PushVersion(&h, "org/m", "v1", a);
  const std::string db = PushVersion(&h, "org/m", "v2", b);
  ASSERT_TRUE(h.registry().storage().Compress(da).ok());
  ASSERT_TRUE(h.registry().storage().Compress(db).ok());
  auto pa = h.registry().db().FindPatch("", da);
  auto pb = h.registry().db().FindPatch("", db);
  ASSERT_TRUE(pa.ok() && pb.ok());

  // A damaged full patch (a payload byte near its end): the rebuild fails, nothing is cached.
  const std::string path_a = *dynamic_cast<store::FsBlobStore&>(h.registry().blobs().unwrapped()).PathFor(pa->patch_digest);
  const std::string good = blz::testing::ReadFileBytes(path_a);
  std::string bytes = good;
  bytes[bytes.size() - 20] ^= 0x5a;
  blz::testing::WriteFileBytes(path_a, bytes);
  Response r = h.Call("GET", "/v2/org/m/blobs/" + da, "", {}, false);
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(r.body.find(h.data()), std::string::npos) << "leaks the data directory: " << r.body;
  EXPECT_EQ(FileCount(h.data() + "/cache"), 0u);

  // The record of b pointing at a's full patch (which rebuilds another archive): refused.
  blz::testing::WriteFileBytes(path_a, good);
  ASSERT_TRUE(h.registry().db().RecordPatch("", {"", db, pa->patch_digest, pa->patch_size}).ok());
  r = h.Call("GET", "/v2/org/m/blobs/" + db, "", {}, false);
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(FileCount(h.data() + "/cache"), 0u);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
}

TEST(ArchiveStorageTest, RestartFinishesInterruptedCompressionsAndCleansLeftovers) {
  Harness h(StorageOptions());
  const std::string a = ModelArchive(10), b = ModelArchive(11);
  const std::string da = PushVersion(&h, "org/m", "v1", a);
  const std::string db = PushVersion(&h, "org/m", "v2", b);
  // a: killed after its full patch was recorded, before the raw blob was deleted.
  ASSERT_TRUE(h.registry().storage().GetFullPatch(da).ok());
  // b: killed before anything was recorded. Leftovers of killed writes:
  blz::testing::WriteFileBytes(h.data() + "/uploads/fullpatch-0123456789abcdef", "partial");
  blz::testing::WriteFileBytes(h.data() + "/cache/sha256/" + db.substr(7) + ".tmp-0123", "partial");
  ASSERT_TRUE(RawStored(h, da) && RawStored(h, db));

  h.Reopen(StorageOptions(/*background=*/true));
  h.registry().storage().WaitIdle();
  auto st = h.registry().storage().status();
  EXPECT_EQ(st.compressed, 2u);
  EXPECT_EQ(st.full_patches_computed, 1u);  // only b's; a's was verified and recorded already
  EXPECT_EQ(st.failed, 0u);
  EXPECT_FALSE(RawStored(h, da));
  EXPECT_FALSE(RawStored(h, db));
  EXPECT_EQ(h.UploadsCount(), 0u);
  EXPECT_EQ(FileCount(h.data() + "/cache"), 0u);
  for (const auto& [d, bytes] : {std::pair{da, a}, std::pair{db, b}}) {
    Response r = h.Call("GET", "/v2/org/m/blobs/" + d, "", {}, false);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(BodyOf(r) == bytes);
  }
}

TEST(ArchiveStorageTest, CacheIsBoundedAcrossRestarts) {
  Harness h(StorageOptions());
  const std::string a = ModelArchive(12), b = ModelArchive(13);
  const std::string da = PushVersion(&h, "org/m", "v1", a);
  const std::string db = PushVersion(&h, "org/m", "v2", b);
  ASSERT_TRUE(h.registry().storage().Compress(da).ok());
  ASSERT_TRUE(h.registry().storage().Compress(db).ok());
  // Whole GETs (drained) leave their copies in the cache.
  ASSERT_TRUE(BodyOf(h.Call("GET", "/v2/org/m/blobs/" + da)) == a);
  ASSERT_TRUE(BodyOf(h.Call("GET", "/v2/org/m/blobs/" + db)) == b);
  EXPECT_EQ(h.registry().storage().status().cache_entries, 2u);

  // Room for one archive only: at start the cache is trimmed to the bound.
  RegistryOptions o = StorageOptions();
  o.storage.cache_bytes = std::max(a.size(), b.size());
  h.Reopen(o);
  auto st = h.registry().storage().status();
  EXPECT_EQ(st.cache_entries, 1u);
  EXPECT_LE(st.cache_bytes, o.storage.cache_bytes);
  EXPECT_EQ(FileCount(h.data() + "/cache"), 1u);
  // Both are still served (the evicted one rebuilt again), and the cache stays within its
  // bound. The cached one first: then the rebuild evicts it and nothing is rebuilt twice.
  const bool a_cached = fs::exists(h.data() + "/cache/sha256/" + da.substr(7));
  EXPECT_NE(a_cached, fs::exists(h.data() + "/cache/sha256/" + db.substr(7)));
  const std::pair<std::string, std::string> first{a_cached ? da : db, a_cached ? a : b};
  const std::pair<std::string, std::string> second{a_cached ? db : da, a_cached ? b : a};
  for (const auto& [d, bytes] : {first, second}) {
    Response r = h.Call("GET", "/v2/org/m/blobs/" + d, "", {}, false);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(BodyOf(r) == bytes);
  }
  st = h.registry().storage().status();
  EXPECT_EQ(st.rebuilds, 1u);
  EXPECT_EQ(st.cache_entries, 1u);
  EXPECT_LE(st.cache_bytes, o.storage.cache_bytes);
}

TEST(ArchiveStorageTest, StatusEndpoint) {
  Harness h(StorageOptions());
  const std::string d = PushVersion(&h, "org/m", "v1", ModelArchive(14));
  ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  // The storage status is for the admin (registry/storage_handlers.cc): anonymous callers of a
  // public registry see the repositories' bytes at rest only.
  Response anon = h.Call("GET", "/v2/_blz/storage", "", {}, /*auth=*/false);
  ASSERT_EQ(anon.status, 200) << anon.body;
  EXPECT_FALSE(nlohmann::json::parse(anon.body).contains("pending")) << anon.body;
  Response r = h.Call("GET", "/v2/_blz/storage");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j.at("full_patches").get<bool>(), true);
  EXPECT_EQ(j.at("drop_raw_archives").get<bool>(), true);
  EXPECT_EQ(j.at("pending").get<uint64_t>(), 0u);
  EXPECT_TRUE(j.at("compressing").is_null());
  EXPECT_EQ(j.at("compressed").get<uint64_t>(), 1u);
  EXPECT_EQ(j.at("full_patches_computed").get<uint64_t>(), 1u);
  EXPECT_EQ(j.at("cache").at("entries").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("quarantined").get<uint64_t>(), 0u);
  EXPECT_EQ(h.Call("POST", "/v2/_blz/storage").status, 405);
}

// Issue 25: the record of raw archives being read lives in the metadata DB, so one replica's
// compression does not drop a raw archive another replica handed out within the grace period
// (it is postponed), while archives nobody reads are dropped as before.
TEST(ArchiveStorageTest, ARawArchiveReadOnOneReplicaIsNotDroppedByAnother) {
  Harness primary(StorageOptions());  // grace 0: its own reads (the pushes' checks) hold nothing
  const std::string archive = ModelArchive(5);
  const std::string read = PushVersion(&primary, "org/m", "v1", archive);
  const std::string unread = PushVersion(&primary, "org/m", "v2", ModelArchive(6));

  RegistryOptions reading = StorageOptions();
  reading.storage.grace = std::chrono::hours(1);
  Harness reader(primary, reading);
  Response got = reader.Call("GET", "/v2/org/m/blobs/" + read);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_TRUE(BodyOf(got) == archive);

  // The compressing replica: its background thread takes both raw archives at start.
  RegistryOptions compressing = StorageOptions(/*background=*/true);
  Harness writer(primary, compressing);
  ArchiveStorage& storage = writer.registry().storage();
  store::MetadataDb& db = writer.registry().db();
  bool tried = false;
  for (int i = 0; i < 6000 && !tried; ++i) {  // a bound, not a timing
    tried = db.FindPatch("", read).ok() && db.FindPatch("", unread).ok() &&
            storage.status().compressing.empty() && !RawStored(writer, unread);
    if (!tried) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(tried) << "the compressing replica did not get to both archives";
  EXPECT_TRUE(RawStored(writer, read)) << "dropped while another replica reads it";
  const StorageStatus st = storage.status();
  EXPECT_EQ(st.compressed, 1u);
  EXPECT_EQ(st.pending, 1u) << "postponed until the reader's grace period has passed";
  Response again = reader.Call("GET", "/v2/org/m/blobs/" + read);
  ASSERT_EQ(again.status, 200);
  EXPECT_TRUE(BodyOf(again) == archive);
}

// A real fs store whose Stat of one digest blocks until released: a slow S3 HEAD, on demand.
class GatedStatStore : public store::TimedBlobStore {
 public:
  GatedStatStore(std::unique_ptr<store::BlobStore> inner, std::string gated)
      : TimedBlobStore(std::move(inner)), gated_(std::move(gated)) {}
  Result<store::BlobInfo> Stat(std::string_view digest) const override {
    if (digest == gated_) {
      std::unique_lock lock(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    return TimedBlobStore::Stat(digest);
  }
  void WaitEntered() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::string gated_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool entered_ = false;
  bool released_ = false;
};

// File() asks the store (an S3 HEAD) outside the storage's lock: while one lookup hangs on a
// slow store, the files of other blobs are still handed out. (It held the lock for the HEAD,
// so every File, and the background compressor, waited behind the slowest request.)
TEST(ArchiveStorageTest, ASlowStoreLookupDoesNotHoldUpOtherFiles) {
  blz::testing::TempDir tmp;
  auto fs_store = store::FsBlobStore::Open(tmp / "data");
  ASSERT_TRUE(fs_store.ok()) << fs_store.status().ToString();
  auto publish = [&](const std::string& bytes) {
    const std::string temp = (*fs_store)->NewTempPath("blob");
    blz::testing::WriteFileBytes(temp, bytes);
    const std::string d = MakeDigest(Sha256Hex(bytes));
    auto info = (*fs_store)->Publish(temp, d);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return d;
  };
  const std::string slow = publish("the blob whose lookup hangs");
  const std::string other = publish("another blob");
  GatedStatStore gated(std::move(*fs_store), slow);
  auto db = store::MetadataDb::Open(tmp / "blz.db");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ArchiveStorageOptions options;
  options.background = false;
  auto storage = ArchiveStorage::Open(&gated, db->get(), tmp / "data", {}, options);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();

  std::thread hanging([&] {
    Result<store::BlobInfo> f = (*storage)->File(slow);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
  });
  gated.WaitEntered();
  auto quick = std::async(std::launch::async, [&] { return (*storage)->File(other); });
  // A bound for a deadlock, not a timing: the old code never returned before the release.
  const bool returned = quick.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "File(other) waited for the hanging lookup of another blob";
  gated.Release();
  hanging.join();
  Result<store::BlobInfo> f = quick.get();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(blz::testing::ReadFileBytes(f->path), "another blob");
}

}  // namespace
}  // namespace blz::registry
