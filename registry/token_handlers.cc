// The token admin API (docs/registry-api.md, "Token admin API"): create, list and revoke API
// tokens. Every route here needs the "admin" action (registry/auth.h AccessNeedFor), checked
// by Prepare before these run.
#include <ctime>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "registry/errors.h"
#include "registry/registry.h"
#include "registry/registry_internal.h"
#include "registry/scope.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxTokenNameLength = 64;
// Ten years: long enough for anything meant to expire, short enough to never overflow.
constexpr int64_t kMaxExpiresIn = int64_t(10) * 366 * 24 * 3600;

// [A-Za-z0-9][A-Za-z0-9._-]{0,63}
bool IsValidTokenName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTokenNameLength) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum) continue;
    if (i > 0 && (c == '.' || c == '_' || c == '-')) continue;
    return false;
  }
  return true;
}

json TokenJson(const store::TokenRecord& t, int64_t now) {
  return json{{"name", t.name},
              {"scope", t.scope},
              {"created", t.created},
              {"expires", t.expires.has_value() ? json(*t.expires) : json(nullptr)},
              {"expired", !t.ActiveAt(now)}};
}

Response BadRequest(const std::string& message) {
  return ErrorResponse(OciError::kBadRequest, message);
}

}  // namespace

Response Registry::CreateApiToken(const Request& request) {
  json body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    return BadRequest("body must be a JSON object {\"name\", \"scope\", \"expires_in\"}");
  }
  if (!body.contains("name") || !body["name"].is_string()) {
    return BadRequest("field 'name' (a string) is required");
  }
  const std::string name = body["name"];
  if (!IsValidTokenName(name)) {
    return BadRequest("token name '" + name +
                      "' must match [A-Za-z0-9][A-Za-z0-9._-]* and be at most 64 characters");
  }
  if (!body.contains("scope") || !body["scope"].is_string()) {
    return BadRequest("field 'scope' (a string, e.g. \"org/*:pull,push\") is required");
  }
  Result<Scope> scope = Scope::Parse(body["scope"].get<std::string>());
  if (!scope.ok()) return BadRequest(scope.status().message());
  const int64_t now = int64_t(std::time(nullptr));
  std::optional<int64_t> expires;
  if (body.contains("expires_in") && !body["expires_in"].is_null()) {
    const json& e = body["expires_in"];
    if (!e.is_number_integer() || e.get<int64_t>() <= 0 || e.get<int64_t>() > kMaxExpiresIn) {
      return BadRequest("field 'expires_in' must be a number of seconds in 1.." +
                        std::to_string(kMaxExpiresIn) + " (or null: never)");
    }
    expires = now + e.get<int64_t>();
  }
  const std::string canonical = scope->ToString();
  Result<std::string> token = db_->CreateToken(name, canonical, expires);
  if (!token.ok()) return ErrorResponse(token.status(), ErrorContext::kGeneral);
  Response res;
  res.status = 201;
  res.body = json{{"name", name},
                  {"token", *token},
                  {"scope", canonical},
                  {"created", now},
                  {"expires", expires.has_value() ? json(*expires) : json(nullptr)}}
                 .dump();
  res.Set("Content-Type", "application/json");
  res.Set("Cache-Control", "no-store");
  return res;
}

Response Registry::ListApiTokens() {
  Result<std::vector<store::TokenRecord>> tokens = db_->ListTokens();
  if (!tokens.ok()) return ErrorResponse(tokens.status(), ErrorContext::kGeneral);
  const int64_t now = int64_t(std::time(nullptr));
  json list = json::array();
  for (const store::TokenRecord& t : *tokens) list.push_back(TokenJson(t, now));
  Response res;
  res.body = json{{"tokens", list}}.dump(-1, ' ', false, json::error_handler_t::replace);
  res.Set("Content-Type", "application/json");
  return res;
}

Response Registry::RevokeApiToken(const Route& route) {
  if (!IsValidTokenName(route.ref)) {
    return BadRequest("token name '" + route.ref + "' is not a valid token name");
  }
  Status s = db_->RevokeToken(route.ref);
  if (!s.ok()) return ErrorResponse(s, ErrorContext::kGeneral);
  return internal::Empty(204);
}

}  // namespace blz::registry
