// SelectBackend and BackendBuildDescription (include/homodyne/backend.h): performance.backend
// resolved in one place, from what this build links (cuda_device_query.h) and what the CUDA
// runtime finds on this machine.
#include <string>

#include "objective/cuda_device_query.h"
#include "homodyne/backend.h"
#include "objective/backend_selection.h"
#include "homodyne/errors.h"

namespace homodyne {
namespace {

// Why this run cannot compute on CUDA: the build, the machine, or this version (no kernels).
// Asks the CUDA runtime only in a build that links it.
std::string WhyNotCuda() {
  if (!cuda::BuiltWithCuda()) return "built without CUDA";
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) return "no CUDA device (" + devices.error + ")";
  return "this version has no CUDA kernels; found CUDA device 0: " + devices.device0;
}

}  // namespace

BackendChoice SelectBackend(BackendKind requested) {
  switch (requested) {
    case BackendKind::kCpu:
      return {MakeCpuPassBackend(), "backend cpu"};
    case BackendKind::kAuto:
      return {MakeCpuPassBackend(), "backend auto: cpu (" + WhyNotCuda() + ")"};
    case BackendKind::kCuda:
      break;
  }
  // docs/design.md section 5: a backend this build or machine lacks is an error, never a silent
  // CPU run.
  if (!cuda::BuiltWithCuda()) {
    throw ConfigError(
        "backend cuda: this homodyne was built without CUDA (this version has no CUDA backend); "
        "use --backend cpu or auto");
  }
  throw ConfigError("backend cuda: " + WhyNotCuda() + "; use --backend cpu or auto");
}

std::string BackendBuildDescription() {
  return cuda::BuiltWithCuda() ? "backend cpu; CUDA runtime linked, built without CUDA kernels"
                               : "backend cpu; built without CUDA";
}

}  // namespace homodyne
