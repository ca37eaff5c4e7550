// ExportSinks (formats/export/tensor_job.h) that stream tensors into GGUF and safetensors files.
// Both know every tensor's size before the first byte is written (the header comes first in
// both formats), write through AtomicFile (nothing is visible before Finish), and check that
// each tensor receives exactly its declared bytes.
#ifndef BLZ_FORMATS_EXPORT_FILE_SINKS_H_
#define BLZ_FORMATS_EXPORT_FILE_SINKS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "core/status.h"
#include "formats/export/tensor_job.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace blz::exporter {

// A GGUF file: the header (metadata and tensor infos, offsets assigned here) is written by
// Create; job j's bytes go to header.tensors[tensor_of_job[j]], and jobs must arrive in the
// order of header.tensors (the data order). Finish pads the end to the alignment (as ggml does)
// and commits.
class GgufFileSink : public ExportSink {
 public:
  // Errors: those of AssignGgufOffsets / EncodeGgufHeader (kInvalidArgument), AtomicFile's.
  static Result<GgufFileSink> Create(const std::string& path, formats::GgufHeader header,
                                     std::vector<size_t> tensor_of_job);
  Status BeginTensor(size_t job) override;
  Status Append(ByteSpan bytes) override;
  Status EndTensor() override;
  // Commits (replacing an existing file only when `replace`).
  Status Finish(bool replace);
  const formats::GgufHeader& header() const { return header_; }

 private:
  Status PadTo(uint64_t offset);
  AtomicFile file_;
  formats::GgufHeader header_;
  std::vector<size_t> tensor_of_job_;
  uint64_t alignment_ = formats::kGgufDefaultAlignment;
  uint64_t data_start_ = 0;
  uint64_t pos_ = 0;        // bytes written so far
  size_t current_ = 0;      // tensor being written
  uint64_t remaining_ = 0;  // its bytes still expected
};

// A safetensors file (formats/safetensors.h layout: tensors by descending dtype size, then
// name). Job j is tensor specs[spec_of_job[j]]; jobs must arrive in Order().
class SafetensorsFileSink : public ExportSink {
 public:
  static Result<SafetensorsFileSink> Create(const std::string& path,
                                            std::vector<formats::SafetensorsTensorSpec> specs,
                                            std::vector<size_t> job_of_spec,
                                            const std::map<std::string, std::string>& metadata);
  // The job indices in data order.
  const std::vector<size_t>& Order() const { return order_; }
  uint64_t FileBytes() const { return file_bytes_; }
  Status BeginTensor(size_t job) override;
  Status Append(ByteSpan bytes) override;
  Status EndTensor() override;
  Status Finish(bool replace);

 private:
  AtomicFile file_;
  std::vector<size_t> order_;          // job indices in data order
  std::map<size_t, uint64_t> bytes_of_job_;
  uint64_t file_bytes_ = 0;
  uint64_t remaining_ = 0;
  size_t next_ = 0;
};

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_FILE_SINKS_H_
