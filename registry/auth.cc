#include "registry/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <ctime>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"
#include "core/time_format.h"
#include "registry/errors.h"
#include "registry/registry_internal.h"
#include "registry/wire.h"

namespace blz::registry {
namespace {

using json = nlohmann::json;
using Kind = Registry::Route::Kind;

constexpr char kAccessTokenPrefix[] = "blz1.";
constexpr char kStdAlphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kUrlAlphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int64_t Now() { return int64_t(std::time(nullptr)); }

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// A Host header usable inside a quoted header parameter: host name or address, optional port.
bool IsSafeHost(std::string_view host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Printable ASCII without quotes, backslashes or blanks (safe inside a quoted parameter).
bool IsSafeUrl(std::string_view url) {
  if (!(url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)) return false;
  for (char c : url) {
    if (c <= ' ' || c > '~' || c == '"' || c == '\\') return false;
  }
  return true;
}

// "repository:org/m:pull,push" for a challenge; "" when no repository is involved.
std::string ChallengeScope(const AccessNeed& need) {
  switch (need.kind) {
    case AccessNeed::Kind::kRepository: {
      ActionSet a = need.actions;
      if ((a & kActionPush) != 0) a |= kActionPull;  // pushes also read (HEAD blob, ...)
      return "repository:" + need.repository + ":" + ActionsToString(a);
    }
    case AccessNeed::Kind::kAnyPull: return "registry:catalog:*";
    default: return "";
  }
}

// The values of every `key` parameter of a raw target, percent-decoded, '+' read as a space
// (HTML form encoding, which Go's url.Values uses for scopes). Undecodable values are skipped.
std::vector<std::string> QueryValues(std::string_view target, std::string_view key) {
  std::vector<std::string> out;
  size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view query = target.substr(q + 1);
  if (size_t hash = query.find('#'); hash != std::string_view::npos) query = query.substr(0, hash);
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(start, end - start);
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == key) {
      std::string raw(pair.substr(eq + 1));
      for (char& c : raw) {
        if (c == '+') c = ' ';
      }
      Result<std::string> value = PercentDecode(raw);
      if (value.ok()) out.push_back(std::move(*value));
    }
    start = end + 1;
  }
  return out;
}

// A 401 whose challenge is `challenge` (ErrorResponse's default one replaced).
Response Unauthorized401(std::string_view message, const std::string& challenge) {
  Response r = ErrorResponse(OciError::kUnauthorized, message);
  for (Header& h : r.headers) {
    if (StartsWithNoCase(h.name, "www-authenticate") && h.name.size() == 16) h.value = challenge;
  }
  if (!r.Get("WWW-Authenticate").has_value()) r.Set("WWW-Authenticate", challenge);
  return r;
}

}  // namespace

// ---- pure parts ----

AccessNeed AccessNeedFor(const Registry::Route& route) {
  AccessNeed need;
  const std::string& m = route.method;
  const bool read = m == "GET" || m == "HEAD";
  auto on_repository = [&](ActionSet actions) {
    need.kind = AccessNeed::Kind::kRepository;
    need.repository = route.name;
    need.actions = actions;
  };
  switch (route.kind) {
    case Kind::kPing: need.kind = AccessNeed::Kind::kAuthenticated; return need;
    case Kind::kCatalog:
    case Kind::kRepositories:  // lists only what the caller may pull (browse_handlers.cc)
    case Kind::kStructures:
    case Kind::kStorage:  // per repository it may pull; the total and status: admin only
      need.kind = AccessNeed::Kind::kAnyPull;
      return need;
    case Kind::kGc:
    case Kind::kTokens:
    case Kind::kTokenName: need.kind = AccessNeed::Kind::kAdmin; return need;
    case Kind::kToken: need.kind = AccessNeed::Kind::kNone; return need;
    case Kind::kUploadStart:
    case Kind::kUploadSession: on_repository(kActionPush); return need;  // cancel = push too
    default: break;
  }
  // Every other route concerns the repository route.name.
  if (read) {
    on_repository(kActionPull);
  } else if (m == "DELETE") {
    on_repository(kActionDelete);
  } else {
    on_repository(kActionPush);
  }
  return need;
}

ActionSet HeldActions(const Principal& who, std::string_view repository, bool private_mode) {
  ActionSet held = who.grants.ActionsOn(repository);
  if (!private_mode) held |= kActionPull;
  return held;
}

Decision Decide(const Principal& who, const AccessNeed& need, bool private_mode) {
  bool allowed = false;
  // Would the API token behind an access token allow it (then a new access token would)?
  bool token_would = false;
  switch (need.kind) {
    case AccessNeed::Kind::kNone: return Decision::kAllow;
    case AccessNeed::Kind::kAuthenticated:
      return who.kind == Principal::Kind::kAnonymous ? Decision::kChallenge : Decision::kAllow;
    case AccessNeed::Kind::kRepository: {
      allowed = (HeldActions(who, need.repository, private_mode) & need.actions) == need.actions;
      ActionSet token_held = who.token_scope.ActionsOn(need.repository);
      if (!private_mode) token_held |= kActionPull;
      token_would = (token_held & need.actions) == need.actions;
      break;
    }
    case AccessNeed::Kind::kAnyPull:
      allowed = !private_mode || who.catalog || who.grants.GrantsAnywhere(kActionPull);
      token_would = who.token_scope.GrantsAnywhere(kActionPull);
      break;
    case AccessNeed::Kind::kAdmin:
      allowed = who.grants.IsAdmin();
      token_would = who.token_scope.IsAdmin();
      break;
  }
  if (allowed) return Decision::kAllow;
  if (who.anonymous()) return Decision::kChallenge;
  if (who.kind == Principal::Kind::kAccessToken && token_would) {
    return Decision::kChallengeInsufficient;
  }
  return Decision::kDeny;
}

std::string Base64Encode(std::string_view bytes, bool url) {
  const char* alphabet = url ? kUrlAlphabet : kStdAlphabet;
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 |
                 uint32_t(uint8_t(bytes[i + 2]));
    out += alphabet[v >> 18];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += alphabet[v >> 18];
    out += alphabet[(v >> 12) & 63];
    if (rest == 2) out += alphabet[(v >> 6) & 63];
    if (!url) out += rest == 2 ? "=" : "==";
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text, bool url) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  const std::string_view alphabet = url ? kUrlAlphabet : kStdAlphabet;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    size_t v = alphabet.find(c);
    if (v == std::string_view::npos) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

// ---- Authenticator ----

Result<std::unique_ptr<Authenticator>> Authenticator::Open(const std::string& data_dir,
                                                           store::MetadataDb* db,
                                                           AuthOptions options) {
  while (!options.public_url.empty() && options.public_url.back() == '/') {
    options.public_url.pop_back();
  }
  if (!options.public_url.empty() && !IsSafeUrl(options.public_url)) {
    return InvalidArgument("public URL '" + options.public_url +
                           "' must start with http:// or https:// and hold no blanks, quotes "
                           "or backslashes");
  }
  // The secret lives in the metadata DB (setting kAuthSecretSetting), shared by every replica;
  // a <data>/auth_secret of an older blz is imported when the DB has none yet.
  const std::string path = data_dir + "/" + kAuthSecretFile;
  Result<std::string> stored = db->GetSetting(kAuthSecretSetting);
  if (!stored.ok() && stored.status().code() != Code::kNotFound) return stored.status();
  std::string candidate;
  Result<std::string> file =
      stored.ok() ? Result<std::string>(NotFound(path)) : ReadSmallFile(path, 1024);
  if (stored.ok()) {
    candidate = *stored;
  } else if (file.ok()) {
    candidate = *file;
    while (!candidate.empty() && (candidate.back() == '\n' || candidate.back() == '\r')) {
      candidate.pop_back();
    }
    if (!IsLowerHex(candidate, 64)) {
      return Corruption(path + ": not a registry secret (64 lower-case hex digits expected); "
                        "delete it to make a new one (issued access tokens become invalid)");
    }
  } else if (file.status().code() == Code::kNotFound) {
    candidate = RandomHex(32);  // a fresh registry
  } else {
    return file.status();
  }
  BLZ_ASSIGN_OR_RETURN(std::string key, db->GetOrSetSetting(kAuthSecretSetting, candidate));
  if (!IsLowerHex(key, 64)) {
    return Corruption(std::string("setting '") + kAuthSecretSetting +
                      "' of the metadata database: not a registry secret (64 lower-case hex "
                      "digits expected)");
  }
  return std::unique_ptr<Authenticator>(new Authenticator(db, std::move(options), key));
}

std::string Authenticator::Sign(std::string_view data) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), int(secret_.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

Result<Principal> Authenticator::FromApiToken(std::string_view token, std::string user,
                                              int64_t now) const {
  Result<store::TokenRecord> rec = db_->FindToken(token);
  if (!rec.ok()) {
    if (rec.status().code() == Code::kNotFound) return Unauthorized("invalid token");
    return rec.status();
  }
  if (rec->revoked.has_value()) return Unauthorized("token '" + rec->name + "' was revoked");
  if (!rec->ActiveAt(now)) return Unauthorized("token '" + rec->name + "' has expired");
  Result<Scope> scope = Scope::Parse(rec->scope);
  if (!scope.ok()) {
    return Internal("stored scope of token '" + rec->name + "': " + scope.status().message());
  }
  Principal p;
  p.kind = Principal::Kind::kApiToken;
  p.token_id = rec->id;
  p.token_name = rec->name;
  p.user = std::move(user);
  p.token_scope = *scope;
  p.grants = std::move(*scope);
  return p;
}

Result<Principal> Authenticator::Authenticate(const RequestHead& head, int64_t now) const {
  std::optional<std::string> header = head.Get("Authorization");
  if (!header.has_value()) return Principal();
  std::string_view v = Trim(*header);
  if (StartsWithNoCase(v, "basic ")) {
    std::optional<std::string> decoded = Base64Decode(Trim(v.substr(6)), /*url=*/false);
    size_t colon = decoded.has_value() ? decoded->find(':') : std::string::npos;
    if (colon == std::string::npos) {
      return Unauthorized("malformed Basic credentials (expected base64 of user:password)");
    }
    std::string user = decoded->substr(0, colon);
    std::string_view password = std::string_view(*decoded).substr(colon + 1);
    if (password.rfind(kAccessTokenPrefix, 0) == 0) {
      BLZ_ASSIGN_OR_RETURN(Principal p, VerifyAccessToken(password, now));
      p.user = std::move(user);
      return p;
    }
    return FromApiToken(password, std::move(user), now);
  }
  if (StartsWithNoCase(v, "bearer ")) {
    std::string_view token = Trim(v.substr(7));
    if (token.empty()) return Unauthorized("empty Bearer token");
    if (token.rfind(kAccessTokenPrefix, 0) == 0) return VerifyAccessToken(token, now);
    // "hf_" + an API token: @huggingface/hub refuses access tokens without that prefix
    // (utils/checkCredentials.ts), so Hub clients send blz's tokens so (docs/huggingface.md).
    if (token.size() > 3 && token.substr(0, 3) == "hf_") token.remove_prefix(3);
    return FromApiToken(token, "", now);
  }
  return Unauthorized("unsupported Authorization scheme (use Basic or Bearer)");
}

std::string Authenticator::MintAccessToken(const Principal& who, const Scope& grants,
                                           bool catalog, int64_t issued_at,
                                           int64_t seconds) const {
  json claims = {{"sub", who.token_name}, {"tid", who.token_id}, {"usr", who.user},
                 {"acc", grants.ToString()}, {"cat", catalog},
                 {"iat", issued_at}, {"exp", issued_at + seconds}};
  std::string body = kAccessTokenPrefix +
                     Base64Encode(claims.dump(-1, ' ', false,
                                              json::error_handler_t::replace),
                                  /*url=*/true);
  return body + "." + Base64Encode(Sign(body), /*url=*/true);
}

Result<Principal> Authenticator::VerifyAccessToken(std::string_view token, int64_t now) const {
  size_t dot = token.rfind('.');
  if (token.rfind(kAccessTokenPrefix, 0) != 0 || dot == std::string_view::npos ||
      dot < sizeof(kAccessTokenPrefix) - 1) {
    return Unauthorized("malformed access token");
  }
  std::string_view body = token.substr(0, dot);
  std::optional<std::string> mac = Base64Decode(token.substr(dot + 1), /*url=*/true);
  const std::string expected = Sign(body);
  if (!mac.has_value() || mac->size() != expected.size() ||
      CRYPTO_memcmp(mac->data(), expected.data(), expected.size()) != 0) {
    return Unauthorized("access token has a bad signature");
  }
  std::optional<std::string> payload =
      Base64Decode(body.substr(sizeof(kAccessTokenPrefix) - 1), /*url=*/true);
  json claims = payload.has_value() ? json::parse(*payload, nullptr, false) : json();
  if (!claims.is_object() || !claims.contains("tid") || !claims["tid"].is_number_integer() ||
      !claims.contains("exp") || !claims["exp"].is_number_integer() ||
      !claims.contains("acc") || !claims["acc"].is_string() || !claims.contains("sub") ||
      !claims["sub"].is_string()) {
    return Unauthorized("malformed access token claims");
  }
  if (claims["exp"].get<int64_t>() <= now) {
    return Unauthorized("access token has expired (fetch a new one from the realm)");
  }
  Principal p;
  p.kind = Principal::Kind::kAccessToken;
  p.token_id = claims["tid"].get<int64_t>();
  p.token_name = claims["sub"].get<std::string>();
  if (claims.contains("usr") && claims["usr"].is_string()) p.user = claims["usr"];
  p.catalog = claims.contains("cat") && claims["cat"].is_boolean() && claims["cat"].get<bool>();
  const std::string acc = claims["acc"].get<std::string>();
  if (!acc.empty()) {
    Result<Scope> grants = Scope::Parse(acc);
    if (!grants.ok()) return Unauthorized("malformed access token grants");
    p.grants = std::move(*grants);
  }
  if (p.anonymous()) {
    if (options_.private_mode) return Unauthorized("anonymous access token on a private registry");
    return p;
  }
  // Stateless but revocable: the API token must still be there, unrevoked and unexpired.
  Result<store::TokenRecord> rec = db_->GetTokenById(p.token_id);
  if (!rec.ok()) {
    if (rec.status().code() == Code::kNotFound) return Unauthorized("access token's API token is gone");
    return rec.status();
  }
  if (rec->name != p.token_name || !rec->ActiveAt(now)) {
    return Unauthorized("token '" + p.token_name + "' was revoked or has expired");
  }
  Result<Scope> scope = Scope::Parse(rec->scope);
  if (!scope.ok()) return Internal("stored scope of token '" + rec->name + "' is malformed");
  p.token_scope = std::move(*scope);
  return p;
}

std::string Authenticator::Realm(const RequestHead& head) const {
  if (!options_.public_url.empty()) return options_.public_url + kTokenEndpointPath;
  std::optional<std::string> host =
      head.forwarded_host.empty() ? head.Get("Host") : std::optional(head.forwarded_host);
  std::string h = host.has_value() && IsSafeHost(*host) ? *host : std::string("localhost");
  const std::string scheme = head.scheme == "https" ? "https" : "http";
  return scheme + "://" + h + kTokenEndpointPath;
}

std::string Authenticator::Challenge(const RequestHead& head, const AccessNeed& need,
                                     bool insufficient_scope) const {
  const std::string realm = Realm(head);
  // The service: the realm's authority ("host:port").
  std::string service = realm.substr(realm.find("://") + 3);
  service = service.substr(0, service.find('/'));
  std::string out = "Bearer realm=\"" + realm + "\",service=\"" + service + "\"";
  if (std::string scope = ChallengeScope(need); !scope.empty()) {
    out += ",scope=\"" + scope + "\"";
  }
  if (insufficient_scope) out += ",error=\"insufficient_scope\"";
  return out;
}

std::optional<Response> Authenticator::Check(const RequestHead& head, const AccessNeed& need,
                                             std::string* principal) const {
  Principal who;
  std::optional<Response> denied = CheckAs(head, need, &who);
  if (!denied.has_value() && principal != nullptr) *principal = who.Describe();
  return denied;
}

std::optional<Response> Authenticator::CheckAs(const RequestHead& head, const AccessNeed& need,
                                               Principal* principal) const {
  if (need.kind == AccessNeed::Kind::kNone) return std::nullopt;
  Result<Principal> who = Authenticate(head, Now());
  if (!who.ok()) {
    if (who.status().code() == Code::kUnauthorized) {
      return Unauthorized401(who.status().message(), Challenge(head, need, false));
    }
    return ErrorResponse(who.status(), ErrorContext::kGeneral);
  }
  switch (Decide(*who, need, options_.private_mode)) {
    case Decision::kAllow:
      if (principal != nullptr) *principal = std::move(*who);
      return std::nullopt;
    case Decision::kChallenge:
      return Unauthorized401(
          need.kind == AccessNeed::Kind::kAuthenticated || options_.private_mode
              ? "authentication required"
              : "authentication required for this action",
          Challenge(head, need, false));
    case Decision::kChallengeInsufficient:
      return Unauthorized401("the access token does not grant this action (insufficient_scope)",
                             Challenge(head, need, true));
    case Decision::kDeny: break;
  }
  std::string what;
  switch (need.kind) {
    case AccessNeed::Kind::kRepository:
      what = ActionsToString(need.actions) + " on repository '" + need.repository + "'";
      break;
    case AccessNeed::Kind::kAnyPull: what = "pull on any repository"; break;
    default: what = "admin"; break;
  }
  // The scope the token has, so that the client can say what it lacked (issue 24).
  const std::string scope = who->grants.ToString();
  return ErrorResponse(OciError::kDenied,
                       "token '" + who->token_name + "' (scope '" + scope + "') does not grant " +
                           what,
                       json{{"token", who->token_name}, {"scope", scope}});
}

Response Authenticator::IssueToken(const RequestHead& head, std::string_view target) const {
  const int64_t now = Now();
  const std::string basic_challenge = "Basic realm=\"blz\"";
  Result<Principal> who = Authenticate(head, now);
  if (!who.ok()) {
    if (who.status().code() == Code::kUnauthorized) {
      return Unauthorized401(who.status().message(), basic_challenge);
    }
    return ErrorResponse(who.status(), ErrorContext::kGeneral);
  }
  if (who->kind == Principal::Kind::kAnonymous && options_.private_mode) {
    return Unauthorized401("this registry is private: send Basic credentials (password: a token)",
                           basic_challenge);
  }
  // Requested scopes: "repository:NAME:ACTIONS", possibly several per parameter, space-separated.
  std::vector<ScopeRule> granted;
  bool catalog = false;
  for (const std::string& param : QueryValues(target, "scope")) {
    size_t start = 0;
    while (start <= param.size()) {
      size_t end = param.find(' ', start);
      if (end == std::string::npos) end = param.size();
      std::string_view item = std::string_view(param).substr(start, end - start);
      start = end + 1;
      if (item.empty()) continue;
      size_t first = item.find(':');
      size_t last = item.rfind(':');
      if (first == std::string_view::npos || first == last) {
        return ErrorResponse(OciError::kBadRequest,
                             "malformed scope '" + std::string(item) +
                                 "' (expected repository:NAME:ACTIONS)");
      }
      std::string_view type = item.substr(0, first);
      std::string_view name = item.substr(first + 1, last - first - 1);
      std::string_view actions = item.substr(last + 1);
      if (type == "registry" && name == "catalog") {
        AccessNeed any;
        any.kind = AccessNeed::Kind::kAnyPull;
        catalog = catalog || Decide(*who, any, options_.private_mode) == Decision::kAllow;
        continue;
      }
      if (type != "repository" && type.rfind("repository(", 0) != 0) continue;  // not ours
      Status valid = ValidateRepositoryName(name);
      if (!valid.ok()) {
        return ErrorResponse(OciError::kBadRequest,
                             "scope '" + std::string(item) + "': " + valid.message());
      }
      ActionSet requested = kNoActions;
      size_t a = 0;
      while (a <= actions.size()) {
        size_t comma = actions.find(',', a);
        if (comma == std::string_view::npos) comma = actions.size();
        std::string_view word = actions.substr(a, comma - a);
        a = comma + 1;
        if (word == "*") requested |= kRepositoryActions;
        if (word == "pull") requested |= kActionPull;
        if (word == "push") requested |= kActionPush;
        if (word == "delete") requested |= kActionDelete;
        // Other actions are not granted (and not an error), as with distribution.
      }
      ActionSet grant =
          ActionSet(requested & HeldActions(*who, name, options_.private_mode));
      if (grant == kNoActions) continue;
      bool merged = false;
      for (ScopeRule& r : granted) {
        if (r.pattern == name) {
          r.actions |= grant;
          merged = true;
        }
      }
      if (!merged) granted.push_back({std::string(name), grant});
    }
  }
  const std::string token =
      MintAccessToken(*who, Scope(std::move(granted)), catalog, now, kAccessTokenSeconds);
  Response res;
  res.body = json{{"token", token},
                  {"access_token", token},
                  {"expires_in", kAccessTokenSeconds},
                  {"issued_at", FormatRfc3339UtcSeconds(now)}}
                 .dump();
  res.Set("Content-Type", "application/json");
  res.Set("Cache-Control", "no-store");
  return res;
}

}  // namespace blz::registry
