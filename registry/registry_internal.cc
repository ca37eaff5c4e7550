#include "registry/registry_internal.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "formats/structural_hash.h"
#include "registry/byte_ranges.h"
#include "registry/errors.h"

namespace blz::registry::internal {

using json = nlohmann::json;

bool MayPull(const Registry::Route& route, std::string_view repository, bool private_mode) {
  const Principal& who = route.caller;
  if ((HeldActions(who, repository, private_mode) & kActionPull) != 0) return true;
  // An access token granted registry:catalog:* lists what its API token may pull (its own
  // grants name only the repositories it was requested for).
  return who.catalog && (who.token_scope.ActionsOn(repository) & kActionPull) != 0;
}

std::vector<std::string> PullableNames(const Registry::Route& route,
                                       std::vector<std::string> names, bool private_mode) {
  std::vector<std::string> out;
  for (std::string& name : names) {
    if (MayPull(route, name, private_mode)) out.push_back(std::move(name));
  }
  return out;
}

bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    bool dash_pos = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_pos != (s[i] == '-')) return false;
    if (!dash_pos && !IsLowerHex(s.substr(i, 1), 1)) return false;
  }
  return true;
}

std::string UploadRange(uint64_t size) { return "0-" + std::to_string(size == 0 ? 0 : size - 1); }

Response ServeFile(const std::string& path, uint64_t size, const RequestHead& head,
                   std::string content_type) {
  Response res;
  std::optional<RangeSpan> span = SelectRange(head.Get("Range"), size, &res);
  if (!span) {
    Response err = ErrorResponse(OciError::kRangeInvalid,
                                 "requested range not satisfiable for " + std::to_string(size) +
                                     " bytes",
                                 json{{"size", size}});
    SetUnsatisfiableRange(size, &err);
    return err;
  }
  res.file_offset = span->offset;
  res.file_length = span->length;
  res.file_path = path;
  res.Set("Content-Type", std::move(content_type));
  return res;
}

Response Empty(int status) {
  Response res;
  res.status = status;
  return res;
}

Result<std::pair<std::optional<uint64_t>, std::string>> ParsePagination(
    const Registry::Route& route) {
  std::optional<uint64_t> limit;
  if (auto n = route.Query("n"); n.has_value()) {
    limit = ParseUint(*n);
    if (!limit.has_value()) return InvalidArgument("query parameter n must be a non-negative integer");
    if (*limit > kMaxPageSize) limit = kMaxPageSize;
  }
  return std::make_pair(limit, route.Query("last").value_or(""));
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

Result<std::string> ArchiveStructuralHash(const std::string& path, const std::string& digest) {
  Status error;
  Result<formats::BlzArchive> archive = formats::BlzArchive::Open(path);
  if (archive.ok()) {
    Result<formats::StructuralInput> input = formats::StructuralInputFromArchive(*archive);
    if (input.ok()) return formats::StructuralHash(*input);
    error = input.status();
  } else {
    error = archive.status();
  }
  return Status(error.code(), ReplaceAll(error.message(), path, digest));
}

}  // namespace blz::registry::internal
