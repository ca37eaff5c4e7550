// TorchZipWriter (formats/export/torch_zip.h) and the state-dict pickle
// (formats/export/torch_pickle.h): checkpoints are parsed back in C++ (central directory,
// local headers, 64-byte alignment, CRCs, entry bytes), read by Python's zipfile (testzip),
// unpickled without torch by tests/formats/export/torch_load_check.py (weights_only opcodes and
// globals only), and loaded with torch.load(weights_only=True) when python3-torch is installed.
#include "formats/export/torch_zip.h"

#include <zlib.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "formats/export/cast.h"
#include "formats/export/torch_pickle.h"
#include "formats/tensor_stats.h"
#include "tests/test_util.h"

namespace blz::exporter {
namespace {

using formats::DType;

// ---- test data: small integer values, exact in every dtype ----

struct TensorData {
  TorchTensorSpec spec;
  std::string bytes;        // little-endian, C order
  std::optional<double> sum;  // exact sum of the values (nullopt: not checked)
};

std::string TorchDTypeName(DType t) {
  switch (t) {
    case DType::kF64: return "float64";
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI64: return "int64";
    case DType::kI32: return "int32";
    case DType::kI16: return "int16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kBool: return "bool";
    default: return "?";
  }
}

template <typename T>
void PutValue(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the test machines are little-endian (x86-64, arm64)
  out->append(b, sizeof(T));
}

TensorData MakeTensor(std::string name, DType dtype, std::vector<uint64_t> shape, int seed) {
  TensorData t;
  t.spec = {std::move(name), dtype, std::move(shape)};
  t.sum = 0;
  uint64_t n = 1;
  for (uint64_t d : t.spec.shape) n *= d;
  std::vector<float> floats;
  for (uint64_t k = 0; k < n; ++k) {
    int v = int((k * 7 + uint64_t(seed)) % 13) - 6;
    if (dtype == DType::kU8) v = int((k * 5 + uint64_t(seed)) % 251);
    if (dtype == DType::kBool) v = int((k + uint64_t(seed)) % 3 == 0);
    *t.sum += v;
    switch (dtype) {
      case DType::kF64: PutValue<double>(&t.bytes, v); break;
      case DType::kF32: PutValue<float>(&t.bytes, float(v)); break;
      case DType::kF16:
      case DType::kBF16: floats.push_back(float(v)); break;
      case DType::kI64: PutValue<int64_t>(&t.bytes, v); break;
      case DType::kI32: PutValue<int32_t>(&t.bytes, v); break;
      case DType::kI16: PutValue<int16_t>(&t.bytes, int16_t(v)); break;
      case DType::kI8: PutValue<int8_t>(&t.bytes, int8_t(v)); break;
      case DType::kU8:
      case DType::kBool: PutValue<uint8_t>(&t.bytes, uint8_t(v)); break;
      default: break;
    }
  }
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    t.bytes.assign(floats.size() * 2, '\0');
    Status s = CastFloats(floats, dtype == DType::kF16 ? CastType::kF16 : CastType::kBF16,
                          MutableByteSpan(reinterpret_cast<uint8_t*>(t.bytes.data()),
                                          t.bytes.size()));
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return t;
}

std::vector<TensorData> SmallStateDict() {
  std::vector<TensorData> v;
  v.push_back(MakeTensor("transformer.wte.weight", DType::kF32, {2, 3}, 1));
  v.push_back(MakeTensor("f64", DType::kF64, {4}, 2));
  v.push_back(MakeTensor("f16", DType::kF16, {3, 5}, 3));
  v.push_back(MakeTensor("bf16", DType::kBF16, {7}, 4));
  v.push_back(MakeTensor("i64", DType::kI64, {2, 2}, 5));
  v.push_back(MakeTensor("i32", DType::kI32, {3}, 6));
  v.push_back(MakeTensor("i16", DType::kI16, {2, 1, 2}, 7));
  v.push_back(MakeTensor("i8", DType::kI8, {5}, 8));
  v.push_back(MakeTensor("u8", DType::kU8, {6}, 9));
  v.push_back(MakeTensor("mask", DType::kBool, {9}, 10));
  v.push_back(MakeTensor("scalar", DType::kF32, {}, 11));
  v.push_back(MakeTensor("empty", DType::kF32, {0, 4}, 12));
  v.push_back(MakeTensor("h.0.attn.bias \xc3\xa9", DType::kBF16, {1, 1, 3, 3}, 13));
  v.push_back(MakeTensor("big", DType::kF32, {257, 1031}, 14));  // ~1 MiB, many chunks
  return v;
}

std::vector<TorchTensorSpec> Specs(const std::vector<TensorData>& tensors) {
  std::vector<TorchTensorSpec> specs;
  for (const TensorData& t : tensors) specs.push_back(t.spec);
  return specs;
}

// Writes and commits `tensors` to `path`, appending each in chunks of `chunk` bytes.
Status WriteCheckpoint(const std::string& path, const std::vector<TensorData>& tensors,
                       TorchZipOptions options = {}, size_t chunk = 4093) {
  BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  BLZ_ASSIGN_OR_RETURN(TorchZipWriter w, TorchZipWriter::Start(&file, Specs(tensors),
                                                               "pytorch_model", options));
  for (size_t i = 0; i < tensors.size(); ++i) {
    BLZ_RETURN_IF_ERROR(w.BeginTensor(i));
    ByteSpan rest = AsBytes(tensors[i].bytes);
    while (!rest.empty()) {
      const size_t n = std::min(rest.size(), chunk);
      BLZ_RETURN_IF_ERROR(w.Append(rest.first(n)));
      rest = rest.subspan(n);
    }
    BLZ_RETURN_IF_ERROR(w.EndTensor());
  }
  BLZ_RETURN_IF_ERROR(w.Finish());
  return file.Commit();
}

// ---- an independent zip reader (APPNOTE 4.3), strict about what the writer promises ----

struct ZipEntry {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0;
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;
  bool zip64_extra = false;
};

uint16_t Le16(const std::string& s, uint64_t off) {
  return uint16_t(uint8_t(s[off]) | uint8_t(s[off + 1]) << 8);
}
uint32_t Le32(const std::string& s, uint64_t off) {
  return LoadLE32(reinterpret_cast<const uint8_t*>(s.data() + off));
}
uint64_t Le64(const std::string& s, uint64_t off) {
  return LoadLE64(reinterpret_cast<const uint8_t*>(s.data() + off));
}

// Parses the whole archive; adds a gtest failure for each violation. `zip64_end` is set to
// whether zip64 end records are present.
std::vector<ZipEntry> ParseZip(const std::string& z, bool* zip64_end) {
  std::vector<ZipEntry> out;
  EXPECT_GE(z.size(), 22u);
  if (z.size() < 22) return out;
  const uint64_t eocd = z.size() - 22;  // no archive comment
  EXPECT_EQ(Le32(z, eocd), 0x06054b50u);
  uint64_t count = Le16(z, eocd + 10);
  uint64_t cd_size = Le32(z, eocd + 12);
  uint64_t cd_offset = Le32(z, eocd + 16);
  EXPECT_EQ(Le16(z, eocd + 8), count);
  *zip64_end = eocd >= 20 && Le32(z, eocd - 20) == 0x07064b50u;
  if (*zip64_end) {
    const uint64_t rec = Le64(z, eocd - 20 + 8);
    if (rec + 56 > z.size()) {
      ADD_FAILURE() << "zip64 end record offset " << rec;
      return out;
    }
    EXPECT_EQ(rec, eocd - 20 - 56);
    EXPECT_EQ(Le32(z, rec), 0x06064b50u);
    EXPECT_EQ(Le64(z, rec + 4), 44u);
    EXPECT_EQ(Le64(z, rec + 24), Le64(z, rec + 32));
    count = Le64(z, rec + 32);
    cd_size = Le64(z, rec + 40);
    cd_offset = Le64(z, rec + 48);
    EXPECT_EQ(cd_offset + cd_size, rec);
  } else {
    EXPECT_EQ(cd_offset + cd_size, eocd);
  }
  if (cd_offset > z.size()) {
    ADD_FAILURE() << "central directory offset " << cd_offset;
    return out;
  }
  uint64_t p = cd_offset;
  uint64_t expected_header = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (p + 46 > z.size() || Le32(z, p) != 0x02014b50u) {
      ADD_FAILURE() << "central header " << i << " at " << p;
      return out;
    }
    ZipEntry e;
    EXPECT_EQ(Le16(z, p + 10), 0) << "method";
    EXPECT_EQ(Le16(z, p + 8), 0x0800) << "flags: UTF-8 names, no data descriptor";
    e.crc = Le32(z, p + 16);
    uint64_t comp = Le32(z, p + 20);
    uint64_t size = Le32(z, p + 24);
    const uint16_t name_len = Le16(z, p + 28);
    const uint16_t extra_len = Le16(z, p + 30);
    if (p + 46 + name_len + extra_len > z.size()) {
      ADD_FAILURE() << "central header " << i << " past the end";
      return out;
    }
    EXPECT_EQ(Le16(z, p + 32), 0) << "comment";
    uint64_t offset = Le32(z, p + 42);
    e.name = z.substr(p + 46, name_len);
    uint64_t x = p + 46 + name_len;
    const uint64_t x_end = x + extra_len;
    while (x < x_end) {
      const uint16_t id = Le16(z, x);
      const uint16_t len = Le16(z, x + 2);
      uint64_t f = x + 4;
      if (id == 1) {
        e.zip64_extra = true;
        if (size == 0xffffffff) { size = Le64(z, f); f += 8; }
        if (comp == 0xffffffff) { comp = Le64(z, f); f += 8; }
        if (offset == 0xffffffff) { offset = Le64(z, f); f += 8; }
        EXPECT_EQ(f, x + 4 + len) << e.name << ": zip64 extra length";
      }
      x += 4 + len;
    }
    EXPECT_EQ(x, x_end);
    EXPECT_EQ(comp, size) << e.name;
    e.size = size;
    e.header_offset = offset;
    EXPECT_EQ(offset, expected_header) << e.name << ": entries are contiguous";
    if (x_end > z.size() || offset + 30 > z.size() ||
        offset + 30 + Le16(z, offset + 26) + Le16(z, offset + 28) > z.size()) {
      ADD_FAILURE() << e.name << ": headers past the end";
      return out;
    }
    // Local header.
    EXPECT_EQ(Le32(z, offset), 0x04034b50u) << e.name;
    EXPECT_EQ(Le16(z, offset + 6), 0x0800) << e.name << ": flags: UTF-8 names only";
    EXPECT_EQ(Le16(z, offset + 8), 0) << e.name << ": stored";
    EXPECT_EQ(Le32(z, offset + 14), e.crc) << e.name << ": local CRC patched";
    const uint16_t lname = Le16(z, offset + 26);
    const uint16_t lextra = Le16(z, offset + 28);
    EXPECT_EQ(z.substr(offset + 30, lname), e.name);
    uint64_t lsize = Le32(z, offset + 22);
    uint64_t lx = offset + 30 + lname;
    bool padded = false;
    while (lx < offset + 30 + lname + lextra) {
      const uint16_t id = Le16(z, lx);
      const uint16_t len = Le16(z, lx + 2);
      if (id == 1) {
        EXPECT_EQ(len, 16);
        EXPECT_EQ(lsize, 0xffffffffu);
        lsize = Le64(z, lx + 4);
        EXPECT_EQ(Le64(z, lx + 12), lsize);
      } else if (id == 0x4246) {
        padded = true;
        EXPECT_EQ(z.substr(lx + 4, len), std::string(len, 'Z'));
      }
      lx += 4 + len;
    }
    EXPECT_TRUE(padded) << e.name << ": torch's FB padding block";
    EXPECT_EQ(lsize, e.size) << e.name;
    e.data_offset = offset + 30 + lname + lextra;
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name << ": data aligned to 64";
    if (e.data_offset + e.size > z.size()) {
      ADD_FAILURE() << e.name << ": data past the end";
      return out;
    }
    const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(z.data() + e.data_offset),
                            uInt(e.size));
    EXPECT_EQ(uint32_t(crc), e.crc) << e.name;
    expected_header = e.data_offset + e.size;
    p = x_end;
    out.push_back(e);
  }
  EXPECT_EQ(expected_header, cd_offset);
  EXPECT_EQ(p, cd_offset + cd_size);
  return out;
}

// ---- Python checks ----

struct ProcessOutput {
  int exit_code = -1;
  std::string output;
};

ProcessOutput RunShell(const std::string& cmd) {
  ProcessOutput r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool HaveTorch() {
  static const bool have = RunShell("/usr/bin/python3 -c 'import torch'").exit_code == 0;
  return have;
}

std::string WriteExpectJson(const testing::TempDir& dir, const std::vector<TensorData>& tensors) {
  nlohmann::json j;
  j["archive"] = "pytorch_model";
  j["tensors"] = nlohmann::json::array();
  for (const TensorData& t : tensors) {
    j["tensors"].push_back({{"name", t.spec.name},
                            {"dtype", TorchDTypeName(t.spec.dtype)},
                            {"shape", t.spec.shape},
                            {"sha256", Sha256Hex(t.bytes)},
                            {"sum", t.sum ? nlohmann::json(*t.sum) : nlohmann::json()}});
  }
  const std::string path = dir / "expect.json";
  testing::WriteFileBytes(path, j.dump());
  return path;
}

ProcessOutput RunCheck(const std::string& file, const std::string& expect, const char* mode) {
  return RunShell("/usr/bin/python3 " + std::string(BLZ_SOURCE_DIR) +
             "/tests/formats/export/torch_load_check.py '" + file + "' '" + expect + "' " + mode);
}

// Everything the tests check about a written checkpoint.
void CheckCheckpoint(const testing::TempDir& dir, const std::string& path,
                     const std::vector<TensorData>& tensors, bool want_zip64_end) {
  const std::string z = testing::ReadFileBytes(path);
  bool zip64_end = false;
  std::vector<ZipEntry> entries = ParseZip(z, &zip64_end);
  EXPECT_EQ(zip64_end, want_zip64_end);
  ASSERT_EQ(entries.size(), tensors.size() + 4);
  auto data = [&](const ZipEntry& e) { return z.substr(e.data_offset, e.size); };
  EXPECT_EQ(entries[0].name, "pytorch_model/data.pkl");
  const std::string pkl = data(entries[0]);
  ASSERT_GE(pkl.size(), 3u);
  EXPECT_EQ(pkl.substr(0, 2), "\x80\x02");
  EXPECT_EQ(pkl.back(), '.');
  EXPECT_EQ(entries[1].name, "pytorch_model/byteorder");
  EXPECT_EQ(data(entries[1]), "little");
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(entries[2 + i].name, "pytorch_model/data/" + std::to_string(i));
    EXPECT_TRUE(data(entries[2 + i]) == tensors[i].bytes) << tensors[i].spec.name;
  }
  EXPECT_EQ(entries[tensors.size() + 2].name, "pytorch_model/version");
  EXPECT_EQ(data(entries[tensors.size() + 2]), "3\n");
  EXPECT_EQ(entries[tensors.size() + 3].name, "pytorch_model/.data/serialization_id");
  const std::string id = data(entries[tensors.size() + 3]);
  EXPECT_EQ(id.size(), 40u);
  EXPECT_EQ(id.find_first_not_of("0123456789"), std::string::npos);

  const std::string expect = WriteExpectJson(dir, tensors);
  ProcessOutput stub = RunCheck(path, expect, "stub");  // includes zipfile's testzip()
  EXPECT_EQ(stub.exit_code, 0) << stub.output;
  if (!HaveTorch()) {
    GTEST_SKIP() << "python3-torch not installed: torch.load(weights_only=True) not run "
                    "(zipfile and the stdlib unpickler checks passed)";
  }
  ProcessOutput torch = RunCheck(path, expect, "torch");
  EXPECT_EQ(torch.exit_code, 0) << torch.output;
}

// ---- round trips ----

TEST(TorchZipWriterTest, WritesAStateDictTorchLoads) {
  testing::TempDir dir;
  const std::vector<TensorData> tensors = SmallStateDict();
  const std::string path = dir / "pytorch_model.bin";
  Status s = WriteCheckpoint(path, tensors);
  ASSERT_TRUE(s.ok()) << s.ToString();
  CheckCheckpoint(dir, path, tensors, /*want_zip64_end=*/false);
}

TEST(TorchZipWriterTest, SameInputsSameBytes) {
  testing::TempDir dir;
  const std::vector<TensorData> tensors = SmallStateDict();
  ASSERT_TRUE(WriteCheckpoint(dir / "a.bin", tensors, {}, 4093).ok());
  ASSERT_TRUE(WriteCheckpoint(dir / "b.bin", tensors, {}, 1 << 20).ok());
  EXPECT_TRUE(testing::ReadFileBytes(dir / "a.bin") == testing::ReadFileBytes(dir / "b.bin"));
}

TEST(TorchZipWriterTest, Zip64FieldsAreReadBack) {
  // The layout of a > 4 GiB checkpoint (zip64 extras everywhere, zip64 end records), small.
  testing::TempDir dir;
  const std::vector<TensorData> tensors = SmallStateDict();
  const std::string path = dir / "pytorch_model.bin";
  TorchZipOptions options;
  options.force_zip64 = true;
  Status s = WriteCheckpoint(path, tensors, options);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string z = testing::ReadFileBytes(path);
  bool zip64_end = false;
  for (const ZipEntry& e : ParseZip(z, &zip64_end)) EXPECT_TRUE(e.zip64_extra) << e.name;
  CheckCheckpoint(dir, path, tensors, /*want_zip64_end=*/true);
}

TEST(TorchZipWriterTest, MoreThan65535EntriesUseZip64EndRecords) {
  testing::TempDir dir;
  std::vector<TensorData> tensors;
  for (int i = 0; i < 65533; ++i) {  // + 4 records = 65537 entries
    tensors.push_back(MakeTensor("layer." + std::to_string(i), i % 2 ? DType::kU8 : DType::kI8,
                                 {uint64_t(i % 3)}, i));
  }
  const std::string path = dir / "pytorch_model.bin";
  Status s = WriteCheckpoint(path, tensors);
  ASSERT_TRUE(s.ok()) << s.ToString();
  CheckCheckpoint(dir, path, tensors, /*want_zip64_end=*/true);
}

TEST(TorchZipWriterTest, ArchiveStartsAtTheFileEnd) {
  testing::TempDir dir;
  const std::vector<TensorData> tensors = {MakeTensor("w", DType::kF32, {3}, 1)};
  const std::string path = dir / "prefixed.bin";
  auto file = AtomicFile::Create(path);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(file->Append(std::string_view("prefix!")).ok());
  auto w = TorchZipWriter::Start(&*file, Specs(tensors), "archive");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE(w->BeginTensor(0).ok());
  ASSERT_TRUE(w->Append(AsBytes(tensors[0].bytes)).ok());
  ASSERT_TRUE(w->EndTensor().ok());
  ASSERT_TRUE(w->Finish().ok());
  ASSERT_TRUE(file->Commit().ok());
  // Offsets are absolute: the first local header sits right after the prefix and the data
  // of every entry is 64-byte aligned in the file.
  const std::string z = testing::ReadFileBytes(path);
  EXPECT_EQ(Le32(z, 7), 0x04034b50u);
  const uint64_t data = 7 + 30 + Le16(z, 7 + 26) + Le16(z, 7 + 28);
  EXPECT_EQ(data % 64, 0u);
  EXPECT_EQ(z.substr(7 + 30, 16), "archive/data.pkl");
  ProcessOutput zip = RunShell("/usr/bin/python3 -c \"import zipfile,sys; "
                          "z=zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; "
                          "assert z.read('archive/data/0')==bytes.fromhex(sys.argv[2])\" '" +
                          path + "' " + HexEncode(AsBytes(tensors[0].bytes)));
  EXPECT_EQ(zip.exit_code, 0) << zip.output;
}

TEST(TorchZipWriterTest, CorpusModelRoundTrips) {
  // A real GPT-2 checkpoint (../shared/corpus/tiny-gpt2/base/model.safetensors).
  BLZ_REQUIRE_CORPUS(corpus);
  auto model = formats::ModelTensors::Open(corpus + "/tiny-gpt2/base/model.safetensors");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<TensorData> tensors;
  for (const formats::ValueTensor& v : model->tensors()) {
    auto dtype = formats::ParseDType(v.dtype);
    ASSERT_TRUE(dtype.ok()) << v.name;
    tensors.push_back({{v.name, *dtype, v.shape}, std::string(AsChars(v.data)), std::nullopt});
  }
  ASSERT_FALSE(tensors.empty());
  testing::TempDir dir;
  const std::string path = dir / "pytorch_model.bin";
  Status s = WriteCheckpoint(path, tensors, {}, 1 << 16);
  ASSERT_TRUE(s.ok()) << s.ToString();
  CheckCheckpoint(dir, path, tensors, /*want_zip64_end=*/false);
}

// ---- the pickle ----

TEST(TorchPickleTest, LargeCountsUseLong1AndEmptyStridesFollowTorch) {
  // numel 2^33 does not fit BININT: LONG1 with 5 bytes (top bit clear).
  auto pkl = EncodeTorchStateDictPickle({{"w", DType::kU8, {uint64_t{1} << 33}}});
  ASSERT_TRUE(pkl.ok()) << pkl.status().ToString();
  EXPECT_NE(pkl->find(std::string("\x8a\x05\x00\x00\x00\x00\x02", 7)), std::string::npos);
  // 2^31 needs a sixth byte: its top byte 0x80 would read as negative.
  auto pkl2 = EncodeTorchStateDictPickle({{"w", DType::kU8, {uint64_t{1} << 31}}});
  ASSERT_TRUE(pkl2.ok());
  EXPECT_NE(pkl2->find(std::string("\x8a\x05\x00\x00\x00\x80\x00", 7)), std::string::npos);
  EXPECT_EQ(TorchContiguousStrides({2, 0, 3}), (std::vector<uint64_t>{3, 3, 1}));
  EXPECT_EQ(TorchContiguousStrides({}), (std::vector<uint64_t>{}));
  EXPECT_EQ(TorchContiguousStrides({4, 5, 6}), (std::vector<uint64_t>{30, 6, 1}));
}

TEST(TorchPickleTest, StorageClassPerDType) {
  EXPECT_EQ(TorchStorageClass(DType::kBF16), "BFloat16Storage");
  EXPECT_EQ(TorchStorageClass(DType::kI8), "CharStorage");
  EXPECT_EQ(TorchStorageClass(DType::kU8), "ByteStorage");
  EXPECT_EQ(TorchStorageClass(DType::kBool), "BoolStorage");
  EXPECT_FALSE(TorchStorageClass(DType::kU16).has_value());
  EXPECT_FALSE(TorchStorageClass(DType::kF8_E4M3).has_value());
}

// ---- rejections ----

Result<TorchZipWriter> StartOne(AtomicFile* file, std::vector<TorchTensorSpec> specs,
                                std::string archive = "pytorch_model") {
  return TorchZipWriter::Start(file, std::move(specs), std::move(archive));
}

TEST(TorchZipWriterTest, RejectsUnsupportedDTypesNamingTheTensor) {
  testing::TempDir dir;
  for (DType t : {DType::kU16, DType::kU32, DType::kU64, DType::kF8_E4M3, DType::kF8_E5M2}) {
    auto file = AtomicFile::Create(dir / "x.bin");
    ASSERT_TRUE(file.ok());
    auto w = StartOne(&*file, {{"ok", DType::kF32, {2}}, {"model.q", t, {4}}});
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), Code::kUnsupported);
    EXPECT_NE(w.status().message().find("'model.q'"), std::string::npos) << w.status().message();
    EXPECT_NE(w.status().message().find(std::string(formats::DTypeName(t))), std::string::npos)
        << w.status().message();
    EXPECT_EQ(file->size(), 0u) << "nothing written before validation";
  }
}

TEST(TorchZipWriterTest, RejectsBadSpecsAndArchiveNames) {
  testing::TempDir dir;
  auto file = AtomicFile::Create(dir / "x.bin");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(StartOne(&*file, {{"a", DType::kF32, {1}}, {"a", DType::kF32, {1}}}).status().code(),
            Code::kInvalidArgument);  // duplicate name
  EXPECT_EQ(StartOne(&*file, {{"", DType::kF32, {1}}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(StartOne(&*file, {{"bad\xff", DType::kF32, {1}}}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(StartOne(&*file, {{"w", DType::kF32, std::vector<uint64_t>(65, 1)}}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(StartOne(&*file, {{"w", DType::kF32, {uint64_t{1} << 62}}}).status().code(),
            Code::kTooLarge);  // bytes overflow int64
  EXPECT_EQ(StartOne(&*file, {{"w", DType::kF32, {0, uint64_t{1} << 40, uint64_t{1} << 40}}})
                .status()
                .code(),
            Code::kTooLarge);  // strides overflow int64 even with 0 elements
  for (const char* name : {"", ".", "..", "a/b", "a\\b", "a\nb"}) {
    EXPECT_EQ(StartOne(&*file, {}, name).status().code(), Code::kInvalidArgument) << name;
  }
  EXPECT_EQ(file->size(), 0u);
}

struct Started {
  testing::TempDir dir;
  AtomicFile file;
  std::optional<TorchZipWriter> writer;
};

std::unique_ptr<Started> StartTwo() {
  auto s = std::make_unique<Started>();
  auto file = AtomicFile::Create(s->dir / "x.bin");
  EXPECT_TRUE(file.ok());
  s->file = std::move(*file);
  auto w = StartOne(&s->file, {{"a", DType::kF32, {2}}, {"b", DType::kI8, {3}}});
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  s->writer.emplace(std::move(*w));
  return s;
}

const std::string kEightBytes(8, '\1');

TEST(TorchZipWriterTest, RejectsTooManyBytesForATensor) {
  auto s = StartTwo();
  ASSERT_TRUE(s->writer->BeginTensor(0).ok());
  ASSERT_TRUE(s->writer->Append(AsBytes(std::string_view(kEightBytes).substr(0, 5))).ok());
  Status st = s->writer->Append(AsBytes(std::string_view(kEightBytes).substr(0, 4)));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 'a'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("byte offset 5"), std::string::npos) << st.message();
  // The writer is failed from now on.
  EXPECT_EQ(s->writer->EndTensor().code(), Code::kInvalidArgument);
  EXPECT_EQ(s->writer->Finish().code(), Code::kInvalidArgument);
}

TEST(TorchZipWriterTest, RejectsTooFewBytesForATensor) {
  auto s = StartTwo();
  ASSERT_TRUE(s->writer->BeginTensor(0).ok());
  ASSERT_TRUE(s->writer->Append(AsBytes(std::string_view(kEightBytes).substr(0, 7))).ok());
  Status st = s->writer->EndTensor();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("after 7 bytes, expected 8"), std::string::npos) << st.message();
}

TEST(TorchZipWriterTest, RejectsAppendOutsideATensor) {
  auto s = StartTwo();
  Status st = s->writer->Append(AsBytes(std::string_view(kEightBytes)));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("outside a tensor"), std::string::npos) << st.message();
  auto s2 = StartTwo();
  ASSERT_TRUE(s2->writer->BeginTensor(0).ok());
  ASSERT_TRUE(s2->writer->Append(AsBytes(std::string_view(kEightBytes))).ok());
  ASSERT_TRUE(s2->writer->EndTensor().ok());
  EXPECT_EQ(s2->writer->Append(AsBytes(std::string_view(kEightBytes))).code(),
            Code::kInvalidArgument);
}

TEST(TorchZipWriterTest, RejectsTensorsOutOfOrder) {
  auto s = StartTwo();
  Status st = s->writer->BeginTensor(1);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("expected 0"), std::string::npos) << st.message();
}

TEST(TorchZipWriterTest, RejectsFinishBeforeAllTensors) {
  auto s = StartTwo();
  ASSERT_TRUE(s->writer->BeginTensor(0).ok());
  ASSERT_TRUE(s->writer->Append(AsBytes(std::string_view(kEightBytes))).ok());
  ASSERT_TRUE(s->writer->EndTensor().ok());
  const uint64_t size = s->file.size();
  Status st = s->writer->Finish();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 1 of 2 ('b') not written"), std::string::npos)
      << st.message();
  EXPECT_EQ(s->file.size(), size) << "no central directory written";
}

TEST(TorchZipWriterTest, RejectsFinishInsideATensor) {
  auto s = StartTwo();
  ASSERT_TRUE(s->writer->BeginTensor(0).ok());
  EXPECT_EQ(s->writer->Finish().code(), Code::kInvalidArgument);
}

TEST(TorchZipWriterTest, EmptyStateDict) {
  testing::TempDir dir;
  const std::string path = dir / "pytorch_model.bin";
  ASSERT_TRUE(WriteCheckpoint(path, {}).ok());
  CheckCheckpoint(dir, path, {}, /*want_zip64_end=*/false);
}

}  // namespace
}  // namespace blz::exporter
