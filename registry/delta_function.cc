// The only registry translation unit that calls into patcher/lossy's implementation (see
// registry/delta_function.h).
#include "registry/delta_function.h"

#include "formats/tensor_stats.h"
#include "registry/background_jobs.h"

namespace blz::registry {

DeltaFunction LossyDeltaFunction() {
  return [](const std::string& base_archive, const std::string& target_archive,
            const lossy::CreateOptions& options,
            const std::string& out_path) -> Result<std::string> {
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors base, formats::ModelTensors::Open(base_archive));
    BLZ_ASSIGN_OR_RETURN(formats::ModelTensors target,
                         formats::ModelTensors::Open(target_archive));
    lossy::CreateOptions o = options;
    if (o.counters == nullptr) o.counters = CurrentJobCounters();  // ?async=1 shows progress
    BLZ_ASSIGN_OR_RETURN(lossy::DeltaReport report,
                         lossy::CreateDelta(base, target, out_path, o));
    report.path.clear();  // a temporary path of the server's: the handler names the blob
    return lossy::DeltaReportJson(report).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
  };
}

}  // namespace blz::registry
