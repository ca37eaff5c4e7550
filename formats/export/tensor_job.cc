#include "formats/export/tensor_job.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/checked.h"
#include "core/ordered_pipeline.h"

namespace blz::exporter {

using formats::ValueTensor;
using formats::ValueType;

namespace {

// Byte-copy chunks (no decode) are views of this many bytes into the source map.
constexpr uint64_t kCopyChunkBytes = uint64_t{64} << 20;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

Status JobError(const ExportJob& job, const std::string& what) {
  return InvalidArgument("tensor " + Quote(job.name) + ": " + what);
}

uint64_t Product(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // checked by PrepareJob
  return n;
}

// Row length (innermost dimension) of a C-order shape; the element count for 0-/1-D.
uint64_t RowLength(const std::vector<uint64_t>& shape) {
  return shape.size() >= 2 ? shape.back() : Product(shape);
}

struct Chunk {
  size_t job = 0;
  uint64_t first = 0;  // elements (kNone / copy: bytes for copy) or output rows
  uint64_t count = 0;
  bool begins = false;  // first chunk of its tensor
  bool ends = false;    // last chunk of its tensor
};

struct ChunkOut {
  std::vector<uint8_t> owned;
  ByteSpan view;  // what to write: owned's bytes or a view into the source map
  CastError error;
};

// Elements of output rows [first, first + count) in output order, into `out`.
Status GatherRows(const ExportJob& job, uint64_t first, uint64_t count, std::span<float> out) {
  const ValueTensor& src = *job.source;
  const ValueType type = *src.type;
  const uint64_t src_rows = src.shape.empty() ? 1 : src.shape[0];
  const uint64_t src_cols = src.elements / (src_rows == 0 ? 1 : src_rows);
  if (job.transform == RowTransform::kTranspose) {
    // Output row r is source column r: walk the source row by row, keeping columns
    // [first, first + count).
    std::vector<float> row(src_cols);
    for (uint64_t i = 0; i < src_rows; ++i) {
      BLZ_RETURN_IF_ERROR(formats::DecodeElements(type, src.data, src.elements, i * src_cols,
                                                  std::span<float>(row)));
      for (uint64_t r = 0; r < count; ++r) out[r * src_rows + i] = row[first + r];
    }
    return Status::Ok();
  }
  for (uint64_t r = 0; r < count; ++r) {
    uint64_t s = SourceRow(job.transform, job.heads, src_rows, first + r);
    BLZ_RETURN_IF_ERROR(formats::DecodeElements(
        type, src.data, src.elements, s * src_cols,
        out.subspan(r * src_cols, src_cols)));
  }
  return Status::Ok();
}

Result<ChunkOut> ProduceChunk(const ExportJob& job, const Chunk& c) {
  ChunkOut out;
  const ValueTensor& src = *job.source;
  if (!job.cast) {
    out.view = src.data.subspan(c.first, c.count);
    return out;
  }
  uint64_t elements = c.count;
  if (job.transform != RowTransform::kNone) elements = c.count * RowLength(job.shape);
  std::vector<float> values(elements);
  if (job.transform == RowTransform::kNone) {
    BLZ_RETURN_IF_ERROR(formats::DecodeElements(*src.type, src.data, src.elements, c.first,
                                                std::span<float>(values)));
  } else {
    BLZ_RETURN_IF_ERROR(GatherRows(job, c.first, c.count, values));
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t bytes, CastBytes(*job.cast, elements));
  out.owned.resize(bytes);
  Status s = CastFloats(values, *job.cast, out.owned, IsLossy(*job.cast) ? &out.error : nullptr);
  if (!s.ok()) {
    return Status(s.code(), "tensor " + Quote(job.name) + " (elements from " +
                                std::to_string(c.first) + "): " + s.message());
  }
  out.view = ByteSpan(out.owned.data(), out.owned.size());
  return out;
}

// Splits every job into chunks, in output order.
std::vector<Chunk> PlanChunks(const std::vector<ExportJob>& jobs,
                              const std::vector<size_t>& order) {
  std::vector<Chunk> chunks;
  for (size_t j : order) {
    const ExportJob& job = jobs[j];
    size_t start = chunks.size();
    if (!job.cast) {
      for (uint64_t b = 0; b < job.out_bytes; b += kCopyChunkBytes) {
        chunks.push_back({j, b, std::min(kCopyChunkBytes, job.out_bytes - b)});
      }
    } else if (job.transform == RowTransform::kNone) {
      uint64_t n = Product(job.shape);
      for (uint64_t e = 0; e < n; e += kExportChunkElements) {
        chunks.push_back({j, e, std::min(kExportChunkElements, n - e)});
      }
    } else {
      uint64_t cols = std::max<uint64_t>(1, RowLength(job.shape));
      uint64_t rows = Product(job.shape) / cols;
      uint64_t step = std::max<uint64_t>(1, kExportChunkElements / cols);
      for (uint64_t r = 0; r < rows; r += step) {
        chunks.push_back({j, r, std::min(step, rows - r)});
      }
    }
    if (chunks.size() == start) chunks.push_back({j, 0, 0});  // an empty tensor
    chunks[start].begins = true;
    chunks.back().ends = true;
  }
  return chunks;
}

}  // namespace

uint64_t SourceRow(RowTransform t, uint32_t heads, uint64_t rows, uint64_t r) {
  if ((t != RowTransform::kLlamaPermute && t != RowTransform::kLlamaUnpermute) || heads == 0) {
    return r;
  }
  const uint64_t hd = rows / heads, half = hd / 2;
  const uint64_t h = r / hd, k = r % hd;
  if (t == RowTransform::kLlamaPermute) {
    // Output (h, i, j) at k = i * 2 + j comes from source (h, j, i) at j * half + i.
    return h * hd + (k % 2) * half + k / 2;
  }
  // Output (h, j, i) at k = j * half + i comes from source (h, i, j) at i * 2 + j.
  return h * hd + (k % half) * 2 + k / half;
}

Status PrepareJob(ExportJob* job) {
  if (job->source == nullptr) return JobError(*job, "no source tensor");
  const ValueTensor& src = *job->source;
  uint64_t n = 1;
  for (uint64_t d : job->shape) {
    if (!CheckedMul(n, d, &n)) return JobError(*job, "shape overflows 64 bits");
  }
  if (n != src.elements) {
    return JobError(*job, "output has " + std::to_string(n) + " elements, source " +
                              Quote(src.name) + " has " + std::to_string(src.elements));
  }
  if (!job->cast) {
    if (job->transform != RowTransform::kNone) {
      return JobError(*job, "a rearranged tensor must be decoded (internal: no cast type)");
    }
    job->out_bytes = src.data.size();
    return Status::Ok();
  }
  if (!src.type) {
    return Status(Code::kUnsupported, "tensor " + Quote(src.name) + ": dtype " + src.dtype +
                                          " cannot be decoded, so it cannot be cast to " +
                                          std::string(CastTypeName(*job->cast)));
  }
  if (job->transform != RowTransform::kNone) {
    if (src.shape.size() != 2 || job->shape.size() != 2) {
      return JobError(*job, "a row permutation or transpose needs a 2-D tensor");
    }
    const uint64_t rows = src.shape[0], cols = src.shape[1];
    if (job->transform == RowTransform::kTranspose) {
      if (job->shape[0] != cols || job->shape[1] != rows) {
        return JobError(*job, "transposed shape does not match the source");
      }
    } else {
      if (job->shape != src.shape) return JobError(*job, "permuted shape differs from source");
      if (job->heads == 0 || rows % (uint64_t{2} * job->heads) != 0) {
        return JobError(*job, std::to_string(rows) + " rows cannot be split into " +
                                  std::to_string(job->heads) + " heads of two halves");
      }
    }
    if (formats::ValueTypeBlockElements(*src.type) > 1 && cols % 32 != 0) {
      return JobError(*job, "a block-quantized source needs rows of multiples of 32 to be "
                            "rearranged");
    }
  }
  if (IsBlockQuantized(*job->cast) && RowLength(job->shape) % 32 != 0) {
    return JobError(*job, std::string(CastTypeName(*job->cast)) + " needs rows of a multiple "
                          "of 32 elements, this tensor's rows have " +
                              std::to_string(RowLength(job->shape)));
  }
  BLZ_ASSIGN_OR_RETURN(job->out_bytes, CastBytes(*job->cast, n));
  return Status::Ok();
}

Status RunExportJobs(const std::vector<ExportJob>& jobs, const std::vector<size_t>& order,
                     const RunOptions& options, ExportSink* sink,
                     std::vector<CastError>* errors) {
  errors->assign(jobs.size(), CastError{});
  uint64_t total = 0;
  for (size_t j : order) total += jobs[j].out_bytes;
  const std::vector<Chunk> chunks = PlanChunks(jobs, order);
  uint64_t done = 0;
  std::function<Result<ChunkOut>(size_t)> produce = [&](size_t i) {
    return ProduceChunk(jobs[chunks[i].job], chunks[i]);
  };
  std::function<Status(size_t, ChunkOut&)> consume = [&](size_t i, ChunkOut& out) -> Status {
    const Chunk& c = chunks[i];
    if (c.begins) BLZ_RETURN_IF_ERROR(sink->BeginTensor(c.job));
    if (!out.view.empty()) BLZ_RETURN_IF_ERROR(sink->Append(out.view));
    (*errors)[c.job].Merge(out.error);
    if (c.ends) BLZ_RETURN_IF_ERROR(sink->EndTensor());
    done += out.view.size();
    if (options.progress) options.progress(done, total);
    return Status::Ok();
  };
  return RunOrdered<ChunkOut>(chunks.size(), ResolveThreads(int(options.threads)), produce,
                              consume);
}

}  // namespace blz::exporter
