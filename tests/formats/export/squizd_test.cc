// SQUIZD v1 (formats/export/squizd.h, docs/squizd.md): writer round trips (synthetic model and
// the corpus), the INT4 error bound, and one crafted bad file per rejection path.
#include "formats/export/squizd.h"

#include <zlib.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <ostream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/bytes.h"
#include "formats/export/cast.h"
#include "formats/float_convert.h"
#include "formats/safetensors.h"
#include "formats/tensor_stats.h"
#include "tests/test_util.h"

namespace blz::exporter {
namespace {

using formats::DType;
using formats::ModelTensors;
using formats::SafetensorsTensorView;
using formats::ValueTensor;
using testing::TempDir;

// --- Building source models ---

struct SourceTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    StoreLE32(out.data() + 4 * i, bits);
  }
  return out;
}

std::vector<uint8_t> Half16Bytes(const std::vector<float>& v, bool bf16) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = bf16 ? formats::F32ToBF16(v[i]) : formats::F32ToF16(v[i]);
    out[2 * i] = uint8_t(h);
    out[2 * i + 1] = uint8_t(h >> 8);
  }
  return out;
}

std::vector<float> Ramp(size_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = offset + scale * std::sin(float(i) * 0.7f + 0.3f) * float(1 + i % 5);
  }
  return v;
}

std::string WriteModel(const TempDir& dir, const std::vector<SourceTensor>& tensors,
                       const std::string& file = "model.safetensors") {
  std::vector<SafetensorsTensorView> views;
  for (const SourceTensor& t : tensors) {
    views.push_back({t.name, t.dtype, t.shape, ByteSpan(t.bytes)});
  }
  std::string path = dir / file;
  Status s = formats::WriteSafetensors(path, views);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return path;
}

// A model exercising every writer path: odd and even column counts, F32/F16/BF16 matrices, a
// zero row, a row of tiny values (the subnormal-step path), 1-D and 0-D tensors, integers.
std::vector<SourceTensor> SyntheticModel() {
  std::vector<SourceTensor> t;
  t.push_back({"a.weight", DType::kF32, {5, 7}, F32Bytes(Ramp(35, 0.5f, 0.01f))});
  std::vector<float> odd = Ramp(12, 2.0f, 0);
  for (int i = 4; i < 8; ++i) odd[i] = 0;              // row 1 all zeros
  for (int i = 8; i < 12; ++i) odd[i] = 1e-39f * float(i - 7);  // row 2 subnormal
  t.push_back({"b.weight", DType::kF32, {3, 4}, F32Bytes(odd)});
  t.push_back({"c.weight", DType::kF16, {4, 9}, Half16Bytes(Ramp(36, 3.0f, -1), false)});
  t.push_back({"d.weight", DType::kBF16, {3, 6}, Half16Bytes(Ramp(18, 100.0f, 5), true)});
  t.push_back({"e.bias", DType::kF32, {7}, F32Bytes(Ramp(7, 1.0f, 0))});
  t.push_back({"f.norm", DType::kBF16, {3}, Half16Bytes({1.0f, -2.5f, 0.125f}, true)});
  t.push_back({"g.scalar", DType::kF32, {}, F32Bytes({42.0f})});
  std::vector<uint8_t> ids(3 * 8, 0);
  for (int i = 0; i < 3; ++i) StoreLE64(ids.data() + 8 * i, uint64_t(i * 1000 + 7));
  t.push_back({"h.ids", DType::kI64, {3}, ids});
  t.push_back({"i.half", DType::kF16, {2}, Half16Bytes({0.5f, -65504.0f}, false)});
  return t;
}

// Checks a written file against its source: names, shapes, NPCL bytes, the INT4 bound and
// the report's error numbers.
void CheckRoundTrip(const ModelTensors& source, const std::string& out, const SquizdReport& rep,
                    bool int4) {
  auto file = OpenSquizd(out);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE(VerifySquizd(*file).ok());
  ASSERT_EQ(file->layers.size(), source.tensors().size());
  ASSERT_EQ(rep.tensors.size(), source.tensors().size());
  EXPECT_TRUE(file->has_names);
  EXPECT_EQ(rep.file_bytes, file->bytes.size());
  size_t n_int4 = 0;
  for (size_t i = 0; i < file->layers.size(); ++i) {
    const SquizdLayer& l = file->layers[i];
    const ValueTensor& t = source.tensors()[i];
    const SquizdTensorReport& r = rep.tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(l.name, t.name);
    EXPECT_EQ(r.name, t.name);
    EXPECT_EQ(l.elements, t.elements);
    EXPECT_EQ(r.bytes, l.weight_length);
    EXPECT_EQ(r.block_kind, SquizdBlockName(l.kind, l.npcl_dtype));
    EXPECT_EQ(l.tensor_id, SquizdTensorId(uint32_t(i), t.name));
    auto src = formats::DecodeToFloat(*t.type, t.data, t.elements);
    ASSERT_TRUE(src.ok());
    auto back = DequantizeSquizdLayer(*file, i);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->size(), src->size());
    if (l.kind == SquizdBlockKind::kNpcl) {
      EXPECT_EQ(l.shape, t.shape);
      bool same_type = (t.dtype == "F32" && l.npcl_dtype == SquizdNpclDtype::kF32) ||
                       (t.dtype == "F16" && l.npcl_dtype == SquizdNpclDtype::kF16) ||
                       (t.dtype == "BF16" && l.npcl_dtype == SquizdNpclDtype::kBF16);
      if (t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F32") {
        EXPECT_TRUE(same_type);
      }
      if (same_type) {
        ByteSpan stored = file->bytes.subspan(l.data_offset, l.data_length);
        ASSERT_EQ(stored.size(), t.data.size());
        EXPECT_EQ(0, std::memcmp(stored.data(), t.data.data(), stored.size()));
      }
      EXPECT_EQ(*back, *src);  // exact (the I64 values are small)
      EXPECT_EQ(r.max_abs_error, 0.0);
      EXPECT_EQ(r.relative_l2_error, 0.0);
      continue;
    }
    ++n_int4;
    ASSERT_EQ(l.kind, SquizdBlockKind::kInt4);
    ASSERT_EQ(l.shape, t.shape);
    const uint64_t rows = l.shape[0], cols = l.shape[1];
    EXPECT_EQ(r.scale_entries, 1 + rows);
    float max_scale = 0;
    CastError err;
    for (uint64_t row = 0; row < rows; ++row) {
      const float scale = file->scales[l.sub_scale_index + row].scale;
      max_scale = std::max(max_scale, scale);
      float amax = 0;
      for (uint64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs((*src)[row * cols + c]));
      // The documented scale: max|x| / 7, or max|x| when that step would be subnormal.
      EXPECT_EQ(scale, amax / 7.0f < FLT_MIN ? amax : amax / 7.0f) << "row " << row;
      for (uint64_t c = 0; c < cols; ++c) {
        const double x = (*src)[row * cols + c];
        const double y = (*back)[row * cols + c];
        // Half a step, plus float rounding of x / scale and q * scale.
        EXPECT_LE(std::fabs(y - x), 0.5 * scale + 1e-6 * amax) << "row " << row << " col " << c;
        const double d = y - x;
        err.max_abs = std::max(err.max_abs, std::fabs(d));
        err.sum_sq_err += d * d;
        err.sum_sq_ref += x * x;
      }
    }
    EXPECT_EQ(file->scales[l.tensor_scale_index].scale, max_scale);
    EXPECT_DOUBLE_EQ(r.max_abs_error, err.max_abs);
    EXPECT_DOUBLE_EQ(r.relative_l2_error, err.RelativeL2());
    EXPECT_GT(r.max_abs_error, 0.0);
  }
  EXPECT_EQ(n_int4 > 0, (file->flags & kSquizdFlagInt4) != 0);
  if (!int4) {
    EXPECT_EQ(n_int4, 0u);
  }
}

TEST(SquizdWriterTest, SyntheticRoundTripInt4) {
  TempDir dir;
  std::string src = WriteModel(dir, SyntheticModel());
  auto model = ModelTensors::Open(src);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  SquizdReport rep;
  SquizdWriteOptions options;
  options.int4_always = true;  // the small matrices would stay NPCL by default
  ASSERT_TRUE(WriteSquizd(*model, options, dir / "m.squizd", &rep).ok());
  CheckRoundTrip(*model, dir / "m.squizd", rep, true);
  auto file = OpenSquizd(dir / "m.squizd");
  ASSERT_TRUE(file.ok());
  size_t int4 = 0;
  for (const SquizdLayer& l : file->layers) int4 += l.kind == SquizdBlockKind::kInt4;
  EXPECT_EQ(int4, 4u);  // a, b, c, d
  EXPECT_EQ(file->flags, kSquizdFlagInt4);
  // The summary names every layer and the flags.
  std::string text = SquizdSummaryText(*file);
  EXPECT_NE(text.find("flags: INT4"), std::string::npos) << text;
  EXPECT_NE(text.find("NPCL-BF16"), std::string::npos) << text;
  EXPECT_NE(text.find("a.weight"), std::string::npos) << text;
  auto json = SquizdSummaryJson(*file);
  EXPECT_EQ(json["layers"].size(), model->tensors().size());
  EXPECT_EQ(json["flags"][0], "INT4");
  EXPECT_EQ(SquizdReportJson(rep)["tensors"].size(), model->tensors().size());
}

TEST(SquizdWriterTest, Int4OnlyWhereItIsSmallerByDefault) {
  TempDir dir;
  std::vector<SourceTensor> t = SyntheticModel();
  t.push_back({"wide", DType::kF32, {2, 64}, F32Bytes(Ramp(128, 1.0f, 0))});
  t.push_back({"narrow", DType::kF32, {64, 2}, F32Bytes(Ramp(128, 1.0f, 0))});
  auto model = ModelTensors::Open(WriteModel(dir, t));
  ASSERT_TRUE(model.ok());
  SquizdReport rep;
  ASSERT_TRUE(WriteSquizd(*model, {}, dir / "m.squizd", &rep).ok());
  CheckRoundTrip(*model, dir / "m.squizd", rep, true);
  for (const SquizdTensorReport& r : rep.tensors) {
    // INT4 [2, 64]: 12 + 64 + 48 bytes < NPCL 20 + 512; [64, 2]: 12 + 64 + 1040 > 532;
    // [3, 4]: 82 > 68; [5, 7]: 128 < 160.
    if (r.name == "wide" || r.name == "a.weight") {
      EXPECT_EQ(r.block_kind, "INT4") << r.name;
    } else if (r.name == "narrow" || r.name == "b.weight") {
      EXPECT_EQ(r.block_kind, "NPCL-F32") << r.name;
    }
  }
}

TEST(SquizdWriterTest, SyntheticRoundTripNpclOnly) {
  TempDir dir;
  std::string src = WriteModel(dir, SyntheticModel());
  auto model = ModelTensors::Open(src);
  ASSERT_TRUE(model.ok());
  SquizdReport rep;
  SquizdWriteOptions options;
  options.int4 = false;
  ASSERT_TRUE(WriteSquizd(*model, options, dir / "m.squizd", &rep).ok());
  CheckRoundTrip(*model, dir / "m.squizd", rep, false);
  auto file = OpenSquizd(dir / "m.squizd");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->flags, 0u);
  EXPECT_FALSE(file->has_sczt);
}

TEST(SquizdWriterTest, CorpusRoundTrip) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto model = ModelTensors::Open(corpus + "/tiny-gpt2/base/model.safetensors");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  TempDir dir;
  SquizdReport rep;
  ASSERT_TRUE(WriteSquizd(*model, {}, dir / "gpt2.squizd", &rep).ok());
  CheckRoundTrip(*model, dir / "gpt2.squizd", rep, true);
}

TEST(SquizdWriterTest, RefusesExistingOutputUnlessOverwrite) {
  TempDir dir;
  auto model = ModelTensors::Open(WriteModel(dir, SyntheticModel()));
  ASSERT_TRUE(model.ok());
  testing::WriteFileBytes(dir / "m.squizd", "old");
  Status s = WriteSquizd(*model, {}, dir / "m.squizd", nullptr);
  EXPECT_EQ(s.code(), Code::kAlreadyExists) << s.ToString();
  EXPECT_EQ(testing::ReadFileBytes(dir / "m.squizd"), "old");
  SquizdWriteOptions options;
  options.overwrite = true;
  ASSERT_TRUE(WriteSquizd(*model, options, dir / "m.squizd", nullptr).ok());
  EXPECT_TRUE(OpenSquizd(dir / "m.squizd").ok());
}

TEST(SquizdWriterTest, RefusesNonFiniteInt4InputAndLeavesNoFile) {
  TempDir dir;
  std::vector<float> v = {1, 2, std::numeric_limits<float>::infinity(), 4};
  auto model = ModelTensors::Open(WriteModel(dir, {{"w", DType::kF32, {2, 2}, F32Bytes(v)}}));
  ASSERT_TRUE(model.ok());
  SquizdWriteOptions int4;
  int4.int4_always = true;
  Status s = WriteSquizd(*model, int4, dir / "m.squizd", nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("'w': element 2 (row 1, column 0)"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir / "m.squizd"));
  // As NPCL the value is kept.
  SquizdWriteOptions options;
  options.int4 = false;
  EXPECT_TRUE(WriteSquizd(*model, options, dir / "m.squizd", nullptr).ok());
}

TEST(SquizdWriterTest, Int2IsNotImplemented) {
  TempDir dir;
  auto model = ModelTensors::Open(WriteModel(dir, SyntheticModel()));
  ASSERT_TRUE(model.ok());
  SquizdWriteOptions options;
  options.int2 = true;
  EXPECT_EQ(WriteSquizd(*model, options, dir / "m.squizd", nullptr).code(), Code::kUnsupported);
}

// --- Crafted files ---

uint64_t TestFnv(ByteSpan b) {  // FNV-1a-64, written independently of the reader
  uint64_t h = 14695981039346656037ull;
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A valid file: layer 0 "a" INT4 [2, 3], layer 1 "b" NPCL F32 [2], SCZT, BLZN.
// Layout: header 0..255, table 256..319, block 0 at 320 (16 bytes), block 1 at 336 (24 bytes),
// SCZT at 360 (8 + 3 x 16 bytes), BLZN at 416 (18 bytes); 434 bytes.
std::string BuildBaseFile(bool names) {
  TempDir dir;
  auto model = ModelTensors::Open(WriteModel(
      dir, {{"a", DType::kF32, {2, 3}, F32Bytes({1, -2, 3, 0.5f, 0.25f, -1})},
            {"b", DType::kF32, {2}, F32Bytes({7, 8})}}));
  EXPECT_TRUE(model.ok());
  SquizdWriteOptions options;
  options.write_names = names;
  options.int4_always = true;
  EXPECT_TRUE(WriteSquizd(*model, options, dir / "m.squizd", nullptr).ok());
  return testing::ReadFileBytes(dir / "m.squizd");
}

std::string BaseFile(bool names = true) {
  static const std::string with_names = BuildBaseFile(true);
  static const std::string without_names = BuildBaseFile(false);
  return names ? with_names : without_names;
}

void Put32(std::string* f, size_t at, uint32_t v) {
  StoreLE32(reinterpret_cast<uint8_t*>(f->data() + at), v);
}
void Put64(std::string* f, size_t at, uint64_t v) {
  StoreLE64(reinterpret_cast<uint8_t*>(f->data() + at), v);
}
void Put16(std::string* f, size_t at, uint16_t v) {
  (*f)[at] = char(v & 0xFF);
  (*f)[at + 1] = char(v >> 8);
}

// Sets SPARSE with valid sparsity metadata and its CRC32.
void MakeSparse(std::string* f) {
  Put32(f, 6, LoadLE32(reinterpret_cast<const uint8_t*>(f->data() + 6)) | kSquizdFlagSparse);
  Put32(f, 128, 1);   // sparsity_version
  Put32(f, 132, 64);  // block_size
  Put32(f, 136, 1);   // n_sparse_layers
  float mean = 0.25f;
  uint32_t bits;
  std::memcpy(&bits, &mean, 4);
  Put32(f, 140, bits);
  Put32(f, 14, uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(f->data() + 128), 32)));
}

// Without names: sets EAGLE, appends an 8-byte EGDH appendix, fills eagle_meta and its hash.
void MakeEagle(std::string* f) {
  const uint64_t at = f->size();
  f->append("EGDH");
  AppendLE32(f, 2);
  Put32(f, 6, LoadLE32(reinterpret_cast<const uint8_t*>(f->data() + 6)) | kSquizdFlagEagle);
  Put64(f, 160, at);
  Put64(f, 168, 8);
  Put32(f, 176, 2);
  Put32(f, 180, 32000);
  Put64(f, 18, TestFnv(AsBytes(std::string_view(*f).substr(160, 32))));
}

Result<SquizdFile> Parse(const std::string& f) { return ParseSquizd(AsBytes(f), "x.squizd"); }

TEST(SquizdReaderTest, BaseFilesAreValid) {
  std::string f = BaseFile();
  ASSERT_EQ(f.size(), 434u);
  auto p = Parse(f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->layers.size(), 2u);
  EXPECT_EQ(p->layers[0].weight_offset, 320u);
  EXPECT_EQ(p->layers[1].weight_offset, 336u);
  EXPECT_EQ(p->sczt_offset, 360u);
  EXPECT_EQ(p->names_offset, 416u);
  EXPECT_TRUE(VerifySquizd(*p).ok());
  std::string sparse = BaseFile();
  MakeSparse(&sparse);
  auto ps = Parse(sparse);
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  EXPECT_EQ(ps->sparsity.block_size, 64u);
  std::string eagle = BaseFile(false);
  MakeEagle(&eagle);
  auto pe = Parse(eagle);
  ASSERT_TRUE(pe.ok()) << pe.status().ToString();
  EXPECT_EQ(pe->eagle.draft_vocab, 32000u);
  EXPECT_EQ(SquizdFlagNames(pe->flags), (std::vector<std::string>{"INT4", "EAGLE"}));
}

struct BadCase {
  const char* name;
  std::function<void(std::string*)> mutate;
  Code code;
  const char* expect;  // substring of the message: field and byte offset
  bool names = true;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class SquizdRejectTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(SquizdRejectTest, Rejects) {
  const BadCase& c = GetParam();
  std::string f = BaseFile(c.names);
  c.mutate(&f);
  auto p = Parse(f);
  ASSERT_FALSE(p.ok()) << c.name;
  EXPECT_EQ(p.status().code(), c.code) << p.status().ToString();
  EXPECT_NE(p.status().message().find(c.expect), std::string::npos)
      << "message: " << p.status().message() << "\nexpected: " << c.expect;
  EXPECT_EQ(p.status().message().rfind("x.squizd: ", 0), 0u) << p.status().message();
}

const BadCase kBadCases[] = {
    {"magic", [](std::string* f) { (*f)[0] = 'X'; }, Code::kCorruption, "header.magic at byte 0"},
    {"short_header", [](std::string* f) { f->resize(100); }, Code::kCorruption,
     "header at byte 100"},
    {"version", [](std::string* f) { Put16(f, 4, 2); }, Code::kCorruption,
     "header.version at byte 4"},
    {"flag_bit7", [](std::string* f) { Put32(f, 6, kSquizdFlagInt4 | 0x80); },
     Code::kCorruption, "header.flags at byte 6: reserved bits"},
    {"flag_astc", [](std::string* f) { Put32(f, 6, kSquizdFlagInt4 | kSquizdFlagAstc); },
     Code::kUnsupported, "header.flags at byte 6: ASTC"},
    {"reserved", [](std::string* f) { (*f)[100] = 1; }, Code::kCorruption,
     "header.reserved at byte 100"},
    {"reserved2", [](std::string* f) { (*f)[200] = 1; }, Code::kCorruption,
     "header.reserved2 at byte 200"},
    {"sparsity_meta_without_flag", [](std::string* f) { (*f)[130] = 1; }, Code::kCorruption,
     "header.sparsity_meta (SPARSE unset) at byte 130"},
    {"crc_without_flag", [](std::string* f) { Put32(f, 14, 0x190A55AD); }, Code::kCorruption,
     "header.sparsity_crc32 at byte 14"},
    {"eagle_meta_without_flag", [](std::string* f) { (*f)[191] = 1; }, Code::kCorruption,
     "header.eagle_meta (EAGLE unset) at byte 191"},
    {"layer_count_zero", [](std::string* f) { Put16(f, 10, 0); }, Code::kCorruption,
     "header.layer_count at byte 10"},
    {"table_out_of_file", [](std::string* f) { Put16(f, 10, 1000); }, Code::kCorruption,
     "layer table at byte 256"},
    {"entry_order", [](std::string* f) { Put32(f, 288, 0); }, Code::kCorruption,
     "layer 1 layer_idx at byte 288"},
    {"entry_reserved", [](std::string* f) { Put32(f, 284, 1); }, Code::kCorruption,
     "layer 0 reserved at byte 284"},
    {"offset_gap", [](std::string* f) { Put64(f, 292, 337); }, Code::kCorruption,
     "layer 1 weight_offset at byte 292"},
    {"length_overflow", [](std::string* f) { Put64(f, 300, ~uint64_t{0}); }, Code::kCorruption,
     "layer 1 weight_length at byte 300: offset + length overflows"},
    {"length_past_end", [](std::string* f) { Put64(f, 300, 10000); }, Code::kCorruption,
     "layer 1 weight_length at byte 300: 10000 bytes from 336 run past the end"},
    {"block_magic", [](std::string* f) { (*f)[323] = '9'; }, Code::kCorruption,
     "layer 0 block magic at byte 320"},
    {"int4_without_flag", [](std::string* f) { Put32(f, 6, 0); }, Code::kCorruption,
     "layer 0 block magic at byte 320: INT4 block in a file without the INT4 flag"},
    {"int4_size_mismatch", [](std::string* f) { Put32(f, 328, 5); }, Code::kCorruption,
     "layer 0 weight_length at byte 268: 16 bytes, but the INT4 block's header declares 18"},
    {"int4_zero_rows", [](std::string* f) { Put32(f, 324, 0); }, Code::kCorruption,
     "layer 0 n_rows at byte 324"},
    {"npcl_dtype", [](std::string* f) { Put32(f, 340, 3); }, Code::kCorruption,
     "layer 1 NPCL dtype_code at byte 340"},
    {"npcl_ndim", [](std::string* f) { Put32(f, 344, 9); }, Code::kCorruption,
     "layer 1 NPCL ndim at byte 344"},
    {"npcl_shape", [](std::string* f) { Put32(f, 348, 3); }, Code::kCorruption,
     "layer 1 weight_length at byte 300: 24 bytes, but the NPCL block's header declares 28"},
    {"npcl_scale_offset", [](std::string* f) { Put64(f, 308, 360); }, Code::kCorruption,
     "layer 1 scale_offset at byte 308"},
    {"sczt_magic", [](std::string* f) { (*f)[360] = 'X'; }, Code::kCorruption,
     "SCZT magic at byte 360"},
    {"sczt_count_bounds", [](std::string* f) { Put32(f, 364, 0xFFFFFFFF); }, Code::kCorruption,
     "SCZT n_tensors at byte 364: 4294967295 entries do not fit"},
    {"sczt_count_mismatch", [](std::string* f) { Put32(f, 364, 2); }, Code::kCorruption,
     "SCZT n_tensors at byte 364: 2 entries, the quantized layers need 3"},
    {"sczt_scale_offset", [](std::string* f) { Put64(f, 276, 384); }, Code::kCorruption,
     "layer 0 scale_offset at byte 276"},
    {"sczt_tensor_entry_bit", [](std::string* f) { (*f)[375] = char(0x80 | (*f)[375]); },
     Code::kCorruption, "SCZT entry 0 tensor_id at byte 368"},
    {"sczt_sub_id", [](std::string* f) { (*f)[384] ^= 1; }, Code::kCorruption,
     "SCZT entry 1 tensor_id at byte 384"},
    {"sczt_scale_nan", [](std::string* f) { Put32(f, 392, 0x7FC00000); }, Code::kCorruption,
     "SCZT entry 1 scale/zero at byte 392: not finite"},
    {"sczt_truncated", [](std::string* f) { f->resize(362); }, Code::kCorruption,
     "SCZT at byte 360: file ends before the scale table"},
    {"tensor_id_vs_name", [](std::string* f) { (*f)[428] = 'c'; }, Code::kCorruption,
     "SCZT entry 0 tensor_id at byte 368"},
    {"names_count", [](std::string* f) { Put32(f, 420, 3); }, Code::kCorruption,
     "BLZN count at byte 420"},
    {"names_duplicate", [](std::string* f) { (*f)[433] = 'a'; }, Code::kCorruption,
     "BLZN name at byte 433: duplicate"},
    {"names_bad_utf8", [](std::string* f) { (*f)[433] = char(0xC3); }, Code::kCorruption,
     "BLZN name at byte 433: not valid UTF-8"},
    {"names_truncated", [](std::string* f) { f->resize(433); }, Code::kCorruption,
     "BLZN name length at byte 429"},
    {"trailing_bytes", [](std::string* f) { f->append("junk"); }, Code::kCorruption,
     "end of file at byte 434: 4 trailing bytes after the BLZN name table"},
    {"trailing_bytes_no_names", [](std::string* f) { f->append("junkjunk"); },
     Code::kCorruption, "end of file at byte 416: 8 trailing bytes", false},
    {"truncated_block", [](std::string* f) { f->resize(350); }, Code::kCorruption,
     "layer 1 weight_length at byte 300"},
    {"sparse_crc",
     [](std::string* f) {
       MakeSparse(f);
       (*f)[14] ^= 1;
     },
     Code::kCorruption, "header.sparsity_crc32 at byte 14: stored"},
    {"sparse_meta_version",
     [](std::string* f) {
       MakeSparse(f);
       Put32(f, 128, 2);
     },
     Code::kCorruption, "sparsity_meta.sparsity_version at byte 128"},
    {"sparse_meta_reserved",
     [](std::string* f) {
       MakeSparse(f);
       (*f)[150] = 1;
     },
     Code::kCorruption, "sparsity_meta.reserved at byte 150"},
    {"eagle_fnv",
     [](std::string* f) {
       MakeEagle(f);
       (*f)[18] ^= 1;
     },
     Code::kCorruption, "header.eagle_hash at byte 18: stored", false},
    {"eagle_offset",
     [](std::string* f) {
       MakeEagle(f);
       Put64(f, 160, 400);
       Put64(f, 18, TestFnv(AsBytes(std::string_view(*f).substr(160, 32))));
     },
     Code::kCorruption, "eagle_meta.draft_offset at byte 160", false},
    {"eagle_magic",
     [](std::string* f) {
       MakeEagle(f);
       (*f)[416] = 'X';
     },
     Code::kCorruption, "EGDH magic at byte 416", false},
    {"eagle_length",
     [](std::string* f) {
       MakeEagle(f);
       Put64(f, 168, 9);
       Put64(f, 18, TestFnv(AsBytes(std::string_view(*f).substr(160, 32))));
     },
     Code::kCorruption, "eagle_meta.draft_length at byte 168", false},
};

INSTANTIATE_TEST_SUITE_P(All, SquizdRejectTest, ::testing::ValuesIn(kBadCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(SquizdReaderTest, VerifyRejectsNonZeroRowPadding) {
  std::string f = BaseFile();
  f[333] = char(f[333] | 0x10);  // row 0 (3 columns): the high nibble of its second byte
  auto p = Parse(f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();  // structure is fine
  Status s = VerifySquizd(*p);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("layer 0 row 0 padding at byte 333"), std::string::npos)
      << s.message();
}

// An INT2 file built by hand (blz does not write INT2): 1 x 5 values, sub_block_len 2.
TEST(SquizdReaderTest, ReadsHandBuiltInt2) {
  std::string f(256, '\0');
  std::memcpy(f.data(), "SQZD", 4);
  Put16(&f, 4, 1);
  Put32(&f, 6, kSquizdFlagInt2);
  Put16(&f, 10, 1);
  // Table entry: block at 288, 16 + 2 bytes; SCZT entries at 306 + 8.
  AppendLE32(&f, 0);
  AppendLE64(&f, 288);
  AppendLE64(&f, 18);
  AppendLE64(&f, 314);
  AppendLE32(&f, 0);
  f += "INT2";
  AppendLE32(&f, 1);
  AppendLE32(&f, 5);
  AppendLE32(&f, 2);
  // q = {-2, -1, 0, 1, 1}: crumbs 2, 3, 0, 1 | 1 (+ zero padding)
  f.push_back(char(2 | 3 << 2 | 0 << 4 | 1 << 6));
  f.push_back(char(1));
  f += "SCZT";
  AppendLE32(&f, 4);  // tensor entry + 3 sub-blocks
  auto entry = [&](uint64_t id, float scale, float zero) {
    AppendLE64(&f, id);
    uint32_t b;
    std::memcpy(&b, &scale, 4);
    AppendLE32(&f, b);
    std::memcpy(&b, &zero, 4);
    AppendLE32(&f, b);
  };
  entry(5, 2.0f, 0);
  entry(5 | kSquizdSubBlockBit, 1.0f, 0);
  entry(5 | kSquizdSubBlockBit, 2.0f, 0.5f);
  entry(5 | kSquizdSubBlockBit, 0.5f, 0);
  auto p = Parse(f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE(VerifySquizd(*p).ok());
  auto v = DequantizeSquizdLayer(*p, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<float>{-2.0f, -1.0f, -1.0f, 1.0f, 0.5f}));
  f[305] = char(1 | 1 << 2);  // a padding crumb set
  auto bad = Parse(f);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(VerifySquizd(*bad).code(), Code::kCorruption);
  Put32(&f, 300, 6);  // sub_block_len > n_cols
  auto bad2 = Parse(f);
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.status().message().find("layer 0 sub_block_len at byte 300"),
            std::string::npos)
      << bad2.status().message();
}

}  // namespace
}  // namespace blz::exporter
