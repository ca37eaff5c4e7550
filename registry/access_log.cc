#include "registry/access_log.h"

#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/text.h"
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

std::string FormatRfc3339Utc(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(time.time_since_epoch()).count();
  // Floor division, so instants before 1970 still get a millisecond part in [0, 999].
  int64_t secs = ms / 1000;
  int64_t milli = ms % 1000;
  if (milli < 0) {
    milli += 1000;
    secs -= 1;
  }
  const std::time_t t = std::time_t(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(milli));
  return buf;
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
