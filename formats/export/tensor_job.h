// One output tensor of an export, and the streaming, multi-threaded pipeline that produces the
// output bytes of a list of them in order.
//
// A job reads one source tensor (a view into a memory map, formats/tensor_stats.h ValueTensor)
// and produces its output bytes in chunks of whole rows (or, with no row transform, of whole
// 32-element blocks): each chunk is decoded to F32 (formats/float_convert.h), rearranged (llama
// Q/K row permutation, or a transpose) and cast (formats/export/cast.h), or, when the output
// type is the source type and nothing is rearranged, copied as bytes. Chunks are produced on
// worker threads and handed to an ExportSink on the calling thread strictly in order
// (core/ordered_pipeline.h), so memory is bounded by (chunk size x window), not by the model:
// about kExportChunkElements x 4 bytes x 4 x threads. A transposed tensor (GPT-2's Conv1D
// weights) is the exception: each chunk decodes the whole source tensor once (time, not memory,
// grows with its size).
#ifndef BLZ_FORMATS_EXPORT_TENSOR_JOB_H_
#define BLZ_FORMATS_EXPORT_TENSOR_JOB_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/export/cast.h"
#include "formats/tensor_stats.h"

namespace blz::exporter {

// Output elements per chunk (a multiple of 32): 4 Mi elements, 16 MiB of F32 scratch.
inline constexpr uint64_t kExportChunkElements = uint64_t{4} << 20;

// How a job's rows are rearranged. Rows are the outermost dimension of a 2-D tensor (C order).
enum class RowTransform : uint8_t {
  kNone,
  // llama.cpp's q_proj / k_proj permutation (HF -> GGUF) over `heads` heads: output row
  // (h, i, j) = source row (h, j, i) for the shape (heads, rows/heads/2, 2) vs
  // (heads, 2, rows/heads/2); numpy: w.reshape(heads, 2, rows//heads//2, cols)
  // .swapaxes(1, 2).reshape(rows, cols).
  kLlamaPermute,
  kLlamaUnpermute,  // its inverse (GGUF -> HF)
  kTranspose,       // output [cols, rows] of a source [rows, cols]
};

struct ExportJob {
  std::string name;              // output tensor name
  std::vector<uint64_t> shape;   // output shape, C order (outermost first)
  const formats::ValueTensor* source = nullptr;
  // The output element type. nullopt: copy the source bytes (its dtype is kept).
  std::optional<CastType> cast;
  RowTransform transform = RowTransform::kNone;
  uint32_t heads = 0;            // kLlamaPermute / kLlamaUnpermute
  std::string note;              // why the type differs from the requested cast (report)
  uint64_t out_bytes = 0;        // set by PrepareJob
};

// Checks a job (source decodable when cast or transformed, shapes agree with the transform,
// block-quantized casts on rows of multiples of 32, the permutation's divisibility) and sets
// out_bytes. Errors (kInvalidArgument / kUnsupported) name the tensor.
Status PrepareJob(ExportJob* job);

// The source row that output row `r` of a [rows, ...] tensor comes from under `t`
// (kLlamaPermute / kLlamaUnpermute; r itself otherwise). REQUIRES rows % (2 * heads) == 0.
uint64_t SourceRow(RowTransform t, uint32_t heads, uint64_t rows, uint64_t r);

// Receives the output of RunExportJobs: BeginTensor(i), one or more Append, EndTensor(), for
// each job i in the order given.
class ExportSink {
 public:
  virtual ~ExportSink() = default;
  virtual Status BeginTensor(size_t job) = 0;
  virtual Status Append(ByteSpan bytes) = 0;
  virtual Status EndTensor() = 0;
};

struct RunOptions {
  unsigned threads = 0;  // 0: one per core
  // Called on the calling thread after each chunk: output bytes done so far of `total`.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Produces jobs[order[0]], jobs[order[1]], ... into `sink`. `errors` (resized to jobs.size())
// gets each lossy cast's error. Errors: the first failure in output order, naming the tensor
// (a NaN in a quantized cast, a decode error), or the sink's.
Status RunExportJobs(const std::vector<ExportJob>& jobs, const std::vector<size_t>& order,
                     const RunOptions& options, ExportSink* sink,
                     std::vector<CastError>* errors);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_TENSOR_JOB_H_
