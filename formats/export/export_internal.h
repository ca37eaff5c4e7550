// Shared pieces of the exporters (formats/export/export*.cc). Internal to blz_export.
#ifndef BLZ_FORMATS_EXPORT_EXPORT_INTERNAL_H_
#define BLZ_FORMATS_EXPORT_EXPORT_INTERNAL_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/export/export.h"
#include "formats/export/source_model.h"
#include "formats/export/tensor_job.h"

namespace blz::exporter::internal {

// The output type of a floating-point tensor under the safetensors / PyTorch policy: the cast
// when given, else the source type (F32, F16, BF16), else F32 (a dequantized Q8_0 / Q4_0 or
// F64... no: F64 and integers are copied). nullopt: copy the bytes.
std::optional<CastType> PlainOutputType(const formats::ValueTensor& t,
                                        const std::optional<CastType>& cast);

// The dtype name of a job's output ("F16", "Q8_0", or the source's when copied).
std::string OutputDTypeName(const ExportJob& job);

// Builds the report from the jobs and the errors RunExportJobs measured.
void AddTensorReports(const std::vector<ExportJob>& jobs, const std::vector<CastError>& errors,
                      ExportReport* report);

// A directory output: built under "<out>.tmp-XXXXXX" next to OUT, renamed onto OUT by Commit.
// The temporary directory is removed if Commit is never called.
class DirectoryOutput {
 public:
  DirectoryOutput() = default;
  ~DirectoryOutput();
  DirectoryOutput(DirectoryOutput&& other) noexcept;
  DirectoryOutput& operator=(DirectoryOutput&&) = delete;
  DirectoryOutput(const DirectoryOutput&) = delete;
  DirectoryOutput& operator=(const DirectoryOutput&) = delete;

  // Errors: kAlreadyExists when `out` exists and !overwrite; kIOError.
  static Result<DirectoryOutput> Create(const std::string& out, bool overwrite);
  const std::string& path() const { return tmp_; }
  // Copies the aux files (config, tokenizer, ...) into the directory, except those in `skip`.
  Status CopyAuxFiles(const std::vector<AuxFile>& files, const std::vector<std::string>& skip);
  Status Commit();

 private:
  std::string out_;
  std::string tmp_;
  bool overwrite_ = false;
};

// Does the path end with `suffix`?
bool EndsWith(const std::string& s, const std::string& suffix);

// A GGUF source seen as a Hugging Face model (export_gguf.cc): for a known architecture the
// tensors renamed, un-permuted and transposed back and a config.json; otherwise the GGUF names
// and shapes as they are (no config). Jobs use the safetensors policy (PlainOutputType).
struct HfFromGguf {
  std::string arch;
  std::vector<ExportJob> jobs;
  std::string config_json;
  std::map<std::string, std::string> extra_files;
};
Result<HfFromGguf> PlanHfFromGguf(const SourceModel& source, const ExportOptions& options);

// Format exporters (export_gguf.cc, export_pytorch.cc, export_squizd.cc).
Result<ExportReport> ExportGguf(const SourceModel& source, const std::string& out,
                                const ExportOptions& options);
Result<ExportReport> ExportPytorch(const SourceModel& source, const std::string& out,
                                   const ExportOptions& options);
Result<ExportReport> ExportSquizd(const SourceModel& source, const std::string& out,
                                  const ExportOptions& options);

}  // namespace blz::exporter::internal

#endif  // BLZ_FORMATS_EXPORT_EXPORT_INTERNAL_H_
