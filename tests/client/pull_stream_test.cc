// The streaming patch pull (issue 28, client/pull_stream.h): the model's files are written from
// the bytes apply rebuilds, checked as they go, and published only when checked.
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <optional>

#include "client/local_store.h"
#include "client/pull_stream.h"
#include "client/snapshot.h"
#include "formats/blz_archive_check.h"
#include "patcher/patch_sink.h"
#include "tests/client/push_pull_fixture.h"

namespace blz::client {
namespace {

// Files (relative paths) below `dir`, sorted, with their bytes.
std::map<std::string, std::string> Tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadFileBytes(e.path());
  }
  return out;
}

// Regular files below `dir` whose name is not the SHA-256 of their bytes.
std::vector<std::string> MisnamedStoreFiles(const fs::path& dir) {
  std::vector<std::string> bad;
  if (!fs::exists(dir)) return bad;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    if (Sha256Hex(ReadFileBytes(e.path())) != e.path().filename().string()) {
      bad.push_back(e.path().string());
    }
  }
  return bad;
}

// Begins `files` with `h` and hands it every non-empty piece of `archive` as an apply would,
// the first non-empty tensor's bytes passed through `change` first (if given); then Finish.
Status FeedPieces(FileStreamer* files, const formats::BlzArchive& archive,
                  const formats::ArchiveHeader& h,
                  const std::function<void(std::string*)>& change = {}) {
  Status s = files->Begin(h);
  bool changed = false;
  for (const formats::ArchiveFile& f : h.files) {
    for (const formats::ArchivePiece& p : f.pieces) {
      const bool raw = p.kind == formats::ArchivePiece::Kind::kRaw;
      std::string bytes(AsChars(raw ? archive.RawData(p.index) : archive.TensorData(p.index)));
      if (!raw && !changed && !bytes.empty() && change) {
        change(&bytes);
        changed = true;
      }
      if (!bytes.empty() && s.ok()) s = files->Data(p, 0, AsBytes(bytes));
    }
  }
  return s.ok() ? files->Finish() : s;
}

class PullStreamTest : public PushPullTest {
 protected:
  // tmp_/`dir` packed into tmp_/b.blz, opened (nullopt, with a failure recorded, if not).
  std::optional<formats::BlzArchive> PackedModel(const std::string& dir) {
    formats::PackStats stats;
    Status s = formats::Pack(tmp_ / dir, tmp_ / "b.blz", &stats);
    EXPECT_TRUE(s.ok()) << s.ToString();
    auto archive = formats::BlzArchive::Open(tmp_ / "b.blz");
    EXPECT_TRUE(archive.ok()) << archive.status().ToString();
    if (!s.ok() || !archive.ok()) return std::nullopt;
    return std::move(*archive);
  }
  // Packs `base` and `target`, makes the patch; fills base_/target_/patch_ paths.
  void MakePatch(const std::string& base, const std::string& target) {
    formats::PackStats stats;
    ASSERT_TRUE(formats::Pack(base, tmp_ / "a.blz", &stats).ok());
    ASSERT_TRUE(formats::Pack(target, tmp_ / "b.blz", &stats).ok());
    patcher::DiffStats diff;
    ASSERT_TRUE(
        patcher::CreatePatch(tmp_ / "a.blz", tmp_ / "b.blz", tmp_ / "p.blzpatch", {}, &diff).ok());
  }
};

// The files a FileStreamer writes while a patch of a real fine-tune is applied are the
// fine-tune's files, byte for byte, and the archive beside them is the target archive.
TEST_F(PullStreamTest, StreamedFilesOfARealFineTuneAreByteIdentical) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string base = corpus + "/tiny-gpt2/base", ft = corpus + "/tiny-gpt2/ft-v1";
  MakePatch(base, ft);
  FileStreamer files(FileStreamer::Mode::kDirectory, tmp_ / "out", "", FileFilter{}, "target");
  patcher::ApplyStats stats;
  Status s = patcher::ApplyPatchToSink(tmp_ / "a.blz", tmp_ / "p.blzpatch", tmp_ / "b2.blz",
                                       &files, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(files.Finish().ok());
  EXPECT_EQ(ReadFileBytes(tmp_ / "b2.blz"), ReadFileBytes(tmp_ / "b.blz"));
  EXPECT_EQ(Tree(tmp_ / "out"), Tree(ft));
  EXPECT_GT(files.bytes_written(), 0u);
  auto archive = formats::BlzArchive::Open(tmp_ / "b2.blz");
  ASSERT_TRUE(archive.ok());
  EXPECT_TRUE(formats::CheckStoredHeaders(*archive).ok());

  // kByDigest: the same files named by their SHA-256; a filter drops the others.
  FileFilter only_config;
  only_config.include = {"config.json"};
  FileStreamer by_digest(FileStreamer::Mode::kByDigest, tmp_ / "verified", "", only_config, "t");
  s = patcher::ApplyPatchToSink(tmp_ / "a.blz", tmp_ / "p.blzpatch", tmp_ / "b3.blz", &by_digest,
                                &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(by_digest.Finish().ok());
  std::map<std::string, std::string> want{
      {Sha256Hex(ReadFileBytes(ft + "/config.json")), ReadFileBytes(ft + "/config.json")}};
  EXPECT_EQ(Tree(tmp_ / "verified"), want);
}

// Bytes that do not match the header fail with kCorruption naming the file, and the file never
// appears under its name (only its temporary, removed).
TEST_F(PullStreamTest, WrongBytesFailAndPublishNothing) {
  std::optional<formats::BlzArchive> archive = PackedModel("v2");
  ASSERT_TRUE(archive.has_value());
  const formats::ArchiveHeader& h = archive->header();
  for (FileStreamer::Mode mode : {FileStreamer::Mode::kDirectory, FileStreamer::Mode::kByDigest,
                                  FileStreamer::Mode::kVerifyOnly}) {
    const std::string dir = tmp_ / ("out" + std::to_string(int(mode)));
    FileStreamer files(mode, dir, "", FileFilter{}, "archive X");
    // One bit of the first tensor.
    Status s = FeedPieces(&files, *archive, h, [](std::string* b) { (*b)[b->size() / 2] ^= 1; });
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("archive X"), std::string::npos) << s.message();
    if (mode != FileStreamer::Mode::kVerifyOnly) {
      // config.json sorts first and was sound: it may be there; model.safetensors never.
      for (const auto& [name, bytes] : Tree(dir)) {
        EXPECT_EQ(name.find("model"), std::string::npos) << name;
        EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
      }
    }
  }
}

// PieceCheck::kCheckedBySource (a patch apply, which checks every chunk itself) drops only the
// pieces' xxh3-64: a short piece is still refused in every mode, and kByDigest still proves
// each file's SHA-256, so a flipped bit never gets a store name.
TEST_F(PullStreamTest, CheckedBySourceStillChecksLengthsAndFileDigests) {
  std::optional<formats::BlzArchive> archive = PackedModel("v2");
  ASSERT_TRUE(archive.has_value());
  const formats::ArchiveHeader& h = archive->header();
  const auto checked = FileStreamer::PieceCheck::kCheckedBySource;
  int run = 0;
  for (FileStreamer::Mode mode : {FileStreamer::Mode::kDirectory, FileStreamer::Mode::kByDigest,
                                  FileStreamer::Mode::kVerifyOnly}) {
    const std::string dir = tmp_ / ("short" + std::to_string(run++));
    FileStreamer files(mode, dir, "", FileFilter{}, "archive X", checked);
    Status s = FeedPieces(&files, *archive, h, [](std::string* b) { b->pop_back(); });
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("bytes were rebuilt"), std::string::npos) << s.message();
  }
  const std::string dir = tmp_ / "flipped";
  FileStreamer by_digest(FileStreamer::Mode::kByDigest, dir, "", FileFilter{}, "archive X",
                         checked);
  Status s = FeedPieces(&by_digest, *archive, h, [](std::string* b) { (*b)[b->size() / 2] ^= 1; });
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("SHA-256"), std::string::npos) << s.message();
  EXPECT_TRUE(MisnamedStoreFiles(dir).empty());
  // The sound bytes pass with no piece hashed.
  FileStreamer sound(FileStreamer::Mode::kDirectory, tmp_ / "sound", "", FileFilter{}, "X",
                     checked);
  s = FeedPieces(&sound, *archive, h);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Tree(tmp_ / "sound"), Tree(tmp_ / "v2"));
}

// kByDigest names each file in the store by its SHA-256, so it proves that name: a header whose
// file digest is not its bytes' (each piece's xxh3-64 sound) fails, and no file appears under
// the claimed name. (-o and check-only rely on the caller's archive SHA-256 for the bytes.)
TEST_F(PullStreamTest, ByDigestProvesEachFileName) {
  std::optional<formats::BlzArchive> archive = PackedModel("v2");
  ASSERT_TRUE(archive.has_value());
  formats::ArchiveHeader h = archive->header();
  const std::string claimed(64, 'a');
  h.files.back().sha256 = claimed;
  const std::string dir = tmp_ / "by-digest";
  FileStreamer by_digest(FileStreamer::Mode::kByDigest, dir, "", FileFilter{}, "archive X");
  Status s = FeedPieces(&by_digest, *archive, h);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(h.files.back().path), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir + "/" + claimed));
  EXPECT_TRUE(MisnamedStoreFiles(dir).empty());
}

// Pieces out of order or short are refused rather than written in the wrong place.
TEST_F(PullStreamTest, OutOfOrderOrMissingDataIsRefused) {
  std::optional<formats::BlzArchive> archive = PackedModel("v1");
  ASSERT_TRUE(archive.has_value());
  const formats::ArchiveHeader& h = archive->header();
  ASSERT_GE(h.tensors.size(), 2u);
  {
    FileStreamer files(FileStreamer::Mode::kVerifyOnly, "", "", FileFilter{}, "a");
    ASSERT_TRUE(files.Begin(h).ok());
    EXPECT_EQ(files.Finish().code(), Code::kCorruption);  // nothing arrived
  }
  {
    FileStreamer files(FileStreamer::Mode::kVerifyOnly, "", "", FileFilter{}, "a");
    ASSERT_TRUE(files.Begin(h).ok());
    // The last tensor first: every piece before it is then short.
    formats::ArchivePiece last{formats::ArchivePiece::Kind::kTensor,
                               uint32_t(h.tensors.size() - 1)};
    EXPECT_EQ(files.Data(last, 0, archive->TensorData(last.index)).code(), Code::kCorruption);
  }
  {
    FileStreamer files(FileStreamer::Mode::kVerifyOnly, "", "", FileFilter{}, "a");
    ASSERT_TRUE(files.Begin(h).ok());
    formats::ArchivePiece first_raw = h.files[0].pieces[0];
    ByteSpan data = first_raw.kind == formats::ArchivePiece::Kind::kRaw
                        ? archive->RawData(first_raw.index)
                        : archive->TensorData(first_raw.index);
    ASSERT_GT(data.size(), 1u);
    EXPECT_EQ(files.Data(first_raw, 1, data.subspan(1)).code(), Code::kCorruption);  // a gap
  }
}

// A patch pull writes the files while it applies: -o and the default snapshot both hold the
// new version's files, byte for byte, and the store's tmp/ is empty after.
TEST_F(PullStreamTest, PatchPullStreamsIntoOutputAndSnapshot) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  ASSERT_TRUE(Push(tmp_ / "v2", Ref("v2"), PushOpts()).ok());
  PullOptions snap = PullOpts();
  snap.snapshot = true;
  ASSERT_TRUE(Pull(Ref("v1"), snap).ok());

  Result<PullResult> r = Pull(Ref("v2"), snap);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transfer, "patch");
  EXPECT_TRUE(r->snapshot);
  EXPECT_EQ(Tree(r->output), Tree(tmp_ / "v2"));
  EXPECT_TRUE(MisnamedStoreFiles(tmp_ / "pull-cache/files").empty());
  EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));
  // Kept as its files: no archive beside them, and the files rebuild the archive.
  EXPECT_TRUE(r->kept_as_files);
  EXPECT_EQ(r->archive_path, "");
  Result<LocalStore> store = LocalStore::Open(tmp_ / "pull-cache");
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(store->HasBlob(r->digest));
  EXPECT_TRUE(store->VerifyBlob(r->digest).ok());

  // -o from a store holding only v1.
  PullOptions o = PullOpts(tmp_ / "out");
  o.cache_dir = tmp_ / "cache-o";
  PullOptions o1 = o;
  o1.output_dir = "";
  ASSERT_TRUE(Pull(Ref("v1"), o1).ok());
  r = Pull(Ref("v2"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transfer, "patch");
  EXPECT_EQ(Tree(tmp_ / "out"), Tree(tmp_ / "v2"));
  EXPECT_TRUE(fs::is_empty(tmp_ / "cache-o/tmp"));
  for (const auto& e : fs::directory_iterator(tmp_.path())) {
    EXPECT_NE(e.path().filename().string().rfind(".blz-pull-", 0), 0u) << e.path();
  }
}

// The new archive is not read back after apply: the pull shows no "verifying" and no
// "unpacking" phase (before issue 28 it had both: BlzArchive::Verify, then Unpack).
TEST_F(PullStreamTest, PatchPullDoesNotReadTheArchiveBack) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  ASSERT_TRUE(Push(tmp_ / "v2", Ref("v2"), PushOpts()).ok());
  ASSERT_TRUE(Pull(Ref("v1"), PullOpts()).ok());
  PullOptions o = PullOpts(tmp_ / "out");
  o.progress = ProgressMode::kPlain;
  ::testing::internal::CaptureStderr();
  Result<PullResult> r = Pull(Ref("v2"), o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transfer, "patch");
  EXPECT_NE(err.find("applying patch"), std::string::npos) << err;
  EXPECT_EQ(err.find("verifying"), std::string::npos) << err;
  EXPECT_EQ(err.find("unpacking"), std::string::npos) << err;
  EXPECT_EQ(Tree(tmp_ / "out"), Tree(tmp_ / "v2"));
}

// A corrupted patch byte: the patch route fails (its streamed files are removed, nothing of
// them is visible) and the pull falls back to the archive. With the archive corrupted too, the
// pull fails: no output directory, no half-written file anywhere, the held base untouched.
TEST_F(PullStreamTest, CorruptPatchByteLeavesNothingVisibleAndTheBaseIntact) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  Result<PushResult> p2 = Push(tmp_ / "v2", Ref("v2"), PushOpts());
  ASSERT_TRUE(p2.ok());
  PullOptions snap = PullOpts();
  snap.snapshot = true;
  Result<PullResult> v1 = Pull(Ref("v1"), snap);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  const auto v1_tree = Tree(v1->output);
  Result<LocalStore> store = LocalStore::Open(tmp_ / "pull-cache");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->VerifyBlob(v1->digest).ok());
  registry_.set_corrupt_patch_at(10);

  // Falls back to the blob, with a note; the output is the new version.
  Result<PullResult> r = Pull(Ref("v2"), PullOpts(tmp_ / "out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transfer, "archive");
  ASSERT_FALSE(r->notes.empty());
  EXPECT_NE(r->notes[0].find("not used"), std::string::npos) << r->notes[0];
  EXPECT_EQ(Tree(tmp_ / "out"), Tree(tmp_ / "v2"));
  EXPECT_EQ(registry_.patch_requests(), 1);

  // Patch and archive both bad: the pull fails and leaves nothing.
  MakeModel(tmp_ / "v4", 4);
  ASSERT_TRUE(Push(tmp_ / "v4", Ref("v4"), PushOpts()).ok());
  registry_.set_corrupt_blobs(true);
  for (bool snapshot : {false, true}) {
    SCOPED_TRACE(snapshot ? "snapshot" : "-o");
    PullOptions o = PullOpts(snapshot ? "" : std::string(tmp_ / "out4"));
    o.snapshot = snapshot;
    Result<PullResult> bad = Pull(Ref("v4"), o);
    ASSERT_FALSE(bad.ok());
    EXPECT_FALSE(fs::exists(tmp_ / "out4"));
    EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));
    EXPECT_TRUE(MisnamedStoreFiles(tmp_ / "pull-cache/files").empty());
    EXPECT_FALSE(fs::exists(tmp_ / "pull-cache/snapshots/127.0.0.1:" +
                            std::to_string(server_.port()) + "/org/tiny:v4"));
    for (const auto& e : fs::directory_iterator(tmp_.path())) {
      EXPECT_NE(e.path().filename().string().rfind(".blz-pull-", 0), 0u) << e.path();
    }
    EXPECT_EQ(Tree(v1->output), v1_tree);
    EXPECT_TRUE(store->VerifyBlob(v1->digest).ok());  // the base, kept as files, intact
  }
}

// A default pull of a whole model keeps the version as its files: no blob, the files/ entries
// linked from unpacked/, listed as held. The next patch pull reads that base from the files in
// place and is kept so too; -o, a push's base and `pull --archive-only` rebuild the archive
// into blobs/ from them, verified. A kept file written to in place: the version fails
// verification, the patch from it is refused, the pull drops it and falls back, whole.
TEST_F(PullStreamTest, ADefaultPullKeepsTheVersionAsItsFiles) {
  MakeModel(tmp_ / "v3", 3);
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  ASSERT_TRUE(Push(tmp_ / "v2", Ref("v2"), PushOpts()).ok());
  ASSERT_TRUE(Push(tmp_ / "v3", Ref("v3"), PushOpts()).ok());
  PullOptions snap = PullOpts();
  snap.snapshot = true;
  Result<PullResult> v1 = Pull(Ref("v1"), snap);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  Result<PullResult> v2 = Pull(Ref("v2"), snap);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->transfer, "patch");
  {
    Result<LocalStore> store = LocalStore::Open(tmp_ / "pull-cache");
    ASSERT_TRUE(store.ok());
    for (const PullResult* r : {&*v1, &*v2}) {
      EXPECT_TRUE(r->kept_as_files);
      EXPECT_FALSE(store->HasBlob(r->digest));
      EXPECT_TRUE(store->HasUnpacked(r->digest));
      EXPECT_TRUE(store->VerifyBlob(r->digest).ok());
      Result<formats::ArchiveHeader> h = store->HeldHeader(r->digest);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_EQ(h->total_size, r->full_bytes);
    }
    Result<std::vector<HeldVersion>> held =
        store->Versions("127.0.0.1:" + std::to_string(server_.port()), "org/tiny");
    ASSERT_TRUE(held.ok());
    ASSERT_EQ(held->size(), 2u);
    EXPECT_EQ((*held)[0].digest, v2->digest);
  }
  // Removing the snapshots leaves the kept files: they are linked from unpacked/.
  ASSERT_TRUE(RemoveSnapshotsOf(tmp_ / "pull-cache", v2->digest).ok());
  EXPECT_FALSE(fs::exists(v2->output));

  // v3 from v2, read from v2's files in place.
  Result<PullResult> v3 = Pull(Ref("v3"), snap);
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  EXPECT_EQ(v3->transfer, "patch");
  EXPECT_EQ(v3->patch_from, v2->digest);
  EXPECT_TRUE(v3->kept_as_files);
  EXPECT_EQ(Tree(v3->output), Tree(tmp_ / "v3"));
  EXPECT_TRUE(fs::is_empty(tmp_ / "pull-cache/tmp"));

  // -o of a held kept version: verified, its files copied, no archive rebuilt.
  Result<PullResult> o = Pull(Ref("v3"), PullOpts(tmp_ / "out3"));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->transfer, "local");
  EXPECT_EQ(o->archive_path, "");
  EXPECT_EQ(Tree(tmp_ / "out3"), Tree(tmp_ / "v3"));
  {
    Result<LocalStore> store = LocalStore::Open(tmp_ / "pull-cache");
    ASSERT_TRUE(store.ok());
    EXPECT_FALSE(store->HasBlob(v3->digest));
  }
  // A caller that needs the archive as one file (--archive-only): rebuilt into blobs/, exact.
  Result<PullResult> a = Pull(Ref("v3"), PullOpts());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->transfer, "local");
  EXPECT_EQ(MakeDigest(*Sha256FileHex(a->archive_path)), v3->digest);

  // v1's weights written to in place (chmod, then a changed byte): v1 no longer verifies, and
  // a pull that would patch from it drops it and still gives the right files.
  Result<LocalStore> store = LocalStore::Open(tmp_ / "pull-cache");
  ASSERT_TRUE(store.ok());
  const std::string weights = v1->output + "/model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  fs::permissions(weights, fs::perms::owner_write, fs::perm_options::add);
  std::string bytes = ReadFileBytes(weights);
  bytes[bytes.size() - 1] ^= 1;
  {
    std::ofstream f(weights, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(std::streamoff(bytes.size() - 1));
    f.put(bytes.back());
  }
  EXPECT_EQ(store->VerifyBlob(v1->digest).code(), Code::kDigestMismatch);
  EXPECT_EQ(store->ArchivePath(v1->digest).status().code(), Code::kDigestMismatch);
  EXPECT_FALSE(store->HasBlob(v1->digest));  // nothing unverified published
  ASSERT_TRUE(store->ForgetVersion(v2->digest).ok());
  ASSERT_TRUE(store->ForgetVersion(v3->digest).ok());
  EXPECT_FALSE(store->HasUnpacked(v2->digest));
  Result<PullResult> again = Pull(Ref("v2"), snap);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Tree(again->output), Tree(tmp_ / "v2"));
  EXPECT_NE(again->transfer, "patch");
  EXPECT_FALSE(store->Holds(v1->digest));  // dropped as damaged
  bool noted = false;
  for (const std::string& n : again->notes) noted |= n.find("damaged") != std::string::npos;
  EXPECT_TRUE(noted);
}

// KeepAsFiles links every file from files/: with an entry missing it refuses, naming it, and
// keeps nothing. ForgetVersion takes the kept form and the files only it linked.
TEST_F(PullStreamTest, KeepAsFilesNeedsEveryFileAndForgetFreesThem) {
  std::optional<formats::BlzArchive> archive = PackedModel("v2");
  ASSERT_TRUE(archive.has_value());
  const std::string digest = MakeDigest(*Sha256FileHex(tmp_ / "b.blz"));
  Result<LocalStore> store = LocalStore::Open(tmp_ / "keep-cache");
  ASSERT_TRUE(store.ok());
  Status s = store->KeepAsFiles(digest, archive->Prefix(), archive->bytes().size());
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("files/"), std::string::npos) << s.ToString();
  EXPECT_FALSE(store->Holds(digest));
  EXPECT_TRUE(fs::is_empty(tmp_ / "keep-cache/tmp"));

  // With every file in files/ (as a snapshot leaves them): kept, listed, rebuilt exactly.
  uint64_t file_bytes = 0;
  for (const formats::ArchiveFile& f : archive->header().files) {
    const std::string entry = FilesEntryPath(tmp_ / "keep-cache", f.sha256);
    fs::create_directories(fs::path(entry).parent_path());
    WriteFileBytes(entry, ReadFileBytes(tmp_ / ("v2/" + f.path)));
    file_bytes += f.size;
  }
  ASSERT_TRUE(store->KeepAsFiles(digest, archive->Prefix(), archive->bytes().size()).ok());
  Result<std::vector<HeldVersion>> all = store->AllVersions();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].digest, digest);
  EXPECT_EQ((*all)[0].size, archive->bytes().size());
  Result<std::string> path = store->ArchivePath(digest);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(ReadFileBytes(*path), ReadFileBytes(tmp_ / "b.blz"));
  Result<uint64_t> freed = store->ForgetVersion(digest);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, archive->bytes().size() + file_bytes);
  EXPECT_FALSE(store->Holds(digest));
  for (const formats::ArchiveFile& f : archive->header().files) {
    EXPECT_FALSE(fs::exists(FilesEntryPath(tmp_ / "keep-cache", f.sha256))) << f.path;
  }
}

// A whole-archive download (--no-patch) is checked and unpacked in one read of the archive
// (patcher::FeedArchiveToSink into a FileStreamer): no "unpacking" phase after the check (-o),
// the files byte for byte, into -o and into the snapshot. An archive whose data contradict its
// header is refused on the same read, leaving no file, snapshot or archive behind.
TEST_F(PullStreamTest, FullDownloadIsCheckedAndUnpackedInOneRead) {
  ASSERT_TRUE(Push(tmp_ / "v1", Ref("v1"), PushOpts()).ok());
  for (bool snapshot : {false, true}) {
    SCOPED_TRACE(snapshot ? "snapshot" : "-o");
    PullOptions o = PullOpts(snapshot ? "" : std::string(tmp_ / "out"));
    o.snapshot = snapshot;
    o.allow_patch = false;
    o.cache_dir = tmp_ / (snapshot ? "cache-s" : "cache-o");
    o.progress = ProgressMode::kPlain;
    ::testing::internal::CaptureStderr();
    Result<PullResult> r = Pull(Ref("v1"), o);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->transfer, "archive");
    EXPECT_NE(err.find("verifying"), std::string::npos) << err;
    // (A snapshot's "unpacking" meter counts the streamed files it moves into files/.)
    if (!snapshot) {
      EXPECT_EQ(err.find("unpacking"), std::string::npos) << err;
    }
    EXPECT_EQ(Tree(snapshot ? fs::path(r->output) : fs::path(tmp_ / "out")), Tree(tmp_ / "v1"));
    EXPECT_TRUE(fs::is_empty(o.cache_dir + "/tmp"));
    // The snapshot keeps the version as its files: the downloaded archive is not kept.
    EXPECT_EQ(r->kept_as_files, snapshot);
    Result<LocalStore> store = LocalStore::Open(o.cache_dir);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(store->HasBlob(r->digest), !snapshot);
    EXPECT_TRUE(store->VerifyBlob(r->digest).ok());
    if (!snapshot) {
      EXPECT_EQ(MakeDigest(*Sha256FileHex(r->archive_path)), r->digest);
    }
  }

  // The last tensor's data altered behind a matching digest (a registry that took it).
  std::string tensor;
  const std::string archive = ArchiveWithAFlippedTensorBit(tmp_ / "v2", tmp_ / "v2.blz", &tensor);
  ASSERT_FALSE(tensor.empty());
  registry_.Inject("org/tiny", "bad", archive);
  for (bool snapshot : {false, true}) {
    SCOPED_TRACE(snapshot ? "snapshot" : "-o");
    PullOptions o = PullOpts(snapshot ? "" : std::string(tmp_ / "out2"));
    o.snapshot = snapshot;
    o.allow_patch = false;
    o.cache_dir = tmp_ / "cache-s";
    Result<PullResult> bad = Pull(Ref("bad"), o);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::kCorruption) << bad.status().ToString();
    EXPECT_NE(bad.status().message().find("fails verification"), std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find(tensor), std::string::npos) << bad.status().message();
    EXPECT_FALSE(fs::exists(tmp_ / "out2"));
    EXPECT_TRUE(fs::is_empty(tmp_ / "cache-s/tmp"));
    EXPECT_TRUE(MisnamedStoreFiles(tmp_ / "cache-s/files").empty());
    // Only v1 is held (kept as its files by the snapshot pull above): no blob, one kept version.
    size_t blobs = 0, kept = 0;
    for (const auto& e : fs::recursive_directory_iterator(tmp_ / "cache-s/blobs")) {
      blobs += e.is_regular_file() ? 1 : 0;
    }
    for (const auto& e : fs::recursive_directory_iterator(tmp_ / "cache-s/unpacked")) {
      kept += e.path().filename() == "prefix" ? 1 : 0;
    }
    EXPECT_EQ(blobs, 0u);
    EXPECT_EQ(kept, 1u);
    EXPECT_FALSE(fs::exists(tmp_ / "cache-s/snapshots/127.0.0.1:" +
                            std::to_string(server_.port()) + "/org/tiny:bad"));
  }
}

}  // namespace
}  // namespace blz::client
