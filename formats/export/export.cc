#include "formats/export/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "core/file_util.h"
#include "formats/export/export_internal.h"
#include "formats/export/file_sinks.h"

namespace blz::exporter {

using formats::ValueTensor;
using formats::ValueType;

namespace internal {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(),
                                                suffix) == 0;
}

std::optional<CastType> PlainOutputType(const ValueTensor& t,
                                        const std::optional<CastType>& cast) {
  if (!t.type) return std::nullopt;
  std::optional<CastType> own = CastTypeOf(*t.type);
  if (!own) return std::nullopt;  // F64, F8, integers, bool: copied
  if (cast) return cast;
  if (IsBlockQuantized(*own)) return CastType::kF32;  // dequantized
  return std::nullopt;                                 // F32 / F16 / BF16 kept as they are
}

std::string OutputDTypeName(const ExportJob& job) {
  if (!job.cast) return job.source->dtype;
  return std::string(formats::ValueTypeName(ToValueType(*job.cast)));
}

void AddTensorReports(const std::vector<ExportJob>& jobs, const std::vector<CastError>& errors,
                      ExportReport* report) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ExportJob& j = jobs[i];
    ExportTensorReport r;
    r.name = j.name;
    r.source_name = j.source->name;
    r.source_dtype = j.source->dtype;
    r.output_dtype = OutputDTypeName(j);
    r.source_bytes = j.source->data.size();
    r.output_bytes = j.out_bytes;
    r.lossy = j.cast.has_value() && IsLossy(*j.cast) && r.output_dtype != r.source_dtype;
    if (r.lossy && i < errors.size()) r.error = errors[i];
    r.note = j.note;
    report->output_bytes += j.out_bytes;
    report->tensors.push_back(std::move(r));
  }
}

DirectoryOutput::~DirectoryOutput() {
  if (!tmp_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  }
}

DirectoryOutput::DirectoryOutput(DirectoryOutput&& other) noexcept
    : out_(std::move(other.out_)), tmp_(std::move(other.tmp_)), overwrite_(other.overwrite_) {
  other.tmp_.clear();
}

Result<DirectoryOutput> DirectoryOutput::Create(const std::string& out, bool overwrite) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(out, ec)) && !overwrite) {
    return AlreadyExists(out + " already exists (use --force to replace it)");
  }
  std::filesystem::path p = std::filesystem::absolute(out, ec);
  std::string parent = p.parent_path().string();
  std::string base = p.filename().string();
  if (!std::filesystem::is_directory(parent, ec)) {
    return NotFound("the directory of " + out + " does not exist");
  }
  DirectoryOutput d;
  BLZ_ASSIGN_OR_RETURN(d.tmp_, MakeTempDir(parent, "." + base + ".tmp-"));
  d.out_ = p.string();
  d.overwrite_ = overwrite;
  return d;
}

Status DirectoryOutput::CopyAuxFiles(const std::vector<AuxFile>& files,
                                     const std::vector<std::string>& skip) {
  for (const AuxFile& f : files) {
    if (std::find(skip.begin(), skip.end(), f.path) != skip.end()) continue;
    std::string dest = tmp_ + "/" + f.path;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
    if (ec) return IOError("cannot create the directory of " + dest + ": " + ec.message());
    BLZ_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(dest));
    if (f.abs_path.empty()) {
      BLZ_RETURN_IF_ERROR(file.Append(f.bytes));
    } else {
      // Streamed (copy_file_range where it can): a large non-weight file costs no memory.
      int fd = ::open(f.abs_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return IOError("cannot open " + f.abs_path + ": " + std::strerror(errno));
      struct stat st {};
      Status s = ::fstat(fd, &st) == 0
                     ? file.AppendFromFd(fd, 0, uint64_t(st.st_size), f.abs_path)
                     : IOError("cannot stat " + f.abs_path + ": " + std::strerror(errno));
      ::close(fd);
      BLZ_RETURN_IF_ERROR(s);
    }
    BLZ_RETURN_IF_ERROR(file.Commit());
  }
  return Status::Ok();
}

Status DirectoryOutput::Commit() {
  std::error_code ec;
  if (overwrite_ && std::filesystem::exists(std::filesystem::symlink_status(out_, ec))) {
    std::filesystem::remove_all(out_, ec);
    if (ec) return IOError("cannot replace " + out_ + ": " + ec.message());
  }
  if (std::rename(tmp_.c_str(), out_.c_str()) != 0) {
    return IOError("cannot rename " + tmp_ + " to " + out_ + ": " + std::strerror(errno));
  }
  tmp_.clear();
  BLZ_RETURN_IF_ERROR(SyncDir(std::filesystem::path(out_).parent_path().string()));
  return Status::Ok();
}

}  // namespace internal

namespace {

using internal::DirectoryOutput;

constexpr std::pair<ExportFormat, std::string_view> kFormats[] = {
    {ExportFormat::kGguf, "gguf"},
    {ExportFormat::kSafetensors, "safetensors"},
    {ExportFormat::kPytorch, "pytorch"},
    {ExportFormat::kSquizd, "squizd"},
};

Result<formats::DType> SafetensorsDType(const ExportJob& job) {
  if (job.cast) return formats::ParseDType(formats::ValueTypeName(ToValueType(*job.cast)));
  auto d = formats::ParseDType(job.source->dtype);
  if (!d.ok()) {
    return Unsupported("tensor '" + job.source->name + "': " + job.source->dtype +
                       " cannot be written to safetensors (blz decodes F32, F16, BF16, Q8_0 "
                       "and Q4_0 GGUF tensors)");
  }
  return d;
}

// Progress across several files: adds the bytes of the files already written.
std::function<void(uint64_t, uint64_t)> Offset(const ExportOptions& o, uint64_t before,
                                               uint64_t total) {
  if (!o.progress) return {};
  return [&o, before, total](uint64_t done, uint64_t) { o.progress(before + done, total); };
}

Status WriteSafetensorsShard(const std::string& path, const std::vector<ExportJob>& jobs,
                             const std::vector<size_t>& members, const ExportOptions& options,
                             uint64_t before, uint64_t total, std::vector<CastError>* errors) {
  std::vector<formats::SafetensorsTensorSpec> specs;
  for (size_t j : members) {
    BLZ_ASSIGN_OR_RETURN(formats::DType d, SafetensorsDType(jobs[j]));
    specs.push_back({jobs[j].name, d, jobs[j].shape});
  }
  BLZ_ASSIGN_OR_RETURN(SafetensorsFileSink sink,
                       SafetensorsFileSink::Create(path, specs, members, {{"format", "pt"}}));
  RunOptions run{options.threads, Offset(options, before, total)};
  std::vector<CastError> shard_errors;
  BLZ_RETURN_IF_ERROR(RunExportJobs(jobs, sink.Order(), run, &sink, &shard_errors));
  for (size_t j : members) (*errors)[j] = shard_errors[j];
  return sink.Finish(options.overwrite);
}

std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

Result<ExportReport> ExportSafetensors(const SourceModel& source, const std::string& out,
                                       const ExportOptions& options) {
  if (options.cast && IsBlockQuantized(*options.cast)) {
    return InvalidArgument("--cast " + std::string(CastTypeName(*options.cast)) +
                           " cannot be written to safetensors (ggml block types exist only in "
                           "GGUF; use f32, f16 or bf16)");
  }
  ExportReport report;
  std::vector<ExportJob> jobs;
  internal::HfFromGguf hf;
  if (source.format() == "gguf") {
    BLZ_ASSIGN_OR_RETURN(hf, internal::PlanHfFromGguf(source, options));
    jobs = std::move(hf.jobs);
    report.arch = hf.arch;
  } else {
    for (const ValueTensor& t : source.tensors().tensors()) {
      ExportJob j;
      j.name = t.name;
      j.shape = t.shape;
      j.source = &t;
      j.cast = internal::PlainOutputType(t, options.cast);
      jobs.push_back(std::move(j));
    }
  }
  for (ExportJob& j : jobs) BLZ_RETURN_IF_ERROR(PrepareJob(&j));
  std::vector<CastError> errors(jobs.size());
  uint64_t total = 0;
  for (const ExportJob& j : jobs) total += j.out_bytes;

  const bool single_file = internal::EndsWith(out, ".safetensors");
  if (single_file) {
    std::vector<size_t> all(jobs.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    BLZ_RETURN_IF_ERROR(WriteSafetensorsShard(out, jobs, all, options, 0, total, &errors));
    report.outputs.push_back(out);
  } else {
    // Shards as transformers cuts them: tensors in order, a new shard when the next tensor
    // would take the current one past the limit.
    std::vector<std::vector<size_t>> shards(1);
    uint64_t in_shard = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!shards.back().empty() && in_shard + jobs[i].out_bytes > options.max_shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(i);
      in_shard += jobs[i].out_bytes;
    }
    BLZ_ASSIGN_OR_RETURN(DirectoryOutput dir, DirectoryOutput::Create(out, options.overwrite));
    std::vector<std::string> skip;
    if (!hf.config_json.empty()) {
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(dir.path() + "/config.json", hf.config_json));
      report.outputs.push_back(out + "/config.json");
      skip.push_back("config.json");
    }
    for (const auto& [name, text] : hf.extra_files) {
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(dir.path() + "/" + name, text));
      report.outputs.push_back(out + "/" + name);
      skip.push_back(name);
    }
    BLZ_RETURN_IF_ERROR(dir.CopyAuxFiles(source.aux_files(), skip));
    uint64_t before = 0;
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    std::map<std::string, std::string> sorted_map;
    for (size_t s = 0; s < shards.size(); ++s) {
      std::string name = shards.size() == 1 ? "model.safetensors" : ShardName(s, shards.size());
      BLZ_RETURN_IF_ERROR(WriteSafetensorsShard(dir.path() + "/" + name, jobs, shards[s],
                                                options, before, total, &errors));
      for (size_t j : shards[s]) {
        before += jobs[j].out_bytes;
        sorted_map[jobs[j].name] = name;
      }
      report.outputs.push_back(out + "/" + name);
    }
    if (shards.size() > 1) {
      for (const auto& [k, v] : sorted_map) weight_map[k] = v;
      nlohmann::ordered_json index;
      index["metadata"] = {{"total_size", total}};
      index["weight_map"] = std::move(weight_map);
      BLZ_RETURN_IF_ERROR(WriteFileAtomic(dir.path() + "/model.safetensors.index.json",
                                          index.dump(2) + "\n"));
      report.outputs.push_back(out + "/model.safetensors.index.json");
    }
    BLZ_RETURN_IF_ERROR(dir.Commit());
  }
  internal::AddTensorReports(jobs, errors, &report);
  return report;
}

}  // namespace

std::string_view ExportFormatName(ExportFormat f) {
  for (const auto& [k, name] : kFormats) {
    if (k == f) return name;
  }
  return "unknown";
}

Result<ExportFormat> ParseExportFormat(std::string_view name) {
  for (const auto& [k, n] : kFormats) {
    if (n == name) return k;
  }
  return InvalidArgument("unknown export format '" + std::string(name) +
                         "' (known: gguf, safetensors, pytorch, squizd)");
}

Result<ExportReport> ExportModel(const std::string& source_path, const std::string& out,
                                 const ExportOptions& options) {
  BLZ_ASSIGN_OR_RETURN(SourceModel source, SourceModel::Open(source_path));
  if (!options.overwrite) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(out, ec))) {
      return AlreadyExists(out + " already exists (use --force to replace it)");
    }
  }
  Result<ExportReport> report = InvalidArgument("unknown export format");
  switch (options.format) {
    case ExportFormat::kGguf:
      report = internal::ExportGguf(source, out, options);
      break;
    case ExportFormat::kSafetensors:
      report = ExportSafetensors(source, out, options);
      break;
    case ExportFormat::kPytorch:
      report = internal::ExportPytorch(source, out, options);
      break;
    case ExportFormat::kSquizd:
      report = internal::ExportSquizd(source, out, options);
      break;
  }
  if (!report.ok()) return report.status();
  report->source = source_path;
  report->source_format = source.format();
  report->format = std::string(ExportFormatName(options.format));
  report->cast = options.cast ? std::string(CastTypeName(*options.cast)) : "";
  return report;
}

nlohmann::ordered_json ExportReportJson(const ExportReport& r) {
  nlohmann::ordered_json j;
  j["source"] = r.source;
  j["source_format"] = r.source_format;
  j["format"] = r.format;
  j["cast"] = r.cast.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.cast);
  if (!r.arch.empty()) j["arch"] = r.arch;
  j["outputs"] = r.outputs;
  j["output_bytes"] = r.output_bytes;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const ExportTensorReport& t : r.tensors) {
    nlohmann::ordered_json e;
    e["name"] = t.name;
    e["source_name"] = t.source_name;
    e["source_dtype"] = t.source_dtype;
    e["dtype"] = t.output_dtype;
    e["source_bytes"] = t.source_bytes;
    e["bytes"] = t.output_bytes;
    if (t.lossy) {
      // JSON has no Inf: an overflow to infinity is reported as null.
      auto num = [](double v) {
        return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
      };
      e["max_abs_error"] = num(t.error.max_abs);
      e["relative_l2_error"] = num(t.error.RelativeL2());
    }
    if (!t.note.empty()) e["note"] = t.note;
    tensors.push_back(std::move(e));
  }
  j["tensors"] = std::move(tensors);
  return j;
}

}  // namespace blz::exporter
