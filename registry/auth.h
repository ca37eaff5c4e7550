// Authentication and authorization of registry requests, as OCI registries do it (the Docker
// token flow of distribution's docs/spec/auth/token.md). docs/registry-api.md, "Authentication
// and authorization", is the user-facing description.
//
// Credentials, in the Authorization header of any /v2/ request:
//   Basic base64(user:password)   password = a blz API token (the user name is free-form and
//                                 only recorded, Principal::user)
//   Bearer <blz API token>        64 lower-case hex digits (blz's own client)
//   Bearer <access token>         issued by the token endpoint (below)
// API tokens live in the metadata DB (store/metadata_db.h), hashed, each with a scope
// (registry/scope.h), an optional expiry and a revocation mark.
//
// Token endpoint, GET /v2/_blz/token?service=S&scope=repository:NAME:pull,push[&scope=...]
// (the realm of every challenge): with Basic (or Bearer API token) credentials or none, answers
// {"token","access_token","expires_in","issued_at"} granting, per requested repository, the
// requested actions the caller holds (anonymous callers: pull, and only when the registry is
// not private). Access tokens are stateless: "blz1.<base64url(JSON claims)>.<base64url(
// HMAC-SHA256)>" under a per-registry secret (the metadata DB's setting kAuthSecretSetting,
// shared by every replica of the DB, so a token issued by one verifies on all), valid
// kAccessTokenSeconds; each use also checks, in the metadata DB, that the API token they were
// issued for is still present, unrevoked and unexpired, so revoking it (on any replica)
// invalidates them at once. Nothing about tokens is cached in the process.
//
// Decisions (Authenticator::Check):
//   no credentials, and the action is not open to anonymous callers  401 UNAUTHORIZED
//   bad, unknown, revoked or expired credentials                      401 UNAUTHORIZED
//   an access token lacking an action its API token holds             401 (insufficient_scope:
//                                                                     fetch a new access token)
//   valid credentials without the action                              403 DENIED
// Every 401 carries
//   WWW-Authenticate: Bearer realm="<public URL>/v2/_blz/token",service="<host>"
//                     [,scope="repository:NAME:ACTIONS"][,error="insufficient_scope"]
// Anonymous callers may pull (and list) unless the registry is private; GET /v2/ challenges
// them always (pushes need credentials, as with distribution), and answers 200 to any valid
// credentials.
#ifndef BLZ_REGISTRY_AUTH_H_
#define BLZ_REGISTRY_AUTH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "registry/http_message.h"
#include "registry/registry.h"
#include "registry/scope.h"
#include "store/metadata_db.h"

namespace blz::registry {

inline constexpr char kTokenEndpointPath[] = "/v2/_blz/token";
inline constexpr int64_t kAccessTokenSeconds = 300;
// Where blz before 0008_replicas kept the secret (<data>/auth_secret): imported once.
inline constexpr char kAuthSecretFile[] = "auth_secret";
inline constexpr char kAuthSecretSetting[] = "auth_secret";

// What a request needs (AccessNeedFor maps routes to it).
struct AccessNeed {
  enum class Kind : uint8_t {
    kNone,           // no check here (the token endpoint authenticates on its own)
    kAuthenticated,  // any valid credentials (GET /v2/)
    kRepository,     // `actions` on `repository`
    kAnyPull,        // pull on some repository (catalog, structure listings)
    kAdmin,          // the "admin" action (token admin API, garbage collection)
  };
  Kind kind = Kind::kNone;
  std::string repository;
  ActionSet actions = kNoActions;
};

// The access a route needs: GET/HEAD of a repository's paths: pull; blob uploads and manifest
// PUTs: push; DELETE: delete; /v2/: authenticated; /v2/_catalog, /v2/_blz/structures and
// /v2/_blz/storage (its handler shows the total and status to an admin only): pull somewhere;
// /v2/_blz/gc and /v2/_blz/tokens*: admin; /v2/_blz/token: none.
AccessNeed AccessNeedFor(const Registry::Route& route);

// Who sent a request.
struct Principal {
  enum class Kind : uint8_t {
    kAnonymous,    // no credentials
    kApiToken,     // a stored API token (Basic password or Bearer)
    kAccessToken,  // an access token from the token endpoint
  };
  Kind kind = Kind::kAnonymous;
  int64_t token_id = 0;    // the API token's row id; 0 = none (anonymous access tokens too)
  std::string token_name;  // the API token's name
  std::string user;        // the Basic user name (free-form; for logs)
  Scope token_scope;       // the API token's scope (empty when there is none)
  Scope grants;            // what these credentials grant (access tokens: their claims)
  bool catalog = false;    // an access token granted registry:catalog:*

  // No API token stands behind these credentials.
  bool anonymous() const { return token_id == 0; }
  // For logs: "" (anonymous), "<token name>" or "<user>@<token name>" (Basic user given).
  std::string Describe() const {
    if (anonymous()) return "";
    return user.empty() ? token_name : user + "@" + token_name;
  }
};

enum class Decision : uint8_t {
  kAllow,
  kChallenge,              // 401 with a challenge
  kChallengeInsufficient,  // 401 with error="insufficient_scope"
  kDeny,                   // 403 DENIED
};

// The pure decision (see the file comment). `private_mode`: anonymous callers may do nothing.
Decision Decide(const Principal& who, const AccessNeed& need, bool private_mode);

// The actions on `repository` that `who` holds (its grants, plus pull on a public registry).
ActionSet HeldActions(const Principal& who, std::string_view repository, bool private_mode);

// RFC 4648 base64 (`url`: the URL-safe alphabet, without padding). Decode accepts missing
// padding; nullopt for characters outside the alphabet.
std::string Base64Encode(std::string_view bytes, bool url);
std::optional<std::string> Base64Decode(std::string_view text, bool url);

struct AuthOptions {
  bool private_mode = false;
  // "http(s)://host[:port][/prefix]" as clients reach the registry; "" = the request's scheme
  // (https on a TLS listener or from a trusted proxy's X-Forwarded-Proto) + "://" + the
  // request's Host header. The realm is this + kTokenEndpointPath.
  std::string public_url;
};

class Authenticator {
 public:
  // Reads the secret from `db` (setting kAuthSecretSetting). When the DB has none, stores
  // the one of <data_dir>/auth_secret (written by an older blz, so its access tokens stay
  // valid), else 32 random bytes as hex; the first replica to store one wins and every other
  // gets its value (MetadataDb::GetOrSetSetting). The file is no longer written. `db` must
  // outlive the Authenticator. Errors: kInvalidArgument (bad public_url), kCorruption (a
  // malformed secret file or setting), kIOError and DB errors.
  static Result<std::unique_ptr<Authenticator>> Open(const std::string& data_dir,
                                                     store::MetadataDb* db, AuthOptions options);

  // The credentials of `head` (see the file comment). Errors: kUnauthorized (malformed header,
  // unsupported scheme, unknown / revoked / expired token, bad or expired access token),
  // DB errors (kIOError, kUnavailable).
  Result<Principal> Authenticate(const RequestHead& head, int64_t now) const;

  // nullopt when `head` may do `need` (then *principal, when not null, is set to the caller's
  // Principal::Describe()); else the error response (401 + challenge, 403 DENIED, 5xx on DB
  // failures).
  std::optional<Response> Check(const RequestHead& head, const AccessNeed& need,
                                std::string* principal = nullptr) const;
  // Check, giving the caller's whole Principal in *who (when not null) when allowed, so that
  // handlers decide what else it may read without authenticating again (registry/registry.cc
  // keeps it in Route::caller).
  std::optional<Response> CheckAs(const RequestHead& head, const AccessNeed& need,
                                  Principal* who) const;

  // GET /v2/_blz/token (see the file comment). `target` is the raw request target (several
  // scope= parameters are read). 400 BAD_REQUEST for a malformed scope; 401 (with
  // `WWW-Authenticate: Basic realm="blz"`) for bad credentials, or none on a private registry.
  Response IssueToken(const RequestHead& head, std::string_view target) const;

  // An access token for `who` granting `grants` (exact repository names) and, with `catalog`,
  // the catalog; issued at `issued_at`, valid `seconds`.
  std::string MintAccessToken(const Principal& who, const Scope& grants, bool catalog,
                              int64_t issued_at, int64_t seconds) const;
  // The principal of an access token. Errors: kUnauthorized (malformed, bad signature,
  // expired at `now`, its API token revoked / expired / gone, anonymous on a private
  // registry), DB errors.
  Result<Principal> VerifyAccessToken(std::string_view token, int64_t now) const;

  // The value of WWW-Authenticate for `head` when `need` is missing.
  std::string Challenge(const RequestHead& head, const AccessNeed& need,
                        bool insufficient_scope) const;
  // The realm: the public URL (or <head.scheme>://<head.forwarded_host or Host>) +
  // kTokenEndpointPath.
  std::string Realm(const RequestHead& head) const;

 private:
  Authenticator(store::MetadataDb* db, AuthOptions options, std::string secret)
      : db_(db), options_(std::move(options)), secret_(std::move(secret)) {}
  Result<Principal> FromApiToken(std::string_view token, std::string user, int64_t now) const;
  std::string Sign(std::string_view data) const;

  store::MetadataDb* db_;
  AuthOptions options_;
  std::string secret_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_AUTH_H_
