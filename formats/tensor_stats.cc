#include "formats/tensor_stats.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>

#include "core/checked.h"
#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "formats/gguf.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"

namespace blz::formats {

// --- Threads --------------------------------------------------------------------------------

unsigned EffectiveThreads(unsigned threads) {
  if (threads == 0) threads = std::thread::hardware_concurrency();
  return threads == 0 ? 1 : threads;
}

void ParallelFor(size_t n, unsigned threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  const size_t want = std::min<size_t>(EffectiveThreads(threads), n);
  std::atomic<size_t> next{0};
  auto worker = [&next, n, &fn] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(want - 1);
  for (size_t t = 1; t < want; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // the threads already running (and this one) take the rest
    }
  }
  worker();
  for (std::thread& t : pool) t.join();
}

// --- Reading a model's tensors --------------------------------------------------------------

namespace {

constexpr char kArchiveMagic[8] = {'B', 'L', 'Z', 'A', 'R', 'C', 'H', '\n'};
constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};

std::string BaseName(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

Result<uint64_t> Product(const std::vector<uint64_t>& shape, const std::string& what) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (!CheckedMul(n, d, &n)) return Corruption(what + ": element count overflows");
  }
  return n;
}

Status AddSafetensors(const std::shared_ptr<const SafetensorsFile>& sf, const std::string& rel,
                      std::vector<ValueTensor>* out) {
  for (size_t i = 0; i < sf->tensors().size(); ++i) {
    const SafetensorsTensor& t = sf->tensors()[i];
    ValueTensor v;
    v.name = t.name;
    v.file = rel;
    v.dtype = std::string(DTypeName(t.dtype));
    v.shape = t.shape;
    v.elements = t.NumElements();
    v.type = ValueTypeOf(t.dtype);
    v.data = sf->TensorData(i);
    out->push_back(std::move(v));
  }
  return Status::Ok();
}

// The tensors of the GGUF file at `abs_path` (named `rel` in the model), in header order; dtype
// is the upper-cased ggml type name and the shape outermost first (GGUF stores ne0 first).
Status AddGguf(const std::string& abs_path, const std::string& rel, std::vector<ValueTensor>* out,
               std::vector<std::shared_ptr<const void>>* keep_alive) {
  BLZ_ASSIGN_OR_RETURN(GgufReader reader, GgufReader::Open(abs_path, GgufMode::kFull));
  auto g = std::make_shared<const GgufReader>(std::move(reader));
  for (size_t i = 0; i < g->header().tensors.size(); ++i) {
    const GgufTensorInfo& t = g->header().tensors[i];
    ValueTensor v;
    v.name = t.name;
    v.file = rel;
    for (char c : GgmlTypeName(t.type)) {
      v.dtype += char(std::toupper(static_cast<unsigned char>(c)));
    }
    v.shape.assign(t.dims.rbegin(), t.dims.rend());
    BLZ_ASSIGN_OR_RETURN(v.elements, Product(v.shape, abs_path + ": tensor '" + t.name + "'"));
    v.type = ValueTypeOf(t.type);
    v.data = g->TensorData(i);
    out->push_back(std::move(v));
  }
  keep_alive->push_back(std::move(g));
  return Status::Ok();
}

}  // namespace

Result<ModelTensors> ModelTensors::Open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file or directory");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  ModelTensors m;
  m.path_ = path;
  if (S_ISDIR(st.st_mode)) {
    m.format_ = "hf-dir";
    BLZ_ASSIGN_OR_RETURN(std::vector<ModelFile> files, ListModelFiles(path));
    for (const ModelFile& f : files) {
      if (f.is_gguf) {
        BLZ_RETURN_IF_ERROR(AddGguf(f.abs_path, f.path, &m.tensors_, &m.keep_alive_));
        continue;
      }
      if (!f.is_safetensors) continue;
      BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(f.abs_path));
      auto p = std::make_shared<const SafetensorsFile>(std::move(sf));
      BLZ_RETURN_IF_ERROR(AddSafetensors(p, f.path, &m.tensors_));
      m.keep_alive_.push_back(std::move(p));
    }
    return m;
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file or directory");

  bool is_archive = false;
  bool is_gguf = false;
  {
    BLZ_ASSIGN_OR_RETURN(MappedFile probe, MappedFile::Open(path));
    is_archive = probe.size() >= sizeof(kArchiveMagic) &&
                 std::memcmp(probe.data(), kArchiveMagic, sizeof(kArchiveMagic)) == 0;
    is_gguf = probe.size() >= sizeof(kGgufMagic) &&
              std::memcmp(probe.data(), kGgufMagic, sizeof(kGgufMagic)) == 0;
  }
  if (is_archive) {
    m.format_ = "blz";
    BLZ_ASSIGN_OR_RETURN(BlzArchive archive, BlzArchive::Open(path));
    auto a = std::make_shared<const BlzArchive>(std::move(archive));
    const ArchiveHeader& h = a->header();
    for (const ArchiveFile& f : h.files) {
      for (const ArchivePiece& p : f.pieces) {
        if (p.kind != ArchivePiece::Kind::kTensor) continue;
        const ArchiveTensor& t = h.tensors[p.index];
        ValueTensor v;
        v.name = t.name;
        v.file = f.path;
        v.dtype = std::string(DTypeName(t.dtype));
        v.shape = t.shape;
        BLZ_ASSIGN_OR_RETURN(v.elements, Product(t.shape, path + ": tensor '" + t.name + "'"));
        v.type = ValueTypeOf(t.dtype);
        v.data = a->TensorData(p.index);
        m.tensors_.push_back(std::move(v));
      }
    }
    m.keep_alive_.push_back(std::move(a));
    return m;
  }
  if (is_gguf) {
    m.format_ = "gguf";
    BLZ_RETURN_IF_ERROR(AddGguf(path, BaseName(path), &m.tensors_, &m.keep_alive_));
    return m;
  }
  if (IsSafetensorsName(path)) {
    m.format_ = "safetensors";
    BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(path));
    auto p = std::make_shared<const SafetensorsFile>(std::move(sf));
    BLZ_RETURN_IF_ERROR(AddSafetensors(p, BaseName(path), &m.tensors_));
    m.keep_alive_.push_back(std::move(p));
    return m;
  }
  return Unsupported(path +
                     ": not a .safetensors file, a .blz archive, a GGUF file or a model directory");
}

// --- Statistics -----------------------------------------------------------------------------

double TensorStats::ZeroFraction() const {
  return count == 0 ? 0.0 : double(zeros) / double(count);
}

void StatsAccumulator::Add(std::span<const double> values) {
  StatsAccumulator c;  // this chunk
  double sum = 0;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : values) {
    if (std::isnan(v)) {
      ++c.nan_;
    } else if (std::isinf(v)) {
      ++(v > 0 ? c.pos_inf_ : c.neg_inf_);
    } else {
      ++c.finite_;
      sum += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      if (v == 0) ++c.zeros_;
    }
  }
  c.count_ = values.size();
  if (c.finite_ > 0) {
    c.min_ = lo;
    c.max_ = hi;
    if (std::isfinite(sum)) {
      // Two passes over the chunk: mean, then the sum of squared deviations from it.
      c.mean_ = sum / double(c.finite_);
      double m2 = 0;
      for (double v : values) {
        if (std::isfinite(v)) m2 += (v - c.mean_) * (v - c.mean_);
      }
      c.m2_ = m2;
    } else {
      // The plain sum overflowed (F64 values near the double range): Welford's update.
      double mean = 0, m2 = 0;
      uint64_t k = 0;
      for (double v : values) {
        if (!std::isfinite(v)) continue;
        ++k;
        const double d = v - mean;
        mean += d / double(k);
        m2 += d * (v - mean);
      }
      c.mean_ = mean;
      c.m2_ = m2;
    }
  }
  Merge(c);
}

void StatsAccumulator::AddCountsOnly(uint64_t count, uint64_t nan, uint64_t pos_inf,
                                     uint64_t neg_inf) {
  count_ += count;
  nan_ += nan;
  pos_inf_ += pos_inf;
  neg_inf_ += neg_inf;
  finite_ += count - nan - pos_inf - neg_inf;
}

void StatsAccumulator::Merge(const StatsAccumulator& o) {
  count_ += o.count_;
  nan_ += o.nan_;
  pos_inf_ += o.pos_inf_;
  neg_inf_ += o.neg_inf_;
  zeros_ += o.zeros_;
  if (o.finite_ == 0) return;
  if (finite_ == 0) {
    finite_ = o.finite_;
    min_ = o.min_;
    max_ = o.max_;
    mean_ = o.mean_;
    m2_ = o.m2_;
    return;
  }
  // Chan, Golub, LeVeque: combining the moments of two disjoint sets.
  const double na = double(finite_), nb = double(o.finite_), n = na + nb;
  const double delta = o.mean_ - mean_;
  mean_ += delta * (nb / n);
  m2_ += o.m2_ + delta * delta * (na / n) * nb;
  finite_ += o.finite_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

TensorStats StatsAccumulator::Finish() const {
  TensorStats s;
  s.count = count_;
  s.finite = finite_;
  s.nan = nan_;
  s.pos_inf = pos_inf_;
  s.neg_inf = neg_inf_;
  s.zeros = zeros_;
  if (finite_ > 0) {
    s.min = min_;
    s.max = max_;
    s.mean = mean_;
    s.stddev = std::sqrt(std::max(0.0, m2_) / double(finite_));
  }
  s.all_non_finite = count_ > 0 && finite_ == 0;
  return s;
}

namespace {

Status AccumulateRange(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin,
                       uint64_t end, StatsAccumulator* acc) {
  return VisitAsDouble(t, data, elements, begin, end,
                       [acc](uint64_t, std::span<const double> v) {
                         acc->Add(v);
                         return Status::Ok();
                       });
}

// NaN / +Inf / -Inf among `n` little-endian IEEE 754 values of type U at `p`: an exponent of
// all ones (`exp_mask`) with a non-zero mantissa (`man_mask`) is a NaN, with a zero one an
// infinity of the sign bit's sign. A branch-free count of all-ones exponents first (the loop
// vectorizes; a model without NaN/Inf is the common case), the classification only if any.
template <typename U>
void CountNonFiniteBits(const uint8_t* p, uint64_t n, U exp_mask, U man_mask, U sign_bit,
                        uint64_t* nan, uint64_t* pos_inf, uint64_t* neg_inf) {
  auto load = [p](uint64_t i) {
    U u = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&u, p + i * sizeof(U), sizeof(U));
    } else {
      for (size_t b = 0; b < sizeof(U); ++b) u |= U(p[i * sizeof(U) + b]) << (8 * b);
    }
    return u;
  };
  uint64_t special = 0;
  for (uint64_t i = 0; i < n; ++i) special += (load(i) & exp_mask) == exp_mask ? 1 : 0;
  if (special == 0) return;
  for (uint64_t i = 0; i < n; ++i) {
    const U u = load(i);
    if ((u & exp_mask) != exp_mask) continue;
    if ((u & man_mask) != 0) {
      ++*nan;
    } else if ((u & sign_bit) != 0) {
      ++*neg_inf;
    } else {
      ++*pos_inf;
    }
  }
}

// StatsOptions::non_finite_only for elements [begin, end): the raw-bit scan for the IEEE types,
// counts alone for the integer ones (after the byte-length check an empty visit does), false
// for the types that must be decoded.
Result<bool> CountNonFiniteOnly(ValueType t, ByteSpan data, uint64_t elements, uint64_t begin,
                                uint64_t end, StatsAccumulator* acc) {
  switch (t) {
    case ValueType::kF8_E4M3:
    case ValueType::kF8_E5M2:
    case ValueType::kQ8_0:
    case ValueType::kQ4_0:
      return false;
    default:
      break;
  }
  // Validates the range and the tensor's byte length, decoding nothing.
  auto nothing = [](uint64_t, std::span<const double>) { return Status::Ok(); };
  BLZ_RETURN_IF_ERROR(VisitAsDouble(t, data, elements, begin, begin, nothing));
  if (end < begin || end > elements) {
    return InvalidArgument("element range [" + std::to_string(begin) + ", " +
                           std::to_string(end) + ") is not inside a tensor of " +
                           std::to_string(elements) + " elements");
  }
  uint64_t nan = 0, pos_inf = 0, neg_inf = 0;
  const uint64_t n = end - begin;
  switch (t) {
    case ValueType::kF32:
      CountNonFiniteBits<uint32_t>(data.data() + begin * 4, n, 0x7F800000u, 0x007FFFFFu,
                                   0x80000000u, &nan, &pos_inf, &neg_inf);
      break;
    case ValueType::kF16:
      CountNonFiniteBits<uint16_t>(data.data() + begin * 2, n, 0x7C00, 0x03FF, 0x8000, &nan,
                                   &pos_inf, &neg_inf);
      break;
    case ValueType::kBF16:
      CountNonFiniteBits<uint16_t>(data.data() + begin * 2, n, 0x7F80, 0x007F, 0x8000, &nan,
                                   &pos_inf, &neg_inf);
      break;
    case ValueType::kF64:
      CountNonFiniteBits<uint64_t>(data.data() + begin * 8, n, 0x7FF0000000000000ull,
                                   0x000FFFFFFFFFFFFFull, 0x8000000000000000ull, &nan, &pos_inf,
                                   &neg_inf);
      break;
    default:
      break;  // integers and bool: never NaN
  }
  acc->AddCountsOnly(n, nan, pos_inf, neg_inf);
  return true;
}

std::string TensorContext(const ValueTensor& t) {
  return "tensor '" + t.name + "' (" + t.file + ")";
}

}  // namespace

Result<TensorStats> ComputeTensorStats(ValueType t, ByteSpan data, uint64_t elements) {
  StatsAccumulator acc;
  BLZ_RETURN_IF_ERROR(AccumulateRange(t, data, elements, 0, elements, &acc));
  return acc.Finish();
}

Result<ModelStats> ComputeModelStats(const std::string& path, const StatsOptions& options) {
  BLZ_ASSIGN_OR_RETURN(ModelTensors model, ModelTensors::Open(path));
  return ComputeModelStats(model, options);
}

Result<ModelStats> ComputeModelStats(const ModelTensors& model, const StatsOptions& options) {
  const std::vector<ValueTensor>& tensors = model.tensors();
  // Work items: fixed segments of every supported tensor (an empty tensor gets one, which
  // still checks its byte length).
  struct Item {
    size_t tensor;
    uint64_t begin, end;
    StatsAccumulator acc;
    Status status;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].type) continue;
    const uint64_t n = tensors[i].elements;
    uint64_t begin = 0;
    do {
      const uint64_t end = std::min(n, begin + std::min(n - begin, kStatsSegmentElements));
      items.push_back({i, begin, end, {}, {}});
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
    const ValueTensor& t = tensors[it.tensor];
    bool counted = false;
    if (options.non_finite_only) {
      Result<bool> r = CountNonFiniteOnly(*t.type, t.data, t.elements, it.begin, it.end, &it.acc);
      if (!r.ok()) {
        it.status = r.status();
      } else {
        counted = *r;
      }
    }
    if (it.status.ok() && !counted) {
      it.status = AccumulateRange(*t.type, t.data, t.elements, it.begin, it.end, &it.acc);
    }
    if (options.counters != nullptr) {
      options.counters->done.fetch_add(it.end - it.begin, std::memory_order_relaxed);
    }
  });

  ModelStats out;
  out.path = model.path();
  out.format = model.format();
  std::vector<StatsAccumulator> per_tensor(tensors.size());
  for (Item& it : items) {
    if (!it.status.ok()) return it.status.WithContext(TensorContext(tensors[it.tensor]));
    per_tensor[it.tensor].Merge(it.acc);  // items are in tensor, then segment order
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ValueTensor& t = tensors[i];
    TensorStatsEntry e{t.name, t.file, t.dtype, t.shape, t.type.has_value(), {}};
    if (!e.supported) {
      ++out.unsupported;
    } else {
      e.stats = per_tensor[i].Finish();
      out.elements += e.stats.count;
      out.nan += e.stats.nan;
      out.pos_inf += e.stats.pos_inf;
      out.neg_inf += e.stats.neg_inf;
      if (e.stats.all_non_finite) {
        ++out.all_non_finite;
      } else if (e.stats.finite < e.stats.count) {
        ++out.some_non_finite;
      }
    }
    out.tensors.push_back(std::move(e));
  }
  return out;
}

// --- Output ---------------------------------------------------------------------------------

namespace stats_text {

std::string Table(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const std::string pad(width[c] - r[c].size(), ' ');
      const bool align_right = c < right.size() && right[c];
      if (c > 0) line += "  ";
      line += align_right ? pad + r[c] : r[c] + (c + 1 < r.size() ? pad : "");
    }
    out += line + "\n";
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Shape(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace stats_text

namespace {

// The warning lines, without the "warning: " prefix.
std::vector<std::string> Warnings(const ModelStats& s) {
  std::vector<std::string> w;
  auto counts = [](const TensorStats& t) {
    return std::to_string(t.nan) + " NaN, " + std::to_string(t.pos_inf) + " +Inf, " +
           std::to_string(t.neg_inf) + " -Inf";
  };
  for (const TensorStatsEntry& e : s.tensors) {
    if (!e.supported) continue;
    const TensorStats& t = e.stats;
    if (t.all_non_finite) {
      w.push_back("tensor " + e.name + " is all NaN/Inf (" + counts(t) + " of " +
                  std::to_string(t.count) + " values)");
    } else if (t.finite < t.count) {
      w.push_back("tensor " + e.name + " has " + std::to_string(t.count - t.finite) +
                  " NaN/Inf values (" + counts(t) + " of " + std::to_string(t.count) + ")");
    }
  }
  if (s.all_non_finite > 0 || s.some_non_finite > 0) {
    w.push_back(std::to_string(s.all_non_finite) + " of " + std::to_string(s.tensors.size()) +
                " tensors are all NaN/Inf, " + std::to_string(s.some_non_finite) +
                " more contain NaN/Inf values");
  }
  return w;
}

std::string Percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", f * 100.0);
  return buf;
}

}  // namespace

std::string ModelStatsText(const ModelStats& s) {
  std::string out;
  out += "path:     " + s.path + "\n";
  out += "format:   " + s.format + "\n";
  out += "tensors:  " + std::to_string(s.tensors.size()) + " (" + std::to_string(s.elements) +
         " values";
  if (s.unsupported > 0) out += "; " + std::to_string(s.unsupported) + " of unsupported type";
  out += ")\n";
  out += "non-finite: " + std::to_string(s.nan) + " NaN, " + std::to_string(s.pos_inf) +
         " +Inf, " + std::to_string(s.neg_inf) + " -Inf\n";
  if (!s.tensors.empty()) {
    using stats_text::Number;
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "DTYPE", "SHAPE", "COUNT", "MIN",
                                                   "MAX", "MEAN", "STD", "NAN", "+INF", "-INF",
                                                   "ZERO%"}};
    for (const TensorStatsEntry& e : s.tensors) {
      std::vector<std::string> r = {e.name, e.dtype, stats_text::Shape(e.shape)};
      if (!e.supported) {
        r.push_back("unsupported type " + e.dtype);
      } else {
        const TensorStats& t = e.stats;
        const bool any = t.finite > 0;
        r.insert(r.end(), {std::to_string(t.count), any ? Number(t.min) : "-",
                           any ? Number(t.max) : "-", any ? Number(t.mean) : "-",
                           any ? Number(t.stddev) : "-", std::to_string(t.nan),
                           std::to_string(t.pos_inf), std::to_string(t.neg_inf),
                           Percent(t.ZeroFraction())});
      }
      rows.push_back(std::move(r));
    }
    out += "\n" + stats_text::Table(rows, {false, false, false, true, true, true, true, true,
                                           true, true, true, true});
  }
  const std::vector<std::string> warnings = Warnings(s);
  if (!warnings.empty()) out += "\n";
  for (const std::string& w : warnings) out += "warning: " + w + "\n";
  return out;
}

nlohmann::ordered_json ModelStatsJson(const ModelStats& s) {
  using J = nlohmann::ordered_json;
  J j = J::object();
  j["path"] = s.path;
  j["format"] = s.format;
  j["summary"] = J{{"tensors", s.tensors.size()},
                   {"elements", s.elements},
                   {"nan", s.nan},
                   {"pos_inf", s.pos_inf},
                   {"neg_inf", s.neg_inf},
                   {"unsupported", s.unsupported},
                   {"all_non_finite", s.all_non_finite},
                   {"some_non_finite", s.some_non_finite}};
  J tensors = J::array();
  for (const TensorStatsEntry& e : s.tensors) {
    J t = J::object();
    t["name"] = e.name;
    t["file"] = e.file;
    t["dtype"] = e.dtype;
    t["shape"] = e.shape;
    t["supported"] = e.supported;
    if (!e.supported) {
      t["error"] = "unsupported type " + e.dtype;
    } else {
      const TensorStats& st = e.stats;
      auto value = [&st](double v) { return st.finite > 0 ? J(v) : J(nullptr); };
      t["count"] = st.count;
      t["finite"] = st.finite;
      t["nan"] = st.nan;
      t["pos_inf"] = st.pos_inf;
      t["neg_inf"] = st.neg_inf;
      t["zeros"] = st.zeros;
      t["zero_fraction"] = st.ZeroFraction();
      t["min"] = value(st.min);
      t["max"] = value(st.max);
      t["mean"] = value(st.mean);
      t["std"] = value(st.stddev);
      t["all_non_finite"] = st.all_non_finite;
    }
    tensors.push_back(std::move(t));
  }
  j["tensors"] = std::move(tensors);
  j["warnings"] = Warnings(s);
  return j;
}

}  // namespace blz::formats
