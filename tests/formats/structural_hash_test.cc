#include "formats/structural_hash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/gguf.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::testing::HasSubstr;
using SV = StructuralValue;

// The value of the line "<prefix>..." in `text`.
std::string LineValue(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  }
  return "";
}

StructuralInput TinyLikeInput() {
  StructuralInput in;
  in.format = "gguf";
  in.gguf_version = 3;
  in.metadata.push_back({"general.architecture", SV::String("llama")});
  in.tensors.push_back({"test.weight.0", "f32", {64, 128}, 32768});
  return in;
}

// --- weight-inspect's golden ----------------------------------------------------------------

TEST(StructuralHashTest, TinyGgufMatchesWeightInspectGolden) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string golden =
      testing::ReadFileBytes(corpus + "/weight-inspect/golden/id_tiny_gguf.txt");
  const std::string want_hash = LineValue(golden, "structural_hash: ");
  const std::string want_id = LineValue(golden, "ID:        ");
  ASSERT_EQ(want_hash.size(), 64u);
  ASSERT_FALSE(want_id.empty());

  // tiny.gguf has no tensor data: the hash works from the header alone.
  auto r = GgufReader::Open(corpus + "/weight-inspect/fixtures/tiny.gguf", GgufMode::kHeaderOnly);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const StructuralInput in = StructuralInputFromGguf(r->header());
  EXPECT_EQ(StructuralHash(in), want_hash);

  const StructuralIdentity id = Identify(in);
  EXPECT_EQ(id.structural_hash, want_hash);
  EXPECT_EQ(id.id, want_id);
  EXPECT_EQ(id.tensor_count, 1u);
  EXPECT_EQ(id.metadata_count, 1u);
  // The whole identity text matches the golden file byte for byte.
  EXPECT_EQ(IdentityText(id), golden);
}

TEST(StructuralHashTest, TinyCanonicalJsonIsTheDocumentedString) {
  // docs/structural-hash.md, worked example 1 (also in seed-systems.md 2.1).
  EXPECT_EQ(CanonicalJson(TinyLikeInput()),
            R"({"format":"gguf","gguf_version":3,"metadata":{"general.architecture":"\"llama\""},)"
            R"("tensors":{"test.weight.0":{"name":"test.weight.0","dtype":"f32","shape":[64,128],)"
            R"("byte_length":32768}}})");
  EXPECT_EQ(StructuralHash(TinyLikeInput()), Sha256Hex(CanonicalJson(TinyLikeInput())));
}

TEST(StructuralHashTest, WorkedExampleFromTheDocsThroughARealFile) {
  // docs/structural-hash.md, worked example 2: a GGUF written by blz, read back header-only.
  // The expected JSON and hash were produced by an independent Python implementation of the
  // documented rules (json.dumps(..., ensure_ascii=False, separators=(",", ":"))).
  GgufHeader h;
  h.metadata.push_back({"general.name", GgufValue::String("say \"hi\"\n")});
  h.metadata.push_back({"general.alignment", GgufValue::U32(64)});
  h.metadata.push_back({"llama.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5f)});
  h.metadata.push_back({"tokenizer.ggml.add_bos_token", GgufValue::Bool(true)});
  std::vector<GgufValue> toks = {GgufValue::String("<s>"), GgufValue::String("\x01")};
  h.metadata.push_back({"tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, toks).value()});
  std::vector<GgufValue> scores = {GgufValue::F32(0.0f), GgufValue::F32(-1.0f)};
  h.metadata.push_back(
      {"tokenizer.ggml.scores", GgufValue::Array(GgufType::kFloat32, scores).value()});
  h.tensors.push_back({"output_norm.weight", {4096}, GgmlType::kF32, 0, 0});
  h.tensors.push_back({"blk.0.attn_q.weight", {4096, 4096}, GgmlType::kQ4_K, 0, 0});
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  auto header = EncodeGgufHeader(h);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  auto parsed = ParseGguf(AsBytes(*header), GgufMode::kHeaderOnly, "example.gguf");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const StructuralInput in = StructuralInputFromGguf(parsed->header);
  EXPECT_EQ(
      CanonicalJson(in),
      R"({"format":"gguf","gguf_version":3,"metadata":{"general.alignment":"64",)"
      R"("general.name":"\"say \\\"hi\\\"\\n\"",)"
      R"("llama.attention.layer_norm_rms_epsilon":"f32:4532020583461814272",)"
      R"("tokenizer.ggml.add_bos_token":"true",)"
      R"("tokenizer.ggml.scores":"[f32:0,f32:13830554455654793216]",)"
      R"("tokenizer.ggml.tokens":"[\"<s>\",\"\\u0001\"]"},)"
      R"("tensors":{"blk.0.attn_q.weight":{"name":"blk.0.attn_q.weight","dtype":"q4_k",)"
      R"("shape":[4096,4096],"byte_length":0},"output_norm.weight":{"name":"output_norm.weight",)"
      R"("dtype":"f32","shape":[4096],"byte_length":16384}}})");
  EXPECT_EQ(StructuralHash(in), "70cc1575a316102cdfabb474cbddb8a7518a6fa9e320535e62c8654230f00283");
}

TEST(StructuralHashTest, CorpusHashesMatchAnIndependentImplementation) {
  BLZ_REQUIRE_CORPUS(corpus);
  // Computed by an independent Python implementation of docs/structural-hash.md.
  const std::pair<const char*, const char*> want[] = {
      {"gguf/llama-2-tiny-random.gguf",
       "0265c219698ac61e286a08b68c2b69e39fbc5efe1b2227de3d60310f6678e614"},
      {"gguf/ggml-vocab-phi-3.gguf",
       "a862cf1fbf7671d4b1a778ca3fa2d82a7491b75b59847a28bb688b086f8dc05f"},
      {"weight-inspect/fixtures/empty.gguf",
       "bc1a48d85b9f90518848659f71e0878e6b30d68c464e8843a4282b9d0ebf5166"},
  };
  for (const auto& [rel, hash] : want) {
    auto r = GgufReader::Open(corpus + "/" + rel, GgufMode::kHeaderOnly);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(StructuralHash(StructuralInputFromGguf(r->header())), hash) << rel;
  }
}

TEST(StructuralHashTest, IdString) {
  EXPECT_EQ(StructuralId("gguf", 3, "d775e08a3e69f1ed"), "wi:gguf:3:d775e08a");
  EXPECT_EQ(StructuralId("safetensors", std::nullopt, "0123456789abcdef"),
            "wi:safetensors:0:01234567");
}

// --- Value encodings ------------------------------------------------------------------------

TEST(StructuralHashTest, ScalarEncodings) {
  EXPECT_EQ(EncodeStructuralValue(SV::Null()), "null");
  EXPECT_EQ(EncodeStructuralValue(SV::Bool(true)), "true");
  EXPECT_EQ(EncodeStructuralValue(SV::Bool(false)), "false");
  EXPECT_EQ(EncodeStructuralValue(SV::Int(-5)), "-5");
  EXPECT_EQ(EncodeStructuralValue(SV::UInt(4096)), "4096");
  // u64 is cast to i64, as weight-inspect does.
  EXPECT_EQ(EncodeStructuralValue(SV::UInt(1ull << 63)), "-9223372036854775808");
  EXPECT_EQ(EncodeStructuralValue(SV::UInt(~0ull)), "-1");
  // f32: "f32:" + the u64 bits of the value widened to f64 (3.0 -> 0x4008000000000000).
  EXPECT_EQ(EncodeStructuralValue(SV::F32(3.0f)), "f32:4613937818241073152");
  EXPECT_EQ(EncodeStructuralValue(SV::F32(1.5f)), "f32:4609434218613702656");
  EXPECT_EQ(EncodeStructuralValue(SV::F32(-0.0f)), "f32:9223372036854775808");
  EXPECT_EQ(EncodeStructuralValue(SV::F32Bits(0x7F800000)), "f32:9218868437227405312");  // inf
  EXPECT_EQ(EncodeStructuralValue(SV::F32Bits(1)), "f32:3936146074321813504");  // subnormal
  // A signalling NaN keeps its payload and becomes quiet (0x7FF8000020000000).
  EXPECT_EQ(EncodeStructuralValue(SV::F32Bits(0x7F800001)), "f32:9221120237577961472");
  // f64: the decimal of its u64 bits.
  EXPECT_EQ(EncodeStructuralValue(SV::F64(1.0)), "4607182418800017408");
  EXPECT_EQ(EncodeStructuralValue(SV::F64(-0.5)), "13826050856027422720");
}

TEST(StructuralHashTest, StringEncoding) {
  EXPECT_EQ(EncodeStructuralValue(SV::String("llama")), "\"llama\"");
  EXPECT_EQ(EncodeStructuralValue(SV::String("a\"b\\c\n\r\t")), R"("a\"b\\c\n\r\t")");
  EXPECT_EQ(EncodeStructuralValue(SV::String(std::string("\x01\x1f\x7f\x08", 4))),
            R"("\u0001\u001f\u007f\u0008")");
  EXPECT_EQ(EncodeStructuralValue(SV::String("h\xC3\xA9 \xE2\x82\xAC /")),
            "\"h\xC3\xA9 \xE2\x82\xAC /\"");  // non-ASCII and '/' verbatim
  EXPECT_EQ(EncodeStructuralValue(SV::String(std::string(1, '\0'))), R"("\u0000")");
}

TEST(StructuralHashTest, InvalidUtf8IsReplacedLikeRustLossy) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(EncodeStructuralValue(SV::String("a\xFF" "b")), "\"a" + fffd + "b\"");
  // A truncated 3-byte sequence is one replacement.
  EXPECT_EQ(EncodeStructuralValue(SV::String("\xE2\x82" "x")), "\"" + fffd + "x\"");
  // An encoded surrogate (ED A0 80) is three.
  EXPECT_EQ(EncodeStructuralValue(SV::String("\xED\xA0\x80")), "\"" + fffd + fffd + fffd + "\"");
  // Overlong 2-byte form (C0 AF) is two; a 4-byte sequence is kept.
  EXPECT_EQ(EncodeStructuralValue(SV::String("\xC0\xAF")), "\"" + fffd + fffd + "\"");
  EXPECT_EQ(EncodeStructuralValue(SV::String("\xF0\x9F\x98\x80")), "\"\xF0\x9F\x98\x80\"");
  EXPECT_EQ(EncodeStructuralValue(SV::String("\xF0\x9F\x98")), "\"" + fffd + "\"");
}

TEST(StructuralHashTest, ArrayEncoding) {
  EXPECT_EQ(EncodeStructuralValue(SV::Array({})), "[]");
  EXPECT_EQ(EncodeStructuralValue(
                SV::Array({SV::UInt(1), SV::String("x,y"), SV::F32(1.5f), SV::Bool(false)})),
            R"([1,"x,y",f32:4609434218613702656,false])");
  EXPECT_EQ(EncodeStructuralValue(SV::Array({SV::Array({SV::Int(-1)}), SV::Array({})})),
            "[[-1],[]]");
}

TEST(StructuralHashTest, JsonEscapingIsDoubleForStringValues) {
  StructuralInput in;
  in.format = "gguf";
  in.gguf_version = 3;
  in.metadata.push_back({"k", SV::String("a\"b\n")});
  in.metadata.push_back({"ctl\x01", SV::Int(1)});
  in.metadata.push_back({"del\x7f", SV::Int(2)});
  in.tensors.push_back({std::string("t\b\f", 3), "f32", {2}, 8});
  const std::string json = CanonicalJson(in);
  // Inner: "a\"b\n" (quotes and escapes as text); outer: serde_json escapes it again.
  EXPECT_THAT(json, HasSubstr(R"("k":"\"a\\\"b\\n\"")"));
  // Keys and names are escaped once, serde_json style (\b, \f short forms, \u00xx otherwise).
  EXPECT_THAT(json, HasSubstr(R"("ctl\u0001":"1")"));
  EXPECT_THAT(json, HasSubstr("\"del\x7f\":\"2\""));  // 0x7f verbatim in serde_json
  EXPECT_THAT(json, HasSubstr(R"({"t\b\f":{"name":"t\b\f",)"));
  EXPECT_TRUE(nlohmann::json::accept(json));
}

TEST(StructuralHashTest, SafetensorsShapedInputOmitsVersion) {
  StructuralInput in;
  in.format = "safetensors";
  in.metadata.push_back({"format", SV::String("pt")});
  in.tensors.push_back({"wte", "f32", {50257, 2}, 402056});
  EXPECT_EQ(CanonicalJson(in),
            R"({"format":"safetensors","metadata":{"format":"\"pt\""},"tensors":{"wte":)"
            R"({"name":"wte","dtype":"f32","shape":[50257,2],"byte_length":402056}}})");
  const StructuralIdentity id = Identify(in);
  // docs/structural-hash.md, worked example 3 (hash computed independently).
  EXPECT_EQ(id.structural_hash, "a4373542bb45e15eee34919efeed3be26003a9dcd8b057b0d501700f8fe38ea4");
  EXPECT_EQ(id.id, "wi:safetensors:0:a4373542");
  EXPECT_THAT(IdentityText(id), HasSubstr("format: SAFETENSORS\n"));
}

TEST(StructuralHashTest, KeysSortedBytewiseAndLastDuplicateWins) {
  StructuralInput in;
  in.format = "gguf";
  in.gguf_version = 3;
  in.metadata.push_back({"b", SV::Int(1)});
  in.metadata.push_back({"B", SV::Int(2)});
  in.metadata.push_back({"\xC3\xA9", SV::Int(3)});
  in.metadata.push_back({"b", SV::Int(4)});
  in.tensors.push_back({"y", "f32", {1}, 4});
  in.tensors.push_back({"x", "f32", {1}, 4});
  in.tensors.push_back({"y", "f16", {2}, 4});
  EXPECT_EQ(CanonicalJson(in),
            "{\"format\":\"gguf\",\"gguf_version\":3,\"metadata\":{\"B\":\"2\",\"b\":\"4\","
            "\"\xC3\xA9\":\"3\"},\"tensors\":{\"x\":{\"name\":\"x\",\"dtype\":\"f32\","
            "\"shape\":[1],\"byte_length\":4},\"y\":{\"name\":\"y\",\"dtype\":\"f16\","
            "\"shape\":[2],\"byte_length\":4}}}");
  const StructuralIdentity id = Identify(in);
  EXPECT_EQ(id.metadata_count, 3u);
  EXPECT_EQ(id.tensor_count, 2u);
}

// --- GGUF adapter and invariances -----------------------------------------------------------

GgufHeader SampleHeader() {
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  h.metadata.push_back({"general.name", GgufValue::String("sample")});
  h.metadata.push_back({"llama.block_count", GgufValue::U32(2)});
  h.metadata.push_back({"eps", GgufValue::F32(1e-5f)});
  std::vector<GgufValue> toks = {GgufValue::String("<s>"), GgufValue::String("a\"b")};
  h.metadata.push_back({"tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, toks).value()});
  std::vector<GgufValue> types = {GgufValue::I32(1), GgufValue::I32(-3)};
  h.metadata.push_back(
      {"tokenizer.ggml.token_type", GgufValue::Array(GgufType::kInt32, types).value()});
  h.tensors.push_back({"tok_embd.weight", {256, 10}, GgmlType::kQ4_K, 0, 0});
  h.tensors.push_back({"output_norm.weight", {7}, GgmlType::kF32, 0, 0});
  h.tensors.push_back({"output.weight", {8, 10}, GgmlType::kF16, 0, 0});
  EXPECT_TRUE(AssignGgufOffsets(&h).ok());
  return h;
}

TEST(StructuralHashTest, GgufAdapter) {
  const StructuralInput in = StructuralInputFromGguf(SampleHeader());
  EXPECT_EQ(in.format, "gguf");
  EXPECT_EQ(in.gguf_version, 3u);
  ASSERT_EQ(in.tensors.size(), 3u);
  EXPECT_EQ(in.tensors[0].dtype, "q4_k");
  EXPECT_EQ(in.tensors[0].shape, (std::vector<uint64_t>{256, 10}));  // ne0 first
  EXPECT_EQ(in.tensors[0].byte_length, 0u);  // quantized: 0, as weight-inspect
  EXPECT_EQ(in.tensors[1].byte_length, 28u);
  EXPECT_EQ(in.tensors[2].dtype, "f16");
  EXPECT_EQ(in.tensors[2].byte_length, 160u);
  const std::string json = CanonicalJson(in);
  EXPECT_THAT(json, HasSubstr(R"("eps":"f32:)"));
  EXPECT_THAT(json, HasSubstr(R"("llama.block_count":"2")"));
  EXPECT_THAT(json, HasSubstr(R"("tokenizer.ggml.tokens":"[\"<s>\",\"a\\\"b\"]")"));
  EXPECT_THAT(json, HasSubstr(R"("tokenizer.ggml.token_type":"[1,-3]")"));
}

TEST(StructuralHashTest, TensorOrderOffsetsAndMetadataOrderDoNotMatter) {
  const GgufHeader base = SampleHeader();
  const std::string h0 = StructuralHash(StructuralInputFromGguf(base));

  GgufHeader reordered = base;
  std::reverse(reordered.tensors.begin(), reordered.tensors.end());
  std::reverse(reordered.metadata.begin(), reordered.metadata.end());
  ASSERT_TRUE(AssignGgufOffsets(&reordered).ok());
  EXPECT_NE(reordered.tensors[1].offset, base.tensors[1].offset);
  EXPECT_EQ(StructuralHash(StructuralInputFromGguf(reordered)), h0);

  GgufHeader realigned = base;  // different alignment -> different offsets and padding
  realigned.metadata.push_back({"general.alignment", GgufValue::U32(64)});
  ASSERT_TRUE(AssignGgufOffsets(&realigned).ok());
  GgufHeader with_same_key = base;
  with_same_key.metadata.push_back({"general.alignment", GgufValue::U32(64)});
  EXPECT_EQ(StructuralHash(StructuralInputFromGguf(realigned)),
            StructuralHash(StructuralInputFromGguf(with_same_key)));

  // Same header, different tensor data: the hash only sees the header.
  std::vector<std::string> d1, d2;
  std::vector<ByteSpan> s1, s2;
  for (const auto& t : base.tensors) {
    d1.push_back(std::string(t.n_bytes, '\x01'));
    d2.push_back(std::string(t.n_bytes, '\x02'));
  }
  for (size_t i = 0; i < d1.size(); ++i) {
    s1.push_back(AsBytes(d1[i]));
    s2.push_back(AsBytes(d2[i]));
  }
  std::string f1, f2;
  ASSERT_TRUE(WriteGguf(base, s1, {}, [&f1](ByteSpan b) {
                f1.append(AsChars(b));
                return Status::Ok();
              }).ok());
  ASSERT_TRUE(WriteGguf(base, s2, {}, [&f2](ByteSpan b) {
                f2.append(AsChars(b));
                return Status::Ok();
              }).ok());
  ASSERT_NE(f1, f2);
  auto p1 = ParseGguf(AsBytes(f1), GgufMode::kFull, "f1");
  auto p2 = ParseGguf(AsBytes(f2), GgufMode::kFull, "f2");
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(StructuralHash(StructuralInputFromGguf(p1->header)),
            StructuralHash(StructuralInputFromGguf(p2->header)));
  EXPECT_EQ(StructuralHash(StructuralInputFromGguf(p1->header)), h0);
}

TEST(StructuralHashTest, EveryStructuralChangeChangesTheHash) {
  const GgufHeader base = SampleHeader();
  const std::string h0 = StructuralHash(StructuralInputFromGguf(base));
  std::set<std::string> seen = {h0};
  auto expect_new = [&](const GgufHeader& h, const char* what) {
    const std::string hash = StructuralHash(StructuralInputFromGguf(h));
    EXPECT_TRUE(seen.insert(hash).second) << what << " did not change the hash";
  };
  GgufHeader h = base;
  h.metadata[1].value = GgufValue::String("sample2");
  expect_new(h, "a metadata string");
  h = base;
  h.metadata[2].value = GgufValue::U64(2);  // same number, other width: types are erased
  EXPECT_EQ(StructuralHash(StructuralInputFromGguf(h)), h0);
  h.metadata[2].value = GgufValue::U32(3);
  expect_new(h, "a metadata integer");
  h = base;
  h.metadata[3].value = GgufValue::F64(static_cast<double>(1e-5f));  // f32 vs f64 differ
  expect_new(h, "float32 -> float64");
  h = base;
  h.metadata.push_back({"extra", GgufValue::Bool(false)});
  expect_new(h, "an added key");
  h = base;
  h.tensors[2].type = GgmlType::kBF16;
  expect_new(h, "a dtype");
  h = base;
  h.tensors[2].dims = {10, 8};  // same size, transposed
  expect_new(h, "a shape");
  h = base;
  h.tensors[1].name = "norm.weight";
  expect_new(h, "a tensor name");
  h = base;
  h.version = 2;
  expect_new(h, "the GGUF version");
}

// A GGUF header with an array of every element type, including string arrays (non-ASCII,
// invalid UTF-8, quotes and control bytes) and nested arrays (of numbers, strings, arrays and
// empty ones), NaN / infinity floats, negative and huge integers.
GgufHeader EveryArrayTypeHeader() {
  GgufHeader h;
  auto arr = [](GgufType t, std::vector<GgufValue> items) {
    return GgufValue::Array(t, items).value();
  };
  auto add = [&h](std::string key, GgufValue v) { h.metadata.push_back({std::move(key), v}); };
  add("a.u8", arr(GgufType::kUint8, {GgufValue::U8(0), GgufValue::U8(255), GgufValue::U8(7)}));
  add("a.i8", arr(GgufType::kInt8, {GgufValue::I8(-128), GgufValue::I8(127), GgufValue::I8(-1)}));
  add("a.u16", arr(GgufType::kUint16, {GgufValue::U16(65535), GgufValue::U16(1)}));
  add("a.i16", arr(GgufType::kInt16, {GgufValue::I16(-32768), GgufValue::I16(3)}));
  add("a.u32", arr(GgufType::kUint32, {GgufValue::U32(4294967295u), GgufValue::U32(0)}));
  add("a.i32", arr(GgufType::kInt32, {GgufValue::I32(-2147483647 - 1), GgufValue::I32(9)}));
  add("a.u64", arr(GgufType::kUint64, {GgufValue::U64(~0ull), GgufValue::U64(1ull << 63)}));
  add("a.i64", arr(GgufType::kInt64, {GgufValue::I64(-1), GgufValue::I64(1ll << 62)}));
  GgufValue nan;
  nan.type = GgufType::kFloat32;
  nan.bits = 0x7F800001;  // signalling NaN
  add("a.f32", arr(GgufType::kFloat32, {GgufValue::F32(1.5f), GgufValue::F32(-0.0f), nan,
                                        GgufValue::F32(1e-45f), GgufValue::F32(-1e30f)}));
  add("a.f64", arr(GgufType::kFloat64, {GgufValue::F64(-0.5), GgufValue::F64(1e300)}));
  add("a.bool", arr(GgufType::kBool, {GgufValue::Bool(true), GgufValue::Bool(false)}));
  add("a.str", arr(GgufType::kString,
                   {GgufValue::String(""), GgufValue::String("h\xC3\xA9 \"q\" \\ /"),
                    GgufValue::String(std::string("\x00\x01\x1f\x7f\b\f\n\r\t", 9)),
                    GgufValue::String("bad \xFF\xE2\x82 \xED\xA0\x80 \xF0\x9F\x98\x80"),
                    GgufValue::String("x,y]")}));
  add("a.empty", arr(GgufType::kUint8, {}));
  add("a.empty_str", arr(GgufType::kString, {}));
  const GgufValue inner_num = arr(GgufType::kInt16, {GgufValue::I16(-7), GgufValue::I16(8)});
  const GgufValue inner_str = arr(GgufType::kString, {GgufValue::String("\"<s>\"")});
  const GgufValue inner_empty = arr(GgufType::kFloat64, {});
  add("a.nested", arr(GgufType::kArray, {inner_num, inner_str, inner_empty}));
  add("a.nested3",
      arr(GgufType::kArray,
          {arr(GgufType::kArray, {inner_num, arr(GgufType::kArray, {inner_empty})}),
           arr(GgufType::kArray, {})}));
  add("a.nested_empty", arr(GgufType::kArray, {}));
  add("scalar", GgufValue::U32(3));
  h.tensors.push_back({"t", {4}, GgmlType::kF32, 0, 0});
  EXPECT_TRUE(AssignGgufOffsets(&h).ok());
  return h;
}

TEST(StructuralHashTest, GgufArraysOfEveryElementTypeKeepTheirHash) {
  // Pinned with the code before issue 9 (which decoded every array element into its own
  // StructuralValue): the streaming array encoding must give the same bytes.
  const GgufHeader h = EveryArrayTypeHeader();
  auto header = EncodeGgufHeader(h);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  auto parsed = ParseGguf(AsBytes(*header), GgufMode::kHeaderOnly, "arrays.gguf");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const StructuralInput in = StructuralInputFromGguf(parsed->header);
  const std::string json = CanonicalJson(in);
  const std::string want = "125671cd65fa373dfc52f5b985d65ded5304bb2aeea9463d2dd8fdeaafb7d6aa";
  EXPECT_EQ(Sha256Hex(json), want);
  EXPECT_EQ(StructuralHash(in), want);
  EXPECT_EQ(Identify(in).structural_hash, want);
  EXPECT_EQ(StructuralHash(StructuralInputFromGguf(h)), want);  // the written header too
  EXPECT_THAT(json, HasSubstr(R"("a.nested":"[[-7,8],[\"\\\"<s>\\\"\"],[]]")"));
  EXPECT_THAT(json, HasSubstr(R"("a.nested3":"[[[-7,8],[[]]],[]]")"));
  EXPECT_THAT(json, HasSubstr(R"("a.u64":"[-1,-9223372036854775808]")"));
  EXPECT_THAT(json, HasSubstr(R"(\"\\u0000\\u0001\\u001f\\u007f\\u0008\\u000c\\n\\r\\t\")"));
}

TEST(StructuralHashTest, CorpusFilesHashFromHeadersAlone) {
  BLZ_REQUIRE_CORPUS(corpus);
  std::set<std::string> hashes;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(corpus + "/gguf")) {
    if (e.path().extension() != ".gguf") continue;
    ++files;
    SCOPED_TRACE(e.path().string());
    auto full = GgufReader::Open(e.path().string(), GgufMode::kFull);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    const StructuralIdentity id = Identify(StructuralInputFromGguf(full->header()));
    const std::string& hash = id.structural_hash;
    EXPECT_EQ(id.id, StructuralId("gguf", 3, hash));
    // Truncate the file image to its header: same hash.
    auto head = ParseGguf(full->bytes().subspan(0, full->file().header_bytes),
                          GgufMode::kHeaderOnly, e.path().string());
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    EXPECT_EQ(StructuralHash(StructuralInputFromGguf(head->header)), hash);
    EXPECT_EQ(id.metadata_count, full->header().metadata.size());
    EXPECT_EQ(id.tensor_count, full->header().tensors.size());
    hashes.insert(hash);
  }
  EXPECT_EQ(hashes.size(), static_cast<size_t>(files));
}

// --- Identity and diff output ---------------------------------------------------------------

TEST(StructuralHashTest, IdentityJson) {
  const StructuralIdentity id = Identify(TinyLikeInput());
  const std::string text = IdentityJson(id);
  auto j = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"schema", "format", "structural_hash",
                                            "tensor_count", "metadata_count"}));
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["structural_hash"], id.structural_hash);
  EXPECT_EQ(j["tensor_count"], 1);
  EXPECT_THAT(text, HasSubstr("\n  \"schema\": 1,\n"));  // pretty, serde_json style
}

TEST(StructuralDiffTest, IdenticalMatchesGolden) {
  const StructuralDiff d = DiffStructures(TinyLikeInput(), TinyLikeInput());
  EXPECT_TRUE(d.identical());
  EXPECT_TRUE(d.format_equal && d.tensor_count_equal && d.metadata_count_equal);
  EXPECT_TRUE(d.tensors_added.empty() && d.tensors_removed.empty() && d.tensor_changes.empty());
  const std::string text = DiffText(d, false);
  EXPECT_EQ(text,
            "IDENTICAL\n--------------------\nNo structural differences found.\n"
            "Structural ID:    unchanged\n");
  BLZ_REQUIRE_CORPUS(corpus);
  EXPECT_EQ(text, testing::ReadFileBytes(corpus + "/weight-inspect/golden/diff_identical.txt"));
}

StructuralInput DiffBase() {
  StructuralInput in;
  in.format = "gguf";
  in.gguf_version = 3;
  in.metadata.push_back({"general.name", SV::String("a")});
  in.metadata.push_back({"old.key", SV::Int(1)});
  in.metadata.push_back({"same", SV::Bool(true)});
  in.tensors.push_back({"blk.12.attn.wq.weight", "f16", {4096, 4096}, 33554432});
  in.tensors.push_back({"gone", "f32", {4}, 16});
  in.tensors.push_back({"kept", "f32", {4}, 16});
  return in;
}

StructuralInput DiffTarget() {
  StructuralInput in;
  in.format = "gguf";
  in.gguf_version = 3;
  in.metadata.push_back({"general.name", SV::String("b")});
  in.metadata.push_back({"new.key", SV::F32(3.0f)});
  in.metadata.push_back({"same", SV::Bool(true)});
  in.tensors.push_back({"blk.12.attn.wq.weight", "q4_k", {4096, 5120}, 0});
  in.tensors.push_back({"kept", "f32", {4}, 16});
  in.tensors.push_back({"new_tensor.weight", "f32", {8}, 32});
  return in;
}

TEST(StructuralDiffTest, ReportsEveryKindOfChange) {
  const StructuralDiff d = DiffStructures(DiffBase(), DiffTarget());
  EXPECT_FALSE(d.identical());
  EXPECT_TRUE(d.format_equal);
  EXPECT_TRUE(d.tensor_count_equal);
  EXPECT_TRUE(d.metadata_count_equal);
  EXPECT_EQ(d.metadata_added, (std::vector<std::string>{"new.key"}));
  EXPECT_EQ(d.metadata_removed, (std::vector<std::string>{"old.key"}));
  ASSERT_EQ(d.metadata_changed.size(), 1u);
  EXPECT_EQ(d.metadata_changed[0].key, "general.name");
  EXPECT_EQ(d.metadata_changed[0].old_value, "\"a\"");
  EXPECT_EQ(d.metadata_changed[0].new_value, "\"b\"");
  EXPECT_EQ(d.tensors_added, (std::vector<std::string>{"new_tensor.weight"}));
  EXPECT_EQ(d.tensors_removed, (std::vector<std::string>{"gone"}));
  ASSERT_EQ(d.tensor_changes.size(), 1u);
  const TensorChange& c = d.tensor_changes[0];
  EXPECT_EQ(c.name, "blk.12.attn.wq.weight");
  EXPECT_EQ(c.dtype_old, "f16");
  EXPECT_EQ(c.dtype_new, "q4_k");
  EXPECT_EQ(c.shape_new, (std::vector<uint64_t>{4096, 5120}));
  EXPECT_EQ(c.byte_length_old, 33554432u);
  EXPECT_EQ(c.byte_length_new, 0u);

  EXPECT_EQ(DiffText(d, false),
            "DIFFERENT\n--------------------\nAdded tensors:    1\nRemoved tensors: 1\n"
            "Modified tensors: 1\nMetadata changes: 3\nStructural ID:    changed\n");
  const std::string verbose = DiffText(d, true);
  EXPECT_THAT(verbose, HasSubstr("Tensor changes\n─────────────\n  blk.12.attn.wq.weight\n"
                                 "    dtype: f16 -> q4_k\n"
                                 "    shape: [4096, 4096] -> [4096, 5120]\n"));
  EXPECT_THAT(verbose, HasSubstr("  + new_tensor.weight\n"));
  EXPECT_THAT(verbose, HasSubstr("  - gone\n"));
  EXPECT_THAT(verbose, HasSubstr("  ~ general.name: \"a\" -> \"b\"\n"));
}

TEST(StructuralDiffTest, JsonShapeMatchesWeightInspect) {
  const StructuralDiff d = DiffStructures(DiffBase(), DiffTarget());
  auto j = nlohmann::ordered_json::parse(DiffJson(d));
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "schema", "format_equal", "hash_equal", "tensor_count_equal",
                      "metadata_count_equal", "metadata_added", "metadata_removed",
                      "metadata_changed", "tensors_added", "tensors_removed", "tensor_changes"}));
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["hash_equal"], false);
  EXPECT_EQ(j["metadata_changed"][0]["old_value"], "\"a\"");
  const auto& tc = j["tensor_changes"][0];
  std::vector<std::string> tkeys;
  for (auto it = tc.begin(); it != tc.end(); ++it) tkeys.push_back(it.key());
  EXPECT_EQ(tkeys, (std::vector<std::string>{"name", "dtype_old", "dtype_new", "shape_old",
                                             "shape_new", "byte_length_old",
                                             "byte_length_new"}));
  EXPECT_EQ(tc["shape_old"], nlohmann::ordered_json::array({4096, 4096}));
  EXPECT_EQ(tc["byte_length_new"], 0);
  EXPECT_EQ(j["tensors_removed"], nlohmann::ordered_json::array({"gone"}));
}

TEST(StructuralDiffTest, FormatOrVersionChangeIsDifferent) {
  StructuralInput a = TinyLikeInput();
  StructuralInput b = TinyLikeInput();
  b.gguf_version = 2;
  StructuralDiff d = DiffStructures(a, b);
  EXPECT_FALSE(d.identical());
  EXPECT_TRUE(d.format_equal);
  EXPECT_THAT(DiffText(d, false), HasSubstr("GGUF version:     3 -> 2\n"));
  b = TinyLikeInput();
  b.format = "safetensors";
  b.gguf_version.reset();
  d = DiffStructures(a, b);
  EXPECT_FALSE(d.format_equal);
  EXPECT_THAT(DiffText(d, false), HasSubstr("Format:           gguf -> safetensors\n"));
}

}  // namespace
}  // namespace blz::formats
