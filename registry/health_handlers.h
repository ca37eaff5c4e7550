// GET /healthz and GET /readyz of `blz serve`, for load balancers and orchestrators. Served by
// the session (registry/http_session.cc) before the registry's routes and without
// authentication, even on a private registry (a load balancer has no token): they reveal only
// up/down and, on /readyz, which part is down.
//   /healthz  200 {"status":"ok"} while the process serves requests (no dependency checks).
//   /readyz   200 {"status":"ready"} when the metadata database answers a trivial query and the
//             blob store is reachable (registry/readiness.h, cached ~1 s); else 503
//             {"status":"unavailable","failed":[{"part":"metadata"|"storage","error":"..."}]}
//             (the errors name the database's URL without password, or the bucket; never
//             credentials).
// Other methods than GET and HEAD: 405 with Allow: GET, HEAD. Responses are Cache-Control:
// no-store. Pure apart from the probe: a RequestHead in, a Response out; /readyz may run a
// database query, so run it off the I/O threads.
#ifndef BLZ_REGISTRY_HEALTH_HANDLERS_H_
#define BLZ_REGISTRY_HEALTH_HANDLERS_H_

#include <string_view>

#include "registry/http_message.h"
#include "registry/registry.h"

namespace blz::registry {

inline constexpr char kHealthzPath[] = "/healthz";
inline constexpr char kReadyzPath[] = "/readyz";

enum class HealthTarget { kNone, kHealthz, kReadyz };
// Which of the two the target's path (query ignored) is, if any.
HealthTarget HealthTargetOf(std::string_view target);

Response HandleHealth(Registry& registry, const RequestHead& head, HealthTarget which);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_HEALTH_HANDLERS_H_
