// Tests for applying a patch into a sink (patcher/patch_sink.h): the sink sees the target's
// header, then every piece's bytes in data-section order, on a stage of the apply's own; an
// error of the sink is the apply's error and leaves no target archive behind.
#include "patcher/patch_sink.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "formats/blz_archive.h"
#include "formats/pack_layout.h"
#include "patcher/patch.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::patcher {
namespace {

namespace fs = std::filesystem;
using Kind = formats::ArchivePiece::Kind;

// Keeps what it is handed; fails at Data call number `fail_at` (0 = never).
class RecordingSink : public TargetSink {
 public:
  explicit RecordingSink(int fail_at = 0) : fail_at_(fail_at) {}
  Status Begin(const formats::ArchiveHeader& target) override {
    header = target;
    return Status::Ok();
  }
  Status Data(const formats::ArchivePiece& piece, uint64_t offset, ByteSpan bytes) override {
    ++calls;
    threads.push_back(std::this_thread::get_id());
    if (calls == fail_at_) return IOError("sink: disk full at call " + std::to_string(calls));
    order.push_back({piece.kind, piece.index});
    std::string& got = pieces[{piece.kind, piece.index}];
    EXPECT_EQ(offset, got.size()) << "a piece's bytes arrive in order, without gaps";
    got.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Status::Ok();
  }

  formats::ArchiveHeader header;
  int calls = 0;
  std::vector<std::thread::id> threads;
  std::vector<std::pair<Kind, uint32_t>> order;
  std::map<std::pair<Kind, uint32_t>, std::string> pieces;

 private:
  int fail_at_;
};

class PatchSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFileBytes(tmp_ / "a.blz", testing::PackedTestModel(7, 0));
    testing::WriteFileBytes(tmp_ / "b.blz", testing::PackedTestModel(7, 0.01));
    DiffStats stats;
    Status s = CreatePatch(tmp_ / "a.blz", tmp_ / "b.blz", tmp_ / "p.blzpatch", {}, &stats);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  testing::TempDir tmp_;
};

TEST_F(PatchSinkTest, SeesEveryPieceInDataSectionOrderOffTheCallersThread) {
  auto target = formats::BlzArchive::Open(tmp_ / "b.blz");
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  for (int threads : {1, 0}) {
    RecordingSink sink;
    ApplyOptions options;
    options.threads = threads;
    const std::string out = tmp_ / ("out" + std::to_string(threads) + ".blz");
    ApplyStats stats;
    Status s = ApplyPatchToSink(tmp_ / "a.blz", tmp_ / "p.blzpatch", out, &sink, &stats, options);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(testing::ReadFileBytes(out) == testing::ReadFileBytes(tmp_ / "b.blz"));
    ASSERT_EQ(sink.header.tensors.size(), target->header().tensors.size());
    // Every non-empty piece, whole, in the order of the data section (the files' pieces).
    std::vector<std::pair<Kind, uint32_t>> want_order;
    for (const formats::ArchiveFile& f : target->header().files) {
      for (const formats::ArchivePiece& p : f.pieces) {
        ByteSpan bytes = p.kind == Kind::kRaw ? target->RawData(p.index)
                                              : target->TensorData(p.index);
        if (bytes.empty()) continue;
        const std::pair<Kind, uint32_t> key{p.kind, p.index};
        EXPECT_TRUE(sink.pieces[key] == std::string(AsChars(bytes)))
            << (p.kind == Kind::kRaw ? "raw " : "tensor ") << p.index;
        if (want_order.empty() || want_order.back() != std::make_pair(p.kind, p.index)) {
          want_order.push_back({p.kind, p.index});
        }
      }
    }
    std::vector<std::pair<Kind, uint32_t>> got_order;
    for (const auto& k : sink.order) {
      if (got_order.empty() || got_order.back() != k) got_order.push_back(k);
    }
    EXPECT_EQ(got_order, want_order);
    // On one thread, and not the caller's: the sink's work overlaps the archive's.
    ASSERT_FALSE(sink.threads.empty());
    for (const std::thread::id& t : sink.threads) {
      EXPECT_EQ(t, sink.threads.front());
      EXPECT_NE(t, std::this_thread::get_id());
    }
  }
}

// The sink's error stops the apply and is what it returns; no target archive appears, not
// even a temporary one.
TEST_F(PatchSinkTest, AnErrorOfTheSinkIsTheApplysAndLeavesNoTarget) {
  for (int fail_at : {1, 2}) {
    RecordingSink sink(fail_at);
    const std::string dir = tmp_ / ("out" + std::to_string(fail_at));
    const std::string out = dir + "/b.blz";
    fs::create_directories(dir);
    ApplyStats stats;
    Status s = ApplyPatchToSink(tmp_ / "a.blz", tmp_ / "p.blzpatch", out, &sink, &stats);
    EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
    EXPECT_NE(s.message().find("disk full at call " + std::to_string(fail_at)),
              std::string::npos)
        << s.message();
    EXPECT_TRUE(fs::is_empty(dir)) << "fail_at " << fail_at;
    // Nothing after the failed call reached the sink.
    EXPECT_EQ(sink.calls, fail_at);
  }
}

// A base given as a layout over its files (a version the local store keeps as files): the
// rebuilt target and the sink's pieces are those of the archive base, with no target archive
// written, and stats carry the target's prefix. The same files with one byte changed: the apply
// fails, and as kDigestMismatch naming the base and the digest its files give. A patch made
// from the layout (CreatePatch over it, as a push does) is the archive's patch.
TEST_F(PatchSinkTest, ABaseLaidOverItsFilesIsReadInPlace) {
  auto base = formats::BlzArchive::Open(tmp_ / "a.blz");
  auto target = formats::BlzArchive::Open(tmp_ / "b.blz");
  ASSERT_TRUE(base.ok() && target.ok());
  ASSERT_TRUE(formats::Unpack(*base, tmp_ / "files").ok());
  std::vector<std::string> paths;
  for (const formats::ArchiveFile& f : base->header().files) {
    paths.push_back(tmp_ / ("files/" + f.path));
  }
  Result<formats::PackLayout> layout = formats::PackLayout::FromArchivePrefix(
      base->Prefix(), base->header().total_size, paths);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  // A patch made from the layout is the one made from the archive, byte for byte.
  DiffStats diff;
  Status made = CreatePatch(*layout, "kept base", tmp_ / "b.blz", tmp_ / "p2.blzpatch", {}, &diff);
  ASSERT_TRUE(made.ok()) << made.ToString();
  EXPECT_TRUE(testing::ReadFileBytes(tmp_ / "p2.blzpatch") ==
              testing::ReadFileBytes(tmp_ / "p.blzpatch"));

  RecordingSink sink;
  ApplyStats stats;
  Status s = ApplyPatchToSink(&*layout, "kept base", tmp_ / "p.blzpatch", "", &sink, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(stats.target_bytes, target->bytes().size());
  EXPECT_TRUE(stats.target_prefix == std::string(AsChars(target->Prefix())));
  for (uint32_t i = 0; i < target->header().tensors.size(); ++i) {
    const ByteSpan want = target->TensorData(i);
    if (want.empty()) continue;
    const std::pair<Kind, uint32_t> key{Kind::kTensor, i};
    EXPECT_TRUE(sink.pieces[key] == std::string(AsChars(want))) << "tensor " << i;
  }

  // One byte of the largest file changed in place, as a write to a snapshot file would.
  size_t big = 0;
  for (size_t i = 1; i < paths.size(); ++i) {
    if (fs::file_size(paths[i]) > fs::file_size(paths[big])) big = i;
  }
  std::string bytes = testing::ReadFileBytes(paths[big]);
  bytes[bytes.size() - 1] ^= 0x40;
  testing::WriteFileBytes(paths[big], bytes);
  layout = formats::PackLayout::FromArchivePrefix(base->Prefix(), base->header().total_size,
                                                  paths);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  RecordingSink sink2;
  s = ApplyPatchToSink(&*layout, "kept base", tmp_ / "p.blzpatch", "", &sink2, &stats);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_NE(s.message().find("kept base: the base's files give digest"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace blz::patcher
