#include "formats/inspect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "formats/blz_archive.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/identify.h"
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

TEST(Inspect, DescribesDirectoryArchiveAndFileAlike) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 2;
  o.with_subdir = true;
  o.with_edge_tensors = true;
  auto info = WriteTestModel(src.path(), o);
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());

  auto dir = Describe(src.path());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto blz = Describe(work / "m.blz");
  ASSERT_TRUE(blz.ok()) << blz.status().ToString();
  EXPECT_EQ(dir->format, "hf-dir");
  EXPECT_EQ(blz->format, "blz");
  EXPECT_GT(blz->archive_bytes, blz->total_bytes - 1);

  for (const ModelSummary* s : {&*dir, &*blz}) {
    SCOPED_TRACE(s->format);
    ASSERT_EQ(s->files.size(), info.files.size());
    for (size_t i = 0; i < info.files.size(); ++i) EXPECT_EQ(s->files[i].path, info.files[i]);
    ASSERT_EQ(s->tensors.size(), info.tensors.size());
    uint64_t params = 0, bytes = 0;
    for (const auto& expected : info.tensors) {
      auto it = std::find_if(s->tensors.begin(), s->tensors.end(),
                             [&](const TensorSummary& t) { return t.name == expected.name; });
      ASSERT_NE(it, s->tensors.end()) << expected.name;
      EXPECT_EQ(it->dtype, expected.dtype);
      EXPECT_EQ(it->shape, expected.shape);
      EXPECT_EQ(it->file, expected.file);
      uint64_t n = 1;
      for (uint64_t d : expected.shape) n *= d;
      EXPECT_EQ(it->bytes, n * DTypeSize(expected.dtype));
      params += n;
      bytes += it->bytes;
    }
    EXPECT_EQ(s->parameters, params);
    EXPECT_EQ(s->tensor_bytes, bytes);
  }
  // The directory and its archive list the same tensors in the same order.
  for (size_t i = 0; i < dir->tensors.size(); ++i) {
    EXPECT_EQ(dir->tensors[i].name, blz->tensors[i].name);
  }
  EXPECT_EQ(dir->total_bytes, blz->total_bytes);
  for (const auto& f : blz->files) EXPECT_EQ(f.sha256.size(), 64u);

  auto one = Describe(src / "model-00001-of-00002.safetensors");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->format, "safetensors");
  ASSERT_EQ(one->files.size(), 1u);
  EXPECT_EQ(one->files[0].path, "model-00001-of-00002.safetensors");
  EXPECT_EQ(one->files[0].tensors, one->tensors.size());
}

TEST(Inspect, TextAndJson) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto s = Describe(corpus + "/tiny-gpt2/base");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->parameters, 102714u);  // as PROVENANCE.md states
  EXPECT_EQ(s->tensors.size(), 28u);

  const std::string text = SummaryText(*s);
  EXPECT_NE(text.find("format:   hf-dir"), std::string::npos) << text;
  EXPECT_NE(text.find("102714 parameters"), std::string::npos) << text;
  EXPECT_NE(text.find("F32 x28"), std::string::npos) << text;
  for (const auto& t : s->tensors) EXPECT_NE(text.find(t.name), std::string::npos) << t.name;
  EXPECT_NE(text.find("model.safetensors"), std::string::npos);

  const nlohmann::json j = SummaryJson(*s);
  EXPECT_EQ(j["format"], "hf-dir");
  EXPECT_EQ(j["parameters"], 102714u);
  EXPECT_EQ(j["dtypes"]["F32"], 28u);
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["path"], "config.json");
  EXPECT_EQ(j["files"][1]["tensors"], 28u);
  ASSERT_EQ(j["tensors"].size(), 28u);
  EXPECT_EQ(j["tensors"][0]["name"], s->tensors[0].name);
  EXPECT_EQ(j["tensors"][0]["shape"].get<std::vector<uint64_t>>(), s->tensors[0].shape);
  EXPECT_EQ(j["tensors"][0]["file"], "model.safetensors");
  EXPECT_FALSE(j.contains("archive_bytes"));
}

TEST(Inspect, Errors) {
  TempDir dir;
  EXPECT_EQ(Describe(dir / "missing").status().code(), Code::kNotFound);
  WriteFileBytes(dir / "notes.txt", "hello");
  EXPECT_EQ(Describe(dir / "notes.txt").status().code(), Code::kUnsupported);
  WriteFileBytes(dir / "x.blz", "BLZARCH\nxx");
  EXPECT_EQ(Describe(dir / "x.blz").status().code(), Code::kCorruption);
  WriteFileBytes(dir / "bad.safetensors", std::string(8, '\0') + "{}");
  EXPECT_EQ(Describe(dir / "bad.safetensors").status().code(), Code::kCorruption);
}

// ---- GGUF and the structural identity ------------------------------------------------------------

constexpr char kLlamaTinyHash[] =  // pinned independently in structural_hash_test.cc
    "0265c219698ac61e286a08b68c2b69e39fbc5efe1b2227de3d60310f6678e614";

// Checks a summary of llama-2-tiny-random.gguf (as a file, or inside an archive / directory).
void ExpectLlamaTiny(const ModelSummary& s, const GgufReader& g) {
  const GgufFile& f = g.file();
  ASSERT_EQ(s.tensors.size(), f.header.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {  // GGUF order, GGUF dims, ggml names
    const GgufTensorInfo& t = f.header.tensors[i];
    EXPECT_EQ(s.tensors[i].name, t.name);
    EXPECT_EQ(s.tensors[i].ggml_type, GgmlTypeName(t.type));
    EXPECT_EQ(s.tensors[i].DisplayDType(), GgmlTypeName(t.type));
    EXPECT_EQ(s.tensors[i].shape, t.dims);
    EXPECT_EQ(s.tensors[i].bytes, t.n_bytes);
    EXPECT_EQ(s.tensors[i].dtype, GgmlToDType(t.type).value());
  }
  const FileSummary* gf = nullptr;
  for (const auto& file : s.files) {
    if (file.kind == "gguf") gf = &file;
  }
  ASSERT_NE(gf, nullptr);
  EXPECT_EQ(gf->gguf_version, 3u);
  EXPECT_EQ(gf->metadata_count, f.header.metadata.size());
  EXPECT_EQ(gf->alignment, f.alignment);
  EXPECT_EQ(gf->tensors, f.header.tensors.size());
  EXPECT_EQ(gf->size, f.file_size);
  ASSERT_TRUE(s.identity.has_value()) << s.identity_error;
  EXPECT_EQ(s.identity->structural_hash, kLlamaTinyHash);
  EXPECT_EQ(s.identity->id, "wi:gguf:3:0265c219");
}

TEST(InspectGguf, FileArchiveAndDirectory) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string path = corpus + "/gguf/llama-2-tiny-random.gguf";
  auto g = GgufReader::Open(path, GgufMode::kFull);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  TempDir work;
  fs::create_directories(work / "dir");
  fs::copy_file(path, work / "dir/model.gguf");
  WriteFileBytes(work / "dir/config.json", "{}");
  ASSERT_TRUE(Pack(path, work / "file.blz", nullptr).ok());
  ASSERT_TRUE(Pack(work / "dir", work / "dir.blz", nullptr).ok());

  auto file = Describe(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->format, "gguf");
  ASSERT_EQ(file->files.size(), 1u);
  EXPECT_EQ(file->files[0].path, "llama-2-tiny-random.gguf");
  EXPECT_EQ(file->files[0].kind, "gguf");
  ExpectLlamaTiny(*file, *g);
  for (const std::string& p : {work / "file.blz", work / "dir", work / "dir.blz"}) {
    SCOPED_TRACE(p);
    auto s = Describe(p);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectLlamaTiny(*s, *g);
    EXPECT_EQ(s->parameters, file->parameters);
    EXPECT_EQ(s->tensor_bytes, file->tensor_bytes);
  }

  const std::string text = SummaryText(*file);
  EXPECT_NE(text.find("format:   gguf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gguf:     version 3, " + std::to_string(g->header().metadata.size()) +
                      " metadata keys, alignment 32\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("id:       wi:gguf:3:0265c219\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hash:     " + std::string(kLlamaTinyHash) + " (structural)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("f16 x9, f32 x3"), std::string::npos) << text;
  EXPECT_NE(text.find(g->header().tensors[0].name), std::string::npos) << text;

  const nlohmann::json j = SummaryJson(*file);
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["gguf_version"], 3);
  EXPECT_EQ(j["tensor_count"], g->header().tensors.size());
  EXPECT_EQ(j["metadata_count"], g->header().metadata.size());
  EXPECT_EQ(j["structural_hash"], kLlamaTinyHash);
  EXPECT_EQ(j["structural_id"], "wi:gguf:3:0265c219");
  EXPECT_EQ(j["alignment"], 32);
  EXPECT_FALSE(j.contains("structural_error"));
  EXPECT_EQ(j["dtypes"]["f16"], 9);
  EXPECT_EQ(j["dtypes"]["f32"], 3);
  EXPECT_EQ(j["files"][0]["kind"], "gguf");
  EXPECT_EQ(j["files"][0]["gguf_version"], 3);
  EXPECT_EQ(j["files"][0]["alignment"], 32);
  EXPECT_EQ(j["tensors"][0]["dtype"], std::string(GgmlTypeName(g->header().tensors[0].type)));
  EXPECT_EQ(j["tensors"][0]["shape"].get<std::vector<uint64_t>>(), g->header().tensors[0].dims);

  // In an archive or a directory the GGUF line names the file.
  auto dir = Describe(work / "dir.blz");
  ASSERT_TRUE(dir.ok());
  EXPECT_NE(SummaryText(*dir).find("alignment 32 (model.gguf)\n"), std::string::npos)
      << SummaryText(*dir);
  EXPECT_EQ(SummaryJson(*dir)["structural_hash"], kLlamaTinyHash);
  EXPECT_FALSE(SummaryJson(*dir).contains("alignment"));
}

TEST(InspectGguf, QuantizedTensorsAndVocabOnlyFiles) {
  TempDir dir;
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  h.metadata.push_back({"general.alignment", GgufValue::U32(64)});
  GgufTensorInfo q;
  q.name = "q";
  q.dims = {256, 2};
  q.type = GgmlType::kQ4_K;
  h.tensors.push_back(q);
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  const std::string data(288, '\x07');
  const std::vector<ByteSpan> spans = {AsBytes(data)};
  ASSERT_TRUE(WriteGgufFile(dir / "q.gguf", h, spans, GgufWriteOptions{}).ok());
  auto s = Describe(dir / "q.gguf");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->tensors.size(), 1u);
  EXPECT_EQ(s->tensors[0].ggml_type, "q4_K");
  EXPECT_EQ(s->tensors[0].dtype, DType::kU8);
  EXPECT_EQ(s->tensors[0].shape, (std::vector<uint64_t>{256, 2}));
  EXPECT_EQ(s->tensors[0].bytes, 288u);
  EXPECT_EQ(s->parameters, 512u);  // elements, not bytes
  EXPECT_EQ(s->files[0].alignment, 64u);
  EXPECT_EQ(s->files[0].metadata_count, 2u);
  EXPECT_EQ(SummaryJson(*s)["dtypes"]["q4_K"], 1);
  EXPECT_EQ(SummaryJson(*s)["alignment"], 64);
  // Packed: the archive stores it as bytes, inspect still shows it in GGUF terms.
  ASSERT_TRUE(Pack(dir / "q.gguf", dir / "q.blz", nullptr).ok());
  auto a = Describe(dir / "q.blz");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->tensors[0].ggml_type, "q4_K");
  EXPECT_EQ(a->tensors[0].shape, (std::vector<uint64_t>{256, 2}));
  EXPECT_EQ(a->identity->structural_hash, s->identity->structural_hash);
}

TEST(InspectGguf, VocabOnlyCorpusFile) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto s = Describe(corpus + "/gguf/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->tensors.empty());
  EXPECT_GT(s->files[0].metadata_count, 5u);
  ASSERT_TRUE(s->identity.has_value());
  EXPECT_EQ(s->identity->tensor_count, 0u);
  EXPECT_EQ(s->identity->metadata_count, s->files[0].metadata_count);
}

TEST(InspectGguf, TheWeightInspectFixtureWithoutDataIsNotAValidFile) {
  // inspect validates the whole file; `blz id` (IdentifyPath) needs only the header.
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string path = corpus + "/weight-inspect/fixtures/tiny.gguf";
  auto s = Describe(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kCorruption) << s.status().ToString();
  EXPECT_NE(s.status().message().find("truncated"), std::string::npos) << s.status().ToString();
  EXPECT_TRUE(IdentifyPath(path).ok());
}

TEST(Inspect, EveryInputCarriesItsStructuralIdentity) {
  TempDir src, work;
  TestModelOptions o;
  o.shards = 2;
  WriteTestModel(src.path(), o);
  ASSERT_TRUE(Pack(src.path(), work / "m.blz", nullptr).ok());
  for (const std::string& p :
       {src.path(), work / "m.blz", src / "model-00001-of-00002.safetensors"}) {
    SCOPED_TRACE(p);
    auto s = Describe(p);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto id = IdentifyPath(p);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE(s->identity.has_value()) << s->identity_error;
    EXPECT_EQ(s->identity->structural_hash, id->structural_hash);
    const nlohmann::json j = SummaryJson(*s);
    EXPECT_EQ(j["schema"], 1);
    EXPECT_TRUE(j["gguf_version"].is_null());
    EXPECT_EQ(j["structural_hash"], id->structural_hash);
    EXPECT_EQ(j["structural_id"], id->id);
    EXPECT_EQ(j["tensor_count"], id->tensor_count);
    EXPECT_EQ(j["metadata_count"], id->metadata_count);
    EXPECT_NE(SummaryText(*s).find("id:       " + id->id + "\n"), std::string::npos);
  }
}

TEST(Inspect, AnInputWithoutIdentityIsStillDescribed) {
  TempDir src;
  for (const char* name : {"a.gguf", "b.gguf"}) {
    GgufHeader h;
    h.metadata.push_back({"general.architecture", GgufValue::String(name)});
    ASSERT_TRUE(WriteGgufFile(src / name, h, {}, GgufWriteOptions{}).ok());
  }
  auto s = Describe(src.path());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->files.size(), 2u);
  EXPECT_FALSE(s->identity.has_value());
  EXPECT_NE(s->identity_error.find("unsupported"), std::string::npos) << s->identity_error;
  EXPECT_NE(SummaryText(*s).find("id:       n/a (unsupported: "), std::string::npos)
      << SummaryText(*s);
  const nlohmann::json j = SummaryJson(*s);
  EXPECT_TRUE(j["structural_hash"].is_null());
  EXPECT_TRUE(j["metadata_count"].is_null());
  EXPECT_EQ(j["structural_error"], s->identity_error);
}

TEST(Inspect, SummaryTextEscapesUntrustedNames) {
  ModelSummary s;
  s.path = "dir\n/x";
  s.format = "safetensors";
  FileSummary f;
  f.path = "m\x1b]0;title\x07.safetensors";
  f.kind = "safetensors";
  f.size = 4;
  f.tensors = 1;
  s.files.push_back(f);
  TensorSummary t;
  t.name = "a\x1b[2Jb";
  t.dtype = DType::kF32;
  t.shape = {1};
  t.bytes = 4;
  t.file = "m.safetensors";
  s.tensors.push_back(t);
  s.identity_error = "bad\x1b[31m";
  const std::string text = SummaryText(s);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_NE(text.find("a\\x1b[2Jb"), std::string::npos) << text;
  EXPECT_NE(text.find("path:     dir\\n/x\n"), std::string::npos) << text;
  EXPECT_NE(text.find("m\\x1b]0;title\\x07.safetensors"), std::string::npos) << text;
}

}  // namespace
}  // namespace blz::formats
