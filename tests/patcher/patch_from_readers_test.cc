// Tests for CreatePatchFromReaders (patcher/patch.h): the patch between two archives read
// through ArchiveReaders (plain files, full patches, chain links of two siblings over one
// parent) is byte for byte the patch CreatePatch makes of the two files, and it applies to the
// target; a damaged chunk of either side is refused naming the patch, and nothing is written.
// VerifyReader compares or hashes a whole archive read through a chain. Also: the codec
// choice made from a tensor's sample slices (ChooseCodecOnSample) is the one
// ChooseCodec makes from the whole tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "patcher/archive_reader.h"
#include "patcher/patch.h"
#include "patcher/patch_format.h"
#include "patcher/patch_reader.h"
#include "patcher/tensor_codec.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::patcher {
namespace {

using ::testing::HasSubstr;

// A parent and two siblings made from it (as a registry stores fine-tunes of one base): the
// archives, their digests, the parent's full patch and a link from the parent to each sibling.
struct Siblings {
  std::string parent, a, b;                    // archive paths
  std::string parent_digest, a_digest, b_digest;
  std::string parent_full, a_full, b_full;     // full patches
  std::string a_link, b_link;                  // parent -> a, parent -> b
};

Siblings MakeSiblings(const testing::TempDir& dir) {
  Siblings s;
  testing::TestModelOptions o;
  o.layers = 2;
  o.hidden = 264;
  o.vocab = 8192;  // an embedding of 8.6 MB: tensors of several chunks
  o.with_edge_tensors = true;
  auto pack = [&](const std::string& name, const testing::TestModelOptions& opts,
                  std::string* digest) {
    testing::WriteTestModel(dir / name, opts);
    std::string path = dir / (name + ".blz");
    formats::PackStats ps;
    Status st = formats::Pack(dir / name, path, &ps);
    EXPECT_TRUE(st.ok()) << st.ToString();
    *digest = MakeDigest(Sha256Hex(testing::ReadFileBytes(path)));
    return path;
  };
  s.parent = pack("parent", o, &s.parent_digest);
  testing::TestModelOptions oa = o;
  oa.perturb_scale = 0.01;
  oa.frozen_prefix = "model.layers.1";
  s.a = pack("a", oa, &s.a_digest);
  testing::TestModelOptions ob = o;
  ob.perturb_scale = 0.02;
  ob.perturb_seed = 7;
  ob.frozen_prefix = "model.layers.0";
  s.b = pack("b", ob, &s.b_digest);
  DiffStats st;
  s.parent_full = dir / "parent.full";
  s.a_full = dir / "a.full";
  s.b_full = dir / "b.full";
  s.a_link = dir / "a.link";
  s.b_link = dir / "b.link";
  EXPECT_TRUE(CreateFullPatch(s.parent, s.parent_full, {}, &st).ok());
  EXPECT_TRUE(CreateFullPatch(s.a, s.a_full, {}, &st).ok());
  EXPECT_TRUE(CreateFullPatch(s.b, s.b_full, {}, &st).ok());
  EXPECT_TRUE(CreatePatch(s.parent, s.a, s.a_link, {}, &st).ok());
  EXPECT_TRUE(CreatePatch(s.parent, s.b, s.b_link, {}, &st).ok());
  return s;
}

std::shared_ptr<const ArchiveReader> File(const std::string& path, const std::string& digest) {
  auto r = ArchiveFileReader::Open(path, digest);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::shared_ptr<const ArchiveReader>(*r) : nullptr;
}

std::shared_ptr<const ArchiveReader> Patch(const std::string& path,
                                           std::shared_ptr<const ArchiveReader> parent = nullptr) {
  auto r = PatchReader::Open(path, std::move(parent));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::shared_ptr<const ArchiveReader>(*r) : nullptr;
}

// The patch from sibling a to sibling b, whether both are files, full patches or chain links
// over the parent (itself a full patch or a file), is the patch CreatePatch makes of the two
// files, and it rebuilds b from a.
TEST(PatchFromReadersTest, TheSamePatchAsFromTheFilesWhateverTheArchivesAreStoredAs) {
  testing::TempDir dir;
  const Siblings s = MakeSiblings(dir);
  DiffStats want_stats;
  ASSERT_TRUE(CreatePatch(s.a, s.b, dir / "want.patch", {}, &want_stats).ok());
  const std::string want = testing::ReadFileBytes(dir / "want.patch");
  ASSERT_GT(want_stats.identical, 0u) << "the siblings should share tensors";
  ASSERT_GT(want_stats.patched, 0u) << "the siblings should differ in some tensors";

  auto parent_full = Patch(s.parent_full);
  auto parent_file = File(s.parent, s.parent_digest);
  struct Case {
    std::string name;
    std::shared_ptr<const ArchiveReader> a, b;
  };
  const std::vector<Case> cases = {
      {"files", File(s.a, s.a_digest), File(s.b, s.b_digest)},
      {"full patches", Patch(s.a_full), Patch(s.b_full)},
      {"links over the parent's full patch", Patch(s.a_link, parent_full),
       Patch(s.b_link, parent_full)},
      {"links over the parent's file", Patch(s.a_link, parent_file),
       Patch(s.b_link, parent_file)},
      {"a file and a link", File(s.a, s.a_digest), Patch(s.b_link, parent_full)},
  };
  for (int threads : {1, 3}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SCOPED_TRACE(c.name + ", threads " + std::to_string(threads));
      ASSERT_NE(c.a, nullptr);
      ASSERT_NE(c.b, nullptr);
      const std::string out = dir / ("got-" + std::to_string(threads) + "-" + std::to_string(i));
      DiffOptions o;
      o.threads = threads;
      DiffStats st;
      Status status = CreatePatchFromReaders(c.a, c.b, out, o, &st);
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_TRUE(testing::ReadFileBytes(out) == want) << "not CreatePatch's patch";
      EXPECT_EQ(st.base_digest, s.a_digest);
      EXPECT_EQ(st.target_digest, s.b_digest);
      EXPECT_EQ(st.identical, want_stats.identical);
      EXPECT_EQ(st.patched, want_stats.patched);
      EXPECT_EQ(st.patch_bytes, want_stats.patch_bytes);
    }
  }
  ApplyStats applied;
  Status status = ApplyPatch(s.a, dir / "got-3-2", dir / "b.rebuilt", &applied);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(applied.target_digest, s.b_digest);
  EXPECT_TRUE(testing::ReadFileBytes(dir / "b.rebuilt") == testing::ReadFileBytes(s.b));
}

// A chunk of the target's link, or of the parent under the base, that does not decode to its
// xxh3 fails the diff with kCorruption naming that patch and the tensor; no patch file is
// left. Digests that are not the readers' and an existing output are refused up front.
TEST(PatchFromReadersTest, ADamagedChunkOrWrongArgumentsWriteNothing) {
  testing::TempDir dir;
  const Siblings s = MakeSiblings(dir);
  // The middle of the largest tensor chunk's payload coded with a base.
  auto damage = [&](const std::string& path, bool with_base, const std::string& out) {
    std::string bytes = testing::ReadFileBytes(path);
    auto ph = internal::ParsePatch(AsBytes(bytes), bytes.size(), path);
    EXPECT_TRUE(ph.ok());
    uint64_t best = 0, where = 0;
    for (const auto& p : ph->pieces) {
      if (p.kind != formats::ArchivePiece::Kind::kTensor || p.base.has_value() != with_base) {
        continue;
      }
      for (const auto& c : p.chunks) {
        if (c.length > best) {
          best = c.length;
          where = ph->payload_start + c.offset + c.length / 2;
        }
      }
    }
    EXPECT_GT(best, 100u);
    bytes[where] ^= 0x5a;
    testing::WriteFileBytes(out, bytes);
  };
  damage(s.b_link, /*with_base=*/true, dir / "b.damaged-link");
  damage(s.parent_full, /*with_base=*/false, dir / "parent.damaged-full");

  auto parent_full = Patch(s.parent_full);
  {
    Status st = CreatePatchFromReaders(Patch(s.a_link, parent_full),
                                       Patch(dir / "b.damaged-link", parent_full),
                                       dir / "out1", {}, nullptr);
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("b.damaged-link"));
    EXPECT_THAT(st.message(), HasSubstr("tensor '"));
    EXPECT_FALSE(std::filesystem::exists(std::string(dir / "out1")));
  }
  {
    // The base read through the damaged parent (the target is a plain file).
    auto bad_parent = Patch(dir / "parent.damaged-full");
    Status st = CreatePatchFromReaders(Patch(s.a_link, bad_parent), File(s.b, s.b_digest),
                                       dir / "out2", {}, nullptr);
    EXPECT_EQ(st.code(), Code::kCorruption) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("parent.damaged-full"));
    EXPECT_FALSE(std::filesystem::exists(std::string(dir / "out2")));
  }
  DiffOptions wrong;
  wrong.known_target_digest = s.a_digest;
  Status st = CreatePatchFromReaders(File(s.a, s.a_digest), File(s.b, s.b_digest), dir / "out3",
                                     wrong, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(std::string(dir / "out3")));
  st = CreatePatchFromReaders(File(s.a, s.a_digest), nullptr, dir / "out4", {}, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  testing::WriteFileBytes(dir / "out5", "keep");
  st = CreatePatchFromReaders(File(s.a, s.a_digest), File(s.b, s.b_digest), dir / "out5", {},
                              nullptr);
  EXPECT_EQ(st.code(), Code::kAlreadyExists) << st.ToString();
  EXPECT_EQ(testing::ReadFileBytes(dir / "out5"), "keep");
}

// VerifyReader: sibling b read through its link over the parent's full patch is exactly b's
// file (compared) and hashes to b's digest; compared with a's file (same size) it names the
// first byte that differs; with a file of another size it says so; a reader whose bytes are
// not its digest fails the hash.
TEST(PatchFromReadersTest, VerifyReaderComparesOrHashesTheWholeArchive) {
  testing::TempDir dir;
  const Siblings s = MakeSiblings(dir);
  auto parent_full = Patch(s.parent_full);
  auto b = Patch(s.b_link, parent_full);
  ASSERT_NE(b, nullptr);
  for (int threads : {1, 2}) {
    EXPECT_TRUE(VerifyReader(*b, s.b, threads).ok());
    EXPECT_TRUE(VerifyReader(*b, "", threads).ok());
  }
  const std::string b_bytes = testing::ReadFileBytes(s.b);
  const std::string a_bytes = testing::ReadFileBytes(s.a);
  ASSERT_EQ(a_bytes.size(), b_bytes.size());
  size_t first = 0;
  while (a_bytes[first] == b_bytes[first]) ++first;
  Status st = VerifyReader(*b, s.a);
  EXPECT_EQ(st.code(), Code::kDigestMismatch) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("at byte offset " + std::to_string(first)));
  testing::WriteFileBytes(dir / "short.blz", b_bytes.substr(0, b_bytes.size() - 1));
  st = VerifyReader(*b, dir / "short.blz");
  EXPECT_EQ(st.code(), Code::kDigestMismatch) << st.ToString();
  // A reader that names another digest than its bytes have (hashing mode).
  auto misnamed = ArchiveFileReader::Open(s.a, s.b_digest);
  ASSERT_TRUE(misnamed.ok());
  st = VerifyReader(**misnamed, "");
  EXPECT_EQ(st.code(), Code::kDigestMismatch) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr(s.a_digest));
}

// ChooseCodecOnSample on the slices SampleSlices names makes ChooseCodec's choice on the
// whole tensors (BF16-like 2-byte elements, a small change of the low bytes); a sample of
// another length is refused.
TEST(PatchFromReadersTest, TheChoiceFromTheSampleSlicesIsTheChoiceFromTheWholeTensor) {
  std::mt19937_64 rng(5);
  for (uint64_t size : {uint64_t(100) << 10, uint64_t(5) << 20, (uint64_t(9) << 20) + 6}) {
    SCOPED_TRACE(size);
    std::vector<uint8_t> base(size), target(size);
    for (uint64_t i = 0; i < size; ++i) base[i] = uint8_t(i % 2 == 1 ? 0x3c : rng());
    target = base;
    for (uint64_t i = 0; i < size; i += 2) {
      if (rng() % 3 == 0) target[i] ^= uint8_t(rng() & 7);
    }
    const std::vector<SampleSlice> slices = SampleSlices(size, 2);
    uint64_t end = 0;
    std::vector<uint8_t> sb, st;
    for (const SampleSlice& sl : slices) {
      EXPECT_GE(sl.offset, end) << "slices overlap or are out of order";
      end = sl.offset + sl.length;
      EXPECT_LE(end, size);
      EXPECT_EQ(sl.length % 2, 0u) << "a slice cuts an element";
      sb.insert(sb.end(), base.begin() + sl.offset, base.begin() + end);
      st.insert(st.end(), target.begin() + sl.offset, target.begin() + end);
    }
    EXPECT_EQ(slices.size(), size <= (128u << 10) ? 1u : 8u);
    CodecOptions o;
    auto whole = ChooseCodec(ByteSpan(base), ByteSpan(target), 2, o);
    auto sampled = ChooseCodecOnSample(ByteSpan(sb), ByteSpan(st), size, 2, o);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
    EXPECT_EQ(sampled->codec, whole->codec);
    EXPECT_EQ(sampled->key_shift, whole->key_shift);
    EXPECT_EQ(sampled->key_bits, whole->key_bits);
    EXPECT_EQ(sampled->check_zstd, whole->check_zstd);
    auto no_base = ChooseCodecOnSample(ByteSpan(), ByteSpan(st), size, 2, o);
    auto no_base_whole = ChooseCodec(ByteSpan(), ByteSpan(target), 2, o);
    ASSERT_TRUE(no_base.ok() && no_base_whole.ok());
    EXPECT_EQ(no_base->codec, no_base_whole->codec);
    st.pop_back();
    sb.pop_back();
    EXPECT_EQ(ChooseCodecOnSample(ByteSpan(sb), ByteSpan(st), size, 2, o).status().code(),
              Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace blz::patcher
