#include "registry/wire.h"

#include <limits>

namespace blz::registry {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool IsValidComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  size_t i = 0;
  while (i < c.size()) {
    if (IsLowerAlnum(c[i])) {
      ++i;
      continue;
    }
    // A separator run: ".", "_", "__" or one or more "-".
    size_t j = i;
    while (j < c.size() && !IsLowerAlnum(c[j])) ++j;
    std::string_view sep = c.substr(i, j - i);
    bool ok = sep == "." || sep == "_" || sep == "__" ||
              sep.find_first_not_of('-') == std::string_view::npos;
    if (!ok) return false;
    i = j;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 9110 §5.6.2 tchar.
constexpr std::string_view kTokenChars =
    "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Status ValidateRepositoryName(std::string_view name) {
  if (name.empty()) return InvalidArgument("repository name is empty");
  if (name.size() > kMaxNameLength) {
    return InvalidArgument("repository name is " + std::to_string(name.size()) +
                           " bytes long, more than " + std::to_string(kMaxNameLength));
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view comp = name.substr(start, end - start);
    if (!IsValidComponent(comp)) {
      return InvalidArgument("invalid repository name '" + std::string(name) + "': component '" +
                             std::string(comp) +
                             "' must match [a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*");
    }
    start = end + 1;
  }
  return Status::Ok();
}

bool IsValidTag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  for (size_t i = 0; i < tag.size(); ++i) {
    char c = tag[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum || c == '_') continue;
    if (i > 0 && (c == '.' || c == '-')) continue;
    return false;
  }
  return true;
}

Result<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) {
      return InvalidArgument("truncated percent-escape in '" + std::string(s) + "'");
    }
    int hi = HexValue(s[i + 1]);
    int lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return InvalidArgument("bad percent-escape in '" + std::string(s) + "'");
    out.push_back(char(hi * 16 + lo));
    i += 2;
  }
  if (out.find('\0') != std::string::npos) return InvalidArgument("NUL byte in request target");
  return out;
}

Result<Target> ParseTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return InvalidArgument("request target must start with '/'");
  }
  Target t;
  size_t q = target.find('?');
  std::string_view raw_path = target.substr(0, q);
  std::string_view raw_query = q == std::string_view::npos ? "" : target.substr(q + 1);
  size_t hash = raw_query.find('#');
  if (hash != std::string_view::npos) raw_query = raw_query.substr(0, hash);

  // Split before decoding, so an encoded '/' (%2F) stays inside its component.
  size_t start = 1;
  while (start <= raw_path.size()) {
    size_t end = raw_path.find('/', start);
    if (end == std::string_view::npos) end = raw_path.size();
    std::string_view raw = raw_path.substr(start, end - start);
    BLZ_ASSIGN_OR_RETURN(std::string comp, PercentDecode(raw));
    t.components.push_back(std::move(comp));
    t.raw_components.emplace_back(raw);
    start = end + 1;
  }
  BLZ_ASSIGN_OR_RETURN(t.path, PercentDecode(raw_path));

  start = 0;
  while (start < raw_query.size()) {
    size_t end = raw_query.find('&', start);
    if (end == std::string_view::npos) end = raw_query.size();
    std::string_view pair = raw_query.substr(start, end - start);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      BLZ_ASSIGN_OR_RETURN(std::string key, PercentDecode(pair.substr(0, eq)));
      std::string value;
      if (eq != std::string_view::npos) {
        BLZ_ASSIGN_OR_RETURN(value, PercentDecode(pair.substr(eq + 1)));
      }
      t.query.emplace(std::move(key), std::move(value));
    }
    start = end + 1;
  }
  return t;
}

bool IsSecretParameter(std::string_view name) {
  std::string n(name);
  for (char& c : n) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c == '-') c = '_';
  }
  static constexpr std::string_view kExact[] = {
      "token",   "access_token", "id_token", "refresh_token", "password",   "passwd",
      "pass",    "pwd",          "secret",   "client_secret", "key",        "api_key",
      "apikey",  "auth",         "authorization", "sig",      "signature",  "credential",
      "credentials", "session",  "x_amz_signature", "x_amz_credential", "x_amz_security_token"};
  for (std::string_view e : kExact) {
    if (n == e) return true;
  }
  const auto ends_with = [&](std::string_view suffix) {
    return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(),
                                                  suffix) == 0;
  };
  return ends_with("token") || ends_with("secret") || ends_with("password") ||
         ends_with("_key") || ends_with("signature");
}

std::string RedactTarget(std::string_view target) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::string(target);
  std::string out(target.substr(0, q + 1));
  std::string_view query = target.substr(q + 1);
  std::string_view fragment;
  if (size_t hash = query.find('#'); hash != std::string_view::npos) {
    fragment = query.substr(hash);
    query = query.substr(0, hash);
  }
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(start, end - start);
    const size_t eq = pair.find('=');
    bool secret = false;
    if (eq != std::string_view::npos) {
      Result<std::string> key = PercentDecode(pair.substr(0, eq));
      secret = key.ok() ? IsSecretParameter(*key) : IsSecretParameter(pair.substr(0, eq));
    }
    if (secret) {
      out.append(pair.substr(0, eq + 1));
      out.append("REDACTED");
    } else {
      out.append(pair);
    }
    if (end == query.size()) break;
    out.push_back('&');
    start = end + 1;
  }
  out.append(fragment);
  return out;
}

Status CheckRequestFraming(const std::vector<std::string_view>& transfer_encodings,
                           bool has_content_length, bool http10) {
  if (transfer_encodings.empty()) return Status::Ok();
  std::string all;  // the field values as one list, for messages
  for (std::string_view v : transfer_encodings) {
    if (!all.empty()) all += ", ";
    all += v;
  }
  const std::string field = "Transfer-Encoding '" + all + "'";
  if (http10) return InvalidArgument(field + " in an HTTP/1.0 request");
  // transfer-coding = token *( OWS ";" OWS transfer-parameter ); only the token matters here.
  std::vector<std::string> codings;
  for (std::string_view value : transfer_encodings) {
    size_t start = 0;
    while (start <= value.size()) {
      size_t end = value.find(',', start);
      if (end == std::string_view::npos) end = value.size();
      std::string_view element = Trim(value.substr(start, end - start));
      std::string_view name = Trim(element.substr(0, element.find(';')));
      if (name.empty() || name.find_first_not_of(kTokenChars) != std::string_view::npos) {
        return InvalidArgument(field + " is not a list of transfer codings");
      }
      std::string lower(name);
      for (char& c : lower) {
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      }
      if (lower == "chunked" && name.size() != element.size()) {
        return InvalidArgument(field + ": chunked takes no parameters");
      }
      codings.push_back(std::move(lower));
      start = end + 1;
    }
  }
  for (size_t i = 0; i < codings.size(); ++i) {
    if (codings[i] == "chunked" && i + 1 != codings.size()) {
      return InvalidArgument(field + ": chunked must be the final coding, applied once");
    }
  }
  for (const std::string& c : codings) {
    if (c != "chunked") {
      return Unsupported(field + ": transfer coding '" + c +
                         "' is not implemented (blz accepts only chunked)");
    }
  }
  if (has_content_length) {
    return InvalidArgument(field + " together with Content-Length");
  }
  return Status::Ok();
}

std::optional<uint64_t> ParseUint(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = uint64_t(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

RangeRequest ParseRangeHeader(std::optional<std::string_view> header, uint64_t size) {
  RangeRequest whole;
  if (!header.has_value()) return whole;
  std::string_view h = Trim(*header);
  constexpr std::string_view kUnit = "bytes=";
  if (h.size() < kUnit.size()) return whole;
  for (size_t i = 0; i < kUnit.size(); ++i) {
    char c = h[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != kUnit[i]) return whole;  // another unit: ignore
  }
  std::string_view spec = Trim(h.substr(kUnit.size()));
  if (spec.find(',') != std::string_view::npos) return whole;  // multi-range: ignore
  size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return whole;
  std::string_view a = Trim(spec.substr(0, dash));
  std::string_view b = Trim(spec.substr(dash + 1));
  RangeRequest out;
  out.kind = RangeRequest::Kind::kUnsatisfiable;
  if (a.empty()) {  // suffix: the last n bytes
    std::optional<uint64_t> n = ParseUint(b);
    if (!n.has_value()) return whole;
    if (*n == 0 || size == 0) return out;
    uint64_t len = *n < size ? *n : size;
    out.kind = RangeRequest::Kind::kPartial;
    out.range = {size - len, size - 1};
    return out;
  }
  std::optional<uint64_t> first = ParseUint(a);
  if (!first.has_value()) return whole;
  uint64_t last = size == 0 ? 0 : size - 1;
  if (!b.empty()) {
    std::optional<uint64_t> parsed = ParseUint(b);
    if (!parsed.has_value()) return whole;
    if (*parsed < *first) return out;  // "500-0": unsatisfiable
    if (*parsed < last) last = *parsed;
  }
  if (*first >= size) return out;
  out.kind = RangeRequest::Kind::kPartial;
  out.range = {*first, last};
  return out;
}

std::optional<ByteRange> ParseChunkRange(std::string_view header) {
  std::string_view h = Trim(header);
  if (h.rfind("bytes ", 0) == 0 || h.rfind("bytes=", 0) == 0) {
    h = h.substr(6);
    size_t slash = h.find('/');
    if (slash != std::string_view::npos) h = h.substr(0, slash);
  }
  size_t dash = h.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::optional<uint64_t> a = ParseUint(h.substr(0, dash));
  std::optional<uint64_t> b = ParseUint(h.substr(dash + 1));
  if (!a.has_value() || !b.has_value() || *a > *b) return std::nullopt;
  return ByteRange{*a, *b};
}

}  // namespace blz::registry
