// sparse, quantized and int4 (v1 and v2 layouts): the reference's three strategies
// (patcher/lossy/wdelta_strategies.h, docs/wdelta.md).
//
// Every float operation below is a binary32 operation written out in the order numpy
// evaluates it; this file is compiled with -ffp-contract=off (patcher/lossy/CMakeLists.txt) so
// no multiply-add is fused. Rounding to integers uses std::nearbyint in the default rounding
// mode (to nearest, ties to even), as np.rint / np.round do.
#include "patcher/lossy/wdelta_strategies.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "formats/float_convert.h"
#include "patcher/lossy/payload_check.h"

namespace blz::lossy {

static_assert(std::endian::native == std::endian::little,
              ".wdelta records are little-endian; blz reads them in place");

namespace detail {

// numpy's float32 pairwise summation (loops_utils.h pairwise_sum for FLOAT): below 8 elements
// a plain loop; up to 128 eight accumulators combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))
// plus a plain tail; above, split at n/2 rounded down to a multiple of 8.
float PairwiseSumF32(const float* a, size_t n) {
  if (n < 8) {
    float res = 0.0f;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    float r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return PairwiseSumF32(a, n2) + PairwiseSumF32(a + n2, n - n2);
}

// np.mean(x) of a contiguous float32 row as numpy <= 2.2 computes it: the add-reduction runs
// in buffered chunks of 8192 elements (NPY_BUFSIZE), each summed pairwise and added to a
// float32 accumulator that starts at 0; then one division by the count (float32 division,
// equal to numpy's float64 division rounded to float32 since both operands are float32).
float NumpyMeanF32(const float* a, size_t n) {
  constexpr size_t kChunk = 8192;
  float acc = 0.0f;
  for (size_t s = 0; s < n; s += kChunk) acc += PairwiseSumF32(a + s, std::min(kChunk, n - s));
  return acc / static_cast<float>(n);
}

// np.float16(x) for a Python float: binary64 -> binary16 rounded once, to nearest even.
uint16_t DoubleToF16(double x) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00);  // rounds past 65504
  if (a < 0x1p-14) {
    // Subnormal range: units of 2^-24 (scaling by a power of two is exact).
    const auto m = static_cast<uint16_t>(std::nearbyint(a * 0x1p24));  // 0..1024
    return static_cast<uint16_t>(sign | m);  // 1024 is the smallest normal, 0x0400
  }
  int e = 0;
  (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): exponent of a is e - 1
  auto m = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 10 - (e - 1))));  // 1024..2048
  int biased = e - 1 + 15;
  if (m == 2048) {
    m = 1024;
    ++biased;
  }
  if (biased >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(sign | (biased << 10) | (m - 1024));
}

// The int4 dequantization table: q / 15 * (scale * 15) + zero_point in float32, where the
// Python float scale * 15.0 is computed in binary64 and enters the float32 product rounded.
std::array<float, 16> Int4Lut(float scale, float zero_point) {
  const auto t = static_cast<float>(static_cast<double>(scale) * 15.0);
  std::array<float, 16> lut{};
  for (int q = 0; q < 16; ++q) {
    float v = static_cast<float>(q) / 15.0f;
    v = v * t;
    v = v + zero_point;
    lut[q] = v;
  }
  return lut;
}

}  // namespace detail

namespace {

using formats::WdeltaArray;
using formats::WdeltaTensorOut;
using nlohmann::ordered_json;

template <typename T>
WdeltaArray MakeArray(std::string dtype, const std::vector<T>& values) {
  WdeltaArray a;
  a.dtype = std::move(dtype);
  a.shape = {values.size()};
  a.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

ordered_json ShapeJson(const std::vector<uint64_t>& shape) {
  ordered_json s = ordered_json::array();
  for (uint64_t d : shape) s.push_back(d);
  return s;
}

// Common input checks: element count matches the shape, not empty, every value finite.
Result<uint64_t> CheckInput(const std::string& name, std::span<const float> d,
                            const std::vector<uint64_t>& shape) {
  auto n = ShapeElements(shape);
  if (!n.ok()) return Status(Code::kInvalidArgument, "tensor '" + name + "': " + n.status().message());
  if (*n != d.size()) {
    return Status(Code::kInvalidArgument, "tensor '" + name + "': " + std::to_string(d.size()) +
                                              " delta values for a shape of " +
                                              std::to_string(*n) + " elements");
  }
  if (*n == 0) {
    return Status(Code::kInvalidArgument, "tensor '" + name + "': no elements to encode");
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (!std::isfinite(d[i])) {
      return Status(Code::kInvalidArgument, "tensor '" + name + "': delta element " +
                                                std::to_string(i) + " is not finite");
    }
  }
  return *n;
}

// The k largest |d|, as sorted indices. Ties in |d| go to the lower index (deterministic).
std::vector<uint64_t> TopKIndices(std::span<const float> d, uint64_t k) {
  std::vector<uint64_t> idx(d.size());
  std::iota(idx.begin(), idx.end(), uint64_t{0});
  auto before = [&](uint64_t a, uint64_t b) {
    const float fa = std::fabs(d[a]);
    const float fb = std::fabs(d[b]);
    return fa > fb || (fa == fb && a < b);
  };
  if (k < idx.size()) {
    std::nth_element(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(), before);
    idx.resize(k);
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Python int(x) of a non-negative finite double, as uint64.
uint64_t TruncToU64(double x) { return x <= 0 ? 0 : static_cast<uint64_t>(x); }

}  // namespace

Result<WdeltaTensorOut> EncodeSparse(const std::string& name, std::span<const float> d,
                                     const std::vector<uint64_t>& shape, double sparsity) {
  if (!(sparsity >= 0.0 && sparsity < 1.0)) {
    return Status(Code::kInvalidArgument, "sparsity must be in [0, 1), got " +
                                              formats::PythonFloatRepr(sparsity));
  }
  auto n = CheckInput(name, d, shape);
  if (!n.ok()) return n.status();
  const uint64_t k = std::min<uint64_t>(
      *n, std::max<uint64_t>(1, TruncToU64(static_cast<double>(*n) * (1.0 - sparsity))));
  const std::vector<uint64_t> idx = TopKIndices(d, k);
  std::vector<int64_t> indices(idx.begin(), idx.end());
  std::vector<float> values;
  values.reserve(idx.size());
  for (uint64_t i : idx) values.push_back(d[i]);

  WdeltaTensorOut out;
  out.name = name;
  out.meta = ordered_json::object();
  out.meta["strategy"] = "sparse";
  out.meta["shape"] = ShapeJson(shape);
  out.meta["dtype"] = "float32";
  out.meta["sparsity"] = sparsity;
  out.fields.emplace_back("indices", MakeArray("int64", indices));
  out.fields.emplace_back("values", MakeArray("float32", values));
  return out;
}

Result<WdeltaTensorOut> EncodeQuantized(const std::string& name, std::span<const float> d,
                                        const std::vector<uint64_t>& shape) {
  auto n = CheckInput(name, d, shape);
  if (!n.ok()) return n.status();
  const uint64_t rows = shape.size() > 1 ? shape[0] : 1;
  const uint64_t cols = *n / rows;
  std::vector<uint16_t> scales(rows);
  std::vector<float> absrow(cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) absrow[c] = std::fabs(d[r * cols + c]);
    scales[r] = formats::F32ToF16(detail::NumpyMeanF32(absrow.data(), cols));
  }
  std::vector<uint8_t> packed((*n + 7) / 8, 0);
  for (uint64_t i = 0; i < *n; ++i) {
    if (d[i] >= 0.0f) packed[i / 8] |= static_cast<uint8_t>(0x80u >> (i % 8));
  }

  WdeltaTensorOut out;
  out.name = name;
  out.meta = ordered_json::object();
  out.meta["strategy"] = "quantized";
  out.meta["shape"] = ShapeJson(shape);
  out.meta["dtype"] = "float32";
  out.meta["n_elements"] = *n;
  out.meta["n_cols"] = cols;
  out.fields.emplace_back("scales", MakeArray("float16", scales));
  out.fields.emplace_back("packed_signs", MakeArray("uint8", packed));
  return out;
}

Result<WdeltaTensorOut> EncodeInt4(const std::string& name, std::span<const float> d,
                                   const std::vector<uint64_t>& shape, double outlier_fraction,
                                   uint32_t version) {
  if (version != 1 && version != 2) {
    return Status(Code::kInvalidArgument, "int4 layout version must be 1 or 2");
  }
  if (!(outlier_fraction >= 0.0 && outlier_fraction <= 1.0)) {
    return Status(Code::kInvalidArgument, "outlier_fraction must be in [0, 1], got " +
                                              formats::PythonFloatRepr(outlier_fraction));
  }
  auto n = CheckInput(name, d, shape);
  if (!n.ok()) return n.status();
  const uint64_t n_out = std::min<uint64_t>(
      *n, std::max<uint64_t>(1, TruncToU64(static_cast<double>(*n) * outlier_fraction)));
  const std::vector<uint64_t> idx = TopKIndices(d, n_out);

  // Range of the non-outliers (as Python floats: float32 values widened exactly).
  double q_min = 0.0;
  double q_max = 0.0;
  {
    bool any = false;
    size_t k = 0;
    for (uint64_t i = 0; i < *n; ++i) {
      if (k < idx.size() && idx[k] == i) {
        ++k;
        continue;
      }
      const double v = d[i];
      if (!any || v < q_min) q_min = v;
      if (!any || v > q_max) q_max = v;
      any = true;
    }
  }
  const uint16_t zp_h = detail::DoubleToF16(q_min);
  uint16_t scale_h = 0;
  std::vector<uint8_t> q;  // one value per packed element
  if (version == 2) {
    scale_h = detail::DoubleToF16((q_max - q_min) / 15.0);
    q.assign(*n, 0);
    if (q_max - q_min < 1e-8 || formats::F16ToF32(scale_h) == 0.0f) {
      scale_h = 0x3C00;  // 1.0
    } else {
      const float zp = formats::F16ToF32(zp_h);
      const float sc = formats::F16ToF32(scale_h);
      for (uint64_t i = 0; i < *n; ++i) {
        float t = d[i] - zp;
        t = t / sc;
        t = std::nearbyint(t);
        t = std::clamp(t, 0.0f, 15.0f);
        q[i] = static_cast<uint8_t>(t);
      }
    }
  } else {
    const double q_range = q_max - q_min;
    q.assign(*n - n_out, 0);
    if (q_range < 1e-8) {
      scale_h = 0x3C00;
    } else {
      scale_h = detail::DoubleToF16(q_range / 15.0);
      const auto lo = static_cast<float>(q_min);
      const auto range = static_cast<float>(q_range);
      size_t k = 0;
      size_t p = 0;
      for (uint64_t i = 0; i < *n; ++i) {
        if (k < idx.size() && idx[k] == i) {
          ++k;
          continue;
        }
        float t = d[i] - lo;
        t = t / range;
        t = t * 15.0f;
        t = std::nearbyint(t);
        t = std::clamp(t, 0.0f, 15.0f);
        q[p++] = static_cast<uint8_t>(t);
      }
    }
  }
  std::vector<uint8_t> packed((q.size() + 1) / 2, 0);
  for (size_t i = 0; i < q.size(); ++i) {
    packed[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? q[i] << 4 : q[i]);
  }
  std::vector<uint16_t> vals;
  vals.reserve(idx.size());
  for (uint64_t i : idx) vals.push_back(formats::F32ToF16(d[i]));

  WdeltaTensorOut out;
  out.name = name;
  out.meta = ordered_json::object();
  out.meta["strategy"] = "int4";
  out.meta["shape"] = ShapeJson(shape);
  out.meta["dtype"] = "float32";
  out.meta["outlier_fraction"] = outlier_fraction;
  out.meta["n_elements"] = *n;
  out.meta["n_outliers"] = n_out;
  if (version == 2) {
    out.meta["int4_layout"] = 2;
    if (*n < (uint64_t{1} << 31)) {
      out.fields.emplace_back("outlier_idx",
                              MakeArray("int32", std::vector<int32_t>(idx.begin(), idx.end())));
    } else {
      out.fields.emplace_back("outlier_idx",
                              MakeArray("int64", std::vector<int64_t>(idx.begin(), idx.end())));
    }
  } else {
    out.fields.emplace_back("outlier_idx",
                            MakeArray("int64", std::vector<int64_t>(idx.begin(), idx.end())));
  }
  out.fields.emplace_back("outlier_vals", MakeArray("float16", vals));
  out.fields.emplace_back("scale", MakeArray("float16", std::vector<uint16_t>{scale_h}));
  out.fields.emplace_back("zero_point", MakeArray("float16", std::vector<uint16_t>{zp_h}));
  out.fields.emplace_back("packed", MakeArray("uint8", packed));
  return out;
}

// --- Decoding -----------------------------------------------------------------------------------

namespace {

// A JSON non-negative integer (parsed files hold them unsigned; values built in code may be
// signed).
bool IsSize(const ordered_json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

class Decoder {
 public:
  explicit Decoder(const TensorPayload& p) : p_(p) {}

  Status Corrupt(const std::string& what) const {
    return Status(Code::kCorruption, "tensor '" + p_.name + "': " + what);
  }

  // acc.size() against product(meta shape).
  Result<uint64_t> Elements(size_t acc_size) const {
    const auto& m = *p_.meta;
    if (!m.contains("shape") || !m["shape"].is_array()) return Corrupt("no \"shape\"");
    std::vector<uint64_t> shape;
    for (const auto& v : m["shape"]) {
      if (!IsSize(v)) return Corrupt("\"shape\" holds a non-size");
      shape.push_back(v.get<uint64_t>());
    }
    auto n = ShapeElements(shape);
    if (!n.ok()) return Corrupt("\"shape\" overflows");
    if (*n != acc_size) {
      return Status(Code::kInvalidArgument, "tensor '" + p_.name + "': " +
                                                std::to_string(acc_size) + " values for " +
                                                std::to_string(*n) + " elements");
    }
    return *n;
  }

  Result<uint64_t> MetaUint(const char* key) const {
    const auto& m = *p_.meta;
    if (!m.contains(key) || !IsSize(m[key])) {
      return Corrupt(std::string("\"") + key + "\" is not a non-negative integer");
    }
    return m[key].get<uint64_t>();
  }

  // The field's record, whose dtype must be one of `dtypes`, holding `count` elements.
  Result<const formats::WdeltaArrayView*> Field(const char* key,
                                                std::initializer_list<std::string_view> dtypes,
                                                uint64_t count) const {
    auto it = p_.fields.find(key);
    if (it == p_.fields.end()) return Corrupt(std::string("no field '") + key + "'");
    const auto& f = it->second;
    if (std::find(dtypes.begin(), dtypes.end(), f.dtype) == dtypes.end()) {
      return Corrupt(std::string("field '") + key + "' has dtype " + f.dtype);
    }
    auto item = formats::WdeltaItemSize(f.dtype);
    if (!item.ok() || f.bytes.size() != count * *item) {
      return Corrupt(std::string("field '") + key + "' holds " + std::to_string(f.bytes.size()) +
                     " bytes, expected " + std::to_string(count) + " x " + f.dtype);
    }
    return &f;
  }

  // Indices (int32 or int64) as uint64, strictly increasing and < n.
  Result<std::vector<uint64_t>> Indices(const char* key, uint64_t count, uint64_t n) const {
    auto f = Field(key, {"int64", "int32"}, count);
    if (!f.ok()) return f.status();
    std::vector<uint64_t> out(count);
    const uint8_t* b = (*f)->bytes.data();
    for (uint64_t i = 0; i < count; ++i) {
      int64_t v = 0;
      if ((*f)->dtype == "int64") {
        std::memcpy(&v, b + 8 * i, 8);
      } else {
        int32_t w = 0;
        std::memcpy(&w, b + 4 * i, 4);
        v = w;
      }
      if (v < 0 || static_cast<uint64_t>(v) >= n || (i > 0 && static_cast<uint64_t>(v) <= out[i - 1])) {
        return Corrupt(std::string("field '") + key + "' element " + std::to_string(i) + " (" +
                       std::to_string(v) + ") is out of range or not increasing");
      }
      out[i] = static_cast<uint64_t>(v);
    }
    return out;
  }

  // Float values (float16 or float32) widened to float32.
  Result<std::vector<float>> Floats(const char* key, uint64_t count) const {
    auto f = Field(key, {"float16", "float32"}, count);
    if (!f.ok()) return f.status();
    std::vector<float> out(count);
    const uint8_t* b = (*f)->bytes.data();
    for (uint64_t i = 0; i < count; ++i) {
      if ((*f)->dtype == "float16") {
        uint16_t h = 0;
        std::memcpy(&h, b + 2 * i, 2);
        out[i] = formats::F16ToF32(h);
      } else {
        std::memcpy(&out[i], b + 4 * i, 4);
      }
    }
    return out;
  }

 private:
  const TensorPayload& p_;
};

}  // namespace

Status DecodeAddSparse(const TensorPayload& p, std::span<float> acc) {
  Decoder dec(p);
  auto n = dec.Elements(acc.size());
  if (!n.ok()) return n.status();
  auto it = p.fields.find("indices");
  if (it == p.fields.end()) return dec.Corrupt("no field 'indices'");
  auto item = formats::WdeltaItemSize(it->second.dtype);
  if (!item.ok()) return dec.Corrupt("field 'indices' has dtype " + it->second.dtype);
  const uint64_t k = it->second.bytes.size() / *item;
  auto idx = dec.Indices("indices", k, *n);
  if (!idx.ok()) return idx.status();
  auto vals = dec.Floats("values", k);
  if (!vals.ok()) return vals.status();
  for (uint64_t j = 0; j < k; ++j) acc[(*idx)[j]] = acc[(*idx)[j]] + (*vals)[j];
  return Status::Ok();
}

Status DecodeAddQuantized(const TensorPayload& p, std::span<float> acc) {
  Decoder dec(p);
  auto n = dec.Elements(acc.size());
  if (!n.ok()) return n.status();
  auto n_elements = dec.MetaUint("n_elements");
  if (!n_elements.ok()) return n_elements.status();
  auto cols = dec.MetaUint("n_cols");
  if (!cols.ok()) return cols.status();
  if (*n_elements != *n || *cols == 0 || *n % *cols != 0) {
    return dec.Corrupt("n_elements " + std::to_string(*n_elements) + " / n_cols " +
                       std::to_string(*cols) + " do not match the shape's " +
                       std::to_string(*n) + " elements");
  }
  const uint64_t rows = *n / *cols;
  auto scales = dec.Floats("scales", rows);
  if (!scales.ok()) return scales.status();
  auto packed = dec.Field("packed_signs", {"uint8"}, (*n + 7) / 8);
  if (!packed.ok()) return packed.status();
  const uint8_t* bits = (*packed)->bytes.data();
  for (uint64_t r = 0; r < rows; ++r) {
    const float s = (*scales)[r];
    for (uint64_t c = 0; c < *cols; ++c) {
      const uint64_t i = r * *cols + c;
      const bool positive = (bits[i / 8] >> (7 - i % 8)) & 1;
      acc[i] = acc[i] + (positive ? s : -s);
    }
  }
  return Status::Ok();
}

Status DecodeAddInt4(const TensorPayload& p, std::span<float> acc) {
  Decoder dec(p);
  auto n = dec.Elements(acc.size());
  if (!n.ok()) return n.status();
  auto n_elements = dec.MetaUint("n_elements");
  if (!n_elements.ok()) return n_elements.status();
  auto n_out = dec.MetaUint("n_outliers");
  if (!n_out.ok()) return n_out.status();
  if (*n_elements != *n || *n_out > *n) {
    return dec.Corrupt("n_elements " + std::to_string(*n_elements) + " / n_outliers " +
                       std::to_string(*n_out) + " do not match the shape's " +
                       std::to_string(*n) + " elements");
  }
  uint64_t layout = 1;
  if (p.meta->contains("int4_layout")) {
    auto l = dec.MetaUint("int4_layout");
    if (!l.ok()) return l.status();
    layout = *l;
  }
  if (layout != 1 && layout != 2) {
    return Status(Code::kUnsupported,
                  "tensor '" + p.name + "': int4_layout " + std::to_string(layout) + " (blz reads 1 and 2)");
  }
  auto idx = dec.Indices("outlier_idx", *n_out, *n);
  if (!idx.ok()) return idx.status();
  auto vals = dec.Floats("outlier_vals", *n_out);
  if (!vals.ok()) return vals.status();
  auto scale = dec.Floats("scale", 1);
  if (!scale.ok()) return scale.status();
  auto zp = dec.Floats("zero_point", 1);
  if (!zp.ok()) return zp.status();
  const uint64_t packed_values = layout == 2 ? *n : *n - *n_out;
  auto packed = dec.Field("packed", {"uint8"}, (packed_values + 1) / 2);
  if (!packed.ok()) return packed.status();
  const uint8_t* b = (*packed)->bytes.data();
  auto nibble = [b](uint64_t i) { return i % 2 == 0 ? b[i / 2] >> 4 : b[i / 2] & 0x0F; };
  const std::array<float, 16> lut = detail::Int4Lut((*scale)[0], (*zp)[0]);

  if (layout == 2) {
    // Every position quantized: add all, then outliers become base + value.
    std::vector<float> base_at(idx->size());
    for (size_t j = 0; j < idx->size(); ++j) base_at[j] = acc[(*idx)[j]];
    for (uint64_t i = 0; i < *n; ++i) acc[i] = acc[i] + lut[nibble(i)];
    for (size_t j = 0; j < idx->size(); ++j) acc[(*idx)[j]] = base_at[j] + (*vals)[j];
    return Status::Ok();
  }
  // v1: packed holds the non-outliers in order; outlier positions get + 0.0f, then + value.
  size_t k = 0;
  uint64_t q = 0;
  for (uint64_t i = 0; i < *n; ++i) {
    if (k < idx->size() && (*idx)[k] == i) {
      acc[i] = acc[i] + 0.0f;
      ++k;
    } else {
      acc[i] = acc[i] + lut[nibble(q++)];
    }
  }
  for (size_t j = 0; j < idx->size(); ++j) acc[(*idx)[j]] = acc[(*idx)[j]] + (*vals)[j];
  return Status::Ok();
}

}  // namespace blz::lossy
