// Archives stored as chains (registry/archive_chains.cc; docs/storage.md, "Chains"), with the
// real patcher: a fine-tune stored as a verified patch from its base, smaller than its full
// patch; the depth bound; every version pulls byte-identical; the stored link served as the
// patch parent -> child; deleting the base never breaks the chain (GC keeps the parent, the
// re-base switches the dependent to another form first); --verify-storage's chain check.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/safetensors.h"
#include "patcher/patch.h"
#include "patcher/patch_reader.h"
#include "registry/archive_storage.h"
#include "registry/garbage_collector.h"
#include "registry/metrics_handlers.h"
#include "registry/registry.h"
#include "tests/formats/test_models.h"
#include "tests/registry/handler_harness.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::Harness;
using testing::PushVersion;
namespace fs = std::filesystem;

// The real patcher, compression when asked, no grace period.
RegistryOptions ChainOptions(uint32_t max_depth = 4) {
  RegistryOptions o;
  o.create_patch = PatcherPatchFunction();
  o.full_patch = PatcherFullPatchFunctions();
  o.storage.background = false;
  o.storage.grace = std::chrono::milliseconds(0);
  o.storage.max_chain_depth = max_depth;
  o.gc_grace = std::chrono::milliseconds(0);
  o.storage.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return o;
}

std::string PackDir(const std::string& dir) {
  blz::testing::TempDir tmp;
  formats::PackStats stats;
  Status s = formats::Pack(dir, tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << dir << ": " << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "model.blz");
}

// A synthetic model (about 140 KB); `perturb` > 0: a fine-tune of the same base.
std::string Synthetic(double perturb) { return blz::testing::PackedTestModel(1, perturb); }

// The full patch of `archive` as the registry would store it: its size.
uint64_t FullPatchSize(const std::string& archive) {
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "a.blz", archive);
  patcher::DiffOptions o;
  patcher::DiffStats stats;
  Status s = patcher::CreateFullPatch(tmp / "a.blz", tmp / "a.patch", o, &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return fs::file_size(tmp / "a.patch");
}

std::string ManifestDigest(Harness& h, const std::string& repo, const std::string& tag) {
  Response r = h.Call("GET", "/v2/" + repo + "/manifests/" + tag);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.Get("Docker-Content-Digest").value_or("");
}

void ExpectPulls(Harness& h, const std::string& repo, const std::string& archive) {
  const std::string d = MakeDigest(Sha256Hex(archive));
  Response got = h.Call("GET", "/v2/" + repo + "/blobs/" + d);
  ASSERT_EQ(got.status, 200) << repo << ": " << got.body;
  EXPECT_TRUE(BodyOf(got) == archive) << repo << " " << d << " is not byte-identical";
}

// org/base:v1 = `base` and org/ft:v1 = `ft`, each compressed once pushed (so the fine-tune
// is stored as a chain link from the base when that pays); their archive digests.
void PushBaseAndFineTune(Harness* h, const std::string& base, const std::string& ft,
                         std::string* bd, std::string* fd) {
  *bd = PushVersion(h, "org/base", "v1", base);
  ASSERT_TRUE(h->registry().storage().Compress(*bd).ok());
  *fd = PushVersion(h, "org/ft", "v1", ft);
  ASSERT_TRUE(h->registry().storage().Compress(*fd).ok());
}

// Bytes held by the blobs the metadata DB lists as stored forms of `archives`.
uint64_t AtRest(Harness& h, const std::vector<std::string>& archives) {
  uint64_t n = 0;
  for (const std::string& d : archives) {
    auto form = h.registry().db().FindStoredForm(d);
    EXPECT_TRUE(form.ok()) << d << ": " << form.status().ToString();
    if (form.ok()) n += form->patch_size;
  }
  return n;
}

// A version pushed as a patch (issue 27, "Pushes upload a patch"): the registry keeps the
// verified patch as the patch base -> version, serves it to pulls from the base, and stores the
// version as a chain link made of that very patch instead of computing one.
TEST(ArchiveChainsTest, PushedPatchBecomesTheChainLink) {
  BLZ_REQUIRE_CORPUS(corpus);
  RegistryOptions options = ChainOptions();
  options.apply_patch = PatcherApplyPatchFunction();
  Harness h(options);
  const std::string base = PackDir(corpus + "/tiny-gpt2/base");
  const std::string ft = PackDir(corpus + "/tiny-gpt2/ft-v1");
  ArchiveStorage& storage = h.registry().storage();
  const std::string bd = PushVersion(&h, "gpt2/base", "v1", base);
  ASSERT_TRUE(storage.Compress(bd).ok());
  // The client's patch, at another zstd level than the registry's: bytes of its own.
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "a.blz", base);
  blz::testing::WriteFileBytes(tmp / "b.blz", ft);
  patcher::DiffOptions level;
  level.zstd_level = 15;
  patcher::DiffStats stats;
  Status made = patcher::CreatePatch(tmp / "a.blz", tmp / "b.blz", tmp / "p", level, &stats);
  ASSERT_TRUE(made.ok()) << made.ToString();
  const std::string patch = blz::testing::ReadFileBytes(tmp / "p");
  const std::string pd = MakeDigest(Sha256Hex(patch));
  const std::string fd = MakeDigest(Sha256Hex(ft));
  Response up = h.Call("POST", "/v2/gpt2/ft/blobs/uploads/?blz-patch-from=" + bd +
                                   "&digest=" + fd,
                       patch);
  ASSERT_EQ(up.status, 201) << up.body;
  auto kept = h.registry().db().FindPatch(bd, fd);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->patch_digest, pd);
  EXPECT_TRUE(h.registry().blobs().Contains(pd));
  Response m = h.PutManifest("gpt2/ft", "v1", h.ManifestFor("gpt2/ft", ft));
  ASSERT_EQ(m.status, 201) << m.body;

  Status s = storage.Compress(fd);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto link = h.registry().db().FindChainLink(fd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  EXPECT_EQ(link->parent_digest, bd);
  EXPECT_EQ(link->patch_digest, pd) << "the link is not the pushed patch";
  EXPECT_EQ(storage.status().chain_patches_reused, 1u);
  ExpectPulls(h, "gpt2/ft", ft);
  // A pull from the base gets the pushed patch; nothing was diffed for it.
  Response p = h.Call("GET", "/v2/gpt2/ft/blz/patch?from=" + bd + "&to=" + fd);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_TRUE(BodyOf(p) == patch);
  EXPECT_EQ(h.registry().patches_computed(), 0u);
}

// The corpus fine-tune (tiny-gpt2 ft-v1 of base, in another repository) is stored as a patch
// from the base, clearly smaller than its full patch; its raw blob and full patch are gone;
// both pull byte-identical; the patch base -> ft is the stored link, served without rebuilding.
TEST(ArchiveChainsTest, CorpusFineTuneStoredAsAChainFromItsBase) {
  BLZ_REQUIRE_CORPUS(corpus);
  Harness h(ChainOptions());
  const std::string base = PackDir(corpus + "/tiny-gpt2/base");
  const std::string ft = PackDir(corpus + "/tiny-gpt2/ft-v1");
  // The base is compressed before the fine-tune arrives (else it may chain on the fine-tune).
  ArchiveStorage& storage = h.registry().storage();
  const std::string bd = PushVersion(&h, "gpt2/base", "v1", base);
  ASSERT_TRUE(storage.Compress(bd).ok());
  const std::string fd = PushVersion(&h, "gpt2/ft", "v1", ft);
  Status s = storage.Compress(fd);
  ASSERT_TRUE(s.ok()) << s.ToString();

  auto link = h.registry().db().FindChainLink(fd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  EXPECT_EQ(link->parent_digest, bd);
  EXPECT_EQ(link->depth, 1u);
  const uint64_t full = FullPatchSize(ft);
  EXPECT_LT(double(link->patch_size), 0.8 * double(full));
  auto form = h.registry().db().FindStoredForm(fd);
  ASSERT_TRUE(form.ok());
  EXPECT_EQ(form->parent_digest, bd);
  EXPECT_EQ(form->patch_digest, link->patch_digest);
  // The raw blob and the full patch are no longer stored forms.
  EXPECT_FALSE(h.registry().blobs().Contains(fd));
  EXPECT_FALSE(h.registry().db().FindPatch("", fd).ok());
  const uint64_t base_full = AtRest(h, {bd});
  std::cout << "tiny-gpt2 base + ft-v1: archives " << base.size() + ft.size()
            << " bytes; stored whole (full patches) " << base_full + full
            << " bytes; with the chain " << AtRest(h, {bd, fd}) << " bytes (link "
            << link->patch_size << " bytes vs full patch " << full << ")" << std::endl;

  // GET /v2/_blz/storage counts the link's patch as the fine-tune's bytes at rest.
  Response st = h.Call("GET", "/v2/_blz/storage?repository=gpt2/ft");
  ASSERT_EQ(st.status, 200) << st.body;
  const nlohmann::json archive = nlohmann::json::parse(st.body)["repositories"][0]["by_archive"][0];
  EXPECT_EQ(archive["form"], "chain") << archive.dump();
  EXPECT_EQ(archive["parent"], bd);
  EXPECT_EQ(archive["depth"], 1);
  EXPECT_EQ(archive["stored_as"], link->patch_digest);
  EXPECT_EQ(archive["at_rest_bytes"], link->patch_size);
  // The admin's view counts the link among the chain counters (and /metrics the same).
  const nlohmann::json chains = nlohmann::json::parse(st.body)["chains"];
  EXPECT_EQ(chains["max_depth"], ChainOptions().storage.max_chain_depth) << st.body;
  EXPECT_EQ(chains["chained"], 1) << st.body;
  EXPECT_EQ(chains["rebased"], 0) << st.body;
  double chained_metric = -1;
  for (const MetricFamily& f : ScrapeFamilies(storage.status(), StorageBytes{})) {
    if (f.name == "blz_archives_chained_total" && f.samples.size() == 1) {
      chained_metric = f.samples[0].value;
    }
  }
  EXPECT_EQ(chained_metric, 1);

  // Pulls stream it from its chain, byte-identical, without rebuilding it first.
  ExpectPulls(h, "gpt2/ft", ft);
  ExpectPulls(h, "gpt2/base", base);
  EXPECT_EQ(storage.status().chain_rebuilds, 0u);

  // The patch base -> ft is the stored link: a cache hit, and it needs neither archive
  // rebuilt (the cache is emptied first: a rebuild would show in the counters).
  h.Reopen(ChainOptions());
  const uint64_t before = h.registry().storage().status().rebuilds;
  Response p = h.Call("GET", "/v2/gpt2/ft/blz/patch?from=" + bd + "&to=" + fd);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(p.Get("Blz-Patch-Cache"), "hit");
  EXPECT_EQ(p.Get("Docker-Content-Digest"), link->patch_digest);
  EXPECT_EQ(h.registry().storage().status().rebuilds, before);
}

// A model directory holding one safetensors file of F32 tensors (name, element count, seed:
// values drawn from a normal distribution, as trained weights look to a compressor); packed.
std::string PackTensors(const std::vector<std::tuple<std::string, uint64_t, uint32_t>>& specs) {
  std::vector<std::string> data;
  std::vector<formats::SafetensorsTensorView> views;
  for (const auto& [name, n, seed] : specs) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::string bytes(n * 4, '\0');
    for (uint64_t i = 0; i < n; ++i) {
      const float f = normal(rng);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    }
    data.push_back(std::move(bytes));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    views.push_back({std::get<0>(specs[i]), formats::DType::kF32, {std::get<1>(specs[i])},
                     AsBytes(data[i])});
  }
  blz::testing::TempDir tmp;
  fs::create_directories(tmp / "model");
  Status s = formats::WriteSafetensors(tmp / "model/model.safetensors", views);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return PackDir(tmp / "model");
}

// Identical tensors across repositories and structures are stored once (issue 27): a
// classifier built on an encoder (another repository, another structure, the encoder's
// weights under other names) is stored as a link from the encoder, found by the tensors they
// share; an earlier, unrelated version of the classifier's own structure and repository (the
// parent the ranking preferred before) is passed over. The link holds only the new head.
TEST(ArchiveChainsTest, AVersionSharingTensorsWithAnotherStructureIsChainedOnIt) {
  Harness h(ChainOptions());
  ArchiveStorage& storage = h.registry().storage();
  const std::string encoder =
      PackTensors({{"encoder.layer0", 120000, 1}, {"encoder.layer1", 120000, 2}});
  const std::string unrelated = PackTensors(
      {{"backbone.encoder.layer0", 120000, 11}, {"backbone.encoder.layer1", 120000, 12},
       {"head.weight", 30000, 13}});
  const std::string classifier = PackTensors(
      {{"backbone.encoder.layer0", 120000, 1}, {"backbone.encoder.layer1", 120000, 2},
       {"head.weight", 30000, 3}});
  const std::string ed = PushVersion(&h, "org/encoder", "v1", encoder);
  ASSERT_TRUE(storage.Compress(ed).ok());
  const std::string ud = PushVersion(&h, "org/classifier", "v0", unrelated);
  ASSERT_TRUE(storage.Compress(ud).ok());
  const std::string cd = PushVersion(&h, "org/classifier", "v1", classifier);
  Status s = storage.Compress(cd);
  ASSERT_TRUE(s.ok()) << s.ToString();

  auto link = h.registry().db().FindChainLink(cd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  EXPECT_EQ(link->parent_digest, ed);
  const uint64_t full = FullPatchSize(classifier);
  // The head (120 KB of F32) and the header; the encoder's 960 KB are references.
  EXPECT_LT(link->patch_size, full / 4) << "link " << link->patch_size << ", full " << full;
  std::cout << "classifier on a shared encoder: archive " << classifier.size()
            << " bytes; full patch " << full << " bytes; link from the encoder "
            << link->patch_size << " bytes" << std::endl;
  ExpectPulls(h, "org/classifier", classifier);
  ExpectPulls(h, "org/classifier", unrelated);
  ExpectPulls(h, "org/encoder", encoder);
}

// A model assembled from two others (a vision tower and a language model pushed apart, as
// LLaVA is built) holds tensors of both; one parent per version stores it against the language
// model, which holds more of it, so the tower's tensors would be stored twice: in the tower's
// own full patch and in the assembled model's link. The tower, stored whole, is then stored as
// a link from the assembled model instead (ChainSharersOnto): each tensor once. The language
// model, the assembled model's parent, stays whole. The tower is a fifth of the assembled
// model: read through its chain it decodes only its own chunks of each level, so the rebuild
// bound counts each level at most at the tower's size (counting every level whole, as the
// bound did before, refuses the link: 4.11 MB read for a 0.96 MB tower, over 4 x). Deleting the
// assembled model re-bases the tower; everything pulls byte-identical throughout.
TEST(ArchiveChainsTest, AModelBuiltFromTwoOthersStoresTheTensorsOfBothOnce) {
  Harness h(ChainOptions());
  ArchiveStorage& storage = h.registry().storage();
  std::vector<std::tuple<std::string, uint64_t, uint32_t>> tower_specs, lm_specs, combined;
  for (uint32_t i = 0; i < 2; ++i) {
    tower_specs.push_back({"vision.layer" + std::to_string(i), 120000, 100 + i});
    combined.push_back({"vision_tower.layer" + std::to_string(i), 120000, 100 + i});
  }
  for (uint32_t i = 0; i < 8; ++i) {
    lm_specs.push_back({"model.layer" + std::to_string(i), 120000, 200 + i});
    combined.push_back({"language_model.layer" + std::to_string(i), 120000, 200 + i});
  }
  combined.push_back({"projector.weight", 30000, 300});
  const std::string tower = PackTensors(tower_specs);
  const std::string lm = PackTensors(lm_specs);
  const std::string llava = PackTensors(combined);
  const std::string td = PushVersion(&h, "org/tower", "v1", tower);
  ASSERT_TRUE(storage.Compress(td).ok());
  const std::string ld = PushVersion(&h, "org/lm", "v1", lm);
  ASSERT_TRUE(storage.Compress(ld).ok());
  const uint64_t whole = AtRest(h, {td, ld});
  const std::string md = PushVersion(&h, "org/llava", "v1", llava);
  Status s = storage.Compress(md);
  ASSERT_TRUE(s.ok()) << s.ToString();

  auto m_link = h.registry().db().FindChainLink(md);
  ASSERT_TRUE(m_link.ok()) << m_link.status().ToString();
  EXPECT_EQ(m_link->parent_digest, ld);
  EXPECT_FALSE(h.registry().db().FindChainLink(ld).ok()) << "the parent was chained";
  auto t_link = h.registry().db().FindChainLink(td);
  ASSERT_TRUE(t_link.ok()) << "the tower stays whole: " << t_link.status().ToString();
  EXPECT_EQ(t_link->parent_digest, md);
  EXPECT_EQ(t_link->depth, 2u);
  const uint64_t tower_full = FullPatchSize(tower);
  EXPECT_LT(t_link->patch_size, tower_full / 20)
      << "link " << t_link->patch_size << ", full " << tower_full;
  // The tower's full patch is forgotten; garbage collection takes its bytes.
  EXPECT_FALSE(h.registry().db().FindPatch("", td).ok());
  const uint64_t after = AtRest(h, {td, ld, md});
  // At rest: the two models whole, plus the projector and the headers (the projector's 120 KB
  // of F32 compress to about 110 KB).
  EXPECT_LT(after, whole + 200000) << "whole " << whole << ", with the assembled model " << after;
  std::cout << "tower + language model stored whole: " << whole
            << " bytes; with the assembled model, tower chained on it: " << after
            << " bytes (tower link " << t_link->patch_size << " of full patch " << tower_full
            << ")" << std::endl;
  auto gc = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  h.Reopen(ChainOptions());  // cold cache: the tower is read through the assembled model
  ExpectPulls(h, "org/tower", tower);
  ExpectPulls(h, "org/lm", lm);
  ExpectPulls(h, "org/llava", llava);

  // The assembled model goes: the tower is re-based (its full patch again) before its parent
  // is collected.
  ASSERT_EQ(h.Call("DELETE", "/v2/org/llava/manifests/" + ManifestDigest(h, "org/llava", "v1"))
                .status,
            202);
  gc = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_FALSE(h.registry().db().FindChainLink(td).ok());
  EXPECT_EQ(h.registry().storage().status().rebased, 1u);
  h.Reopen(ChainOptions());
  ExpectPulls(h, "org/tower", tower);
  ExpectPulls(h, "org/lm", lm);
}

// An archive compressed before its tensors were listed (a registry upgraded past migration
// 0014; here, one that ran with chains off, which lists nothing) is listed from its stored
// form's header by the storage thread at the next start, so a later model of another
// structure that holds its tensors is stored as a link from it.
TEST(ArchiveChainsTest, ArchivesStoredBeforeTensorsWereListedAreListedAtStart) {
  Harness h(ChainOptions(/*max_depth=*/0));
  const std::string encoder =
      PackTensors({{"encoder.layer0", 120000, 1}, {"encoder.layer1", 120000, 2}});
  const std::string classifier = PackTensors(
      {{"backbone.encoder.layer0", 120000, 1}, {"backbone.encoder.layer1", 120000, 2},
       {"head.weight", 30000, 3}});
  const std::string ed = PushVersion(&h, "org/encoder", "v1", encoder);
  ASSERT_TRUE(h.registry().storage().Compress(ed).ok());
  ASSERT_FALSE(h.registry().blobs().Contains(ed)) << "the raw archive was kept";
  ASSERT_FALSE(*h.registry().db().HasArchiveTensors(ed));

  RegistryOptions chains = ChainOptions();
  chains.storage.background = true;  // the start's ScheduleAll and the storage thread
  h.Reopen(chains);
  h.registry().storage().WaitIdle();
  Result<bool> listed = h.registry().db().HasArchiveTensors(ed);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(*listed) << "the encoder's tensors were not listed at start";
  EXPECT_EQ(h.registry().storage().status().pending, 0u);

  const std::string cd = PushVersion(&h, "org/classifier", "v1", classifier);
  h.registry().storage().WaitIdle();
  auto link = h.registry().db().FindChainLink(cd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  EXPECT_EQ(link->parent_digest, ed);
  ExpectPulls(h, "org/classifier", classifier);
  ExpectPulls(h, "org/encoder", encoder);
}

// A series pushed within a second (a benchmark, a job pushing checkpoints back to back) ties on
// push time, which is in seconds: the parent is then the version pushed nearest in the
// repository's order, not whichever digest sorts first. One candidate is tried, so the first
// ranked is the parent. The versions are pushed in the order of their digests, so that the
// digest would pick the oldest.
TEST(ArchiveChainsTest, ASeriesPushedWithinASecondChainsOnItsPreviousVersion) {
  RegistryOptions o = ChainOptions();
  o.storage.chain_candidates = 1;
  Harness h(o);
  std::map<std::string, std::string> by_digest;
  for (int i = 0; i < 4; ++i) {
    const std::string archive = Synthetic(0.002 * i);
    by_digest[MakeDigest(Sha256Hex(archive))] = archive;
  }
  std::vector<std::string> digests;
  for (const auto& [d, archive] : by_digest) {
    digests.push_back(PushVersion(&h, "org/run", "step" + std::to_string(digests.size()), archive));
    ASSERT_EQ(digests.back(), d);
    ASSERT_TRUE(h.registry().storage().Compress(d).ok());
  }
  for (size_t i = 1; i < digests.size(); ++i) {
    auto link = h.registry().db().FindChainLink(digests[i]);
    ASSERT_TRUE(link.ok()) << "step" << i << ": " << link.status().ToString();
    EXPECT_EQ(link->parent_digest, digests[i - 1]) << "step" << i;
  }
}

// --max-chain-depth 0: every version stays whole (its full patch), as before chains.
// A version deleted before its compression ran is not compressed: no full patch, no link
// (before, both were computed and became garbage at once; the churn test's collections met
// them as young blobs). Its raw blob goes with the next collection.
TEST(ArchiveChainsTest, AVersionDeletedBeforeItsCompressionIsNotCompressed) {
  Harness h(ChainOptions());
  std::string bd, fd;
  PushBaseAndFineTune(&h, Synthetic(0), Synthetic(0.01), &bd, &fd);
  const uint64_t computed = h.registry().storage().status().full_patches_computed;
  const std::string gone = PushVersion(&h, "org/gone", "v1", Synthetic(0.02));
  ASSERT_EQ(h.Call("DELETE", "/v2/org/gone/manifests/" + ManifestDigest(h, "org/gone", "v1"))
                .status,
            202);
  ASSERT_TRUE(h.registry().storage().Compress(gone).ok());
  EXPECT_EQ(h.registry().storage().status().full_patches_computed, computed);
  EXPECT_EQ(h.registry().db().FindPatch("", gone).status().code(), Code::kNotFound);
  EXPECT_EQ(h.registry().db().FindChainLink(gone).status().code(), Code::kNotFound);
  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_FALSE(h.registry().blobs().Contains(gone));
  ExpectPulls(h, "org/ft", Synthetic(0.01));
}

TEST(ArchiveChainsTest, DepthZeroStoresEveryVersionWhole) {
  Harness h(ChainOptions(0));
  const std::string bd = PushVersion(&h, "org/m", "v1", Synthetic(0));
  ASSERT_TRUE(h.registry().storage().Compress(bd).ok());
  const std::string fd = PushVersion(&h, "org/m", "v2", Synthetic(0.002));
  ASSERT_TRUE(h.registry().storage().Compress(fd).ok());
  auto links = h.registry().db().ListChainLinks();
  ASSERT_TRUE(links.ok());
  EXPECT_TRUE(links->empty());
  auto form = h.registry().db().FindStoredForm(fd);
  ASSERT_TRUE(form.ok()) << form.status().ToString();
  EXPECT_EQ(form->parent_digest, "");
  EXPECT_EQ(form->depth, 0u);
}

// Push max_depth + 2 successive fine-tunes: every link is at most max_depth deep (the bound
// was reached), and every version pulls byte-identical, also after a restart (cold cache).
TEST(ArchiveChainsTest, DepthBoundIsRespected) {
  constexpr uint32_t kMaxDepth = 2;
  Harness h(ChainOptions(kMaxDepth));
  std::vector<std::string> archives, digests;
  for (uint32_t i = 0; i < kMaxDepth + 2; ++i) {
    archives.push_back(Synthetic(0.002 * i));
    digests.push_back(PushVersion(&h, "org/run", "step" + std::to_string(i), archives.back()));
    Status s = h.registry().storage().Compress(digests.back());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto links = h.registry().db().ListChainLinks();
  ASSERT_TRUE(links.ok());
  ASSERT_FALSE(links->empty()) << "no version was stored as a chain";
  uint64_t deepest = 0;
  for (const store::ChainLink& l : *links) {
    deepest = std::max(deepest, l.depth);
    // The recorded depth is the real one: count the links up to the root.
    uint64_t real = 0;
    for (std::string at = l.archive_digest;;) {
      auto up = h.registry().db().FindChainLink(at);
      if (!up.ok()) break;
      ++real;
      at = up->parent_digest;
    }
    EXPECT_EQ(real, l.depth) << l.archive_digest;
  }
  EXPECT_LE(deepest, kMaxDepth);
  for (size_t i = 0; i < archives.size(); ++i) ExpectPulls(h, "org/run", archives[i]);
  h.Reopen(ChainOptions(kMaxDepth));
  for (size_t i = archives.size(); i-- > 0;) ExpectPulls(h, "org/run", archives[i]);
}

// A blob GET of a chained version rebuilds nothing first: a range is decoded from the chain
// alone (no cache entry, no rebuild), a whole GET streams the archive and leaves a verified
// copy in the cache on the way, which the next GET is served from as a file. On the code
// before, the first GET rebuilt the archive into the cache (chain_rebuilds 1) before its
// first byte.
TEST(ArchiveChainsTest, AChainedVersionIsStreamedAndCachedByItsFirstWholeGet) {
  Harness h(ChainOptions());
  const std::string base = Synthetic(0);
  const std::string ft = Synthetic(0.002);
  std::string bd, fd;
  ASSERT_NO_FATAL_FAILURE(PushBaseAndFineTune(&h, base, ft, &bd, &fd));
  ASSERT_TRUE(h.registry().db().FindChainLink(fd).ok());
  const std::string cache = h.data() + "/cache/sha256";
  auto cold = [&] {  // a restart with an empty cache
    fs::remove_all(cache);
    h.Reopen(ChainOptions());
  };
  cold();
  ArchiveStorage& storage = h.registry().storage();
  ASSERT_EQ(storage.status().cache_entries, 0u);

  Response range = h.Call("GET", "/v2/org/ft/blobs/" + fd, "", {{"Range", "bytes=100-5099"}});
  ASSERT_EQ(range.status, 206) << range.body;
  EXPECT_NE(range.producer, nullptr);
  EXPECT_TRUE(BodyOf(range) == ft.substr(100, 5000));
  EXPECT_EQ(storage.status().cache_entries, 0u);

  Response whole = h.Call("GET", "/v2/org/ft/blobs/" + fd);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.Get("Docker-Content-Digest").value_or(""), fd);
  ASSERT_NE(whole.producer, nullptr) << "served from a rebuilt file, not streamed";
  EXPECT_EQ(whole.file_length, ft.size());
  EXPECT_TRUE(BodyOf(whole) == ft);
  StorageStatus st = storage.status();
  EXPECT_EQ(st.chain_rebuilds, 0u) << "rebuilt before it was served";
  EXPECT_EQ(st.rebuilds, 1u);  // the copy
  EXPECT_EQ(st.cache_entries, 1u) << "the streamed GET left no copy in the cache";

  Response again = h.Call("GET", "/v2/org/ft/blobs/" + fd);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.producer, nullptr) << "the second GET was not served from the cached copy";
  EXPECT_TRUE(BodyOf(again) == ft);
  EXPECT_EQ(storage.status().chain_rebuilds, 0u);

  // A whole GET whose client goes away early leaves no copy (and no temporary file).
  cold();
  Response cut = h.Call("GET", "/v2/org/ft/blobs/" + fd);
  ASSERT_EQ(cut.status, 200) << cut.body;
  ASSERT_NE(cut.producer, nullptr);
  ASSERT_TRUE(cut.producer->Next().ok());
  cut.producer.reset();
  EXPECT_EQ(h.registry().storage().status().cache_entries, 0u);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(cache)) {
    ADD_FAILURE() << "left in the cache: " << e.path();
    ++files;
  }
  EXPECT_EQ(files, 0u);
  // An unsatisfiable range of a stored-as-patches archive.
  Response bad = h.Call("GET", "/v2/org/ft/blobs/" + fd, "",
                        {{"Range", "bytes=" + std::to_string(ft.size()) + "-"}});
  EXPECT_EQ(bad.status, 416) << bad.body;
}

// The patch between two siblings (fine-tunes stored as links from one base) is computed from
// their links as stored: neither is rebuilt into the cache, and the patch is the one the two
// archive files give. Without the in-place reader (create_patch_from_readers unset), both
// would be rebuilt into the cache first.
TEST(ArchiveChainsTest, APatchBetweenTwoChainedSiblingsRebuildsNeither) {
  const std::string base = Synthetic(0);
  const std::string ft1 = Synthetic(0.002);
  const std::string ft2 = Synthetic(0.004);
  // The patch the archive files give.
  blz::testing::TempDir tmp;
  blz::testing::WriteFileBytes(tmp / "ft1.blz", ft1);
  blz::testing::WriteFileBytes(tmp / "ft2.blz", ft2);
  patcher::DiffStats want_stats;
  ASSERT_TRUE(patcher::CreatePatch(tmp / "ft1.blz", tmp / "ft2.blz", tmp / "want.patch", {},
                                   &want_stats)
                  .ok());
  const std::string want = blz::testing::ReadFileBytes(tmp / "want.patch");

  for (bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "read as stored" : "rebuilt files");
    RegistryOptions options = ChainOptions(/*max_depth=*/1);  // both chain on the base
    if (in_place) {
      options.create_patch_from_readers = PatcherPatchFromReadersFunction();
      // The base (283 KB) is over a quarter of the cache: its links are diffed and verified
      // against it as stored (with the default cache, it is rebuilt into it once).
      options.storage.cache_bytes = 1 << 20;
    }
    Harness h(options);
    const std::string bd = PushVersion(&h, "org/base", "v1", base);
    ASSERT_TRUE(h.registry().storage().Compress(bd).ok());
    const std::string d1 = PushVersion(&h, "org/ft1", "v1", ft1);
    ASSERT_TRUE(h.registry().storage().Compress(d1).ok());
    const std::string d2 = PushVersion(&h, "org/ft2", "v1", ft2);
    ASSERT_TRUE(h.registry().storage().Compress(d2).ok());
    for (const std::string& d : {d1, d2}) {
      auto link = h.registry().db().FindChainLink(d);
      ASSERT_TRUE(link.ok()) << d << ": " << link.status().ToString();
      ASSERT_EQ(link->parent_digest, bd);
    }
    EXPECT_EQ(h.registry().storage().status().cache_entries, in_place ? 0u : 1u);
    fs::remove_all(h.data() + "/cache/sha256");  // a restart with an empty cache
    h.Reopen(options);
    ArchiveStorage& storage = h.registry().storage();
    ASSERT_EQ(storage.status().cache_entries, 0u);

    Response p = h.Call("GET", "/v2/org/ft2/blz/patch?from=" + d1 + "&to=" + d2);
    ASSERT_EQ(p.status, 200) << p.body;
    EXPECT_EQ(p.Get("Blz-Patch-Cache"), "miss");
    EXPECT_TRUE(BodyOf(p) == want) << "not the patch of the two archive files";
    const StorageStatus st = storage.status();
    std::cout << (in_place ? "read as stored" : "rebuilt files") << ": patch of "
              << want.size() << " bytes between siblings of " << ft1.size() << " and "
              << ft2.size() << " bytes; cache entries " << st.cache_entries << " ("
              << st.cache_bytes << " bytes), chain rebuilds " << st.chain_rebuilds << std::endl;
    if (in_place) {
      EXPECT_EQ(st.cache_entries, 0u);
      EXPECT_EQ(st.chain_rebuilds, 0u);
      // The two chains were opened sharing their base's reader (ArchiveStorage::OpenReaders),
      // and each still reads its own archive.
      auto readers = storage.OpenReaders({d1, d2});
      ASSERT_TRUE(readers.ok()) << readers.status().ToString();
      auto* r1 = dynamic_cast<const patcher::PatchReader*>((*readers)[0].get());
      auto* r2 = dynamic_cast<const patcher::PatchReader*>((*readers)[1].get());
      ASSERT_TRUE(r1 != nullptr && r2 != nullptr);
      EXPECT_EQ(r1->parent(), r2->parent());
      EXPECT_EQ(r1->parent()->archive_digest(), bd);
      for (const auto& [reader, bytes] : {std::pair(r1, &ft1), std::pair(r2, &ft2)}) {
        std::string got;
        Status read = reader->Read(0, reader->archive_size(), [&](ByteSpan b) {
          got.append(reinterpret_cast<const char*>(b.data()), b.size());
          return Status::Ok();
        });
        ASSERT_TRUE(read.ok()) << read.ToString();
        EXPECT_TRUE(got == *bytes) << reader->archive_digest();
      }
    } else {
      EXPECT_EQ(st.cache_entries, 2u);  // what reading them as stored saves
    }
    // The web view's report of that patch needs only ft2's header.
    fs::remove_all(h.data() + "/cache/sha256");
    h.Reopen(options);
    Response report = h.Call("GET", "/v2/org/ft2/blz/patch-report?from=" + d1 + "&to=" + d2);
    ASSERT_EQ(report.status, 200) << report.body;
    const nlohmann::json r = nlohmann::json::parse(report.body);
    EXPECT_EQ(r["patch_bytes"], want.size()) << report.body.substr(0, 400);
    EXPECT_EQ(h.registry().storage().status().cache_entries, in_place ? 0u : 2u);
    ExpectPulls(h, "org/ft2", ft2);
  }
}

// Deleting the base: a garbage collection alone (no re-base) keeps the parent the chain needs;
// the registry's collection re-bases the fine-tune first (here onto its full patch: no other
// parent), then the base's bytes go, and the fine-tune still pulls byte-identical.
TEST(ArchiveChainsTest, DeletingTheBaseKeepsDependentsReadable) {
  Harness h(ChainOptions());
  const std::string base = Synthetic(0);
  const std::string ft = Synthetic(0.002);
  std::string bd, fd;
  ASSERT_NO_FATAL_FAILURE(PushBaseAndFineTune(&h, base, ft, &bd, &fd));
  auto link = h.registry().db().FindChainLink(fd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  ASSERT_EQ(link->parent_digest, bd);
  auto base_form = h.registry().db().FindStoredForm(bd);
  ASSERT_TRUE(base_form.ok());

  const std::string md = ManifestDigest(h, "org/base", "v1");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/base/manifests/" + md).status, 202);

  // The collector by itself: the base is no version any more, but the chain keeps it.
  GcOptions o;
  o.grace = std::chrono::milliseconds(0);
  KeyedMutex locks;
  auto gc = CollectGarbage(h.registry().blobs(), &h.registry().db(), &locks, o);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_TRUE(h.registry().blobs().Contains(base_form->patch_digest));
  EXPECT_TRUE(h.registry().db().FindChainLink(fd).ok());
  h.Reopen(ChainOptions());  // cold cache: the ft is rebuilt through the base
  ExpectPulls(h, "org/ft", ft);

  // The registry's collection re-bases first, then the base goes.
  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chain_links_rebased, 1u);
  EXPECT_EQ(report->chain_rebases_failed, 0u);
  EXPECT_FALSE(h.registry().db().FindChainLink(fd).ok());
  EXPECT_EQ(h.registry().storage().status().rebased, 1u);
  EXPECT_FALSE(h.registry().blobs().Contains(base_form->patch_digest));
  auto ft_form = h.registry().db().FindStoredForm(fd);
  ASSERT_TRUE(ft_form.ok());
  EXPECT_EQ(ft_form->parent_digest, "");
  h.Reopen(ChainOptions());
  ExpectPulls(h, "org/ft", ft);
}

// A re-base pass that cannot list the chain links (here: a column of archive_chains is gone)
// is an error of the collection, reported, not skipped in silence; the link and its parent
// stay, and the fine-tune still pulls.
TEST(ArchiveChainsTest, ARebaseThatCannotListTheLinksIsAnErrorOfTheCollection) {
  Harness h(ChainOptions());
  std::string bd, fd;
  const std::string ft = Synthetic(0.002);
  ASSERT_NO_FATAL_FAILURE(PushBaseAndFineTune(&h, Synthetic(0), ft, &bd, &fd));
  ASSERT_TRUE(h.registry().db().FindChainLink(fd).ok());
  auto base_form = h.registry().db().FindStoredForm(bd);
  ASSERT_TRUE(base_form.ok());
  const std::string md = ManifestDigest(h, "org/base", "v1");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/base/manifests/" + md).status, 202);
  {
    Result<store::sql::Database> sql = h.OpenMetadataSql();
    ASSERT_TRUE(sql.ok()) << sql.status().ToString();
    ASSERT_TRUE(
        sql->Exec("ALTER TABLE archive_chains RENAME COLUMN rebuild_bytes TO rebuild_bytes_x")
            .ok());
  }
  Result<GcReport> report = h.registry().CollectGarbage(/*dry_run=*/false);
  {
    Result<store::sql::Database> sql = h.OpenMetadataSql();
    ASSERT_TRUE(sql.ok()) << sql.status().ToString();
    ASSERT_TRUE(
        sql->Exec("ALTER TABLE archive_chains RENAME COLUMN rebuild_bytes_x TO rebuild_bytes")
            .ok());
  }
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chain_links_rebased, 0u);
  const bool named = std::any_of(report->errors.begin(), report->errors.end(), [](auto& e) {
    return e.find("re-basing orphaned chain links") != std::string::npos;
  });
  EXPECT_TRUE(named) << "the failed re-base pass is not among the collection's errors ("
                     << report->errors.size() << " errors)";
  EXPECT_TRUE(h.registry().db().FindChainLink(fd).ok());
  EXPECT_TRUE(h.registry().blobs().Contains(base_form->patch_digest));
  ExpectPulls(h, "org/ft", ft);
}

// A base with two fine-tunes in one repository: deleting the base re-bases one fine-tune onto
// the other (a new parent, never a deeper chain) or its full patch; everything still pulls.
// Deleting every version of a chain: one collection frees every blob (the dead links are
// forgotten before the patches, so the parent's full patch row does not outlive them by a
// collection; cluster_churn.sh's drain found 3 blobs left).
TEST(ArchiveChainsTest, OneCollectionDrainsADeadChain) {
  Harness h(ChainOptions());
  const std::string bd = PushVersion(&h, "org/base", "v1", Synthetic(0));
  ASSERT_TRUE(h.registry().storage().Compress(bd).ok());
  const std::string fd = PushVersion(&h, "org/ft", "v1", Synthetic(0.002));
  ASSERT_TRUE(h.registry().storage().Compress(fd).ok());
  ASSERT_TRUE(h.registry().db().FindChainLink(fd).ok());
  const std::string mb = ManifestDigest(h, "org/base", "v1");
  const std::string mf = ManifestDigest(h, "org/ft", "v1");
  ASSERT_EQ(h.Call("DELETE", "/v2/org/ft/manifests/" + mf).status, 202);
  ASSERT_EQ(h.Call("DELETE", "/v2/org/base/manifests/" + mb).status, 202);
  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto left = h.registry().blobs().ListDigests();
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->size() << " blobs left after one collection";
  EXPECT_FALSE(h.registry().db().FindChainLink(fd).ok());
}

TEST(ArchiveChainsTest, RebaseOntoAnotherParent) {
  Harness h(ChainOptions());
  const std::string base = Synthetic(0);
  const std::string a = Synthetic(0.002);
  const std::string b = Synthetic(0.004);
  const std::string bd = PushVersion(&h, "org/m", "base", base);
  ASSERT_TRUE(h.registry().storage().Compress(bd).ok());
  // `a` is stored whole (depth bound 0 while it is compressed), then `b` chains on base or a.
  const std::string ad = PushVersion(&h, "org/m", "a", a);
  {
    RegistryOptions o = ChainOptions(0);
    h.Reopen(o);
    ASSERT_TRUE(h.registry().storage().Compress(ad).ok());
    h.Reopen(ChainOptions());
  }
  const std::string fd = PushVersion(&h, "org/m", "b", b);
  ASSERT_TRUE(h.registry().storage().Compress(fd).ok());
  auto link = h.registry().db().FindChainLink(fd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  const std::string parent = link->parent_digest;
  const std::string tag = parent == bd ? "base" : "a";
  ASSERT_EQ(h.Call("DELETE", "/v2/org/m/manifests/" + ManifestDigest(h, "org/m", tag)).status,
            202);
  auto report = h.registry().CollectGarbage(false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chain_links_rebased, 1u);
  EXPECT_EQ(report->chain_rebases_failed, 0u);
  auto after = h.registry().db().FindStoredForm(fd);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->parent_digest, parent);
  EXPECT_LE(after->depth, 1u);
  // The full patch the re-base computed for `b` and forgot for its new link was garbage at
  // once: with no grace, the same collection took it, and nothing unreferenced is left.
  EXPECT_EQ(h.registry().db().FindPatch("", fd).status().code(), Code::kNotFound);
  auto dry = h.registry().CollectGarbage(/*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status().ToString();
  EXPECT_EQ(dry->blobs_removed, 0u) << ::testing::PrintToString(dry->removed);
  EXPECT_EQ(dry->blobs_too_young, 0u);
  EXPECT_EQ(dry->blobs_marked, dry->blobs_total);
  EXPECT_EQ(dry->chain_links_rebased, 0u) << "a dry run re-bases nothing";
  h.Reopen(ChainOptions());
  ExpectPulls(h, "org/m", b);
  ExpectPulls(h, "org/m", parent == bd ? a : base);
}

// A re-base onto a new parent computes the archive's full patch on the way and forgets it once
// the new link is recorded: that blob is garbage younger than the grace period, kept by the
// collection that re-based and taken by the next one past the grace (cluster_churn.sh's final
// dry run met two such blobs).
TEST(ArchiveChainsTest, ARebaseOntoANewParentLeavesItsFullPatchForTheNextCollection) {
  RegistryOptions young = ChainOptions();
  young.gc_grace = std::chrono::hours(1);
  Harness h(young);
  const std::string bd = PushVersion(&h, "org/m", "base", Synthetic(0));
  ASSERT_TRUE(h.registry().storage().Compress(bd).ok());
  const std::string ad = PushVersion(&h, "org/m", "a", Synthetic(0.002));
  {
    h.Reopen(ChainOptions(0));  // `a` stored whole
    ASSERT_TRUE(h.registry().storage().Compress(ad).ok());
    h.Reopen(young);
  }
  const std::string fd = PushVersion(&h, "org/m", "b", Synthetic(0.004));
  ASSERT_TRUE(h.registry().storage().Compress(fd).ok());
  auto link = h.registry().db().FindChainLink(fd);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  // The full patch `b`'s compression computed and forgot goes first (no grace), so that the
  // re-base below writes it anew.
  h.Reopen(ChainOptions());
  ASSERT_TRUE(h.registry().CollectGarbage(/*dry_run=*/false).ok());
  h.Reopen(young);
  const std::string tag = link->parent_digest == bd ? "base" : "a";
  ASSERT_EQ(h.Call("DELETE", "/v2/org/m/manifests/" + ManifestDigest(h, "org/m", tag)).status,
            202);
  auto before = h.registry().blobs().ListDigests();
  ASSERT_TRUE(before.ok());
  auto report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->chain_links_rebased, 1u);
  auto form = h.registry().db().FindStoredForm(fd);
  ASSERT_TRUE(form.ok()) << form.status().ToString();
  ASSERT_NE(form->parent_digest, "") << "re-based onto its full patch, not a new parent";
  ASSERT_NE(form->parent_digest, link->parent_digest);
  // New blobs: the new link's patch (referenced) and the full patch (forgotten, young).
  auto after = h.registry().blobs().ListDigests();
  ASSERT_TRUE(after.ok());
  std::vector<std::string> added;
  for (const std::string& d : *after) {
    if (std::find(before->begin(), before->end(), d) == before->end()) added.push_back(d);
  }
  ASSERT_EQ(added.size(), 2u) << ::testing::PrintToString(added);
  std::string full_patch;
  for (const std::string& d : added) {
    if (d != form->patch_digest) full_patch = d;
  }
  ASSERT_FALSE(full_patch.empty()) << "the new link's patch is not among the new blobs";
  EXPECT_EQ(h.registry().db().FindPatch("", fd).status().code(), Code::kNotFound);
  auto dry = h.registry().CollectGarbage(/*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status().ToString();
  EXPECT_GE(dry->blobs_too_young, 1u);
  EXPECT_EQ(dry->blobs_removed, 0u);
  // Past the grace period (none, after a restart with --gc-grace 0s): the next collection
  // takes it, and nothing the versions need.
  h.Reopen(ChainOptions());
  report = h.registry().CollectGarbage(/*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->chain_links_rebased, 0u);
  EXPECT_NE(std::find(report->removed.begin(), report->removed.end(), full_patch),
            report->removed.end())
      << ::testing::PrintToString(report->removed);
  EXPECT_TRUE(h.registry().blobs().Contains(form->patch_digest));
  h.Reopen(ChainOptions());
  ExpectPulls(h, "org/m", Synthetic(0.004));
}

// --verify-storage's chain check: every link rebuilt exactly; a damaged link is reported.
TEST(ArchiveChainsTest, VerifyChainsFindsADamagedLink) {
  if (testing::TestStorageIsS3()) {
    GTEST_SKIP() << "damages a blob file of the fs driver in place";
  }
  Harness h(ChainOptions());
  const std::string bd = PushVersion(&h, "org/m", "v1", Synthetic(0));
  ASSERT_TRUE(h.registry().storage().Compress(bd).ok());
  const std::string fd = PushVersion(&h, "org/m", "v2", Synthetic(0.002));
  ASSERT_TRUE(h.registry().storage().Compress(fd).ok());
  auto link = h.registry().db().FindChainLink(fd);
  ASSERT_TRUE(link.ok());
  auto ok = h.registry().storage().VerifyChains(nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->links, 1u);
  EXPECT_EQ(ok->verified, 1u);
  EXPECT_TRUE(ok->broken.empty());

  auto file = h.registry().blobs().LocalFile(link->patch_digest);
  ASSERT_TRUE(file.ok());
  {
    std::fstream f(file->path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(file->size / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(std::streamoff(file->size / 2));
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  h.Reopen(ChainOptions());
  std::vector<std::string> lines;
  auto bad = h.registry().storage().VerifyChains(
      [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->verified, 0u);
  ASSERT_EQ(bad->broken.size(), 1u);
  EXPECT_NE(bad->broken[0].find(fd), std::string::npos) << bad->broken[0];
  ASSERT_EQ(lines.size(), 1u);
  // And a pull of it fails cleanly instead of serving wrong bytes.
  Response got = h.Call("GET", "/v2/org/m/blobs/" + fd);
  EXPECT_NE(got.status, 200);
}

}  // namespace
}  // namespace blz::registry
