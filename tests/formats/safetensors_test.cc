#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/bytes.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::blz::testing::ReadFileBytes;
using ::blz::testing::TempDir;
using ::blz::testing::WriteFileBytes;

// A safetensors file: 8-byte LE length, `header` verbatim, then `data_bytes` bytes of data.
std::string Craft(const std::string& header, size_t data_bytes) {
  std::string out;
  AppendLE64(&out, header.size());
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(char(i * 7 + 1));
  return out;
}

Result<SafetensorsHeader> Parse(const std::string& file) {
  return ParseSafetensorsHeader(AsBytes(file), file.size(), "crafted.safetensors");
}

// Expects `file` to be rejected with `code` and a message containing every one of `parts`.
void ExpectRejected(const std::string& file, Code code, std::vector<std::string> parts) {
  auto r = Parse(file);
  ASSERT_FALSE(r.ok()) << "accepted a bad file";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find("crafted.safetensors"), std::string::npos)
      << r.status().ToString();
  for (const auto& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message lacks '" << p << "': " << r.status().ToString();
  }
}

// ---- Real files -----------------------------------------------------------------------------

struct CorpusCase {
  const char* path;
  size_t tensors;
  DType dtype;
};

TEST(SafetensorsCorpus, ReadsRealFiles) {
  BLZ_REQUIRE_CORPUS(corpus);
  const CorpusCase cases[] = {
      {"tiny-gpt2/base/model.safetensors", 28, DType::kF32},
      {"tiny-gpt2/ft-v1/model.safetensors", 28, DType::kF32},
      {"roberta-lora/checkpoint-500/adapter_model.safetensors", 28, DType::kF32},
      {"adapters/opt125m-lora-bf16/adapter_model.safetensors", 48, DType::kBF16},
      {"adapters/gemma2b-lora-f16/adapter_model.safetensors", 72, DType::kF16},
      {"adapters/gpt2-pseudo2code-lora/adapter_model.safetensors", 72, DType::kF32},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    const std::string path = corpus + "/" + c.path;
    auto f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->tensors().size(), c.tensors);
    EXPECT_EQ(f->header().metadata.at("format"), "pt");
    const std::string bytes = ReadFileBytes(path);
    ASSERT_EQ(f->file().size(), bytes.size());
    // The header bytes are the file's first 8 + N bytes, verbatim.
    EXPECT_EQ(AsChars(f->HeaderBytes()), bytes.substr(0, f->header().data_start));
    uint64_t expected_begin = 0;
    for (size_t i = 0; i < f->tensors().size(); ++i) {
      const SafetensorsTensor& t = f->tensors()[i];
      EXPECT_EQ(t.dtype, c.dtype) << t.name;
      EXPECT_EQ(t.begin, expected_begin) << t.name;  // sorted, contiguous
      expected_begin = t.end;
      EXPECT_EQ(t.NumElements() * DTypeSize(t.dtype), t.bytes());
      const ByteSpan data = f->TensorData(i);
      // A view into the map, not a copy.
      EXPECT_EQ(data.data(), f->file().data() + f->header().data_start + t.begin);
      EXPECT_EQ(AsChars(data), bytes.substr(f->header().data_start + t.begin, t.bytes()));
    }
    EXPECT_EQ(f->header().data_start + expected_begin, bytes.size());
  }
}

TEST(SafetensorsCorpus, KnownTensorOfTinyGpt2) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto f = SafetensorsFile::Open(corpus + "/tiny-gpt2/base/model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  // First tensor in data order, as the file's header lists it.
  const int64_t i = f->header().Find("transformer.h.0.attn.c_attn.bias");
  ASSERT_GE(i, 0);
  const SafetensorsTensor& t = f->tensors()[size_t(i)];
  EXPECT_EQ(t.shape, std::vector<uint64_t>({6}));
  EXPECT_EQ(t.begin, 0u);
  EXPECT_EQ(t.end, 24u);
  EXPECT_EQ(f->header().Find("no.such.tensor"), -1);
}

TEST(SafetensorsCorpus, RejectsUncountedBytesAfterHeader) {
  BLZ_REQUIRE_CORPUS(corpus);
  // weight-inspect's fixture has 5 bytes between its header and its data that the header length
  // does not count: the data offsets then leave 5 trailing bytes.
  auto f = SafetensorsFile::Open(corpus + "/weight-inspect/fixtures/tiny.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kCorruption);
  const std::string m = f.status().message();
  EXPECT_NE(m.find("tiny.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("5 trailing bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("32851"), std::string::npos) << m;  // where the counted bytes end
}

// ---- Accepted edge cases ---------------------------------------------------------------------

TEST(SafetensorsParse, AcceptsEmptyAndScalarTensorsInAnyKeyOrder) {
  // Keys are not in data order; "b" is 0-rank (one element); "e" has no elements.
  const std::string h =
      "  {\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]},"
      "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[16,16]},"
      "\"__metadata__\":{\"k\":\"v\"},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8],\"extra\":1}}   ";
  auto r = Parse(Craft(h, 16));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->tensors[0].name, "a");
  EXPECT_EQ(r->tensors[1].name, "b");
  EXPECT_EQ(r->tensors[1].NumElements(), 1u);
  EXPECT_EQ(r->tensors[2].name, "e");
  EXPECT_EQ(r->tensors[2].NumElements(), 0u);
  EXPECT_EQ(r->metadata.at("k"), "v");
  EXPECT_EQ(r->data_start, 8 + h.size());
}

TEST(SafetensorsParse, AcceptsNoTensors) {
  auto r = Parse(Craft("{}", 0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tensors.empty());
}

// ---- One crafted bad file per rejection path -------------------------------------------------

const std::string kGood = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

TEST(SafetensorsReject, ShorterThanLengthPrefix) {
  ExpectRejected(std::string("\x02\x00\x00", 3), Code::kCorruption, {"too small", "byte offset 0"});
}

TEST(SafetensorsReject, HeaderTooLarge) {
  std::string f;
  AppendLE64(&f, kSafetensorsMaxHeaderBytes + 1);
  f += "{}";
  ExpectRejected(f, Code::kTooLarge, {"100000001", "cap"});
}

TEST(SafetensorsReject, HeaderPastEnd) {
  std::string f;
  AppendLE64(&f, 1000);
  f += "{}";
  ExpectRejected(f, Code::kCorruption, {"header length 1000", "past the end"});
}

TEST(SafetensorsReject, NotUtf8) {
  ExpectRejected(Craft("{\"t\xff\":{}}", 0), Code::kCorruption, {"UTF-8", "byte offset 11"});
}

TEST(SafetensorsReject, Utf8Overlong) {
  ExpectRejected(Craft("{\"\xc0\xaf\":{}}", 0), Code::kCorruption, {"UTF-8"});
}

TEST(SafetensorsReject, ByteOrderMark) {
  ExpectRejected(Craft("\xef\xbb\xbf{}", 0), Code::kCorruption, {"byte order mark"});
}

TEST(SafetensorsReject, NotJson) {
  ExpectRejected(Craft("{\"t\": nope}", 0), Code::kCorruption, {"not valid JSON", "byte offset"});
}

TEST(SafetensorsReject, TrailingGarbageAfterJson) {
  ExpectRejected(Craft("{} x", 0), Code::kCorruption, {"not valid JSON"});
}

// Issue 9, defect 3: nlohmann's lexer stops at a NUL byte, so a valid header followed by NUL and
// junk used to be accepted by inspect, id and pack.
TEST(SafetensorsReject, NulByteAfterJson) {
  ExpectRejected(Craft(std::string("{}\0junk", 7), 0), Code::kCorruption,
                 {"NUL byte", "byte offset 10"});
  ExpectRejected(Craft(std::string("{}  \0   ", 8), 0), Code::kCorruption, {"NUL byte"});
}

TEST(SafetensorsReject, NotAnObject) {
  ExpectRejected(Craft("[1,2]", 0), Code::kCorruption, {"array", "not an object"});
}

TEST(SafetensorsReject, TensorEntryNotAnObject) {
  ExpectRejected(Craft("{\"t\":5}", 0), Code::kCorruption, {"tensor 't'", "not an object"});
}

TEST(SafetensorsReject, MissingDtype) {
  ExpectRejected(Craft("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8), Code::kCorruption,
                 {"tensor 't'", "\"dtype\""});
}

TEST(SafetensorsReject, UnknownDtype) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1),
                 Code::kUnsupported, {"tensor 't'", "\"dtype\"", "'F4'"});
}

TEST(SafetensorsReject, ShapeNotArray) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8),
                 Code::kCorruption, {"tensor 't'", "\"shape\""});
}

TEST(SafetensorsReject, NegativeDimension) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8),
                 Code::kCorruption, {"tensor 't'", "\"shape\"", "dimension 0"});
}

TEST(SafetensorsReject, FractionalDimension) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8),
                 Code::kCorruption, {"tensor 't'", "dimension 0"});
}

TEST(SafetensorsReject, OffsetsNotAPair) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8),
                 Code::kCorruption, {"tensor 't'", "\"data_offsets\""});
}

TEST(SafetensorsReject, NegativeOffset) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8),
                 Code::kCorruption, {"tensor 't'", "\"data_offsets\""});
}

TEST(SafetensorsReject, EndBeforeBegin) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8),
                 Code::kCorruption, {"tensor 't'", "end is before begin"});
}

TEST(SafetensorsReject, NotStartingAtZero) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12),
                 Code::kCorruption, {"tensor 't'", "start at data offset 0"});
}

TEST(SafetensorsReject, Gap) {
  ExpectRejected(Craft("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                       12),
                 Code::kCorruption, {"tensor 'b'", "gap", "tensor 'a'"});
}

TEST(SafetensorsReject, Overlap) {
  ExpectRejected(Craft("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                       12),
                 Code::kCorruption, {"tensor 'b'", "overlaps", "tensor 'a'"});
}

TEST(SafetensorsReject, SpanNotShapeTimesSize) {
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
                 Code::kCorruption, {"tensor 't'", "spans 8 bytes", "12 bytes"});
}

TEST(SafetensorsReject, ShapeProductOverflow) {
  ExpectRejected(
      Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
            "\"data_offsets\":[0,8]}}",
            8),
      Code::kCorruption, {"tensor 't'", "overflows"});
}

TEST(SafetensorsReject, ByteCountOverflow) {
  // 2^62 elements fit in 64 bits, 2^62 x 4 bytes do not.
  ExpectRejected(
      Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
            "\"data_offsets\":[0,8]}}",
            8),
      Code::kCorruption, {"tensor 't'", "overflow"});
}

TEST(SafetensorsReject, TrailingBytes) {
  ExpectRejected(Craft(kGood, 9), Code::kCorruption, {"1 trailing bytes"});
}

TEST(SafetensorsReject, Truncated) {
  ExpectRejected(Craft(kGood, 7), Code::kCorruption, {"truncated"});
}

TEST(SafetensorsReject, DuplicateTensorName) {
  // nlohmann would silently keep the second entry; the strict parser refuses.
  ExpectRejected(Craft("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       8),
                 Code::kCorruption, {"duplicate key \"t\""});
}

TEST(SafetensorsReject, DuplicateFieldInTensor) {
  ExpectRejected(
      Craft("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
      Code::kCorruption, {"duplicate key \"dtype\""});
}

TEST(SafetensorsReject, MetadataNotAnObject) {
  ExpectRejected(Craft("{\"__metadata__\":[\"x\"]}", 0), Code::kCorruption,
                 {"\"__metadata__\"", "not an object"});
}

TEST(SafetensorsReject, MetadataValueNotString) {
  ExpectRejected(Craft("{\"__metadata__\":{\"format\":\"pt\",\"step\":5}}", 0), Code::kCorruption,
                 {"\"__metadata__\"", "'step'", "not a string"});
}

TEST(SafetensorsReject, TooDeep) {
  ExpectRejected(Craft("{\"__metadata__\":" + std::string(100, '[') + std::string(100, ']') + "}", 0),
                 Code::kCorruption, {"nest deeper"});
}

TEST(SafetensorsReject, OpenMissingFile) {
  TempDir dir;
  auto f = SafetensorsFile::Open(dir / "nope.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kNotFound);
}

TEST(SafetensorsReject, OpenNamesThePath) {
  TempDir dir;
  WriteFileBytes(dir / "bad.safetensors", Craft(kGood, 4));
  auto f = SafetensorsFile::Open(dir / "bad.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(dir / "bad.safetensors"), std::string::npos);
}

// ---- Writer ----------------------------------------------------------------------------------

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 13);
  return v;
}

TEST(SafetensorsWriter, RoundTrip) {
  TempDir dir;
  const auto a = Bytes(2 * 3 * 4, 1), b = Bytes(5 * 2, 2), c = Bytes(8, 3), e = Bytes(0, 0);
  const std::vector<SafetensorsTensorView> in = {
      {"z.f32", DType::kF32, {2, 3}, a},
      {"a.bf16", DType::kBF16, {5}, b},
      {"m.scalar", DType::kI64, {}, c},
      {"empty", DType::kF16, {0, 7}, e},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ü \"quoted\""}};
  ASSERT_TRUE(WriteSafetensors(dir / "x.safetensors", in, meta).ok());
  auto f = SafetensorsFile::Open(dir / "x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->header().metadata, meta);
  EXPECT_EQ(f->header().data_start % 8, 0u);  // header padded to a multiple of 8
  ASSERT_EQ(f->tensors().size(), in.size());
  for (const auto& t : in) {
    const int64_t i = f->header().Find(t.name);
    ASSERT_GE(i, 0) << t.name;
    EXPECT_EQ(f->tensors()[size_t(i)].dtype, t.dtype);
    EXPECT_EQ(f->tensors()[size_t(i)].shape, t.shape);
    const ByteSpan got = f->TensorData(size_t(i));
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end()),
              std::vector<uint8_t>(t.data.begin(), t.data.end()))
        << t.name;
  }
  // Data order: by descending dtype size, then name (empty F16 sorts before a.bf16 by name).
  std::vector<std::string> order;
  for (const auto& t : f->tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"m.scalar", "z.f32", "a.bf16", "empty"}));
}

TEST(SafetensorsWriter, DeterministicAndInputOrderIndependent) {
  TempDir dir;
  const auto a = Bytes(16, 1), b = Bytes(8, 2);
  std::vector<SafetensorsTensorView> in = {{"a", DType::kF32, {4}, a},
                                           {"b", DType::kU16, {4}, b}};
  ASSERT_TRUE(WriteSafetensors(dir / "1.safetensors", in).ok());
  std::swap(in[0], in[1]);
  ASSERT_TRUE(WriteSafetensors(dir / "2.safetensors", in).ok());
  EXPECT_EQ(ReadFileBytes(dir / "1.safetensors"), ReadFileBytes(dir / "2.safetensors"));
}

TEST(SafetensorsWriter, RewritesARealFileWithTheSameTensors) {
  BLZ_REQUIRE_CORPUS(corpus);
  TempDir dir;
  auto src = SafetensorsFile::Open(corpus + "/adapters/opt125m-lora-bf16/adapter_model.safetensors");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<SafetensorsTensorView> views;
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const auto& t = src->tensors()[i];
    views.push_back({t.name, t.dtype, t.shape, src->TensorData(i)});
  }
  ASSERT_TRUE(WriteSafetensors(dir / "copy.safetensors", views, src->header().metadata).ok());
  auto copy = SafetensorsFile::Open(dir / "copy.safetensors");
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  ASSERT_EQ(copy->tensors().size(), src->tensors().size());
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const int64_t j = copy->header().Find(src->tensors()[i].name);
    ASSERT_GE(j, 0);
    const ByteSpan x = src->TensorData(i), y = copy->TensorData(size_t(j));
    ASSERT_EQ(x.size(), y.size());
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << src->tensors()[i].name;
  }
}

TEST(SafetensorsWriter, RefusesBadInput) {
  TempDir dir;
  const auto a = Bytes(16, 1);
  // Data length does not match shape x dtype size.
  Status s = WriteSafetensors(dir / "a.safetensors", {{"t", DType::kF32, {3}, a}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // Duplicate names.
  s = WriteSafetensors(dir / "b.safetensors",
                       {{"t", DType::kF32, {4}, a}, {"t", DType::kF32, {4}, a}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // Reserved name.
  s = WriteSafetensors(dir / "c.safetensors", {{"__metadata__", DType::kF32, {4}, a}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // Nothing was written for the refused files.
  EXPECT_FALSE(std::filesystem::exists(dir / "a.safetensors"));
  // An existing file is not replaced.
  WriteFileBytes(dir / "d.safetensors", "keep");
  s = WriteSafetensors(dir / "d.safetensors", {{"t", DType::kF32, {4}, a}});
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(ReadFileBytes(dir / "d.safetensors"), "keep");
}

}  // namespace
}  // namespace blz::formats
