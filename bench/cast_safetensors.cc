// cast_safetensors: writes a copy of a safetensors file with every F32 tensor cast to BF16 or
// F16, for the patch benchmark's half-precision corpus pairs (bench/patch_bench.sh; the corpus
// has no half-precision pairs, see ../shared/corpus/PROVENANCE.md).
//
//   cast_safetensors IN.safetensors OUT.safetensors --to bf16|f16
//
// The cast is formats/float_convert.h's F32 -> BF16 / F16: round to nearest, ties to even,
// subnormals kept, overflow to Inf, NaN stays a (quiet) NaN. Tensors of every other dtype are
// copied unchanged; names, shapes and "__metadata__" are kept. The output is written by
// formats::WriteSafetensors (atomic; refuses an existing OUT), so the tensors are in its
// layout order (by dtype size, then name), which may differ from IN's.
// Output: one line on stdout, "<tensors cast> <tensors copied> <output tensor bytes>".
// Exit codes: 0 done, 1 error (message on stderr), 2 usage.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/dtype.h"
#include "formats/float_convert.h"
#include "formats/safetensors.h"

namespace {

using blz::Result;
using blz::Status;
using blz::formats::DType;

struct CastSummary {
  uint64_t cast = 0, copied = 0, bytes = 0;
};

// The little-endian F32 bytes of `in` (any alignment) cast to `to` (kBF16 or kF16), as
// little-endian 2-byte elements.
Result<std::vector<uint8_t>> CastF32(blz::ByteSpan in, DType to, const std::string& tensor) {
  if (in.size() % 4 != 0) {
    return blz::InvalidArgument("tensor '" + tensor + "': " + std::to_string(in.size()) +
                                " bytes is not a whole number of F32 elements");
  }
  const size_t n = in.size() / 4;
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = blz::LoadLE32(in.data() + 4 * i);
    std::memcpy(&f[i], &bits, 4);
  }
  std::vector<uint16_t> h(n);
  BLZ_RETURN_IF_ERROR(to == DType::kBF16 ? blz::formats::ConvertF32ToBF16(f, h)
                                         : blz::formats::ConvertF32ToF16(f, h));
  std::vector<uint8_t> out(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = uint8_t(h[i]);
    out[2 * i + 1] = uint8_t(h[i] >> 8);
  }
  return out;
}

Result<CastSummary> CastFile(const std::string& in_path, const std::string& out_path, DType to) {
  BLZ_ASSIGN_OR_RETURN(blz::formats::SafetensorsFile in,
                       blz::formats::SafetensorsFile::Open(in_path));
  CastSummary summary;
  std::vector<std::vector<uint8_t>> owned;  // cast bytes the views point at
  owned.reserve(in.tensors().size());
  std::vector<blz::formats::SafetensorsTensorView> views;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const blz::formats::SafetensorsTensor& t = in.tensors()[i];
    blz::formats::SafetensorsTensorView v{t.name, t.dtype, t.shape, in.TensorData(i)};
    if (t.dtype == DType::kF32) {
      Result<std::vector<uint8_t>> cast = CastF32(v.data, to, t.name);
      if (!cast.ok()) return cast.status().WithContext(in_path);
      owned.push_back(std::move(cast).value());
      v.dtype = to;
      v.data = owned.back();
      ++summary.cast;
    } else {
      ++summary.copied;
    }
    summary.bytes += v.data.size();
    views.push_back(std::move(v));
  }
  BLZ_RETURN_IF_ERROR(blz::formats::WriteSafetensors(out_path, views, in.header().metadata));
  return summary;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 || std::strcmp(argv[3], "--to") != 0 ||
      (std::strcmp(argv[4], "bf16") != 0 && std::strcmp(argv[4], "f16") != 0)) {
    std::fprintf(stderr, "usage: cast_safetensors IN.safetensors OUT.safetensors --to bf16|f16\n");
    return 2;
  }
  const DType to = std::strcmp(argv[4], "bf16") == 0 ? DType::kBF16 : DType::kF16;
  Result<CastSummary> r = CastFile(argv[1], argv[2], to);
  if (!r.ok()) {
    std::fprintf(stderr, "cast_safetensors: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf("%llu %llu %llu\n", (unsigned long long)r->cast, (unsigned long long)r->copied,
              (unsigned long long)r->bytes);
  return 0;
}
