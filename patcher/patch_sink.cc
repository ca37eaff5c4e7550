#include "patcher/patch_sink.h"

#include <algorithm>

namespace blz::patcher {

Status FeedArchiveToSink(const formats::BlzArchive& archive, TargetSink* sink,
                         const ProgressCallback& progress) {
  constexpr size_t kSlice = 8u << 20;
  const formats::ArchiveHeader& header = archive.header();
  BLZ_RETURN_IF_ERROR(sink->Begin(header));
  uint64_t total = 0, done = 0;
  for (const formats::ArchiveRaw& r : header.raws) total += r.length;
  for (const formats::ArchiveTensor& t : header.tensors) total += t.length;
  for (const formats::ArchiveFile& f : header.files) {
    for (const formats::ArchivePiece& p : f.pieces) {
      const ByteSpan data = p.kind == formats::ArchivePiece::Kind::kRaw
                                ? archive.RawData(p.index)
                                : archive.TensorData(p.index);
      for (size_t at = 0; at < data.size(); at += kSlice) {
        const ByteSpan slice = data.subspan(at, std::min(kSlice, data.size() - at));
        BLZ_RETURN_IF_ERROR(sink->Data(p, at, slice));
        done += slice.size();
        if (progress) progress(done, total);
      }
    }
  }
  return Status::Ok();
}

}  // namespace blz::patcher
