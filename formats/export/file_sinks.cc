#include "formats/export/file_sinks.h"

#include <algorithm>
#include <utility>

#include "core/checked.h"

namespace blz::exporter {

namespace {

uint64_t SpecBytes(const formats::SafetensorsTensorSpec& s) {
  uint64_t n = formats::DTypeSize(s.dtype);
  for (uint64_t d : s.shape) n *= d;  // checked by PlanSafetensors
  return n;
}

Status SizeError(const std::string& what, const std::string& name, uint64_t expected) {
  return Internal(what + ": tensor '" + name + "' got a different number of bytes than its " +
                  std::to_string(expected));
}

}  // namespace

// --- GGUF -------------------------------------------------------------------------------------

Result<GgufFileSink> GgufFileSink::Create(const std::string& path, formats::GgufHeader header,
                                          std::vector<size_t> tensor_of_job) {
  GgufFileSink sink;
  BLZ_RETURN_IF_ERROR(formats::AssignGgufOffsets(&header));
  BLZ_ASSIGN_OR_RETURN(std::string encoded, formats::EncodeGgufHeader(header));
  if (const formats::GgufValue* a = formats::FindGgufValue(header, "general.alignment")) {
    if (auto v = a->AsUInt()) sink.alignment_ = *v;
  }
  sink.header_ = std::move(header);
  sink.tensor_of_job_ = std::move(tensor_of_job);
  if (!CheckedAlignUp(encoded.size(), sink.alignment_, &sink.data_start_)) {
    return InvalidArgument("GGUF header size overflows");
  }
  BLZ_ASSIGN_OR_RETURN(sink.file_, AtomicFile::Create(path));
  BLZ_RETURN_IF_ERROR(sink.file_.Append(encoded));
  sink.pos_ = encoded.size();
  BLZ_RETURN_IF_ERROR(sink.PadTo(sink.data_start_));
  return sink;
}

Status GgufFileSink::PadTo(uint64_t offset) {
  static const std::string kZeros(4096, '\0');
  if (offset < pos_) return Internal("GGUF writer: tensor data out of order");
  while (pos_ < offset) {
    uint64_t n = std::min<uint64_t>(kZeros.size(), offset - pos_);
    BLZ_RETURN_IF_ERROR(file_.Append(std::string_view(kZeros.data(), n)));
    pos_ += n;
  }
  return Status::Ok();
}

Status GgufFileSink::BeginTensor(size_t job) {
  if (job >= tensor_of_job_.size()) return Internal("GGUF writer: unknown job");
  current_ = tensor_of_job_[job];
  const formats::GgufTensorInfo& t = header_.tensors[current_];
  remaining_ = t.n_bytes;
  return PadTo(data_start_ + t.offset);
}

Status GgufFileSink::Append(ByteSpan bytes) {
  if (bytes.size() > remaining_) {
    return SizeError("GGUF writer", header_.tensors[current_].name,
                     header_.tensors[current_].n_bytes);
  }
  remaining_ -= bytes.size();
  pos_ += bytes.size();
  return file_.Append(bytes);
}

Status GgufFileSink::EndTensor() {
  if (remaining_ != 0) {
    return SizeError("GGUF writer", header_.tensors[current_].name,
                     header_.tensors[current_].n_bytes);
  }
  return Status::Ok();
}

Status GgufFileSink::Finish(bool replace) {
  uint64_t end = 0;
  if (!CheckedAlignUp(pos_, alignment_, &end)) return Internal("GGUF writer: size overflows");
  BLZ_RETURN_IF_ERROR(PadTo(end));
  return file_.Commit(/*no_replace=*/!replace);
}

// --- safetensors ------------------------------------------------------------------------------

Result<SafetensorsFileSink> SafetensorsFileSink::Create(
    const std::string& path, std::vector<formats::SafetensorsTensorSpec> specs,
    std::vector<size_t> job_of_spec, const std::map<std::string, std::string>& metadata) {
  if (job_of_spec.size() != specs.size()) return Internal("safetensors writer: job map size");
  BLZ_ASSIGN_OR_RETURN(formats::SafetensorsLayout layout, formats::PlanSafetensors(specs, metadata));
  SafetensorsFileSink sink;
  for (size_t i : layout.order) {
    sink.order_.push_back(job_of_spec[i]);
    sink.bytes_of_job_[job_of_spec[i]] = SpecBytes(specs[i]);
  }
  sink.file_bytes_ = layout.header_bytes.size() + layout.data_bytes;
  BLZ_ASSIGN_OR_RETURN(sink.file_, AtomicFile::Create(path));
  BLZ_RETURN_IF_ERROR(sink.file_.Append(layout.header_bytes));
  return sink;
}

Status SafetensorsFileSink::BeginTensor(size_t job) {
  if (next_ >= order_.size() || order_[next_] != job) {
    return Internal("safetensors writer: tensors out of data order");
  }
  ++next_;
  remaining_ = bytes_of_job_[job];
  return Status::Ok();
}

Status SafetensorsFileSink::Append(ByteSpan bytes) {
  if (bytes.size() > remaining_) return Internal("safetensors writer: tensor larger than planned");
  remaining_ -= bytes.size();
  return file_.Append(bytes);
}

Status SafetensorsFileSink::EndTensor() {
  if (remaining_ != 0) return Internal("safetensors writer: tensor shorter than planned");
  return Status::Ok();
}

Status SafetensorsFileSink::Finish(bool replace) {
  if (next_ != order_.size()) return Internal("safetensors writer: tensors missing");
  return file_.Commit(/*no_replace=*/!replace);
}

}  // namespace blz::exporter
