#include "formats/identify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "formats/blz_archive.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
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

// Hashes computed independently of blz (a Python script applying docs/structural-hash.md to
// the file headers; the GGUF ones are also pinned in structural_hash_test.cc).
constexpr char kTinyGgufHash[] =
    "d775e08a3e69f1edce0f3230ecc28841dd1c871f467529a0a8e7aa361b671202";  // weight-inspect golden
constexpr char kTinySafetensorsHash[] =
    "625a71753a42bd1b8b43e866dc9c8c0b4535394b9f54707a6dc13593b842a873";
constexpr char kLlamaTinyHash[] =
    "0265c219698ac61e286a08b68c2b69e39fbc5efe1b2227de3d60310f6678e614";
constexpr char kTinyGpt2Hash[] =
    "1b8d8ec24a4da177bbcf193eea15b12e216553d92dd17a00df5b9e47edf20999";

StructuralIdentity MustIdentify(const std::string& path) {
  auto id = IdentifyPath(path);
  EXPECT_TRUE(id.ok()) << path << ": " << id.status().ToString();
  return id.ok() ? *id : StructuralIdentity{};
}

void ExpectSameIdentity(const StructuralIdentity& a, const StructuralIdentity& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.gguf_version, b.gguf_version);
  EXPECT_EQ(a.structural_hash, b.structural_hash);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.tensor_count, b.tensor_count);
  EXPECT_EQ(a.metadata_count, b.metadata_count);
}

std::string PackTo(const std::string& input, const std::string& out) {
  Status s = Pack(input, out, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// A small valid GGUF (f32 [4, 2] and q8_0 [32]) with metadata key `arch`.
void WriteSmallGguf(const std::string& path, const std::string& arch = "llama",
                    const std::string& tensor = "w") {
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String(arch)});
  GgufTensorInfo a;
  a.name = tensor;
  a.dims = {4, 2};
  a.type = GgmlType::kF32;
  GgufTensorInfo q;
  q.name = tensor + ".q";
  q.dims = {32};
  q.type = GgmlType::kQ8_0;
  h.tensors = {a, q};
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  const std::string da(32, '\x01'), dq(34, '\x02');
  const std::vector<ByteSpan> spans = {AsBytes(da), AsBytes(dq)};
  fs::create_directories(fs::path(path).parent_path());
  Status s = WriteGgufFile(path, h, spans, GgufWriteOptions{});
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// A safetensors file with one F32 tensor `name` [2] and the given __metadata__.
void WriteSmallSafetensors(const std::string& path, const std::string& name,
                           const std::map<std::string, std::string>& metadata) {
  static const std::string kData(8, '\0');
  fs::create_directories(fs::path(path).parent_path());
  Status s = WriteSafetensors(path, {{name, DType::kF32, {2}, AsBytes(kData)}}, metadata);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// ---- weight-inspect's fixtures ---------------------------------------------------------------

TEST(IdentifyCorpus, TinyGgufGivesTheGoldenIdentity) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string wi = corpus + "/weight-inspect";
  auto id = IdentifyPath(wi + "/fixtures/tiny.gguf");  // declares 32768 bytes, holds none
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->structural_hash, kTinyGgufHash);
  EXPECT_EQ(id->id, "wi:gguf:3:d775e08a");
  EXPECT_EQ(IdentityText(*id), ReadFileBytes(wi + "/golden/id_tiny_gguf.txt"));
}

TEST(IdentifyCorpus, TinySafetensorsIsHashedFromItsHeaderAlone) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string path = corpus + "/weight-inspect/fixtures/tiny.safetensors";
  // The strict reader refuses the whole file (5 bytes after the header that N does not count)...
  auto strict = SafetensorsFile::Open(path);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), Code::kCorruption);
  // ...but its header is valid, and weight-inspect hashes it.
  auto id = IdentifyPath(path);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->structural_hash, kTinySafetensorsHash);
  EXPECT_EQ(id->id, std::string("wi:safetensors:0:") + std::string(kTinySafetensorsHash, 8));
  EXPECT_EQ(id->format, "safetensors");
  EXPECT_FALSE(id->gguf_version.has_value());
  EXPECT_EQ(id->tensor_count, 1u);
  EXPECT_EQ(id->metadata_count, 0u);
  auto in = StructuralInputFromPath(path);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(CanonicalJson(*in),
            "{\"format\":\"safetensors\",\"metadata\":{},\"tensors\":{\"test.weight.0\":{\"name\":"
            "\"test.weight.0\",\"dtype\":\"f32\",\"shape\":[64,128],\"byte_length\":32768}}}");
}

TEST(IdentifyCorpus, EmptyGgufHasAnIdentity) {
  BLZ_REQUIRE_CORPUS(corpus);
  const StructuralIdentity id = MustIdentify(corpus + "/weight-inspect/fixtures/empty.gguf");
  EXPECT_EQ(id.structural_hash,
            "bc1a48d85b9f90518848659f71e0878e6b30d68c464e8843a4282b9d0ebf5166");
  EXPECT_EQ(id.tensor_count, 0u);
}

// ---- Files, archives and directories agree ---------------------------------------------------

TEST(IdentifyCorpus, EveryGgufFileArchiveAndDirectoryAgree) {
  BLZ_REQUIRE_CORPUS(corpus);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(corpus + "/gguf")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 5u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const StructuralIdentity file = MustIdentify(path);
    auto g = GgufReader::Open(path, GgufMode::kHeaderOnly);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(file.structural_hash, StructuralHash(StructuralInputFromGguf(g->header())));
    EXPECT_EQ(file.format, "gguf");
    EXPECT_EQ(file.gguf_version, 3u);
    EXPECT_EQ(file.tensor_count, g->header().tensors.size());
    EXPECT_EQ(file.metadata_count, g->header().metadata.size());
    TempDir work;
    ExpectSameIdentity(MustIdentify(PackTo(path, work / "m.blz")), file);
    // A directory holding it (and a config file, which does not count).
    fs::create_directories(work / "dir");
    fs::copy_file(path, work / "dir" / fs::path(path).filename());
    WriteFileBytes(work / "dir/config.json", "{\"model_type\":\"llama\"}");
    ExpectSameIdentity(MustIdentify(work / "dir"), file);
    ExpectSameIdentity(MustIdentify(PackTo(work / "dir", work / "dir.blz")), file);
    if (path.ends_with("llama-2-tiny-random.gguf")) {
      EXPECT_EQ(file.structural_hash, kLlamaTinyHash);
    }
  }
}

TEST(IdentifyCorpus, SafetensorsFileArchiveAndDirectoryAgree) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string dir = corpus + "/tiny-gpt2/base";
  const StructuralIdentity file = MustIdentify(dir + "/model.safetensors");
  EXPECT_EQ(file.structural_hash, kTinyGpt2Hash);
  EXPECT_EQ(file.tensor_count, 28u);
  EXPECT_EQ(file.metadata_count, 1u);  // {"format": "pt"}
  TempDir work;
  ExpectSameIdentity(MustIdentify(dir), file);  // config.json does not count
  ExpectSameIdentity(MustIdentify(PackTo(dir, work / "dir.blz")), file);
  ExpectSameIdentity(MustIdentify(PackTo(dir + "/model.safetensors", work / "file.blz")), file);
  // The fine-tune changed values only: same structure.
  ExpectSameIdentity(MustIdentify(corpus + "/tiny-gpt2/ft-v1"), file);
  // A different model differs.
  EXPECT_NE(MustIdentify(corpus + "/adapters/opt125m-lora-bf16").structural_hash,
            file.structural_hash);
}

TEST(IdentifyCorpus, TruncatedDataSectionsStillIdentify) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir work;
  const std::string st = ReadFileBytes(corpus + "/tiny-gpt2/base/model.safetensors");
  const uint64_t header_end = 8 + LoadLE64(reinterpret_cast<const uint8_t*>(st.data()));
  for (uint64_t keep : {header_end, header_end + 1000, uint64_t(st.size()) - 1}) {
    SCOPED_TRACE(keep);
    const std::string path = work / ("cut" + std::to_string(keep) + ".safetensors");
    WriteFileBytes(path, st.substr(0, keep));
    EXPECT_EQ(MustIdentify(path).structural_hash, kTinyGpt2Hash);
  }
  // Extra bytes after the data are not looked at either.
  WriteFileBytes(work / "long.safetensors", st + "trailing");
  EXPECT_EQ(MustIdentify(work / "long.safetensors").structural_hash, kTinyGpt2Hash);
  // Cut inside the header: a clear error naming the file.
  WriteFileBytes(work / "head.safetensors", st.substr(0, header_end - 1));
  auto r = IdentifyPath(work / "head.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("head.safetensors"), std::string::npos);

  const std::string gg = ReadFileBytes(corpus + "/gguf/llama-2-tiny-random.gguf");
  auto g = ParseGguf(AsBytes(gg), GgufMode::kFull, "llama");
  ASSERT_TRUE(g.ok());
  WriteFileBytes(work / "cut.gguf", gg.substr(0, g->header_bytes));
  EXPECT_EQ(MustIdentify(work / "cut.gguf").structural_hash, kLlamaTinyHash);
  WriteFileBytes(work / "short.gguf", gg.substr(0, g->header_bytes - 1));
  r = IdentifyPath(work / "short.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
}

// ---- The rule for several model files --------------------------------------------------------

TEST(Identify, ShardedEqualsUnsharded) {
  TempDir one, three, work;
  TestModelOptions o;
  o.with_edge_tensors = true;  // an empty tensor is hashed (byte_length 0) rather than refused
  WriteTestModel(one.path(), o);
  o.shards = 3;
  o.with_subdir = true;
  WriteTestModel(three.path(), o);
  const StructuralIdentity a = MustIdentify(one.path());
  const StructuralIdentity b = MustIdentify(three.path());
  ExpectSameIdentity(a, b);
  ExpectSameIdentity(MustIdentify(PackTo(three.path(), work / "three.blz")), a);
  EXPECT_EQ(a.metadata_count, 1u);  // each shard's {"format": "pt"}, once
  // Not the same as any one shard.
  EXPECT_NE(MustIdentify(three / "model-00001-of-00003.safetensors").structural_hash,
            a.structural_hash);

  auto in = StructuralInputFromPath(three.path());
  ASSERT_TRUE(in.ok());
  const std::string json = CanonicalJson(*in);
  EXPECT_NE(json.find("\"model.empty\":{\"name\":\"model.empty\",\"dtype\":\"f32\",\"shape\":[0,16],"
                      "\"byte_length\":0}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"dtype\":\"bf16\""), std::string::npos);
  EXPECT_NE(json.find("\"model.step\":{\"name\":\"model.step\",\"dtype\":\"i64\",\"shape\":[],"
                      "\"byte_length\":8}"),
            std::string::npos)
      << json;
}

TEST(Identify, ShardsMustHoldDistinctTensorsAndAgreeOnMetadata) {
  TempDir dup, meta, ok, work;
  WriteSmallSafetensors(dup / "a.safetensors", "w", {});
  WriteSmallSafetensors(dup / "sub/b.safetensors", "w", {});
  auto r = IdentifyPath(dup.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find("tensor 'w' is in both 'a.safetensors' and "
                                      "'sub/b.safetensors'"),
            std::string::npos)
      << r.status().ToString();
  // The archive follows the same rule.
  r = IdentifyPath(PackTo(dup.path(), work / "dup.blz"));
  EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().ToString();

  WriteSmallSafetensors(meta / "a.safetensors", "x", {{"format", "pt"}});
  WriteSmallSafetensors(meta / "b.safetensors", "y", {{"format", "tf"}});
  r = IdentifyPath(meta.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find("metadata key 'format'"), std::string::npos)
      << r.status().ToString();

  // Distinct keys are merged; equal values are fine.
  WriteSmallSafetensors(ok / "a.safetensors", "x", {{"format", "pt"}, {"a", "1"}});
  WriteSmallSafetensors(ok / "b.safetensors", "y", {{"format", "pt"}, {"b", "2"}});
  auto in = StructuralInputFromPath(ok.path());
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(CanonicalJson(*in),
            "{\"format\":\"safetensors\",\"metadata\":{\"a\":\"\\\"1\\\"\",\"b\":\"\\\"2\\\"\","
            "\"format\":\"\\\"pt\\\"\"},\"tensors\":{\"x\":{\"name\":\"x\",\"dtype\":\"f32\","
            "\"shape\":[2],\"byte_length\":8},\"y\":{\"name\":\"y\",\"dtype\":\"f32\",\"shape\":"
            "[2],\"byte_length\":8}}}");
}

TEST(Identify, SeveralFilesWithAGgufAreUnsupported) {
  TempDir two, mixed, work;
  WriteSmallGguf(two / "a.gguf", "llama", "a");
  WriteSmallGguf(two / "b.gguf", "llama", "b");
  for (const std::string& p : {two.path(), PackTo(two.path(), work / "two.blz")}) {
    auto r = IdentifyPath(p);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().ToString();
    EXPECT_NE(r.status().message().find("'a.gguf'"), std::string::npos) << r.status().ToString();
  }
  WriteSmallGguf(mixed / "m.gguf");
  WriteSmallSafetensors(mixed / "m.safetensors", "s", {});
  auto r = IdentifyPath(mixed.path());
  EXPECT_EQ(r.status().code(), Code::kUnsupported) << r.status().ToString();
}

TEST(Identify, OneGgufAmongOtherFilesIsThatGguf) {
  TempDir src, work;
  WriteSmallGguf(src / "weights/model.gguf");
  WriteFileBytes(src / "README.md", "hi");
  const StructuralIdentity file = MustIdentify(src / "weights/model.gguf");
  ExpectSameIdentity(MustIdentify(src.path()), file);
  ExpectSameIdentity(MustIdentify(PackTo(src.path(), work / "m.blz")), file);
  EXPECT_EQ(file.tensor_count, 2u);
  // The quantized tensor has byte_length 0, the f32 one its size.
  auto in = StructuralInputFromPath(src / "weights/model.gguf");
  ASSERT_TRUE(in.ok());
  const std::string json = CanonicalJson(*in);
  EXPECT_NE(json.find("\"w\":{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[4,2],\"byte_length\":32}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"w.q\":{\"name\":\"w.q\",\"dtype\":\"q8_0\",\"shape\":[32],"
                      "\"byte_length\":0}"),
            std::string::npos)
      << json;
}

TEST(Identify, GitAndCacheDirectoriesDoNotCount) {
  TempDir src;
  WriteSmallSafetensors(src / "model.safetensors", "w", {{"format", "pt"}});
  const StructuralIdentity alone = MustIdentify(src / "model.safetensors");
  WriteSmallSafetensors(src / ".cache/huggingface/model.safetensors", "other", {});
  WriteSmallGguf(src / ".git/lfs/objects/x.gguf");
  ExpectSameIdentity(MustIdentify(src.path()), alone);
}

TEST(Identify, ADirectoryWithoutModelFiles) {
  TempDir dir;
  WriteFileBytes(dir / "README.md", "no weights");
  auto r = IdentifyPath(dir.path());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
}

// ---- Detection and header-only parsing -------------------------------------------------------

TEST(Identify, DetectModelPath) {
  TempDir dir, work;
  WriteSmallGguf(dir / "m.gguf");
  WriteSmallSafetensors(dir / "m.safetensors", "w", {});
  fs::copy_file(dir / "m.gguf", dir / "renamed.bin");  // GGUF magic, any name
  WriteFileBytes(dir / "fake.gguf", "not a gguf at all");
  WriteFileBytes(dir / "notes.txt", "hello");
  const std::string blz = PackTo(dir / "m.safetensors", work / "weights.bin");  // magic, any name
  EXPECT_EQ(DetectModelPath(dir.path()).value(), ModelPathKind::kDirectory);
  EXPECT_EQ(DetectModelPath(dir / "m.gguf").value(), ModelPathKind::kGguf);
  EXPECT_EQ(DetectModelPath(dir / "renamed.bin").value(), ModelPathKind::kGguf);
  EXPECT_EQ(DetectModelPath(dir / "fake.gguf").value(), ModelPathKind::kGguf);
  EXPECT_EQ(DetectModelPath(dir / "m.safetensors").value(), ModelPathKind::kSafetensors);
  EXPECT_EQ(DetectModelPath(blz).value(), ModelPathKind::kArchive);
  EXPECT_EQ(DetectModelPath(dir / "notes.txt").status().code(), Code::kUnsupported);
  EXPECT_EQ(DetectModelPath(dir / "missing").status().code(), Code::kNotFound);

  ExpectSameIdentity(MustIdentify(dir / "renamed.bin"), MustIdentify(dir / "m.gguf"));
  ExpectSameIdentity(MustIdentify(blz), MustIdentify(dir / "m.safetensors"));
  auto r = IdentifyPath(dir / "fake.gguf");
  EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(IdentifyPath(dir / "notes.txt").status().code(), Code::kUnsupported);
}

TEST(Identify, SafetensorsHeaderOnlyKeepsTheStrictHeaderChecks) {
  TempDir dir;
  WriteSmallSafetensors(dir / "ok.safetensors", "w", {{"k", "v"}});
  const std::string good = ReadFileBytes(dir / "ok.safetensors");
  auto h = ParseSafetensorsHeaderOnly(AsBytes(good), "ok");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->file_size, good.size());
  EXPECT_EQ(h->metadata.at("k"), "v");
  auto full = ParseSafetensorsHeader(AsBytes(good), good.size(), "ok");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(h->tensors.size(), full->tensors.size());

  auto craft = [](const std::string& json) {
    std::string out;
    AppendLE64(&out, json.size());
    return out + json;
  };
  struct Case {
    std::string bytes;
    Code code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"\x01\x02", Code::kCorruption, ""},
      {craft("{}").substr(0, 9), Code::kCorruption, ""},  // N runs past the end
      {craft("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}"),
       Code::kCorruption, "'w'"},  // length != shape x size
      {craft("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}"),
       Code::kCorruption, ""},  // a gap before the first tensor
      {craft("{\"w\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}"),
       Code::kUnsupported, "Q4"},
      {craft("{\"w\":1,\"w\":2}"), Code::kCorruption, "duplicate"},
      {craft("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551615]}}"),
       Code::kCorruption, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bytes);
    auto r = ParseSafetensorsHeaderOnly(AsBytes(c.bytes), "crafted.safetensors");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find("crafted.safetensors"), std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().ToString();
  }
}

TEST(Identify, ArchiveWithANonCanonicalSafetensorsHeaderStillMatchesItsFile) {
  // A safetensors header with padding spaces and keys in an unusual order: the archive stores it
  // verbatim, and both give the same identity.
  TempDir dir, work;
  const std::string json =
      "{\"b\":{\"shape\":[1],\"dtype\":\"I32\",\"data_offsets\":[4,8]},"
      "\"__metadata__\":{\"z\":\"1\"},\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}"
      "      ";
  std::string bytes;
  AppendLE64(&bytes, json.size());
  bytes += json + std::string(8, '\x05');
  WriteFileBytes(dir / "odd.safetensors", bytes);
  const StructuralIdentity file = MustIdentify(dir / "odd.safetensors");
  ExpectSameIdentity(MustIdentify(PackTo(dir / "odd.safetensors", work / "odd.blz")), file);
  EXPECT_EQ(file.tensor_count, 2u);
  EXPECT_EQ(file.metadata_count, 1u);
}

}  // namespace
}  // namespace blz::formats
