#include "formats/wdelta.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "formats/tensor_stats.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::testing::HasSubstr;
using ::testing::ElementsAre;

// --- Independent helpers: bytes assembled by hand, SHA-256 straight from OpenSSL -------------

std::string OpenSslSha256(const std::string& data) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(md), len);
}

std::string Hex(const std::string& bytes) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

std::string U32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

std::string Record(const std::string& tensor, const std::string& field, const std::string& dtype,
                   const std::vector<uint64_t>& shape, const std::string& data,
                   int64_t nbytes_override = -1) {
  std::string r = U32(uint32_t(tensor.size())) + tensor + U32(uint32_t(field.size())) + field +
                  U32(uint32_t(dtype.size())) + dtype + U32(uint32_t(shape.size()));
  for (uint64_t d : shape) r += U64(d);
  r += U64(nbytes_override >= 0 ? uint64_t(nbytes_override) : data.size());
  return r + data;
}

// magic, version, header, records, then the SHA-256 of all of it.
std::string File(const std::string& header, const std::string& records, uint32_t version = 1) {
  std::string body = std::string("wdelta\0", 7) + U32(version) + U32(uint32_t(header.size())) +
                     header + records;
  return body + OpenSslSha256(body);
}

const std::string kHash(64, 'a');
const std::string kGoodHeader =
    "{\"parent_hash\":\"" + kHash +
    "\",\"strategy\":\"sparse\",\"tensors\":{\"w\":{\"strategy\":\"sparse\",\"shape\":[4],"
    "\"dtype\":\"float32\",\"sparsity\":0.5,\"indices\":{\"_ref\":\"indices\"},"
    "\"values\":{\"_ref\":\"values\"}}}}";
std::string GoodRecords() {
  return Record("w", "indices", "int64", {2}, U64(1) + U64(3)) +
         Record("w", "values", "float32", {2}, std::string("\0\0\x80\x3f\0\0\0\x40", 8));
}

class WdeltaTest : public ::testing::Test {
 protected:
  Result<WdeltaReader> OpenBytes(const std::string& bytes) {
    const std::string path = dir_ / "f.wdelta";
    blz::testing::WriteFileBytes(path, bytes);
    return WdeltaReader::Open(path);
  }
  void ExpectError(const std::string& bytes, Code code, const std::string& what) {
    auto r = OpenBytes(bytes);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(what));
    EXPECT_THAT(r.status().message(), HasSubstr("f.wdelta"));
  }
  blz::testing::TempDir dir_;
};

// --- JSON as Python writes it ---------------------------------------------------------------

TEST(PythonJson, FloatReprMatchesPython) {
  // Expected strings: Python 3 repr() of the same doubles.
  EXPECT_EQ(PythonFloatRepr(0.9), "0.9");
  EXPECT_EQ(PythonFloatRepr(0.01), "0.01");
  EXPECT_EQ(PythonFloatRepr(1e-05), "1e-05");
  EXPECT_EQ(PythonFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PythonFloatRepr(1.0), "1.0");
  EXPECT_EQ(PythonFloatRepr(100.0), "100.0");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(PythonFloatRepr(12345678901234567.0), "1.2345678901234568e+16");
  EXPECT_EQ(PythonFloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PythonFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PythonFloatRepr(5e-324), "5e-324");
  EXPECT_EQ(PythonFloatRepr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(PythonFloatRepr(1.5e-07), "1.5e-07");
  EXPECT_EQ(PythonFloatRepr(0.15), "0.15");
  EXPECT_EQ(PythonFloatRepr(1e22), "1e+22");
  EXPECT_EQ(PythonFloatRepr(123456789.0), "123456789.0");
}

TEST(PythonJson, DumpsEscapesLikeEnsureAscii) {
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  // U+00E9, U+1F600 (a surrogate pair), DEL, newline, quote.
  v["a\xc3\xa9\xf0\x9f\x98\x80\x7f\n\""] = nlohmann::ordered_json::array({1, 0.9});
  v["z"] = nullptr;
  v["b"] = true;
  bool ok = false;
  // Python: json.dumps({...}, separators=(",", ":"))
  EXPECT_EQ(PythonJsonDumps(v, &ok),
            "{\"a\\u00e9\\ud83d\\ude00\\u007f\\n\\\"\":[1,0.9],\"z\":null,\"b\":true}");
  EXPECT_TRUE(ok);
  v["nan"] = std::nan("");
  (void)PythonJsonDumps(v, &ok);
  EXPECT_FALSE(ok);
}

// --- Writing ----------------------------------------------------------------------------------

WdeltaFileOut SmallFile() {
  WdeltaFileOut f;
  f.version = 1;
  f.parent_hash = kHash;
  f.strategy = "sparse";
  WdeltaTensorOut t;
  t.name = "w";
  t.meta = nlohmann::ordered_json::object();
  t.meta["strategy"] = "sparse";
  t.meta["shape"] = {4};
  t.meta["dtype"] = "float32";
  t.meta["sparsity"] = 0.5;
  t.fields.push_back({"indices", WdeltaArray{"int64", {2}, {1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}}});
  t.fields.push_back({"values", WdeltaArray{"float32", {2}, {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}}});
  f.tensors.push_back(t);
  return f;
}

TEST_F(WdeltaTest, WriterProducesTheExactBytes) {
  const std::string path = dir_ / "out.wdelta";
  ASSERT_TRUE(WriteWdelta(path, SmallFile()).ok());
  EXPECT_EQ(blz::testing::ReadFileBytes(path), File(kGoodHeader, GoodRecords()));
}

TEST_F(WdeltaTest, RoundTripWithExtrasAndBothVersions) {
  for (uint32_t version : {1u, 2u}) {
    WdeltaFileOut f = SmallFile();
    f.version = version;
    f.strategy = "auto";
    f.extra["blz"] = {{"files", {"model.safetensors"}}};
    f.extra_records.push_back({{"__blz_file__", "config.json"}, WdeltaArray{"uint8", {2}, {'{', '}'}}});
    WdeltaTensorOut q;
    q.name = "layer\xc3\xa9.q";
    q.meta = {{"strategy", "quantized"}, {"shape", {3}}, {"dtype", "float32"},
              {"n_elements", 3}, {"n_cols", 3}};
    q.fields.push_back({"scales", WdeltaArray{"float16", {1}, {0x00, 0x3c}}});
    q.fields.push_back({"packed_signs", WdeltaArray{"uint8", {1}, {0xA0}}});
    f.tensors.push_back(q);
    const std::string path = dir_ / ("rt" + std::to_string(version) + ".wdelta");
    ASSERT_TRUE(WriteWdelta(path, f).ok());

    auto r = WdeltaReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->version(), version);
    EXPECT_EQ(r->parent_hash(), kHash);
    EXPECT_EQ(r->strategy(), "auto");
    EXPECT_THAT(r->names(), ElementsAre("w", "layer\xc3\xa9.q"));
    EXPECT_EQ(r->header()["blz"]["files"][0], "model.safetensors");
    auto meta = r->Meta("layer\xc3\xa9.q");
    ASSERT_TRUE(meta.ok());
    std::vector<std::string> keys;
    for (const auto& [k, v] : (*meta)->items()) keys.push_back(k);
    EXPECT_THAT(keys, ElementsAre("strategy", "shape", "dtype", "n_elements", "n_cols", "scales",
                                  "packed_signs"));
    auto scales = r->Field("layer\xc3\xa9.q", "scales");
    ASSERT_TRUE(scales.ok());
    EXPECT_EQ(scales->dtype, "float16");
    EXPECT_THAT(scales->shape, ElementsAre(1u));
    EXPECT_EQ(scales->bytes[1], 0x3c);
    auto extra = r->Field("__blz_file__", "config.json");
    ASSERT_TRUE(extra.ok());
    EXPECT_EQ(std::string(extra->bytes.begin(), extra->bytes.end()), "{}");
    // Record bytes of "w": two records, each 4+1 + 4+len(field) + 4+len(dtype) + 4 + 8 + 8 + data.
    EXPECT_EQ(r->TensorBytes("w"), (5 + 4 + 7 + 4 + 5 + 4 + 8 + 8 + 16) + (5 + 4 + 6 + 4 + 7 + 4 + 8 + 8 + 8));
    EXPECT_EQ(r->TensorBytes("nope"), 0u);
    EXPECT_EQ(r->Meta("nope").status().code(), Code::kNotFound);
    EXPECT_EQ(r->Field("w", "nope").status().code(), Code::kNotFound);
  }
}

TEST_F(WdeltaTest, WriterRejectsBadInputAndLeavesNoFile) {
  const std::string path = dir_ / "bad.wdelta";
  WdeltaFileOut f = SmallFile();
  f.tensors[0].fields[0].second.bytes.pop_back();
  Status s = WriteWdelta(path, f);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'indices'"));
  f = SmallFile();
  f.version = 3;
  EXPECT_EQ(WriteWdelta(path, f).code(), Code::kInvalidArgument);
  f = SmallFile();
  f.parent_hash = "xyz";
  EXPECT_EQ(WriteWdelta(path, f).code(), Code::kInvalidArgument);
  f = SmallFile();
  f.tensors[0].meta.erase("dtype");
  EXPECT_EQ(WriteWdelta(path, f).code(), Code::kInvalidArgument);
  f = SmallFile();
  f.tensors[0].meta["sparsity"] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(WriteWdelta(path, f).code(), Code::kInvalidArgument);
  f = SmallFile();
  f.tensors[0].fields[0].second.dtype = "float64";
  EXPECT_EQ(WriteWdelta(path, f).code(), Code::kInvalidArgument);
  f = SmallFile();
  f.extra["tensors"] = 1;
  EXPECT_EQ(WriteWdelta(path, f).code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

// --- Rejections: one crafted file per path ----------------------------------------------------

TEST_F(WdeltaTest, AcceptsTheHandAssembledFile) {
  auto r = OpenBytes(File(kGoodHeader, GoodRecords()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto v = r->Field("w", "values");
  ASSERT_TRUE(v.ok());
  float f[2];
  std::memcpy(f, v->bytes.data(), 8);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 2.0f);
}

TEST_F(WdeltaTest, RejectsTooShort) {
  ExpectError(std::string("wdelta\0", 7), Code::kCorruption, "shorter than");
}

TEST_F(WdeltaTest, RejectsBadMagic) {
  std::string b = File(kGoodHeader, GoodRecords());
  b[0] = 'W';
  ExpectError(b, Code::kCorruption, "byte 0: bad magic");
}

TEST_F(WdeltaTest, RejectsUnsupportedVersion) {
  ExpectError(File(kGoodHeader, GoodRecords(), 99), Code::kUnsupported,
              "byte 7: unsupported .wdelta version 99");
}

TEST_F(WdeltaTest, RejectsHeaderLengthPastEnd) {
  std::string b = File(kGoodHeader, GoodRecords());
  const std::string big = U32(uint32_t(b.size()));
  b.replace(11, 4, big);
  ExpectError(b, Code::kCorruption, "byte 11: header length");
}

TEST_F(WdeltaTest, RejectsBadJson) {
  ExpectError(File("{\"parent_hash\":", ""), Code::kCorruption, "header");
}

TEST_F(WdeltaTest, RejectsMissingTopLevelKeys) {
  ExpectError(File("{\"strategy\":\"sparse\",\"tensors\":{}}", ""), Code::kCorruption,
              "\"parent_hash\"");
  ExpectError(File("{\"parent_hash\":\"" + kHash + "\",\"tensors\":{}}", ""), Code::kCorruption,
              "\"strategy\"");
  ExpectError(File("{\"parent_hash\":\"" + kHash + "\",\"strategy\":\"sparse\"}", ""),
              Code::kCorruption, "\"tensors\"");
}

TEST_F(WdeltaTest, RejectsTruncatedRecord) {
  // Only two bytes after the header: not even a tensor name length.
  ExpectError(File(kGoodHeader, GoodRecords() + "ab"), Code::kCorruption,
              "record truncated: no room for the tensor name length");
}

TEST_F(WdeltaTest, RejectsRecordPastEnd) {
  const std::string header_end_records = GoodRecords();
  // A third record that claims 1000 data bytes but carries 4.
  const std::string bad = Record("w", "extra", "uint8", {1000}, "abcd", 1000);
  ExpectError(File(kGoodHeader, header_end_records + bad), Code::kCorruption,
              "1000 data bytes run past the records' end");
}

TEST_F(WdeltaTest, RejectsTooManyDims) {
  const std::string bad = Record("w", "extra", "uint8", {1, 1, 1, 1, 1, 1, 1, 1, 1}, "a");
  ExpectError(File(kGoodHeader, GoodRecords() + bad), Code::kCorruption, "ndim 9 exceeds 8");
}

TEST_F(WdeltaTest, RejectsUnknownDtype) {
  const std::string bad = Record("w", "extra", "float64", {1}, "abcdefgh");
  ExpectError(File(kGoodHeader, GoodRecords() + bad), Code::kUnsupported,
              "dtype 'float64' is not one of");
}

TEST_F(WdeltaTest, RejectsBytesThatDoNotMatchShape) {
  const std::string bad = Record("w", "extra", "float32", {3}, "abcdefgh");
  ExpectError(File(kGoodHeader, GoodRecords() + bad), Code::kCorruption,
              "8 bytes, but dtype float32 x shape needs 12");
}

TEST_F(WdeltaTest, RejectsDuplicateRecord) {
  ExpectError(File(kGoodHeader, GoodRecords() + Record("w", "values", "uint8", {1}, "a")),
              Code::kCorruption, "record ('w', 'values') appears twice");
}

TEST_F(WdeltaTest, RejectsChecksumMismatch) {
  std::string b = File(kGoodHeader, GoodRecords());
  b[b.size() - 40] ^= 1;  // a data byte of the last record
  ExpectError(b, Code::kDigestMismatch, "SHA-256 checksum mismatch");
}

TEST_F(WdeltaTest, RejectsUnknownStrategies) {
  std::string h = kGoodHeader;
  h.replace(h.find("\"strategy\":\"sparse\",\"tensors\""), 19, "\"strategy\":\"zipped\"");
  ExpectError(File(h, GoodRecords()), Code::kUnsupported, "unknown strategy 'zipped'");
  h = kGoodHeader;
  h.replace(h.find("{\"strategy\":\"sparse\""), 20, "{\"strategy\":\"magic\" ");
  ExpectError(File(h, GoodRecords()), Code::kUnsupported, "tensor 'w': unknown strategy 'magic'");
}

TEST_F(WdeltaTest, AcceptsAutoAtTopLevel) {
  std::string h = kGoodHeader;
  h.replace(h.find("\"strategy\":\"sparse\",\"tensors\""), 19, "\"strategy\":\"auto\"  ");
  EXPECT_TRUE(OpenBytes(File(h, GoodRecords())).ok());
}

TEST_F(WdeltaTest, RejectsMissingRefRecord) {
  ExpectError(File(kGoodHeader, Record("w", "indices", "int64", {2}, U64(1) + U64(3))),
              Code::kCorruption, "tensor 'w' field 'values': no record ('w', 'values')");
}

TEST_F(WdeltaTest, KeepsRecordsOfTensorsNotInTheHeader) {
  auto r = OpenBytes(File(kGoodHeader, GoodRecords() + Record("other", "x", "uint8", {1}, "z")));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(r->names(), ElementsAre("w"));
  EXPECT_TRUE(r->Field("other", "x").ok());
}

// Issue 23: 20k header tensors (the parse and the lookups were quadratic; timings are in
// bench/wdelta_header_bench.cc and docs/benchmarks.md). Written, read back in order, each
// found by name, and a duplicate among them still refused.
TEST_F(WdeltaTest, TwentyThousandTensorsRoundTrip) {
  constexpr int kTensors = 20000;
  WdeltaFileOut f = SmallFile();
  f.tensors.clear();
  for (int i = 0; i < kTensors; ++i) {
    WdeltaTensorOut t = SmallFile().tensors[0];
    t.name = "layers." + std::to_string(kTensors - i) + ".w";  // not in sorted order
    t.meta["sparsity"] = double(i) / kTensors;
    f.tensors.push_back(std::move(t));
  }
  const std::string path = dir_ / "many.wdelta";
  ASSERT_TRUE(WriteWdelta(path, f).ok());
  auto r = WdeltaReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->names().size(), size_t(kTensors));
  for (int i = 0; i < kTensors; ++i) {
    const std::string& name = f.tensors[i].name;
    ASSERT_EQ(r->names()[i], name);
    auto meta = r->Meta(name);
    ASSERT_TRUE(meta.ok()) << name;
    ASSERT_EQ((**meta)["sparsity"].get<double>(), double(i) / kTensors) << name;
    ASSERT_TRUE(r->Field(name, "values").ok()) << name;
  }
  EXPECT_EQ(r->Meta("layers.0.w").status().code(), Code::kNotFound);

  // A duplicate among them: the reader refuses it.
  std::string text = blz::testing::ReadFileBytes(path);
  const std::string first = "\"layers.20000.w\"", other = "\"layers.19999.w\"";
  const size_t at = text.find(first);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, first.size(), other);
  text.resize(text.size() - 32);
  ExpectError(text + OpenSslSha256(text), Code::kCorruption, "duplicate key \"layers.19999.w\"");
}

// --- parent_hash ------------------------------------------------------------------------------

TEST_F(WdeltaTest, ParentHashAndOrders) {
  // Two shards whose sorted names interleave ("layers.10.w" < "layers.2.w").
  const std::vector<uint16_t> a = {0x3f80, 0x4000};  // BF16 bit patterns: hashed as stored
  const std::vector<float> b = {1.5f, -2.0f, 3.25f};
  const std::vector<float> c = {7.0f};
  auto bytes = [](const auto& v) {
    return ByteSpan(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  const std::string model = dir_ / "model";
  std::filesystem::create_directories(model);
  ASSERT_TRUE(WriteSafetensors(model + "/a-1.safetensors",
                               {{"embed", DType::kBF16, {2}, bytes(a)},
                                {"layers.2.w", DType::kF32, {3}, bytes(b)}})
                  .ok());
  ASSERT_TRUE(
      WriteSafetensors(model + "/a-2.safetensors", {{"layers.10.w", DType::kF32, {1}, bytes(c)}})
          .ok());
  auto base = ModelTensors::Open(model);
  ASSERT_TRUE(base.ok()) << base.status().ToString();

  const std::vector<std::string> header_order = {"layers.10.w", "embed", "layers.2.w"};
  EXPECT_THAT(WdeltaSortedOrder(header_order), ElementsAre("embed", "layers.10.w", "layers.2.w"));
  // Groups by file in order of first appearance (a-2 first here), sorted within.
  EXPECT_THAT(WdeltaLegacyOrder(*base, header_order),
              ElementsAre("layers.10.w", "embed", "layers.2.w"));
  EXPECT_THAT(WdeltaLegacyOrder(*base, {"layers.2.w", "layers.10.w", "embed"}),
              ElementsAre("embed", "layers.2.w", "layers.10.w"));

  auto raw = [](const auto& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  const std::string expected = Hex(OpenSslSha256("embed" + raw(a) + "layers.10.w" + raw(c) +
                                                 "layers.2.w" + raw(b)));
  auto h = WdeltaParentHash(*base, WdeltaSortedOrder(header_order));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, expected);
  auto missing = WdeltaParentHash(*base, {"embed", "nope"});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'nope'"));
}

}  // namespace
}  // namespace blz::formats
