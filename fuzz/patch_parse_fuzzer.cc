// fuzz_patch_parse: the .blzpatch container parser (patcher/patch_format.h ParsePatch: fixed
// header + canonical JSON header + payload layout) on the input as a whole patch file.
// Property: a version-2 header it accepts re-serializes (SerializePatchHeader) to exactly the
// input's JSON bytes (the parser demands the canonical form).
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "patcher/patch.h"
#include "patcher/patch_format.h"

namespace {

void WriteSeeds() {
  std::string work = blz::fuzz::TempPath("seeds");
  std::string a = work + "/a.blz", b = work + "/b.blz";
  blz::fuzz::MakeTinyArchive(work, a, 1, 0);
  blz::fuzz::MakeTinyArchive(work, b, 1, 5);
  blz::patcher::DiffOptions options;
  options.threads = 1;
  blz::patcher::DiffStats stats;
  blz::fuzz::MustOk(blz::patcher::CreatePatch(a, b, work + "/ab.blzpatch", options, &stats),
                    "CreatePatch");
  blz::fuzz::MustOk(blz::patcher::CreatePatch(a, a, work + "/aa.blzpatch", options, &stats),
                    "CreatePatch");
  blz::fuzz::MustOk(blz::patcher::CreateFullPatch(b, work + "/b.blzpatch", options, &stats),
                    "CreateFullPatch");
  for (const char* name : {"ab.blzpatch", "aa.blzpatch", "b.blzpatch"}) {
    blz::fuzz::WriteSeed(std::string("crafted_") + name, blz::fuzz::ReadAll(work + "/" + name));
  }
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace pi = blz::patcher::internal;
  blz::ByteSpan bytes(data, size);
  auto h = pi::ParsePatch(bytes, size, "fuzz.blzpatch");
  if (!h.ok()) return 0;
  blz::fuzz::Check(h->payload_start <= size && h->payload_bytes == size - h->payload_start,
                   "payload section ends at the end of the input");
  if (h->version == pi::kPatchVersion) {
    auto json = pi::SerializePatchHeader(*h);
    blz::fuzz::Check(json.ok(), "an accepted header serializes");
    blz::fuzz::Check(pi::kPatchFixedBytes + json->size() == h->payload_start &&
                         *json == blz::AsChars(bytes.subspan(pi::kPatchFixedBytes, json->size())),
                     "an accepted header is in canonical form");
  }
  return 0;
}
