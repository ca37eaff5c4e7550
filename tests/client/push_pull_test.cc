// push and pull against an in-test fake registry (tests/client/push_pull_fixture.h).
#include "tests/client/push_pull_fixture.h"

#include <sys/stat.h>

namespace blz::client {
namespace {

TEST_F(PushPullTest, PushDirectoryThenPullFullAndUnpack) {
  Result<PushResult> pushed = Push(tmp_ / "v1", Ref("v1"), PushOpts());
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  EXPECT_TRUE(pushed->packed);
  EXPECT_EQ(pushed->blobs_uploaded, 2);
  EXPECT_EQ(pushed->blobs_skipped, 0);
  EXPECT_EQ(pushed->bytes_uploaded, pushed->total_bytes);
  EXPECT_GT(pushed->archive_size, 2u * 16384 * 4);
  EXPECT_EQ(registry_.blob_count(), 2u);
  // The packing staging area is cleaned up.
  EXPECT_TRUE(fs::is_empty(tmp_ / "push-cache/tmp"));

  Result<PullResult> pulled = Pull(Ref("v1"), PullOpts(tmp_ / "out"));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  EXPECT_EQ(pulled->digest, pushed->archive_digest);
  EXPECT_EQ(pulled->manifest_digest, pushed->manifest_digest);
  EXPECT_FALSE(pulled->used_patch);
  EXPECT_FALSE(pulled->cache_hit);
  EXPECT_EQ(pulled->full_bytes, pushed->archive_size);
  EXPECT_EQ(pulled->bytes_downloaded, pulled->full_bytes);
  // The fake registry serves no full patches (404, like an older server): the raw blob, quietly.
  EXPECT_EQ(registry_.full_patch_requests(), 1);
  EXPECT_EQ(pulled->transfer, "archive");
  EXPECT_FALSE(pulled->used_full_patch);
  EXPECT_TRUE(pulled->notes.empty());
  EXPECT_EQ(pulled->output, tmp_ / "out");
  EXPECT_EQ(MakeDigest(*Sha256FileHex(pulled->archive_path)), pulled->digest);
  EXPECT_EQ(ReadFileBytes(tmp_ / "out/model.safetensors"), ReadFileBytes(tmp_ / "v1/model.safetensors"));
  EXPECT_EQ(ReadFileBytes(tmp_ / "out/config.json"), ReadFileBytes(tmp_ / "v1/config.json"));
}

TEST_F(PushPullTest, PushSkipsBlobsTheRegistryHas) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  Result<PushResult> again = Push(tmp_ / "v1", Ref("again"), PushOpts());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->blobs_uploaded, 0);
  EXPECT_EQ(again->blobs_skipped, 2);
  EXPECT_EQ(again->bytes_uploaded, 0u);
}

TEST_F(PushPullTest, PullUsesPatchFromHeldVersion) {
  Result<PushResult> p1 = Push(tmp_ / "v1", Ref("v1"), PushOpts());
  Result<PushResult> p2 = Push(tmp_ / "v2", Ref("v2"), PushOpts());
  ASSERT_TRUE(p1.ok() && p2.ok());
  ASSERT_NE(p1->archive_digest, p2->archive_digest);

  Result<PullResult> first = Pull(Ref("v1"), PullOpts());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(registry_.patch_requests(), 0);

  Result<PullResult> second = Pull(Ref("v2"), PullOpts(tmp_ / "out2"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->used_patch);
  EXPECT_EQ(second->patch_from, p1->archive_digest);
  EXPECT_EQ(second->digest, p2->archive_digest);
  EXPECT_LT(second->bytes_downloaded, second->full_bytes);
  EXPECT_EQ(registry_.patch_requests(), 1);
  EXPECT_EQ(registry_.blob_gets(), 1);  // only v1's full download
  EXPECT_EQ(MakeDigest(*Sha256FileHex(second->archive_path)), p2->archive_digest);
  EXPECT_EQ(ReadFileBytes(tmp_ / "out2/model.safetensors"),
            ReadFileBytes(tmp_ / "v2/model.safetensors"));
  EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));
}

TEST_F(PushPullTest, PullFallsBackToBlobWhenNoPatch) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  ASSERT_TRUE(Push(tmp_ / "v2", Ref("v2"), PushOpts()).ok());
  ASSERT_TRUE(Pull(Ref("v1"), PullOpts()).ok());
  registry_.set_serve_patches(false);
  Result<PullResult> r = Pull(Ref("v2"), PullOpts());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->used_patch);
  EXPECT_EQ(r->bytes_downloaded, r->full_bytes);
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("not used"), std::string::npos) << r->notes[0];
}

TEST_F(PushPullTest, SecondPullIsACacheHit) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  ASSERT_TRUE(Pull(Ref("v1"), PullOpts()).ok());
  Result<PullResult> r = Pull(Ref("v1"), PullOpts());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cache_hit);
  EXPECT_EQ(r->bytes_downloaded, 0u);
  EXPECT_EQ(registry_.blob_gets(), 1);
}

TEST_F(PushPullTest, PullRefusesExistingOutputBeforeDownloading) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  fs::create_directories(tmp_ / "exists");
  int before = server_.requests();
  Result<PullResult> r = Pull(Ref("v1"), PullOpts(tmp_ / "exists"));
  EXPECT_EQ(r.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(server_.requests(), before);
}

TEST_F(PushPullTest, InterruptedPullLeavesNothingAndRerunCompletes) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  registry_.set_truncate_blobs(true);
  Result<PullResult> broken = Pull(Ref("v1"), PullOpts(tmp_ / "out"));
  EXPECT_EQ(broken.status().code(), Code::kIOError) << broken.status().ToString();
  EXPECT_FALSE(fs::exists(tmp_ / "out"));
  EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));

  // What a pull killed while unpacking leaves next to its output (its pid is long gone).
  const std::string stale = tmp_ / ".blz-pull-999999999-abcdef";
  WriteFileBytes(stale + "/model/config.json", "{");

  registry_.set_truncate_blobs(false);
  Result<PullResult> ok = Pull(Ref("v1"), PullOpts(tmp_ / "out"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(fs::exists(tmp_ / "out/model.safetensors"));
  EXPECT_FALSE(fs::exists(stale));
  for (const auto& e : fs::directory_iterator(tmp_.path())) {
    EXPECT_EQ(e.path().filename().string().rfind(".blz-pull-", 0), std::string::npos)
        << e.path();
  }
}

TEST_F(PushPullTest, TamperedBlobIsRefusedAndNotStored) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  registry_.set_corrupt_blobs(true);
  Result<PullResult> r = Pull(Ref("v1"), PullOpts(tmp_ / "out"));
  EXPECT_EQ(r.status().code(), Code::kDigestMismatch) << r.status().ToString();
  EXPECT_FALSE(fs::exists(tmp_ / "out"));
  EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));
  EXPECT_EQ(CachedBlobCount(), 0u);
}

// An archive whose SHA-256 matches its manifest but whose data fail `blz verify` (a registry
// that accepted it): pull fails, with and without -o, and nothing enters the cache.
TEST_F(PushPullTest, CorruptArchiveIsRefusedAndNotCached) {
  std::string tensor;
  const std::string archive = ArchiveWithAFlippedTensorBit(tmp_ / "v1", tmp_ / "v1.blz", &tensor);
  ASSERT_FALSE(tensor.empty());
  registry_.Inject("org/tiny", "bad", archive);
  registry_.set_full_patch_status(200);  // the fake cannot make one (500): falls back

  for (const std::string& out : {std::string(), std::string(tmp_ / "out")}) {
    SCOPED_TRACE(out.empty() ? "without -o" : "with -o");
    Result<PullResult> r = Pull(Ref("bad"), PullOpts(out));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
    EXPECT_NE(r.status().message().find("fails verification"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(tensor), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(Digest(archive)), std::string::npos)
        << r.status().message();
    EXPECT_FALSE(fs::exists(tmp_ / "out"));
    EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));
    EXPECT_EQ(CachedBlobCount(), 0u);
    for (const auto& e : fs::recursive_directory_iterator(tmp_ / "pull-cache")) {
      EXPECT_NE(e.path().filename(), "index.json") << "a version was recorded: " << e.path();
    }
  }
}

TEST_F(PushPullTest, PushWithoutTokenIsRefusedClearly) {
  registry_.set_token("tok");
  PushOptions o = PushOpts();
  o.token = "";
  Result<PushResult> r = Push(tmp_ / "v1", Ref("v1"), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnauthorized);
  EXPECT_EQ(r.status().message().rfind("push refused: UNAUTHORIZED: authentication required", 0),
            0u)
      << r.status().message();
  EXPECT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
}

TEST_F(PushPullTest, PushArchiveFileAndRejectDigestReference) {
  // An archive pushed as a file gives the same version as its directory.
  Result<PushResult> from_dir = Push(tmp_ / "v1", Ref("v1"), PushOpts());
  ASSERT_TRUE(from_dir.ok());
  Result<PullResult> pulled = Pull(Ref("v1"), PullOpts());
  ASSERT_TRUE(pulled.ok());
  Result<PushResult> from_file = Push(pulled->archive_path, Ref("copy"), PushOpts());
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_FALSE(from_file->packed);
  EXPECT_EQ(from_file->archive_digest, from_dir->archive_digest);

  Result<PushResult> by_digest =
      Push(tmp_ / "v1", "127.0.0.1:1/org/tiny@" + from_dir->manifest_digest, PushOpts());
  EXPECT_EQ(by_digest.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Push(tmp_ / "missing", Ref("v1"), PushOpts()).status().code(), Code::kNotFound);
}

// A .blz given is kept as the copy made while it was hashed: a file of its own in the store
// (not a link to the user's file, which may change later) that holds exactly those bytes.
TEST_F(PushPullTest, PushedArchiveIsKeptAsACopyOfTheBytesHashed) {
  formats::PackStats stats;
  ASSERT_TRUE(formats::Pack(tmp_ / "v1", tmp_ / "v1.blz", &stats).ok());
  Result<PushResult> r = Push(tmp_ / "v1.blz", Ref("file"), PushOpts());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->kept);
  EXPECT_EQ(r->archive_digest, stats.digest);
  Result<LocalStore> store = LocalStore::Open(tmp_ / "push-cache");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string kept = store->BlobPath(r->archive_digest);
  struct stat kept_st {}, user_st {};
  ASSERT_EQ(::stat(kept.c_str(), &kept_st), 0) << kept;
  ASSERT_EQ(::stat((tmp_ / "v1.blz").c_str(), &user_st), 0);
  EXPECT_NE(kept_st.st_ino, user_st.st_ino);
  EXPECT_EQ(MakeDigest(*Sha256FileHex(kept)), r->archive_digest);
  EXPECT_TRUE(fs::is_empty(tmp_ / "push-cache/tmp"));
}

// A .blz whose data fail verification (a flipped tensor byte) is refused before its manifest
// is PUT: no tag, no local version, nothing left in the store's staging area, the user's file
// unchanged; the error names the tensor. This fake registry does not say it verifies archives
// (no Blz-Verifies-Archives), so the client checks the archive itself with and without
// verify_locally.
TEST_F(PushPullTest, PushOfACorruptArchivePutsNoManifestAndKeepsNothing) {
  std::string tensor;
  const std::string archive = ArchiveWithAFlippedTensorBit(tmp_ / "v1", tmp_ / "v1.blz", &tensor);
  ASSERT_FALSE(tensor.empty());
  WriteFileBytes(tmp_ / "bad.blz", archive);
  for (bool keep : {true, false}) for (bool verify_locally : {true, false}) {
    SCOPED_TRACE(std::string(keep ? "kept" : "--no-keep") +
                 (verify_locally ? ", verify_locally" : ", default"));
    PushOptions o = PushOpts();
    o.keep = keep;
    o.verify_locally = verify_locally;
    Result<PushResult> r = Push(tmp_ / "bad.blz", Ref("bad"), o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
    EXPECT_NE(r.status().message().find(tensor), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("no manifest was put"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(": tensor '" + tensor + "'"), std::string::npos)
        << r.status().message();  // the client's own message (formats::BlzArchive::Verify)
    EXPECT_EQ(Pull(Ref("bad"), PullOpts()).status().code(), Code::kNotFound);
    EXPECT_EQ(ReadFileBytes(tmp_ / "bad.blz"), archive);
    EXPECT_TRUE(fs::is_empty(tmp_ / "push-cache/tmp"));
    Result<LocalStore> store = LocalStore::Open(tmp_ / "push-cache");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_FALSE(store->HasBlob(MakeDigest(Sha256Hex(archive))));
    Result<std::vector<HeldVersion>> held = store->AllVersions();
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_TRUE(held->empty());
  }
}

TEST_F(PushPullTest, PullByManifestDigest) {
  Result<PushResult> pushed = Push(tmp_ / "v1", Ref("v1"), PushOpts());
  ASSERT_TRUE(pushed.ok());
  Result<PullResult> r = Pull("127.0.0.1:" + std::to_string(server_.port()) + "/org/tiny@" +
                                  pushed->manifest_digest,
                              PullOpts());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->digest, pushed->archive_digest);
}

TEST_F(PushPullTest, PullWithoutBaseFetchesTheFullPatch) {
  Result<PushResult> pushed = Push(tmp_ / "v1", Ref("v1"), PushOpts());
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  registry_.set_full_patch_status(200);
  Result<PullResult> r = Pull(Ref("v1"), PullOpts(tmp_ / "out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->used_full_patch);
  EXPECT_FALSE(r->used_patch);
  EXPECT_EQ(r->transfer, "full-patch");
  EXPECT_TRUE(r->notes.empty());
  EXPECT_EQ(registry_.full_patch_requests(), 1);
  EXPECT_EQ(registry_.blob_gets(), 0);
  EXPECT_GT(r->bytes_downloaded, 0u);
  EXPECT_LT(r->bytes_downloaded, r->full_bytes);
  EXPECT_EQ(MakeDigest(*Sha256FileHex(r->archive_path)), pushed->archive_digest);
  EXPECT_EQ(ReadFileBytes(tmp_ / "out/model.safetensors"),
            ReadFileBytes(tmp_ / "v1/model.safetensors"));
  EXPECT_EQ(ReadFileBytes(tmp_ / "out/config.json"), ReadFileBytes(tmp_ / "v1/config.json"));
  EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));

  // A later version arrives as a patch from the one held, not as a full patch.
  ASSERT_TRUE(Push(tmp_ / "v2", Ref("v2"), PushOpts()).ok());
  Result<PullResult> r2 = Pull(Ref("v2"), PullOpts());
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->transfer, "patch");
  EXPECT_EQ(registry_.full_patch_requests(), 1);
}

TEST_F(PushPullTest, NoPatchPullNeverAsksForAFullPatch) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  registry_.set_full_patch_status(200);
  PullOptions o = PullOpts();
  o.allow_patch = false;
  Result<PullResult> r = Pull(Ref("v1"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transfer, "archive");
  EXPECT_EQ(r->bytes_downloaded, r->full_bytes);
  EXPECT_EQ(registry_.full_patch_requests(), 0);
  EXPECT_EQ(registry_.blob_gets(), 1);
}

TEST_F(PushPullTest, FullPatchFailuresFallBackToTheBlob) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  struct Case {
    int status;
    bool corrupt;
    bool note;  // worth telling the user (not just an older server)
  };
  int pulls = 0;
  for (Case c : {Case{405, false, false}, Case{404, false, false}, Case{500, false, true},
                 Case{200, true, true}}) {
    SCOPED_TRACE(c.status);
    registry_.set_full_patch_status(c.status);
    registry_.set_corrupt_full_patches(c.corrupt);
    PullOptions o = PullOpts(tmp_ / ("out-" + std::to_string(++pulls)));
    o.cache_dir = tmp_ / ("cache-" + std::to_string(pulls));  // nothing held
    Result<PullResult> r = Pull(Ref("v1"), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->transfer, "archive");
    EXPECT_FALSE(r->used_full_patch);
    EXPECT_EQ(r->notes.size(), c.note ? 1u : 0u);
    if (c.note && !r->notes.empty()) {
      EXPECT_NE(r->notes[0].find("full patch not used"), std::string::npos) << r->notes[0];
    }
    EXPECT_EQ(ReadFileBytes(o.output_dir + "/model.safetensors"),
              ReadFileBytes(tmp_ / "v1/model.safetensors"));
    EXPECT_TRUE(fs::is_empty(o.cache_dir + "/tmp"));
  }
  // The 500 is retried (PullOpts: 3 attempts) before the fallback; 404 and 405 are not.
  EXPECT_EQ(registry_.full_patch_requests(), 6);
  EXPECT_EQ(registry_.blob_gets(), 4);
}

TEST_F(PushPullTest, ConcurrentPullsOfOneVersionDownloadItOnce) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  Result<PullResult> results[2] = {Internal("not run"), Internal("not run")};
  std::vector<std::thread> pulls;
  for (int i = 0; i < 2; ++i) {
    pulls.emplace_back([&, i] {
      PullOptions o = PullOpts(tmp_ / ("same-" + std::to_string(i)));
      o.allow_patch = false;
      results[i] = Pull(Ref("v1"), o);
    });
  }
  for (std::thread& t : pulls) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
  EXPECT_EQ(registry_.blob_gets(), 1);
  EXPECT_EQ(int(results[0]->cache_hit) + int(results[1]->cache_hit), 1);
  EXPECT_EQ(results[0]->bytes_downloaded + results[1]->bytes_downloaded,
            results[0]->full_bytes);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ReadFileBytes(tmp_ / ("same-" + std::to_string(i) + "/model.safetensors")),
              ReadFileBytes(tmp_ / "v1/model.safetensors"));
  }
}

// Issue 23: many pushes at once from one machine, sharing one store (as CI runs them). Every
// push used to empty <store>/packed/ when it kept its own archive, so pushes whose archive was
// just deleted failed. Threads behave as processes here: flocks belong to open files.
TEST_F(PushPullTest, ParallelPushesOfOneAndOfTwoModelsAllSucceed) {
  constexpr int kPushes = 24;
  std::vector<Result<PushResult>> results(kPushes, Internal("not run"));
  auto push_all = [&](const std::string& prefix, auto model_of) {
    std::vector<std::thread> pushes;
    for (int i = 0; i < kPushes; ++i) {
      pushes.emplace_back([&, i] {
        results[i] = Push(tmp_ / model_of(i), Ref(prefix + std::to_string(i)), PushOpts());
      });
    }
    for (std::thread& t : pushes) t.join();
    for (int i = 0; i < kPushes; ++i) {
      ASSERT_TRUE(results[i].ok()) << prefix << i << ": " << results[i].status().ToString();
    }
  };
  // The same model, twice over (the second round may reuse a kept archive).
  for (int round = 0; round < 2; ++round) {
    push_all("same" + std::to_string(round) + "-", [](int) { return std::string("v1"); });
    if (HasFatalFailure()) return;
  }
  const std::string v1_digest = results[0]->archive_digest;
  for (int i = 0; i < kPushes; ++i) EXPECT_EQ(results[i]->archive_digest, v1_digest);
  // Two models, interleaved.
  push_all("two-", [](int i) { return std::string(i % 2 == 0 ? "v1" : "v2"); });
  if (HasFatalFailure()) return;
  for (int i = 0; i < kPushes; ++i) {
    EXPECT_EQ(results[i]->archive_digest == v1_digest, i % 2 == 0) << i;
  }
  // What was pushed pulls back byte for byte.
  for (const std::string tag : {"same0-7", "same1-3", "two-4", "two-9"}) {
    Result<PullResult> pulled = Pull(Ref(tag), PullOpts(tmp_ / ("out-" + tag)));
    ASSERT_TRUE(pulled.ok()) << tag << ": " << pulled.status().ToString();
    const std::string model = tag == "two-9" ? "v2" : "v1";
    EXPECT_EQ(ReadFileBytes(tmp_ / ("out-" + tag + "/model.safetensors")),
              ReadFileBytes(tmp_ / (model + "/model.safetensors")))
        << tag;
    EXPECT_EQ(ReadFileBytes(tmp_ / ("out-" + tag + "/config.json")),
              ReadFileBytes(tmp_ / (model + "/config.json")))
        << tag;
  }
  // Once the pushes are done, the next one that keeps an archive leaves only its own.
  MakeModel(tmp_ / "v3", 3);
  ASSERT_TRUE(Push(tmp_ / "v3", Ref("v3"), PushOpts()).ok());
  size_t kept = 0;
  for (const auto& e : fs::directory_iterator(tmp_ / "push-cache/packed")) {
    kept += e.path().extension() == ".blz" ? 1 : 0;
  }
  EXPECT_EQ(kept, 1u);
  EXPECT_TRUE(fs::is_empty(tmp_ / "push-cache/tmp"));
}

// A killed push's kept archive (nobody holds it) is removed by the next push that keeps one;
// an archive a running push holds is not.
TEST_F(PushPullTest, PushRemovesUnheldPacksButNotHeldOnes) {
  const std::string packed = tmp_ / "push-cache/packed";
  fs::create_directories(packed);
  const std::string stale(64, 'a'), held(64, 'b');
  for (const std::string& fp : {stale, held}) {
    WriteFileBytes(packed + "/" + fp + ".blz", "leftover");
    WriteFileBytes(packed + "/" + fp + ".json", "{\"digest\":\"sha256:" + fp + "\"}\n");
  }
  WriteFileBytes(packed + "/" + stale + ".json.tmp-123456", "half");
  const int fd = ::open((packed + "/" + held + ".blz").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_SH), 0);  // as a running push holds the archive it uses

  Result<PushResult> pushed = Push(tmp_ / "v1", Ref("v1"), PushOpts());
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  EXPECT_FALSE(fs::exists(packed + "/" + stale + ".blz"));
  EXPECT_FALSE(fs::exists(packed + "/" + stale + ".json"));
  EXPECT_FALSE(fs::exists(packed + "/" + stale + ".json.tmp-123456"));
  EXPECT_EQ(ReadFileBytes(packed + "/" + held + ".blz"), "leftover");
  EXPECT_TRUE(fs::exists(packed + "/" + held + ".json"));
  ::close(fd);
  // Released, it goes with the next keep; the archive just kept is reused meanwhile.
  Result<PushResult> again = Push(tmp_ / "v1", Ref("v1b"), PushOpts());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->reused_pack);
  ASSERT_TRUE(Push(tmp_ / "v2", Ref("v2"), PushOpts()).ok());
  EXPECT_FALSE(fs::exists(packed + "/" + held + ".blz"));
}

TEST_F(PushPullTest, RealFineTuneArrivesAsPatch) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  ASSERT_TRUE(Push(base, Ref("base"), PushOpts()).ok());
  Result<PushResult> pushed_ft = Push(ft, Ref("ft"), PushOpts());
  ASSERT_TRUE(pushed_ft.ok()) << pushed_ft.status().ToString();
  ASSERT_TRUE(Pull(Ref("base"), PullOpts()).ok());
  Result<PullResult> r = Pull(Ref("ft"), PullOpts(tmp_ / "ft-out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->used_patch);
  EXPECT_LT(r->bytes_downloaded, r->full_bytes);
  EXPECT_EQ(r->digest, pushed_ft->archive_digest);
  for (const auto& e : fs::directory_iterator(ft)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(ReadFileBytes(tmp_ / ("ft-out/" + name)), ReadFileBytes(e.path().string())) << name;
  }
}

}  // namespace
}  // namespace blz::client
