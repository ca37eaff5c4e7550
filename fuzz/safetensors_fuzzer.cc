// fuzz_safetensors: the strict safetensors reader (ParseSafetensorsHeader: the input is the
// whole file) and the header-only one (ParseSafetensorsHeaderOnly: the data section may be
// missing, truncated or followed by more bytes), then the structural hash of what they accept.
// Properties: both agree on the tensors when the strict one accepts; the header-only file size
// is 8 + N + last end.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/identify.h"
#include "formats/safetensors.h"
#include "formats/structural_hash.h"
#include "fuzz/fuzz_util.h"

namespace {

using blz::formats::DType;

std::string Planned(const std::vector<blz::formats::SafetensorsTensorView>& tensors,
                    const std::map<std::string, std::string>& metadata) {
  auto layout = blz::formats::PlanSafetensors(tensors, metadata);
  blz::fuzz::MustOk(layout.status(), "PlanSafetensors");
  std::string file = layout->header_bytes;
  file.resize(file.size() + layout->data_bytes, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t j = 0; j < tensors[i].data.size(); ++j) {
      file[layout->header_bytes.size() + layout->begin[i] + j] = char(tensors[i].data[j]);
    }
  }
  return file;
}

void WriteSeeds() {
  std::string a(64, '\x11'), b(8, '\x22'), c(2, '\x33');
  using V = blz::formats::SafetensorsTensorView;
  std::string full = Planned({V{"w", DType::kF32, {4, 4}, blz::AsBytes(a)},
                              V{"b", DType::kBF16, {4}, blz::AsBytes(b)},
                              V{"s", DType::kF16, {}, blz::AsBytes(c)},
                              V{"e", DType::kI64, {0, 3}, {}}},
                             {{"format", "pt"}});
  blz::fuzz::WriteSeed("crafted_full.safetensors", full);
  blz::fuzz::WriteSeed("crafted_truncated.safetensors", full.substr(0, full.size() - 10));
  blz::fuzz::WriteSeed("crafted_trailing.safetensors", full + "extra");
  blz::fuzz::WriteSeed("crafted_empty.safetensors", Planned({}, {}));
  std::string u8(3, '\x01');
  blz::fuzz::WriteSeed("crafted_u8.safetensors",
                       Planned({V{"x", DType::kU8, {3}, blz::AsBytes(u8)}}, {}));
}

void Hash(const blz::formats::SafetensorsHeader& h) {
  blz::formats::StructuralInput in = blz::formats::StructuralInputFromSafetensors(h);
  std::string hash = blz::formats::StructuralHash(in);
  blz::fuzz::Check(hash.size() == 64, "structural hash is 64 hex digits");
  (void)blz::formats::Identify(in);
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blz::ByteSpan bytes(data, size);
  auto strict = blz::formats::ParseSafetensorsHeader(bytes, size, "fuzz.safetensors");
  auto header_only = blz::formats::ParseSafetensorsHeaderOnly(bytes, "fuzz.safetensors");
  if (strict.ok()) {
    blz::fuzz::Check(strict->file_size == size, "strict: file_size == input size");
    blz::fuzz::Check(header_only.ok(), "header-only accepts what strict accepts");
    blz::fuzz::Check(header_only->tensors.size() == strict->tensors.size(),
                     "header-only and strict agree on the tensors");
    Hash(*strict);
  }
  if (header_only.ok()) {
    const auto& h = *header_only;
    uint64_t last = h.tensors.empty() ? 0 : h.tensors.back().end;
    blz::fuzz::Check(h.file_size == h.data_start + last, "header-only file_size");
    for (const auto& t : h.tensors) {
      blz::fuzz::Check(t.end >= t.begin, "tensor end >= begin");
      (void)t.NumElements();
    }
    Hash(h);
  }
  return 0;
}
