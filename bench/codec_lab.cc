// codec_lab: measures the per-chunk tensor codecs (patcher/tensor_codec.h) on real model pairs.
//
// Usage: codec_lab [CORPUS_DIR] [--explore]   (CORPUS_DIR defaults to the configured corpus)
//        codec_lab [CORPUS_DIR] --nobase      only the no-base markdown table (part 3)
//        codec_lab --refs BASE.safetensors TARGET.safetensors
//
// --refs (for bench/patch_bench.sh): the two reference schemes of part 4 on one pair of files
// as stored (every tensor F32, BF16 or F16, not cast), cut into chunks like the patch
// container does; prints one line "<FullXor bytes> <BitX bytes> <target tensor bytes>".
// Byte-identical tensors cost 0, tensors with no same-name, same-dtype, same-shape base cost
// zstd 9 of their bytes. Exit 1 on an unreadable file or another dtype.
//
// Otherwise prints, in order:
//  1. Calibration: memcpy and xxh3+SHA-256 speed on this machine now (others share the cores;
//     all timings are CPU time of this thread, best of several runs).
//  2. One synthetic 4 MiB fine-tune chunk per float format: size, encode, decode and
//     decode+verify (xxh3 + SHA-256, what an apply adds) MB/s of every codec on one thread.
//     The corpus tensors are small; real models fill whole chunks.
//  3. No base: each corpus model alone (native dtype, and F32 ones cast to BF16 and F16), blz
//     (EncodeChunk with no base) vs zstd 19 / 9 / 1 vs byte planes (ZipNN-style), then a
//     markdown table (NoBaseStudy()).
//  4. Per pair (tiny-gpt2 base -> ft-v1; roberta-lora checkpoint-500 -> 1000 -> 2000 -> 2400),
//     each as stored (F32) and cast to BF16 and F16 (formats/float_convert.h, round to nearest
//     even, the cast of bench/cast_safetensors),
//     cut into chunks of kChunkBytes like the patch container does: total target bytes and
//     the total size of each scheme:
//       zstd9            zstd level 9 of the target bytes (no base)
//       BLAZE-X FullXor  zstd level 9 of base XOR target
//       ZipLLM/BitX      reference: XOR, split into an exponent stream and a sign+mantissa
//                        stream (element-interleaved little-endian), zstd level 19 each
//       blz xor-planes   codec 2, forced;  blz sub-planes: codec 3, forced
//       blz auto         what EncodeChunk picks (with and without the dtype hint), with its
//                        encode, decode and decode+verify speed on one thread
//     With --explore, also the ideas measured while designing codec 3 (ExploreSchemes()).
//     Tensors that are byte-identical in base and target cost 0 in every scheme (a reference);
//     tensors with no same-name, same-shape base are coded without a base.
//  5. The geometric mean and worst ratio of each scheme to ZipLLM/BitX, and a markdown table.
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/float_convert.h"
#include "patcher/codec_internal.h"
#include "patcher/tensor_codec.h"

namespace {

using Bytes = std::vector<uint8_t>;
using blz::ByteSpan;
using blz::patcher::Codec;

enum class Fmt { kF32, kBF16, kF16 };
const char* FmtName(Fmt f) { return f == Fmt::kF32 ? "F32" : f == Fmt::kBF16 ? "BF16" : "F16"; }
uint32_t FmtSize(Fmt f) { return f == Fmt::kF32 ? 4 : 2; }

struct Tensor {
  std::string dtype;
  std::vector<uint64_t> shape;
  Bytes data;
};
using Model = std::map<std::string, Tensor>;

bool LoadSafetensors(const std::string& path, Model* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string file = ss.str();
  if (file.size() < 8) return false;
  uint64_t n = blz::LoadLE64(reinterpret_cast<const uint8_t*>(file.data()));
  if (n > file.size() - 8) return false;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(file.substr(8, n));
  } catch (const std::exception&) {
    return false;
  }
  uint64_t data_start = 8 + n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    Tensor t;
    t.dtype = it.value()["dtype"].get<std::string>();
    t.shape = it.value()["shape"].get<std::vector<uint64_t>>();
    uint64_t b = it.value()["data_offsets"][0].get<uint64_t>();
    uint64_t e = it.value()["data_offsets"][1].get<uint64_t>();
    if (e < b || data_start + e > file.size()) return false;
    t.data.assign(file.begin() + long(data_start + b), file.begin() + long(data_start + e));
    (*out)[it.key()] = std::move(t);
  }
  return true;
}

// Round-to-nearest-even casts of little-endian F32 bytes (formats/float_convert.h, the same
// cast as bench/cast_safetensors).
Bytes Cast(const Bytes& f32, Fmt fmt) {
  if (fmt == Fmt::kF32) return f32;
  size_t n = f32.size() / 4;
  Bytes out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = blz::LoadLE32(&f32[i * 4]);
    float f;
    std::memcpy(&f, &v, 4);
    uint16_t h = fmt == Fmt::kBF16 ? blz::formats::F32ToBF16(f) : blz::formats::F32ToF16(f);
    out[i * 2] = uint8_t(h);
    out[i * 2 + 1] = uint8_t(h >> 8);
  }
  return out;
}

// ---- measurement helpers ------------------------------------------------------------------

size_t ZstdSize(const uint8_t* p, size_t n, int level) {
  thread_local std::vector<uint8_t> buf;
  buf.resize(ZSTD_compressBound(n));
  size_t r = ZSTD_compress(buf.data(), buf.size(), p, n, level);
  return ZSTD_isError(r) ? n : r;
}
size_t ZstdSize(const Bytes& b, int level) { return ZstdSize(b.data(), b.size(), level); }
// Like a blz stream: 1 mode byte, then zero / raw / (u32 + zstd frame), the smallest.
size_t StreamSize(const Bytes& b, int level) {
  if (std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; })) return 1;
  return 1 + std::min(b.size(), 4 + ZstdSize(b, level));
}

uint64_t Elem(const uint8_t* p, uint32_t e) {
  uint64_t v = 0;
  std::memcpy(&v, p, e);
  return v;
}
uint32_t ExpOf(uint64_t v, Fmt f) {
  switch (f) {
    case Fmt::kF32: return uint32_t(v >> 23) & 0xFF;
    case Fmt::kBF16: return uint32_t(v >> 7) & 0xFF;
    case Fmt::kF16: return uint32_t(v >> 10) & 0x1F;
  }
  return 0;
}
uint32_t ExpBits(Fmt f) { return f == Fmt::kF16 ? 5 : 8; }
uint32_t MantBits(Fmt f) { return f == Fmt::kF32 ? 23 : f == Fmt::kBF16 ? 7 : 10; }
uint64_t Zigzag(uint64_t d, uint32_t e) {
  uint32_t bits = e * 8;
  uint64_t mask = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  d &= mask;
  uint64_t sign = (d >> (bits - 1)) & 1;
  return ((d << 1) ^ (sign ? mask : 0)) & mask;
}

// Byte planes of a sequence of e-byte values, with an optional element order.
std::vector<Bytes> Planes(const std::vector<uint64_t>& v, uint32_t e,
                          const std::vector<uint32_t>* order = nullptr) {
  std::vector<Bytes> p(e, Bytes(v.size()));
  for (size_t j = 0; j < v.size(); ++j) {
    uint64_t x = v[order ? (*order)[j] : j];
    for (uint32_t k = 0; k < e; ++k) p[k][j] = uint8_t(x >> (8 * k));
  }
  return p;
}
size_t PlanesSize(const std::vector<Bytes>& p, int level) {
  size_t s = 0;
  for (const auto& b : p) s += StreamSize(b, level);
  return s;
}
// Stable order of element indices by key.
std::vector<uint32_t> OrderBy(const std::vector<uint32_t>& key) {
  std::vector<uint32_t> idx(key.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = uint32_t(i);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
  return idx;
}

struct Chunk {
  ByteSpan base;  // empty: no base
  ByteSpan target;
  uint32_t e;
  Fmt fmt;
};

// ---- schemes ------------------------------------------------------------------------------

struct Scheme {
  std::string name;
  std::function<size_t(const Chunk&)> size;
  bool delta_only;  // falls back to zstd9 when there is no base
};

std::vector<uint64_t> Values(ByteSpan s, uint32_t e) {
  std::vector<uint64_t> v(s.size() / e);
  for (size_t i = 0; i < v.size(); ++i) v[i] = Elem(s.data() + i * e, e);
  return v;
}

// The zigzagged differences target - base of a chunk's elements and each base element's
// exponent (the sub-planes group key), element by element.
void DiffsByExponent(const Chunk& c, std::vector<uint64_t>* d, std::vector<uint32_t>* key) {
  auto b = Values(c.base, c.e), t = Values(c.target, c.e);
  d->resize(t.size());
  key->resize(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    (*d)[i] = Zigzag(t[i] - b[i], c.e);
    (*key)[i] = ExpOf(b[i], c.fmt);
  }
}


// Indices of the two reference schemes in Schemes().
constexpr size_t kFullXor = 1, kBitX = 2;

std::vector<Scheme> Schemes() {
  std::vector<Scheme> s;
  s.push_back({"zstd9", [](const Chunk& c) { return ZstdSize(c.target.data(), c.target.size(), 9); },
               false});
  s.push_back({"BLAZE-X FullXor", [](const Chunk& c) {
                 Bytes x(c.target.size());
                 for (size_t i = 0; i < x.size(); ++i) x[i] = c.base[i] ^ c.target[i];
                 return ZstdSize(x, 9);
               }, true});
  s.push_back({"ZipLLM/BitX", [](const Chunk& c) {
                 // XOR; exponent stream (1 byte per element); sign+mantissa stream
                 // (F32: 3 bytes, BF16: 1 byte, F16: 2 bytes per element, LE).
                 auto b = Values(c.base, c.e), t = Values(c.target, c.e);
                 uint32_t mb = MantBits(c.fmt), eb = ExpBits(c.fmt);
                 uint32_t sm_bytes = (mb + 1 + 7) / 8;
                 Bytes ex, sm;
                 for (size_t i = 0; i < t.size(); ++i) {
                   uint64_t x = b[i] ^ t[i];
                   ex.push_back(uint8_t((x >> mb) & ((1u << eb) - 1)));
                   uint64_t v = (x & ((uint64_t(1) << mb) - 1)) | (((x >> (mb + eb)) & 1) << mb);
                   for (uint32_t k = 0; k < sm_bytes; ++k) sm.push_back(uint8_t(v >> (8 * k)));
                 }
                 return ZstdSize(ex, 19) + ZstdSize(sm, 19);
               }, true});
  // The real codecs, forced.
  for (Codec codec : {Codec::kXorPlanes, Codec::kSubPlanes}) {
    s.push_back({"blz " + std::string(blz::patcher::CodecName(codec)), [codec](const Chunk& c) {
                   blz::patcher::CodecOptions o;
                   o.dtype = c.fmt == Fmt::kF32 ? blz::formats::DType::kF32
                             : c.fmt == Fmt::kBF16 ? blz::formats::DType::kBF16
                                                   : blz::formats::DType::kF16;
                   auto r = blz::patcher::internal::EncodeWith(codec, c.base, c.target, c.e, o);
                   return r.ok() ? r->size() : size_t(1) << 40;
                 }, true});
  }
  return s;
}

// Ideas measured while designing codec 3 (--explore): grouping keys, zstd levels, segment
// sizes, and order-0 entropy bounds of richer contexts (an ideal coder, tables not counted).
std::vector<Scheme> ExploreSchemes() {
  std::vector<Scheme> s;
  s.push_back({"x:sub-planes ungrouped", [](const Chunk& c) {
                 auto b = Values(c.base, c.e), t = Values(c.target, c.e);
                 std::vector<uint64_t> d(t.size());
                 for (size_t i = 0; i < t.size(); ++i) d[i] = Zigzag(t[i] - b[i], c.e);
                 return 1 + PlanesSize(Planes(d, c.e), 9);
               }, true});
  auto grouped = [](int level, int keymode) {
    return [level, keymode](const Chunk& c) {
      auto b = Values(c.base, c.e);
      std::vector<uint64_t> d;
      std::vector<uint32_t> key;
      DiffsByExponent(c, &d, &key);
      for (size_t i = 0; i < b.size(); ++i) {
        if (keymode == 1) key[i] = uint32_t(b[i] >> (c.e * 8 - 8));  // top byte
        if (keymode == 2) key[i] |= uint32_t(b[i] >> (c.e * 8 - 1)) << 8;
      }
      auto order = OrderBy(key);
      return 1 + PlanesSize(Planes(d, c.e, &order), level);
    };
  };
  s.push_back({"x:sub by exp L9 unsegmented", grouped(9, 0), true});
  s.push_back({"x:sub by top byte", grouped(9, 1), true});
  s.push_back({"x:sub by sign+exp", grouped(9, 2), true});
  s.push_back({"x:sub by exp L19 unsegm.", grouped(19, 0), true});
  s.push_back({"x:sub by exp L1 unsegm.", grouped(1, 0), true});
  s.push_back({"x:sub by exp L3 unsegm.", grouped(3, 0), true});
  s.push_back({"x:sub by exp L5 unsegm.", grouped(5, 0), true});
  s.push_back({"x:sub by exp L-1 unsegm.", grouped(-1, 0), true});
  // Plane k (k < e-1) grouped by (base exponent, byte k+1 of the same diff, capped).
  auto cascade = [](int level, uint32_t cap) {
    return [level, cap](const Chunk& c) {
      std::vector<uint64_t> d;
      std::vector<uint32_t> key;
      DiffsByExponent(c, &d, &key);
      size_t total = 1;
      for (uint32_t k = 0; k < c.e; ++k) {
        std::vector<uint32_t> kk(d.size());
        for (size_t i = 0; i < d.size(); ++i) {
          uint32_t up = k + 1 < c.e ? std::min<uint32_t>(uint32_t(d[i] >> (8 * (k + 1))) & 0xFF, cap) : 0;
          kk[i] = key[i] * 256 + up;
        }
        auto order = OrderBy(kk);
        Bytes plane(d.size());
        for (size_t j = 0; j < d.size(); ++j) plane[j] = uint8_t(d[order[j]] >> (8 * k));
        total += StreamSize(plane, level);
      }
      return total;
    };
  };
  // Order-0 entropy of each plane given a context (ideal coder, tables not counted).
  auto entropy = [](int ctxmode) {
    return [ctxmode](const Chunk& c) {
      auto b = Values(c.base, c.e), t = Values(c.target, c.e);
      std::vector<uint64_t> d(t.size());
      for (size_t i = 0; i < t.size(); ++i) d[i] = Zigzag(t[i] - b[i], c.e);
      double bits = 0;
      for (uint32_t k = 0; k < c.e; ++k) {
        std::map<uint32_t, std::vector<uint32_t>> hist;
        for (size_t i = 0; i < t.size(); ++i) {
          uint32_t ctx = 0;
          if (ctxmode >= 1) ctx = ExpOf(b[i], c.fmt);
          if (ctxmode == 2) {
            uint64_t prev = i > 0 ? d[i - 1] : 0;
            ctx = ctx * 64 + (prev ? 64 - __builtin_clzll(prev) : 0);
          }
          if (ctxmode == 3) {
            uint64_t up = k + 1 < c.e ? d[i] >> (8 * (k + 1)) : 0;
            ctx = ctx * 64 + (up ? 64 - __builtin_clzll(up) : 0);
          }
          if (ctxmode == 4) {
            uint64_t up = k + 1 < c.e ? d[i] >> (8 * (k + 1)) : 0;
            uint64_t prev = i > 0 ? d[i - 1] : 0;
            ctx = (ctx * 64 + (up ? 64 - __builtin_clzll(up) : 0)) * 64 +
                  (prev ? 64 - __builtin_clzll(prev) : 0);
          }
          auto& h = hist[ctx];
          if (h.empty()) h.assign(256, 0);
          h[(d[i] >> (8 * k)) & 0xFF]++;
        }
        for (auto& [ctx, h] : hist) {
          double n = 0;
          for (auto x : h) n += x;
          for (auto x : h) if (x) bits -= x * std::log2(x / n);
        }
      }
      return size_t(bits / 8);
    };
  };
  // Grouped by base exponent, and each plane cut at group boundaries into segments of at
  // least min_seg bytes, each its own stream (own Huffman table).
  auto segmented = [](int level, size_t min_seg) {
    return [level, min_seg](const Chunk& c) {
      std::vector<uint64_t> d;
      std::vector<uint32_t> key;
      DiffsByExponent(c, &d, &key);
      auto order = OrderBy(key);
      std::vector<size_t> cuts = {0};
      for (size_t j = 1; j < order.size(); ++j) {
        if (key[order[j]] != key[order[j - 1]] && j - cuts.back() >= min_seg) cuts.push_back(j);
      }
      if (order.size() - cuts.back() < min_seg && cuts.size() > 1) cuts.pop_back();
      cuts.push_back(order.size());
      auto planes = Planes(d, c.e, &order);
      size_t total = 1 + 2 * cuts.size();
      for (const auto& pl : planes) {
        for (size_t q = 0; q + 1 < cuts.size(); ++q) {
          total += StreamSize(Bytes(pl.begin() + long(cuts[q]), pl.begin() + long(cuts[q + 1])), level);
        }
      }
      return total;
    };
  };
  s.push_back({"x:segmented 1K L1", segmented(1, 1024), true});
  s.push_back({"x:segmented 4K L1", segmented(1, 4096), true});
  s.push_back({"x:segmented 16K L1", segmented(1, 16384), true});
  s.push_back({"x:segmented 4K L9", segmented(9, 4096), true});
  s.push_back({"x:H planes", entropy(0), true});
  s.push_back({"x:H planes|exp", entropy(1), true});
  s.push_back({"x:H planes|exp,prev", entropy(2), true});
  s.push_back({"x:H planes|exp,upper", entropy(3), true});
  s.push_back({"x:H planes|exp,upper,prev", entropy(4), true});
  s.push_back({"x:cascade cap1 L9", cascade(9, 1), true});
  s.push_back({"x:cascade cap4 L9", cascade(9, 4), true});
  s.push_back({"x:cascade cap255 L9", cascade(9, 255), true});
  return s;
}

// EncodeChunk's options, with or without the dtype hint the patch container gives.
blz::patcher::CodecOptions OptionsFor(Fmt fmt, bool hint) {
  blz::patcher::CodecOptions o;
  if (hint) {
    o.dtype = fmt == Fmt::kF32 ? blz::formats::DType::kF32
              : fmt == Fmt::kBF16 ? blz::formats::DType::kBF16
                                  : blz::formats::DType::kF16;
  }
  return o;
}

// No-base study: each model alone (as a new model with no base is stored), in its native
// dtype and, for F32 tensors, cast to BF16 and F16. Sizes of:
//   blz      EncodeChunk with no base, per kChunkBytes chunk, with the dtype hint (what the
//            patch container does for a tensor with no base)
//   zstd19 / zstd9 / zstd1   zstd of each tensor's bytes at that level
//   planes   byte planes of each tensor (byte k of every element in one stream: for BF16 and
//            F32 the exponent's high bits get a plane of their own), zstd of each plane
//            (ZipNN-style byte grouping; planes-L19 is the ZipNN-style figure of the table)
//   rot-planes-L1   2-byte elements with the sign rotated to bit 0 first
// Prints one detail line per (model, dtype) and returns the markdown table rows.
struct NoBaseRow {
  std::string label;
  std::string dtype;  // "F32", "BF16", "BF16 (cast)", ...
  uint64_t total = 0, blz = 0, z19 = 0, planes19 = 0;
};

std::vector<NoBaseRow> NoBaseStudy(const std::string& label, const Model& m, bool detail) {
  std::vector<NoBaseRow> rows;
  for (Fmt fmt : {Fmt::kF32, Fmt::kBF16, Fmt::kF16}) {
    uint64_t total = 0, z19 = 0, z9 = 0, z1 = 0, planes1 = 0, planes9 = 0, planes19 = 0,
             rot1 = 0, blz = 0;
    bool cast = false;
    for (const auto& [name, t] : m) {
      if (t.dtype != "F32" && !(t.dtype == "BF16" && fmt == Fmt::kBF16) &&
          !(t.dtype == "F16" && fmt == Fmt::kF16)) continue;
      cast |= t.dtype == "F32" && fmt != Fmt::kF32;
      Bytes tb = t.dtype == "F32" ? Cast(t.data, fmt) : t.data;
      uint32_t e = FmtSize(fmt);
      total += tb.size();
      for (uint64_t off = 0; off < tb.size(); off += blz::patcher::kChunkBytes) {
        uint64_t len = std::min<uint64_t>(blz::patcher::kChunkBytes, tb.size() - off);
        auto enc = blz::patcher::EncodeChunk({}, ByteSpan(tb).subspan(off, len), e,
                                             OptionsFor(fmt, true));
        blz += enc.ok() ? enc->payload.size() : len;
      }
      z19 += ZstdSize(tb, 19);
      if (detail) {
        z9 += ZstdSize(tb, 9);
        z1 += ZstdSize(tb, 1);
      }
      auto v = Values(tb, e);
      auto planes = Planes(v, e);
      planes19 += 1 + PlanesSize(planes, 19);
      if (detail) {
        planes1 += 1 + PlanesSize(planes, 1);
        planes9 += 1 + PlanesSize(planes, 9);
        if (e == 2) {
          for (auto& x : v) x = ((x << 1) | (x >> 15)) & 0xFFFF;  // sign to bit 0
        }
        rot1 += 1 + PlanesSize(Planes(v, e), 1);
      }
    }
    if (total == 0) continue;
    if (detail) {
      std::printf("  %-58s %-4s %9llu: zstd19 %.3f zstd9 %.3f zstd1 %.3f planes-L1 %.3f "
                  "planes-L9 %.3f planes-L19 %.3f rot-planes-L1 %.3f blz-auto %.3f\n",
                  label.c_str(), FmtName(fmt), (unsigned long long)total, double(z19) / total,
                  double(z9) / total, double(z1) / total, double(planes1) / total,
                  double(planes9) / total, double(planes19) / total, double(rot1) / total,
                  double(blz) / total);
    }
    rows.push_back({label, std::string(FmtName(fmt)) + (cast ? " (cast)" : ""), total, blz, z19,
                    planes19});
  }
  return rows;
}

// The corpus models of the no-base table (gemma2b-lora-f16, all NaN, only in the detail lines).
const char* const kNoBaseModels[] = {
    "tiny-gpt2/ft-v1/model.safetensors",
    "roberta-lora/checkpoint-2400/adapter_model.safetensors",
    "adapters/opt125m-lora-bf16/adapter_model.safetensors",
    "adapters/gpt2-pseudo2code-lora/adapter_model.safetensors",
    "adapters/gemma2b-lora-f16/adapter_model.safetensors",
};

// Runs NoBaseStudy on every kNoBaseModels file found below `corpus` and prints the markdown
// table (sizes in bytes and as fractions of the raw tensor bytes). Returns false if a file
// other than the optional gemma one is missing.
bool NoBaseTable(const std::string& corpus, bool detail) {
  std::vector<NoBaseRow> table;
  bool ok = true;
  for (const char* f : kNoBaseModels) {
    const bool in_table = std::strstr(f, "gemma2b") == nullptr;
    Model m;
    if (!LoadSafetensors(corpus + "/" + f, &m)) {
      std::fprintf(stderr, "cannot read %s/%s\n", corpus.c_str(), f);
      ok = ok && !in_table;
      continue;
    }
    auto rows = NoBaseStudy(f, m, detail);
    if (in_table) table.insert(table.end(), rows.begin(), rows.end());
  }
  auto cell = [](uint64_t bytes, uint64_t total) {
    char c[64];
    std::snprintf(c, sizeof c, "%llu (%.3f)", (unsigned long long)bytes,
                  double(bytes) / double(total));
    return std::string(c);
  };
  std::printf("\n| model | dtype | raw tensor bytes | blz (no base) | zstd -19 | ZipNN-style planes "
              "(zstd 19) | blz / zstd-19 |\n|---|---|---|---|---|---|---|\n");
  for (const NoBaseRow& r : table) {
    std::string model = r.label.substr(0, r.label.rfind('/'));
    std::printf("| %s | %s | %llu | %s | %s | %s | %.3f |\n", model.c_str(), r.dtype.c_str(),
                (unsigned long long)r.total, cell(r.blz, r.total).c_str(),
                cell(r.z19, r.total).c_str(), cell(r.planes19, r.total).c_str(),
                double(r.blz) / double(r.z19));
  }
  return ok;
}

struct Pair {
  std::string name, base, target;
};

// Timing uses this thread's CPU time, not wall time, so that other processes on the machine
// do not skew the MB/s figures (they still share caches).
struct CpuClock {
  using time_point = double;
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  }
};
double Seconds(double t0) { return CpuClock::now() - t0; }

struct AutoResult {
  uint64_t bytes = 0;
  double encode_mbps = 0, decode_mbps = 0, apply_mbps = 0;
  std::map<std::string, uint64_t> codec_bytes;  // target bytes per chosen codec
};

// MB/s of `body` (which processes `bytes` bytes): the best of repeated runs (at least 5, for at
// least 0.3 s of CPU time), so that a busy machine skews the figure as little as possible.
template <typename F>
double BestMBps(uint64_t bytes, F&& body) {
  double best = 1e30, spent = 0;
  for (int run = 0; run < 5 || spent < 0.3; ++run) {
    double t0 = CpuClock::now();
    body();
    double t = Seconds(t0);
    spent += t;
    best = std::min(best, t);
  }
  return double(bytes) / best / 1e6;
}

// Decodes every chunk into `out` (checking it), optionally with the verification an apply
// does: xxh3 of each chunk, SHA-256 of everything.
void DecodeAll(const std::vector<Chunk>& chunks,
               const std::vector<blz::patcher::EncodedChunk>& enc, bool verify, Bytes* out) {
  blz::Sha256 sha;
  for (size_t i = 0; i < chunks.size(); ++i) {
    out->resize(chunks[i].target.size());
    blz::Status st = blz::patcher::DecodeChunk(enc[i].codec, chunks[i].base,
                                               blz::AsBytes(enc[i].payload), chunks[i].e, *out);
    if (!st.ok() || !std::equal(out->begin(), out->end(), chunks[i].target.begin())) {
      std::fprintf(stderr, "DecodeChunk failed or differs: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    if (verify) {
      volatile uint64_t h = blz::Xxh3_64(*out);
      (void)h;
      sha.Update(blz::ByteSpan(*out));
    }
  }
}

// EncodeChunk over every chunk, then DecodeChunk over every chunk, alone and with
// verification; all timed.
AutoResult RunAuto(const std::vector<Chunk>& chunks, bool hint) {
  AutoResult r;
  std::vector<blz::patcher::EncodedChunk> enc;
  uint64_t total = 0;
  for (const Chunk& c : chunks) total += c.target.size();
  r.encode_mbps = BestMBps(total, [&] {
    enc.clear();
    for (const Chunk& c : chunks) {
      auto e = blz::patcher::EncodeChunk(c.base, c.target, c.e, OptionsFor(c.fmt, hint));
      if (!e.ok()) {
        std::fprintf(stderr, "EncodeChunk: %s\n", e.status().ToString().c_str());
        std::exit(1);
      }
      enc.push_back(std::move(e).value());
    }
  });
  for (size_t i = 0; i < chunks.size(); ++i) {
    r.bytes += enc[i].payload.size();
    r.codec_bytes[std::string(blz::patcher::CodecName(enc[i].codec))] += chunks[i].target.size();
  }
  Bytes out;
  r.decode_mbps = BestMBps(total, [&] { DecodeAll(chunks, enc, false, &out); });
  r.apply_mbps = BestMBps(total, [&] { DecodeAll(chunks, enc, true, &out); });
  return r;
}

// Speed of each codec on one full chunk (kChunkBytes) of fine-tune-like data: the real pairs
// are small (most tensors are far below one chunk), real models are not. Base: Gaussian
// weights (sigma 0.02); target: base + Gaussian update (sigma 2e-5), cast like the corpus.
void SyntheticSpeed(Fmt fmt) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> w(0.0f, 0.02f), u(0.0f, 2e-5f);
  size_t n = blz::patcher::kChunkBytes / FmtSize(fmt);
  Bytes b32(n * 4), t32(n * 4);
  for (size_t i = 0; i < n; ++i) {
    float x = w(rng), y = x + u(rng);
    std::memcpy(&b32[i * 4], &x, 4);
    std::memcpy(&t32[i * 4], &y, 4);
  }
  Bytes b = Cast(b32, fmt), t = Cast(t32, fmt);
  const uint32_t e = FmtSize(fmt);
  blz::patcher::CodecOptions o = OptionsFor(fmt, true);
  std::vector<Chunk> one = {{b, t, e, fmt}};
  std::printf("  %-4s", FmtName(fmt));
  for (int c = -1; c <= 6; ++c) {
    if (c == int(Codec::kIdentical)) continue;
    std::vector<blz::patcher::EncodedChunk> enc(1);
    blz::patcher::CodecOptions oc = o;
    if (c == 6) oc.dtype = e == 4 ? blz::formats::DType::kI32 : blz::formats::DType::kI16;
    Codec codec = c == 6 ? Codec::kSubPlanes : Codec(c);
    double enc_mbps = BestMBps(t.size(), [&] {
      if (c < 0) {
        enc[0] = *blz::patcher::EncodeChunk(b, t, e, oc);
      } else {
        enc[0].codec = codec;
        enc[0].payload = *blz::patcher::internal::EncodeWith(codec, b, t, e, oc);
      }
    });
    Bytes out;
    double dec_mbps = BestMBps(t.size(), [&] { DecodeAll(one, enc, false, &out); });
    double ver_mbps = BestMBps(t.size(), [&] { DecodeAll(one, enc, true, &out); });
    std::printf("\n    %s%s%s %.3f enc %.0f dec %.0f dec+verify %.0f", c < 0 ? "auto=" : "",
                std::string(blz::patcher::CodecName(enc[0].codec)).c_str(),
                c == 6 ? " (ungrouped)" : "",
                double(enc[0].payload.size()) / double(t.size()), enc_mbps, dec_mbps,
                ver_mbps);
  }
  std::printf("\n");
}

// The chunks of a pair as the patch container cuts them: every target tensor in kChunkBytes
// pieces, each with the same piece of the same-name, same-dtype, same-shape base tensor (or no
// base). Byte-identical tensors are counted in `identical` and get no chunks. With `cast`, only
// the F32 tensors are used, cast to *cast; without, every tensor must be F32, BF16 or F16 and
// is used as stored.
struct PairChunks {
  uint64_t total = 0, identical = 0;  // target tensor bytes
  std::vector<Bytes> keep;            // owns the cast bytes the chunks point at
  std::vector<Chunk> chunks;
};

bool FmtOfDtype(const std::string& dtype, Fmt* fmt) {
  if (dtype == "F32") *fmt = Fmt::kF32;
  else if (dtype == "BF16") *fmt = Fmt::kBF16;
  else if (dtype == "F16") *fmt = Fmt::kF16;
  else return false;
  return true;
}

// Fills *out (which must be empty); false (with a message) on a tensor it cannot handle.
bool BuildPairChunks(const Model& base, const Model& target, std::optional<Fmt> cast,
                     PairChunks* out) {
  out->keep.reserve(2 * target.size());  // no reallocation: chunks point into keep
  for (const auto& [name, tt] : target) {
    Fmt fmt = Fmt::kF32;
    if (cast) {
      if (tt.dtype != "F32") continue;
      fmt = *cast;
    } else if (!FmtOfDtype(tt.dtype, &fmt)) {
      std::fprintf(stderr, "tensor '%s': dtype %s is not F32, BF16 or F16\n", name.c_str(),
                   tt.dtype.c_str());
      return false;
    }
    const Bytes* tb = &tt.data;
    if (cast) {
      out->keep.push_back(Cast(tt.data, fmt));
      tb = &out->keep.back();
    }
    out->total += tb->size();
    auto it = base.find(name);
    const bool has_base =
        it != base.end() && it->second.dtype == tt.dtype && it->second.shape == tt.shape;
    const Bytes* bb = nullptr;
    if (has_base) {
      bb = &it->second.data;
      if (cast) {
        out->keep.push_back(Cast(it->second.data, fmt));
        bb = &out->keep.back();
      }
    }
    if (has_base && *bb == *tb) {
      out->identical += tb->size();
      continue;
    }
    for (uint64_t off = 0; off < tb->size(); off += blz::patcher::kChunkBytes) {
      uint64_t len = std::min<uint64_t>(blz::patcher::kChunkBytes, tb->size() - off);
      out->chunks.push_back({has_base ? ByteSpan(*bb).subspan(off, len) : ByteSpan(),
                             ByteSpan(*tb).subspan(off, len), FmtSize(fmt), fmt});
    }
  }
  return true;
}

// Total size of a scheme over the chunks; chunks with no base cost zstd 9 in the delta-only
// schemes (the references have no no-base mode).
uint64_t SchemeBytes(const Scheme& sc, const std::vector<Chunk>& chunks) {
  uint64_t sz = 0;
  for (const Chunk& c : chunks) {
    sz += (sc.delta_only && c.base.empty()) ? ZstdSize(c.target.data(), c.target.size(), 9)
                                            : sc.size(c);
  }
  return sz;
}

// --refs A B: the two reference schemes on one pair of safetensors files, as stored.
int RefsMode(const std::string& a, const std::string& b) {
  Model base, target;
  if (!LoadSafetensors(a, &base) || !LoadSafetensors(b, &target)) {
    std::fprintf(stderr, "codec_lab --refs: cannot read %s or %s\n", a.c_str(), b.c_str());
    return 1;
  }
  PairChunks pc;
  if (!BuildPairChunks(base, target, std::nullopt, &pc)) return 1;
  auto schemes = Schemes();
  std::printf("%llu %llu %llu\n", (unsigned long long)SchemeBytes(schemes[kFullXor], pc.chunks),
              (unsigned long long)SchemeBytes(schemes[kBitX], pc.chunks),
              (unsigned long long)pc.total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef BLZ_CORPUS_DIR
  std::string corpus = BLZ_CORPUS_DIR;
#else
  std::string corpus = "../shared/corpus";
#endif
  bool explore = false, nobase_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--explore") {
      explore = true;
    } else if (a == "--nobase") {
      nobase_only = true;
    } else if (a == "--refs") {
      if (argc != i + 3) {
        std::fprintf(stderr, "usage: codec_lab --refs BASE.safetensors TARGET.safetensors\n");
        return 2;
      }
      return RefsMode(argv[i + 1], argv[i + 2]);
    } else if (a.rfind("--", 0) != 0) {
      corpus = a;
    } else {
      std::fprintf(stderr, "codec_lab: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (nobase_only) return NoBaseTable(corpus, /*detail=*/false) ? 0 : 1;
  std::printf("codec_lab: chunk %llu bytes; BF16 and F16 are this program's casts of the F32 "
              "files (round to nearest even)\n",
              (unsigned long long)blz::patcher::kChunkBytes);
  {
    // Calibration: what this machine does right now (other processes share the cores).
    Bytes a(blz::patcher::kChunkBytes, 1), b(a.size());
    double copy = BestMBps(a.size(), [&] { std::memcpy(b.data(), a.data(), a.size()); });
    double verify = BestMBps(a.size(), [&] {
      volatile uint64_t h = blz::Xxh3_64(a);
      (void)h;
      blz::Sha256 sha;
      sha.Update(blz::ByteSpan(a));
    });
    std::printf("\nCalibration (1 thread): memcpy %.0f MB/s; xxh3 + sha256 alone %.0f MB/s\n",
                copy, verify);
  }
  std::printf("\nOne synthetic %llu-byte fine-tune chunk: size/target, encode and decode MB/s "
              "(1 thread), per codec\n", (unsigned long long)blz::patcher::kChunkBytes);
  for (Fmt f : {Fmt::kF32, Fmt::kBF16, Fmt::kF16}) SyntheticSpeed(f);
  if (std::getenv("LAB_SPEED_ONLY") != nullptr) return 0;
  std::printf("\nNo base (each model alone), size / raw tensor bytes:\n");
  if (!NoBaseTable(corpus, /*detail=*/true)) return 1;
  std::vector<Pair> pairs = {
      {"tiny-gpt2 base->ft-v1", "tiny-gpt2/base/model.safetensors",
       "tiny-gpt2/ft-v1/model.safetensors"},
      {"roberta-lora 500->1000", "roberta-lora/checkpoint-500/adapter_model.safetensors",
       "roberta-lora/checkpoint-1000/adapter_model.safetensors"},
      {"roberta-lora 1000->2000", "roberta-lora/checkpoint-1000/adapter_model.safetensors",
       "roberta-lora/checkpoint-2000/adapter_model.safetensors"},
      {"roberta-lora 2000->2400", "roberta-lora/checkpoint-2000/adapter_model.safetensors",
       "roberta-lora/checkpoint-2400/adapter_model.safetensors"},
  };
  auto schemes = Schemes();
  if (explore) {
    auto x = ExploreSchemes();
    schemes.insert(schemes.end(), x.begin(), x.end());
  }
  std::map<std::string, double> log_ratio_sum;  // vs BitX, for the geometric mean
  std::map<std::string, double> worst;
  int n_rows = 0;
  std::vector<std::string> summary;
  for (const auto& p : pairs) {
    Model base, target;
    if (!LoadSafetensors(corpus + "/" + p.base, &base) ||
        !LoadSafetensors(corpus + "/" + p.target, &target)) {
      std::fprintf(stderr, "cannot read %s (corpus dir %s)\n", p.name.c_str(), corpus.c_str());
      return 1;
    }
    for (Fmt fmt : {Fmt::kF32, Fmt::kBF16, Fmt::kF16}) {
      PairChunks pc;
      if (!BuildPairChunks(base, target, fmt, &pc)) return 1;
      const uint64_t total = pc.total, identical = pc.identical;
      const std::vector<Chunk>& chunks = pc.chunks;
      std::vector<std::string> names;
      std::vector<uint64_t> sizes;
      for (const auto& sc : schemes) {
        names.push_back(sc.name);
        sizes.push_back(SchemeBytes(sc, chunks));
      }
      AutoResult hinted = RunAuto(chunks, true), unhinted = RunAuto(chunks, false);
      names.push_back("blz auto (dtype hint)");
      sizes.push_back(hinted.bytes);
      names.push_back("blz auto (no hint)");
      sizes.push_back(unhinted.bytes);
      std::printf("\n== %s, %s: target %llu bytes (%llu in identical tensors)\n", p.name.c_str(),
                  FmtName(fmt), (unsigned long long)total, (unsigned long long)identical);
      uint64_t ref = sizes[kBitX];
      for (size_t s = 0; s < names.size(); ++s) {
        double r = double(sizes[s]) / double(ref);
        std::printf("  %-30s %10llu  %6.3f of target  %6.3fx BitX\n", names[s].c_str(),
                    (unsigned long long)sizes[s], double(sizes[s]) / double(total), r);
        log_ratio_sum[names[s]] += std::log(r);
        worst[names[s]] = std::max(worst[names[s]], r);
      }
      std::printf("  blz auto: encode %.0f MB/s, decode %.0f MB/s, decode+xxh3+sha256 %.0f MB/s "
                  "(1 thread); codecs:", hinted.encode_mbps, hinted.decode_mbps,
                  hinted.apply_mbps);
      for (const auto& [codec, bytes] : hinted.codec_bytes) {
        std::printf(" %s %.0f%%", codec.c_str(), 100.0 * double(bytes) / double(total));
      }
      std::printf("\n");
      char line[512];
      std::snprintf(line, sizeof line,
                    "| %-24s | %-4s | %9llu | %9llu | %9llu | %9llu | %9llu | %5.3f | %4.0f | %4.0f | %4.0f |",
                    p.name.c_str(), FmtName(fmt), (unsigned long long)total,
                    (unsigned long long)sizes[0], (unsigned long long)sizes[1],
                    (unsigned long long)sizes[kBitX], (unsigned long long)hinted.bytes,
                    double(hinted.bytes) / double(ref), hinted.encode_mbps, hinted.decode_mbps,
                    hinted.apply_mbps);
      summary.push_back(line);
      ++n_rows;
    }
  }
  std::printf("\n== size / ZipLLM-BitX size over %d pair-casts: geometric mean, worst\n", n_rows);
  for (const auto& [name, sum] : log_ratio_sum) {
    std::printf("  %-30s %6.3fx  %6.3fx\n", name.c_str(), std::exp(sum / n_rows), worst[name]);
  }
  std::printf("\n| pair | cast | target | zstd9 | FullXor | BitX | blz | blz/BitX | enc MB/s | dec MB/s | dec+verify MB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& l : summary) std::printf("%s\n", l.c_str());
  return 0;
}
