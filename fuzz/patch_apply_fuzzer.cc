// fuzz_patch_apply: a whole patch file through ReadPatchInfo, VerifyPatch and ApplyPatch (with
// the fixed base archive made at start-up) or ApplyFullPatch (no base), as the patch's header
// asks. The input is written to a temp file (the APIs take paths); the output goes to the same
// temp dir and is removed. Properties: VerifyPatch and Apply* agree; on success the output's
// size is the one ReadPatchInfo announced; nothing is left at the output path on failure.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_util.h"
#include "patcher/patch.h"

namespace {

std::string g_base;

void WriteSeeds() {
  std::string work = blz::fuzz::TempPath("seeds");
  std::string b = work + "/b.blz", c = work + "/c.blz";
  blz::fuzz::MakeTinyArchive(work, b, 1, 5);
  blz::fuzz::MakeTinyArchive(work, c, 9, 0);
  blz::patcher::DiffOptions options;
  options.threads = 1;
  blz::patcher::DiffStats stats;
  blz::fuzz::MustOk(blz::patcher::CreatePatch(g_base, b, work + "/ab.blzpatch", options, &stats),
                    "CreatePatch");
  blz::fuzz::MustOk(blz::patcher::CreatePatch(g_base, c, work + "/ac.blzpatch", options, &stats),
                    "CreatePatch");
  blz::fuzz::MustOk(
      blz::patcher::CreatePatch(g_base, g_base, work + "/aa.blzpatch", options, &stats),
      "CreatePatch");
  blz::fuzz::MustOk(blz::patcher::CreateFullPatch(b, work + "/b.blzpatch", options, &stats),
                    "CreateFullPatch");
  for (const char* name : {"ab.blzpatch", "ac.blzpatch", "aa.blzpatch", "b.blzpatch"}) {
    blz::fuzz::WriteSeed(std::string("crafted_") + name, blz::fuzz::ReadAll(work + "/" + name));
  }
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The base every patch is applied to: the archive of blz::fuzz::MakeTinyArchive(seed 1).
  g_base = blz::fuzz::TempPath("base.blz");
  blz::fuzz::MakeTinyArchive(blz::fuzz::TempPath("work"), g_base, 1, 0);
  blz::fuzz::WriteSeedsAndExitIfAsked(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string patch = blz::fuzz::TempPath("input.blzpatch");
  static const std::string out = blz::fuzz::TempPath("out.blz");
  blz::fuzz::WriteBytes(patch, blz::ByteSpan(data, size));
  auto info = blz::patcher::ReadPatchInfo(patch);
  if (!info.ok()) return 0;
  blz::patcher::ApplyOptions options;
  options.threads = 1;
  blz::patcher::ApplyStats verify_stats, apply_stats;
  blz::Status verified = blz::patcher::VerifyPatch(info->full ? "" : g_base, patch,
                                                   &verify_stats, options);
  blz::Status applied =
      info->full ? blz::patcher::ApplyFullPatch(patch, out, &apply_stats, options)
                 : blz::patcher::ApplyPatch(g_base, patch, out, &apply_stats, options);
  blz::fuzz::Check(verified.ok() == applied.ok(), "VerifyPatch and Apply agree");
  if (applied.ok()) {
    std::error_code ec;
    blz::fuzz::Check(std::filesystem::file_size(out, ec) == info->target_bytes,
                     "the output has the announced size");
    std::filesystem::remove(out);
  } else {
    blz::fuzz::Check(!Exists(out), "nothing is left at the output path on failure");
  }
  return 0;
}
