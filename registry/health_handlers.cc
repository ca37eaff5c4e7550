#include "registry/health_handlers.h"

#include <nlohmann/json.hpp>

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
  last_ = r;
  probed_ = true;
  when_ = std::chrono::steady_clock::now();
  return last_;
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
  nlohmann::json body;
  Response res;
  if (which == HealthTarget::kReadyz) {
    const Readiness r = registry.readiness().Check();
    if (r.ready) {
      body["status"] = "ready";
    } else {
      res.status = 503;
      body["status"] = "unavailable";
      nlohmann::json failed = nlohmann::json::array();
      if (!r.metadata.ok()) {
        failed.push_back({{"part", "metadata"}, {"error", r.metadata.ToString()}});
      }
      if (!r.storage.ok()) {
        failed.push_back({{"part", "storage"}, {"error", r.storage.ToString()}});
      }
      body["failed"] = std::move(failed);
      res.Set("Retry-After", "1");
    }
  } else {
    body["status"] = "ok";
  }
  res.body = body.dump() + "\n";
  res.Set("Content-Type", "application/json");
  res.Set("Cache-Control", "no-store");
  res.head_only = head.method == "HEAD";
  return res;
}

}  // namespace blz::registry
