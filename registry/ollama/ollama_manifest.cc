#include "registry/ollama/ollama_manifest.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"

namespace blz::registry::ollama {

namespace {

using ordered_json = nlohmann::ordered_json;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

// printf into a std::string (numbers only: no user text goes through the format).
std::string Format(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

}  // namespace

bool WantsOllamaManifest(const std::optional<std::string>& accept) {
  if (!accept.has_value()) return false;
  bool docker_v2 = false;
  bool oci = false;
  size_t start = 0;
  const std::string& a = *accept;
  while (start <= a.size()) {
    size_t end = a.find(',', start);
    if (end == std::string::npos) end = a.size();
    std::string item = a.substr(start, end - start);
    item = Lower(Trim(item.substr(0, item.find(';'))));
    if (item == kDockerManifestMediaType) docker_v2 = true;
    if (item == "application/vnd.oci.image.manifest.v1+json") oci = true;
    start = end + 1;
  }
  return docker_v2 && !oci;
}

std::string HumanNumber(uint64_t n) {
  constexpr double kThousand = 1000;
  constexpr double kMillion = 1000 * kThousand;
  constexpr double kBillion = 1000 * kMillion;
  const double v = double(n);
  if (v >= kBillion) {
    const double x = v / kBillion;
    return x == std::floor(x) ? Format("%.0fB", x) : Format("%.1fB", x);
  }
  if (v >= kMillion) {
    const double x = v / kMillion;
    return x == std::floor(x) ? Format("%.0fM", x) : Format("%.2fM", x);
  }
  if (v >= kThousand) return Format("%.0fK", v / kThousand);
  return std::to_string(n);
}

std::string FileTypeName(uint32_t file_type) {
  // llama.cpp's llama_ftype (LLAMA_FTYPE_MOSTLY_*), as Ollama's fs/ggml FileType prints it.
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",  "Q4_1",   nullptr,  nullptr, nullptr, "Q8_0",  "Q5_0",
      "Q5_1",    "Q2_K",   "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M",
      "Q6_K",    "IQ2_XXS", "IQ2_XS", "Q2_K_S", "IQ3_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ3_M",   "IQ2_S",  "IQ2_M", "IQ4_XS", "IQ1_M", "BF16"};
  constexpr uint32_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  if (file_type < kCount && kNames[file_type] != nullptr) return kNames[file_type];
  return "unknown";
}

Result<GgufModelInfo> ReadGgufModelInfo(ByteSpan prefix, std::string_view source) {
  BLZ_ASSIGN_OR_RETURN(formats::GgufFile file,
                       formats::ParseGguf(prefix, formats::GgufMode::kHeaderOnly, source));
  GgufModelInfo info;
  if (const formats::GgufValue* arch = FindGgufValue(file.header, "general.architecture");
      arch != nullptr && arch->AsString() != nullptr) {
    info.architecture = *arch->AsString();
  }
  uint64_t parameters = 0;
  if (const formats::GgufValue* p = FindGgufValue(file.header, "general.parameter_count");
      p != nullptr && p->AsUInt().has_value()) {
    parameters = *p->AsUInt();
  } else {
    // Ollama reads only the key (0 without it); the tensors' element count says more.
    for (const formats::GgufTensorInfo& t : file.header.tensors) {
      uint64_t elements = 1;
      for (uint64_t d : t.dims) elements *= d;  // fits: the reader bounds the byte size
      parameters += elements;
    }
  }
  info.parameters = HumanNumber(parameters);
  info.file_type = "unknown";
  if (const formats::GgufValue* ft = FindGgufValue(file.header, "general.file_type");
      ft != nullptr && ft->AsUInt().has_value() && *ft->AsUInt() <= UINT32_MAX) {
    info.file_type = FileTypeName(uint32_t(*ft->AsUInt()));
  }
  return info;
}

std::string ConfigJson(const GgufModelInfo& info, std::string_view gguf_digest) {
  ordered_json families = ordered_json::array();
  families.push_back(info.architecture);
  ordered_json config = {
      {"model_format", "gguf"},
      {"model_family", info.architecture},
      {"model_families", families},
      {"model_type", info.parameters},
      {"file_type", info.file_type},
      {"architecture", "amd64"},
      {"os", "linux"},
      {"rootfs",
       {{"type", "layers"}, {"diff_ids", ordered_json::array({std::string(gguf_digest)})}}}};
  return config.dump() + "\n";
}

std::string ManifestJson(std::string_view config_digest, uint64_t config_size,
                         std::string_view gguf_digest, uint64_t gguf_size) {
  ordered_json m = {
      {"schemaVersion", 2},
      {"mediaType", kDockerManifestMediaType},
      {"config",
       {{"mediaType", kDockerConfigMediaType},
        {"digest", std::string(config_digest)},
        {"size", config_size}}},
      {"layers", ordered_json::array({ordered_json{{"mediaType", kOllamaModelMediaType},
                                                   {"digest", std::string(gguf_digest)},
                                                   {"size", gguf_size}}})}};
  return m.dump();
}

}  // namespace blz::registry::ollama
