// client/snapshot.h and client/local_ref.h on a real local store, with archives packed from
// tiny safetensors models (issue 24 items 8, 9, 11).
#include "client/snapshot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "client/local_ref.h"
#include "client/local_store.h"
#include "core/digest.h"
#include "formats/blz_archive.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

using blz::testing::ReadFileBytes;
using blz::testing::TempDir;
using blz::testing::WriteFileBytes;
namespace fs = std::filesystem;

// A one-tensor safetensors model directory; `config` is config.json.
void WriteModel(const std::string& dir, int seed, const std::string& config) {
  const int n = 256;
  std::string data(size_t(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float v = float((i * 31 + seed * 7) % 101) * 0.01f;
    std::memcpy(data.data() + size_t(i) * 4, &v, 4);
  }
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) +
                       "],\"data_offsets\":[0," + std::to_string(data.size()) + "]}}";
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(file.data(), &len, 8);
  fs::create_directories(dir + "/tok");
  WriteFileBytes(dir + "/model.safetensors", file + header + data);
  WriteFileBytes(dir + "/config.json", config);
  WriteFileBytes(dir + "/tok/tokenizer.json", "{\"vocab\":{}}\n");
}

std::map<std::string, std::string> TreeOf(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadFileBytes(e.path());
  }
  return out;
}

ino_t Inode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<LocalStore> s = LocalStore::Open(tmp_ / "store");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  // Packs `model_dir` and publishes the archive in the store; returns its digest.
  std::string Hold(const std::string& model_dir, const std::string& repo, const std::string& tag) {
    formats::PackStats stats;
    const std::string staged = *store_.MakeStagingDir() + "/m.blz";
    EXPECT_TRUE(formats::Pack(model_dir, staged, &stats).ok());
    EXPECT_TRUE(store_.PublishBlob(staged, stats.digest).ok());
    EXPECT_TRUE(store_.RecordVersion("127.0.0.1:5000", repo, stats.digest, stats.archive_bytes,
                                     tag, "sha256:" + std::string(64, 'e'))
                    .ok());
    return stats.digest;
  }
  Result<SnapshotResult> Snap(const std::string& repo, const std::string& tag,
                              const std::string& digest, const FileFilter& filter = {}) {
    return MakeSnapshot(store_, "127.0.0.1:5000", repo, tag, digest, repo + ":" + tag, filter,
                        ProgressMode::kOff);
  }

  TempDir tmp_;
  LocalStore store_;
};

TEST_F(SnapshotTest, LoadableDirectorySharedBetweenVersionsAndReusedOnRepeat) {
  WriteModel(tmp_ / "v1", 1, "{\"same\":true}\n");
  WriteModel(tmp_ / "v2", 2, "{\"same\":true}\n");  // identical config and tokenizer
  const std::string d1 = Hold(tmp_ / "v1", "org/m", "v1");
  const std::string d2 = Hold(tmp_ / "v2", "org/m", "v2");

  Result<SnapshotResult> s1 = Snap("org/m", "v1", d1);
  ASSERT_TRUE(s1.ok()) << s1.status().ToString();
  EXPECT_EQ(s1->path, tmp_ / "store/snapshots/127.0.0.1:5000/org/m:v1");
  EXPECT_FALSE(s1->reused);
  EXPECT_EQ(TreeOf(s1->path), TreeOf(tmp_ / "v1"));

  // The same version again: found, nothing written.
  Result<SnapshotResult> again = Snap("org/m", "v1", d1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->reused);
  EXPECT_EQ(again->bytes_written, 0u);

  // Another version: the identical files are the same inode; the weights differ.
  Result<SnapshotResult> s2 = Snap("org/m", "v2", d2);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(TreeOf(s2->path), TreeOf(tmp_ / "v2"));
  EXPECT_EQ(Inode(s1->path + "/config.json"), Inode(s2->path + "/config.json"));
  EXPECT_EQ(Inode(s1->path + "/tok/tokenizer.json"), Inode(s2->path + "/tok/tokenizer.json"));
  EXPECT_NE(Inode(s1->path + "/model.safetensors"), Inode(s2->path + "/model.safetensors"));
  EXPECT_EQ(s2->bytes_written, fs::file_size(tmp_ / "v2/model.safetensors"));

  // A digest snapshot is named by the first 12 hex digits.
  Result<SnapshotResult> by_digest = Snap("org/m", "", d2);
  ASSERT_TRUE(by_digest.ok());
  EXPECT_EQ(fs::path(by_digest->path).filename().string(), "m@sha256:" + d2.substr(7, 12));
  EXPECT_EQ(SnapshotsOf(store_.dir(), d2).size(), 2u);

  // A tag that moves gets the new version's files at the same path.
  Result<SnapshotResult> moved = Snap("org/m", "v1", d2);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->path, s1->path);
  EXPECT_EQ(TreeOf(moved->path), TreeOf(tmp_ / "v2"));

  // Forgetting a version removes its snapshots and the files only they used; the other
  // version's directory stays whole (hard links: nothing dangles).
  ASSERT_TRUE(Snap("org/m", "v1", d1).ok());
  ASSERT_TRUE(store_.ForgetVersion(d2).ok());
  EXPECT_FALSE(fs::exists(s2->path));
  EXPECT_FALSE(fs::exists(by_digest->path));
  EXPECT_TRUE(SnapshotsOf(store_.dir(), d2).empty());
  EXPECT_EQ(TreeOf(s1->path), TreeOf(tmp_ / "v1"));
  uint64_t held_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(tmp_ / "store/files")) {
    held_files += e.is_regular_file() ? 1 : 0;
  }
  EXPECT_EQ(held_files, 3u);  // v1's three files; v2's weights went
}

TEST_F(SnapshotTest, IncludeExcludeChooseWholeFiles) {
  WriteModel(tmp_ / "v1", 1, "{}\n");
  const std::string d1 = Hold(tmp_ / "v1", "org/m", "v1");
  FileFilter json_only;
  json_only.include = {"*.json"};
  Result<SnapshotResult> s = Snap("org/m", "v1", d1, json_only);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::map<std::string, std::string> tree = TreeOf(s->path);
  EXPECT_EQ(tree.size(), 2u);  // '*' matches '/' as in hf download
  EXPECT_EQ(tree.count("tok/tokenizer.json"), 1u);
  // Other filters: the snapshot is rebuilt, not reused.
  FileFilter no_tok;
  no_tok.exclude = {"tok/"};
  Result<SnapshotResult> s2 = Snap("org/m", "v1", d1, no_tok);
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(s2->reused);
  tree = TreeOf(s2->path);
  EXPECT_EQ(tree.size(), 2u);
  EXPECT_EQ(tree.count("model.safetensors"), 1u);
  EXPECT_EQ(tree.count("tok/tokenizer.json"), 0u);
  // A filter that keeps nothing is an error naming the files.
  FileFilter none;
  none.include = {"*.gguf"};
  Result<SnapshotResult> empty = Snap("org/m", "v1", d1, none);
  EXPECT_EQ(empty.status().code(), Code::kNotFound);
  EXPECT_NE(empty.status().message().find("config.json"), std::string::npos);
}

TEST_F(SnapshotTest, ShortDigestsOfflineTagsAndLocalTag) {
  WriteModel(tmp_ / "v1", 1, "{}\n");
  WriteModel(tmp_ / "v2", 2, "{}\n");
  const std::string d1 = Hold(tmp_ / "v1", "org/m", "v1");
  const std::string d2 = Hold(tmp_ / "v2", "org/m", "v2");

  Result<LooseReference> loose = ParseLooseReference("127.0.0.1:5000/org/m@" + d1.substr(0, 19));
  ASSERT_TRUE(loose.ok()) << loose.status().ToString();
  EXPECT_EQ(loose->digest_prefix, d1.substr(0, 19));
  Result<Reference> resolved = ResolveDigestPrefix(store_, *loose, nullptr);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(resolved->digest, d1);
  // Too short, and "NAME:TAG@digest", are refused.
  EXPECT_EQ(ParseLooseReference("127.0.0.1:5000/org/m@sha256:abc").status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(AsDigestPrefix("sha256:f61e8571989e"), "sha256:f61e8571989e");
  EXPECT_EQ(AsDigestPrefix("f61e857"), "");
  // A prefix nobody has.
  LooseReference none = *loose;
  none.digest_prefix = d1.substr(7, 1) == "0" || d2.substr(7, 1) == "0" ? "sha256:fffffffffffd"
                                                                        : "sha256:000000000000";
  if (d1.rfind(none.digest_prefix, 0) != 0 && d2.rfind(none.digest_prefix, 0) != 0) {
    EXPECT_EQ(ResolveDigestPrefix(store_, none, nullptr).status().code(), Code::kNotFound);
  }
  // An ambiguous prefix lists the candidates: the manifest digest recorded for both versions
  // (the fixture records the same one) starts with "sha256:eeee...".
  LooseReference amb = *loose;
  amb.digest_prefix = "sha256:eeeeeeeeeeee";
  Result<Reference> ambiguous = ResolveDigestPrefix(store_, amb, nullptr);
  EXPECT_EQ(ambiguous.status().code(), Code::kInvalidArgument);
  EXPECT_NE(ambiguous.status().message().find(d1), std::string::npos);
  EXPECT_NE(ambiguous.status().message().find(d2), std::string::npos);

  // Offline resolution of a tag, and of an unknown one.
  Result<Reference> v2 = ParseReference("127.0.0.1:5000/org/m:v2");
  Result<std::optional<HeldVersion>> held = FindHeld(store_, *v2);
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(held->has_value());
  EXPECT_EQ((*held)->digest, d2);
  Result<std::optional<HeldVersion>> unknown =
      FindHeld(store_, *ParseReference("127.0.0.1:5000/org/m:v9"));
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->has_value());

  // blz tag: a new name for a held version, found by tag or by digest afterwards.
  Result<HeldVersion> tagged =
      TagLocally(&store_, *loose, *ParseReference("localhost:6000/other/copy:mine"));
  ASSERT_TRUE(tagged.ok()) << tagged.status().ToString();
  EXPECT_EQ(tagged->digest, d1);
  Result<std::optional<HeldVersion>> copy =
      FindHeld(store_, *ParseReference("localhost:6000/other/copy:mine"));
  ASSERT_TRUE(copy.ok() && copy->has_value());
  EXPECT_EQ((*copy)->digest, d1);
  LooseReference missing;
  missing.ref = *ParseReference("127.0.0.1:5000/org/m:nope");
  EXPECT_EQ(TagLocally(&store_, missing, *v2).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace blz::client
