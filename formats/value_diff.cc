#include "formats/value_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

namespace blz::formats {

// --- DiffSums -------------------------------------------------------------------------------

void DiffSums::Merge(const DiffSums& o) {
  elements += o.elements;
  changed += o.changed;
  finite_pairs += o.finite_pairs;
  sum_aa += o.sum_aa;
  sum_bb += o.sum_bb;
  sum_ab += o.sum_ab;
  sum_dd += o.sum_dd;
  max_abs = std::max(max_abs, o.max_abs);
  a_nan += o.a_nan;
  a_pos_inf += o.a_pos_inf;
  a_neg_inf += o.a_neg_inf;
  b_nan += o.b_nan;
  b_pos_inf += o.b_pos_inf;
  b_neg_inf += o.b_neg_inf;
}

double DiffSums::FractionChanged() const {
  return elements == 0 ? 0.0 : double(changed) / double(elements);
}

double DiffSums::NormA() const { return std::sqrt(sum_aa); }
double DiffSums::NormB() const { return std::sqrt(sum_bb); }
double DiffSums::NormDiff() const { return std::sqrt(sum_dd); }

double DiffSums::RelativeL2() const {
  if (sum_aa == 0) return sum_dd == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(sum_dd / sum_aa);
}

double DiffSums::Cosine() const {
  if (sum_aa == 0 && sum_bb == 0) return 1.0;
  if (sum_aa == 0 || sum_bb == 0) return 0.0;
  // sqrt(aa * bb) is exact for aa == bb (sqrt of a correctly rounded square), so identical
  // tensors give exactly 1; fall back to the product of roots if the product leaves the range.
  const double prod = sum_aa * sum_bb;
  const double denom = std::isnormal(prod) ? std::sqrt(prod) : NormA() * NormB();
  return std::clamp(sum_ab / denom, -1.0, 1.0);
}

// --- Accumulation ---------------------------------------------------------------------------

namespace {

template <size_t K>
uint64_t CountChangedPlain(const uint8_t* a, const uint8_t* b, size_t n) {
  uint64_t c = 0;
  for (size_t i = 0; i < n; ++i) c += std::memcmp(a + i * K, b + i * K, K) != 0 ? 1 : 0;
  return c;
}

// Elements [first, first + n) changed bitwise; for block types first is block-aligned and n
// covers whole blocks or ends at the tensor's end (which is block-aligned).
uint64_t CountChanged(ValueType t, ByteSpan a, ByteSpan b, uint64_t first, size_t n) {
  const uint32_t k = ValueTypeBlockBytes(t);
  if (t == ValueType::kQ8_0 || t == ValueType::kQ4_0) {
    uint64_t c = 0;
    const uint8_t* pa = a.data() + first / kGgmlBlockElements * k;
    const uint8_t* pb = b.data() + first / kGgmlBlockElements * k;
    for (size_t blk = 0; blk < n / kGgmlBlockElements; ++blk, pa += k, pb += k) {
      if (pa[0] != pb[0] || pa[1] != pb[1]) {  // the fp16 scale: every element changes
        c += kGgmlBlockElements;
        continue;
      }
      if (t == ValueType::kQ8_0) {
        for (size_t j = 0; j < kGgmlBlockElements; ++j) c += pa[2 + j] != pb[2 + j] ? 1 : 0;
      } else {
        for (size_t j = 0; j < kGgmlBlockElements / 2; ++j) {
          const uint8_t x = pa[2 + j] ^ pb[2 + j];
          c += ((x & 0x0F) != 0 ? 1 : 0) + ((x & 0xF0) != 0 ? 1 : 0);
        }
      }
    }
    return c;
  }
  const uint8_t* pa = a.data() + first * k;
  const uint8_t* pb = b.data() + first * k;
  switch (k) {
    case 1: return CountChangedPlain<1>(pa, pb, n);
    case 2: return CountChangedPlain<2>(pa, pb, n);
    case 4: return CountChangedPlain<4>(pa, pb, n);
    default: return CountChangedPlain<8>(pa, pb, n);
  }
}

void Classify(double v, uint64_t* nan, uint64_t* pos_inf, uint64_t* neg_inf) {
  if (std::isnan(v)) {
    ++*nan;
  } else if (v > 0) {
    ++*pos_inf;
  } else {
    ++*neg_inf;
  }
}

void AddValues(std::span<const double> a, std::span<const double> b, DiffSums* s) {
  double aa = 0, bb = 0, ab = 0, dd = 0, mx = 0;
  uint64_t fp = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    const bool fx = std::isfinite(x), fy = std::isfinite(y);
    if (!fx) Classify(x, &s->a_nan, &s->a_pos_inf, &s->a_neg_inf);
    if (!fy) Classify(y, &s->b_nan, &s->b_pos_inf, &s->b_neg_inf);
    if (!fx || !fy) continue;
    ++fp;
    aa += x * x;
    bb += y * y;
    ab += x * y;
    const double d = y - x;
    dd += d * d;
    mx = std::max(mx, std::fabs(d));
  }
  s->elements += a.size();
  s->finite_pairs += fp;
  s->sum_aa += aa;
  s->sum_bb += bb;
  s->sum_ab += ab;
  s->sum_dd += dd;
  s->max_abs = std::max(s->max_abs, mx);
}

}  // namespace

Status AccumulateDiff(ValueType t, ByteSpan a, ByteSpan b, uint64_t elements, uint64_t begin,
                      uint64_t end, DiffSums* sums) {
  if (begin > end || end > elements) {
    return InvalidArgument("element range [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") is not inside a tensor of " +
                           std::to_string(elements) + " elements");
  }
  const size_t chunk = kDecodeChunkElements;
  const size_t cap = size_t(std::min<uint64_t>(chunk, end - begin));
  std::vector<double> va(cap), vb(cap);
  // An empty range still validates both tensors' byte lengths.
  BLZ_RETURN_IF_ERROR(DecodeElements(t, a, elements, begin, std::span<double>()));
  BLZ_RETURN_IF_ERROR(DecodeElements(t, b, elements, begin, std::span<double>()));
  for (uint64_t at = begin; at < end;) {
    const size_t n = size_t(std::min<uint64_t>(chunk, end - at));
    const std::span<double> xa(va.data(), n), xb(vb.data(), n);
    BLZ_RETURN_IF_ERROR(DecodeElements(t, a, elements, at, xa));
    BLZ_RETURN_IF_ERROR(DecodeElements(t, b, elements, at, xb));
    sums->changed += CountChanged(t, a, b, at, n);
    AddValues(xa, xb, sums);
    at += n;
  }
  return Status::Ok();
}

Result<DiffSums> DiffTensorValues(ValueType t, ByteSpan a, ByteSpan b, uint64_t elements) {
  DiffSums s;
  BLZ_RETURN_IF_ERROR(AccumulateDiff(t, a, b, elements, 0, elements, &s));
  return s;
}

// --- Layers ---------------------------------------------------------------------------------

std::string LayerOf(std::string_view name) {
  static constexpr std::string_view kKeys[] = {"layers", "h", "blk", "layer", "block"};
  // Components as [start, end) offsets.
  std::vector<std::pair<size_t, size_t>> comps;
  size_t start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      comps.emplace_back(start, i);
      start = i + 1;
    }
  }
  for (size_t c = 0; c + 2 < comps.size(); ++c) {
    const std::string_view key = name.substr(comps[c].first, comps[c].second - comps[c].first);
    const std::string_view num =
        name.substr(comps[c + 1].first, comps[c + 1].second - comps[c + 1].first);
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) continue;
    if (num.empty() || !std::all_of(num.begin(), num.end(), [](char ch) {
          return ch >= '0' && ch <= '9';
        })) {
      continue;
    }
    return std::string(name.substr(0, comps[c + 1].second));
  }
  return "other";
}

namespace {

// Sort key of a layer group: prefix, then the number (by value, without parsing it), then the
// name itself; "other" after everything.
struct LayerKey {
  bool other;
  std::string prefix;
  std::string digits;  // without leading zeros
  std::string name;
  bool operator<(const LayerKey& o) const {
    if (other != o.other) return !other;
    if (prefix != o.prefix) return prefix < o.prefix;
    if (digits.size() != o.digits.size()) return digits.size() < o.digits.size();
    if (digits != o.digits) return digits < o.digits;
    return name < o.name;
  }
};

LayerKey KeyOf(const std::string& layer) {
  if (layer == "other") return {true, "", "", layer};
  const size_t dot = layer.find_last_of('.');
  std::string digits = layer.substr(dot + 1);
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  return {false, layer.substr(0, dot), digits, layer};
}

TensorRef RefOf(const ValueTensor& t) { return {t.name, t.dtype, t.shape, t.file}; }

Result<std::unordered_map<std::string, size_t>> IndexByName(const ModelTensors& m) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const ValueTensor& t = m.tensors()[i];
    auto [it, inserted] = index.emplace(t.name, i);
    if (!inserted) {
      return InvalidArgument(m.path() + ": tensor name '" + t.name + "' appears twice (in " +
                             m.tensors()[it->second].file + " and " + t.file +
                             "); tensors cannot be matched by name");
    }
  }
  return index;
}

}  // namespace

// --- Models ---------------------------------------------------------------------------------

Result<ModelDiff> DiffModels(const std::string& a_path, const std::string& b_path,
                             const DiffOptions& options) {
  BLZ_ASSIGN_OR_RETURN(ModelTensors a, ModelTensors::Open(a_path));
  BLZ_ASSIGN_OR_RETURN(ModelTensors b, ModelTensors::Open(b_path));
  return DiffModels(a, b, options);
}

Result<ModelDiff> DiffModels(const ModelTensors& a, const ModelTensors& b,
                             const DiffOptions& options) {
  BLZ_ASSIGN_OR_RETURN(auto a_index, IndexByName(a));
  BLZ_ASSIGN_OR_RETURN(auto b_index, IndexByName(b));
  ModelDiff out;
  out.a_path = a.path();
  out.a_format = a.format();
  out.b_path = b.path();
  out.b_format = b.format();

  std::vector<std::pair<size_t, size_t>> pairs;  // comparable (a index, b index)
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const ValueTensor& ta = a.tensors()[i];
    auto it = b_index.find(ta.name);
    if (it == b_index.end()) {
      out.removed.push_back(RefOf(ta));
      continue;
    }
    const ValueTensor& tb = b.tensors()[it->second];
    std::string reason;
    if (ta.dtype != tb.dtype) {
      reason = "dtype differs (" + ta.dtype + " vs " + tb.dtype + ")";
    } else if (ta.shape != tb.shape) {
      reason = "shape differs (" + stats_text::Shape(ta.shape) + " vs " +
               stats_text::Shape(tb.shape) + ")";
    } else if (!ta.type || !tb.type) {
      reason = "unsupported type " + ta.dtype;
    }
    if (!reason.empty()) {
      const bool same = ta.data.size() == tb.data.size() &&
                        (ta.data.empty() ||
                         std::memcmp(ta.data.data(), tb.data.data(), ta.data.size()) == 0);
      out.not_comparable.push_back({ta.name, reason, RefOf(ta), RefOf(tb), same});
      continue;
    }
    pairs.emplace_back(i, it->second);
  }
  for (const ValueTensor& tb : b.tensors()) {
    if (a_index.find(tb.name) == a_index.end()) out.added.push_back(RefOf(tb));
  }

  struct Item {
    size_t pair;
    uint64_t begin, end;
    DiffSums sums;
    Status status;
  };
  std::vector<Item> items;
  for (size_t p = 0; p < pairs.size(); ++p) {
    const uint64_t n = a.tensors()[pairs[p].first].elements;
    uint64_t begin = 0;
    do {
      const uint64_t end = begin + std::min(n - begin, kDiffSegmentElements);
      items.push_back({p, begin, end, {}, {}});
      begin = end;
    } while (begin < n);
  }
  if (options.counters != nullptr) {
    uint64_t total = 0;
    for (const Item& it : items) total += it.end - it.begin;
    options.counters->total.store(total, std::memory_order_relaxed);
  }
  ParallelFor(items.size(), options.threads, [&](size_t k) {
    Item& it = items[k];
    const ValueTensor& ta = a.tensors()[pairs[it.pair].first];
    const ValueTensor& tb = b.tensors()[pairs[it.pair].second];
    it.status = AccumulateDiff(*ta.type, ta.data, tb.data, ta.elements, it.begin, it.end,
                               &it.sums);
    if (options.counters != nullptr) {
      options.counters->done.fetch_add(it.end - it.begin, std::memory_order_relaxed);
    }
  });

  std::vector<DiffSums> per_pair(pairs.size());
  for (const Item& it : items) {
    if (!it.status.ok()) {
      const ValueTensor& ta = a.tensors()[pairs[it.pair].first];
      return it.status.WithContext("tensor '" + ta.name + "' (" + a.path() + " vs " +
                                   b.path() + ")");
    }
    per_pair[it.pair].Merge(it.sums);  // items are in pair, then segment order
  }
  std::map<LayerKey, LayerDiff> layers;
  for (size_t p = 0; p < pairs.size(); ++p) {
    const ValueTensor& ta = a.tensors()[pairs[p].first];
    TensorDiff d{ta.name, ta.dtype, ta.shape, LayerOf(ta.name), per_pair[p]};
    LayerDiff& l = layers[KeyOf(d.layer)];
    l.name = d.layer;
    ++l.tensors;
    l.sums.Merge(d.sums);
    out.model.Merge(d.sums);
    out.tensors.push_back(std::move(d));
  }
  for (auto& [key, l] : layers) out.layers.push_back(std::move(l));
  return out;
}

// --- Output ---------------------------------------------------------------------------------

namespace {

std::string Percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", f * 100.0);
  return buf;
}

// The cosine, or "n/a" when exactly one side is all zeros (the angle is undefined there;
// Cosine() returns 0, which the JSON keeps, and the web view also shows as n/a).
std::string Cos(const DiffSums& s) {
  if ((s.sum_aa == 0) != (s.sum_bb == 0)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.8f", s.Cosine());
  return buf;
}

std::string Count(uint64_t nan, uint64_t pos, uint64_t neg) {
  return std::to_string(nan) + "/" + std::to_string(pos + neg);
}

nlohmann::ordered_json SumsJson(const DiffSums& s, nlohmann::ordered_json j) {
  using J = nlohmann::ordered_json;
  const double rel = s.RelativeL2();
  j["elements"] = s.elements;
  j["changed"] = s.changed;
  j["fraction_changed"] = s.FractionChanged();
  j["finite_pairs"] = s.finite_pairs;
  j["rel_l2"] = std::isfinite(rel) ? J(rel) : J(nullptr);
  j["max_abs_change"] = s.max_abs;
  j["cosine"] = s.Cosine();
  j["l2_a"] = s.NormA();
  j["l2_b"] = s.NormB();
  j["l2_diff"] = s.NormDiff();
  j["a"] = J{{"nan", s.a_nan}, {"pos_inf", s.a_pos_inf}, {"neg_inf", s.a_neg_inf}};
  j["b"] = J{{"nan", s.b_nan}, {"pos_inf", s.b_pos_inf}, {"neg_inf", s.b_neg_inf}};
  return j;
}

nlohmann::ordered_json RefJson(const TensorRef& r, bool with_name) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (with_name) j["name"] = r.name;
  j["dtype"] = r.dtype;
  j["shape"] = r.shape;
  j["file"] = r.file;
  return j;
}

}  // namespace

std::string ModelDiffText(const ModelDiff& d) {
  using stats_text::Number;
  std::string out;
  out += "a: " + d.a_path + " (" + d.a_format + ")\n";
  out += "b: " + d.b_path + " (" + d.b_format + ")\n";
  out += "tensors: " + std::to_string(d.tensors.size()) + " compared, " +
         std::to_string(d.added.size()) + " added, " + std::to_string(d.removed.size()) +
         " removed, " + std::to_string(d.not_comparable.size()) + " not comparable\n";
  const DiffSums& m = d.model;
  out += "model: " + Percent(m.FractionChanged()) + "% of " + std::to_string(m.elements) +
         " values changed, rel L2 " + Number(m.RelativeL2()) + ", max |change| " +
         Number(m.max_abs) + ", cosine " + Cos(m) + "\n";
  if (!d.tensors.empty()) {
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "DTYPE", "SHAPE", "CHANGED%",
                                                   "REL_L2", "MAX_ABS", "COSINE",
                                                   "NAN/INF_A", "NAN/INF_B"}};
    for (const TensorDiff& t : d.tensors) {
      const DiffSums& s = t.sums;
      rows.push_back({t.name, t.dtype, stats_text::Shape(t.shape), Percent(s.FractionChanged()),
                      Number(s.RelativeL2()), Number(s.max_abs), Cos(s),
                      Count(s.a_nan, s.a_pos_inf, s.a_neg_inf),
                      Count(s.b_nan, s.b_pos_inf, s.b_neg_inf)});
    }
    out += "\n" + stats_text::Table(rows, {false, false, false, true, true, true, true, true,
                                           true});
    std::vector<std::vector<std::string>> lrows = {
        {"LAYER", "TENSORS", "CHANGED%", "REL_L2", "MAX_ABS", "COSINE"}};
    for (const LayerDiff& l : d.layers) {
      const DiffSums& s = l.sums;
      lrows.push_back({l.name, std::to_string(l.tensors), Percent(s.FractionChanged()),
                       Number(s.RelativeL2()), Number(s.max_abs), Cos(s)});
    }
    out += "\n" + stats_text::Table(lrows, {false, true, true, true, true, true});
  }
  auto list = [&out](const char* title, const std::vector<TensorRef>& refs) {
    if (refs.empty()) return;
    out += std::string("\n") + title + "\n";
    for (const TensorRef& r : refs) {
      out += "  " + r.name + "  " + r.dtype + "  " + stats_text::Shape(r.shape) + "\n";
    }
  };
  list("added (in b only):", d.added);
  list("removed (in a only):", d.removed);
  if (!d.not_comparable.empty()) {
    out += "\nnot comparable:\n";
    for (const NotComparable& n : d.not_comparable) {
      out += "  " + n.name + ": " + n.reason +
             (n.bytes_identical ? " (bytes identical)" : " (bytes differ)") + "\n";
    }
  }
  return out;
}

nlohmann::ordered_json ModelDiffJson(const ModelDiff& d) {
  using J = nlohmann::ordered_json;
  J j = J::object();
  j["schema"] = 1;
  J tensors = J::array();
  for (const TensorDiff& t : d.tensors) {
    tensors.push_back(SumsJson(
        t.sums, J{{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"layer", t.layer}}));
  }
  j["tensors"] = std::move(tensors);
  J layers = J::array();
  for (const LayerDiff& l : d.layers) {
    layers.push_back(SumsJson(l.sums, J{{"name", l.name}, {"tensors", l.tensors}}));
  }
  j["layers"] = std::move(layers);
  j["model"] = SumsJson(d.model, J{{"tensors", d.tensors.size()}});
  J added = J::array(), removed = J::array(), nc = J::array();
  for (const TensorRef& r : d.added) added.push_back(RefJson(r, true));
  for (const TensorRef& r : d.removed) removed.push_back(RefJson(r, true));
  for (const NotComparable& n : d.not_comparable) {
    nc.push_back(J{{"name", n.name},
                   {"reason", n.reason},
                   {"bytes_identical", n.bytes_identical},
                   {"a", RefJson(n.a, false)},
                   {"b", RefJson(n.b, false)}});
  }
  j["added"] = std::move(added);
  j["removed"] = std::move(removed);
  j["not_comparable"] = std::move(nc);
  j["inputs"] = J{{"a", J{{"path", d.a_path}, {"format", d.a_format}}},
                  {"b", J{{"path", d.b_path}, {"format", d.b_format}}}};
  return j;
}

}  // namespace blz::formats
