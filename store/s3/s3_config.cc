#include "store/s3/s3_config.h"

#include <cstdlib>

namespace blz::store::s3 {
namespace {

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return b.front() != '.' && b.front() != '-' && b.back() != '.' && b.back() != '-';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size() || HexValue(s[i + 1]) < 0 || HexValue(s[i + 2]) < 0) {
      return InvalidArgument("malformed percent escape in '" + std::string(s) + "'");
    }
    out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
    i += 2;
  }
  return out;
}

Result<S3Endpoint> ParseS3Endpoint(std::string_view url) {
  S3Endpoint ep;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    ep.tls = true;
    rest = url.substr(8);
  } else {
    return InvalidArgument("S3 endpoint '" + std::string(url) + "' is not http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find_first_of("/@?#") != std::string_view::npos) {
    return InvalidArgument("S3 endpoint '" + std::string(url) +
                           "' must be scheme://HOST[:PORT] without a path");
  }
  ep.port = ep.tls ? 443 : 80;
  size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos && rest.find(']') == std::string_view::npos) {
    std::string_view port = rest.substr(colon + 1);
    unsigned value = 0;
    if (port.empty() || port.size() > 5) {
      return InvalidArgument("S3 endpoint '" + std::string(url) + "': bad port");
    }
    for (char c : port) {
      if (c < '0' || c > '9') return InvalidArgument("S3 endpoint '" + std::string(url) + "': bad port");
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535) {
      return InvalidArgument("S3 endpoint '" + std::string(url) + "': bad port");
    }
    ep.port = static_cast<uint16_t>(value);
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return InvalidArgument("S3 endpoint '" + std::string(url) + "' has no host");
  ep.host = std::string(rest);
  return ep;
}

Result<S3Config> ParseS3Url(std::string_view url) {
  constexpr std::string_view kScheme = "s3://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return InvalidArgument("storage URL '" + std::string(url) + "' does not start with s3://");
  }
  std::string_view rest = url.substr(kScheme.size());
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  S3Config config;
  size_t slash = rest.find('/');
  config.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash + 1);
    BLZ_ASSIGN_OR_RETURN(config.prefix, PercentDecode(prefix));
  }
  if (!ValidBucket(config.bucket)) {
    return InvalidArgument("storage URL '" + std::string(url) + "': bucket name '" +
                           config.bucket + "' is not 3-63 characters of a-z 0-9 . -");
  }
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (param.empty()) continue;
    size_t eq = param.find('=');
    std::string_view name = param.substr(0, eq);
    BLZ_ASSIGN_OR_RETURN(std::string value,
                         PercentDecode(eq == std::string_view::npos ? "" : param.substr(eq + 1)));
    if (name == "endpoint") {
      BLZ_RETURN_IF_ERROR(ParseS3Endpoint(value).status().WithContext("storage URL"));
      config.endpoint = value;
    } else if (name == "region") {
      config.region = value;
    } else if (name == "path_style") {
      if (value != "0" && value != "1") {
        return InvalidArgument("storage URL: path_style must be 0 or 1, not '" + value + "'");
      }
      config.path_style = value == "1";
    } else {
      return InvalidArgument("storage URL '" + std::string(url) + "': unknown parameter '" +
                             std::string(name) + "' (known: endpoint, region, path_style)");
    }
  }
  return config;
}

Status ApplyS3Environment(S3Config* config, const EnvReader& getenv_fn) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  config->credentials.access_key_id = get("AWS_ACCESS_KEY_ID");
  config->credentials.secret_access_key = get("AWS_SECRET_ACCESS_KEY");
  config->credentials.session_token = get("AWS_SESSION_TOKEN");
  if (config->credentials.access_key_id.empty()) {
    return Unauthorized("S3 bucket " + config->bucket + ": AWS_ACCESS_KEY_ID is not set");
  }
  if (config->credentials.secret_access_key.empty()) {
    return Unauthorized("S3 bucket " + config->bucket + ": AWS_SECRET_ACCESS_KEY is not set");
  }
  if (config->region.empty()) config->region = get("AWS_REGION");
  if (config->region.empty()) config->region = "us-east-1";
  if (config->endpoint.empty()) config->endpoint = get("AWS_ENDPOINT_URL_S3");
  if (config->endpoint.empty()) config->endpoint = "https://s3." + config->region + ".amazonaws.com";
  return ParseS3Endpoint(config->endpoint).status().WithContext("S3 endpoint");
}

}  // namespace blz::store::s3
