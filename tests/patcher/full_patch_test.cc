// Tests for full patches (patcher/patch.h: CreateFullPatch / ApplyFullPatch / VerifyPatch): an
// archive coded with no base, round trips on generated models and the corpus, and the errors
// for a full patch given a base and a patch with a base given none.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "patcher/patch.h"
#include "patcher/patch_format.h"
#include "patcher/tensor_codec.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::patcher {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

void PackDir(const std::string& input, const std::string& out) {
  formats::PackStats ps;
  Status st = formats::Pack(input, out, &ps);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

internal::PatchHeader ParseFile(const std::string& path) {
  std::string bytes = testing::ReadFileBytes(path);
  auto h = internal::ParsePatch(AsBytes(bytes), bytes.size(), path);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return h.ok() ? *h : internal::PatchHeader{};
}

// Packs `input`, makes its full patch, applies it and checks the archive comes back byte for
// byte; returns (patch bytes, archive bytes).
std::pair<uint64_t, uint64_t> FullRoundTrip(const std::string& input) {
  testing::TempDir dir;
  PackDir(input, dir / "m.blz");
  const std::string archive = testing::ReadFileBytes(dir / "m.blz");
  const std::string digest = MakeDigest(Sha256Hex(archive));
  auto b = formats::BlzArchive::Open(dir / "m.blz");
  EXPECT_TRUE(b.ok());

  DiffStats st;
  Status s = CreateFullPatch(dir / "m.blz", dir / "m.blzpatch", DiffOptions{}, &st);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {0, 0};
  EXPECT_EQ(st.base_digest, "");
  EXPECT_EQ(st.target_digest, digest);
  EXPECT_EQ(st.target_bytes, archive.size());
  EXPECT_EQ(st.patch_bytes, fs::file_size(dir / "m.blzpatch"));
  EXPECT_EQ(st.added, b->header().tensors.size());
  EXPECT_EQ(st.identical + st.patched + st.removed, 0u);

  // The header: no base, version 2, only codecs that need none.
  internal::PatchHeader h = ParseFile(dir / "m.blzpatch");
  EXPECT_FALSE(h.has_base);
  EXPECT_EQ(h.version, 2u);
  EXPECT_TRUE(h.removed.empty());
  for (const auto& piece : h.pieces) {
    EXPECT_FALSE(piece.base.has_value());
    for (const auto& c : piece.chunks) {
      EXPECT_FALSE(CodecNeedsBase(c.codec)) << CodecName(c.codec);
    }
  }
  auto info = ReadPatchInfo(dir / "m.blzpatch");
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  if (info.ok()) {
    EXPECT_TRUE(info->full);
    EXPECT_EQ(info->base_digest, "");
    EXPECT_EQ(info->target_digest, digest);
    EXPECT_EQ(info->target_bytes, archive.size());
    EXPECT_EQ(info->format_version, 2u);
  }

  ApplyStats vs;
  s = VerifyPatch("", dir / "m.blzpatch", &vs);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(vs.target_digest, digest);
  // As the registry verifies it: against the archive itself, compared instead of hashed.
  ApplyStats va;
  s = VerifyPatchAgainst("", dir / "m.blzpatch", dir / "m.blz", digest, &va);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(va.target_digest, digest);
  EXPECT_EQ(va.target_bytes, archive.size());

  ApplyStats as;
  ApplyOptions options;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  options.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  s = ApplyFullPatch(dir / "m.blzpatch", dir / "rebuilt.blz", &as, options);
  EXPECT_TRUE(s.ok()) << s.ToString();
  // issue 12: progress over the target bytes, monotonic, ending at the archive's size.
  EXPECT_GE(calls.size(), 2u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, archive.size());
    if (i > 0) {
      EXPECT_GE(calls[i].first, calls[i - 1].first) << "call " << i;
    }
  }
  if (!calls.empty()) {
    EXPECT_EQ(calls.back().first, archive.size());
  }
  EXPECT_EQ(as.target_digest, digest);
  EXPECT_EQ(as.target_bytes, archive.size());
  EXPECT_TRUE(testing::ReadFileBytes(dir / "rebuilt.blz") == archive)
      << "rebuilt archive differs from the original";
  EXPECT_EQ(ListDir(dir.path()), (std::vector<std::string>{"m.blz", "m.blzpatch", "rebuilt.blz"}));
  return {st.patch_bytes, archive.size()};
}

TEST(FullPatchTest, GeneratedModelRoundTrips) {
  testing::TempDir dir;
  testing::TestModelOptions o;
  o.with_edge_tensors = true;  // a 0-rank I64 and an empty tensor
  o.with_subdir = true;
  o.shards = 2;
  o.hidden = 64;
  testing::WriteTestModel(dir / "model", o);
  auto [patch, archive] = FullRoundTrip(dir / "model");
  // F32/BF16/F16 values in [-0.5, 0.5): the exponent planes compress.
  EXPECT_LT(patch, archive);
}

TEST(FullPatchTest, ModelLargerThanAChunkRoundTrips) {
  testing::TempDir dir;
  testing::TestModelOptions o;
  o.hidden = 256;
  o.vocab = 8192;  // embed_tokens: 8 MiB of F32, three chunks
  testing::WriteTestModel(dir / "model", o);
  auto [patch, archive] = FullRoundTrip(dir / "model");
  EXPECT_LT(patch, archive);
}

TEST(FullPatchTest, CorpusModelsRoundTripSmallerThanTheirArchives) {
  BLZ_REQUIRE_CORPUS(corpus);
  for (const char* input : {"/tiny-gpt2/base", "/roberta-lora/checkpoint-2400",
                            "/adapters/opt125m-lora-bf16", "/gguf/llama-2-tiny-random.gguf"}) {
    SCOPED_TRACE(input);
    auto [patch, archive] = FullRoundTrip(corpus + input);
    EXPECT_LT(patch, archive);
    std::cout << "[ full     ] " << input << ": archive " << archive << " bytes, full patch "
              << patch << " bytes (" << 100.0 * double(patch) / double(archive) << "%)\n";
  }
}

class FullPatchErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestModelOptions a;
    testing::WriteTestModel(dir_ / "a", a);
    testing::TestModelOptions b = a;
    b.perturb_scale = 0.01;
    testing::WriteTestModel(dir_ / "b", b);
    PackDir(dir_ / "a", A());
    PackDir(dir_ / "b", B());
    ASSERT_TRUE(CreateFullPatch(B(), Full(), DiffOptions{}, nullptr).ok());
    ASSERT_TRUE(CreatePatch(A(), B(), Delta(), DiffOptions{}, nullptr).ok());
    fs::create_directories(dir_ / "out");
  }
  std::string A() const { return dir_ / "a.blz"; }
  std::string B() const { return dir_ / "b.blz"; }
  std::string Full() const { return dir_ / "b.full.blzpatch"; }
  std::string Delta() const { return dir_ / "a-b.blzpatch"; }
  std::string Out() const { return dir_ / "out/b.blz"; }
  bool OutEmpty() const { return fs::is_empty(dir_ / "out"); }

  testing::TempDir dir_;
};

TEST_F(FullPatchErrorsTest, FullPatchGivenABaseIsRefused) {
  Status s = ApplyPatch(A(), Full(), Out(), nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("full patch"));
  EXPECT_THAT(s.message(), HasSubstr("needs no base"));
  s = VerifyPatch(A(), Full(), nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(OutEmpty());
}

TEST_F(FullPatchErrorsTest, PatchWithABaseGivenNoneIsRefusedNamingTheBase) {
  auto info = ReadPatchInfo(Delta());
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->full);
  Status s = ApplyFullPatch(Delta(), Out(), nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("needs base archive " + info->base_digest));
  s = VerifyPatch("", Delta(), nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(OutEmpty());
  // With its base it verifies.
  ApplyStats st;
  s = VerifyPatch(A(), Delta(), &st);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(st.target_digest, info->target_digest);
}

TEST_F(FullPatchErrorsTest, CorruptedFullPatchFailsVerifyAndApply) {
  std::string bytes = testing::ReadFileBytes(Full());
  internal::PatchHeader h = ParseFile(Full());
  // The largest payload: flip a byte in its middle.
  const internal::PatchChunk* biggest = nullptr;
  for (const auto& p : h.pieces) {
    for (const auto& c : p.chunks) {
      if (biggest == nullptr || c.length > biggest->length) biggest = &c;
    }
  }
  ASSERT_NE(biggest, nullptr);
  bytes[h.payload_start + biggest->offset + biggest->length / 2] ^= 0x5a;
  const std::string bad = dir_ / "bad.blzpatch";
  testing::WriteFileBytes(bad, bytes);
  EXPECT_EQ(VerifyPatch("", bad, nullptr).code(), Code::kCorruption);
  Status s = ApplyFullPatch(bad, Out(), nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("chunk"));
  EXPECT_TRUE(OutEmpty());
}

TEST_F(FullPatchErrorsTest, WrongTargetDigestIsRefusedAtTheEnd) {
  std::string bytes = testing::ReadFileBytes(Full());
  internal::PatchHeader h = ParseFile(Full());
  std::string payload = bytes.substr(h.payload_start);
  h.target_digest = MakeDigest(std::string(64, 'e'));
  auto json = internal::SerializePatchHeader(h);
  ASSERT_TRUE(json.ok());
  const std::string bad = dir_ / "wrong-target.blzpatch";
  testing::WriteFileBytes(bad, internal::EncodePatchFixedHeader(json->size()) + *json + payload);
  EXPECT_EQ(VerifyPatch("", bad, nullptr).code(), Code::kDigestMismatch);
  Status s = ApplyFullPatch(bad, Out(), nullptr);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(std::string(64, 'e')));
  EXPECT_TRUE(OutEmpty());
}

TEST_F(FullPatchErrorsTest, ExistingOutputIsRefused) {
  testing::WriteFileBytes(Out(), "keep me");
  EXPECT_EQ(ApplyFullPatch(Full(), Out(), nullptr).code(), Code::kAlreadyExists);
  EXPECT_EQ(CreateFullPatch(B(), Out(), DiffOptions{}, nullptr).code(), Code::kAlreadyExists);
  EXPECT_EQ(testing::ReadFileBytes(Out()), "keep me");
  EXPECT_EQ(ApplyFullPatch(Full(), "", nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(CreateFullPatch(dir_ / "missing.blz", dir_ / "x", DiffOptions{}, nullptr).code(),
            Code::kNotFound);
}

TEST_F(FullPatchErrorsTest, DeterministicWhateverTheThreadCount) {
  DiffOptions one;
  one.threads = 1;
  DiffOptions three;
  three.threads = 3;
  ASSERT_TRUE(CreateFullPatch(B(), dir_ / "p1", one, nullptr).ok());
  ASSERT_TRUE(CreateFullPatch(B(), dir_ / "p3", three, nullptr).ok());
  const std::string p1 = testing::ReadFileBytes(dir_ / "p1");
  EXPECT_TRUE(p1 == testing::ReadFileBytes(dir_ / "p3"));
  EXPECT_TRUE(p1 == testing::ReadFileBytes(Full()));
}

TEST_F(FullPatchErrorsTest, CancelledCreationWritesNothing) {
  std::atomic<bool> cancel{true};
  DiffOptions o;
  o.cancel = &cancel;
  Status s = CreateFullPatch(B(), dir_ / "out/cancelled", o, nullptr);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("cancelled"));
  s = CreatePatch(A(), B(), dir_ / "out/cancelled", o, nullptr);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_TRUE(OutEmpty());
}

TEST_F(FullPatchErrorsTest, Version1PatchWithABaseStillApplies) {
  // A patch as a version-1 writer made it: the same bytes with version 1 in the fixed header.
  std::string bytes = testing::ReadFileBytes(Delta());
  StoreLE32(reinterpret_cast<uint8_t*>(bytes.data()) + 8, 1);
  const std::string v1 = dir_ / "v1.blzpatch";
  testing::WriteFileBytes(v1, bytes);
  auto info = ReadPatchInfo(v1);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->format_version, 1u);
  Status s = ApplyPatch(A(), v1, Out(), nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(Out()) == testing::ReadFileBytes(B()));
  // A future version is refused clearly.
  StoreLE32(reinterpret_cast<uint8_t*>(bytes.data()) + 8, 3);
  testing::WriteFileBytes(v1, bytes);
  s = ApplyPatch(A(), v1, dir_ / "out/v3.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("patch format version 3"));
}

}  // namespace
}  // namespace blz::patcher
