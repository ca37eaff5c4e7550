// fuzz_squizd: the SQUIZD reader (formats/export/squizd.h) on the whole input: ParseSquizd, then
// for an accepted file VerifySquizd, DequantizeSquizdLayer of every layer and the summary /
// verify printers. Properties: every accepted layer has index == its position and its data
// inside the input; a dequantized layer has exactly the declared element count; the JSON
// summaries serialize (valid UTF-8, no exception); the input cut by one byte is rejected (a
// SQUIZD file has no optional tail: the end of the file is checked).
// Seeds: files written by WriteSquizd from a tiny synthetic safetensors model (INT4 and NPCL,
// with and without the BLZN name table), truncated and bit-flipped copies, and an NPCL file
// with the SPARSE and EAGLE flags (metadata, CRC32, FNV-1a-64 and an empty EGDH appendix).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <zlib.h>

#include "formats/dtype.h"
#include "formats/export/squizd.h"
#include "formats/safetensors.h"
#include "formats/tensor_stats.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace ex = blz::exporter;
using blz::formats::DType;

// A small deterministic model: 2-D F32 / F16 / BF16 weights (INT4 candidates, one with an odd
// row length so INT4 rows have a padding nibble), a 1-D norm, a 0-rank scalar, an I32 tensor
// (NPCL as F32) and a 3-D tensor (NPCL).
std::string MakeModel(const std::string& dir) {
  std::filesystem::create_directories(dir);
  uint32_t x = 12345;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
  };
  std::vector<std::string> blobs;
  std::vector<blz::formats::SafetensorsTensorView> views;
  auto add_f32 = [&](std::string name, std::vector<uint64_t> shape) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    std::string b(n * 4, '\0');
    for (uint64_t i = 0; i < n; ++i) {
      float v = static_cast<float>(int(next() % 2001) - 1000) / 250.0f;
      std::memcpy(b.data() + i * 4, &v, 4);
    }
    blobs.push_back(std::move(b));
    views.push_back({std::move(name), DType::kF32, std::move(shape), {}});
  };
  // 16-bit floats from small integers' bit patterns: F16 0x3C00 = 1.0, BF16 0x3F80 = 1.0.
  auto add_16 = [&](std::string name, DType dtype, std::vector<uint64_t> shape) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    std::string b(n * 2, '\0');
    const uint16_t base = dtype == DType::kF16 ? 0x3C00 : 0x3F80;
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t v = static_cast<uint16_t>(base + (next() % 64)) | ((next() & 1) ? 0x8000 : 0);
      std::memcpy(b.data() + i * 2, &v, 2);
    }
    blobs.push_back(std::move(b));
    views.push_back({std::move(name), dtype, std::move(shape), {}});
  };
  add_f32("embed.weight", {8, 16});
  add_f32("layer.0.attn.weight", {4, 7});  // odd row length
  add_16("layer.0.mlp.weight", DType::kF16, {6, 8});
  add_16("layer.1.mlp.weight", DType::kBF16, {3, 10});
  add_f32("norm.weight", {16});
  add_f32("scale", {});
  add_f32("conv.weight", {2, 3, 2});
  std::string ints(5 * 4, '\0');
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = char(i % 4 == 0 ? i : 0);
  blobs.push_back(ints);
  views.push_back({"positions", DType::kI32, {5}, {}});
  for (size_t i = 0; i < views.size(); ++i) views[i].data = blz::AsBytes(blobs[i]);
  std::string path = dir + "/model.safetensors";
  blz::fuzz::MustOk(blz::formats::WriteSafetensors(path, views, {{"format", "pt"}}),
                    "WriteSafetensors");
  return path;
}

void Store32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = char(v >> (8 * i));
}
void Store64(std::string* s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*s)[at + i] = char(v >> (8 * i));
}

// `npcl` (a file without SCZT and BLZN) with the SPARSE and EAGLE flags set: sparsity metadata
// (version 1) with its CRC32 at byte 14, eagle metadata pointing at an empty EGDH appendix
// appended at the end, with its FNV-1a-64 at byte 18 (docs/squizd.md). Offsets of the header
// fields as in squizd_reader.cc.
std::string WithSparseAndEagle(std::string npcl) {
  const uint32_t flags = uint32_t(uint8_t(npcl[6])) | uint32_t(uint8_t(npcl[7])) << 8;
  Store32(&npcl, 6, flags | ex::kSquizdFlagSparse | ex::kSquizdFlagEagle);
  Store32(&npcl, 128, 1);       // sparsity_version
  Store32(&npcl, 132, 16);      // block_size
  Store32(&npcl, 136, 0);       // n_sparse_layers
  Store32(&npcl, 140, 0);       // mean_sparsity 0.0f
  Store32(&npcl, 14, static_cast<uint32_t>(
                         crc32(0L, reinterpret_cast<const Bytef*>(npcl.data() + 128), 32)));
  Store64(&npcl, 160, npcl.size());  // draft_offset: right after the last block
  Store64(&npcl, 168, 8);            // draft_length
  Store32(&npcl, 176, 0);            // n_draft_layers
  Store32(&npcl, 180, 0);            // draft_vocab
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 160; i < 192; ++i) {
    h ^= uint8_t(npcl[i]);
    h *= 0x100000001B3ull;
  }
  Store64(&npcl, 18, h);
  npcl += std::string("EGDH\0\0\0\0", 8);
  return npcl;
}

void WriteSeeds() {
  const std::string model = MakeModel(blz::fuzz::TempPath("model"));
  auto tensors = blz::formats::ModelTensors::Open(model);
  blz::fuzz::MustOk(tensors.status(), "ModelTensors::Open");
  struct Variant {
    const char* name;
    bool int4, always, names;
    uint16_t arch;
  };
  const Variant variants[] = {
      {"int4_always_named", true, true, true, 1},
      {"int4_always_unnamed", true, true, false, 0},
      {"int4_auto_named", true, false, true, 0},
      {"npcl_named", false, false, true, 2},
      {"npcl_unnamed", false, false, false, 0},
  };
  for (const Variant& v : variants) {
    ex::SquizdWriteOptions o;
    o.int4 = v.int4;
    o.int4_always = v.always;
    o.write_names = v.names;
    o.arch_id = v.arch;
    o.overwrite = true;
    const std::string out = blz::fuzz::TempPath(std::string(v.name) + ".squizd");
    blz::fuzz::MustOk(ex::WriteSquizd(*tensors, o, out, nullptr), "WriteSquizd");
    const std::string bytes = blz::fuzz::ReadAll(out);
    const std::string base = std::string("crafted_") + v.name;
    blz::fuzz::WriteSeed(base + ".squizd", bytes);
    blz::fuzz::WriteSeed(base + "_truncated.squizd", bytes.substr(0, bytes.size() * 2 / 3));
    // Header flags / reserved bytes / first table entry flipped: the rejection paths.
    for (size_t at : {size_t{6}, size_t{12}, size_t{200}, size_t{ex::kSquizdHeaderBytes + 8}}) {
      if (at >= bytes.size()) continue;
      std::string flipped = bytes;
      flipped[at] = char(flipped[at] ^ 0x04);
      blz::fuzz::WriteSeed(base + "_flip" + std::to_string(at) + ".squizd", flipped);
    }
    if (!v.int4 && !v.names) {
      blz::fuzz::WriteSeed("crafted_sparse_eagle.squizd", WithSparseAndEagle(bytes));
    }
  }
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blz::ByteSpan bytes(data, size);
  auto file = ex::ParseSquizd(bytes, "fuzz.squizd");
  if (!file.ok()) return 0;
  const ex::SquizdFile& f = *file;
  for (size_t i = 0; i < f.layers.size(); ++i) {
    const ex::SquizdLayer& l = f.layers[i];
    blz::fuzz::Check(l.index == i, "layer index == its position");
    blz::fuzz::Check(l.data_offset <= size && l.data_length <= size - l.data_offset,
                     "layer data inside the input");
  }
  (void)ex::VerifySquizd(f);
  for (size_t i = 0; i < f.layers.size(); ++i) {
    auto values = ex::DequantizeSquizdLayer(f, i);
    if (values.ok()) {
      blz::fuzz::Check(values->size() == f.layers[i].elements,
                       "DequantizeSquizdLayer gives the declared element count");
    }
  }
  blz::fuzz::Check(!ex::DequantizeSquizdLayer(f, f.layers.size()).ok(),
                   "DequantizeSquizdLayer refuses an index past the table");
  try {
    (void)ex::SquizdSummaryJson(f).dump();
    (void)ex::SquizdVerifyJson(f).dump();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    blz::fuzz::Check(false, "the SQUIZD summaries serialize to JSON");
  }
  blz::fuzz::Check(!ex::SquizdSummaryText(f).empty(), "SquizdSummaryText is not empty");
  blz::fuzz::Check(!ex::SquizdVerifyText(f).empty(), "SquizdVerifyText is not empty");
  blz::fuzz::Check(!ex::ParseSquizd(bytes.subspan(0, size - 1), "fuzz.squizd").ok(),
                   "ParseSquizd rejects the file cut by one byte");
  return 0;
}
