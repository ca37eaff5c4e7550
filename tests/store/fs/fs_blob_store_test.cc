#include "store/fs/fs_blob_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/digest.h"
#include "tests/test_util.h"

namespace blz::store {
namespace {

namespace fs = std::filesystem;

// Number of regular files below `dir`.
size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST(FsBlobStoreTest, OpenCreatesLayout) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp / "data");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(fs::is_directory(tmp / "data/blobs/sha256"));
  EXPECT_TRUE(fs::is_directory(tmp / "data/uploads"));
}

TEST(FsBlobStoreTest, WriterPublishesUnderShardedPath) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string data = "hello blob store";
  const std::string hex = Sha256Hex(data);
  auto w = (*store)->NewWriter();
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(std::string_view(data).substr(0, 5)).ok());
  ASSERT_TRUE(w->Append(std::string_view(data).substr(5)).ok());
  auto info = w->Commit(MakeDigest(hex));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->digest, MakeDigest(hex));
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->path, tmp.path() + "/blobs/sha256/" + hex.substr(0, 2) + "/" + hex);
  EXPECT_EQ(testing::ReadFileBytes(info->path), data);
  auto st = (*store)->Stat(MakeDigest(hex));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, data.size());
  EXPECT_TRUE((*store)->Verify(MakeDigest(hex)).ok());
  EXPECT_EQ(CountFiles((*store)->uploads_dir()), 0u);
}

TEST(FsBlobStoreTest, WrongDigestStoresNothing) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string wrong = MakeDigest(Sha256Hex(std::string_view("other bytes")));
  auto w = (*store)->NewWriter();
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(std::string_view("actual bytes")).ok());
  auto info = w->Commit(wrong);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Code::kDigestMismatch);
  EXPECT_FALSE((*store)->Contains(wrong));
  EXPECT_FALSE((*store)->Contains(MakeDigest(Sha256Hex(std::string_view("actual bytes")))));
  EXPECT_EQ(CountFiles(tmp.path()), 0u);  // neither a blob nor a leftover temp file
}

TEST(FsBlobStoreTest, PublishFileVerifiesDigest) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string data(100000, 'x');
  const std::string temp = (*store)->NewTempPath("upload");
  testing::WriteFileBytes(temp, data);

  // A mismatch leaves the temp file for the caller and publishes nothing.
  const std::string wrong = MakeDigest(Sha256Hex(std::string_view("nope")));
  auto bad = (*store)->Publish(temp, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kDigestMismatch);
  EXPECT_TRUE(fs::exists(temp));
  EXPECT_EQ(CountFiles(tmp / "blobs"), 0u);

  const std::string good = MakeDigest(Sha256Hex(data));
  auto info = (*store)->Publish(temp, good);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(testing::ReadFileBytes(info->path), data);
}

TEST(FsBlobStoreTest, PublishRefusesFilesOutsideUploads) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp / "data");
  ASSERT_TRUE(store.ok());
  testing::WriteFileBytes(tmp / "elsewhere", "abc");
  auto info = (*store)->Publish(tmp / "elsewhere", MakeDigest(Sha256Hex(std::string_view("abc"))));
  EXPECT_FALSE(info.ok());
  EXPECT_TRUE(fs::exists(tmp / "elsewhere"));
}

TEST(FsBlobStoreTest, PublishComputedAndPutBytes) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string temp = (*store)->NewTempPath("patch");
  testing::WriteFileBytes(temp, "computed");
  auto info = (*store)->PublishComputed(temp);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->digest, MakeDigest(Sha256Hex(std::string_view("computed"))));

  auto empty = (*store)->PutBytes("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size, 0u);
  EXPECT_TRUE((*store)->Contains(MakeDigest(Sha256Hex(std::string_view("")))));

  auto mismatch = (*store)->PutBytes("abc", MakeDigest(Sha256Hex(std::string_view("abd"))));
  EXPECT_EQ(mismatch.status().code(), Code::kDigestMismatch);
}

TEST(FsBlobStoreTest, MalformedDigestsAreRejected) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  for (const std::string& d : std::vector<std::string>{"", "sha256:", "sha256:abc", "md5:" + std::string(64, 'a'),
                        "sha256:" + std::string(64, 'A'), "sha256:../../../../etc/passwd"}) {
    EXPECT_EQ((*store)->PathFor(d).status().code(), Code::kInvalidArgument) << d;
    EXPECT_EQ((*store)->Stat(d).status().code(), Code::kInvalidArgument) << d;
  }
  EXPECT_EQ((*store)->Stat(MakeDigest(std::string(64, 'a'))).status().code(), Code::kNotFound);
}

// A store holding one blob, "precious" (info_), for the damage tests.
class StoredBlobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = FsBlobStore::Open(tmp_.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto info = store_->PutBytes("precious");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
  }
  testing::TempDir tmp_;
  std::unique_ptr<FsBlobStore> store_;
  BlobInfo info_;
};

TEST_F(StoredBlobTest, VerifyDetectsDamage) {
  testing::WriteFileBytes(info_.path, "damaged!");
  EXPECT_EQ(store_->Verify(info_.digest).code(), Code::kDigestMismatch);
}

TEST_F(StoredBlobTest, QuarantineMovesTheBlobOutOfTheStore) {
  const std::string hex = info_.digest.substr(7);
  testing::WriteFileBytes(info_.path, "damaged!");
  auto moved = store_->Quarantine(info_.digest);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, store_->quarantine_dir() + "/" + hex);
  EXPECT_EQ(testing::ReadFileBytes(*moved), "damaged!");  // kept for inspection
  EXPECT_FALSE(store_->Contains(info_.digest));
  EXPECT_EQ(store_->Quarantine(info_.digest).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->Quarantine("sha256:xyz").status().code(), Code::kInvalidArgument);

  // Pushed again and damaged again: the first quarantined copy is kept, the second gets a suffix.
  ASSERT_TRUE(store_->PutBytes("precious").ok());
  testing::WriteFileBytes(info_.path, "damaged again");
  auto again = store_->Quarantine(info_.digest);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NE(*again, *moved);
  EXPECT_EQ(again->rfind(store_->quarantine_dir() + "/" + hex + ".", 0), 0u) << *again;
  EXPECT_EQ(testing::ReadFileBytes(*moved), "damaged!");
  EXPECT_EQ(CountFiles(store_->quarantine_dir()), 2u);
}

// A blob hashed as damaged, then pushed again before it is quarantined: the fresh (sound) copy
// is a new file and must stay; only the file that was hashed may be moved.
TEST_F(StoredBlobTest, QuarantineLeavesACopyPushedAfterTheHash) {
  testing::WriteFileBytes(info_.path, "damaged!");
  struct stat hashed {};
  ASSERT_EQ(::stat(info_.path.c_str(), &hashed), 0);
  // The push replaces the file by rename, as BlobWriter does.
  testing::WriteFileBytes(info_.path + ".new", "precious");
  ASSERT_EQ(::rename((info_.path + ".new").c_str(), info_.path.c_str()), 0);
  auto moved = store_->Quarantine(info_.digest, uint64_t(hashed.st_ino));
  EXPECT_EQ(moved.status().code(), Code::kNotFound) << moved.status().ToString();
  EXPECT_TRUE(store_->Contains(info_.digest));
  EXPECT_TRUE(store_->Verify(info_.digest).ok());
  // The file that was hashed is still moved when it is the one in place.
  struct stat now {};
  ASSERT_EQ(::stat(info_.path.c_str(), &now), 0);
  testing::WriteFileBytes(info_.path, "damaged!");
  EXPECT_TRUE(store_->Quarantine(info_.digest, uint64_t(now.st_ino)).ok());
  EXPECT_FALSE(store_->Contains(info_.digest));
}

TEST(FsBlobStoreTest, ScrubQuarantinesDamagedBlobsOnly) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  auto good = (*store)->PutBytes("good blob");
  auto bad = (*store)->PutBytes("blob to be damaged");
  ASSERT_TRUE(good.ok() && bad.ok());
  std::string bytes = testing::ReadFileBytes(bad->path);
  bytes[3] ^= 0x01;  // one flipped bit, same size
  testing::WriteFileBytes(bad->path, bytes);
  testing::WriteFileBytes(tmp / "blobs/sha256/README", "not a blob");  // ignored

  std::vector<std::string> lines;
  auto report = (*store)->Scrub([&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->blobs, 2u);
  EXPECT_EQ(report->bytes, good->size + bad->size);
  EXPECT_EQ(report->quarantined, std::vector<std::string>{bad->digest});
  EXPECT_TRUE(report->errors.empty());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(bad->digest), std::string::npos) << lines[0];
  EXPECT_TRUE((*store)->Contains(good->digest));
  EXPECT_FALSE((*store)->Contains(bad->digest));
  EXPECT_EQ(testing::ReadFileBytes((*store)->quarantine_dir() + "/" + bad->digest.substr(7)), bytes);
  EXPECT_TRUE(fs::exists(tmp / "blobs/sha256/README"));

  // A second scrub finds nothing more.
  report = (*store)->Scrub();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->blobs, 1u);
  EXPECT_TRUE(report->quarantined.empty());
}

TEST(FsBlobStoreTest, AbandonedWriterLeavesNothing) {
  testing::TempDir tmp;
  auto store = FsBlobStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  {
    auto w = (*store)->NewWriter();
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(std::string_view("partial")).ok());
    EXPECT_EQ(CountFiles((*store)->uploads_dir()), 1u);
  }
  EXPECT_EQ(CountFiles(tmp.path()), 0u);
}

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return unsigned(st.st_mode & 0777);
}

// Private blobs must not be readable by other local users, whatever the umask.
TEST(FsBlobStoreTest, DataDirectoryAndBlobsAreOwnerOnly) {
  testing::TempDir tmp;
  const mode_t old_umask = ::umask(022);
  auto store = FsBlobStore::Open(tmp / "data");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (const char* dir : {"data", "data/blobs", "data/blobs/sha256", "data/uploads"}) {
    EXPECT_EQ(ModeOf(tmp / dir), 0700u) << dir;
  }
  auto w = (*store)->NewWriter();
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(std::string_view("secret weights")).ok());
  auto info = w->CommitComputed();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(ModeOf(info->path), 0600u);
  EXPECT_EQ(ModeOf(fs::path(info->path).parent_path().string()), 0700u);

  // An existing data directory open to others is tightened on open.
  ASSERT_EQ(::chmod((tmp / "data").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((tmp / "data/uploads").c_str(), 0777), 0);
  auto again = FsBlobStore::Open(tmp / "data");
  ::umask(old_umask);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ModeOf(tmp / "data"), 0700u);
  EXPECT_EQ(ModeOf(tmp / "data/uploads"), 0700u);
}

// ---- the session file (store/blob_store.h): an upload's chunks written in place ----

// Writes `bytes` at `offset` of the locked session file, as the registry's session does.
void WriteAt(const UploadSessionFile& file, uint64_t offset, const std::string& bytes) {
  ASSERT_EQ(::pwrite(file.fd(), bytes.data(), bytes.size(), off_t(offset)),
            ssize_t(bytes.size()));
}

uint64_t InodeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return uint64_t(st.st_ino);
}

class SessionFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = FsBlobStore::Open(tmp_.path());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  std::string SessionPath() const { return store_->uploads_dir() + "/parts-" + kSession + "/data"; }
  static constexpr const char* kSession = "0a1b2c3d-0000-4000-8000-00000000abcd";
  testing::TempDir tmp_;
  std::unique_ptr<FsBlobStore> store_;
};

// One writer at a time, between threads of one process as between processes (flock on its own
// open file description): a second lock is kUnavailable until the first is released.
TEST_F(SessionFileTest, OneWriterAtATime) {
  auto first = store_->LockSessionFile(kSession);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)->path(), SessionPath());
  EXPECT_EQ((*first)->size(), 0u);
  WriteAt(**first, 0, "abc");
  auto second = store_->LockSessionFile(kSession);
  EXPECT_EQ(second.status().code(), Code::kUnavailable) << second.status().ToString();
  first->reset();
  auto again = store_->LockSessionFile(kSession);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->size(), 3u) << "the bytes stay when the lock is released";
  EXPECT_EQ(store_->LockSessionFile("Bad/Id").status().code(), Code::kInvalidArgument);
}

// Held: the closing PUT's file is a link to the session file, cut to the parts' end (a failed
// chunk's tail goes); no byte is copied. While that link exists nobody is handed the file (the
// blob published from it must never change); once it is gone, the session continues.
TEST_F(SessionFileTest, HeldSessionFileIsLinkedCutAndThenRefusedWhileLinked) {
  const std::string a(5000, 'a'), b(3000, 'b');
  auto held = store_->LockSessionFile(kSession);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  WriteAt(**held, 0, a);
  WriteAt(**held, a.size(), b);
  WriteAt(**held, a.size() + b.size(), "garbage of a chunk that failed");
  const std::vector<std::string> parts = {SessionFilePartName(0, a.size()),
                                          SessionFilePartName(a.size(), a.size() + b.size())};
  const std::string dest = store_->NewTempPath("session");
  Status s = store_->ConcatUploadParts(kSession, parts, dest, held->get());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(testing::ReadFileBytes(dest), a + b);
  EXPECT_EQ(InodeOf(dest), InodeOf(SessionPath())) << "linked, not copied";
  held->reset();
  auto refused = store_->LockSessionFile(kSession);
  EXPECT_EQ(refused.status().code(), Code::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("linked elsewhere"), std::string::npos)
      << refused.status().ToString();
  // A publish that failed removes its file: the session's bytes are all still there.
  ASSERT_TRUE(fs::remove(dest));
  auto resumed = store_->LockSessionFile(kSession);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ((*resumed)->size(), a.size() + b.size());
  EXPECT_EQ(testing::ReadFileBytes(SessionPath()), a + b);
}

// Not held (another request writes the file, or another replica finishes): the parts' bytes
// are copied out; the file and what lies past them stay as they are.
TEST_F(SessionFileTest, UnheldSessionFileIsCopiedOutAndLeftAlone) {
  const std::string a(70000, 'x');
  {
    auto writer = store_->LockSessionFile(kSession);
    ASSERT_TRUE(writer.ok());
    WriteAt(**writer, 0, a + "tail");
  }
  auto other = store_->LockSessionFile(kSession);  // someone else holds it now
  ASSERT_TRUE(other.ok());
  const std::string dest = store_->NewTempPath("session");
  Status s = store_->ConcatUploadParts(kSession, {SessionFilePartName(0, a.size())}, dest,
                                       nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(testing::ReadFileBytes(dest), a);
  EXPECT_NE(InodeOf(dest), InodeOf(SessionPath()));
  EXPECT_EQ(testing::ReadFileBytes(SessionPath()), a + "tail");
}

// Session-file parts followed by an ordinary part (a chunk that found the file locked):
// both, in order. Out of order, or naming more bytes than the file holds: refused.
TEST_F(SessionFileTest, MixedPartsAndRefusals) {
  const std::string a(4096, 'a'), b = "the ordinary part";
  auto held = store_->LockSessionFile(kSession);
  ASSERT_TRUE(held.ok());
  WriteAt(**held, 0, a);
  const std::string body = store_->NewTempPath("body");
  testing::WriteFileBytes(body, b);
  const std::string ordinary = "00000000000000004096-0123456789abcdef";
  ASSERT_TRUE(store_->PutUploadPart(kSession, ordinary, body).ok());
  const std::string in_file = SessionFilePartName(0, a.size());
  for (const UploadSessionFile* h : std::vector<const UploadSessionFile*>{held->get(), nullptr}) {
    SCOPED_TRACE(h != nullptr ? "held" : "not held");
    const std::string dest = store_->NewTempPath("session");
    Status s = store_->ConcatUploadParts(kSession, {in_file, ordinary}, dest, h);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(testing::ReadFileBytes(dest), a + b);
    fs::remove(dest);
  }
  EXPECT_EQ(store_->ConcatUploadParts(kSession, {ordinary, in_file},
                                      store_->NewTempPath("session"), held->get())
                .code(),
            Code::kCorruption);
  EXPECT_EQ(store_->ConcatUploadParts(kSession, {SessionFilePartName(10, 20)},
                                      store_->NewTempPath("session"), nullptr)
                .code(),
            Code::kCorruption);
  for (const UploadSessionFile* h : std::vector<const UploadSessionFile*>{held->get(), nullptr}) {
    Status s = store_->ConcatUploadParts(kSession, {SessionFilePartName(0, a.size() + 1)},
                                         store_->NewTempPath("session"), h);
    EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  }
  EXPECT_EQ(testing::ReadFileBytes(SessionPath()), a) << "a refusal cuts nothing";
}

// A file that was removed or replaced after it was opened is not locked under the old name.
TEST_F(SessionFileTest, DeletedSessionsStartAFreshFile) {
  {
    auto held = store_->LockSessionFile(kSession);
    ASSERT_TRUE(held.ok());
    WriteAt(**held, 0, "old bytes");
  }
  ASSERT_TRUE(store_->DeleteUploadParts(kSession).ok());
  auto fresh = store_->LockSessionFile(kSession);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ((*fresh)->size(), 0u);
}

}  // namespace
}  // namespace blz::store
