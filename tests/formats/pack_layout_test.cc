// PackLayout: the archive Pack would write, laid out and read in place. Each case compares it
// with what Pack really wrote for the same input.
#include "formats/pack_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/blz_archive_check.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::blz::testing::ReadFileBytes;
using ::blz::testing::TempDir;
using ::blz::testing::TestModelOptions;
using ::blz::testing::WriteFileBytes;
using ::blz::testing::WriteTestModel;

constexpr char kZeroHex[] = "0000000000000000000000000000000000000000000000000000000000000000";

std::string Str(ByteSpan b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// `archive` (packed from `input`, a directory or one file, into work/a.blz; its digest
// `digest`): copies each of its files to a name of no meaning (its SHA-256, as a
// content-addressed store names it) and lays the archive's stored prefix over those copies:
// the very archive, byte for byte, with the header taken as stored.
void ExpectArchiveRebuiltFromItsFiles(const std::string& input, const TempDir& work,
                                      const BlzArchive* archive, const std::string& digest) {
  const ArchiveHeader& want = archive->header();
  const bool single = want.files.size() == 1 && !std::filesystem::is_directory(input);
  std::vector<std::string> paths;
  for (const ArchiveFile& f : want.files) {
    const std::string bytes = ReadFileBytes(single ? input : input + "/" + f.path);
    paths.push_back(work / Sha256Hex(bytes));
    WriteFileBytes(paths.back(), bytes);
  }
  Result<PackLayout> layout =
      PackLayout::FromArchivePrefix(archive->Prefix(), want.total_size, paths);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE(layout->hashed());
  EXPECT_TRUE(layout->PrefixBytes() == Str(archive->Prefix()));
  ASSERT_EQ(layout->header().tensors.size(), want.tensors.size());
  for (uint32_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_EQ(layout->header().tensors[i].sha256, want.tensors[i].sha256);
    EXPECT_TRUE(Str(layout->TensorData(i)) == Str(archive->TensorData(i))) << want.tensors[i].name;
  }
  for (uint32_t i = 0; i < want.raws.size(); ++i) {
    EXPECT_TRUE(Str(layout->RawData(i)) == Str(archive->RawData(i))) << "raw " << i;
  }
  const std::string whole = ReadFileBytes(work / "a.blz");
  std::string buf(whole.size(), '\x55');
  Status s = layout->ReadInto(0, whole.size(), reinterpret_cast<uint8_t*>(buf.data()));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(buf == whole) << input << ": the rebuilt archive differs";
  Result<std::string> got = layout->ArchiveDigest();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, digest);
}

// Packs `input`, then checks a PackLayout of it against the archive: the same layout before any
// hash is known, every piece's bytes, the same prefix once hashed, and the same digest; and the
// archive laid over copies of its files (ExpectArchiveRebuiltFromItsFiles).
void ExpectLayoutIsThePackedArchive(const std::string& input) {
  TempDir work;
  PackStats stats;
  Status s = Pack(input, work / "a.blz", &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Result<BlzArchive> archive = BlzArchive::Open(work / "a.blz");
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  const ArchiveHeader& want = archive->header();

  Result<PackLayout> layout = PackLayout::Open(input);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const ArchiveHeader& got = layout->header();
  EXPECT_EQ(got.data_start, want.data_start);
  EXPECT_EQ(got.total_size, want.total_size);
  ASSERT_EQ(got.files.size(), want.files.size());
  ASSERT_EQ(got.raws.size(), want.raws.size());
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  ASSERT_EQ(layout->inputs().size(), want.files.size());
  for (size_t i = 0; i < got.files.size(); ++i) {
    EXPECT_EQ(got.files[i].path, want.files[i].path);
    EXPECT_EQ(got.files[i].size, want.files[i].size);
    EXPECT_EQ(got.files[i].sha256, kZeroHex) << "hashed before FillHashes: " << got.files[i].path;
    EXPECT_EQ(layout->inputs()[i]->size(), want.files[i].size);
  }
  for (uint32_t i = 0; i < got.raws.size(); ++i) {
    EXPECT_EQ(got.raws[i].offset, want.raws[i].offset) << "raw " << i;
    EXPECT_EQ(got.raws[i].xxh3, 0u) << "raw " << i;
    EXPECT_EQ(layout->RawSource(i).input, want.raws[i].file_index) << "raw " << i;
    EXPECT_TRUE(Str(layout->RawData(i)) == Str(archive->RawData(i))) << "raw " << i;
  }
  for (uint32_t i = 0; i < got.tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].name, want.tensors[i].name);
    EXPECT_EQ(got.tensors[i].offset, want.tensors[i].offset) << want.tensors[i].name;
    EXPECT_EQ(got.tensors[i].sha256, kZeroHex) << want.tensors[i].name;
    EXPECT_EQ(layout->TensorSource(i).input, want.tensors[i].file_index);
    EXPECT_TRUE(Str(layout->TensorData(i)) == Str(archive->TensorData(i))) << want.tensors[i].name;
  }

  // Hashed: the prefix is the archive's, byte for byte; nothing was written anywhere.
  uint64_t last = 0, input_bytes = 0;
  for (const ArchiveFile& f : want.files) input_bytes += f.size;
  s = layout->FillHashes(nullptr, [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last);
    EXPECT_EQ(total, input_bytes);
    last = done;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(last, input_bytes);
  EXPECT_TRUE(layout->PrefixBytes() == Str(archive->Prefix())) << "prefix differs from Pack's";

  // Any range reads as the archive's bytes: the whole of it, and ranges that straddle the
  // prefix, pieces and padding; inside one piece (or the prefix) without a copy.
  const std::string whole = ReadFileBytes(work / "a.blz");
  std::string buf(whole.size(), '\x55');
  s = layout->ReadInto(0, whole.size(), reinterpret_cast<uint8_t*>(buf.data()));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(buf == whole) << "ReadInto of the whole archive differs";
  size_t direct = 0;
  for (uint64_t off = 0; off + 100 <= whole.size(); off += 977) {
    std::string part(100, '\x55');
    ASSERT_TRUE(layout->ReadInto(off, 100, reinterpret_cast<uint8_t*>(part.data())).ok());
    EXPECT_TRUE(part == whole.substr(off, 100)) << "at " << off;
    if (std::optional<ByteSpan> d = layout->Direct(off, 100)) {
      EXPECT_TRUE(Str(*d) == whole.substr(off, 100)) << "at " << off;
      ++direct;
    }
  }
  for (const ArchiveTensor& t : want.tensors) {
    std::optional<ByteSpan> d = layout->Direct(want.data_start + t.offset, t.length);
    ASSERT_TRUE(d.has_value()) << t.name;
    EXPECT_TRUE(Str(*d) == whole.substr(want.data_start + t.offset, t.length)) << t.name;
  }
  EXPECT_GT(direct, 0u);
  EXPECT_FALSE(layout->Direct(whole.size() - 1, 2).has_value());
  EXPECT_EQ(layout->ReadInto(whole.size() - 1, 2, reinterpret_cast<uint8_t*>(buf.data())).code(),
            Code::kInvalidArgument);

  Result<PackLayout> fresh = PackLayout::Open(input);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->hashed());
  EXPECT_EQ(fresh->ArchiveDigest().status().code(), Code::kInternal);  // hashes unknown yet
  ASSERT_TRUE(fresh->FillHashes(nullptr).ok());
  Result<std::string> digest = fresh->ArchiveDigest();
  ASSERT_TRUE(digest.ok()) << digest.status().ToString();
  EXPECT_EQ(*digest, stats.digest);
  EXPECT_EQ(*digest, MakeDigest(Sha256Hex(ReadFileBytes(work / "a.blz"))));
  ExpectArchiveRebuiltFromItsFiles(input, work, &*archive, stats.digest);
}

TEST(PackLayoutTest, IsThePackedArchiveOfAShardedDirectoryWithEdgeTensors) {
  TempDir src;
  TestModelOptions o;
  o.shards = 3;
  o.with_subdir = true;
  o.with_edge_tensors = true;
  WriteTestModel(src.path(), o);
  WriteFileBytes(src / "empty.txt", "");
  ExpectLayoutIsThePackedArchive(src.path());
}

TEST(PackLayoutTest, IsThePackedArchiveOfCorpusModels) {
  BLZ_REQUIRE_CORPUS(corpus);
  ExpectLayoutIsThePackedArchive(corpus + "/tiny-gpt2/base");
  ExpectLayoutIsThePackedArchive(corpus + "/adapters/opt125m-lora-bf16/adapter_model.safetensors");
  // GGUF: a header piece, tensors, and the padding between them as raw pieces.
  ExpectLayoutIsThePackedArchive(corpus + "/gguf/llama-2-tiny-random.gguf");
  ExpectLayoutIsThePackedArchive(corpus + "/gguf/ggml-vocab-gpt-2.gguf");  // no tensors
}

TEST(PackLayoutTest, RefusesWhatPackRefuses) {
  TempDir src;
  WriteTestModel(src.path());
  Result<PackLayout> l = PackLayout::Open(src / "missing");
  EXPECT_EQ(l.status().code(), Code::kNotFound) << l.status().ToString();
  l = PackLayout::Open(src / "config.json");
  EXPECT_EQ(l.status().code(), Code::kInvalidArgument) << l.status().ToString();
  TempDir empty;
  WriteFileBytes(empty / "README.md", "no weights");
  l = PackLayout::Open(empty.path());
  EXPECT_EQ(l.status().code(), Code::kInvalidArgument) << l.status().ToString();
  // A safetensors file cut short: the parser's error, naming the file.
  std::string bytes = ReadFileBytes(src / "model.safetensors");
  WriteFileBytes(src / "model.safetensors", bytes.substr(0, bytes.size() - 1));
  l = PackLayout::Open(src.path());
  EXPECT_EQ(l.status().code(), Code::kCorruption) << l.status().ToString();
  EXPECT_NE(l.status().message().find("model.safetensors"), std::string::npos)
      << l.status().ToString();
}

// The test model (tests/formats/test_models.h) in src_, packed to work_/a.blz and opened;
// `paths_` are its files in header order.
class PackedTestModel : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteTestModel(src_.path());
    ASSERT_TRUE(Pack(src_.path(), work_ / "a.blz", &stats_).ok());
    archive_ = BlzArchive::Open(work_ / "a.blz");
    ASSERT_TRUE(archive_.ok());
    for (const ArchiveFile& f : archive_->header().files) paths_.push_back(src_ / f.path);
  }
  TempDir src_, work_;
  PackStats stats_;
  Result<BlzArchive> archive_ = Internal("not opened");
  std::vector<std::string> paths_;
};

// Wrong inputs: a damaged prefix, the wrong number of files, a file of the wrong size (named);
// a file of the right size with other bytes lays out, and its digest is not the archive's (the
// caller's proof: FromArchivePrefix checks sizes, not contents).
TEST_F(PackedTestModel, FromArchivePrefixRefusesWhatDoesNotFit) {
  ASSERT_TRUE(archive_.ok());
  const ArchiveHeader& h = archive_->header();
  ASSERT_TRUE(PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, paths_).ok());

  std::string prefix = Str(archive_->Prefix());
  const size_t key = prefix.find("\"tensors\"");
  ASSERT_NE(key, std::string::npos);
  prefix[key + 1] = 'T';  // a header key no archive has
  Result<PackLayout> l = PackLayout::FromArchivePrefix(AsBytes(prefix), h.total_size, paths_);
  EXPECT_EQ(l.status().code(), Code::kCorruption) << l.status().ToString();
  l = PackLayout::FromArchivePrefix(archive_->Prefix().subspan(0, 100), h.total_size, paths_);
  EXPECT_EQ(l.status().code(), Code::kInvalidArgument) << l.status().ToString();
  l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size + 64, paths_);
  EXPECT_EQ(l.status().code(), Code::kCorruption) << l.status().ToString();

  std::vector<std::string> fewer(paths_.begin(), paths_.end() - 1);
  l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, fewer);
  EXPECT_EQ(l.status().code(), Code::kInvalidArgument) << l.status().ToString();

  const size_t big = size_t(std::max_element(h.files.begin(), h.files.end(),
                                             [](const ArchiveFile& a, const ArchiveFile& b) {
                                               return a.size < b.size;
                                             }) -
                            h.files.begin());
  const std::string bytes = ReadFileBytes(paths_[big]);
  std::vector<std::string> changed = paths_;
  changed[big] = work_ / "short";
  WriteFileBytes(changed[big], bytes.substr(0, bytes.size() - 1));
  l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, changed);
  EXPECT_EQ(l.status().code(), Code::kCorruption) << l.status().ToString();
  EXPECT_NE(l.status().message().find(changed[big]), std::string::npos) << l.status().ToString();
  EXPECT_NE(l.status().message().find(h.files[big].path), std::string::npos)
      << l.status().ToString();

  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  changed[big] = work_ / "flipped";
  WriteFileBytes(changed[big], flipped);
  l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, changed);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Result<std::string> digest = l->ArchiveDigest();
  ASSERT_TRUE(digest.ok());
  EXPECT_NE(*digest, stats_.digest);
  changed[big] = work_ / "missing";
  l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, changed);
  EXPECT_EQ(l.status().code(), Code::kNotFound) << l.status().ToString();
}

// The stored-header checks over a layout (a version kept as its files): its own files pass; a
// safetensors file whose JSON header was changed in place (an F32 tensor relabelled I32: same
// size, same offsets, so it still lays out) is refused, naming the file and what is named.
TEST_F(PackedTestModel, StoredHeadersOfALayoutAreCheckedAgainstItsFiles) {
  ASSERT_TRUE(archive_.ok());
  const ArchiveHeader& h = archive_->header();
  Result<PackLayout> l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, paths_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Status s = CheckStoredHeaders(*l, "kept version");
  EXPECT_TRUE(s.ok()) << s.ToString();

  size_t st = h.files.size();
  for (size_t i = 0; i < h.files.size() && st == h.files.size(); ++i) {
    if (h.files[i].kind == "safetensors") st = i;
  }
  ASSERT_LT(st, h.files.size());
  std::string bytes = ReadFileBytes(paths_[st]);
  const size_t at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = 'I';
  std::vector<std::string> changed = paths_;
  changed[st] = work_ / "relabelled";
  WriteFileBytes(changed[st], bytes);
  l = PackLayout::FromArchivePrefix(archive_->Prefix(), h.total_size, changed);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  s = CheckStoredHeaders(*l, "kept version");
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("kept version"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(h.files[st].path), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace blz::formats
