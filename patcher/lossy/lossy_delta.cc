#include "patcher/lossy/lossy_delta.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/ordered_pipeline.h"
#include "formats/dtype.h"
#include "formats/float_convert.h"
#include "formats/json_strict.h"
#include "formats/safetensors.h"
#include "formats/wdelta.h"
#include "patcher/lossy/bitdelta.h"
#include "patcher/lossy/exact.h"
#include "patcher/lossy/layout.h"
#include "patcher/lossy/lowrank.h"
#include "patcher/lossy/payload.h"
#include "patcher/lossy/payload_check.h"
#include "patcher/lossy/wdelta_strategies.h"

namespace blz::lossy {
namespace {

using formats::DType;
using formats::ModelTensors;
using formats::ValueTensor;
using formats::WdeltaTensorOut;

constexpr uint64_t kMaxTensorElements = uint64_t{1} << 32;

// F32, F16 and BF16 tensors are coded lossily; everything else is stored exact.
bool IsLossyDType(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

// numpy's name of a lossy dtype (v2 "base_dtype").
std::string NumpyName(const std::string& dtype) {
  if (dtype == "F32") return "float32";
  if (dtype == "F16") return "float16";
  return "bfloat16";
}

Result<std::vector<float>> ToF32(const ValueTensor& t) {
  if (!t.type) return Unsupported("tensor '" + t.name + "': dtype " + t.dtype + " cannot be decoded");
  return formats::DecodeToFloat(*t.type, t.data, t.elements, kMaxTensorElements);
}

static_assert(std::endian::native == std::endian::little, "tensor bytes are little-endian");

// float32 -> the output dtype's bytes, as the reference narrows: F16 and BF16 round to
// nearest even (formats/float_convert.h); a NaN becomes BF16 0x7FC0 (the reference's canonical
// quiet NaN).
Result<std::vector<uint8_t>> Narrow(std::span<const float> v, const std::string& dtype) {
  std::vector<uint8_t> out;
  if (dtype == "F32") {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  if (dtype != "F16" && dtype != "BF16") return InvalidArgument("cannot narrow to " + dtype);
  std::vector<uint16_t> h(v.size());
  if (dtype == "F16") {
    BLZ_RETURN_IF_ERROR(formats::ConvertF32ToF16(v, h));
  } else {
    BLZ_RETURN_IF_ERROR(formats::ConvertF32ToBF16(v, h));
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(v[i])) h[i] = 0x7FC0;
    }
  }
  out.resize(h.size() * 2);
  std::memcpy(out.data(), h.data(), out.size());  // little-endian host (static_assert above)
  return out;
}

// The float32 values a narrowed tensor holds (what a reader of the output sees).
Result<std::vector<float>> Widen(const std::vector<uint8_t>& bytes, const std::string& dtype) {
  BLZ_ASSIGN_OR_RETURN(DType dt, formats::ParseDType(dtype));
  const uint32_t size = formats::DTypeSize(dt);
  return formats::DecodeToFloat(formats::ValueTypeOf(dt), bytes, bytes.size() / size,
                                kMaxTensorElements);
}

uint64_t RecordBytes(const std::string& tensor, const std::string& field,
                     const formats::WdeltaArray& a) {
  return 4 + tensor.size() + 4 + field.size() + 4 + a.dtype.size() + 4 + 8 * a.shape.size() + 8 +
         a.bytes.size();
}

uint64_t TensorOutBytes(const WdeltaTensorOut& t) {
  uint64_t n = 0;
  for (const auto& [field, a] : t.fields) n += RecordBytes(t.name, field, a);
  return n;
}

// A TensorPayload viewing an encoded tensor (for measuring it right after encoding).
TensorPayload ViewOf(const WdeltaTensorOut& t, const nlohmann::ordered_json& meta,
                     uint32_t version) {
  TensorPayload p;
  p.name = t.name;
  p.meta = &meta;
  p.version = version;
  for (const auto& [field, a] : t.fields) {
    p.fields.emplace(field, formats::WdeltaArrayView{a.dtype, a.shape, ByteSpan(a.bytes)});
  }
  return p;
}

// The full header object of an encoded tensor (with its "_ref" entries), as the file holds it.
nlohmann::ordered_json FullMeta(const WdeltaTensorOut& t) {
  nlohmann::ordered_json m = t.meta;
  for (const auto& [field, a] : t.fields) m[field] = {{"_ref", field}};
  return m;
}

std::string MetaStrategy(const nlohmann::ordered_json& meta) {
  if (meta.contains("strategy") && meta["strategy"].is_string()) return meta["strategy"];
  return "";
}

Status DecodeAdd(const TensorPayload& p, std::span<float> acc) {
  const std::string s = MetaStrategy(*p.meta);
  if (s == "sparse") return DecodeAddSparse(p, acc);
  if (s == "quantized") return DecodeAddQuantized(p, acc);
  if (s == "int4") return DecodeAddInt4(p, acc);
  if (s == "bitdelta") return DecodeAddBitDelta(p, acc);
  if (s == "lowrank") return DecodeAddLowRank(p, acc);
  return Unsupported("tensor '" + p.name + "': strategy '" + s + "' is not a lossy float strategy");
}

// --- Create -----------------------------------------------------------------------------------

struct Encoded {
  bool identical = false;
  std::optional<WdeltaTensorOut> out;
  TensorReport report;
  ErrorAccumulator error;
  bool measured = false;  // error holds this tensor (float tensors only)
};

struct Candidate {
  WdeltaTensorOut out;
  std::vector<uint8_t> recon_bytes;  // the narrowed reconstruction
  ErrorMetrics metrics;
  ErrorAccumulator error;
};

// Encodes with `s`, decodes back and narrows to the target dtype, and measures.
// `max_rank`: lowrank's cap (EncodeLowRank), kTooLarge past it.
Result<Candidate> Try(Strategy s, const ValueTensor& t, const std::vector<float>& bf,
                      const std::vector<float>& tf, const std::vector<float>& d,
                      const CreateOptions& o, std::optional<uint64_t> max_rank = std::nullopt) {
  Result<WdeltaTensorOut> enc = InvalidArgument("no strategy");
  switch (s) {
    case Strategy::kSparse: enc = EncodeSparse(t.name, d, t.shape, o.sparsity); break;
    case Strategy::kQuantized: enc = EncodeQuantized(t.name, d, t.shape); break;
    case Strategy::kInt4: enc = EncodeInt4(t.name, d, t.shape, o.outlier_fraction, o.version); break;
    case Strategy::kBitDelta: enc = EncodeBitDelta(t.name, d, t.shape); break;
    case Strategy::kLowRank:
      enc = EncodeLowRank(t.name, d, bf, t.shape, o.rank_energy, max_rank);
      break;
    case Strategy::kAuto: break;
  }
  if (!enc.ok()) return enc.status();
  Candidate c;
  c.out = std::move(*enc);
  const nlohmann::ordered_json meta = FullMeta(c.out);
  TensorPayload p = ViewOf(c.out, meta, o.version);
  std::vector<float> acc = bf;
  BLZ_RETURN_IF_ERROR(DecodeAdd(p, acc));
  BLZ_ASSIGN_OR_RETURN(c.recon_bytes, Narrow(acc, t.dtype));
  BLZ_ASSIGN_OR_RETURN(std::vector<float> recon, Widen(c.recon_bytes, t.dtype));
  c.error.Add(bf, tf, recon);
  c.metrics = c.error.Finish();
  return c;
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

Result<Encoded> EncodeTensor(const ValueTensor& t, const ValueTensor* b, const CreateOptions& o) {
  Encoded e;
  TensorReport& r = e.report;
  r.name = t.name;
  r.dtype = t.dtype;
  r.shape = t.shape;
  r.elements = t.elements;
  r.full_bytes = t.data.size();
  const bool same_layout = b != nullptr && b->dtype == t.dtype && b->shape == t.shape;
  if (same_layout && b->data.size() == t.data.size() &&
      std::memcmp(b->data.data(), t.data.data(), t.data.size()) == 0) {
    e.identical = true;
    r.strategy = "identical";
    r.note = "identical to the base: omitted (copied from the base)";
    if (IsLossyDType(t.dtype)) {
      BLZ_ASSIGN_OR_RETURN(std::vector<float> tf, ToF32(t));
      e.error.Add(tf, tf, tf);
      e.measured = true;
      r.error = e.error.Finish();
    }
    return e;
  }
  BLZ_ASSIGN_OR_RETURN(DType target_dtype, formats::ParseDType(t.dtype));
  const uint32_t elem = formats::DTypeSize(target_dtype);
  ByteSpan base_bytes = (b != nullptr && b->data.size() == t.data.size()) ? b->data : ByteSpan{};
  // The exact encoding, made once: the lossless size in the report, the fallback, and the size
  // lossy results must beat.
  std::optional<WdeltaTensorOut> exact_out;
  {
    BLZ_ASSIGN_OR_RETURN(WdeltaTensorOut out,
                         EncodeExact(t.name, base_bytes, t.data, t.dtype, elem, t.shape));
    r.lossless_bytes = LosslessBytes(out);
    exact_out = std::move(out);
  }
  // Float copies of the target and the base, once made (the fallback below reuses them).
  std::vector<float> tf, bf;
  auto exact = [&](std::string note) -> Result<Encoded> {
    WdeltaTensorOut out = std::move(*exact_out);
    exact_out.reset();
    r.strategy = "exact";
    r.note = std::move(note);
    r.delta_bytes = TensorOutBytes(out);
    e.out = std::move(out);
    if (IsLossyDType(t.dtype)) {
      // Measured like apply measures it: against the base when it has the tensor, else the
      // delta norm is taken against the target itself.
      if (tf.empty()) {
        BLZ_ASSIGN_OR_RETURN(tf, ToF32(t));
      }
      if (b != nullptr && b->shape == t.shape && IsLossyDType(b->dtype)) {
        if (bf.empty()) {
          BLZ_ASSIGN_OR_RETURN(bf, ToF32(*b));
        }
        e.error.Add(bf, tf, tf);
      } else {
        e.error.Add(tf, tf, tf);
      }
      e.measured = true;
      r.error = e.error.Finish();
    }
    return std::move(e);
  };

  if (b == nullptr) return exact("not in the base: stored exact");
  if (b->shape != t.shape) return exact("shape differs from the base: stored exact");
  if (!IsLossyDType(t.dtype) || !IsLossyDType(b->dtype)) {
    return exact("dtype " + t.dtype + (b->dtype != t.dtype ? " (base " + b->dtype + ")" : "") +
                 " is not coded lossily: stored exact");
  }
  const bool matrix_strategy = o.strategy == Strategy::kBitDelta ||
                               o.strategy == Strategy::kLowRank || o.strategy == Strategy::kAuto;
  if (matrix_strategy && t.shape.size() < 2) return exact("1-D tensor: stored exact");
  if (matrix_strategy && t.elements < o.min_lossy_elements) {
    return exact("small tensor (" + std::to_string(t.elements) + " < " +
                 std::to_string(o.min_lossy_elements) + " elements): stored exact");
  }

  BLZ_ASSIGN_OR_RETURN(bf, ToF32(*b));
  BLZ_ASSIGN_OR_RETURN(tf, ToF32(t));
  std::vector<float> d(tf.size());
  bool finite = true;
  for (size_t i = 0; i < d.size(); ++i) {
    d[i] = tf[i] - bf[i];
    finite = finite && std::isfinite(d[i]);
  }
  // The codecs take finite deltas only (a NaN or Inf weight has no meaningful approximation).
  if (!finite) return exact("the delta has NaN/Inf values: stored exact");
  if (t.elements == 0) return exact("no elements: stored exact");

  // lowrank's factors cost 4 k (m + n) bytes: a rank at which they reach the exact encoding's
  // size is never chosen (the check below), so the SVD search stops there (EncodeLowRank).
  std::optional<uint64_t> max_rank;
  if (matrix_strategy) {
    const uint64_t rows = t.shape[0];
    const uint64_t cols = rows == 0 ? 0 : t.elements / rows;
    if (rows + cols > 0) max_rank = TensorOutBytes(*exact_out) / (4 * (rows + cols));
  }
  auto too_large = [&]() {
    return "lowrank needs a rank above " + std::to_string(max_rank.value_or(0)) +
           ", more bytes than exact";
  };
  std::optional<Candidate> chosen;
  if (o.strategy != Strategy::kAuto) {
    Result<Candidate> c = Try(o.strategy, t, bf, tf, d, o, max_rank);
    if (!c.ok() && c.status().code() == Code::kTooLarge) {
      return exact(too_large() + ": stored exact");
    }
    BLZ_RETURN_IF_ERROR(c.status());
    chosen = std::move(*c);
  } else {
    BLZ_ASSIGN_OR_RETURN(Candidate bit, Try(Strategy::kBitDelta, t, bf, tf, d, o));
    if (bit.metrics.rel_l2 <= o.max_error) {
      chosen = std::move(bit);
    } else {
      Result<Candidate> lowrank = Try(Strategy::kLowRank, t, bf, tf, d, o, max_rank);
      if (!lowrank.ok() && lowrank.status().code() == Code::kTooLarge) {
        return exact("bitdelta rel_l2 " + Fmt(bit.metrics.rel_l2) + " > " + Fmt(o.max_error) +
                     ", " + too_large() + ": stored exact");
      }
      BLZ_RETURN_IF_ERROR(lowrank.status());
      Candidate low = std::move(*lowrank);
      if (low.metrics.rel_l2 <= o.max_error) {
        r.note = "bitdelta rel_l2 " + Fmt(bit.metrics.rel_l2) + " > " + Fmt(o.max_error) +
                 ": lowrank";
        chosen = std::move(low);
      } else {
        return exact("bitdelta rel_l2 " + Fmt(bit.metrics.rel_l2) + ", lowrank " +
                     Fmt(low.metrics.rel_l2) + " > " + Fmt(o.max_error) + ": stored exact");
      }
    }
  }
  if (matrix_strategy) {
    // blz's strategies never spend more bytes than exact, which has no error at all (auto:
    // exact always meets the bound, so when it is also no bigger it wins; lowrank on a
    // high-rank delta, e.g. BF16 rounding noise, can need more bytes than the tensor). The
    // reference's three strategies are kept as asked, so their files stay loadable by it.
    const uint64_t lossy_bytes = TensorOutBytes(chosen->out);
    if (TensorOutBytes(*exact_out) <= lossy_bytes) {
      return exact(MetaStrategy(chosen->out.meta) + " (" + std::to_string(lossy_bytes) +
                   " bytes) is no smaller than exact: stored exact");
    }
  }
  if (o.version >= 2) {
    // v2 records the base tensor's dtype after the strategy's own keys (before the "_ref"s).
    chosen->out.meta["base_dtype"] = NumpyName(b->dtype);
  }
  r.strategy = MetaStrategy(chosen->out.meta);
  r.delta_bytes = TensorOutBytes(chosen->out);
  r.error = chosen->metrics;
  e.error = chosen->error;
  e.measured = true;
  e.out = std::move(chosen->out);
  return e;
}

nlohmann::ordered_json MetricsJson(const std::optional<ErrorMetrics>& m) {
  if (!m) return nullptr;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  auto num = [](double v) -> nlohmann::ordered_json {
    if (std::isfinite(v)) return v;
    return nullptr;
  };
  j["rel_l2"] = num(m->rel_l2);
  j["delta_rel_l2"] = num(m->delta_rel_l2);
  j["cosine"] = num(m->cosine);
  j["max_abs"] = num(m->max_abs);
  j["nonfinite"] = m->nonfinite;
  j["elements"] = m->elements;
  return j;
}

std::optional<ErrorMetrics> MetricsFromJson(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  ErrorMetrics m;
  auto get = [&](const char* k, double* out) {
    if (j.contains(k) && j[k].is_number()) *out = j[k].get<double>();
  };
  get("rel_l2", &m.rel_l2);
  get("delta_rel_l2", &m.delta_rel_l2);
  get("cosine", &m.cosine);
  get("max_abs", &m.max_abs);
  if (j.contains("nonfinite") && j["nonfinite"].is_number_unsigned()) m.nonfinite = j["nonfinite"];
  if (j.contains("elements") && j["elements"].is_number_unsigned()) m.elements = j["elements"];
  return m;
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return uint64_t(st.st_size);
}

Status CheckOptions(const CreateOptions& o) {
  if (o.version < formats::kWdeltaMinVersion || o.version > formats::kWdeltaMaxVersion) {
    return InvalidArgument(".wdelta version must be 1 or 2, got " + std::to_string(o.version));
  }
  if (!(o.sparsity >= 0 && o.sparsity < 1)) return InvalidArgument("sparsity must be in [0, 1)");
  if (!(o.outlier_fraction > 0 && o.outlier_fraction < 1)) {
    return InvalidArgument("outlier fraction must be in (0, 1)");
  }
  if (!(o.rank_energy > 0 && o.rank_energy <= 1)) {
    return InvalidArgument("rank energy must be in (0, 1]");
  }
  if (!(o.max_error >= 0) || !std::isfinite(o.max_error)) {
    return InvalidArgument("max error must be a finite number >= 0");
  }
  return Status::Ok();
}

}  // namespace

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kSparse: return "sparse";
    case Strategy::kQuantized: return "quantized";
    case Strategy::kInt4: return "int4";
    case Strategy::kBitDelta: return "bitdelta";
    case Strategy::kLowRank: return "lowrank";
    case Strategy::kAuto: return "auto";
  }
  return "?";
}

Result<Strategy> ParseStrategy(std::string_view name) {
  for (Strategy s : {Strategy::kSparse, Strategy::kQuantized, Strategy::kInt4,
                     Strategy::kBitDelta, Strategy::kLowRank, Strategy::kAuto}) {
    if (name == StrategyName(s)) return s;
  }
  return InvalidArgument("unknown strategy '" + std::string(name) +
                         "' (valid: sparse, quantized, int4, bitdelta, lowrank, auto)");
}

Result<DeltaReport> CreateDelta(const ModelTensors& base, const ModelTensors& target,
                                const std::string& out_path, const CreateOptions& options) {
  BLZ_RETURN_IF_ERROR(CheckOptions(options));
  BLZ_ASSIGN_OR_RETURN(TargetLayout layout, ReadTargetLayout(target));
  std::map<std::string, const ValueTensor*> base_by_name;
  for (const ValueTensor& t : base.tensors()) base_by_name.emplace(t.name, &t);
  const auto& tensors = target.tensors();
  if (options.counters != nullptr) {
    uint64_t total = 0;
    for (const ValueTensor& t : tensors) total += t.elements;
    options.counters->total.store(total, std::memory_order_relaxed);
  }

  DeltaReport report;
  report.path = out_path;
  report.version = options.version;
  report.strategy = std::string(StrategyName(options.strategy));
  formats::WdeltaFileOut file;
  file.version = options.version;
  file.strategy = report.strategy;
  ErrorAccumulator model_error;
  bool any_measured = false;
  bool any_lossy = false;
  std::vector<std::string> hashed;

  const unsigned threads = formats::EffectiveThreads(options.threads);
  Status s = RunOrdered<Encoded>(
      tensors.size(), threads,
      [&](size_t i) -> Result<Encoded> {
        const ValueTensor& t = tensors[i];
        auto it = base_by_name.find(t.name);
        auto e = EncodeTensor(t, it == base_by_name.end() ? nullptr : it->second, options);
        if (options.counters != nullptr) options.counters->done.fetch_add(t.elements);
        if (!e.ok()) {
          return Status(e.status().code(), target.path() + ": tensor '" + t.name + "': " +
                                               e.status().message());
        }
        return e;
      },
      [&](size_t, Encoded& e) -> Status {
        if (e.measured) {
          model_error.Merge(e.error);
          any_measured = true;
        }
        report.full_bytes += e.report.full_bytes;
        report.lossless_bytes += e.report.lossless_bytes;
        report.tensor_bytes += e.report.delta_bytes;
        if (e.report.strategy != "identical" && e.report.strategy != "exact") any_lossy = true;
        if (e.out) {
          if (base_by_name.count(e.out->name)) hashed.push_back(e.out->name);
          file.tensors.push_back(std::move(*e.out));
        }
        report.tensors.push_back(std::move(e.report));
        return Status::Ok();
      });
  BLZ_RETURN_IF_ERROR(s);

  // The order the reference verifies in: v2 sorted; v1 grouped by the base file (legacy).
  const std::vector<std::string> order = options.version >= 2
                                             ? formats::WdeltaSortedOrder(hashed)
                                             : formats::WdeltaLegacyOrder(base, hashed);
  BLZ_ASSIGN_OR_RETURN(file.parent_hash, formats::WdeltaParentHash(base, order));
  report.parent_hash = file.parent_hash;
  report.lossy = any_lossy;
  if (any_measured) report.error = model_error.Finish();

  nlohmann::ordered_json blz = nlohmann::ordered_json::object();
  blz["version"] = 1;
  blz["lossy"] = report.lossy;
  blz["target"] = LayoutJson(layout);
  blz["lossless_bytes"] = report.lossless_bytes;
  blz["full_bytes"] = report.full_bytes;
  blz["error"] = MetricsJson(report.error);
  nlohmann::ordered_json notes = nlohmann::ordered_json::object();
  for (const TensorReport& r : report.tensors) {
    if (!r.note.empty() && r.strategy != "identical") formats::AppendMember(&notes, r.name, r.note);
  }
  blz["notes"] = std::move(notes);
  file.extra["blz"] = std::move(blz);
  for (LayoutFile& f : layout.files) {  // the layout is not used past this point
    if (f.kind != "file") continue;
    const uint64_t size = f.bytes.size();
    file.extra_records.push_back(
        {{kFileRecordTensor, f.path}, formats::WdeltaArray{"uint8", {size}, std::move(f.bytes)}});
  }
  BLZ_RETURN_IF_ERROR(formats::WriteWdelta(out_path, file));
  report.file_bytes = FileSize(out_path);
  return report;
}

// --- Apply ------------------------------------------------------------------------------------

namespace {

struct ApplyContext {
  const formats::WdeltaReader* reader = nullptr;
  std::map<std::string, const ValueTensor*> base;
  std::map<std::string, const ValueTensor*> target;  // when measuring
};

struct Produced {
  std::vector<uint8_t> bytes;
  TensorReport report;
  ErrorAccumulator error;
  bool measured = false;
};

Result<Produced> ProduceTensor(const ApplyContext& c, const LayoutTensor& lt) {
  Produced out;
  TensorReport& r = out.report;
  r.name = lt.name;
  r.dtype = lt.dtype;
  r.shape = lt.shape;
  BLZ_ASSIGN_OR_RETURN(r.elements, ShapeElements(lt.shape));
  BLZ_ASSIGN_OR_RETURN(DType dt, formats::ParseDType(lt.dtype));
  uint64_t bytes = 0;
  if (!CheckedMul(r.elements, formats::DTypeSize(dt), &bytes)) return InvalidArgument("too large");
  r.full_bytes = bytes;
  auto bit = c.base.find(lt.name);
  const ValueTensor* b = bit == c.base.end() ? nullptr : bit->second;
  auto meta = c.reader->Meta(lt.name);
  std::optional<std::vector<float>> recon;  // float values of the output, for measuring
  std::vector<float> bf;
  if (!meta.ok()) {
    // Not in the delta: the base's tensor, unchanged.
    if (b == nullptr) {
      return Corruption("tensor '" + lt.name + "' is neither in the delta nor in the base");
    }
    if (b->dtype != lt.dtype || b->shape != lt.shape) {
      return InvalidArgument("tensor '" + lt.name + "': the base holds it as " + b->dtype + " " +
                             formats::stats_text::Shape(b->shape) + ", the target as " +
                             lt.dtype + " " + formats::stats_text::Shape(lt.shape));
    }
    out.bytes.assign(b->data.begin(), b->data.end());
    r.strategy = "identical";
  } else {
    BLZ_ASSIGN_OR_RETURN(TensorPayload p, ReadPayload(*c.reader, lt.name));
    r.strategy = MetaStrategy(**meta);
    r.delta_bytes = c.reader->TensorBytes(lt.name);
    if (r.strategy == "exact") {
      // Checked against the bytes present before the output is allocated: a shape the
      // payload cannot fill is refused here, not after a gigabyte is zeroed.
      ByteSpan base_bytes = b != nullptr ? b->data : ByteSpan{};
      BLZ_RETURN_IF_ERROR(CheckExactPayload(p, lt.shape, bytes, base_bytes.size()));
      out.bytes.resize(bytes);
      BLZ_RETURN_IF_ERROR(DecodeExact(p, lt.shape, base_bytes, out.bytes));
    } else {
      // The header's shape must be the output's (the decoders check only element counts).
      BLZ_ASSIGN_OR_RETURN(std::vector<uint64_t> declared, PayloadShape(p));
      if (declared != lt.shape) {
        return Corruption("tensor '" + lt.name + "' (" + r.strategy + "): the header's \"shape\" " +
                          formats::stats_text::Shape(declared) + " is not the tensor's shape " +
                          formats::stats_text::Shape(lt.shape));
      }
      if (b == nullptr) {
        return InvalidArgument("tensor '" + lt.name + "' is in the delta but not in the base");
      }
      if (b->shape != lt.shape) {
        return InvalidArgument("tensor '" + lt.name + "': shape " +
                               formats::stats_text::Shape(lt.shape) + " in the delta, " +
                               formats::stats_text::Shape(b->shape) + " in the base");
      }
      if (!IsLossyDType(b->dtype) || !IsLossyDType(lt.dtype)) {
        return Unsupported("tensor '" + lt.name + "': a lossy strategy on dtype " + b->dtype);
      }
      BLZ_ASSIGN_OR_RETURN(bf, ToF32(*b));
      std::vector<float> acc = bf;
      BLZ_RETURN_IF_ERROR(DecodeAdd(p, acc));
      BLZ_ASSIGN_OR_RETURN(out.bytes, Narrow(acc, lt.dtype));
    }
  }
  if (out.bytes.size() != bytes) {
    return Internal("tensor '" + lt.name + "': produced the wrong number of bytes");
  }
  auto tit = c.target.find(lt.name);
  if (tit != c.target.end() && IsLossyDType(lt.dtype) && IsLossyDType(tit->second->dtype) &&
      tit->second->shape == lt.shape) {
    BLZ_ASSIGN_OR_RETURN(std::vector<float> tf, ToF32(*tit->second));
    BLZ_ASSIGN_OR_RETURN(std::vector<float> rv, Widen(out.bytes, lt.dtype));
    if (bf.empty()) {
      if (b != nullptr && b->shape == lt.shape && IsLossyDType(b->dtype)) {
        BLZ_ASSIGN_OR_RETURN(bf, ToF32(*b));
      } else {
        bf = tf;  // no base values: the delta norm is measured against the target itself
      }
    }
    out.error.Add(bf, tf, rv);
    out.measured = true;
    r.error = out.error.Finish();
  }
  return out;
}

Status VerifyParent(const formats::WdeltaReader& reader, const ModelTensors& base,
                    const std::string& path) {
  std::map<std::string, const ValueTensor*> by_name;
  for (const ValueTensor& t : base.tensors()) by_name.emplace(t.name, &t);
  std::vector<std::string> names;
  for (const std::string& n : reader.names()) {
    auto meta = reader.Meta(n);
    if (!meta.ok()) return meta.status();
    const bool exact_without_base = MetaStrategy(**meta) == "exact" &&
                                    (*meta)->contains("with_base") &&
                                    (**meta)["with_base"] == false;
    if (by_name.count(n) == 0) {
      if (exact_without_base) continue;
      return InvalidArgument(path + ": tensor '" + n + "' is not in the base " + base.path());
    }
    names.push_back(n);
  }
  // v2: sorted order. v1: the legacy (per base file) order the reference verifies, then
  // sorted (some v1 writers hashed sorted).
  std::vector<std::vector<std::string>> orders;
  if (reader.version() == 1) orders.push_back(formats::WdeltaLegacyOrder(base, names));
  orders.push_back(formats::WdeltaSortedOrder(names));
  std::string got;
  for (const auto& order : orders) {
    BLZ_ASSIGN_OR_RETURN(std::string h, formats::WdeltaParentHash(base, order));
    if (h == reader.parent_hash()) return Status::Ok();
    if (got.empty()) got = h;
  }
  return DigestMismatch(path + ": the base " + base.path() +
                        " does not match the delta's parent_hash (expected " +
                        reader.parent_hash() + ", the base hashes to " + got +
                        "): this delta was made from another model");
}

// The report's file-level fields, read from the header.
DeltaReport ReportOfFile(const formats::WdeltaReader& reader, const std::string& wdelta_path) {
  DeltaReport report;
  report.path = wdelta_path;
  report.version = reader.version();
  report.strategy = reader.strategy();
  report.parent_hash = reader.parent_hash();
  report.file_bytes = reader.file_size();
  return report;
}

}  // namespace

Result<DeltaReport> ApplyDelta(const ModelTensors& base, const std::string& wdelta_path,
                               const std::string& out_dir, const ApplyOptions& options) {
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaReader reader, formats::WdeltaReader::Open(wdelta_path));
  std::error_code ec;
  if (std::filesystem::exists(out_dir, ec)) return AlreadyExists(out_dir + ": already exists");
  DeltaReport report = ReportOfFile(reader, wdelta_path);
  if (options.verify_base) {
    BLZ_RETURN_IF_ERROR(VerifyParent(reader, base, wdelta_path));
    report.base_verified = true;
  }
  const nlohmann::ordered_json& header = reader.header();
  TargetLayout layout;
  if (header.contains("blz") && header["blz"].is_object() && header["blz"].contains("target")) {
    BLZ_ASSIGN_OR_RETURN(layout, LayoutFromJson(header["blz"]["target"], wdelta_path));
    const auto& blz = header["blz"];
    if (blz.contains("lossless_bytes") && blz["lossless_bytes"].is_number_unsigned()) {
      report.lossless_bytes = blz["lossless_bytes"];
    }
  } else {
    BLZ_ASSIGN_OR_RETURN(layout, LayoutFromBase(base));
  }
  ApplyContext ctx;
  ctx.reader = &reader;
  for (const ValueTensor& t : base.tensors()) ctx.base.emplace(t.name, &t);
  if (options.target != nullptr) {
    for (const ValueTensor& t : options.target->tensors()) ctx.target.emplace(t.name, &t);
  }
  // Every tensor of the delta must have a place in the layout.
  std::set<std::string> placed;
  uint64_t total = 0;
  for (const LayoutFile& f : layout.files) {
    for (const LayoutTensor& t : f.tensors) {
      placed.insert(t.name);
      auto n = ShapeElements(t.shape);
      if (n.ok()) total += *n;
    }
  }
  for (const std::string& n : reader.names()) {
    if (!placed.count(n)) {
      return Corruption(wdelta_path + ": tensor '" + n + "' has no place in the output layout");
    }
  }
  if (options.counters != nullptr) options.counters->total.store(total);

  std::filesystem::path out(out_dir);
  std::filesystem::path parent = out.parent_path().empty() ? "." : out.parent_path();
  BLZ_ASSIGN_OR_RETURN(std::string staging,
                       MakeTempDir(parent.string(), "." + out.filename().string() + ".tmp-"));
  ScopedRemoveAll cleanup(staging);

  ErrorAccumulator model_error;
  bool any_measured = false;
  bool any_lossy = false;
  const unsigned threads = formats::EffectiveThreads(options.threads);
  for (const LayoutFile& f : layout.files) {
    const std::string dest = staging + "/" + f.path;
    std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
    if (ec) return IOError(dest + ": cannot create its directory: " + ec.message());
    if (f.kind == "file") {
      auto rec = reader.Field(kFileRecordTensor, f.path);
      if (!rec.ok()) {
        return Corruption(wdelta_path + ": the record of file '" + f.path + "' is missing");
      }
      if (rec->bytes.size() != f.size) {
        return Corruption(wdelta_path + ": file '" + f.path + "' has " +
                          std::to_string(rec->bytes.size()) + " bytes, the layout says " +
                          std::to_string(f.size));
      }
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(
          dest, std::string_view(reinterpret_cast<const char*>(rec->bytes.data()),
                                 rec->bytes.size())));
      continue;
    }
    std::vector<formats::SafetensorsTensorSpec> specs;
    for (const LayoutTensor& t : f.tensors) {
      BLZ_ASSIGN_OR_RETURN(DType dt, formats::ParseDType(t.dtype));
      specs.push_back({t.name, dt, t.shape});
    }
    BLZ_ASSIGN_OR_RETURN(formats::SafetensorsLayout plan,
                         formats::PlanSafetensors(specs, f.metadata));
    BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(dest));
    BLZ_RETURN_IF_ERROR(file.Append(plan.header_bytes));
    const uint64_t data_start = plan.header_bytes.size();
    Status s = RunOrdered<Produced>(
        plan.order.size(), threads,
        [&](size_t k) -> Result<Produced> {
          auto p = ProduceTensor(ctx, f.tensors[plan.order[k]]);
          if (!p.ok()) return Status(p.status().code(), wdelta_path + ": " + p.status().message());
          if (options.counters != nullptr) options.counters->done.fetch_add(p->report.elements);
          return p;
        },
        [&](size_t k, Produced& p) -> Status {
          const uint64_t at = data_start + plan.begin[plan.order[k]];
          if (file.size() < at) {
            std::vector<uint8_t> pad(at - file.size(), 0);
            BLZ_RETURN_IF_ERROR(file.Append(pad));
          }
          BLZ_RETURN_IF_ERROR(file.Append(p.bytes));
          if (p.measured) {
            model_error.Merge(p.error);
            any_measured = true;
          }
          if (p.report.strategy != "identical" && p.report.strategy != "exact") any_lossy = true;
          report.full_bytes += p.report.full_bytes;
          report.tensors.push_back(std::move(p.report));
          return Status::Ok();
        });
    BLZ_RETURN_IF_ERROR(s);
    BLZ_RETURN_IF_ERROR(file.Commit());
  }
  report.lossy = any_lossy;
  if (any_measured) report.error = model_error.Finish();

  // The reconstruction's own digest (never the target's).
  {
    BLZ_ASSIGN_OR_RETURN(ModelTensors written, ModelTensors::Open(staging));
    std::vector<std::string> names;
    for (const ValueTensor& t : written.tensors()) names.push_back(t.name);
    BLZ_ASSIGN_OR_RETURN(std::string h,
                         formats::WdeltaParentHash(written, formats::WdeltaSortedOrder(names)));
    report.output_digest = "sha256:" + h;
  }
  std::filesystem::rename(staging, out, ec);
  if (ec) return IOError(out_dir + ": cannot move the reconstruction into place: " + ec.message());
  cleanup.Release();
  return report;
}

Result<DeltaReport> DescribeDelta(const std::string& wdelta_path) {
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaReader reader, formats::WdeltaReader::Open(wdelta_path));
  DeltaReport report = ReportOfFile(reader, wdelta_path);
  const nlohmann::ordered_json& header = reader.header();
  std::map<std::string, LayoutTensor> layout_tensors;
  std::unordered_map<std::string_view, const std::string*> notes;  // not ordered_json's linear find
  if (header.contains("blz") && header["blz"].is_object()) {
    const auto& blz = header["blz"];
    if (blz.contains("target")) {
      BLZ_ASSIGN_OR_RETURN(TargetLayout layout, LayoutFromJson(blz["target"], wdelta_path));
      for (const LayoutFile& f : layout.files) {
        for (const LayoutTensor& t : f.tensors) layout_tensors[t.name] = t;
      }
    }
    if (blz.contains("lossless_bytes") && blz["lossless_bytes"].is_number_unsigned()) {
      report.lossless_bytes = blz["lossless_bytes"];
    }
    if (blz.contains("full_bytes") && blz["full_bytes"].is_number_unsigned()) {
      report.full_bytes = blz["full_bytes"];
    }
    if (blz.contains("error")) report.error = MetricsFromJson(blz["error"]);
    if (blz.contains("notes") && blz["notes"].is_object()) {
      for (const auto& [n, note] : blz["notes"].get_ref<const nlohmann::ordered_json::object_t&>()) {
        if (note.is_string()) notes.emplace(n, &note.get_ref<const std::string&>());
      }
    }
  }
  bool any_lossy = false;
  for (const std::string& n : reader.names()) {
    BLZ_ASSIGN_OR_RETURN(const nlohmann::ordered_json* meta, reader.Meta(n));
    TensorReport r;
    r.name = n;
    r.strategy = MetaStrategy(*meta);
    if (r.strategy != "exact") any_lossy = true;
    r.delta_bytes = reader.TensorBytes(n);
    if (meta->contains("shape") && (*meta)["shape"].is_array()) {
      for (const auto& d : (*meta)["shape"]) {
        if (d.is_number_unsigned()) r.shape.push_back(d.get<uint64_t>());
      }
    }
    auto lt = layout_tensors.find(n);
    r.dtype = lt != layout_tensors.end() ? lt->second.dtype
              : (meta->contains("dtype") && (*meta)["dtype"].is_string()) ? (*meta)["dtype"].get<std::string>()
                                                                         : "";
    auto count = ShapeElements(r.shape);
    if (count.ok()) r.elements = *count;
    if (auto note = notes.find(n); note != notes.end()) r.note = *note->second;
    report.tensors.push_back(std::move(r));
  }
  report.lossy = any_lossy;
  return report;
}

uint64_t TensorBytesOf(const DeltaReport& r) {
  if (r.tensor_bytes > 0) return r.tensor_bytes;
  uint64_t n = 0;  // a report read back (DescribeDelta, apply): its tensors' records
  for (const TensorReport& t : r.tensors) n += t.delta_bytes;
  return n;
}

std::string DeltaReportText(const DeltaReport& r) {
  std::string s;
  auto ratio = [](uint64_t a, uint64_t b) -> std::string {
    if (b == 0 || a == 0) return "n/a";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", double(b) / double(a));
    return buf;
  };
  s += std::string(r.lossy ? "LOSSY" : "exact") + " delta " + r.path + " (.wdelta v" +
       std::to_string(r.version) + ", strategy " + r.strategy + ")\n";
  s += "  parent_hash     " + r.parent_hash + (r.base_verified ? " (base verified)" : "") + "\n";
  // Like for like: the delta's tensor records against tensor bytes; the file's other bytes
  // (header, non-tensor files stored verbatim) are shown apart.
  const uint64_t tensors = TensorBytesOf(r);
  s += "  delta bytes     " + std::to_string(r.file_bytes) + " (tensors " +
       std::to_string(tensors) + ", header and other files " +
       std::to_string(r.file_bytes >= tensors ? r.file_bytes - tensors : 0) + ")\n";
  if (r.lossless_bytes > 0) {
    s += "  lossless patch  " + std::to_string(r.lossless_bytes) +
         " tensor bytes (tensor delta is " + ratio(tensors, r.lossless_bytes) + " smaller)\n";
  }
  if (r.full_bytes > 0) {
    s += "  full tensors    " + std::to_string(r.full_bytes) + " bytes (tensor delta is " +
         ratio(tensors, r.full_bytes) + " smaller)\n";
  }
  if (r.error) {
    s += "  error           rel_l2 " + formats::stats_text::Number(r.error->rel_l2) +
         "  delta_rel_l2 " + formats::stats_text::Number(r.error->delta_rel_l2) + "  cosine " +
         formats::stats_text::Number(r.error->cosine) + "  max_abs " +
         formats::stats_text::Number(r.error->max_abs) + "\n";
  } else {
    s += "  error           not measured (no true target given)\n";
  }
  if (!r.output_digest.empty()) {
    s += "  output digest   " + r.output_digest + " (the LOSSY reconstruction's own digest)\n";
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"TENSOR", "STRATEGY", "DTYPE", "SHAPE", "BYTES", "LOSSLESS", "REL_L2",
                  "COSINE", "MAX_ABS", "NOTE"});
  for (const TensorReport& t : r.tensors) {
    rows.push_back({t.name, t.strategy, t.dtype, formats::stats_text::Shape(t.shape),
                    std::to_string(t.delta_bytes),
                    t.lossless_bytes ? std::to_string(t.lossless_bytes) : "-",
                    t.error ? formats::stats_text::Number(t.error->rel_l2) : "-",
                    t.error ? formats::stats_text::Number(t.error->cosine) : "-",
                    t.error ? formats::stats_text::Number(t.error->max_abs) : "-", t.note});
  }
  s += formats::stats_text::Table(rows, {false, false, false, false, true, true, true, true, true,
                                         false});
  return s;
}

nlohmann::ordered_json DeltaReportJson(const DeltaReport& r) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["path"] = r.path;
  j["version"] = r.version;
  j["strategy"] = r.strategy;
  j["parent_hash"] = r.parent_hash;
  j["lossy"] = r.lossy;
  j["file_bytes"] = r.file_bytes;
  j["tensor_bytes"] = TensorBytesOf(r);
  j["lossless_bytes"] = r.lossless_bytes;
  j["full_bytes"] = r.full_bytes;
  auto ratio = [](uint64_t a, uint64_t b) -> nlohmann::ordered_json {
    if (a == 0 || b == 0) return nullptr;
    return double(b) / double(a);
  };
  j["ratio_vs_lossless"] = ratio(TensorBytesOf(r), r.lossless_bytes);
  j["ratio_vs_full"] = ratio(TensorBytesOf(r), r.full_bytes);
  j["error"] = MetricsJson(r.error);
  j["output_digest"] = r.output_digest.empty() ? nlohmann::ordered_json(nullptr)
                                               : nlohmann::ordered_json(r.output_digest);
  j["base_verified"] = r.base_verified;
  j["tensors"] = nlohmann::ordered_json::array();
  for (const TensorReport& t : r.tensors) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    o["name"] = t.name;
    o["strategy"] = t.strategy;
    o["note"] = t.note;
    o["dtype"] = t.dtype;
    o["shape"] = t.shape;
    o["elements"] = t.elements;
    o["delta_bytes"] = t.delta_bytes;
    o["lossless_bytes"] = t.lossless_bytes;
    o["full_bytes"] = t.full_bytes;
    o["error"] = MetricsJson(t.error);
    j["tensors"].push_back(std::move(o));
  }
  return j;
}

}  // namespace blz::lossy
