// fuzz_gguf: the GGUF reader in both modes (kHeaderOnly, kFull), the writer round trip and the
// structural hash. Properties: whatever kFull accepts, kHeaderOnly accepts with the same
// header; EncodeGgufHeader re-encodes the accepted header to exactly the input's header bytes;
// WriteGguf with the file's tensor bytes and padded_end reproduces the input byte for byte;
// the structural hash of an accepted header is 64 hex digits.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/structural_hash.h"
#include "fuzz/fuzz_util.h"

namespace {

using blz::formats::GgmlType;
using blz::formats::GgufHeader;
using blz::formats::GgufType;
using blz::formats::GgufValue;

std::string Write(const GgufHeader& in, bool pad_end, std::vector<std::string>* data_out) {
  GgufHeader h = in;
  blz::fuzz::MustOk(blz::formats::AssignGgufOffsets(&h), "AssignGgufOffsets");
  std::vector<std::string> data;
  std::vector<blz::ByteSpan> spans;
  for (size_t i = 0; i < h.tensors.size(); ++i) data.emplace_back(h.tensors[i].n_bytes, char(i + 1));
  for (const auto& d : data) spans.push_back(blz::AsBytes(d));
  std::string out;
  blz::fuzz::MustOk(blz::formats::WriteGguf(h, spans, {pad_end},
                                            [&out](blz::ByteSpan b) {
                                              out.append(blz::AsChars(b));
                                              return blz::Status::Ok();
                                            }),
                    "WriteGguf");
  if (data_out != nullptr) *data_out = std::move(data);
  return out;
}

void WriteSeeds() {
  GgufHeader h;
  h.version = 3;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  h.metadata.push_back({"general.alignment", GgufValue::U32(32)});
  h.metadata.push_back({"u8", GgufValue::U8(7)});
  h.metadata.push_back({"i8", GgufValue::I8(-3)});
  h.metadata.push_back({"u16", GgufValue::U16(300)});
  h.metadata.push_back({"i16", GgufValue::I16(-300)});
  h.metadata.push_back({"i32", GgufValue::I32(-70000)});
  h.metadata.push_back({"f32", GgufValue::F32(0.5f)});
  h.metadata.push_back({"b", GgufValue::Bool(true)});
  h.metadata.push_back({"u64", GgufValue::U64(1ull << 40)});
  h.metadata.push_back({"i64", GgufValue::I64(-5)});
  h.metadata.push_back({"f64", GgufValue::F64(-2.25)});
  std::vector<GgufValue> strs = {GgufValue::String("a"), GgufValue::String("bc")};
  auto sarr = GgufValue::Array(GgufType::kString, strs);
  blz::fuzz::MustOk(sarr.status(), "string array");
  h.metadata.push_back({"tokenizer.ggml.tokens", *sarr});
  std::vector<GgufValue> ints = {GgufValue::I32(1), GgufValue::I32(2), GgufValue::I32(3)};
  auto iarr = GgufValue::Array(GgufType::kInt32, ints);
  blz::fuzz::MustOk(iarr.status(), "int array");
  h.metadata.push_back({"ints", *iarr});
  std::vector<GgufValue> nested = {*iarr, *iarr};
  auto narr = GgufValue::Array(GgufType::kArray, nested);
  blz::fuzz::MustOk(narr.status(), "nested array");
  h.metadata.push_back({"nested", *narr});
  h.tensors.push_back({"tok_embd.weight", {4, 2}, GgmlType::kF32, 0, 0});
  h.tensors.push_back({"norm.weight", {4}, GgmlType::kF16, 0, 0});
  h.tensors.push_back({"q.weight", {32, 2}, GgmlType::kQ4_0, 0, 0});
  h.tensors.push_back({"k.weight", {256}, GgmlType::kQ4_K, 0, 0});
  h.tensors.push_back({"bf.weight", {3}, GgmlType::kBF16, 0, 0});
  std::string padded = Write(h, true, nullptr);
  blz::fuzz::WriteSeed("crafted_v3_padded.gguf", padded);
  blz::fuzz::WriteSeed("crafted_v3_unpadded.gguf", Write(h, false, nullptr));
  blz::fuzz::WriteSeed("crafted_v3_truncated.gguf", padded.substr(0, padded.size() / 2));
  GgufHeader v2;
  v2.version = 2;
  v2.metadata.push_back({"general.alignment", GgufValue::U32(64)});
  v2.tensors.push_back({"t", {2, 2, 2, 2}, GgmlType::kI8, 0, 0});
  v2.tensors.push_back({"u", {1}, GgmlType::kF64, 0, 0});
  blz::fuzz::WriteSeed("crafted_v2.gguf", Write(v2, true, nullptr));
  GgufHeader empty;
  blz::fuzz::WriteSeed("crafted_empty.gguf", Write(empty, false, nullptr));
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using blz::formats::GgufMode;
  blz::ByteSpan bytes(data, size);
  auto head = blz::formats::ParseGguf(bytes, GgufMode::kHeaderOnly, "fuzz.gguf");
  auto full = blz::formats::ParseGguf(bytes, GgufMode::kFull, "fuzz.gguf");
  if (full.ok()) {
    blz::fuzz::Check(head.ok(), "kHeaderOnly accepts what kFull accepts");
    blz::fuzz::Check(head->header == full->header, "both modes read the same header");
    // Writer round trip: the same bytes.
    std::vector<blz::ByteSpan> spans;
    for (size_t i = 0; i < full->header.tensors.size(); ++i) {
      uint64_t begin = full->TensorBegin(i);
      uint64_t n = full->header.tensors[i].n_bytes;
      blz::fuzz::Check(begin <= size && n <= size - begin, "kFull tensor inside the input");
      spans.push_back(bytes.subspan(begin, n));
    }
    std::string out;
    blz::Status s = blz::formats::WriteGguf(full->header, spans, {full->padded_end},
                                            [&out](blz::ByteSpan b) {
                                              out.append(blz::AsChars(b));
                                              return blz::Status::Ok();
                                            });
    blz::fuzz::Check(s.ok(), "WriteGguf accepts a header the reader accepted");
    blz::fuzz::Check(out == blz::AsChars(bytes), "WriteGguf reproduces the input");
  }
  if (head.ok()) {
    auto enc = blz::formats::EncodeGgufHeader(head->header);
    blz::fuzz::Check(enc.ok(), "EncodeGgufHeader accepts a header the reader accepted");
    blz::fuzz::Check(enc->size() == head->header_bytes &&
                         *enc == blz::AsChars(bytes.subspan(0, head->header_bytes)),
                     "EncodeGgufHeader reproduces the header bytes");
    blz::formats::StructuralInput in = blz::formats::StructuralInputFromGguf(head->header);
    std::string hash = blz::formats::StructuralHash(in);
    blz::fuzz::Check(hash.size() == 64, "structural hash is 64 hex digits");
    (void)blz::formats::CanonicalJson(in);
  }
  return 0;
}
