// Makes a realistic "next version" of a GGUF file for the patch benchmark: one metadata value
// edited (general.name, or added if absent) and the first N F32/F16 tensors "retrained" (each
// element scaled by 1 + r, r ~ N(0, rel), deterministic seed); every other tensor unchanged.
//
// Usage: make_gguf_pair IN.gguf OUT.gguf [--tensors N] [--rel R]
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/float_convert.h"
#include "formats/gguf.h"

using namespace blz;
using namespace blz::formats;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_gguf_pair IN.gguf OUT.gguf [--tensors N] [--rel R]\n");
    return 2;
  }
  int n_retrain = 3;
  double rel = 1e-2;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tensors") == 0) n_retrain = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rel") == 0) rel = std::atof(argv[i + 1]);
  }
  auto reader = GgufReader::Open(argv[1], GgufMode::kFull);
  if (!reader.ok()) {
    std::fprintf(stderr, "%s\n", reader.status().ToString().c_str());
    return 1;
  }
  GgufHeader header = reader->header();
  bool edited = false;
  for (auto& kv : header.metadata) {
    if (kv.key == "general.name") {
      kv.value = GgufValue::String(*kv.value.AsString() + " (retrained v2)");
      edited = true;
    }
  }
  if (!edited) header.metadata.push_back({"general.name", GgufValue::String("retrained v2")});
  if (Status s = AssignGgufOffsets(&header); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, rel);
  std::vector<std::string> changed(header.tensors.size());
  std::vector<ByteSpan> data;
  int retrained = 0;
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    ByteSpan src = reader->TensorData(i);
    const GgmlType t = header.tensors[i].type;
    if (retrained < n_retrain && (t == GgmlType::kF32 || t == GgmlType::kF16)) {
      changed[i].assign(reinterpret_cast<const char*>(src.data()), src.size());
      if (t == GgmlType::kF32) {
        for (size_t k = 0; k + 4 <= changed[i].size(); k += 4) {
          float v;
          std::memcpy(&v, &changed[i][k], 4);
          v = float(v * (1.0 + noise(rng)));
          std::memcpy(&changed[i][k], &v, 4);
        }
      } else {
        for (size_t k = 0; k + 2 <= changed[i].size(); k += 2) {
          uint16_t h;
          std::memcpy(&h, &changed[i][k], 2);
          h = F32ToF16(float(F16ToF32(h) * (1.0 + noise(rng))));
          std::memcpy(&changed[i][k], &h, 2);
        }
      }
      std::fprintf(stderr, "retrained %s (%s, %zu bytes)\n", header.tensors[i].name.c_str(),
                   t == GgmlType::kF32 ? "F32" : "F16", src.size());
      data.push_back(AsBytes(changed[i]));
      ++retrained;
    } else {
      data.push_back(src);
    }
  }
  GgufWriteOptions opts;
  opts.pad_end = reader->file().padded_end;
  if (Status s = WriteGgufFile(argv[2], header, data, opts); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
