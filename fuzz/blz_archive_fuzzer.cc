// fuzz_blz_archive: the .blz archive prefix parser (ParseArchivePrefix) on the input as a whole
// archive; when it accepts, the input is written to a temp file and opened (BlzArchive::Open),
// verified (Verify: every hash and every stored safetensors/GGUF header against its pieces) and
// identified (StructuralInputFromArchive). Property: Open accepts what ParseArchivePrefix
// accepts, with the same layout.
#include <cstdint>
#include <string>

#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "formats/structural_hash.h"
#include "fuzz/fuzz_util.h"

namespace {

void WriteSeeds() {
  std::string work = blz::fuzz::TempPath("seeds");
  std::string a = work + "/a.blz", b = work + "/b.blz";
  blz::fuzz::MakeTinyArchive(work, a, 1, 0);
  blz::fuzz::MakeTinyArchive(work, b, 2, 3);
  blz::fuzz::WriteSeed("crafted_a.blz", blz::fuzz::ReadAll(a));
  blz::fuzz::WriteSeed("crafted_b.blz", blz::fuzz::ReadAll(b));
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blz::ByteSpan bytes(data, size);
  auto prefix = blz::formats::ParseArchivePrefix(bytes, size);
  if (!prefix.ok()) return 0;
  blz::fuzz::Check(prefix->total_size == size && prefix->data_start <= size,
                   "prefix layout inside the input");
  static const std::string path = blz::fuzz::TempPath("input.blz");
  blz::fuzz::WriteBytes(path, bytes);
  auto archive = blz::formats::BlzArchive::Open(path);
  blz::fuzz::Check(archive.ok(), "Open accepts what ParseArchivePrefix accepts");
  blz::fuzz::Check(archive->header().data_start == prefix->data_start &&
                       archive->header().tensors.size() == prefix->tensors.size(),
                   "Open and ParseArchivePrefix agree");
  for (size_t i = 0; i < archive->header().tensors.size(); ++i) {
    (void)archive->TensorData(i);
  }
  for (size_t i = 0; i < archive->header().raws.size(); ++i) (void)archive->RawData(i);
  (void)archive->Verify();
  auto id = blz::formats::StructuralInputFromArchive(*archive);
  if (id.ok()) (void)blz::formats::StructuralHash(*id);
  return 0;
}
