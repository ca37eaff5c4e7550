// How the registry computes lossy deltas (GET /v2/<name>/blz/delta, docs/registry-api.md "Lossy
// deltas"): a DeltaFunction in RegistryOptions, so that binaries that never compute deltas
// (most registry tests) need not link patcher/lossy's implementation; LossyDeltaFunction()
// (registry/delta_function.cc, the only registry file that calls it) is the real one.
#ifndef BLZ_REGISTRY_DELTA_FUNCTION_H_
#define BLZ_REGISTRY_DELTA_FUNCTION_H_

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "patcher/lossy/lossy_delta.h"

namespace blz::registry {

// The strategy names ?strategy= takes: lossy::StrategyName of every lossy::Strategy (the
// handler validates with this list so that it does not call into patcher/lossy).
inline constexpr std::string_view kDeltaStrategies[] = {"sparse",   "quantized", "int4",
                                                        "bitdelta", "lowrank",   "auto"};

// Writes the .wdelta from `base_archive` to `target_archive` (both .blz files) at `out_path`
// with `options` and returns its measured report: lossy::DeltaReportJson of CreateDelta's
// report, as JSON object text. Errors: those of CreateDelta and the readers.
using DeltaFunction = std::function<Result<std::string>(
    const std::string& base_archive, const std::string& target_archive,
    const lossy::CreateOptions& options, const std::string& out_path)>;

// lossy::CreateDelta on formats::ModelTensors::Open of both archives; a ?async=1 request's job
// counters (registry/background_jobs.h) receive its progress.
DeltaFunction LossyDeltaFunction();

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_DELTA_FUNCTION_H_
