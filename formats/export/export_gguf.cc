// GGUF output (from a Hugging Face model or from GGUF) and the GGUF -> Hugging Face plan.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/export/export_internal.h"
#include "formats/export/file_sinks.h"
#include "formats/export/gguf_arch.h"
#include "formats/gguf.h"

namespace blz::exporter::internal {

using formats::GgmlType;
using formats::GgufHeader;
using formats::ValueTensor;

namespace {

// The small files the GGUF planner reads (gguf_arch.h HfModelInfo::files).
constexpr const char* kPlanningFiles[] = {
    "tokenizer.json",          "tokenizer_config.json", "vocab.json",
    "merges.txt",              "special_tokens_map.json", "generation_config.json",
    "added_tokens.json",
};

const ValueTensor* FindSource(const SourceModel& source, const std::string& name) {
  for (const ValueTensor& t : source.tensors().tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<GgmlType> GgmlTypeOfCopy(const ValueTensor& t) {
  auto d = formats::ParseDType(t.dtype);
  if (d.ok()) {
    switch (*d) {
      case formats::DType::kF32: return GgmlType::kF32;
      case formats::DType::kF16: return GgmlType::kF16;
      case formats::DType::kBF16: return GgmlType::kBF16;
      case formats::DType::kF64: return GgmlType::kF64;
      case formats::DType::kI8: return GgmlType::kI8;
      case formats::DType::kI16: return GgmlType::kI16;
      case formats::DType::kI32: return GgmlType::kI32;
      case formats::DType::kI64: return GgmlType::kI64;
      default: break;
    }
  }
  return Unsupported("tensor '" + t.name + "': dtype " + t.dtype + " has no GGUF type");
}

// The cast of a 2-D weight: the requested one, with the converter's fallback to F16 when a
// block-quantized type does not fit the rows.
void ApplyWeightCast(const std::optional<CastType>& cast, ExportJob* job) {
  const ValueTensor& src = *job->source;
  std::optional<CastType> own = src.type ? CastTypeOf(*src.type) : std::nullopt;
  if (!own) {  // integers etc.: copied
    job->cast = std::nullopt;
    return;
  }
  CastType want = cast ? *cast : *own;
  uint64_t row = job->shape.empty() ? 1 : job->shape.back();
  if (IsBlockQuantized(want) && row % 32 != 0) {
    job->note = std::string(CastTypeName(want)) + " needs rows of a multiple of 32 elements "
                "(these have " + std::to_string(row) + "): written as f16, as llama.cpp's "
                "converter does";
    want = CastType::kF16;
  }
  job->cast = want;
  if (job->transform == RowTransform::kNone && want == *own) job->cast = std::nullopt;  // copy
}

std::vector<uint64_t> Reversed(const std::vector<uint64_t>& v) {
  return std::vector<uint64_t>(v.rbegin(), v.rend());
}

Status WriteGguf(const std::string& out, GgufHeader header, std::vector<ExportJob>* jobs,
                 const ExportOptions& options, ExportReport* report) {
  header.tensors.clear();
  std::vector<size_t> tensor_of_job, order;
  for (size_t i = 0; i < jobs->size(); ++i) {
    ExportJob& j = (*jobs)[i];
    BLZ_RETURN_IF_ERROR(PrepareJob(&j));
    formats::GgufTensorInfo info;
    info.name = j.name;
    info.dims = Reversed(j.shape);
    if (info.dims.empty()) info.dims.push_back(1);
    if (j.cast) {
      info.type = ToGgmlType(*j.cast);
    } else if (j.source->type && j.source->type == formats::ValueType::kQ8_0) {
      info.type = GgmlType::kQ8_0;
    } else if (j.source->type && j.source->type == formats::ValueType::kQ4_0) {
      info.type = GgmlType::kQ4_0;
    } else {
      // A GGUF source keeps its own type name (any ggml type, copied as bytes).
      const formats::GgmlTypeInfo* found = nullptr;
      for (const formats::GgmlTypeInfo& t : formats::AllGgmlTypes()) {
        std::string upper(t.name);
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        if (upper == j.source->dtype) found = &t;
      }
      if (found != nullptr && report->source_format == "gguf") {
        info.type = found->type;
      } else {
        BLZ_ASSIGN_OR_RETURN(info.type, GgmlTypeOfCopy(*j.source));
      }
    }
    tensor_of_job.push_back(header.tensors.size());
    order.push_back(i);
    header.tensors.push_back(std::move(info));
  }
  BLZ_ASSIGN_OR_RETURN(GgufFileSink sink,
                       GgufFileSink::Create(out, std::move(header), tensor_of_job));
  std::vector<CastError> errors;
  RunOptions run{options.threads, options.progress};
  BLZ_RETURN_IF_ERROR(RunExportJobs(*jobs, order, run, &sink, &errors));
  BLZ_RETURN_IF_ERROR(sink.Finish(options.overwrite));
  report->outputs.push_back(out);
  AddTensorReports(*jobs, errors, report);
  return Status::Ok();
}

uint32_t FileTypeOf(CastType t) {
  switch (t) {
    case CastType::kF32: return 0;
    case CastType::kF16: return 1;
    case CastType::kQ4_0: return 2;
    case CastType::kQ8_0: return 7;
    case CastType::kBF16: return 32;
  }
  return 0;
}

// GGUF -> GGUF: metadata kept, general.file_type updated when cast; tensors of two or more
// dimensions cast (norms and other 1-D tensors kept), others copied byte for byte.
Result<ExportReport> RecastGguf(const SourceModel& source, const std::string& out,
                                const ExportOptions& options) {
  BLZ_ASSIGN_OR_RETURN(formats::GgufReader reader,
                       formats::GgufReader::Open(source.tensors().path(),
                                                 formats::GgufMode::kHeaderOnly));
  GgufHeader header = reader.header();
  ExportReport report;
  report.source_format = "gguf";
  if (const formats::GgufValue* a = formats::FindGgufValue(header, "general.architecture")) {
    if (const std::string* s = a->AsString()) report.arch = *s;
  }
  if (options.cast) {
    for (formats::GgufKv& kv : header.metadata) {
      if (kv.key == "general.file_type") kv.value = formats::GgufValue::U32(FileTypeOf(*options.cast));
    }
  }
  std::vector<ExportJob> jobs;
  for (const formats::GgufTensorInfo& info : header.tensors) {
    const ValueTensor* src = FindSource(source, info.name);
    if (src == nullptr) return Internal("GGUF tensor '" + info.name + "' not opened");
    ExportJob j;
    j.name = info.name;
    j.shape = src->shape;
    j.source = src;
    if (options.cast && src->shape.size() >= 2 && !EndsWith(info.name, "_norm.weight")) {
      ApplyWeightCast(options.cast, &j);
    }
    jobs.push_back(std::move(j));
  }
  BLZ_RETURN_IF_ERROR(WriteGguf(out, std::move(header), &jobs, options, &report));
  return report;
}

}  // namespace

Result<ExportReport> ExportGguf(const SourceModel& source, const std::string& out,
                                const ExportOptions& options) {
  if (source.format() == "gguf") return RecastGguf(source, out, options);
  HfModelInfo info;
  info.name = options.model_name.empty() ? source.name() : options.model_name;
  BLZ_ASSIGN_OR_RETURN(std::optional<std::string> config, source.ReadSmallFile("config.json"));
  if (!config) {
    return InvalidArgument("GGUF export of " + source.tensors().path() +
                           " needs the model's config.json (a Hugging Face model directory, "
                           "its .blz archive, or a .safetensors file next to its config.json)");
  }
  info.config_json = std::move(*config);
  for (const char* name : kPlanningFiles) {
    BLZ_ASSIGN_OR_RETURN(std::optional<std::string> text, source.ReadSmallFile(name));
    if (text) info.files[name] = std::move(*text);
  }
  // The file type follows the cast, else the type of most weight bytes.
  std::map<CastType, uint64_t> bytes_by_type;
  for (const ValueTensor& t : source.tensors().tensors()) {
    info.tensors.push_back({t.name, t.shape});
    if (t.type && t.shape.size() >= 2) {
      if (auto c = CastTypeOf(*t.type)) bytes_by_type[*c] += t.data.size();
    }
  }
  CastType file_cast = CastType::kF32;
  if (options.cast) {
    file_cast = *options.cast;
  } else {
    uint64_t best = 0;
    for (const auto& [t, n] : bytes_by_type) {
      if (n > best) best = n, file_cast = t;
    }
  }
  BLZ_ASSIGN_OR_RETURN(GgufModelPlan plan, PlanHfToGguf(info, file_cast));
  ExportReport report;
  report.source_format = source.format();
  report.arch = plan.arch;
  std::vector<ExportJob> jobs;
  for (const GgufTensorPlan& p : plan.tensors) {
    const ValueTensor* src = FindSource(source, p.hf_name);
    if (src == nullptr) return Internal("planned tensor '" + p.hf_name + "' not in the model");
    ExportJob j;
    j.name = p.gguf_name;
    j.source = src;
    j.shape = src->shape;
    if (p.transpose) {
      j.transform = RowTransform::kTranspose;
      j.shape = Reversed(src->shape);
    } else if (p.permute == RowPermute::kLlamaQK) {
      j.transform = RowTransform::kLlamaPermute;
      j.heads = p.permute_heads;
    }
    if (p.keep_f32) {
      std::optional<CastType> own = src->type ? CastTypeOf(*src->type) : std::nullopt;
      j.cast = own ? std::optional<CastType>(CastType::kF32) : std::nullopt;
      if (own == CastType::kF32 && j.transform == RowTransform::kNone) j.cast = std::nullopt;
    } else {
      ApplyWeightCast(options.cast, &j);
    }
    jobs.push_back(std::move(j));
  }
  GgufHeader header;
  header.metadata = std::move(plan.metadata);
  BLZ_RETURN_IF_ERROR(WriteGguf(out, std::move(header), &jobs, options, &report));
  return report;
}

Result<HfFromGguf> PlanHfFromGguf(const SourceModel& source, const ExportOptions& options) {
  BLZ_ASSIGN_OR_RETURN(formats::GgufReader reader,
                       formats::GgufReader::Open(source.tensors().path(),
                                                 formats::GgufMode::kHeaderOnly));
  HfFromGguf out;
  Result<HfDirPlan> plan = PlanGgufToHf(reader.header());
  if (!plan.ok() && plan.status().code() != Code::kUnsupported) return plan.status();
  if (!plan.ok()) {
    // An architecture without a mapping: the GGUF names and shapes as they are.
    for (const ValueTensor& t : source.tensors().tensors()) {
      ExportJob j;
      j.name = t.name;
      j.shape = t.shape;
      j.source = &t;
      j.cast = PlainOutputType(t, options.cast);
      out.jobs.push_back(std::move(j));
    }
    return out;
  }
  if (const formats::GgufValue* a =
          formats::FindGgufValue(reader.header(), "general.architecture")) {
    if (const std::string* s = a->AsString()) out.arch = *s;
  }
  out.config_json = plan->config_json;
  out.extra_files = plan->extra_files;
  for (const HfTensorPlan& p : plan->tensors) {
    const ValueTensor* src = FindSource(source, p.gguf_name);
    if (src == nullptr) return Internal("planned tensor '" + p.gguf_name + "' not in the file");
    ExportJob j;
    j.name = p.hf_name;
    j.source = src;
    j.shape = src->shape;
    if (p.transpose) {
      j.transform = RowTransform::kTranspose;
      j.shape = Reversed(src->shape);
    } else if (p.permute == RowPermute::kLlamaQK) {
      j.transform = RowTransform::kLlamaUnpermute;
      j.heads = p.permute_heads;
    }
    j.cast = PlainOutputType(*src, options.cast);
    if (!j.cast && j.transform != RowTransform::kNone && src->type) {
      j.cast = CastTypeOf(*src->type);
    }
    out.jobs.push_back(std::move(j));
  }
  return out;
}

}  // namespace blz::exporter::internal
