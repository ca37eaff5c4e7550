// GET /healthz and GET /readyz of `blz serve`, for load balancers and orchestrators. Served by
// the session (registry/http_session.cc) before the registry's routes and without
// authentication, even on a private registry (a load balancer has no token): they reveal only
// up/down and, on /readyz, which part is down (what went wrong: to an admin token only).
//   /healthz  200 {"status":"ok"} while the process serves requests (no dependency checks).
//   /readyz   200 {"status":"ready"} when the metadata database answers a trivial query and the
//             blob store is reachable (registry/readiness.h, cached ~1 s); else 503
//             {"status":"unavailable","failed":[{"part":"metadata"|"storage","error":"..."}]}
//             where "error" is "<part> unavailable" unless the request carries an admin
//             token: then the error itself (the database's URL without password, or the
//             bucket and endpoint; never credentials). The detail is also logged once per
//             distinct failure (registry/readiness.h) and blz_ready on /metrics is 0.
// Other methods than GET and HEAD: 405 with Allow: GET, HEAD. Responses are Cache-Control:
// no-store. Pure apart from the probe: a RequestHead in, a Response out; /readyz may run a
// database query, so run it off the I/O threads.
#ifndef BLZ_REGISTRY_HEALTH_HANDLERS_H_
#define BLZ_REGISTRY_HEALTH_HANDLERS_H_

#include <string_view>

#include "registry/http_message.h"
#include "registry/readiness.h"
#include "registry/registry.h"

namespace blz::registry {

inline constexpr char kHealthzPath[] = "/healthz";
inline constexpr char kReadyzPath[] = "/readyz";

enum class HealthTarget { kNone, kHealthz, kReadyz };
// Which of the two the target's path (query ignored) is, if any.
HealthTarget HealthTargetOf(std::string_view target);

Response HandleHealth(Registry& registry, const RequestHead& head, HealthTarget which);

// May the caller of `head` read what failed (an admin token: the "admin" action)? No without
// credentials, with bad ones, or when they cannot be checked (the database is down).
bool ReadinessDetailAllowed(Registry& registry, const RequestHead& head);
// The /readyz answer for `r`: "error" holds Status::ToString() with `detail`, else
// "<part> unavailable".
Response ReadyzResponse(const Readiness& r, bool detail);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_HEALTH_HANDLERS_H_
