#include "client/client_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/file_util.h"

namespace blz::client {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits "123abc" into its digits (1..18 of them) and the rest.
bool SplitNumber(const std::string& text, uint64_t* n, std::string* unit) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 18) return false;
  *n = std::stoull(text.substr(0, digits));
  *unit = Lower(text.substr(digits));
  return true;
}

}  // namespace

Result<std::string> ClientConfigPath() {
  std::string dir = EnvOrEmpty("BLZ_CONFIG_DIR");
  if (!dir.empty()) return dir + "/client.json";
  std::string xdg = EnvOrEmpty("XDG_CONFIG_HOME");
  if (!xdg.empty()) return xdg + "/blz/client.json";
  std::string home = EnvOrEmpty("HOME");
  if (!home.empty()) return home + "/.config/blz/client.json";
  return NotFound("cannot locate client.json: set BLZ_CONFIG_DIR, XDG_CONFIG_HOME or HOME");
}

Result<std::string> ClientConfigDir() {
  BLZ_ASSIGN_OR_RETURN(std::string path, ClientConfigPath());
  return path.substr(0, path.rfind('/'));
}

namespace {

// mkdir -p with `mode` for the directories it creates.
Status MakeDirs(const std::string& dir, mode_t mode) {
  if (dir.empty() || dir == "/" || dir == ".") return Status::Ok();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return IOError(dir + ": exists and is not a directory");
  }
  const size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    BLZ_RETURN_IF_ERROR(MakeDirs(dir.substr(0, slash), mode));
  }
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return IOError(dir + ": cannot create directory: " + std::strerror(errno));
  }
  return Status::Ok();
}

bool IsRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Result<std::map<std::string, bool>> LoadRememberedSchemes(const std::string& config_path) {
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc,
                       ReadJsonObjectFile(config_path, kMaxClientConfigBytes));
  std::map<std::string, bool> out;
  auto regs = doc.find("registries");
  if (regs == doc.end()) return out;
  if (!regs->is_object()) return Corruption(config_path + ": 'registries' is not an object");
  for (auto it = regs->begin(); it != regs->end(); ++it) {
    const nlohmann::json& entry = it.value();
    if (!entry.is_object() || !entry.contains("scheme")) continue;
    const nlohmann::json& scheme = entry["scheme"];
    if (!scheme.is_string() || (scheme != "https" && scheme != "http")) {
      return Corruption(config_path + ": registries." + it.key() +
                        ".scheme must be \"https\" or \"http\"");
    }
    out[it.key()] = scheme == "https";
  }
  return out;
}

std::string RememberedCaFile(const std::string& config_dir, const std::string& key,
                             std::string_view host, uint16_t port) {
  if (config_dir.empty()) return "";
  std::string path = config_dir + "/certs.d/" + key + "/ca.crt";
  if (IsRegularFile(path)) return path;
  if (port == 443 && host.find(':') == std::string_view::npos) {
    path = config_dir + "/certs.d/" + std::string(host) + "/ca.crt";
    if (IsRegularFile(path)) return path;
  }
  return "";
}

Status RememberRegistry(const std::string& config_dir, const std::string& key, bool tls,
                        const std::string& ca_file) {
  std::string ca_pem;
  if (!ca_file.empty()) {
    Result<std::string> pem = ReadSmallFile(ca_file, kMaxClientConfigBytes * 16);
    if (!pem.ok()) {
      if (pem.status().code() == Code::kNotFound) return NotFound("no such file: " + ca_file);
      return pem.status();
    }
    ca_pem = std::move(pem).value();
  }
  BLZ_RETURN_IF_ERROR(MakeDirs(config_dir, 0700));
  const std::string path = config_dir + "/client.json";
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonObjectFile(path, kMaxClientConfigBytes));
  if (doc.contains("registries") && !doc["registries"].is_object()) {
    return Corruption(path + ": 'registries' is not an object");
  }
  nlohmann::json& entry = doc["registries"][key];
  if (!entry.is_object()) entry = nlohmann::json::object();
  entry["scheme"] = tls ? "https" : "http";
  BLZ_RETURN_IF_ERROR(WriteFileAtomic(path, doc.dump(2) + "\n", 0644));
  if (!ca_file.empty()) {
    const std::string dir = config_dir + "/certs.d/" + key;
    BLZ_RETURN_IF_ERROR(MakeDirs(dir, 0700));
    BLZ_RETURN_IF_ERROR(WriteFileAtomic(dir + "/ca.crt", ca_pem, 0644));
  }
  return Status::Ok();
}

Result<nlohmann::json> ReadJsonObjectFile(const std::string& path, uint64_t max_bytes) {
  Result<std::string> text = ReadSmallFile(path, max_bytes);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return nlohmann::json::object();
    return text.status();
  }
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Corruption(path + ": not a JSON object");
  return doc;
}

Result<ClientConfig> LoadClientConfig(const std::string& path) {
  ClientConfig config;
  config.path = path;
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonObjectFile(path, kMaxClientConfigBytes));
  if (!doc.contains("cache")) return config;
  const nlohmann::json& cache = doc["cache"];
  if (!cache.is_object()) return Corruption(path + ": 'cache' is not an object");
  if (cache.contains("budget")) {
    const nlohmann::json& b = cache["budget"];
    if (b.is_number_unsigned()) {
      config.budget = b.get<uint64_t>();
    } else if (b.is_string()) {
      Result<uint64_t> parsed = ParseByteSize(b.get<std::string>(), "cache.budget");
      if (!parsed.ok()) return Corruption(path + ": " + parsed.status().message());
      config.budget = *parsed;
    } else {
      return Corruption(path + ": cache.budget must be a size such as \"10GiB\" or a number of "
                               "bytes");
    }
  }
  if (cache.contains("half_life")) {
    const nlohmann::json& h = cache["half_life"];
    Result<int64_t> parsed = InvalidArgument("cache.half_life must be a duration such as \"7d\"");
    if (h.is_string()) parsed = ParseDuration(h.get<std::string>(), "cache.half_life");
    if (h.is_number_unsigned()) parsed = int64_t(std::min<uint64_t>(h.get<uint64_t>(), 1ull << 40));
    if (!parsed.ok()) return Corruption(path + ": " + parsed.status().message());
    if (*parsed <= 0) return Corruption(path + ": cache.half_life must be positive");
    config.half_life = *parsed;
  }
  return config;
}

Result<ClientConfig> LoadClientConfig() {
  Result<std::string> path = ClientConfigPath();
  if (!path.ok()) return ClientConfig{};
  return LoadClientConfig(*path);
}

Result<uint64_t> ParseByteSize(const std::string& text, const std::string& what) {
  uint64_t n = 0;
  std::string unit;
  const std::string help = what + " '" + text +
                           "': expected a number of bytes and an optional unit (KB, MB, GB, TB "
                           "= powers of 1000; KiB, MiB, GiB, TiB = powers of 1024), e.g. 10GiB";
  if (!SplitNumber(text, &n, &unit)) return InvalidArgument(help);
  uint64_t mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  const char* kPrefixes = "kmgt";
  for (int i = 0; i < 4; ++i) {
    const std::string p(1, kPrefixes[i]);
    uint64_t dec = 1, bin = 1;
    for (int k = 0; k <= i; ++k) {
      dec *= 1000;
      bin *= 1024;
    }
    if (unit == p || unit == p + "b") mult = dec;
    if (unit == p + "ib") mult = bin;
  }
  if (mult == 0) return InvalidArgument(help);
  if (n > std::numeric_limits<uint64_t>::max() / mult) {
    return InvalidArgument(what + " '" + text + "': too large");
  }
  return n * mult;
}

Result<int64_t> ParseDuration(const std::string& text, const std::string& what) {
  uint64_t n = 0;
  std::string unit;
  const std::string help = what + " '" + text +
                           "': expected a number and a unit (s, m, h, d or w), e.g. 7d";
  if (!SplitNumber(text, &n, &unit) || n > (1ull << 32) || unit.size() > 1) {
    return InvalidArgument(help);
  }
  switch (unit.empty() ? 's' : unit[0]) {
    case 's': return int64_t(n);
    case 'm': return int64_t(n) * 60;
    case 'h': return int64_t(n) * 3600;
    case 'd': return int64_t(n) * 86400;
    case 'w': return int64_t(n) * 7 * 86400;
    default: return InvalidArgument(help);
  }
}

}  // namespace blz::client
