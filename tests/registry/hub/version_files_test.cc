// registry/hub/version_files.h: the files of stored versions of real models (the shared corpus),
// listed with sizes, SHA-256 and Git object ids, and read by any byte range from the archive's
// pieces; listings recorded in the metadata DB and served from it without the archive.
#include "registry/hub/version_files.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "registry/registry.h"
#include "tests/registry/handler_harness.h"
#include "tests/test_util.h"

namespace blz::registry::hub {
namespace {

using registry::testing::Harness;
using registry::testing::PushVersion;

// The archive of `input` (a model directory or one file) packed with formats::Pack.
std::string PackArchive(const std::string& input) {
  blz::testing::TempDir tmp;
  formats::PackStats stats;
  Status s = formats::Pack(input, tmp / "m.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "m.blz");
}

RegistryOptions FullPatchOptions() {
  RegistryOptions o;
  o.full_patch = PatcherFullPatchFunctions();
  o.storage.background = false;
  o.storage.grace = std::chrono::milliseconds(0);
  return o;
}

std::string ReadAll(VersionFiles& files, const std::string& digest, const std::string& path,
                    uint64_t offset, uint64_t length) {
  std::string out;
  Status s = files.Read(digest, path, offset, length, [&](ByteSpan b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(GitBlobIdTest, MatchesGitHashObject) {
  // `printf 'hello\n' | git hash-object --stdin` and the empty blob.
  EXPECT_EQ(GitBlobId("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(GitBlobId(""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  GitBlobHasher h(6);
  h.Update(AsBytes("hel"));
  h.Update(AsBytes("lo\n"));
  EXPECT_EQ(h.FinishHex(), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(GitBlobIdTest, LfsPointerIsGitLfsSpec) {
  EXPECT_EQ(LfsPointer("ab", 12), "version https://git-lfs.github.com/spec/v1\noid sha256:ab\n"
                                  "size 12\n");
  EXPECT_TRUE(IsLfsPath("model.safetensors"));
  EXPECT_TRUE(IsLfsPath("sub/pytorch_model.BIN"));
  EXPECT_TRUE(IsLfsPath("tokenizer.model"));
  EXPECT_FALSE(IsLfsPath("config.json"));
  EXPECT_FALSE(IsLfsPath("safetensors"));
}

TEST(MapFileRangeTest, SkipsPaddingMergesAdjacentPiecesAndRefusesOutsideRanges) {
  formats::ArchiveHeader h;
  h.data_start = 128;
  h.raws = {{0, 10, 0, 0}, {64, 6, 0, 0}};
  formats::ArchiveTensor t;
  t.offset = 16;  // not realistic (unaligned) but adjacent to raw 0 ends at 10? no: a gap
  t.length = 4;
  h.tensors = {t};
  formats::ArchiveFile f;
  f.path = "x";
  f.size = 20;
  f.pieces = {{formats::ArchivePiece::Kind::kRaw, 0},
              {formats::ArchivePiece::Kind::kTensor, 0},
              {formats::ArchivePiece::Kind::kRaw, 1}};
  auto all = MapFileRange(h, f, 0, 20);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].offset, 128u);
  EXPECT_EQ((*all)[0].length, 10u);
  EXPECT_EQ((*all)[1].offset, 144u);
  EXPECT_EQ((*all)[2].offset, 192u);
  EXPECT_EQ((*all)[2].length, 6u);
  // A range across the second and third pieces.
  auto mid = MapFileRange(h, f, 12, 5);
  ASSERT_TRUE(mid.ok());
  ASSERT_EQ(mid->size(), 2u);
  EXPECT_EQ((*mid)[0].offset, 146u);
  EXPECT_EQ((*mid)[0].length, 2u);
  EXPECT_EQ((*mid)[1].offset, 192u);
  EXPECT_EQ((*mid)[1].length, 3u);
  // Adjacent pieces become one segment.
  h.tensors[0].offset = 10;
  auto merged = MapFileRange(h, f, 0, 14);
  ASSERT_TRUE(merged.ok());
  ASSERT_EQ(merged->size(), 1u);
  EXPECT_EQ((*merged)[0].length, 14u);
  EXPECT_EQ(MapFileRange(h, f, 0, 21).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(MapFileRange(h, f, 21, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(MapFileRange(h, f, 5, UINT64_MAX).status().code(), Code::kInvalidArgument);
  auto empty = MapFileRange(h, f, 20, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(VersionFilesTest, ListsAndReadsEveryFileOfACorpusModel) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string dir = corpus + "/tiny-gpt2/base";
  Harness h;
  const std::string digest = PushVersion(&h, "org/gpt2", "main", PackArchive(dir));
  VersionFiles files(&h.registry().storage(), &h.registry().db());
  auto list = files.List(digest);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].path, "config.json");
  EXPECT_EQ((*list)[1].path, "model.safetensors");
  for (const VersionFile& f : *list) {
    const std::string bytes = blz::testing::ReadFileBytes(dir + "/" + f.path);
    EXPECT_EQ(f.size, bytes.size()) << f.path;
    EXPECT_EQ(f.sha256, Sha256Hex(bytes)) << f.path;
    EXPECT_EQ(ReadAll(files, digest, f.path, 0, f.size), bytes) << f.path;
    // Ranges: the first byte, across the safetensors header and the first tensors, the end.
    for (uint64_t at : {uint64_t(0), uint64_t(7), uint64_t(8), f.size / 3, f.size - 1}) {
      const uint64_t n = std::min<uint64_t>(f.size - at, 1000);
      EXPECT_EQ(ReadAll(files, digest, f.path, at, n), bytes.substr(at, n)) << f.path << "@" << at;
    }
  }
  EXPECT_FALSE((*list)[0].lfs);
  EXPECT_EQ((*list)[0].git_oid,
            GitBlobId(blz::testing::ReadFileBytes(dir + "/config.json")));
  EXPECT_TRUE((*list)[1].lfs);
  EXPECT_EQ((*list)[1].git_oid, GitBlobId(LfsPointer((*list)[1].sha256, (*list)[1].size)));
  // Unknown files and ranges outside the file.
  EXPECT_EQ(files.Find(digest, "missing.json").status().code(), Code::kNotFound);
  EXPECT_EQ(files.Find(digest, "../config.json").status().code(), Code::kNotFound);
  EXPECT_EQ(files.Slice(digest, "config.json", 0, (*list)[0].size + 1).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(files.List("sha256:" + std::string(64, '0')).status().code(), Code::kNotFound);
  auto found = files.Find(digest, "model.safetensors");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->sha256, (*list)[1].sha256);
}

TEST(VersionFilesTest, ReadsAGgufFileByteForByte) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string path = corpus + "/gguf/llama-2-tiny-random.gguf";
  Harness h;
  const std::string digest = PushVersion(&h, "org/llama", "q", PackArchive(path));
  VersionFiles files(&h.registry().storage(), &h.registry().db());
  auto list = files.List(digest);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  const std::string bytes = blz::testing::ReadFileBytes(path);
  EXPECT_EQ((*list)[0].sha256, Sha256Hex(bytes));
  EXPECT_TRUE((*list)[0].lfs);
  EXPECT_EQ(ReadAll(files, digest, (*list)[0].path, 0, bytes.size()), bytes);
  auto slice = files.Slice(digest, (*list)[0].path, 0, bytes.size());
  ASSERT_TRUE(slice.ok());
  EXPECT_GT(slice->segments.size(), 1u);  // pieces are not contiguous in the archive
  EXPECT_EQ(slice->length, bytes.size());
}

// The listing is recorded once: a later listing (another process, another replica) reads the
// metadata DB and needs no archive bytes, even when the archive is stored as a full patch only.
TEST(VersionFilesTest, ListingIsRecordedAndNeedsNoRebuild) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string dir = corpus + "/tiny-gpt2/ft-v1";
  Harness h(FullPatchOptions());
  const std::string digest = PushVersion(&h, "org/gpt2", "v1", PackArchive(dir));
  {
    VersionFiles first(&h.registry().storage(), &h.registry().db());
    ASSERT_TRUE(first.List(digest).ok());
  }
  auto rows = h.registry().db().ListVersionFiles(digest);
  ASSERT_TRUE(rows.ok());
  ASSERT_FALSE(rows->empty());
  Status s = h.registry().storage().Compress(digest);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_FALSE(h.registry().blobs().Contains(digest));  // only the full patch is stored
  ASSERT_EQ(h.registry().storage().status().rebuilds, 0u);

  VersionFiles later(&h.registry().storage(), &h.registry().db());
  auto list = later.List(digest);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), rows->size());
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
  // Reading a file's bytes decodes them from the full patch: still no rebuild.
  const std::string config = blz::testing::ReadFileBytes(dir + "/config.json");
  EXPECT_EQ(ReadAll(later, digest, "config.json", 0, config.size()), config);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
}

// The files in <data>/cache/sha256 (rebuilt archives).
std::vector<std::string> CachedArchives(const Harness& h) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(h.data() + "/cache/sha256", ec)) {
    out.push_back(e.path().filename().string());
  }
  return out;
}

// A version stored only as its full patch: any range of any file, and whole files, come from
// the chunks they touch; the archive is never rebuilt into <data>/cache. Before the compression
// the same reads come from the raw archive (the same bytes).
TEST(VersionFilesTest, FilesOfAFullPatchVersionAreReadWithoutARebuild) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string dir = corpus + "/tiny-gpt2/base";
  const std::string model = blz::testing::ReadFileBytes(dir + "/model.safetensors");
  const std::string config = blz::testing::ReadFileBytes(dir + "/config.json");
  Harness h(FullPatchOptions());
  const std::string digest = PushVersion(&h, "org/gpt2", "v1", PackArchive(dir));
  ASSERT_TRUE(h.registry().storage().Compress(digest).ok());
  ASSERT_FALSE(h.registry().blobs().Contains(digest));

  VersionFiles files(&h.registry().storage(), &h.registry().db());  // nothing cached
  auto slice = files.Slice(digest, "model.safetensors", 0, 1);
  ASSERT_TRUE(slice.ok()) << slice.status().ToString();
  EXPECT_EQ(slice->archive_path, "");
  ASSERT_NE(slice->producer, nullptr);
  const uint64_t n = model.size();
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, 1}, {n / 2, 1000}, {n - 1, 1}, {0, n}, {100, n - 200}, {7, 1 << 16}};
  for (const auto& [off, len] : ranges) {
    EXPECT_TRUE(ReadAll(files, digest, "model.safetensors", off, len) == model.substr(off, len))
        << off << "+" << len;
  }
  EXPECT_EQ(ReadAll(files, digest, "config.json", 0, config.size()), config);
  EXPECT_EQ(ReadAll(files, digest, "config.json", 10, 5), config.substr(10, 5));
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
  EXPECT_TRUE(CachedArchives(h).empty());
  // The registry's own instance (as the Hub API and Ollama use it) lists and reads the same way.
  auto list = h.registry().version_files().List(digest);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_TRUE(ReadAll(h.registry().version_files(), digest, "model.safetensors", 0, n) == model);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
  EXPECT_TRUE(CachedArchives(h).empty());
  // Ranges outside the file are refused before anything is decoded.
  EXPECT_EQ(files.Slice(digest, "model.safetensors", n, 1).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(files.Slice(digest, "nope", 0, 1).status().code(), Code::kNotFound);
}

// A manifest PUT records the listing while the raw archive is at hand: a version compressed
// before anyone listed it still lists without a rebuild.
TEST(VersionFilesTest, PushRecordsTheListing) {
  BLZ_REQUIRE_CORPUS(corpus);
  Harness h(FullPatchOptions());
  const std::string digest =
      PushVersion(&h, "org/gpt2", "v1", PackArchive(corpus + "/tiny-gpt2/base"));
  auto rows = h.registry().db().ListVersionFiles(digest);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 2u);
  ASSERT_TRUE(h.registry().storage().Compress(digest).ok());
  auto list = h.registry().version_files().List(digest);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ(h.registry().storage().status().rebuilds, 0u);
}

}  // namespace
}  // namespace blz::registry::hub
