#include "formats/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/file_util.h"
#include "formats/json_strict.h"

namespace blz::formats {
namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

// A name quoted for an error message, shortened so a hostile name cannot flood the message.
std::string Quote(std::string_view name) {
  constexpr size_t kMax = 200;
  if (name.size() <= kMax) return "'" + std::string(name) + "'";
  return "'" + std::string(name.substr(0, kMax)) + "...'";
}

std::string Num(uint64_t v) { return std::to_string(v); }

// Reads a JSON non-negative integer (nlohmann stores those as number_unsigned; negative
// numbers, fractions and integers beyond 2^64-1 have other types and are refused).
bool GetU64(const nlohmann::json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

}  // namespace

uint64_t SafetensorsTensor::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

int64_t SafetensorsHeader::Find(std::string_view name) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return int64_t(i);
  }
  return -1;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(ByteSpan prefix, uint64_t file_size,
                                                 std::string_view file_name) {
  const std::string f(file_name);
  if (file_size < 8) {
    return Corruption(f + ": file is " + Num(file_size) +
                      " bytes, too small for the 8-byte header length at byte offset 0");
  }
  if (prefix.size() < 8) {
    return InvalidArgument(f + ": need the first 8 bytes to parse the header, got " +
                           Num(prefix.size()));
  }
  const uint64_t n = LoadLE64(prefix.data());
  if (n > kSafetensorsMaxHeaderBytes) {
    return TooLarge(f + ": header length " + Num(n) + " (u64 at byte offset 0) exceeds the cap of " +
                    Num(kSafetensorsMaxHeaderBytes) + " bytes");
  }
  if (n > file_size - 8) {
    return Corruption(f + ": header length " + Num(n) + " (u64 at byte offset 0) runs past the end of the " +
                      Num(file_size) + "-byte file");
  }
  if (prefix.size() < 8 + n) {
    return InvalidArgument(f + ": need the first " + Num(8 + n) +
                           " bytes to parse the header, got " + Num(prefix.size()));
  }
  SafetensorsHeader h;
  h.header_length = n;
  h.data_start = 8 + n;
  h.file_size = file_size;

  BLZ_ASSIGN_OR_RETURN(
      nlohmann::json j,
      ParseJsonStrict(AsChars(prefix.subspan(8, n)), f + ": header (bytes 8.." + Num(8 + n) + ")", 8));
  if (!j.is_object()) {
    return Corruption(f + ": header at byte offset 8 is JSON " + std::string(j.type_name()) +
                      ", not an object");
  }

  const std::string where = " in the header at byte offset 8";
  h.tensors.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == kMetadataKey) {
      if (!v.is_object()) {
        return Corruption(f + ": field \"__metadata__\"" + where + " is " + v.type_name() +
                          ", not an object of strings");
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return Corruption(f + ": \"__metadata__\" entry " + Quote(m.key()) + where + " is " +
                            m.value().type_name() + ", not a string");
        }
        h.metadata.emplace(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    const std::string t = f + ": tensor " + Quote(name);
    if (!v.is_object()) {
      return Corruption(t + where + " is " + v.type_name() + ", not an object");
    }
    SafetensorsTensor tensor;
    tensor.name = name;

    auto dtype_it = v.find("dtype");
    if (dtype_it == v.end() || !dtype_it->is_string()) {
      return Corruption(t + ": field \"dtype\"" + where + " is missing or not a string");
    }
    auto dtype = ParseDType(dtype_it->get_ref<const std::string&>());
    if (!dtype.ok()) return dtype.status().WithContext(t + ": field \"dtype\"" + where);
    tensor.dtype = *dtype;

    auto shape_it = v.find("shape");
    if (shape_it == v.end() || !shape_it->is_array()) {
      return Corruption(t + ": field \"shape\"" + where + " is missing or not an array");
    }
    for (size_t d = 0; d < shape_it->size(); ++d) {
      uint64_t dim;
      if (!GetU64((*shape_it)[d], &dim)) {
        return Corruption(t + ": field \"shape\"" + where + ": dimension " + Num(d) +
                          " is not a non-negative integer");
      }
      tensor.shape.push_back(dim);
    }

    auto off_it = v.find("data_offsets");
    if (off_it == v.end() || !off_it->is_array() || off_it->size() != 2 ||
        !GetU64((*off_it)[0], &tensor.begin) || !GetU64((*off_it)[1], &tensor.end)) {
      return Corruption(t + ": field \"data_offsets\"" + where +
                        " is not an array of two non-negative integers [begin, end]");
    }
    h.tensors.push_back(std::move(tensor));
  }

  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });

  uint64_t expected = 0;
  const std::string* prev = nullptr;
  for (const SafetensorsTensor& tensor : h.tensors) {
    const std::string t = f + ": tensor " + Quote(tensor.name);
    const std::string offs = "data_offsets [" + Num(tensor.begin) + ", " + Num(tensor.end) + "]";
    uint64_t abs_begin = 0;
    const bool abs_ok = CheckedAdd(h.data_start, tensor.begin, &abs_begin);
    const std::string at =
        abs_ok ? " (file byte offset " + Num(abs_begin) + ")" : std::string(" (offset overflows)");
    if (tensor.end < tensor.begin) {
      return Corruption(t + ": " + offs + at + ": end is before begin");
    }
    if (tensor.begin != expected) {
      if (prev == nullptr) {
        return Corruption(t + ": " + offs + at +
                          ": the first tensor must start at data offset 0");
      }
      return Corruption(t + ": " + offs + at + ": " +
                        (tensor.begin > expected ? "leaves a gap after" : "overlaps") +
                        " tensor " + Quote(*prev) + ", which ends at data offset " +
                        Num(expected));
    }
    uint64_t elements = 1;
    for (uint64_t d : tensor.shape) {
      if (!CheckedMul(elements, d, &elements)) {
        return Corruption(t + ": field \"shape\": the element count overflows 64 bits");
      }
    }
    uint64_t bytes;
    if (!CheckedMul(elements, DTypeSize(tensor.dtype), &bytes)) {
      return Corruption(t + ": field \"shape\": " + Num(elements) + " elements of " +
                        std::string(DTypeName(tensor.dtype)) + " overflow 64 bits of bytes");
    }
    if (tensor.end - tensor.begin != bytes) {
      return Corruption(t + ": " + offs + at + " spans " + Num(tensor.end - tensor.begin) +
                        " bytes, but shape x dtype size is " + Num(elements) + " x " +
                        Num(DTypeSize(tensor.dtype)) + " = " + Num(bytes) + " bytes");
    }
    expected = tensor.end;
    prev = &tensor.name;
  }
  uint64_t covered;
  if (!CheckedAdd(h.data_start, expected, &covered)) {
    return Corruption(f + ": data offsets overflow 64 bits");
  }
  if (covered != file_size) {
    if (covered < file_size) {
      return Corruption(f + ": " + Num(file_size - covered) +
                        " trailing bytes at byte offset " + Num(covered) +
                        ": the header (8 + " + Num(n) + " bytes) and tensor data (" +
                        Num(expected) + " bytes) account for " + Num(covered) +
                        " bytes, but the file has " + Num(file_size));
    }
    return Corruption(f + ": truncated: the header (8 + " + Num(n) + " bytes) and tensor data (" +
                      Num(expected) + " bytes) need " + Num(covered) +
                      " bytes, but the file has only " + Num(file_size));
  }
  return h;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile sf;
  BLZ_ASSIGN_OR_RETURN(sf.file_, MappedFile::Open(path));
  BLZ_ASSIGN_OR_RETURN(sf.header_,
                       ParseSafetensorsHeader(sf.file_.bytes(), sf.file_.size(), path));
  return sf;
}

ByteSpan SafetensorsFile::TensorData(size_t i) const {
  const SafetensorsTensor& t = header_.tensors[i];
  return file_.bytes().subspan(header_.data_start + t.begin, t.end - t.begin);
}

Result<SafetensorsLayout> PlanSafetensors(const std::vector<SafetensorsTensorView>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) {
    uint64_t bytes = DTypeSize(t.dtype);
    for (uint64_t d : t.shape) {
      if (!CheckedMul(bytes, d, &bytes)) {
        return InvalidArgument("safetensors writer: tensor " + Quote(t.name) +
                               ": shape overflows 64 bits");
      }
    }
    if (bytes != t.data.size()) {
      return InvalidArgument("safetensors writer: tensor " + Quote(t.name) + ": has " +
                             Num(t.data.size()) + " bytes, shape x dtype size is " + Num(bytes));
    }
    specs.push_back({t.name, t.dtype, t.shape});
  }
  return PlanSafetensors(specs, metadata);
}

Result<SafetensorsLayout> PlanSafetensors(const std::vector<SafetensorsTensorSpec>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> names;
  std::vector<uint64_t> lengths;
  lengths.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.name == kMetadataKey) {
      return InvalidArgument("safetensors writer: tensor name \"__metadata__\" is reserved");
    }
    if (!names.insert(t.name).second) {
      return InvalidArgument("safetensors writer: duplicate tensor name " + Quote(t.name));
    }
    uint64_t bytes = DTypeSize(t.dtype);
    for (uint64_t d : t.shape) {
      if (!CheckedMul(bytes, d, &bytes)) {
        return InvalidArgument("safetensors writer: tensor " + Quote(t.name) +
                               ": shape overflows 64 bits");
      }
    }
    lengths.push_back(bytes);
  }
  SafetensorsLayout layout;
  layout.order.resize(tensors.size());
  std::iota(layout.order.begin(), layout.order.end(), size_t{0});
  std::sort(layout.order.begin(), layout.order.end(), [&](size_t a, size_t b) {
    const uint32_t sa = DTypeSize(tensors[a].dtype), sb = DTypeSize(tensors[b].dtype);
    if (sa != sb) return sa > sb;
    return tensors[a].name < tensors[b].name;
  });
  layout.begin.assign(tensors.size(), 0);

  std::string json = "{";
  try {
    if (!metadata.empty()) {
      json += "\"__metadata__\":{";
      bool first = true;
      for (const auto& [k, v] : metadata) {
        if (!first) json += ',';
        first = false;
        json += nlohmann::json(k).dump() + ":" + nlohmann::json(v).dump();
      }
      json += '}';
    }
    uint64_t offset = 0;
    for (size_t i : layout.order) {
      const auto& t = tensors[i];
      if (json.size() > 1) json += ',';
      json += nlohmann::json(t.name).dump();
      json += ":{\"dtype\":\"" + std::string(DTypeName(t.dtype)) + "\",\"shape\":[";
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (d > 0) json += ',';
        json += Num(t.shape[d]);
      }
      layout.begin[i] = offset;
      if (!CheckedAdd(offset, lengths[i], &offset)) {
        return InvalidArgument("safetensors writer: data size overflows 64 bits");
      }
      json += "],\"data_offsets\":[" + Num(layout.begin[i]) + "," + Num(offset) + "]}";
      if (json.size() > kSafetensorsMaxHeaderBytes) {
        return InvalidArgument("safetensors writer: header exceeds " +
                               Num(kSafetensorsMaxHeaderBytes) + " bytes");
      }
    }
    layout.data_bytes = offset;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("safetensors writer: a name or metadata string is not "
                                       "valid UTF-8: ") + e.what());
  }
  json += '}';
  // The reference writer pads the header with spaces so the data starts 8-byte aligned.
  while (json.size() % 8 != 0) json += ' ';
  if (json.size() > kSafetensorsMaxHeaderBytes) {
    return InvalidArgument("safetensors writer: header exceeds " +
                           Num(kSafetensorsMaxHeaderBytes) + " bytes");
  }
  AppendLE64(&layout.header_bytes, json.size());
  layout.header_bytes += json;
  return layout;
}

Status WriteSafetensors(const std::string& path,
                        const std::vector<SafetensorsTensorView>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return AlreadyExists(path + ": already exists");
  BLZ_ASSIGN_OR_RETURN(SafetensorsLayout layout, PlanSafetensors(tensors, metadata));
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path));
  BLZ_RETURN_IF_ERROR(out.Append(layout.header_bytes));
  for (size_t i : layout.order) BLZ_RETURN_IF_ERROR(out.Append(tensors[i].data));
  return out.Commit(/*no_replace=*/true);
}

}  // namespace blz::formats
