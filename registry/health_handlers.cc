#include "registry/health_handlers.h"

#include <ctime>
#include <utility>

#include <nlohmann/json.hpp>

#include "registry/auth.h"
#include "registry/errors.h"

namespace blz::registry {

Readiness ReadinessProbe::Check() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (probed_ && now - when_ < ttl_) return last_;
  Readiness r;
  r.metadata = ping_metadata_ ? ping_metadata_() : Status::Ok();
  r.storage = check_storage_ ? check_storage_() : Status::Ok();
  r.ready = r.metadata.ok() && r.storage.ok();
  // The detail goes to the log (once per distinct failure), not to anonymous callers.
  std::string failure;
  if (!r.metadata.ok()) failure += "metadata: " + r.metadata.ToString();
  if (!r.storage.ok()) failure += (failure.empty() ? "" : "; ") + ("storage: " + r.storage.ToString());
  if (failure != logged_) {
    if (log_) log_(failure.empty() ? "readiness: ready again" : "readiness: not ready: " + failure);
    logged_ = failure;
  }
  last_ = r;
  probed_ = true;
  when_ = std::chrono::steady_clock::now();
  return last_;
}

bool ReadinessDetailAllowed(Registry& registry, const RequestHead& head) {
  if (!head.Get("Authorization").has_value()) return false;
  Result<Principal> who = registry.auth().Authenticate(head, int64_t(std::time(nullptr)));
  if (!who.ok()) return false;
  AccessNeed need;
  need.kind = AccessNeed::Kind::kAdmin;
  return Decide(*who, need, registry.options().private_mode) == Decision::kAllow;
}

Response ReadyzResponse(const Readiness& r, bool detail) {
  nlohmann::json body;
  Response res;
  if (r.ready) {
    body["status"] = "ready";
  } else {
    res.status = 503;
    body["status"] = "unavailable";
    // Which part is down, for anyone; what the error says (the database's host and port, the
    // bucket, the endpoint) only with `detail`: the log has it too.
    nlohmann::json failed = nlohmann::json::array();
    for (const auto& [part, status] : {std::pair<const char*, const Status*>{"metadata", &r.metadata},
                                       {"storage", &r.storage}}) {
      if (status->ok()) continue;
      failed.push_back({{"part", part},
                        {"error", detail ? status->ToString() : std::string(part) + " unavailable"}});
    }
    body["failed"] = std::move(failed);
    res.Set("Retry-After", "1");
  }
  res.body = body.dump() + "\n";
  res.Set("Content-Type", "application/json");
  res.Set("Cache-Control", "no-store");
  return res;
}

HealthTarget HealthTargetOf(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == kHealthzPath) return HealthTarget::kHealthz;
  if (path == kReadyzPath) return HealthTarget::kReadyz;
  return HealthTarget::kNone;
}

Response HandleHealth(Registry& registry, const RequestHead& head, HealthTarget which) {
  if (head.method != "GET" && head.method != "HEAD") {
    Response res = ErrorResponse(OciError::kUnsupported,
                                 "method " + head.method + " not allowed on " +
                                     (which == HealthTarget::kReadyz ? kReadyzPath : kHealthzPath));
    res.Set("Allow", "GET, HEAD");
    return res;
  }
  Response res;
  if (which == HealthTarget::kReadyz) {
    const Readiness r = registry.readiness().Check();
    res = ReadyzResponse(r, !r.ready && ReadinessDetailAllowed(registry, head));
  } else {
    res.body = "{\"status\":\"ok\"}\n";
    res.Set("Content-Type", "application/json");
    res.Set("Cache-Control", "no-store");
  }
  res.head_only = head.method == "HEAD";
  return res;
}

}  // namespace blz::registry
