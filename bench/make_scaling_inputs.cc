// make_scaling_inputs: hostile-but-valid inputs for bench/scaling.sh (issue 9).
//
//   make_scaling_inputs safetensors N OUT.safetensors   N tiny tensors (one f32 each, 4 bytes)
//   make_scaling_inputs gguf MIB OUT.gguf               a GGUF with one tensor and a u8
//                                                       metadata array of MIB MiB
//
// Writes with blz's own writers (formats/safetensors.h, formats/gguf.h), so the files are
// exactly what the readers accept. Exit codes: 0 ok, 1 write error, 2 usage.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace {

using blz::ByteSpan;
using blz::Status;
namespace f = blz::formats;

Status Safetensors(uint64_t n, const std::string& out) {
  static const float kOne = 1.0f;
  std::vector<f::SafetensorsTensorView> views;
  views.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    views.push_back({"model.layers." + std::to_string(i / 16) + ".t" + std::to_string(i % 16),
                     blz::formats::DType::kF32,
                     {1},
                     ByteSpan(reinterpret_cast<const uint8_t*>(&kOne), 4)});
  }
  return f::WriteSafetensors(out, views);
}

Status Gguf(uint64_t mib, const std::string& out) {
  f::GgufHeader h;
  h.metadata.push_back({"general.architecture", f::GgufValue::String("llama")});
  f::GgufValue arr;
  arr.type = f::GgufType::kArray;
  arr.element_type = f::GgufType::kUint8;
  arr.count = mib << 20;
  arr.raw.resize(arr.count);
  for (uint64_t i = 0; i < arr.count; ++i) arr.raw[i] = static_cast<char>(i * 131 + (i >> 8));
  h.metadata.push_back({"hostile.u8", std::move(arr)});
  h.tensors.push_back({"t", {4}, blz::formats::GgmlType::kF32, 0, 0});
  BLZ_RETURN_IF_ERROR(f::AssignGgufOffsets(&h));
  const std::string data(16, '\0');
  const ByteSpan spans[] = {blz::AsBytes(data)};
  return f::WriteGgufFile(out, h, spans, {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: make_scaling_inputs safetensors N OUT | gguf MIB OUT\n");
    return 2;
  }
  const std::string kind = argv[1];
  const uint64_t n = std::strtoull(argv[2], nullptr, 10);
  Status st;
  if (kind == "safetensors") {
    st = Safetensors(n, argv[3]);
  } else if (kind == "gguf") {
    st = Gguf(n, argv[3]);
  } else {
    std::fprintf(stderr, "make_scaling_inputs: unknown kind '%s'\n", kind.c_str());
    return 2;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "make_scaling_inputs: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
