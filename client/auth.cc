#include "client/auth.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "client/client_config.h"
#include "core/file_util.h"

namespace blz::client {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string ParentDir(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

// mkdir -p with `mode` for the directories it creates.
Status MakeDirs(const std::string& dir, mode_t mode) {
  if (dir.empty() || dir == "/" || dir == ".") return Status::Ok();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return IOError(dir + ": exists and is not a directory");
  }
  BLZ_RETURN_IF_ERROR(MakeDirs(ParentDir(dir), mode));
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return IOError(dir + ": cannot create directory: " + std::strerror(errno));
  }
  return Status::Ok();
}

// Reads the auth file; an absent file is an empty object.
Result<nlohmann::json> ReadAuthFile(const std::string& auth_path) {
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonObjectFile(auth_path, kMaxAuthFileBytes));
  if (doc.contains("registries") && !doc["registries"].is_object()) {
    return Corruption(auth_path + ": field 'registries' is not an object");
  }
  return doc;
}

}  // namespace

Result<std::string> AuthFilePath() {
  std::string dir = EnvOrEmpty("BLZ_CONFIG_DIR");
  if (!dir.empty()) return dir + "/auth.json";
  std::string xdg = EnvOrEmpty("XDG_CONFIG_HOME");
  if (!xdg.empty()) return xdg + "/blz/auth.json";
  std::string home = EnvOrEmpty("HOME");
  if (!home.empty()) return home + "/.config/blz/auth.json";
  return NotFound("cannot locate the auth file: set BLZ_CONFIG_DIR, XDG_CONFIG_HOME or HOME");
}

bool IsValidToken(std::string_view token) {
  if (token.empty() || token.size() > 4096) return false;
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

Status StoreToken(const std::string& auth_path, const std::string& registry,
                  const std::string& token) {
  if (!IsValidToken(token)) {
    return InvalidArgument("token must be 1..4096 printable ASCII characters without spaces");
  }
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc, ReadAuthFile(auth_path));
  doc["registries"][registry] = {{"token", token}};
  BLZ_RETURN_IF_ERROR(MakeDirs(ParentDir(auth_path), 0700));
  BLZ_RETURN_IF_ERROR(WriteFileAtomic(auth_path, doc.dump(2) + "\n", 0600));
  // The temp file was created 0600 (less the umask); make sure of it even under odd umasks.
  if (::chmod(auth_path.c_str(), 0600) != 0) {
    return IOError(auth_path + ": cannot set mode 0600: " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<bool> RemoveToken(const std::string& auth_path, const std::string& registry) {
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc, ReadAuthFile(auth_path));
  if (!doc.contains("registries") || !doc["registries"].contains(registry)) return false;
  doc["registries"].erase(registry);
  BLZ_RETURN_IF_ERROR(WriteFileAtomic(auth_path, doc.dump(2) + "\n", 0600));
  if (::chmod(auth_path.c_str(), 0600) != 0) {
    return IOError(auth_path + ": cannot set mode 0600: " + std::strerror(errno));
  }
  return true;
}

Result<std::string> LookupToken(const std::string& auth_path, const std::string& registry) {
  BLZ_ASSIGN_OR_RETURN(nlohmann::json doc, ReadAuthFile(auth_path));
  if (!doc.contains("registries")) return std::string();
  const nlohmann::json& regs = doc["registries"];
  auto it = regs.find(registry);
  if (it == regs.end()) return std::string();
  if (!it->is_object() || !it->contains("token") || !(*it)["token"].is_string()) {
    return Corruption(auth_path + ": entry for '" + registry + "' has no string 'token'");
  }
  std::string token = (*it)["token"].get<std::string>();
  if (!IsValidToken(token)) {
    return Corruption(auth_path + ": token for '" + registry + "' has invalid characters");
  }
  return token;
}

Result<std::string> ResolveToken(const std::string& registry) {
  std::string env = EnvOrEmpty("BLZ_TOKEN");
  if (!env.empty()) {
    if (!IsValidToken(env)) {
      return InvalidArgument("BLZ_TOKEN must be printable ASCII characters without spaces");
    }
    return env;
  }
  Result<std::string> path = AuthFilePath();
  if (!path.ok()) return std::string();
  return LookupToken(*path, registry);
}

std::string TokenSourceFor(const std::string& registry) {
  if (!EnvOrEmpty("BLZ_TOKEN").empty()) return "the token in BLZ_TOKEN";
  return "the token `blz login` stored for " + registry;
}

Result<std::string> TokenFor(const std::optional<std::string>& given, const std::string& registry) {
  if (given.has_value()) return *given;
  return ResolveToken(registry);
}

}  // namespace blz::client
