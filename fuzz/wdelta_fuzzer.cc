// fuzz_wdelta: the .wdelta reader (formats/wdelta.h) and the reference's three decoders
// (patcher/lossy/wdelta_strategies.h). The input is opened twice: as is, and with its last 32
// bytes replaced by the SHA-256 of the rest (so mutations reach the checks behind the
// checksum). For an accepted file, every header tensor's payload is read and, when its shape
// has at most 2^20 elements, decoded onto a float32 buffer with the decoder its strategy names.
// Properties: the records of the header tensors fit in the file (sum of TensorBytes <= size);
// every field view has dtype x shape bytes; a decode either fails with a status or leaves a
// buffer of the same size; an accepted input cut by one byte is rejected (the checksum covers
// everything up to the end).
// Seeds: files written by WriteWdelta from the encoders (v1 and v2; sparse, quantized and int4
// of 1-D, 2-D and odd-sized tensors; an extra record and a "blz" header key).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/wdelta.h"
#include "fuzz/fuzz_util.h"
#include "patcher/lossy/payload.h"
#include "patcher/lossy/payload_check.h"
#include "patcher/lossy/wdelta_strategies.h"

namespace {

namespace fm = blz::formats;
namespace lossy = blz::lossy;

constexpr uint64_t kMaxDecodeElements = 1 << 20;

void WriteSeeds() {
  std::vector<float> d(35);
  for (size_t i = 0; i < d.size(); ++i) d[i] = float(int(i * 7 % 11) - 5) / 8.0f;
  for (uint32_t version : {1u, 2u}) {
    fm::WdeltaFileOut f;
    f.version = version;
    f.parent_hash = std::string(64, '0');
    f.strategy = "auto";
    auto add = [&](blz::Result<fm::WdeltaTensorOut> t) {
      blz::fuzz::MustOk(t.status(), "encode");
      f.tensors.push_back(std::move(*t));
    };
    add(lossy::EncodeSparse("a.sparse", d, {7, 5}, 0.5));
    add(lossy::EncodeQuantized("b.quantized", d, {7, 5}));
    add(lossy::EncodeQuantized("c.quantized1d", std::span<const float>(d).first(11), {11}));
    add(lossy::EncodeInt4("d.int4", d, {35}, 0.1, version));
    add(lossy::EncodeInt4("e.int4", std::span<const float>(d).first(6), {2, 3}, 0.01, version));
    f.extra["blz"] = {{"note", "seed"}};
    f.extra_records.push_back({{"__file__", "config.json"}, fm::WdeltaArray{"uint8", {2}, {'{', '}'}}});
    const std::string path = blz::fuzz::TempPath("seed.wdelta");
    blz::fuzz::MustOk(fm::WriteWdelta(path, f), "WriteWdelta");
    blz::fuzz::WriteSeed("v" + std::to_string(version) + ".wdelta", blz::fuzz::ReadAll(path));
  }
}

// Opens `bytes` as a .wdelta; on success decodes what it can. Returns whether Open accepted.
bool Exercise(const std::string& bytes) {
  const std::string path = blz::fuzz::TempPath("in.wdelta");
  blz::fuzz::WriteBytes(path, blz::AsBytes(std::string_view(bytes)));
  auto reader = fm::WdeltaReader::Open(path);
  if (!reader.ok()) return false;
  uint64_t record_bytes = 0;
  for (const auto& name : reader->names()) {
    record_bytes += reader->TensorBytes(name);
    auto payload = lossy::ReadPayload(*reader, name);
    if (!payload.ok()) continue;
    for (const auto& [field, view] : payload->fields) {
      auto item = fm::WdeltaItemSize(view.dtype);
      blz::fuzz::Check(item.ok(), "an accepted record has a known dtype");
      uint64_t n = *item;
      for (uint64_t dim : view.shape) n *= dim;  // no overflow: Open checked it
      blz::fuzz::Check(n == view.bytes.size(), "a field view has dtype x shape bytes");
    }
    const auto& meta = *payload->meta;
    std::vector<uint64_t> shape;
    bool sizes = true;
    for (const auto& v : meta["shape"]) {
      if (!v.is_number_unsigned()) sizes = false;
      else shape.push_back(v.get<uint64_t>());
    }
    auto count = lossy::ShapeElements(shape);
    if (!sizes || !count.ok() || *count > kMaxDecodeElements) continue;
    std::vector<float> acc(*count, 1.0f);
    const std::string strategy = meta["strategy"].get<std::string>();
    blz::Status s;
    if (strategy == "sparse") s = lossy::DecodeAddSparse(*payload, acc);
    else if (strategy == "quantized") s = lossy::DecodeAddQuantized(*payload, acc);
    else if (strategy == "int4") s = lossy::DecodeAddInt4(*payload, acc);
    blz::fuzz::Check(acc.size() == *count, "decoding keeps the buffer size");
    // Wrong-size buffers are refused, never written past.
    std::vector<float> short_acc(*count > 0 ? *count - 1 : 1, 0.0f);
    if (strategy == "sparse") s = lossy::DecodeAddSparse(*payload, short_acc);
    else if (strategy == "quantized") s = lossy::DecodeAddQuantized(*payload, short_acc);
    else if (strategy == "int4") s = lossy::DecodeAddInt4(*payload, short_acc);
    else continue;
    blz::fuzz::Check(!s.ok(), "a buffer of the wrong size is refused");
  }
  blz::fuzz::Check(record_bytes <= reader->file_size(), "header tensors' records fit in the file");
  return true;
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (Exercise(bytes)) {
    blz::fuzz::Check(!Exercise(bytes.substr(0, size - 1)), "a truncated file is rejected");
  }
  if (size >= 47) {
    const blz::Sha256Bytes sum =
        blz::Sha256Of(blz::ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), size - 32));
    std::memcpy(bytes.data() + size - 32, sum.data(), 32);
    (void)Exercise(bytes);
  }
  return 0;
}
