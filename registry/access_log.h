// The access log of `blz serve`: one line per request, written to stderr by the session
// (registry/http_session.cc), which only fills an AccessLogEntry; FormatAccessLog is pure.
//
// Fields (docs/operating.md, "Access log"), in this order in the text format:
//   time       RFC 3339 UTC with milliseconds, when the request head arrived
//              ("2026-11-24T10:28:50.123Z")
//   client     the peer's address, "IP:port" ("[IPv6]:port")
//   user       the authenticated token's name, "-" when anonymous (Response::principal)
//   method     "GET", ... ("-" when the head could not be parsed)
//   path       the request target, secret query values REDACTED (registry/wire.h RedactTarget)
//   status     the response status; "-" (JSON: null) when none was sent (the client went away
//              or timed out while sending the request)
//   bytes_in   request body bytes read
//   bytes_out  response body bytes actually sent (fewer than announced when aborted)
//   duration   milliseconds from the head's arrival to the last byte written (or the abort)
//   aborted    the transfer did not complete (the client closed the connection, a timeout, a
//              write error); text: the word "aborted" after the duration
//   note       why (a refused slow body, the abort's cause); text: "(...)" at the end
// Text:  2026-11-24T10:28:50.123Z 127.0.0.1:51234 admin GET /v2/m/tags/list 200 0 37 1.2ms
// JSON:  {"time":"...","client":"...","user":"admin","method":"GET","path":"/v2/m/tags/list",
//         "status":200,"bytes_in":0,"bytes_out":37,"duration_ms":1.2,"aborted":false}
//        ("note" only when there is one). One object per line.
// Untrusted text (path, method, user, note) is escaped: core/text.h EscapeForTerminal in text,
// JSON string escaping (invalid UTF-8 replaced by U+FFFD) in JSON. Lines never contain a
// newline before their end.
#ifndef BLZ_REGISTRY_ACCESS_LOG_H_
#define BLZ_REGISTRY_ACCESS_LOG_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/time_format.h"

namespace blz::registry {

enum class LogFormat : uint8_t { kText, kJson };

// "text" or "json". Errors: kInvalidArgument naming the accepted values.
Result<LogFormat> ParseLogFormat(std::string_view name);
std::string_view LogFormatName(LogFormat format);

struct AccessLogEntry {
  std::chrono::system_clock::time_point time;
  std::string client;  // "127.0.0.1:51234"; "-" when unknown
  std::string user;    // "" = anonymous ("-")
  std::string method;
  std::string target;  // as received; redacted by FormatAccessLog
  int status = 0;      // 0 = no response was sent
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  double duration_ms = 0;
  bool aborted = false;
  std::string note;  // "" = none
};

// One log line, ending in '\n'.
std::string FormatAccessLog(const AccessLogEntry& entry, LogFormat format);


// Where finished lines go. Called concurrently from the I/O threads; one call per line.
using AccessLogSink = std::function<void(const std::string& line)>;
// Writes each line to stderr with a single fwrite (lines never interleave).
AccessLogSink StderrLogSink();

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_ACCESS_LOG_H_
