// PyTorch (torch.save zip, formats/export/torch_zip.h) and SQUIZD (formats/export/squizd.h)
// outputs.
#include <string>
#include <utility>
#include <vector>

#include "core/file_util.h"
#include "formats/export/export_internal.h"
#include "formats/export/squizd.h"
#include "formats/export/torch_zip.h"

namespace blz::exporter::internal {

using formats::ValueTensor;

namespace {

// Feeds RunExportJobs' output to the zip writer (jobs arrive in order 0, 1, ...).
class TorchSink : public ExportSink {
 public:
  explicit TorchSink(TorchZipWriter* writer) : writer_(writer) {}
  Status BeginTensor(size_t job) override { return writer_->BeginTensor(job); }
  Status Append(ByteSpan bytes) override { return writer_->Append(bytes); }
  Status EndTensor() override { return writer_->EndTensor(); }

 private:
  TorchZipWriter* writer_;
};

bool IsTorchFileName(const std::string& out) {
  return EndsWith(out, ".bin") || EndsWith(out, ".pt") || EndsWith(out, ".pth");
}

std::string StemOf(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  auto dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

Status WriteTorchFile(const std::string& path, const std::vector<ExportJob>& jobs,
                      const ExportOptions& options, std::vector<CastError>* errors) {
  std::vector<TorchTensorSpec> specs;
  for (const ExportJob& j : jobs) {
    std::string dtype = OutputDTypeName(j);
    auto d = formats::ParseDType(dtype);
    if (!d.ok()) {
      return Unsupported("tensor '" + j.source->name + "': " + dtype +
                         " cannot be written to a PyTorch checkpoint");
    }
    specs.push_back({j.name, *d, j.shape});
  }
  BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  BLZ_ASSIGN_OR_RETURN(TorchZipWriter writer,
                       TorchZipWriter::Start(&file, std::move(specs), StemOf(path)));
  TorchSink sink(&writer);
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  BLZ_RETURN_IF_ERROR(
      RunExportJobs(jobs, order, RunOptions{options.threads, options.progress}, &sink, errors));
  BLZ_RETURN_IF_ERROR(writer.Finish());
  return file.Commit(/*no_replace=*/!options.overwrite);
}

}  // namespace

Result<ExportReport> ExportPytorch(const SourceModel& source, const std::string& out,
                                   const ExportOptions& options) {
  if (options.cast && IsBlockQuantized(*options.cast)) {
    return InvalidArgument("--cast " + std::string(CastTypeName(*options.cast)) +
                           " cannot be written to a PyTorch checkpoint (ggml block types exist "
                           "only in GGUF; use f32, f16 or bf16)");
  }
  ExportReport report;
  std::vector<ExportJob> jobs;
  HfFromGguf hf;
  if (source.format() == "gguf") {
    BLZ_ASSIGN_OR_RETURN(hf, PlanHfFromGguf(source, options));
    jobs = std::move(hf.jobs);
    report.arch = hf.arch;
  } else {
    for (const ValueTensor& t : source.tensors().tensors()) {
      ExportJob j;
      j.name = t.name;
      j.shape = t.shape;
      j.source = &t;
      j.cast = PlainOutputType(t, options.cast);
      jobs.push_back(std::move(j));
    }
  }
  for (ExportJob& j : jobs) BLZ_RETURN_IF_ERROR(PrepareJob(&j));
  // A checkpoint file, or a directory with pytorch_model.bin and the model's other files.
  std::vector<CastError> errors(jobs.size());
  if (IsTorchFileName(out)) {
    BLZ_RETURN_IF_ERROR(WriteTorchFile(out, jobs, options, &errors));
    report.outputs.push_back(out);
  } else {
    BLZ_ASSIGN_OR_RETURN(DirectoryOutput dir, DirectoryOutput::Create(out, options.overwrite));
    std::vector<std::string> skip;
    if (!hf.config_json.empty()) {
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(dir.path() + "/config.json", hf.config_json));
      skip.push_back("config.json");
    }
    for (const auto& [name, text] : hf.extra_files) {
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(dir.path() + "/" + name, text));
      skip.push_back(name);
    }
    BLZ_RETURN_IF_ERROR(dir.CopyAuxFiles(source.aux_files(), skip));
    BLZ_RETURN_IF_ERROR(WriteTorchFile(dir.path() + "/pytorch_model.bin", jobs, options,
                                       &errors));
    BLZ_RETURN_IF_ERROR(dir.Commit());
    report.outputs.push_back(out + "/pytorch_model.bin");
  }
  AddTensorReports(jobs, errors, &report);
  return report;
}

Result<ExportReport> ExportSquizd(const SourceModel& source, const std::string& out,
                                  const ExportOptions& options) {
  if (options.cast) {
    return InvalidArgument("--cast does not apply to SQUIZD: 2-D weights are written as INT4 "
                           "with SCZT scales, other tensors keep their type (NPCL blocks)");
  }
  SquizdWriteOptions so;
  so.overwrite = options.overwrite;
  SquizdReport sr;
  BLZ_RETURN_IF_ERROR(WriteSquizd(source.tensors(), so, out, &sr));
  ExportReport report;
  report.outputs.push_back(out);
  report.output_bytes = sr.file_bytes;
  for (size_t i = 0; i < sr.tensors.size(); ++i) {
    const SquizdTensorReport& t = sr.tensors[i];
    ExportTensorReport r;
    r.name = t.name;
    r.source_name = t.name;
    r.source_dtype = t.source_dtype;
    r.output_dtype = t.block_kind;
    r.source_bytes = i < source.tensors().tensors().size()
                         ? source.tensors().tensors()[i].data.size() : 0;
    r.output_bytes = t.bytes;
    r.lossy = t.block_kind == "INT4";
    r.error.max_abs = t.max_abs_error;
    // RelativeL2() is recomputed from the sums: keep the writer's value exactly.
    r.error.sum_sq_ref = 1;
    r.error.sum_sq_err = t.relative_l2_error * t.relative_l2_error;
    report.tensors.push_back(std::move(r));
  }
  return report;
}

}  // namespace blz::exporter::internal
