// Tests for the patch container (patcher/patch.h): CreatePatch / ReadPatchInfo / ApplyPatch.
#include "patcher/patch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/safetensors.h"
#include "patcher/patch_format.h"
#include "patcher/tensor_codec.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::patcher {
namespace {

using formats::DType;
using ::testing::HasSubstr;

std::string F32Bytes(size_t n, uint32_t seed) {
  std::string out(n * 4, '\0');
  uint64_t state = seed;
  for (size_t i = 0; i < n; ++i) {
    float f = float(testing::test_models_internal::Uniform(&state));
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::string data;
};

void WriteTensors(const std::string& path, const std::vector<TensorSpec>& specs) {
  std::vector<formats::SafetensorsTensorView> views;
  for (const auto& s : specs) views.push_back({s.name, s.dtype, s.shape, AsBytes(s.data)});
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  Status st = formats::WriteSafetensors(path, views);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

void PackDir(const std::string& dir, const std::string& out) {
  formats::PackStats ps;
  Status st = formats::Pack(dir, out, &ps);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

const PieceReport* FindReport(const DiffStats& stats, const std::string& name) {
  for (const auto& r : stats.pieces) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// The size of "extra.big": 2 whole chunks and a partial one.
constexpr size_t kBigElems = (2 * kChunkBytes + kChunkBytes / 4) / 4;

// Base A and target B: a synthetic model fine-tuned (layer 1 frozen), plus a second shard
// that exercises every kind of change.
void WriteBaseAndTarget(const std::string& a, const std::string& b) {
  testing::TestModelOptions oa;
  oa.with_edge_tensors = true;  // model.step (0-rank I64), model.empty (F32 [0, H])
  testing::WriteTestModel(a, oa);
  testing::TestModelOptions ob = oa;
  ob.perturb_scale = 0.01;
  ob.frozen_prefix = "model.layers.1.";
  testing::WriteTestModel(b, ob);
  // A changed config.json (B) and an unchanged file; a removed and an added file.
  testing::WriteFileBytes(b + "/config.json", "{\n  \"model_type\": \"blz-test\",\n  \"note\": \"ft\"\n}\n");
  testing::WriteFileBytes(a + "/tokenizer.txt", "a b c d\n");
  testing::WriteFileBytes(b + "/tokenizer.txt", "a b c d\n");
  testing::WriteFileBytes(a + "/removed.txt", "gone\n");
  testing::WriteFileBytes(b + "/docs/added.txt", "new\n");

  std::string big = F32Bytes(kBigElems, 7);
  std::string big2 = big;
  for (size_t k = 0; k < 100; ++k) big2[kChunkBytes + 1000 + 8 * k] ^= 0x01;  // chunk 1 only
  WriteTensors(a + "/extra.safetensors",
               {{"extra.gone", DType::kF32, {8}, F32Bytes(8, 1)},
                {"extra.reshape", DType::kF32, {2, 8}, F32Bytes(16, 2)},
                {"extra.retype", DType::kF32, {16}, F32Bytes(16, 3)},
                {"extra.same", DType::kU8, {10}, "0123456789"},
                {"extra.big", DType::kF32, {kBigElems}, big}});
  WriteTensors(b + "/extra.safetensors",
               {{"extra.new", DType::kF32, {8}, F32Bytes(8, 4)},
                {"extra.new_empty", DType::kF32, {0}, ""},
                {"extra.reshape", DType::kF32, {4, 4}, F32Bytes(16, 2)},
                {"extra.retype", DType::kF16, {16}, std::string(F32Bytes(16, 3)).substr(0, 32)},
                {"extra.same", DType::kU8, {10}, "0123456789"},
                {"extra.big", DType::kF32, {kBigElems}, big2}});
}

class PatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_dir_ = new testing::TempDir;
    stats_ = new DiffStats;
    WriteBaseAndTarget(*suite_dir_ / "a", *suite_dir_ / "b");
    PackDir(*suite_dir_ / "a", A());
    PackDir(*suite_dir_ / "b", B());
    Status s = CreatePatch(A(), B(), P(), DiffOptions{}, stats_);
    if (!s.ok()) setup_error_ = s.ToString();
  }
  static void TearDownTestSuite() {
    delete stats_;
    delete suite_dir_;
  }
  void SetUp() override {
    if (!setup_error_.empty() || !std::filesystem::exists(P())) {
      FAIL() << "suite setup failed: " << setup_error_;
    }
  }

  static std::string A() { return *suite_dir_ / "a.blz"; }
  static std::string ADir() { return *suite_dir_ / "a"; }  // the model A was packed from
  static std::string B() { return *suite_dir_ / "b.blz"; }
  static std::string P() { return *suite_dir_ / "a-b.blzpatch"; }

  // Copies the suite's patch into this test's directory, rewriting its header with `mutate`.
  // `mutate` sees the original payload offsets; afterwards each chunk's payload is taken from
  // [offset, offset + length) of the original payload section and the payloads are laid out
  // back to back again (so a mutation may drop or shorten payloads).
  std::string RewritePatch(const std::function<void(internal::PatchHeader*)>& mutate) {
    std::string bytes = testing::ReadFileBytes(P());
    auto h = internal::ParsePatch(AsBytes(bytes), bytes.size(), "patch");
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    std::string old_payload = bytes.substr(h->payload_start);
    mutate(&*h);
    std::string payload;
    auto relayout = [&](std::vector<internal::PatchChunk>* chunks) {
      for (auto& c : *chunks) {
        std::string part = old_payload.substr(c.offset, c.length);
        c.offset = payload.size();
        payload += part;
      }
    };
    relayout(&h->prefix_chunks);
    for (auto& piece : h->pieces) relayout(&piece.chunks);
    auto json = internal::SerializePatchHeader(*h);
    EXPECT_TRUE(json.ok());
    std::string path = tmp_ / ("mutated-" + std::to_string(++mutations_) + ".blzpatch");
    testing::WriteFileBytes(path, internal::EncodePatchFixedHeader(json->size()) + *json + payload);
    return path;
  }

  // Index in the patch of target tensor `name`.
  static size_t PieceOf(const internal::PatchHeader& h, const std::string& name) {
    auto b = formats::BlzArchive::Open(B());
    for (size_t i = 0; i < h.pieces.size(); ++i) {
      if (h.pieces[i].kind == formats::ArchivePiece::Kind::kTensor &&
          b->header().tensors[h.pieces[i].index].name == name) {
        return i;
      }
    }
    ADD_FAILURE() << "no piece for tensor " << name;
    return 0;
  }

  // Applies `patch` to `base` into a fresh path and expects failure with `code`; checks that
  // neither the output nor any temporary file is left behind.
  Status ExpectApplyFails(const std::string& base, const std::string& patch, Code code) {
    std::string out_dir = tmp_ / "out";
    std::filesystem::create_directories(out_dir);
    ApplyStats st;
    Status s = ApplyPatch(base, patch, out_dir + "/b.blz", &st);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_TRUE(ListDir(out_dir).empty()) << "left behind: " << ListDir(out_dir).front();
    std::filesystem::remove_all(out_dir);
    return s;
  }

  static testing::TempDir* suite_dir_;
  static DiffStats* stats_;
  static std::string setup_error_;
  testing::TempDir tmp_;
  int mutations_ = 0;
};

testing::TempDir* PatchTest::suite_dir_ = nullptr;
DiffStats* PatchTest::stats_ = nullptr;
std::string PatchTest::setup_error_;

TEST_F(PatchTest, RoundTripRebuildsTargetByteForByte) {
  std::string out = tmp_ / "rebuilt.blz";
  ApplyStats st;
  Status s = ApplyPatch(A(), P(), out, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string target = testing::ReadFileBytes(B());
  EXPECT_TRUE(testing::ReadFileBytes(out) == target) << "rebuilt archive differs from the target";
  EXPECT_EQ(st.target_digest, MakeDigest(Sha256Hex(target)));
  EXPECT_EQ(st.target_bytes, target.size());
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"rebuilt.blz"});

  // The patch names both archives.
  auto info = ReadPatchInfo(P());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->base_digest, MakeDigest(Sha256Hex(testing::ReadFileBytes(A()))));
  EXPECT_EQ(info->target_digest, st.target_digest);
  EXPECT_EQ(info->target_bytes, target.size());
  EXPECT_EQ(stats_->base_digest, info->base_digest);
  EXPECT_EQ(stats_->target_digest, info->target_digest);
  EXPECT_EQ(stats_->patch_bytes, std::filesystem::file_size(P()));
  EXPECT_EQ(stats_->target_bytes, target.size());
  EXPECT_LT(stats_->patch_bytes, stats_->target_bytes);
}

// issue 12: ApplyOptions::progress sees the target bytes rebuilt, on the calling thread,
// monotonic, ending at the target's size; and the output is the same as without it.
TEST_F(PatchTest, ApplyReportsMonotonicProgressOnTheCallingThread) {
  for (int threads : {1, 0}) {
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    bool other_thread = false;
    const std::thread::id caller = std::this_thread::get_id();
    ApplyOptions options;
    options.threads = threads;
    options.progress = [&](uint64_t done, uint64_t total) {
      calls.emplace_back(done, total);
      other_thread = other_thread || std::this_thread::get_id() != caller;
    };
    const std::string out = tmp_ / ("progress-" + std::to_string(threads) + ".blz");
    ApplyStats st;
    Status s = ApplyPatch(A(), P(), out, &st, options);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(testing::ReadFileBytes(out) == testing::ReadFileBytes(B()));
    EXPECT_FALSE(other_thread) << "threads " << threads;
    ASSERT_GE(calls.size(), 3u);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, st.target_bytes);
      EXPECT_LE(calls[i].first, calls[i].second);
      if (i > 0) {
        EXPECT_GE(calls[i].first, calls[i - 1].first) << "call " << i;
      }
    }
    EXPECT_EQ(calls.back().first, st.target_bytes);
  }
}

TEST_F(PatchTest, StatsClassifyEveryKindOfChange) {
  // B's tensors: model.* (embed, 2 layers x 4, norm, step, empty) and extra.* (6).
  // identical: layer 1 (4, frozen), model.step (integer), model.empty, extra.same
  // patched:   embed, layer 0 (4), norm, extra.big
  // added:     extra.new, extra.new_empty, extra.reshape (new shape), extra.retype (new dtype)
  // removed:   extra.gone
  EXPECT_EQ(stats_->identical, 7u);
  EXPECT_EQ(stats_->patched, 7u);
  EXPECT_EQ(stats_->added, 4u);
  EXPECT_EQ(stats_->removed, 1u);

  auto codec = [&](const std::string& name) {
    const PieceReport* r = FindReport(*stats_, name);
    return r == nullptr ? std::string("(missing)") : r->codec;
  };
  EXPECT_EQ(codec("model.layers.1.mlp.up.weight"), "identical");
  EXPECT_EQ(codec("extra.same"), "identical");
  EXPECT_EQ(codec("model.empty"), "identical");
  EXPECT_EQ(codec("extra.new_empty"), "empty");
  EXPECT_EQ(codec("extra.gone"), "removed");
  EXPECT_EQ(codec("tokenizer.txt"), "identical");  // unchanged file
  // Pieces without a base are coded by a codec that needs none (the codec picks which).
  for (const char* name : {"extra.new", "extra.reshape", "extra.retype", "config.json",
                           "docs/added.txt", "(archive header)"}) {
    std::string c = codec(name);
    EXPECT_TRUE(c == "zstd" || c == "planes") << name << ": " << c;
  }
  // Two unchanged chunks and a changed one, coded against the base.
  EXPECT_EQ(codec("extra.big").rfind("identical+", 0), 0u) << codec("extra.big");
  EXPECT_EQ(FindReport(*stats_, "removed.txt"), nullptr);

  // Identical pieces cost nothing; the bytes of all reports add up to the payload section.
  const PieceReport* same = FindReport(*stats_, "model.layers.1.attn.qkv.weight");
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->patch_bytes, 0u);
  EXPECT_GT(same->target_bytes, 0u);
  uint64_t payload = 0;
  for (const auto& r : stats_->pieces) payload += r.patch_bytes;
  auto h = internal::ParsePatch(AsBytes(testing::ReadFileBytes(P())), stats_->patch_bytes, "p");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(payload, h->payload_bytes);
  ASSERT_EQ(h->removed.size(), 1u);
  EXPECT_EQ(h->removed[0], "extra.gone");
}

TEST_F(PatchTest, LargeTensorIsCutIntoIndependentChunks) {
  std::string bytes = testing::ReadFileBytes(P());
  auto h = internal::ParsePatch(AsBytes(bytes), bytes.size(), "p");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const internal::PatchPiece& big = h->pieces[PieceOf(*h, "extra.big")];
  ASSERT_TRUE(big.base.has_value());
  ASSERT_EQ(big.chunks.size(), 3u);
  EXPECT_EQ(big.chunks[0].size, kChunkBytes);
  EXPECT_EQ(big.chunks[1].size, kChunkBytes);
  EXPECT_EQ(big.chunks[2].size, kBigElems * 4 - 2 * kChunkBytes);
  EXPECT_EQ(big.chunks[0].codec, Codec::kIdentical);
  EXPECT_NE(big.chunks[1].codec, Codec::kIdentical);
  EXPECT_TRUE(CodecNeedsBase(big.chunks[1].codec)) << CodecName(big.chunks[1].codec);
  EXPECT_EQ(big.chunks[2].codec, Codec::kIdentical);
  // 100 flipped bits cost far less than the chunk.
  EXPECT_LT(big.chunks[1].length, kChunkBytes / 100);
}

TEST_F(PatchTest, CountersSeeEveryTargetByteCoded) {
  ProgressCounters counters;
  DiffOptions o;
  o.threads = 2;
  o.counters = &counters;
  ASSERT_TRUE(CreatePatch(A(), B(), tmp_ / "p", o, nullptr).ok());
  // Every byte of the target but the zero padding between its pieces is coded once.
  auto b = formats::BlzArchive::Open(B());
  ASSERT_TRUE(b.ok());
  uint64_t coded = b->header().data_start;
  for (const auto& t : b->header().tensors) coded += t.length;
  for (const auto& r : b->header().raws) coded += r.length;
  EXPECT_EQ(counters.total.load(), coded);
  EXPECT_EQ(counters.done.load(), counters.total.load());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "p") == testing::ReadFileBytes(P()));
}

TEST_F(PatchTest, DiffIsDeterministicWhateverTheThreadCount) {
  DiffOptions one;
  one.threads = 1;
  DiffOptions three;
  three.threads = 3;
  ASSERT_TRUE(CreatePatch(A(), B(), tmp_ / "p1", one, nullptr).ok());
  ASSERT_TRUE(CreatePatch(A(), B(), tmp_ / "p3", three, nullptr).ok());
  std::string p1 = testing::ReadFileBytes(tmp_ / "p1");
  EXPECT_TRUE(p1 == testing::ReadFileBytes(tmp_ / "p3"));
  EXPECT_TRUE(p1 == testing::ReadFileBytes(P()));
  // Only the patches: no scratch files.
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"p1", "p3"}));
}

// Issue 28: models (directories, single files) are diffed in place, never packed: the patch is
// byte for byte the one of their packed archives, whichever sides are models and whatever the
// thread count; nothing but the patch is written.
TEST_F(PatchTest, DiffOfModelDirectoriesIsTheDiffOfTheirArchives) {
  const std::string bdir = *suite_dir_ / "b";
  const std::vector<std::string> suite_before = ListDir(suite_dir_->path());
  DiffStats st;
  Status s = CreatePatch(ADir(), bdir, tmp_ / "dd", DiffOptions{}, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string want = testing::ReadFileBytes(P());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "dd") == want);
  EXPECT_EQ(st.base_digest, stats_->base_digest);
  EXPECT_EQ(st.target_digest, stats_->target_digest);
  EXPECT_EQ(st.patched, stats_->patched);
  DiffOptions one;
  one.threads = 1;
  ASSERT_TRUE(CreatePatch(ADir(), bdir, tmp_ / "dd1", one, nullptr).ok());
  ASSERT_TRUE(CreatePatch(A(), bdir, tmp_ / "ad", DiffOptions{}, nullptr).ok());
  ASSERT_TRUE(CreatePatch(ADir(), B(), tmp_ / "da", DiffOptions{}, nullptr).ok());
  for (const char* name : {"dd1", "ad", "da"}) {
    EXPECT_TRUE(testing::ReadFileBytes(tmp_ / name) == want) << name;
  }
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"ad", "da", "dd", "dd1"}));
  EXPECT_EQ(ListDir(suite_dir_->path()), suite_before);
}

TEST_F(PatchTest, DiffRefusesModelsItCannotRead) {
  const std::string dir = tmp_ / "broken";
  std::filesystem::copy(*suite_dir_ / "b", dir, std::filesystem::copy_options::recursive);
  std::string bytes = testing::ReadFileBytes(dir + "/extra.safetensors");
  testing::WriteFileBytes(dir + "/extra.safetensors", bytes.substr(0, 20));
  testing::WriteFileBytes(tmp_ / "notes.txt", "not a model");
  Status s = CreatePatch(ADir(), dir, tmp_ / "p", DiffOptions{}, nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("target model"));
  EXPECT_THAT(s.message(), HasSubstr("extra.safetensors"));
  // Neither a model nor an archive: refused as an archive, naming the file.
  s = CreatePatch(tmp_ / "notes.txt", ADir(), tmp_ / "p", DiffOptions{}, nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("notes.txt"));
  s = CreatePatch(ADir(), tmp_ / "missing", tmp_ / "p", DiffOptions{}, nullptr);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "p"));
  // A known digest that is not the model's is refused by apply, as for archives.
  DiffOptions wrong;
  wrong.known_target_digest = stats_->base_digest;
  ASSERT_TRUE(CreatePatch(ADir(), *suite_dir_ / "b", tmp_ / "p", wrong, nullptr).ok());
  EXPECT_EQ(ApplyPatch(A(), tmp_ / "p", tmp_ / "out.blz", nullptr).code(), Code::kDigestMismatch);
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "out.blz"));
}

// Digests the caller already holds (the registry's verified blobs) replace the hashing: the
// patch is byte-identical; a malformed one is refused; a wrong one is caught by apply's
// SHA-256 check, never published.
TEST_F(PatchTest, KnownDigestsAreUsedInsteadOfHashing) {
  DiffOptions known;
  known.known_base_digest = MakeDigest(Sha256Hex(testing::ReadFileBytes(A())));
  known.known_target_digest = MakeDigest(Sha256Hex(testing::ReadFileBytes(B())));
  ASSERT_TRUE(CreatePatch(A(), B(), tmp_ / "known", known, nullptr).ok());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "known") == testing::ReadFileBytes(P()));
  DiffOptions full_known;
  full_known.known_target_digest = known.known_target_digest;
  ASSERT_TRUE(CreateFullPatch(B(), tmp_ / "full-known", full_known, nullptr).ok());
  ASSERT_TRUE(CreateFullPatch(B(), tmp_ / "full", DiffOptions{}, nullptr).ok());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "full-known") ==
              testing::ReadFileBytes(tmp_ / "full"));

  DiffOptions bad;
  bad.known_base_digest = "sha256:1234";
  EXPECT_EQ(CreatePatch(A(), B(), tmp_ / "bad", bad, nullptr).code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "bad"));

  DiffOptions wrong;
  wrong.known_target_digest = known.known_base_digest;  // well-formed, not B's
  ASSERT_TRUE(CreatePatch(A(), B(), tmp_ / "wrong", wrong, nullptr).ok());
  Status s = ApplyPatch(A(), tmp_ / "wrong", tmp_ / "out.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(known.known_target_digest));
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "out.blz"));
}

TEST_F(PatchTest, PatchOfAnArchiveToItselfIsAllReferences) {
  DiffStats st;
  ASSERT_TRUE(CreatePatch(B(), B(), tmp_ / "self", DiffOptions{}, &st).ok());
  EXPECT_EQ(st.patched + st.added + st.removed, 0u);
  EXPECT_EQ(st.identical, 18u);
  for (const auto& r : st.pieces) {
    if (r.name != "(archive header)") {
      EXPECT_EQ(r.patch_bytes, 0u) << r.name;
    }
  }
  ASSERT_TRUE(ApplyPatch(B(), tmp_ / "self", tmp_ / "out.blz", nullptr).ok());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "out.blz") == testing::ReadFileBytes(B()));
}

TEST_F(PatchTest, BaseIsRecognisedByDigestNotName) {
  std::string renamed = tmp_ / "whatever-name.blz";
  std::filesystem::copy_file(A(), renamed);
  ASSERT_TRUE(ApplyPatch(renamed, P(), tmp_ / "out.blz", nullptr).ok());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "out.blz") == testing::ReadFileBytes(B()));
}

TEST_F(PatchTest, WrongBaseIsRefusedWithBothDigests) {
  Status s = ExpectApplyFails(B(), P(), Code::kDigestMismatch);
  auto info = ReadPatchInfo(P());
  ASSERT_TRUE(info.ok());
  EXPECT_THAT(s.message(), HasSubstr(info->base_digest));
  EXPECT_THAT(s.message(), HasSubstr(MakeDigest(Sha256Hex(testing::ReadFileBytes(B())))));
}

TEST_F(PatchTest, BaseWithOneChangedTensorByteIsRefusedAsTheWrongBase) {
  // Same size and header as the real base, one data byte of a tensor the patch reads changed:
  // the base is only hashed once the rebuild fails, and the error must still say "wrong base".
  std::string bytes = testing::ReadFileBytes(A());
  auto archive = formats::BlzArchive::Open(A());
  ASSERT_TRUE(archive.ok());
  const auto& h = archive->header();
  int64_t t = -1;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    if (h.tensors[i].name == "extra.big") t = int64_t(i);
  }
  ASSERT_GE(t, 0);
  bytes[h.data_start + h.tensors[size_t(t)].offset + 5] ^= 0x01;
  std::string bad_base = tmp_ / "bad-base.blz";
  testing::WriteFileBytes(bad_base, bytes);
  Status s = ExpectApplyFails(bad_base, P(), Code::kDigestMismatch);
  EXPECT_THAT(s.message(), HasSubstr(MakeDigest(Sha256Hex(bytes))));
  EXPECT_THAT(s.message(), HasSubstr(ReadPatchInfo(P())->base_digest));
}

// Issue 28: a model directory as the base is read in place (formats::PackLayout), not packed:
// the same target, and nothing but the output appears anywhere.
TEST_F(PatchTest, BaseDirectoryIsReadInPlace) {
  const std::vector<std::string> suite_before = ListDir(suite_dir_->path());
  const std::string a_before = Sha256Hex(testing::ReadFileBytes(ADir() + "/extra.safetensors"));
  ApplyStats st;
  Status s = ApplyPatch(ADir(), P(), tmp_ / "out.blz", &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "out.blz") == testing::ReadFileBytes(B()));
  EXPECT_EQ(st.target_digest, ReadPatchInfo(P())->target_digest);
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"out.blz"});
  EXPECT_EQ(ListDir(suite_dir_->path()), suite_before);
  EXPECT_EQ(Sha256Hex(testing::ReadFileBytes(ADir() + "/extra.safetensors")), a_before);
  // Decoding only, and with one thread: the same answer.
  ApplyOptions one;
  one.threads = 1;
  s = VerifyPatch(ADir(), P(), &st, one);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(PatchTest, WrongBaseDirectoryIsRefusedWithTheDigestItPacksTo) {
  Status s = ExpectApplyFails(*suite_dir_ / "b", P(), Code::kDigestMismatch);
  EXPECT_THAT(s.message(), HasSubstr("packs to digest"));
  EXPECT_THAT(s.message(), HasSubstr(MakeDigest(Sha256Hex(testing::ReadFileBytes(B())))));
  EXPECT_THAT(s.message(), HasSubstr(ReadPatchInfo(P())->base_digest));
}

TEST_F(PatchTest, BaseDirectoryWithOneChangedTensorByteIsRefusedAsTheWrongBase) {
  // Same layout as the real base, one byte of a tensor the patch reads changed (extra.big is
  // the last tensor of extra.safetensors): found by the chunk checks, reported as a wrong base
  // with the digest the changed directory packs to.
  const std::string dir = tmp_ / "a-changed";
  std::filesystem::copy(ADir(), dir, std::filesystem::copy_options::recursive);
  std::string bytes = testing::ReadFileBytes(dir + "/extra.safetensors");
  bytes[bytes.size() - 5] ^= 0x01;
  testing::WriteFileBytes(dir + "/extra.safetensors", bytes);
  formats::PackStats packed;
  ASSERT_TRUE(formats::Pack(dir, tmp_ / "changed.blz", &packed).ok());
  Status s = ExpectApplyFails(dir, P(), Code::kDigestMismatch);
  EXPECT_THAT(s.message(), HasSubstr(packed.digest));
  EXPECT_THAT(s.message(), HasSubstr(ReadPatchInfo(P())->base_digest));
  // A file of another size moves every later piece: refused before decoding, as a wrong base.
  testing::WriteFileBytes(dir + "/tokenizer.txt", "a b c d e\n");
  s = ExpectApplyFails(dir, P(), Code::kDigestMismatch);
  EXPECT_THAT(s.message(), HasSubstr("packs to digest"));
}

TEST_F(PatchTest, BaseModelThatCannotBeReadIsRefused) {
  Status s = ExpectApplyFails(tmp_ / "missing", P(), Code::kNotFound);
  const std::string dir = tmp_ / "broken";
  std::filesystem::copy(ADir(), dir, std::filesystem::copy_options::recursive);
  std::string bytes = testing::ReadFileBytes(dir + "/extra.safetensors");
  testing::WriteFileBytes(dir + "/extra.safetensors", bytes.substr(0, 20));
  s = ExpectApplyFails(dir, P(), Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("extra.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("base model"));
}

TEST_F(PatchTest, ApplyWithOneThreadEqualsApplyWithAll) {
  ApplyOptions one;
  one.threads = 1;
  ASSERT_TRUE(ApplyPatch(A(), P(), tmp_ / "one.blz", nullptr, one).ok());
  ASSERT_TRUE(ApplyPatch(A(), P(), tmp_ / "all.blz", nullptr).ok());
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "one.blz") == testing::ReadFileBytes(B()));
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "all.blz") == testing::ReadFileBytes(B()));
  ApplyOptions bad;
  bad.threads = -1;
  EXPECT_EQ(ApplyPatch(A(), P(), tmp_ / "neg.blz", nullptr, bad).code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "neg.blz"));
}

TEST_F(PatchTest, CorruptedChunkPayloadIsRefusedNamingTensorAndChunk) {
  std::string bytes = testing::ReadFileBytes(P());
  auto h = internal::ParsePatch(AsBytes(bytes), bytes.size(), "p");
  ASSERT_TRUE(h.ok());
  const internal::PatchChunk& c = h->pieces[PieceOf(*h, "extra.big")].chunks[1];
  ASSERT_GT(c.length, 16u);
  // Every byte of the payload is either structure (caught by the decoder) or data (caught by
  // the chunk's xxh3): try several positions.
  for (uint64_t at : {uint64_t(0), c.length / 2, c.length - 1}) {
    std::string bad = bytes;
    bad[h->payload_start + c.offset + at] ^= 0x55;
    std::string path = tmp_ / "bad.blzpatch";
    testing::WriteFileBytes(path, bad);
    Status s = ExpectApplyFails(A(), path, Code::kCorruption);
    EXPECT_THAT(s.message(), HasSubstr("extra.big"));
    EXPECT_THAT(s.message(), HasSubstr("chunk 1"));
  }
}

TEST_F(PatchTest, WrongChunkHashIsRefusedNamingTensorAndChunk) {
  size_t piece = 0;
  std::string path = RewritePatch([&](internal::PatchHeader* h) {
    piece = PieceOf(*h, "extra.big");
    h->pieces[piece].chunks[2].xxh3 ^= 1;
  });
  Status s = ExpectApplyFails(A(), path, Code::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("extra.big"));
  EXPECT_THAT(s.message(), HasSubstr("chunk 2"));
}

TEST_F(PatchTest, WrongTargetDigestIsRefusedAtTheEnd) {
  std::string path = RewritePatch([](internal::PatchHeader* h) {
    h->target_digest = MakeDigest(std::string(64, 'a'));
  });
  Status s = ExpectApplyFails(A(), path, Code::kDigestMismatch);
  EXPECT_THAT(s.message(), HasSubstr(std::string(64, 'a')));
}

// issue 28: the registry verifies the patches it makes against the stored target instead of
// hashing the result. Every byte of the target counts: tensor data, the archive header, the
// zero padding between pieces; and only the target the patch names.
TEST_F(PatchTest, VerifyAgainstTheTargetAcceptsItAndNoOtherByte) {
  const std::string target = testing::ReadFileBytes(B());
  const std::string digest = MakeDigest(Sha256Hex(target));
  ApplyStats st;
  Status ok = VerifyPatchAgainst(A(), P(), B(), digest, &st);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(st.target_digest, digest);
  EXPECT_EQ(st.target_bytes, target.size());
  ApplyOptions one;
  one.threads = 1;
  EXPECT_TRUE(VerifyPatchAgainst(A(), P(), B(), digest, &st, one).ok());

  // Where to flip a byte: inside extra.big's second chunk, inside the header JSON, in the
  // padding after a piece whose length is not a multiple of 64.
  auto b = formats::BlzArchive::Open(B());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const formats::ArchiveHeader& h = b->header();
  uint64_t big = 0, gap = 0;
  for (const formats::ArchiveTensor& t : h.tensors) {
    if (t.name == "extra.big") big = h.data_start + t.offset + kChunkBytes + 12345;
    if (gap == 0 && t.length % 64 != 0) gap = h.data_start + t.offset + t.length;
  }
  ASSERT_NE(big, 0u);
  ASSERT_NE(gap, 0u);
  struct Flip {
    uint64_t at;
    const char* where;
  };
  for (const Flip& f : {Flip{big, "extra.big"}, Flip{40, "archive header"}, Flip{gap, ""}}) {
    std::string bad = target;
    bad[f.at] ^= 0x20;
    const std::string path = tmp_ / "expected.blz";
    testing::WriteFileBytes(path, bad);
    Status s = VerifyPatchAgainst(A(), P(), path, digest, &st);
    EXPECT_EQ(s.code(), Code::kDigestMismatch) << "byte " << f.at << ": " << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(f.where));
    EXPECT_THAT(s.message(), HasSubstr("differ from the expected archive"));
  }
  // A target of another size; a digest the patch does not name; no such target file.
  const std::string short_path = tmp_ / "short.blz";
  testing::WriteFileBytes(short_path, target.substr(0, target.size() - 1));
  Status s = VerifyPatchAgainst(A(), P(), short_path, digest, &st);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(std::to_string(target.size() - 1)));
  s = VerifyPatchAgainst(A(), P(), B(), MakeDigest(std::string(64, 'b')), &st);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(std::string(64, 'b')));
  EXPECT_EQ(VerifyPatchAgainst(A(), P(), tmp_ / "missing.blz", digest, &st).code(),
            Code::kNotFound);
  // The wrong base is still reported as such.
  s = VerifyPatchAgainst(B(), P(), B(), digest, &st);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("needs base"));
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"expected.blz", "short.blz"}));
}

TEST_F(PatchTest, TruncatedPatchIsRefused) {
  std::string bytes = testing::ReadFileBytes(P());
  for (size_t keep : {bytes.size() - 1, size_t(200), size_t(30), size_t(10), size_t(0)}) {
    std::string path = tmp_ / ("cut-" + std::to_string(keep));
    testing::WriteFileBytes(path, bytes.substr(0, keep));
    EXPECT_EQ(ReadPatchInfo(path).status().code(), Code::kCorruption) << keep;
    Status s = ExpectApplyFails(A(), path, Code::kCorruption);
    EXPECT_THAT(s.message(), HasSubstr(path));
  }
}

TEST_F(PatchTest, ExistingOutputIsRefused) {
  std::string out = tmp_ / "exists.blz";
  testing::WriteFileBytes(out, "keep me");
  EXPECT_EQ(ApplyPatch(A(), P(), out, nullptr).code(), Code::kAlreadyExists);
  EXPECT_EQ(testing::ReadFileBytes(out), "keep me");
  EXPECT_EQ(CreatePatch(A(), B(), out, DiffOptions{}, nullptr).code(), Code::kAlreadyExists);
  EXPECT_EQ(testing::ReadFileBytes(out), "keep me");
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"exists.blz"});
}

TEST_F(PatchTest, BadInputsAreRefused) {
  EXPECT_EQ(ReadPatchInfo(tmp_ / "missing").status().code(), Code::kNotFound);
  EXPECT_EQ(ReadPatchInfo(A()).status().code(), Code::kCorruption);  // not a patch
  EXPECT_EQ(CreatePatch(tmp_ / "missing", B(), tmp_ / "p", DiffOptions{}, nullptr).code(),
            Code::kNotFound);
  DiffOptions bad;
  bad.threads = -1;
  EXPECT_EQ(CreatePatch(A(), B(), tmp_ / "p", bad, nullptr).code(), Code::kInvalidArgument);
  bad = DiffOptions{};
  bad.zstd_level = 0;
  EXPECT_EQ(CreatePatch(A(), B(), tmp_ / "p", bad, nullptr).code(), Code::kInvalidArgument);
  EXPECT_TRUE(ListDir(tmp_.path()).empty());
}

// Headers that parse but do not fit the archives: each is refused before anything is written.
TEST_F(PatchTest, PiecesThatDoNotFitTheArchivesAreRefused) {
  using internal::PatchHeader;
  struct Case {
    const char* what;
    std::function<void(PatchHeader*)> mutate;
    const char* message;
  };
  auto identical_piece = [](const PatchHeader& h) {
    for (size_t i = 0; i < h.pieces.size(); ++i) {
      const auto& p = h.pieces[i];
      if (p.base && !p.chunks.empty() &&
          std::all_of(p.chunks.begin(), p.chunks.end(),
                      [](const auto& c) { return c.codec == Codec::kIdentical; })) {
        return i;
      }
    }
    return size_t(0);
  };
  std::vector<Case> cases = {
      {"a piece missing",
       [&](PatchHeader* h) { h->pieces.erase(h->pieces.begin() + long(identical_piece(*h))); },
       "pieces"},
      {"pieces out of order",
       [&](PatchHeader* h) {
         size_t i = identical_piece(*h);
         h->pieces[i].index += 1;
       },
       "data-section order"},
      {"base index past the base's tensors",
       [&](PatchHeader* h) { h->pieces[identical_piece(*h)].base = 100000; },
       "base index"},
      {"base of another shape",
       [&](PatchHeader* h) {
         h->pieces[PieceOf(*h, "model.layers.0.mlp.up.weight")].base =
             *h->pieces[PieceOf(*h, "model.norm.weight")].base;
       },
       "dtype and shape"},
      {"xor chunk without a base",
       [&](PatchHeader* h) { h->pieces[PieceOf(*h, "extra.big")].base.reset(); },
       "needs a base"},
      {"prefix coded against nothing",
       [](PatchHeader* h) {
         h->prefix_chunks[0].codec = Codec::kIdentical;
         h->prefix_chunks[0].length = 0;
       },
       "needs a base"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::string path = RewritePatch(c.mutate);
    Status s = ExpectApplyFails(A(), path, Code::kCorruption);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(PatchNamesTest, SameTensorNameInTwoFilesIsMatchedByFilePath) {
  testing::TempDir dir;
  std::string w1 = F32Bytes(64, 11), w2 = F32Bytes(64, 12);
  std::string w2b = w2;
  w2b[5] ^= 0x10;
  WriteTensors(dir / "a/f1.safetensors", {{"w", DType::kF32, {64}, w1}});
  WriteTensors(dir / "a/f2.safetensors", {{"w", DType::kF32, {64}, w2}});
  WriteTensors(dir / "b/f1.safetensors", {{"w", DType::kF32, {64}, w1}});
  WriteTensors(dir / "b/f2.safetensors", {{"w", DType::kF32, {64}, w2b}});
  PackDir(dir / "a", dir / "a.blz");
  PackDir(dir / "b", dir / "b.blz");
  DiffStats st;
  Status s = CreatePatch(dir / "a.blz", dir / "b.blz", dir / "p", DiffOptions{}, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_NE(FindReport(st, "f1.safetensors:w"), nullptr);
  ASSERT_NE(FindReport(st, "f2.safetensors:w"), nullptr);
  EXPECT_EQ(FindReport(st, "f1.safetensors:w")->codec, "identical");
  EXPECT_NE(FindReport(st, "f2.safetensors:w")->codec, "identical");
  EXPECT_EQ(st.identical, 1u);
  EXPECT_EQ(st.patched, 1u);
  s = ApplyPatch(dir / "a.blz", dir / "p", dir / "out.blz", nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(dir / "out.blz") == testing::ReadFileBytes(dir / "b.blz"));
}

// Identical tensors are found by content, not only by name (issue 27, "identical tensors are
// stored once"): a tensor renamed and moved to another file, and one whose same-named tensor in
// A differs while another of A holds its very bytes, both cost only `identical` chunks. A
// twin of another dtype or shape is not a base.
TEST(PatchNamesTest, IdenticalTensorsAreMatchedByContentWhateverTheirName) {
  testing::TempDir dir;
  const std::string enc = F32Bytes(50000, 21), x = F32Bytes(30000, 22), y = F32Bytes(30000, 23);
  const std::string head = F32Bytes(4096, 24);
  WriteTensors(dir / "a/model.safetensors", {{"encoder.w", DType::kF32, {50000}, enc},
                                             {"x", DType::kF32, {30000}, x},
                                             {"y", DType::kF32, {30000}, y}});
  WriteTensors(dir / "b/vision/model.safetensors",
               {{"vision.encoder.w", DType::kF32, {50000}, enc},  // renamed, moved
                {"x", DType::kF32, {30000}, y},                   // A's y under A's name x
                {"y2", DType::kF32, {100, 300}, y},               // y's bytes, another shape
                {"head", DType::kF32, {4096}, head}});            // new
  PackDir(dir / "a", dir / "a.blz");
  PackDir(dir / "b", dir / "b.blz");
  DiffStats st;
  Status s = CreatePatch(dir / "a.blz", dir / "b.blz", dir / "p", DiffOptions{}, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const char* name : {"vision.encoder.w", "x"}) {
    const PieceReport* r = FindReport(st, name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->codec, "identical") << name;
  }
  ASSERT_NE(FindReport(st, "y2"), nullptr);
  EXPECT_NE(FindReport(st, "y2")->codec, "identical");
  EXPECT_EQ(st.identical, 2u);
  // What is left to code is y2 and head (the new tensors), not the 320 KB found in A.
  EXPECT_LT(std::filesystem::file_size(dir / "p"), (30000 + 4096) * 4 + 4096);
  s = ApplyPatch(dir / "a.blz", dir / "p", dir / "out.blz", nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(dir / "out.blz") == testing::ReadFileBytes(dir / "b.blz"));
}

// Real base -> fine-tune pairs from the shared corpus. `config` is the pair's config file,
// `config_unchanged` whether its bytes are the same in both (corpus/PROVENANCE.md).
void CorpusRoundTrip(const std::string& base_dir, const std::string& target_dir,
                     const std::string& config, bool config_unchanged) {
  testing::TempDir dir;
  PackDir(base_dir, dir / "a.blz");
  PackDir(target_dir, dir / "b.blz");
  DiffStats st;
  Status s = CreatePatch(dir / "a.blz", dir / "b.blz", dir / "p.blzpatch", DiffOptions{}, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint64_t target_size = std::filesystem::file_size(dir / "b.blz");
  EXPECT_LT(std::filesystem::file_size(dir / "p.blzpatch"), target_size);
  EXPECT_EQ(st.patch_bytes, std::filesystem::file_size(dir / "p.blzpatch"));
  const PieceReport* cfg = FindReport(st, config);
  ASSERT_NE(cfg, nullptr);
  EXPECT_EQ(cfg->codec == "identical", config_unchanged) << cfg->codec;
  EXPECT_GT(st.patched, 0u);
  ApplyStats as;
  s = ApplyPatch(dir / "a.blz", dir / "p.blzpatch", dir / "rebuilt.blz", &as);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto want = Sha256FileHex(dir / "b.blz");
  auto got = Sha256FileHex(dir / "rebuilt.blz");
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*got, *want);
  EXPECT_EQ(as.target_digest, MakeDigest(*want));
  EXPECT_EQ(st.target_digest, MakeDigest(*want));
  EXPECT_EQ(as.target_bytes, target_size);
}

TEST(PatchCorpusTest, TinyGpt2BaseToFineTune) {
  BLZ_REQUIRE_CORPUS(corpus);
  CorpusRoundTrip(corpus + "/tiny-gpt2/base", corpus + "/tiny-gpt2/ft-v1", "config.json", false);
}

TEST(PatchCorpusTest, RobertaLoraCheckpoints) {
  BLZ_REQUIRE_CORPUS(corpus);
  CorpusRoundTrip(corpus + "/roberta-lora/checkpoint-2000", corpus + "/roberta-lora/checkpoint-2400",
                  "adapter_config.json", true);
}

TEST(PatchCorpusTest, UnrelatedModelsRoundTripWithoutBases) {
  BLZ_REQUIRE_CORPUS(corpus);
  testing::TempDir dir;
  PackDir(corpus + "/gguf/llama-2-tiny-random.gguf", dir / "a.blz");
  PackDir(corpus + "/tiny-gpt2/base", dir / "b.blz");
  auto a = formats::BlzArchive::Open(dir / "a.blz");
  auto b = formats::BlzArchive::Open(dir / "b.blz");
  ASSERT_TRUE(a.ok() && b.ok());
  DiffStats st;
  Status s = CreatePatch(dir / "a.blz", dir / "b.blz", dir / "p", DiffOptions{}, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(st.identical + st.patched, 0u);
  EXPECT_EQ(st.added, b->header().tensors.size());
  EXPECT_EQ(st.removed, a->header().tensors.size());
  s = ApplyPatch(dir / "a.blz", dir / "p", dir / "out.blz", nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(dir / "out.blz") == testing::ReadFileBytes(dir / "b.blz"));
}

// A single .safetensors file and a single .gguf file as the base, read in place: a patch of
// each archive to itself is all references to the base (identical chunks), so every byte of
// the target comes from the base's file.
TEST(PatchCorpusTest, SingleFileBasesAreReadInPlace) {
  BLZ_REQUIRE_CORPUS(corpus);
  for (const std::string& input : {corpus + "/adapters/opt125m-lora-bf16/adapter_model.safetensors",
                                  corpus + "/gguf/llama-2-tiny-random.gguf"}) {
    SCOPED_TRACE(input);
    testing::TempDir dir;
    PackDir(input, dir / "a.blz");
    DiffStats st;
    Status s = CreatePatch(dir / "a.blz", dir / "a.blz", dir / "p", DiffOptions{}, &st);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_GT(st.identical, 0u);
    s = ApplyPatch(input, dir / "p", dir / "out.blz", nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(testing::ReadFileBytes(dir / "out.blz") == testing::ReadFileBytes(dir / "a.blz"));
    // And diffed in place: the same patch.
    s = CreatePatch(input, input, dir / "p2", DiffOptions{}, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(testing::ReadFileBytes(dir / "p2") == testing::ReadFileBytes(dir / "p"));
  }
}

TEST(PatchCorpusTest, GgufFileToModelDirectoryInPlaceIsTheArchivesPatch) {
  BLZ_REQUIRE_CORPUS(corpus);
  testing::TempDir dir;
  const std::string gguf = corpus + "/gguf/llama-2-tiny-random.gguf";
  const std::string gpt2 = corpus + "/tiny-gpt2/base";
  PackDir(gguf, dir / "a.blz");
  PackDir(gpt2, dir / "b.blz");
  ASSERT_TRUE(CreatePatch(dir / "a.blz", dir / "b.blz", dir / "p", DiffOptions{}, nullptr).ok());
  Status s = CreatePatch(gguf, gpt2, dir / "p2", DiffOptions{}, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(dir / "p2") == testing::ReadFileBytes(dir / "p"));
}

}  // namespace
}  // namespace blz::patcher
