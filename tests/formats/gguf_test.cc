#include "formats/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/checked.h"
#include "formats/ggml_types.h"
#include "tests/test_util.h"

namespace blz::formats {
namespace {

using ::testing::HasSubstr;

// --- Crafting GGUF bytes by hand -----------------------------------------------------------

std::string Le32(uint32_t v) {
  std::string s;
  AppendLE32(&s, v);
  return s;
}
std::string Le64(uint64_t v) {
  std::string s;
  AppendLE64(&s, v);
  return s;
}
std::string GStr(std::string_view s) { return Le64(s.size()) + std::string(s); }

struct CraftKv {
  std::string key;
  uint32_t type;
  std::string value;  // encoded value bytes
};

struct CraftTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  std::optional<uint64_t> offset;  // default: the running padded sum
};

// A small valid GGUF file whose fields each test can spoil.
struct Craft {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count, kv_count;
  std::vector<CraftKv> kvs = {{"general.architecture", 8, GStr("llama")},
                              {"llama.block_count", 4, Le32(1)}};
  // f32 [32, 2] = 256 bytes, f16 [3] = 6 bytes (padded to 32), q8_0 [64] = 68 bytes.
  std::vector<CraftTensor> tensors = {
      {"a", {32, 2}, 0, std::nullopt}, {"b", {3}, 1, std::nullopt}, {"c", {64}, 8, std::nullopt}};
  uint64_t alignment = 32;  // the layout the data is written with

  static uint64_t Bytes(const CraftTensor& t) {
    const GgmlTypeInfo* info = FindGgmlType(t.type);
    if (info == nullptr) return 0;
    auto b = GgmlTensorBytes(info->type, t.dims);
    return b.ok() ? *b : 0;
  }
  static uint64_t Pad(uint64_t v, uint64_t a) {
    uint64_t out = 0;
    EXPECT_TRUE(CheckedAlignUp(v, a, &out));
    return out;
  }
  std::vector<uint64_t> Offsets() const {
    std::vector<uint64_t> out;
    uint64_t off = 0;
    for (const auto& t : tensors) {
      out.push_back(t.offset.value_or(off));
      off += Pad(Bytes(t), alignment);
    }
    return out;
  }
  std::string Header() const {
    std::string s = magic + Le32(version) + Le64(tensor_count.value_or(tensors.size())) +
                    Le64(kv_count.value_or(kvs.size()));
    for (const auto& kv : kvs) s += GStr(kv.key) + Le32(kv.type) + kv.value;
    std::vector<uint64_t> offsets = Offsets();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      s += GStr(t.name) + Le32(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) s += Le64(d);
      s += Le32(t.type) + Le64(offsets[i]);
    }
    return s;
  }
  // Header, zero padding, each tensor's bytes (a non-zero pattern) padded with zeros.
  std::string File() const {
    std::string s = Header();
    s.resize(Pad(s.size(), alignment), '\0');
    for (const auto& t : tensors) {
      const uint64_t n = Bytes(t);
      for (uint64_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 251 + 1));
      s.resize(Pad(s.size(), alignment), '\0');
    }
    return s;
  }
};

Result<GgufFile> Parse(const std::string& bytes, GgufMode mode = GgufMode::kFull) {
  return ParseGguf(AsBytes(bytes), mode, "crafted.gguf");
}

// Expects `bytes` to be rejected with `code` and a message containing `needle`; also checks
// that messages name the source and a byte offset.
void ExpectReject(const std::string& bytes, Code code, std::string_view needle,
                  GgufMode mode = GgufMode::kFull) {
  auto r = Parse(bytes, mode);
  ASSERT_FALSE(r.ok()) << "accepted; expected: " << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr(std::string(needle))) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("crafted.gguf: "));
  EXPECT_THAT(r.status().message(), HasSubstr("(at byte "));
}

std::string CollectWrite(const GgufHeader& h, std::span<const ByteSpan> data, bool pad_end) {
  std::string out;
  Status st = WriteGguf(h, data, GgufWriteOptions{pad_end}, [&out](ByteSpan b) {
    out.append(AsChars(b));
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

std::vector<ByteSpan> TensorSpans(const GgufFile& f, const std::string& bytes) {
  std::vector<ByteSpan> spans;
  for (size_t i = 0; i < f.header.tensors.size(); ++i) {
    spans.push_back(AsBytes(bytes).subspan(f.TensorBegin(i), f.header.tensors[i].n_bytes));
  }
  return spans;
}

// --- ggml types -----------------------------------------------------------------------------

TEST(GgmlTypesTest, BlockSizesAndBytesPerBlock) {
  // Values from ggml's block structs (docs/gguf.md lists all of them).
  struct Want {
    uint32_t id;
    std::string_view name;
    uint32_t block, bytes;
  };
  for (const Want& w : {Want{0, "f32", 1, 4}, Want{1, "f16", 1, 2}, Want{2, "q4_0", 32, 18},
                        Want{3, "q4_1", 32, 20}, Want{6, "q5_0", 32, 22}, Want{7, "q5_1", 32, 24},
                        Want{8, "q8_0", 32, 34}, Want{9, "q8_1", 32, 36},
                        Want{10, "q2_K", 256, 84}, Want{11, "q3_K", 256, 110},
                        Want{12, "q4_K", 256, 144}, Want{13, "q5_K", 256, 176},
                        Want{14, "q6_K", 256, 210}, Want{15, "q8_K", 256, 292},
                        Want{16, "iq2_xxs", 256, 66}, Want{17, "iq2_xs", 256, 74},
                        Want{18, "iq3_xxs", 256, 98}, Want{19, "iq1_s", 256, 50},
                        Want{20, "iq4_nl", 32, 18}, Want{21, "iq3_s", 256, 110},
                        Want{22, "iq2_s", 256, 82}, Want{23, "iq4_xs", 256, 136},
                        Want{24, "i8", 1, 1}, Want{25, "i16", 1, 2}, Want{26, "i32", 1, 4},
                        Want{27, "i64", 1, 8}, Want{28, "f64", 1, 8}, Want{29, "iq1_m", 256, 56},
                        Want{30, "bf16", 1, 2}, Want{34, "tq1_0", 256, 54},
                        Want{35, "tq2_0", 256, 66}, Want{39, "mxfp4", 32, 17}}) {
    const GgmlTypeInfo* info = FindGgmlType(w.id);
    ASSERT_NE(info, nullptr) << w.id;
    EXPECT_EQ(static_cast<uint32_t>(info->type), w.id);
    EXPECT_EQ(info->name, w.name);
    EXPECT_EQ(info->block_size, w.block) << w.name;
    EXPECT_EQ(info->type_size, w.bytes) << w.name;
  }
  EXPECT_EQ(AllGgmlTypes().size(), 32u);
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) {
    EXPECT_EQ(FindGgmlType(removed), nullptr) << removed;
  }
  EXPECT_EQ(GgmlTypeLowerName(GgmlType::kQ4_K), "q4_k");
  EXPECT_TRUE(IsQuantized(GgmlType::kMXFP4));
  EXPECT_FALSE(IsQuantized(GgmlType::kBF16));
  EXPECT_EQ(GgmlToDType(GgmlType::kBF16), DType::kBF16);
  EXPECT_EQ(GgmlToDType(GgmlType::kQ8_0), std::nullopt);
}

TEST(GgmlTypesTest, TensorBytes) {
  const uint64_t q4k[] = {512, 3};
  EXPECT_EQ(GgmlTensorBytes(GgmlType::kQ4_K, q4k).value(), 2u * 144u * 3u);
  const uint64_t f16[] = {7, 5, 3, 2};
  EXPECT_EQ(GgmlTensorBytes(GgmlType::kF16, f16).value(), 7u * 5 * 3 * 2 * 2);
  EXPECT_EQ(GgmlTensorBytes(GgmlType::kF32, {}).value(), 4u);  // a scalar
  const uint64_t bad_row[] = {100};
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kQ4_0, bad_row).ok());
  const uint64_t zero[] = {4, 0};
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kF32, zero).ok());
  const uint64_t five[] = {1, 1, 1, 1, 1};
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kF32, five).ok());
  const uint64_t huge[] = {1ull << 62, 2};  // 2^63 elements > INT64_MAX
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kI8, huge).ok());
  const uint64_t huge_bytes[] = {1ull << 61};  // 2^61 elements * 8 bytes overflows int64
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kF64, huge_bytes).ok());
}

// --- Real files -----------------------------------------------------------------------------

std::vector<std::string> CorpusGgufs(const std::string& corpus) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(corpus + "/gguf")) {
    if (e.path().extension() == ".gguf") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GgufCorpusTest, EveryFileParsesAndRoundTripsByteForByte) {
  BLZ_REQUIRE_CORPUS(corpus);
  const auto files = CorpusGgufs(corpus);
  ASSERT_GE(files.size(), 5u);
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto r = GgufReader::Open(path, GgufMode::kFull);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const GgufFile& f = r->file();
    EXPECT_TRUE(f.data_checked);
    EXPECT_EQ(f.file_size, std::filesystem::file_size(path));
    EXPECT_NE(FindGgufValue(f.header, "general.architecture"), nullptr);
    EXPECT_EQ(f.header.version, 3u);

    // The header-only parse sees the same header.
    auto h = ParseGguf(r->bytes(), GgufMode::kHeaderOnly, path);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->header, f.header);

    // The encoder reproduces the header bytes exactly.
    auto enc = EncodeGgufHeader(f.header);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_TRUE(*enc == AsChars(r->bytes().subspan(0, f.header_bytes)));

    // Read -> write gives identical bytes.
    std::vector<ByteSpan> spans;
    for (size_t i = 0; i < f.header.tensors.size(); ++i) spans.push_back(r->TensorData(i));
    const std::string written = CollectWrite(f.header, spans, f.padded_end);
    ASSERT_EQ(written.size(), r->bytes().size());
    EXPECT_TRUE(written == AsChars(r->bytes())) << "round trip differs";
  }
}

TEST(GgufCorpusTest, LlamaTinyRandomTensors) {
  BLZ_REQUIRE_CORPUS(corpus);
  // PROVENANCE.md: 9 F16 + 3 F32 tensors, llama architecture.
  auto r = GgufReader::Open(corpus + "/gguf/llama-2-tiny-random.gguf", GgufMode::kFull);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int f16 = 0, f32 = 0;
  for (const auto& t : r->header().tensors) {
    f16 += t.type == GgmlType::kF16;
    f32 += t.type == GgmlType::kF32;
    EXPECT_EQ(t.n_bytes, GgmlTensorBytes(t.type, t.dims).value());
  }
  EXPECT_EQ(f16, 9);
  EXPECT_EQ(f32, 3);
  const GgufValue* arch = FindGgufValue(r->header(), "general.architecture");
  ASSERT_NE(arch, nullptr);
  ASSERT_NE(arch->AsString(), nullptr);
  EXPECT_EQ(*arch->AsString(), "llama");
  // Tensor data views lie inside the file, in order.
  const GgufFile& f = r->file();
  for (size_t i = 0; i < f.header.tensors.size(); ++i) {
    EXPECT_EQ(r->TensorData(i).data(), r->bytes().data() + f.TensorBegin(i));
    EXPECT_EQ(f.TensorBegin(i) % f.alignment, 0u);
  }
}

TEST(GgufCorpusTest, WriteFileIsAtomicAndRefusesOverwrite) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string src = corpus + "/gguf/llama-2-tiny-random.gguf";
  auto r = GgufReader::Open(src, GgufMode::kFull);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<ByteSpan> spans;
  for (size_t i = 0; i < r->header().tensors.size(); ++i) spans.push_back(r->TensorData(i));
  testing::TempDir dir;
  const std::string out = dir / "copy.gguf";
  const GgufWriteOptions opts{r->file().padded_end};
  ASSERT_TRUE(WriteGgufFile(out, r->header(), spans, opts).ok());
  EXPECT_EQ(testing::ReadFileBytes(out), testing::ReadFileBytes(src));
  Status again = WriteGgufFile(out, r->header(), spans, opts);
  EXPECT_EQ(again.code(), Code::kAlreadyExists) << again.ToString();
  // Nothing but the output is left in the directory.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(GgufCorpusTest, WeightInspectTinyIsHeaderOnly) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string path = corpus + "/weight-inspect/fixtures/tiny.gguf";
  // It declares test.weight.0 (f32 [64, 128] = 32768 bytes) but holds no data.
  auto full = GgufReader::Open(path, GgufMode::kFull);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Code::kCorruption);
  EXPECT_THAT(full.status().message(), HasSubstr("data truncated"));
  EXPECT_THAT(full.status().message(), HasSubstr("'test.weight.0'"));
  EXPECT_THAT(full.status().message(), HasSubstr(path));

  auto head = GgufReader::Open(path, GgufMode::kHeaderOnly);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  const GgufHeader& h = head->header();
  EXPECT_EQ(h.version, 3u);
  ASSERT_EQ(h.metadata.size(), 1u);
  EXPECT_EQ(h.metadata[0].key, "general.architecture");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, "test.weight.0");
  EXPECT_EQ(h.tensors[0].dims, (std::vector<uint64_t>{64, 128}));
  EXPECT_EQ(h.tensors[0].n_bytes, 64u * 128 * 4);
  EXPECT_FALSE(head->file().data_checked);
  EXPECT_TRUE(head->TensorData(0).empty());  // not in the file
  EXPECT_EQ(head->file().header_bytes, head->file().file_size);

  // empty.gguf (no tensors, no padding) is a complete file.
  auto empty = GgufReader::Open(corpus + "/weight-inspect/fixtures/empty.gguf", GgufMode::kFull);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->header().tensors.empty());
}

// --- Crafted files: the valid baseline ------------------------------------------------------

TEST(GgufCraftTest, BaselineIsValid) {
  Craft c;
  const std::string bytes = c.File();
  auto r = Parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->header.tensors.size(), 3u);
  EXPECT_EQ(r->header.tensors[0].n_bytes, 256u);
  EXPECT_EQ(r->header.tensors[1].n_bytes, 6u);
  EXPECT_EQ(r->header.tensors[2].n_bytes, 68u);
  EXPECT_EQ(r->header.tensors[2].offset, 256u + 32u);
  EXPECT_EQ(r->data_start % 32, 0u);
  EXPECT_TRUE(r->padded_end);
  // Version 2 has the same layout.
  c.version = 2;
  EXPECT_TRUE(Parse(c.File()).ok());
}

TEST(GgufCraftTest, EveryHeaderPrefixIsRejected) {
  const std::string bytes = Craft{}.File();
  auto full = Parse(bytes);
  ASSERT_TRUE(full.ok());
  for (uint64_t n = 0; n < full->header_bytes; ++n) {
    auto r = ParseGguf(AsBytes(bytes).subspan(0, n), GgufMode::kHeaderOnly, "prefix");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_EQ(r.status().code(), Code::kCorruption) << n << ": " << r.status().ToString();
  }
  // Header-only accepts the header alone; full mode does not.
  EXPECT_TRUE(ParseGguf(AsBytes(bytes).subspan(0, full->header_bytes), GgufMode::kHeaderOnly,
                        "prefix")
                  .ok());
}

TEST(GgufCraftTest, PaddedAndUnpaddedEndsAreBothAccepted) {
  Craft c;
  std::string bytes = c.File();
  auto padded = Parse(bytes);
  ASSERT_TRUE(padded.ok());
  EXPECT_TRUE(padded->padded_end);
  // Cut the padding after the last tensor (68 bytes of q8_0, padded to 96).
  bytes.resize(bytes.size() - (96 - 68));
  auto unpadded = Parse(bytes);
  ASSERT_TRUE(unpadded.ok()) << unpadded.status().ToString();
  EXPECT_FALSE(unpadded->padded_end);
  // Both round-trip.
  EXPECT_EQ(CollectWrite(unpadded->header, TensorSpans(*unpadded, bytes), false), bytes);
  // No tensors: the file may end right after the header or after its padding.
  c.tensors.clear();
  std::string header = c.Header();
  auto bare = Parse(header);
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->padded_end, header.size() % 32 == 0);
  EXPECT_EQ(CollectWrite(bare->header, {}, bare->padded_end), header);
  std::string with_pad = c.File();
  ASSERT_GT(with_pad.size(), header.size());
  auto padded_bare = Parse(with_pad);
  ASSERT_TRUE(padded_bare.ok());
  EXPECT_TRUE(padded_bare->padded_end);
  EXPECT_EQ(CollectWrite(padded_bare->header, {}, true), with_pad);
}

// --- Crafted files: one per rejection path --------------------------------------------------

TEST(GgufRejectTest, BadMagic) {
  Craft c;
  c.magic = "GGUX";
  ExpectReject(c.File(), Code::kCorruption, "bad magic 'GGUX'");
  ExpectReject("GG", Code::kCorruption, "too short");
  c.magic = "FUGG";
  ExpectReject(c.File(), Code::kUnsupported, "byte-swapped (big-endian)");
}

TEST(GgufRejectTest, Version1) {
  Craft c;
  c.version = 1;
  ExpectReject(c.File(), Code::kUnsupported, "version 1 is not supported");
}

TEST(GgufRejectTest, VersionZero) {
  Craft c;
  c.version = 0;
  ExpectReject(c.File(), Code::kCorruption, "version 0");
}

TEST(GgufRejectTest, ByteSwappedVersion) {
  Craft c;
  c.version = 0x03000000;  // version 3 written big-endian
  ExpectReject(c.File(), Code::kUnsupported, "byte-swapped (big-endian) GGUF file (version 3");
}

TEST(GgufRejectTest, HugeVersion) {
  Craft c;
  c.version = 4;
  ExpectReject(c.File(), Code::kUnsupported, "version 4 is not supported");
  c.version = 0x12345;
  ExpectReject(c.File(), Code::kUnsupported, "is not supported");
}

TEST(GgufRejectTest, CountsPastEof) {
  Craft c;
  c.kv_count = 1000;
  ExpectReject(c.File(), Code::kCorruption, "kv_count 1000 need at least");
  c.kv_count.reset();
  c.tensor_count = 1000000;
  ExpectReject(c.File(), Code::kCorruption, "tensor_count 1000000 and kv_count");
  c.tensor_count = 1ull << 40;
  ExpectReject(c.File(), Code::kTooLarge, "exceeds the cap");
  c.tensor_count.reset();
  c.kv_count = ~0ull;
  ExpectReject(c.File(), Code::kTooLarge, "kv_count");
  // One kv more than the file holds: caught when the reads run out.
  c.kv_count = 3;
  c.tensors.clear();
  ExpectReject(c.Header(), Code::kCorruption, "", GgufMode::kHeaderOnly);
}

TEST(GgufRejectTest, StringTooLong) {
  Craft c;
  c.kvs[0].value = Le64(kMaxGgufStringBytes + 1) + "llama";
  ExpectReject(c.File(), Code::kTooLarge, "exceeds the cap of 1073741824 bytes");
  c.kvs[0].value = Le64(1 << 20) + "llama";
  ExpectReject(c.File(), Code::kCorruption, "runs past the end of the file");
  Craft k;
  k.kvs[0].key = std::string(kMaxGgufKeyBytes + 1, 'k');
  ExpectReject(k.File(), Code::kTooLarge, "exceeds the cap of 65535 bytes");
}

TEST(GgufRejectTest, ArrayTooLong) {
  Craft c;
  c.kvs.push_back({"tokenizer.ggml.scores", 9, Le32(6) + Le64(kMaxGgufArrayElements + 1)});
  ExpectReject(c.File(), Code::kTooLarge, "exceeds the cap of 1073741824");
  c.kvs.back().value = Le32(6) + Le64(100000) + std::string(16, '\0');
  ExpectReject(c.File(), Code::kCorruption, "array of 100000 float32 elements runs past");
  c.kvs.back().value = Le32(8) + Le64(100000) + GStr("x");
  ExpectReject(c.File(), Code::kCorruption, "array of 100000 string elements runs past");
}

TEST(GgufRejectTest, ArraysNestedTooDeep) {
  // kMaxGgufArrayDepth levels are fine, one more is not.
  auto nested = [](uint32_t levels) {
    std::string v = Le32(4) + Le64(1) + Le32(7);  // innermost: [u32 7]
    for (uint32_t i = 1; i < levels; ++i) v = Le32(9) + Le64(1) + v;
    return v;
  };
  Craft c;
  c.kvs.push_back({"deep", 9, nested(kMaxGgufArrayDepth)});
  auto ok = Parse(c.File());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  c.kvs.back().value = nested(kMaxGgufArrayDepth + 1);
  ExpectReject(c.File(), Code::kTooLarge, "nested deeper than 8");
}

TEST(GgufRejectTest, UnknownValueType) {
  Craft c;
  c.kvs[1].type = 13;
  ExpectReject(c.File(), Code::kCorruption, "key 'llama.block_count': unknown value type 13");
  Craft a;
  a.kvs.push_back({"arr", 9, Le32(99) + Le64(0)});
  ExpectReject(a.File(), Code::kCorruption, "unknown value type 99");
}

TEST(GgufRejectTest, BoolNotZeroOrOne) {
  Craft c;
  c.kvs.push_back({"flag", 7, std::string(1, '\x02')});
  ExpectReject(c.File(), Code::kCorruption, "key 'flag': bool value 2 is neither 0 nor 1");
  Craft a;
  a.kvs.push_back({"flags", 9, Le32(7) + Le64(3) + std::string("\x01\x00\xff", 3)});
  ExpectReject(a.File(), Code::kCorruption, "array element 2: bool value 255");
}

TEST(GgufRejectTest, EmptyKey) {
  Craft c;
  c.kvs[1].key = "";
  ExpectReject(c.File(), Code::kCorruption, "empty key");
}

TEST(GgufRejectTest, DuplicateKey) {
  Craft c;
  c.kvs[1].key = "general.architecture";
  c.kvs[1].type = 8;
  c.kvs[1].value = GStr("gpt2");
  ExpectReject(c.File(), Code::kCorruption, "duplicate key 'general.architecture'");
}

TEST(GgufRejectTest, BadAlignment) {
  Craft c;
  c.kvs.push_back({"general.alignment", 10, Le64(32)});
  ExpectReject(c.File(), Code::kCorruption, "general.alignment must be uint32, got uint64");
  c.kvs.back() = {"general.alignment", 4, Le32(0)};
  ExpectReject(c.File(), Code::kCorruption, "not a non-zero power of two");
  c.kvs.back() = {"general.alignment", 4, Le32(48)};
  ExpectReject(c.File(), Code::kCorruption, "general.alignment 48 is not");
  // Powers of two other than 32 are honoured.
  for (uint32_t a : {1u, 8u, 64u, 4096u}) {
    c.kvs.back() = {"general.alignment", 4, Le32(a)};
    c.alignment = a;
    auto r = Parse(c.File());
    ASSERT_TRUE(r.ok()) << a << ": " << r.status().ToString();
    EXPECT_EQ(r->alignment, a);
    EXPECT_EQ(r->data_start % a, 0u);
  }
}

TEST(GgufRejectTest, DuplicateTensorName) {
  Craft c;
  c.tensors[2].name = "a";
  ExpectReject(c.File(), Code::kCorruption, "duplicate tensor name 'a'");
}

TEST(GgufRejectTest, BadTensorName) {
  Craft c;
  c.tensors[1].name = "";
  ExpectReject(c.File(), Code::kCorruption, "tensor #1: empty tensor name");
  c.tensors[1].name = std::string(kMaxGgufTensorNameBytes + 1, 'n');
  ExpectReject(c.File(), Code::kTooLarge, "tensor #1 name: string length 64 exceeds the cap");
  c.tensors[1].name = std::string(kMaxGgufTensorNameBytes, 'n');
  EXPECT_TRUE(Parse(c.File()).ok());
}

TEST(GgufRejectTest, MoreThanFourDims) {
  Craft c;
  c.tensors[1].dims = {3, 1, 1, 1, 1};
  ExpectReject(c.File(), Code::kCorruption, "tensor 'b': 5 dimensions (at most 4)");
  c.tensors[1].dims = {3, 1, 1, 1};
  EXPECT_TRUE(Parse(c.File()).ok());
  c.tensors[1].dims = {};  // a scalar
  EXPECT_TRUE(Parse(c.File()).ok());
}

TEST(GgufRejectTest, ZeroOrOverflowingDims) {
  Craft c;
  c.tensors[0].dims = {32, 0};
  ExpectReject(c.File(), Code::kCorruption, "tensor 'a': dimension 1 is 0");
  c.tensors[0].dims = {1ull << 32, 1ull << 32};
  ExpectReject(c.File(), Code::kCorruption, "tensor 'a': element count overflows int64");
  c.tensors[0].dims = {1ull << 63};
  ExpectReject(c.File(), Code::kCorruption, "exceeds INT64_MAX");
  c.tensors[0].dims = {1ull << 61};  // 2^61 f32 = 2^63 bytes
  ExpectReject(c.File(), Code::kCorruption, "byte size overflows int64");
}

TEST(GgufRejectTest, UnknownGgmlType) {
  Craft c;
  c.tensors[1].type = 40;
  ExpectReject(c.File(), Code::kUnsupported, "tensor 'b': unknown ggml type id 40");
  c.tensors[1].type = 4;
  ExpectReject(c.File(), Code::kUnsupported, "tensor 'b': removed ggml type id 4");
  c.tensors[1].type = 36;
  ExpectReject(c.File(), Code::kUnsupported, "removed ggml type id 36");
}

TEST(GgufRejectTest, RowNotDivisibleByBlockSize) {
  Craft c;
  c.tensors[2].dims = {48};  // q8_0 blocks hold 32
  ExpectReject(c.File(), Code::kCorruption,
               "tensor 'c': row length ne0 = 48 is not a multiple of q8_0's block size 32");
  c.tensors[2].dims = {32, 3};  // rows are ne0; ne1 may be anything
  EXPECT_TRUE(Parse(c.File()).ok());
}

TEST(GgufRejectTest, OffsetNotRunningPaddedSum) {
  Craft c;
  c.tensors[1].offset = 256 + 32;  // a gap
  ExpectReject(c.File(), Code::kCorruption, "tensor 'b': offset 288, expected 256");
  Craft first;
  first.tensors[0].offset = 32;
  ExpectReject(first.File(), Code::kCorruption, "tensor 'a': offset 32, expected 0");
  Craft unaligned;
  unaligned.tensors[2].offset = 256 + 6;  // packed without padding
  ExpectReject(unaligned.File(), Code::kCorruption, "offset 262, expected 288");
}

TEST(GgufRejectTest, DataTruncated) {
  std::string bytes = Craft{}.File();
  bytes.resize(bytes.size() - (96 - 68) - 1);  // one byte short of the last tensor
  ExpectReject(bytes, Code::kCorruption, "data truncated: tensor 'c'");
  // A header-only parse does not look at the data.
  EXPECT_TRUE(Parse(bytes, GgufMode::kHeaderOnly).ok());
  // Data section missing altogether: the first tensor is named.
  Craft c;
  ExpectReject(c.Header(), Code::kCorruption, "data truncated: tensor 'a'");
}

TEST(GgufRejectTest, PaddingAndTrailingBytes) {
  const std::string good = Craft{}.File();
  auto f = Parse(good);
  ASSERT_TRUE(f.ok());
  std::string bad = good;
  bad[f->TensorBegin(1) + 6] = 1;  // padding after tensor 'b'
  ExpectReject(bad, Code::kCorruption, "non-zero padding byte 1 after tensor 'b'");
  if (f->data_start > f->header_bytes) {
    bad = good;
    bad[f->header_bytes] = 'x';
    ExpectReject(bad, Code::kCorruption, "after the header");
  }
  ExpectReject(good + std::string(1, '\0'), Code::kCorruption, "1 trailing bytes");
  ExpectReject(good.substr(0, good.size() - 1), Code::kCorruption,
               "ends inside the padding after the last tensor");
}

// --- Writer ---------------------------------------------------------------------------------

GgufHeader EveryValueTypeHeader() {
  GgufHeader h;
  h.version = 3;
  auto add = [&h](std::string key, GgufValue v) { h.metadata.push_back({std::move(key), v}); };
  add("general.architecture", GgufValue::String("llama"));
  add("general.alignment", GgufValue::U32(64));
  add("u8", GgufValue::U8(200));
  add("i8", GgufValue::I8(-5));
  add("u16", GgufValue::U16(60000));
  add("i16", GgufValue::I16(-30000));
  add("u32", GgufValue::U32(4000000000u));
  add("i32", GgufValue::I32(-2000000000));
  add("f32", GgufValue::F32(3.0f));
  add("bool", GgufValue::Bool(true));
  add("u64", GgufValue::U64(~0ull));
  add("i64", GgufValue::I64(-1));
  add("f64", GgufValue::F64(-0.5));
  add("str.utf8", GgufValue::String("h\xC3\xA9llo \"q\"\n"));
  std::vector<GgufValue> strs = {GgufValue::String("a"), GgufValue::String("")};
  add("arr.str", GgufValue::Array(GgufType::kString, strs).value());
  std::vector<GgufValue> floats = {GgufValue::F32(1.5f), GgufValue::F32(-2.0f)};
  add("arr.f32", GgufValue::Array(GgufType::kFloat32, floats).value());
  std::vector<GgufValue> bools = {GgufValue::Bool(false), GgufValue::Bool(true)};
  add("arr.bool", GgufValue::Array(GgufType::kBool, bools).value());
  std::vector<GgufValue> i64s = {GgufValue::I64(-7)};
  std::vector<GgufValue> nested = {GgufValue::Array(GgufType::kInt64, i64s).value(),
                                   GgufValue::Array(GgufType::kInt64, {}).value()};
  add("arr.nested", GgufValue::Array(GgufType::kArray, nested).value());
  h.tensors.push_back({"tok_embd", {256, 3}, GgmlType::kQ4_K, 0, 0});
  h.tensors.push_back({"norm", {7}, GgmlType::kF32, 0, 0});
  h.tensors.push_back({"scalar", {}, GgmlType::kBF16, 0, 0});
  h.tensors.push_back({"mx", {64, 2}, GgmlType::kMXFP4, 0, 0});
  return h;
}

TEST(GgufWriterTest, EveryValueTypeRoundTrips) {
  GgufHeader h = EveryValueTypeHeader();
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  EXPECT_EQ(h.tensors[0].n_bytes, 3u * 144);
  EXPECT_EQ(h.tensors[1].offset, 448u);  // 432 padded to 64
  EXPECT_EQ(h.tensors[3].n_bytes, 2u * 2 * 17);
  std::vector<std::string> data;
  std::vector<ByteSpan> spans;
  for (const auto& t : h.tensors) data.push_back(std::string(t.n_bytes, '\x5a'));
  for (const auto& d : data) spans.push_back(AsBytes(d));
  for (bool pad_end : {true, false}) {
    const std::string bytes = CollectWrite(h, spans, pad_end);
    auto r = Parse(bytes);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->header, h);
    EXPECT_EQ(r->alignment, 64u);
    EXPECT_EQ(r->padded_end, pad_end || bytes.size() % 64 == 0);
    EXPECT_EQ(CollectWrite(r->header, TensorSpans(*r, bytes), r->padded_end), bytes);
    // Typed accessors.
    EXPECT_EQ(FindGgufValue(r->header, "i8")->AsInt(), -5);
    EXPECT_EQ(FindGgufValue(r->header, "u32")->AsUInt(), 4000000000u);
    EXPECT_EQ(FindGgufValue(r->header, "f32")->AsFloat(), 3.0);
    EXPECT_EQ(FindGgufValue(r->header, "bool")->AsBool(), true);
    const GgufValue* arr = FindGgufValue(r->header, "arr.f32");
    ASSERT_NE(arr, nullptr);
    EXPECT_EQ(arr->count, 2u);
    EXPECT_EQ(arr->Item(1).AsFloat(), -2.0);
    EXPECT_EQ(FindGgufValue(r->header, "arr.nested")->Item(0).Item(0).AsInt(), -7);
  }
}

TEST(GgufWriterTest, RefusesWhatTheReaderRejects) {
  GgufHeader h = EveryValueTypeHeader();
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  std::vector<std::string> data;
  std::vector<ByteSpan> spans;
  for (const auto& t : h.tensors) data.push_back(std::string(t.n_bytes, '\x01'));
  for (const auto& d : data) spans.push_back(AsBytes(d));
  auto sink = [](ByteSpan) { return Status::Ok(); };

  GgufHeader dup = h;
  dup.metadata.push_back({"u8", GgufValue::U8(1)});
  Status st = WriteGguf(dup, spans, {}, sink);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("duplicate key 'u8'"));

  GgufHeader bad_offset = h;
  bad_offset.tensors[1].offset += 64;
  EXPECT_EQ(WriteGguf(bad_offset, spans, {}, sink).code(), Code::kInvalidArgument);

  GgufHeader bad_count = h;
  bad_count.metadata[14].value.count = 3;  // arr.str holds 2
  st = WriteGguf(bad_count, spans, {}, sink);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("does not match"));

  std::vector<ByteSpan> short_spans = spans;
  short_spans[1] = short_spans[1].subspan(1);
  st = WriteGguf(h, short_spans, {}, sink);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tensor 'norm'"));
  EXPECT_EQ(WriteGguf(h, std::span(spans).subspan(1), {}, sink).code(), Code::kInvalidArgument);

  GgufHeader bad_dims = h;
  bad_dims.tensors[0].dims = {100, 3};
  EXPECT_EQ(AssignGgufOffsets(&bad_dims).code(), Code::kInvalidArgument);

  // A failing sink aborts the write with its status.
  st = WriteGguf(h, spans, {}, [](ByteSpan) { return IOError("disk full"); });
  EXPECT_EQ(st.code(), Code::kIOError);

  // Mismatched array item types are refused when building.
  std::vector<GgufValue> mixed = {GgufValue::U8(1), GgufValue::I8(1)};
  EXPECT_EQ(GgufValue::Array(GgufType::kUint8, mixed).status().code(), Code::kInvalidArgument);
}

// Arrays are held as their file bytes (issue 9); the element walk is bounds-checked.
TEST(GgufValueTest, ArraysKeepTheirFileEncodingAndWalkSafely) {
  std::vector<GgufValue> strs = {GgufValue::String("ab"), GgufValue::String("")};
  const GgufValue a = GgufValue::Array(GgufType::kString, strs).value();
  EXPECT_EQ(a.raw, std::string("\x02\0\0\0\0\0\0\0ab\0\0\0\0\0\0\0\0", 18));
  EXPECT_EQ(a.Item(0), GgufValue::String("ab"));
  EXPECT_EQ(a.Item(1), GgufValue::String(""));
  EXPECT_EQ(GgufArrayDepth(a), 1u);

  std::string_view rest = a.raw;
  GgufItemView item;
  ASSERT_TRUE(NextGgufItem(GgufType::kString, &rest, &item));
  EXPECT_EQ(item.str, "ab");
  ASSERT_TRUE(NextGgufItem(GgufType::kString, &rest, &item));
  EXPECT_TRUE(rest.empty());
  EXPECT_FALSE(NextGgufItem(GgufType::kString, &rest, &item));

  // A string length past the end, a nested count past the end, a bad element type: rejected
  // without moving.
  std::string_view bad("\x09\0\0\0\0\0\0\0ab", 10);
  EXPECT_FALSE(NextGgufItem(GgufType::kString, &bad, &item));
  EXPECT_EQ(bad.size(), 10u);
  std::string nested;
  AppendLE32(&nested, static_cast<uint32_t>(GgufType::kUint32));
  AppendLE64(&nested, 1ull << 62);  // count * 4 overflows
  std::string_view nv = nested;
  EXPECT_FALSE(NextGgufItem(GgufType::kArray, &nv, &item));
  EXPECT_EQ(nv.size(), 12u);
  std::string_view one("\x01", 1);
  EXPECT_FALSE(NextGgufItem(static_cast<GgufType>(13), &one, &item));

  // Nested depth: 8 levels are allowed, 9 are not (as in the reader).
  GgufValue v = GgufValue::Array(GgufType::kUint8, {}).value();
  for (int level = 2; level <= 8; ++level) {
    std::vector<GgufValue> items = {v};
    v = GgufValue::Array(GgufType::kArray, items).value();
  }
  EXPECT_EQ(GgufArrayDepth(v), 8u);
  std::vector<GgufValue> items = {v};
  EXPECT_EQ(GgufValue::Array(GgufType::kArray, items).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(v.Item(0).Item(0).Item(0).element_type, GgufType::kArray);
}

// The writer checks `raw` against `count` for string and nested arrays too.
TEST(GgufValueTest, WriterRefusesRawThatDoesNotMatchTheCount) {
  std::vector<GgufValue> inner = {GgufValue::Array(GgufType::kInt8, {}).value()};
  GgufHeader h;
  h.metadata.push_back({"n", GgufValue::Array(GgufType::kArray, inner).value()});
  ASSERT_TRUE(EncodeGgufHeader(h).ok());
  h.metadata[0].value.count = 2;
  EXPECT_EQ(EncodeGgufHeader(h).status().code(), Code::kInvalidArgument);
  h.metadata[0].value.count = 1;
  h.metadata[0].value.raw += "x";  // a trailing byte
  EXPECT_EQ(EncodeGgufHeader(h).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace blz::formats
