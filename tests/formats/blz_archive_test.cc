#include "formats/blz_archive.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes.h"
#include "core/digest.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/model_dir.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

namespace fs = std::filesystem;
using ::blz::testing::ReadFileBytes;
using ::blz::testing::TempDir;
using ::blz::testing::TestModelOptions;
using ::blz::testing::WriteFileBytes;
using ::blz::testing::WriteTestModel;
using ojson = nlohmann::ordered_json;

// Every regular file below `dir`: relative path -> bytes.
std::map<std::string, std::string> DirContents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) {
      out[e.path().lexically_relative(dir).generic_string()] = ReadFileBytes(e.path().string());
    }
  }
  return out;
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Packs `input`, checks the archive opens and verifies, unpacks it and checks that the
// unpacked tree equals `input`'s files byte for byte.
void RoundTrip(const std::string& input, const TempDir& work, size_t files, size_t tensors) {
  const std::string archive = work / "model.blz";
  PackStats stats;
  Status s = Pack(input, archive, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(stats.files, files);
  EXPECT_EQ(stats.tensors, tensors);
  EXPECT_EQ(stats.archive_bytes, fs::file_size(archive));
  EXPECT_EQ(stats.digest, MakeDigest(Sha256Hex(ReadFileBytes(archive))));

  auto a = BlzArchive::Open(archive);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->header().files.size(), files);
  EXPECT_EQ(a->header().tensors.size(), tensors);
  EXPECT_EQ(a->header().data_start % kArchiveAlignment, 0u);
  s = a->Verify();
  EXPECT_TRUE(s.ok()) << s.ToString();

  const std::string out = work / "unpacked";
  s = Unpack(*a, out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::map<std::string, std::string> expected;
  if (fs::is_directory(input)) {
    expected = DirContents(input);
  } else {
    expected[fs::path(input).filename().string()] = ReadFileBytes(input);
  }
  const auto got = DirContents(out);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [path, bytes] : expected) {
    ASSERT_TRUE(got.count(path)) << path;
    EXPECT_TRUE(got.at(path) == bytes) << path << " differs after unpack";
  }
  // Only the output appeared next to it: no temporary directory left behind.
  EXPECT_EQ(DirEntries(work.path()), (std::vector<std::string>{"model.blz", "unpacked"}));
}

TEST(BlzArchiveCorpus, PacksTinyGpt2) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir work;
  RoundTrip(corpus + "/tiny-gpt2/base", work, 2, 28);
}

TEST(BlzArchiveCorpus, PacksRobertaLoraCheckpoint) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir work;
  RoundTrip(corpus + "/roberta-lora/checkpoint-500", work, 2, 28);
}

TEST(BlzArchiveCorpus, PacksASingleSafetensorsFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir work;
  RoundTrip(corpus + "/adapters/opt125m-lora-bf16/adapter_model.safetensors", work, 1, 48);
}

TEST(BlzArchiveCorpus, RefusesTheFixtureWithUncountedBytes) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir work;
  Status s = Pack(corpus + "/weight-inspect/fixtures/tiny.safetensors", work / "x.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("trailing bytes"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(work / "x.blz"));
  EXPECT_TRUE(DirEntries(work.path()).empty());
}

TEST(BlzArchive, PacksAMultiShardDirectoryWithIndexAndSubdirectory) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 3;
  o.with_subdir = true;
  o.with_edge_tensors = true;
  auto info = WriteTestModel(src.path(), o);
  ASSERT_EQ(info.files.size(), 6u);  // 3 shards, index, config, extra/notes.txt
  RoundTrip(src.path(), work, info.files.size(), info.tensors.size());

  auto a = BlzArchive::Open(work / "model.blz");
  ASSERT_TRUE(a.ok());
  const ArchiveHeader& h = a->header();
  // Files sorted bytewise; kinds by name.
  std::vector<std::string> paths;
  for (const auto& f : h.files) paths.push_back(f.path);
  EXPECT_EQ(paths, info.files);
  for (const auto& f : h.files) {
    EXPECT_EQ(f.kind, IsSafetensorsName(f.path) ? "safetensors" : "file") << f.path;
  }
  // Every tensor's recorded digests match its bytes; offsets are 64-aligned.
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const ArchiveTensor& t = h.tensors[i];
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(Xxh3_64(a->TensorData(i)), t.xxh3);
    EXPECT_EQ(Sha256Hex(a->TensorData(i)), t.sha256);
    EXPECT_TRUE(IsSafetensorsName(h.files[t.file_index].path));
  }
}

TEST(BlzArchive, PackingTwiceGivesIdenticalBytes) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 2;
  o.with_subdir = true;
  WriteTestModel(src.path(), o);
  PackStats s1, s2;
  ASSERT_TRUE(Pack(src.path(), work / "1.blz", &s1).ok());
  ASSERT_TRUE(Pack(src.path() + "/", work / "2.blz", &s2).ok());
  EXPECT_EQ(s1.digest, s2.digest);
  EXPECT_TRUE(ReadFileBytes(work / "1.blz") == ReadFileBytes(work / "2.blz"));
  // A fine-tune differs.
  TempDir ft;
  o.perturb_scale = 0.01;
  WriteTestModel(ft.path(), o);
  PackStats s3;
  ASSERT_TRUE(Pack(ft.path(), work / "3.blz", &s3).ok());
  EXPECT_NE(s1.digest, s3.digest);
}

TEST(BlzArchive, FollowsSymlinksToRegularFiles) {
  TempDir src, other, work;
  WriteTestModel(src.path());
  WriteFileBytes(other / "tok.json", "{\"vocab\":1}");
  ASSERT_EQ(::symlink((other / "tok.json").c_str(), (src / "tokenizer.json").c_str()), 0);
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());
  auto a = BlzArchive::Open(work / "m.blz");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(Unpack(*a, work / "out").ok());
  EXPECT_FALSE(fs::is_symlink(work / "out/tokenizer.json"));
  EXPECT_EQ(ReadFileBytes(work / "out/tokenizer.json"), "{\"vocab\":1}");
}

TEST(BlzArchive, PackRefusesExistingOutputAndBadInputs) {
  TempDir src, work;
  WriteTestModel(src.path());
  WriteFileBytes(work / "exists.blz", "keep");
  Status s = Pack(src.path(), work / "exists.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(ReadFileBytes(work / "exists.blz"), "keep");

  s = Pack(src / "missing", work / "a.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  s = Pack(src / "config.json", work / "a.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  TempDir empty;
  WriteFileBytes(empty / "README.md", "no weights");
  s = Pack(empty.path(), work / "a.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  ASSERT_EQ(::symlink(work.path().c_str(), (src / "loop").c_str()), 0);
  s = Pack(src.path(), work / "a.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("loop"), std::string::npos) << s.ToString();
  EXPECT_EQ(DirEntries(work.path()), (std::vector<std::string>{"exists.blz"}));
}

TEST(BlzArchive, PackRefusesAnInconsistentShardIndex) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 2;
  WriteTestModel(src.path(), o);
  std::string idx = ReadFileBytes(src / "model.safetensors.index.json");
  // Point model.norm.weight at the other shard.
  const auto line = idx.find("\"model.norm.weight\": \"model-0000");
  ASSERT_NE(line, std::string::npos) << idx;
  const size_t digit = line + std::string("\"model.norm.weight\": \"model-0000").size();
  idx[digit] = idx[digit] == '1' ? '2' : '1';
  fs::remove(src / "model.safetensors.index.json");
  WriteFileBytes(src / "model.safetensors.index.json", idx);
  Status s = Pack(src.path(), work / "a.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("model.norm.weight"), std::string::npos) << s.ToString();
}

// ---- Verify ----------------------------------------------------------------------------------

// Verify in one pass and in two (two threads), which must agree exactly: same code, same
// message (the first bad tensor or file in archive order).
Status VerifyBothWays(const BlzArchive& a) {
  const Status one = a.Verify(nullptr, /*two_pass_bytes=*/UINT64_MAX);
  const Status two = a.Verify(nullptr, /*two_pass_bytes=*/0);
  EXPECT_EQ(one.code(), two.code()) << one.ToString() << " | " << two.ToString();
  EXPECT_EQ(one.message(), two.message());
  return one;
}

class BlzArchiveVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    TestModelOptions o;
    o.shards = 2;
    WriteTestModel(src_.path(), o);
    ASSERT_TRUE(Pack(src_.path(), work_ / "good.blz", nullptr).ok());
    good_ = ReadFileBytes(work_ / "good.blz");
    auto a = BlzArchive::Open(work_ / "good.blz");
    ASSERT_TRUE(a.ok());
    header_ = a->header();
  }
  // Writes the good archive with byte `offset` XOR-ed, opens it.
  Result<BlzArchive> Flipped(uint64_t offset, const std::string& name) {
    std::string bad = good_;
    bad[offset] = char(bad[offset] ^ 0x01);
    WriteFileBytes(work_ / name, bad);
    return BlzArchive::Open(work_ / name);
  }
  TempDir src_, work_;
  std::string good_;
  ArchiveHeader header_;
};

TEST_F(BlzArchiveVerify, NamesAFlippedTensor) {
  const size_t i = 3;
  const ArchiveTensor& t = header_.tensors[i];
  const uint64_t at = header_.data_start + t.offset + 5;
  auto a = Flipped(at, "bad.blz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();  // the layout is still fine
  Status s = VerifyBothWays(*a);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("tensor '" + t.name + "'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("byte offset " + std::to_string(header_.data_start + t.offset)),
            std::string::npos)
      << s.ToString();
  // Unpack refuses it and leaves nothing behind.
  Status u = Unpack(*a, work_ / "out");
  EXPECT_EQ(u.code(), Code::kCorruption) << u.ToString();
  EXPECT_FALSE(fs::exists(work_ / "out"));
  EXPECT_EQ(DirEntries(work_.path()), (std::vector<std::string>{"bad.blz", "good.blz"}));
}

// Two defects: a wrong file SHA-256 in the header of the first file and a flipped tensor in the
// last one. One pass meets the first file's error first; two passes find both at once and
// must still name that one. And the other way round: a flipped tensor in the first file and
// a wrong SHA-256 of the last file name the tensor.
TEST_F(BlzArchiveVerify, TwoDefectsNameTheFirstInArchiveOrderBothWays) {
  ASSERT_GE(header_.files.size(), 3u);
  const uint64_t n = LoadLE64(reinterpret_cast<const uint8_t*>(good_.data()) + 16);
  auto with_wrong_file_sha = [&](std::string bytes, size_t fi) {
    ojson j = ojson::parse(bytes.substr(24, n));
    std::string sha = j["files"][fi]["sha256"].get<std::string>();
    sha[0] = sha[0] == '0' ? '1' : '0';
    j["files"][fi]["sha256"] = sha;
    const std::string text = j.dump();
    EXPECT_EQ(text.size(), n);
    bytes.replace(24, n, text);
    return bytes;
  };
  auto flip_tensor_in = [&](std::string bytes, size_t fi) {
    for (const ArchivePiece& p : header_.files[fi].pieces) {
      if (p.kind != ArchivePiece::Kind::kTensor) continue;
      const uint64_t at = header_.data_start + header_.tensors[p.index].offset;
      bytes[at] = char(bytes[at] ^ 0x01);
      return std::pair{bytes, header_.tensors[p.index].name};
    }
    ADD_FAILURE() << "no tensor in file " << fi;
    return std::pair{bytes, std::string()};
  };
  const size_t first = 0, last = header_.files.size() - 1;
  size_t first_tensor_file = 0;
  while (header_.files[first_tensor_file].kind != "safetensors") ++first_tensor_file;
  size_t last_tensor_file = last;
  while (header_.files[last_tensor_file].kind != "safetensors") --last_tensor_file;
  ASSERT_LT(first, last_tensor_file);
  ASSERT_LT(first_tensor_file, last);

  {
    auto [bytes, tensor] = flip_tensor_in(with_wrong_file_sha(good_, first), last_tensor_file);
    WriteFileBytes(work_ / "a.blz", bytes);
    auto a = BlzArchive::Open(work_ / "a.blz");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Status s = VerifyBothWays(*a);
    EXPECT_EQ(s.code(), Code::kCorruption);
    EXPECT_NE(s.message().find("file " + std::string("'") + header_.files[first].path + "'"),
              std::string::npos)
        << s.ToString();
    EXPECT_EQ(s.message().find(tensor), std::string::npos) << s.ToString();
  }
  {
    auto [bytes, tensor] = flip_tensor_in(with_wrong_file_sha(good_, last), first_tensor_file);
    WriteFileBytes(work_ / "b.blz", bytes);
    auto a = BlzArchive::Open(work_ / "b.blz");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Status s = VerifyBothWays(*a);
    EXPECT_EQ(s.code(), Code::kCorruption);
    EXPECT_NE(s.message().find("tensor '" + tensor + "'"), std::string::npos) << s.ToString();
  }
}

// Two passes report progress as one does: monotonic, from the calling thread, ending at the
// total; and a sound archive passes both ways.
TEST_F(BlzArchiveVerify, TwoPassesProgressOnTheCallingThread) {
  auto a = BlzArchive::Open(work_ / "good.blz");
  ASSERT_TRUE(a.ok());
  const std::thread::id caller = std::this_thread::get_id();
  uint64_t last = 0, total = 0;
  bool monotonic = true, same_thread = true;
  Status s = a->Verify(
      [&](uint64_t done, uint64_t t) {
        monotonic = monotonic && done >= last;
        same_thread = same_thread && std::this_thread::get_id() == caller;
        last = done;
        total = t;
      },
      /*two_pass_bytes=*/0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(monotonic);
  EXPECT_TRUE(same_thread);
  EXPECT_GT(total, 0u);
  EXPECT_EQ(last, total);
  EXPECT_TRUE(VerifyBothWays(*a).ok());
}

TEST_F(BlzArchiveVerify, NamesAFlippedRawFile) {
  size_t fi = 0;
  while (header_.files[fi].path != "config.json") ++fi;
  const ArchiveRaw& r = header_.raws[header_.files[fi].pieces[0].index];
  auto a = Flipped(header_.data_start + r.offset + 2, "bad.blz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Status s = VerifyBothWays(*a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("file 'config.json'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("byte offset " + std::to_string(header_.data_start + r.offset)),
            std::string::npos)
      << s.ToString();
}

TEST_F(BlzArchiveVerify, CatchesAFlippedSafetensorsHeaderByte) {
  const ArchiveRaw& r = header_.raws[header_.files[1].pieces[0].index];
  ASSERT_EQ(header_.files[1].kind, "safetensors");
  auto a = Flipped(header_.data_start + r.offset + 20, "bad.blz");
  ASSERT_TRUE(a.ok());
  Status s = VerifyBothWays(*a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(header_.files[1].path), std::string::npos) << s.ToString();
}

TEST_F(BlzArchiveVerify, CatchesNonZeroPadding) {
  // Find a gap between two pieces.
  uint64_t gap = 0;
  for (size_t i = 1; i < header_.tensors.size() && gap == 0; ++i) {
    const uint64_t end = header_.tensors[i - 1].offset + header_.tensors[i - 1].length;
    if (end % 64 != 0) gap = header_.data_start + end;  // the next piece starts 64-aligned
  }
  ASSERT_NE(gap, 0u);
  auto a = Flipped(gap, "bad.blz");
  ASSERT_TRUE(a.ok());
  Status s = VerifyBothWays(*a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("padding at byte offset " + std::to_string(gap)), std::string::npos)
      << s.ToString();
}

TEST_F(BlzArchiveVerify, CatchesASafetensorsHeaderThatDisagreesWithTheTensorList) {
  // Rename a tensor inside the stored safetensors header and fix up every hash the archive
  // header records for it: only the cross-check of the two tensor lists can notice.
  const size_t fi = 1;
  const ArchiveFile& f = header_.files[fi];
  ASSERT_EQ(f.kind, "safetensors");
  const ArchiveRaw& r = header_.raws[f.pieces[0].index];
  const std::string& name = header_.tensors[f.pieces[1].index].name;
  std::string bad = good_;
  const size_t at = bad.find("\"" + name + "\"", header_.data_start + r.offset);
  ASSERT_LT(at, header_.data_start + r.offset + r.length);
  bad[at + 1] = bad[at + 1] == 'x' ? 'y' : 'x';
  // New digests of the raw piece and of the file.
  const ByteSpan raw_bytes = AsBytes(bad).subspan(header_.data_start + r.offset, r.length);
  Sha256 file_sha;
  for (const ArchivePiece& p : f.pieces) {
    const auto& [off, len] = p.kind == ArchivePiece::Kind::kRaw
                                 ? std::pair{header_.raws[p.index].offset, header_.raws[p.index].length}
                                 : std::pair{header_.tensors[p.index].offset,
                                             header_.tensors[p.index].length};
    file_sha.Update(AsBytes(bad).subspan(header_.data_start + off, len));
  }
  const uint64_t n = LoadLE64(reinterpret_cast<const uint8_t*>(bad.data()) + 16);
  ojson j = ojson::parse(bad.substr(24, n));
  j["raws"][f.pieces[0].index]["xxh3"] = Hex64(Xxh3_64(raw_bytes));
  j["files"][fi]["sha256"] = file_sha.FinishHex();
  const std::string text = j.dump();
  ASSERT_EQ(text.size(), n);
  bad.replace(24, n, text);
  WriteFileBytes(work_ / "bad.blz", bad);
  auto a = BlzArchive::Open(work_ / "bad.blz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Status s = VerifyBothWays(*a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not match archive tensor '" + name + "'"), std::string::npos)
      << s.ToString();
}

TEST_F(BlzArchiveVerify, UnpackNeedsAnExistingParent) {
  auto a = BlzArchive::Open(work_ / "good.blz");
  ASSERT_TRUE(a.ok());
  Status s = Unpack(*a, work_ / "no/such/parent/out");
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_EQ(DirEntries(work_.path()), (std::vector<std::string>{"good.blz"}));
}

TEST_F(BlzArchiveVerify, UnpackRefusesAnExistingDirectory) {
  auto a = BlzArchive::Open(work_ / "good.blz");
  ASSERT_TRUE(a.ok());
  fs::create_directory(work_ / "out");
  WriteFileBytes(work_ / "out/mine.txt", "mine");
  Status s = Unpack(*a, work_ / "out");
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(DirEntries(work_ / "out"), (std::vector<std::string>{"mine.txt"}));
  fs::remove_all(work_ / "out");
  fs::create_directory(work_ / "empty");  // even an empty directory is not replaced
  s = Unpack(*a, work_ / "empty");
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(DirEntries(work_.path()), (std::vector<std::string>{"empty", "good.blz"}));
}

// ---- ParseArchivePrefix: one crafted bad archive per rejection path --------------------------

class BlzArchiveReject : public ::testing::Test {
 protected:
  void SetUp() override {
    TestModelOptions o;
    o.shards = 2;
    o.with_subdir = true;
    o.layers = 1;
    WriteTestModel(src_.path(), o);
    ASSERT_TRUE(Pack(src_.path(), work_ / "good.blz", nullptr).ok());
    good_ = ReadFileBytes(work_ / "good.blz");
    const uint64_t n = LoadLE64(reinterpret_cast<const uint8_t*>(good_.data()) + 16);
    json_ = ojson::parse(good_.substr(24, n));
    data_start_ = (24 + n + 63) / 64 * 64;
    ASSERT_TRUE(ParseArchivePrefix(AsBytes(good_), good_.size()).ok());
    ASSERT_EQ(Rebuild(json_.dump()), good_);  // the crafting helper reproduces the archive
  }
  // A new archive with header JSON `text` and the good archive's data section.
  std::string Rebuild(const std::string& text, uint32_t version = 1, uint32_t flags = 0) const {
    std::string out = "BLZARCH\n";
    AppendLE32(&out, version);
    AppendLE32(&out, flags);
    AppendLE64(&out, text.size());
    out += text;
    out.resize((out.size() + 63) / 64 * 64, '\0');
    out += good_.substr(data_start_);
    return out;
  }
  std::string Mutated(const std::function<void(ojson&)>& mutate) const {
    ojson j = json_;
    mutate(j);
    return Rebuild(j.dump());
  }
  void ExpectRejected(const std::string& archive, Code code, std::vector<std::string> parts,
                      uint64_t file_size = UINT64_MAX) const {
    auto r = ParseArchivePrefix(AsBytes(archive),
                                file_size == UINT64_MAX ? archive.size() : file_size);
    ASSERT_FALSE(r.ok()) << "accepted a bad archive";
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    for (const auto& p : parts) {
      EXPECT_NE(r.status().message().find(p), std::string::npos)
          << "message lacks '" << p << "': " << r.status().ToString();
    }
  }
  // Index of the first file of kind `kind`.
  size_t FileOfKind(const std::string& kind) const {
    for (size_t i = 0; i < json_["files"].size(); ++i) {
      if (json_["files"][i]["kind"] == kind) return i;
    }
    return SIZE_MAX;
  }
  TempDir src_, work_;
  std::string good_;
  ojson json_;
  uint64_t data_start_ = 0;
};

TEST_F(BlzArchiveReject, ShorterThanFixedHeader) {
  ExpectRejected(good_.substr(0, 20), Code::kCorruption, {"24-byte fixed header"});
}

TEST_F(BlzArchiveReject, BadMagic) {
  std::string bad = good_;
  bad[3] = 'X';
  ExpectRejected(bad, Code::kCorruption, {"magic", "byte offset 0"});
}

TEST_F(BlzArchiveReject, UnknownVersion) {
  ExpectRejected(Rebuild(json_.dump(), 2), Code::kUnsupported, {"version 2", "byte offset 8"});
}

TEST_F(BlzArchiveReject, UnknownFlags) {
  ExpectRejected(Rebuild(json_.dump(), 1, 4), Code::kUnsupported, {"flags", "byte offset 12"});
}

TEST_F(BlzArchiveReject, HeaderLengthOverCap) {
  std::string bad = good_;
  StoreLE64(reinterpret_cast<uint8_t*>(bad.data()) + 16, kMaxArchiveHeaderBytes + 1);
  ExpectRejected(bad, Code::kTooLarge, {"cap", "byte offset 16"});
}

TEST_F(BlzArchiveReject, HeaderLengthPastEnd) {
  std::string bad = good_;
  StoreLE64(reinterpret_cast<uint8_t*>(bad.data()) + 16, bad.size());
  ExpectRejected(bad, Code::kCorruption, {"past the end"});
}

TEST_F(BlzArchiveReject, HeaderPaddingPastEnd) {
  // 24 + N fits in the file but rounding it up to 64 does not.
  std::string bad = "BLZARCH\n";
  AppendLE32(&bad, 1);
  AppendLE32(&bad, 0);
  AppendLE64(&bad, 2);
  bad += "{}";
  ExpectRejected(bad, Code::kCorruption, {"padding", "past the end"});
}

TEST_F(BlzArchiveReject, NonZeroHeaderPadding) {
  std::string bad = good_;
  const uint64_t n = LoadLE64(reinterpret_cast<const uint8_t*>(bad.data()) + 16);
  ASSERT_LT(24 + n, data_start_);
  bad[data_start_ - 1] = 'x';
  ExpectRejected(bad, Code::kCorruption, {"non-zero header padding", std::to_string(data_start_ - 1)});
}

TEST_F(BlzArchiveReject, PrefixShorterThanDataStart) {
  auto r = ParseArchivePrefix(AsBytes(good_).subspan(0, 30), good_.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

TEST_F(BlzArchiveReject, HeaderNotJson) {
  std::string text = json_.dump();
  text[text.size() / 2] = '\x01';
  ExpectRejected(Rebuild(text), Code::kCorruption, {"archive header", "byte offset"});
}

TEST_F(BlzArchiveReject, HeaderNotUtf8) {
  std::string text = json_.dump();
  const auto pos = text.find("config.json");
  text[pos] = char(0xff);
  ExpectRejected(Rebuild(text), Code::kCorruption, {"UTF-8", std::to_string(24 + pos)});
}

TEST_F(BlzArchiveReject, DuplicateKey) {
  std::string text = json_.dump();
  text.insert(1, "\"tensors\":[],");
  ExpectRejected(Rebuild(text), Code::kCorruption, {"duplicate key \"tensors\""});
}

TEST_F(BlzArchiveReject, HeaderNotAnObject) {
  ExpectRejected(Rebuild("[1]"), Code::kCorruption, {"not an object"});
}

TEST_F(BlzArchiveReject, MissingField) {
  ExpectRejected(Mutated([](ojson& j) { j.erase("raws"); }), Code::kCorruption,
                 {"missing field \"raws\""});
  ExpectRejected(Mutated([](ojson& j) { j["tensors"][0].erase("sha256"); }), Code::kCorruption,
                 {"tensors[0]", "missing field \"sha256\""});
}

TEST_F(BlzArchiveReject, UnknownField) {
  ExpectRejected(Mutated([](ojson& j) { j["files"][0]["mode"] = 420; }), Code::kCorruption,
                 {"files[0]", "unknown field 'mode'"});
}

TEST_F(BlzArchiveReject, WrongFieldType) {
  ExpectRejected(Mutated([](ojson& j) { j["raws"][0]["length"] = "12"; }), Code::kCorruption,
                 {"raws[0].length", "non-negative integer"});
  ExpectRejected(Mutated([](ojson& j) { j["raws"][0]["offset"] = -64; }), Code::kCorruption,
                 {"raws[0].offset", "non-negative integer"});
}

TEST_F(BlzArchiveReject, BadHex) {
  ExpectRejected(Mutated([](ojson& j) {
                   std::string x = j["tensors"][0]["xxh3"];
                   for (auto& c : x) c = char(std::toupper(c));
                   j["tensors"][0]["xxh3"] = x.substr(0, 15) + "G";
                 }),
                 Code::kCorruption, {"tensors[0]", "xxh3", "hex"});
  ExpectRejected(Mutated([](ojson& j) { j["files"][0]["sha256"] = "abc"; }), Code::kCorruption,
                 {"files[0]", "sha256", "64 lower-case hex"});
}

TEST_F(BlzArchiveReject, UnsafePaths) {
  for (const char* p : {"../x", "/abs", "a//b", "a/./b", "a\\b"}) {
    SCOPED_TRACE(p);
    // Keep sorting intact: replace the first file's path (the unsafe check comes first).
    ExpectRejected(Mutated([&](ojson& j) { j["files"][0]["path"] = p; }), Code::kCorruption,
                   {"files[0].path", "not a safe relative path"});
  }
}

TEST_F(BlzArchiveReject, UnsortedOrDuplicatePaths) {
  ExpectRejected(Mutated([](ojson& j) { std::swap(j["files"][0]["path"], j["files"][1]["path"]); }),
                 Code::kCorruption, {"files[1].path", "sorted"});
  ExpectRejected(Mutated([](ojson& j) { j["files"][1]["path"] = j["files"][0]["path"]; }),
                 Code::kCorruption, {"files[1].path", "duplicates"});
}

TEST_F(BlzArchiveReject, PathBelowAFile) {
  // files: config.json, extra/notes.txt, model-...: rename config.json to "extra".
  ASSERT_EQ(json_["files"][0]["path"], "config.json");
  ASSERT_EQ(json_["files"][1]["path"], "extra/notes.txt");
  ExpectRejected(Mutated([](ojson& j) { j["files"][0]["path"] = "extra"; }), Code::kCorruption,
                 {"'extra/notes.txt' lies below 'extra'"});
}

TEST_F(BlzArchiveReject, UnknownFileKind) {
  ExpectRejected(Mutated([](ojson& j) { j["files"][0]["kind"] = "pickle"; }),
                 Code::kUnsupported, {"files[0]", "'pickle'"});
}

TEST_F(BlzArchiveReject, UnknownPieceKind) {
  ExpectRejected(Mutated([](ojson& j) { j["files"][0]["pieces"][0]["kind"] = "zip"; }),
                 Code::kCorruption, {"files[0]", "pieces[0].kind"});
}

TEST_F(BlzArchiveReject, PieceIndexOutOfRange) {
  const size_t f = FileOfKind("safetensors");
  ExpectRejected(Mutated([&](ojson& j) { j["files"][f]["pieces"][1]["index"] = 999; }),
                 Code::kCorruption, {"pieces[1].index", "is tensor 999"});
}

TEST_F(BlzArchiveReject, PieceUsedTwice) {
  const size_t f = FileOfKind("safetensors");
  ExpectRejected(Mutated([&](ojson& j) {
                   j["files"][f]["pieces"][2]["index"] = j["files"][f]["pieces"][1]["index"];
                 }),
                 Code::kCorruption, {"pieces[2].index", "used once each"});
}

TEST_F(BlzArchiveReject, PieceNotUsed) {
  const size_t f = FileOfKind("safetensors");
  ExpectRejected(Mutated([&](ojson& j) {
                   auto& pieces = j["files"][f]["pieces"];
                   pieces.erase(pieces.size() - 1);
                 }),
                 Code::kCorruption, {});  // size mismatch or unused tensor, whichever first
  // Only an extra raw, not referenced by anything, at the end of the data.
  ExpectRejected(Mutated([&](ojson& j) {
                   ojson extra = j["raws"].back();
                   extra["offset"] = 1u << 30;
                   j["raws"].push_back(extra);
                 }),
                 Code::kCorruption, {"is not used by any file"});
}

TEST_F(BlzArchiveReject, PiecesOutOfOrder) {
  const size_t f = FileOfKind("safetensors");
  ExpectRejected(Mutated([&](ojson& j) {
                   std::swap(j["files"][f]["pieces"][1], j["files"][f]["pieces"][2]);
                 }),
                 Code::kCorruption, {"pieces[1].index", "data order"});
}

TEST_F(BlzArchiveReject, PieceOwnedByAnotherFile) {
  ExpectRejected(Mutated([](ojson& j) { j["tensors"][0]["file"] = 0; }), Code::kCorruption,
                 {"tensors[0]", ".file", "belongs to files["});
}

TEST_F(BlzArchiveReject, MisalignedOffset) {
  ExpectRejected(Mutated([](ojson& j) {
                   j["tensors"][1]["offset"] = j["tensors"][1]["offset"].get<uint64_t>() + 8;
                 }),
                 Code::kCorruption, {"tensors[1]", ".offset", "multiple of 64"});
}

TEST_F(BlzArchiveReject, OverlappingOrGappedOffset) {
  ExpectRejected(Mutated([](ojson& j) { j["tensors"][1]["offset"] = j["tensors"][0]["offset"]; }),
                 Code::kCorruption, {"tensors[1]", ".offset"});
  ExpectRejected(Mutated([](ojson& j) {
                   j["tensors"][1]["offset"] = j["tensors"][1]["offset"].get<uint64_t>() + 64;
                 }),
                 Code::kCorruption, {"tensors[1]", ".offset"});
}

TEST_F(BlzArchiveReject, PieceRunsPastEnd) {
  std::string bad = good_.substr(0, good_.size() - 1);
  ExpectRejected(bad, Code::kCorruption, {"runs past the end"});
}

TEST_F(BlzArchiveReject, TrailingBytes) {
  ExpectRejected(good_ + std::string(64, '\0'), Code::kCorruption, {"trailing bytes"});
}

TEST_F(BlzArchiveReject, TensorLengthNotShapeTimesSize) {
  ExpectRejected(Mutated([](ojson& j) { j["tensors"][0]["shape"][0] = 1000; }),
                 Code::kCorruption, {"tensors[0]", ".length", "product(shape)"});
}

TEST_F(BlzArchiveReject, TensorShapeOverflow) {
  ExpectRejected(Mutated([](ojson& j) {
                   j["tensors"][0]["shape"] = {4294967296ull, 4294967296ull};
                 }),
                 Code::kCorruption, {"tensors[0]", "overflows"});
}

TEST_F(BlzArchiveReject, UnknownDtype) {
  ExpectRejected(Mutated([](ojson& j) { j["tensors"][0]["dtype"] = "Q4_K"; }),
                 Code::kUnsupported, {"tensors[0]", "dtype", "'Q4_K'"});
}

TEST_F(BlzArchiveReject, FileSizeNotSumOfPieces) {
  ExpectRejected(Mutated([](ojson& j) {
                   j["files"][0]["size"] = j["files"][0]["size"].get<uint64_t>() + 1;
                 }),
                 Code::kCorruption, {"files[0]", ".size", "pieces hold"});
}

TEST_F(BlzArchiveReject, PlainFileWithTensorPiece) {
  ExpectRejected(Mutated([](ojson& j) {
                   j["files"][0]["pieces"].push_back({{"kind", "tensor"}, {"index", 0}});
                 }),
                 Code::kCorruption, {"files[0]", "exactly one raw piece"});
}

TEST_F(BlzArchiveReject, SafetensorsFileWithoutHeaderPiece) {
  const size_t f = FileOfKind("safetensors");
  ExpectRejected(Mutated([&](ojson& j) {
                   auto& pieces = j["files"][f]["pieces"];
                   pieces.erase(0);
                 }),
                 Code::kCorruption, {"starts with one raw piece"});
}

TEST_F(BlzArchiveReject, DuplicateTensorNameInAFile) {
  ExpectRejected(Mutated([](ojson& j) { j["tensors"][1]["name"] = j["tensors"][0]["name"]; }),
                 Code::kCorruption, {"tensors[1]", "duplicate tensor name"});
}

TEST_F(BlzArchiveReject, NotCanonical) {
  ExpectRejected(Rebuild(json_.dump(1)), Code::kCorruption, {"canonical"});
  // Same content, different key order.
  ExpectRejected(Mutated([](ojson& j) {
                   ojson f = j["files"][0];
                   ojson g = ojson::object();
                   for (const char* k : {"kind", "path", "size", "sha256", "pieces"}) g[k] = f[k];
                   j["files"][0] = g;
                 }),
                 Code::kCorruption, {"canonical"});
}

TEST_F(BlzArchiveReject, OpenRefusesEscapingPathsAndUnpackWritesNothing) {
  for (const char* p : {"../x", "/abs"}) {
    SCOPED_TRACE(p);
    const std::string bad = Mutated([&](ojson& j) { j["files"][0]["path"] = p; });
    const std::string archive = work_ / "escape.blz";
    fs::remove(archive);
    WriteFileBytes(archive, bad);
    auto a = BlzArchive::Open(archive);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), Code::kCorruption) << a.status().ToString();
    EXPECT_NE(a.status().message().find(archive), std::string::npos);
    EXPECT_EQ(DirEntries(work_.path()), (std::vector<std::string>{"escape.blz", "good.blz"}));
  }
}

// ---- GGUF files in the archive -----------------------------------------------------------------

struct GgufSpec {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> dims;  // GGUF order (ne0 first)
};

// Writes a valid GGUF file at `path` (parents created) with the given tensors, alignment and
// end padding; tensor bytes are a deterministic non-zero pattern. Returns the file's bytes.
std::string WriteCraftedGguf(const std::string& path, const std::vector<GgufSpec>& tensors,
                             uint32_t alignment = 32, bool pad_end = true) {
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  if (alignment != 32) h.metadata.push_back({"general.alignment", GgufValue::U32(alignment)});
  for (const GgufSpec& t : tensors) {
    GgufTensorInfo ti;
    ti.name = t.name;
    ti.type = t.type;
    ti.dims = t.dims;
    h.tensors.push_back(ti);
  }
  Status st = AssignGgufOffsets(&h);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<std::string> data;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    std::string d(h.tensors[i].n_bytes, '\0');
    for (size_t k = 0; k < d.size(); ++k) d[k] = char((i * 7 + k) % 251 + 1);
    data.push_back(std::move(d));
  }
  std::vector<ByteSpan> spans;
  for (const auto& d : data) spans.push_back(AsBytes(d));
  fs::create_directories(fs::path(path).parent_path());
  st = WriteGgufFile(path, h, spans, GgufWriteOptions{pad_end});
  EXPECT_TRUE(st.ok()) << st.ToString();
  return ReadFileBytes(path);
}

// q8_0 [32, 3] = 102 bytes, f16 [5] = 10 bytes, q4_K [256] = 144 bytes, f32 [4, 3] = 48 bytes.
const std::vector<GgufSpec>& MixedTensors() {
  static const std::vector<GgufSpec> kTensors = {{"tok_embd.weight", GgmlType::kQ8_0, {32, 3}},
                                                 {"norm.weight", GgmlType::kF16, {5}},
                                                 {"blk.0.ffn.weight", GgmlType::kQ4_K, {256}},
                                                 {"output.weight", GgmlType::kF32, {4, 3}}};
  return kTensors;
}

std::vector<std::string> CorpusGgufFiles(const std::string& corpus) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(corpus + "/gguf")) {
    if (e.path().extension() == ".gguf") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(BlzArchiveGguf, EveryCorpusGgufRoundTripsByteForByte) {
  BLZ_REQUIRE_CORPUS(corpus);
  const auto files = CorpusGgufFiles(corpus);
  ASSERT_GE(files.size(), 5u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto g = GgufReader::Open(path, GgufMode::kFull);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    TempDir work;
    RoundTrip(path, work, 1, g->header().tensors.size());
    auto a = BlzArchive::Open(work / "model.blz");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    const ArchiveHeader& h = a->header();
    ASSERT_EQ(h.files.size(), 1u);
    EXPECT_EQ(h.files[0].kind, "gguf");
    EXPECT_EQ(h.files[0].path, fs::path(path).filename().string());
    // The first piece is the GGUF header with its padding (the whole file without tensors).
    const ByteSpan head = a->RawData(h.files[0].pieces[0].index);
    EXPECT_EQ(head.size(), g->header().tensors.empty() ? fs::file_size(path) : g->file().data_start);
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      const GgufTensorInfo& t = g->header().tensors[i];
      const ArchiveTensor& at = h.tensors[i];
      EXPECT_EQ(at.name, t.name);
      EXPECT_EQ(at.ggml_type, GgmlTypeName(t.type));
      EXPECT_EQ(at.length, t.n_bytes);
      EXPECT_EQ(at.dtype, GgmlToDType(t.type).value());  // the corpus has only f32 / f16
      EXPECT_EQ(at.shape, std::vector<uint64_t>(t.dims.rbegin(), t.dims.rend()));
      EXPECT_TRUE(a->TensorData(i).size() == g->TensorData(i).size() &&
                  std::equal(a->TensorData(i).begin(), a->TensorData(i).end(),
                             g->TensorData(i).begin()))
          << t.name;
    }
  }
}

TEST(BlzArchiveGguf, RefusesTheFixtureWithoutData) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir work;
  Status s = Pack(corpus + "/weight-inspect/fixtures/tiny.gguf", work / "x.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("'test.weight.0'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  EXPECT_TRUE(DirEntries(work.path()).empty());
}

TEST(BlzArchiveGguf, QuantizedTensorsPaddingAndBothEnds) {
  for (bool pad_end : {true, false}) {
    for (uint32_t alignment : {32u, 64u, 128u}) {
      SCOPED_TRACE("pad_end " + std::to_string(pad_end) + " alignment " +
                   std::to_string(alignment));
      TempDir src, work;
      const std::string file = src / "m.gguf";
      WriteCraftedGguf(file, MixedTensors(), alignment, pad_end);
      RoundTrip(file, work, 1, 4);
      auto a = BlzArchive::Open(work / "model.blz");
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      const ArchiveHeader& h = a->header();
      const ArchiveFile& f = h.files[0];
      // q8_0: opaque bytes; f16 / f32: element types with the dims reversed.
      EXPECT_EQ(h.tensors[0].ggml_type, "q8_0");
      EXPECT_EQ(h.tensors[0].dtype, DType::kU8);
      EXPECT_EQ(h.tensors[0].shape, (std::vector<uint64_t>{102}));
      EXPECT_EQ(h.tensors[1].ggml_type, "f16");
      EXPECT_EQ(h.tensors[1].dtype, DType::kF16);
      EXPECT_EQ(h.tensors[1].shape, (std::vector<uint64_t>{5}));
      EXPECT_EQ(h.tensors[2].ggml_type, "q4_K");
      EXPECT_EQ(h.tensors[2].shape, (std::vector<uint64_t>{144}));
      EXPECT_EQ(h.tensors[3].dtype, DType::kF32);
      EXPECT_EQ(h.tensors[3].shape, (std::vector<uint64_t>{3, 4}));
      // Pieces: header, then each tensor followed by its padding when it has any
      // (102, 10, 144 and 48 bytes are never multiples of 32), the last one only if padded.
      std::vector<ArchivePiece::Kind> kinds;
      for (const ArchivePiece& p : f.pieces) kinds.push_back(p.kind);
      using K = ArchivePiece::Kind;
      std::vector<K> want = {K::kRaw, K::kTensor, K::kRaw, K::kTensor, K::kRaw,
                             K::kTensor, K::kRaw, K::kTensor};
      if (pad_end) want.push_back(K::kRaw);
      EXPECT_EQ(kinds, want);
      EXPECT_EQ(a->RawData(f.pieces[2].index).size(), alignment - 102 % alignment);
    }
  }
}

TEST(BlzArchiveGguf, HeaderOnlyGgufsWithAndWithoutEndPadding) {
  for (bool pad_end : {true, false}) {
    SCOPED_TRACE(pad_end);
    TempDir src, work;
    const std::string bytes = WriteCraftedGguf(src / "vocab.gguf", {}, 32, pad_end);
    RoundTrip(src / "vocab.gguf", work, 1, 0);
    auto a = BlzArchive::Open(work / "model.blz");
    ASSERT_TRUE(a.ok());
    ASSERT_EQ(a->header().files[0].pieces.size(), 1u);
    EXPECT_EQ(a->RawData(0).size(), bytes.size());
  }
}

TEST(BlzArchiveGguf, DirectoryWithGgufOnlyAndMixedWithSafetensors) {
  TempDir src, work;
  WriteCraftedGguf(src / "gguf/model-q8.gguf", MixedTensors(), 64, true);
  WriteFileBytes(src / "README.md", "a GGUF repo");
  RoundTrip(src.path(), work, 2, 4);  // no safetensors file needed any more
  auto a = BlzArchive::Open(work / "model.blz");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->header().files[0].path, "README.md");
  EXPECT_EQ(a->header().files[1].path, "gguf/model-q8.gguf");
  EXPECT_EQ(a->header().files[1].kind, "gguf");

  TempDir mixed, work2;
  auto info = WriteTestModel(mixed.path());
  WriteCraftedGguf(mixed / "model.gguf", MixedTensors());
  RoundTrip(mixed.path(), work2, info.files.size() + 1, info.tensors.size() + 4);
}

TEST(BlzArchiveGguf, PackingIsDeterministic) {
  TempDir src, work;
  WriteCraftedGguf(src / "m.gguf", MixedTensors(), 64, false);
  PackStats s1, s2;
  ASSERT_TRUE(Pack(src / "m.gguf", work / "1.blz", &s1).ok());
  ASSERT_TRUE(Pack(src / "m.gguf", work / "2.blz", &s2).ok());
  EXPECT_EQ(s1.digest, s2.digest);
  EXPECT_TRUE(ReadFileBytes(work / "1.blz") == ReadFileBytes(work / "2.blz"));
}

TEST(BlzArchiveGguf, PackRefusesABrokenGgufInADirectory) {
  TempDir src, work;
  WriteTestModel(src.path());
  std::string bytes = WriteCraftedGguf(work / "tmp/m.gguf", MixedTensors());
  WriteFileBytes(src / "m.gguf", bytes.substr(0, bytes.size() - 70));  // inside the data
  Status s = Pack(src.path(), work / "a.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("m.gguf"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(work / "a.blz"));
}

TEST(BlzArchive, SkipsGitAndCacheDirectories) {
  TempDir src, work;
  auto info = WriteTestModel(src.path());
  WriteFileBytes(src / ".git/HEAD", "ref: refs/heads/main\n");
  WriteFileBytes(src / ".git/objects/ab/cdef", "blob");
  WriteFileBytes(src / ".cache/huggingface/download/model.safetensors.metadata", "etag");
  WriteFileBytes(src / "sub/.cache/x.safetensors", "not even a safetensors file");
  WriteFileBytes(src / ".gitattributes", "*.safetensors filter=lfs\n");  // a file: kept
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());
  auto a = BlzArchive::Open(work / "m.blz");
  ASSERT_TRUE(a.ok());
  std::vector<std::string> paths;
  for (const auto& f : a->header().files) paths.push_back(f.path);
  std::vector<std::string> want = info.files;
  want.push_back(".gitattributes");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(paths, want);

  // A directory whose only weights are below .cache/ has no model file.
  TempDir only_cache;
  WriteFileBytes(only_cache / "config.json", "{}");
  fs::create_directories(only_cache / ".cache");
  fs::copy_file(src / "model.safetensors", only_cache / ".cache/model.safetensors");
  Status s = Pack(only_cache.path(), work / "c.blz", nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(".gguf"), std::string::npos) << s.ToString();
}

// Recomputes every digest of an archive whose data bytes were edited (and rewrites its header
// in place: the digests have fixed widths), so only the structural cross-checks can notice.
std::string Rehash(std::string archive) {
  const uint64_t n = LoadLE64(reinterpret_cast<const uint8_t*>(archive.data()) + 16);
  const uint64_t data_start = (24 + n + 63) / 64 * 64;
  ojson j = ojson::parse(archive.substr(24, n));
  const ByteSpan all = AsBytes(archive);
  auto piece = [&](const ojson& e) {
    return all.subspan(data_start + e["offset"].get<uint64_t>(), e["length"].get<uint64_t>());
  };
  for (auto& r : j["raws"]) r["xxh3"] = Hex64(Xxh3_64(piece(r)));
  for (auto& t : j["tensors"]) {
    t["xxh3"] = Hex64(Xxh3_64(piece(t)));
    t["sha256"] = Sha256Hex(piece(t));
  }
  for (auto& f : j["files"]) {
    Sha256 sha;
    for (const auto& p : f["pieces"]) {
      sha.Update(piece(j[p["kind"] == "raw" ? "raws" : "tensors"][p["index"].get<size_t>()]));
    }
    f["sha256"] = sha.FinishHex();
  }
  const std::string text = j.dump();
  EXPECT_EQ(text.size(), n);
  archive.replace(24, n, text);
  return archive;
}

class BlzArchiveGgufVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteCraftedGguf(src_ / "m.gguf", MixedTensors(), 32, true);
    ASSERT_TRUE(Pack(src_ / "m.gguf", work_ / "good.blz", nullptr).ok());
    good_ = ReadFileBytes(work_ / "good.blz");
    auto a = BlzArchive::Open(work_ / "good.blz");
    ASSERT_TRUE(a.ok());
    header_ = a->header();
    ASSERT_TRUE(a->Verify().ok());
    ASSERT_EQ(Rehash(good_), good_);
  }
  Status VerifyBytes(const std::string& bytes) {
    fs::remove(work_ / "bad.blz");
    WriteFileBytes(work_ / "bad.blz", bytes);
    auto a = BlzArchive::Open(work_ / "bad.blz");
    if (!a.ok()) return a.status();
    return VerifyBothWays(*a);
  }
  uint64_t RawAt(size_t piece) const {
    return header_.data_start + header_.raws[header_.files[0].pieces[piece].index].offset;
  }
  TempDir src_, work_;
  std::string good_;
  ArchiveHeader header_;
};

TEST_F(BlzArchiveGgufVerify, CatchesAFlippedPaddingByte) {
  std::string bad = good_;
  bad[RawAt(2)] = 1;  // the padding after the first tensor; its xxh3 no longer matches
  Status s = VerifyBytes(bad);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("raw piece 1 of file 'm.gguf'"), std::string::npos) << s.ToString();
}

TEST_F(BlzArchiveGgufVerify, CatchesNonZeroGgufPaddingWithMatchingDigests) {
  std::string bad = good_;
  bad[RawAt(2) + 3] = 7;
  Status s = VerifyBytes(Rehash(bad));
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("padding piece after GGUF tensor 'tok_embd.weight'"),
            std::string::npos)
      << s.ToString();
}

TEST_F(BlzArchiveGgufVerify, CatchesAGgufHeaderThatDisagreesWithTheTensorList) {
  std::string bad = good_;
  const size_t at = bad.find("norm.weight", RawAt(0));
  ASSERT_LT(at, header_.data_start + header_.raws[0].length);
  bad[at] = 'N';
  Status s = VerifyBytes(Rehash(bad));
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("GGUF tensor 'Norm.weight' does not match archive tensor "
                             "'norm.weight'"),
            std::string::npos)
      << s.ToString();
}

TEST_F(BlzArchiveGgufVerify, CatchesABrokenStoredGgufHeader) {
  std::string bad = good_;
  bad[RawAt(0)] = 'X';  // the GGUF magic
  Status s = VerifyBytes(Rehash(bad));
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("m.gguf"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.ToString();
}

// ParseArchivePrefix's rules for gguf files, on an archive holding both kinds.
class BlzArchiveGgufReject : public BlzArchiveReject {
 protected:
  void SetUp() override {
    TestModelOptions o;
    o.layers = 1;
    WriteTestModel(src_.path(), o);
    WriteCraftedGguf(src_ / "model.gguf", MixedTensors(), 32, true);
    ASSERT_TRUE(Pack(src_.path(), work_ / "good.blz", nullptr).ok());
    good_ = ReadFileBytes(work_ / "good.blz");
    const uint64_t n = LoadLE64(reinterpret_cast<const uint8_t*>(good_.data()) + 16);
    json_ = ojson::parse(good_.substr(24, n));
    data_start_ = (24 + n + 63) / 64 * 64;
    ASSERT_TRUE(ParseArchivePrefix(AsBytes(good_), good_.size()).ok());
    ASSERT_EQ(Rebuild(json_.dump()), good_);
    gguf_ = FileOfKind("gguf");
    ASSERT_NE(gguf_, SIZE_MAX);
    // The first tensor of the gguf file and the first of the safetensors file.
    gt_ = json_["files"][gguf_]["pieces"][1]["index"];
    st_ = json_["files"][FileOfKind("safetensors")]["pieces"][1]["index"];
    ASSERT_EQ(json_["tensors"][gt_]["ggml_type"], "q8_0");
    ASSERT_FALSE(json_["tensors"][st_].contains("ggml_type"));
  }
  size_t gguf_ = 0, gt_ = 0, st_ = 0;
};

TEST_F(BlzArchiveGgufReject, GgufTensorWithoutGgmlType) {
  ExpectRejected(Mutated([&](ojson& j) { j["tensors"][gt_].erase("ggml_type"); }),
                 Code::kCorruption, {"needs a \"ggml_type\""});
}

TEST_F(BlzArchiveGgufReject, SafetensorsTensorWithGgmlType) {
  ExpectRejected(Mutated([&](ojson& j) {
                   ojson t = ojson::object();
                   for (auto& [k, v] : j["tensors"][st_].items()) {
                     t[k] = v;
                     if (k == "dtype") {
                       // ggml's name of the same plain type ("f32", "bf16", "i64"), so only
                       // the file kind is wrong.
                       std::string name = v.get<std::string>();
                       for (char& c : name) c = char(std::tolower(c));
                       t["ggml_type"] = name;
                     }
                   }
                   j["tensors"][st_] = t;
                 }),
                 Code::kCorruption, {"only tensors of gguf files"});
}

TEST_F(BlzArchiveGgufReject, UnknownGgmlType) {
  ExpectRejected(Mutated([&](ojson& j) { j["tensors"][gt_]["ggml_type"] = "q9_Z"; }),
                 Code::kUnsupported, {"ggml_type", "'q9_Z'"});
  // ggml's names are case-sensitive.
  ExpectRejected(Mutated([&](ojson& j) { j["tensors"][gt_]["ggml_type"] = "Q8_0"; }),
                 Code::kUnsupported, {"'Q8_0'"});
}

TEST_F(BlzArchiveGgufReject, QuantizedTensorMustBeBytes) {
  ExpectRejected(Mutated([&](ojson& j) {
                   j["tensors"][gt_]["dtype"] = "I16";
                   j["tensors"][gt_]["shape"] = {51};
                 }),
                 Code::kCorruption, {"block-quantized", "\"U8\""});
  ExpectRejected(Mutated([&](ojson& j) { j["tensors"][gt_]["shape"] = {2, 51}; }),
                 Code::kCorruption, {"block-quantized"});
}

TEST_F(BlzArchiveGgufReject, PlainGgmlTypeNeedsItsDType) {
  const size_t f16 = json_["files"][gguf_]["pieces"][3]["index"];
  ASSERT_EQ(json_["tensors"][f16]["ggml_type"], "f16");
  ExpectRejected(Mutated([&](ojson& j) { j["tensors"][f16]["dtype"] = "BF16"; }),
                 Code::kCorruption, {".dtype", "'BF16'", "'f16'"});
  ExpectRejected(Mutated([&](ojson& j) {
                   j["tensors"][f16]["shape"] = {5, 1, 1, 1, 1};
                 }),
                 Code::kCorruption, {".shape", "at most 4"});
}

TEST_F(BlzArchiveGgufReject, GgufFileLayout) {
  // No header piece.
  ExpectRejected(Mutated([&](ojson& j) { j["files"][gguf_]["pieces"].erase(0); }),
                 Code::kCorruption, {"gguf file starts with one raw piece"});
  // A padding raw right after the header raw.
  ExpectRejected(Mutated([&](ojson& j) {
                   auto& p = j["files"][gguf_]["pieces"];
                   std::swap(p[1], p[2]);
                 }),
                 Code::kCorruption, {"padding and follows a tensor"});
}

TEST_F(BlzArchiveGgufReject, GgmlTypeOutOfCanonicalOrder) {
  ExpectRejected(Mutated([&](ojson& j) {
                   ojson t = ojson::object();
                   t["ggml_type"] = j["tensors"][gt_]["ggml_type"];
                   for (auto& [k, v] : j["tensors"][gt_].items()) {
                     if (k != "ggml_type") t[k] = v;
                   }
                   j["tensors"][gt_] = t;
                 }),
                 Code::kCorruption, {"canonical"});
}

TEST_F(BlzArchiveGgufReject, UnknownKindNextToGgufTensors) {
  ExpectRejected(Mutated([&](ojson& j) { j["files"][gguf_]["kind"] = "gguf2"; }),
                 Code::kUnsupported, {"unknown file kind 'gguf2'"});
}

}  // namespace
}  // namespace blz::formats

// issue 12: the optional progress callbacks of Pack, Verify and Unpack.
namespace blz::formats {
namespace {

struct ProgressLog {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ProgressCallback Fn() {
    return [this](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  }
  // Called at least `min_calls` times, `done` never decreasing, `total` fixed, the last call
  // done == total == `want_total`.
  void ExpectMonotonicTo(uint64_t want_total, size_t min_calls, const std::string& what) const {
    ASSERT_GE(calls.size(), min_calls) << what;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, want_total) << what << " call " << i;
      EXPECT_LE(calls[i].first, calls[i].second) << what << " call " << i;
      if (i > 0) {
        EXPECT_GE(calls[i].first, calls[i - 1].first) << what << " call " << i;
      }
    }
    EXPECT_EQ(calls.back().first, want_total) << what;
  }
};

uint64_t TreeSize(const std::string& dir) {
  uint64_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

TEST(BlzArchiveProgress, PackVerifyUnpackReportMonotonicProgressToTheTotal) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 2;
  o.with_subdir = true;
  o.hidden = 256;
  o.vocab = 8192;  // an 8 MiB tensor: more than one copy chunk
  WriteTestModel(src.path(), o);
  const uint64_t input_bytes = TreeSize(src.path());

  ProgressLog pack;
  PackStats with, without;
  ASSERT_TRUE(Pack(src.path(), work / "p.blz", &with, pack.Fn()).ok());
  ASSERT_TRUE(Pack(src.path(), work / "n.blz", &without).ok());
  // The callback changes nothing that is written.
  EXPECT_EQ(with.digest, without.digest);
  EXPECT_TRUE(ReadFileBytes(work / "p.blz") == ReadFileBytes(work / "n.blz"));
  // The work: the input bytes copied, then the archive hashed.
  pack.ExpectMonotonicTo(input_bytes + with.archive_bytes, 4, "pack");

  auto a = BlzArchive::Open(work / "p.blz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ProgressLog verify;
  ASSERT_TRUE(a->Verify(verify.Fn()).ok());
  verify.ExpectMonotonicTo(a->header().total_size - a->header().data_start, 4, "verify");

  ProgressLog unpack;
  ASSERT_TRUE(Unpack(*a, work / "out", unpack.Fn()).ok());
  unpack.ExpectMonotonicTo(input_bytes, 4, "unpack");
  EXPECT_EQ(TreeSize(work / "out"), input_bytes);
}

TEST(BlzArchiveProgress, VerifyOfADamagedArchiveStopsShortOfTheTotal) {
  TempDir src, work;
  WriteTestModel(src.path());
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());
  std::string bytes = ReadFileBytes(work / "m.blz");
  bytes[bytes.size() - 1] ^= 0x01;  // the last piece's last byte
  WriteFileBytes(work / "bad.blz", bytes);
  auto a = BlzArchive::Open(work / "bad.blz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ProgressLog log;
  Status s = a->Verify(log.Fn());
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  ASSERT_FALSE(log.calls.empty());
  const uint64_t total = a->header().total_size - a->header().data_start;
  EXPECT_EQ(log.calls.back().first, total) << "every byte was read";
  // ... but the final "done" report of a sound archive is not repeated after the failure.
  EXPECT_EQ(std::count(log.calls.begin(), log.calls.end(), std::make_pair(total, total)), 1);
}

}  // namespace
}  // namespace blz::formats
