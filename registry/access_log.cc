#include "registry/access_log.h"

#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "core/time_format.h"
#include "registry/wire.h"

namespace blz::registry {

Result<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return InvalidArgument("log format '" + std::string(name) + "': must be text or json");
}

std::string_view LogFormatName(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}


namespace {

// Text fields are separated by spaces: an empty field becomes "-", spaces inside one are
// escaped as \x20 so that every line splits into the same columns.
std::string TextField(std::string_view s) {
  if (s.empty()) return "-";
  std::string out = EscapeForTerminal(s);
  std::string spaced;
  spaced.reserve(out.size());
  for (char c : out) {
    if (c == ' ') {
      spaced += "\\x20";
    } else {
      spaced += c;
    }
  }
  return spaced;
}

}  // namespace

std::string FormatAccessLog(const AccessLogEntry& e, LogFormat format) {
  const std::string path = RedactTarget(e.target);
  // Rounded to 0.1 ms in both formats.
  const double ms = double(int64_t(e.duration_ms * 10.0 + 0.5)) / 10.0;
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j = {
        {"time", FormatRfc3339Utc(e.time)},
        {"client", e.client.empty() ? "-" : e.client},
        {"user", e.user.empty() ? "-" : e.user},
        {"method", e.method.empty() ? "-" : e.method},
        {"path", path.empty() ? "-" : path},
        {"status",
         e.status == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.status)},
        {"bytes_in", e.bytes_in},
        {"bytes_out", e.bytes_out},
        {"duration_ms", ms},
        {"aborted", e.aborted}};
    if (!e.note.empty()) j["note"] = e.note;
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  }
  char tail[128];
  std::snprintf(tail, sizeof tail, " %llu %llu %.1fms",
                static_cast<unsigned long long>(e.bytes_in),
                static_cast<unsigned long long>(e.bytes_out), ms);
  std::string line = FormatRfc3339Utc(e.time) + " " + TextField(e.client) + " " +
                     TextField(e.user) + " " + TextField(e.method) + " " + TextField(path) + " " +
                     (e.status == 0 ? std::string("-") : std::to_string(e.status)) + tail;
  if (e.aborted) line += " aborted";
  if (!e.note.empty()) line += " (" + EscapeForTerminal(e.note) + ")";
  return line + "\n";
}

AccessLogSink StderrLogSink() {
  return [](const std::string& line) {
    std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines never interleave
  };
}

}  // namespace blz::registry
