// The only registry translation unit that calls into the patcher's implementation: binaries that
// never compute patches (most registry tests) do not need to link it.
#include "patcher/patch.h"
#include "registry/registry.h"

namespace blz::registry {

PatchFunction PatcherPatchFunction() {
  return [](const std::string& base_archive, const std::string& target_archive,
            const std::string& out_path) -> Status {
    patcher::DiffStats stats;
    return patcher::CreatePatch(base_archive, target_archive, out_path, patcher::DiffOptions{},
                                &stats);
  };
}

}  // namespace blz::registry
