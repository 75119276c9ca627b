// SelectBackend and BackendBuildDescription (include/homodyne/backend.h): performance.backend
// resolved in one place, from what this build links (cuda_device_query.h) and what the CUDA
// runtime finds on this machine.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <utility>

#include "homodyne/backend.h"
#include "homodyne/errors.h"
#include "objective/backend_selection.h"
#include "objective/backend_self_check.h"
#include "objective/cuda_device_query.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

// The CUDA backend on device 0, or why there is none: the build, the machine, or the device.
// Asks the CUDA runtime only in a build that links it.
struct CudaAvailability {
  std::shared_ptr<PassBackend> backend;  // null when CUDA cannot run
  std::string why_not;                   // set when backend is null
  std::string device;                    // "NAME (X GiB)" of device 0 when found
};

CudaAvailability FindCuda() {
  CudaAvailability availability;
  if (!cuda::BuiltWithCuda()) {
    availability.why_not = "built without CUDA";
    return availability;
  }
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) {
    availability.why_not = "no CUDA device (" + devices.error + ")";
    return availability;
  }
  availability.device = devices.device0;
  try {
    availability.backend = MakeCudaPassBackend(0);
  } catch (const Error& error) {
    availability.why_not = "CUDA device 0 (" + devices.device0 + ") unusable: " + error.what();
  }
  return availability;
}

// The CUDA backend behind its self-check; the report goes to the log and to choice.self_check.
BackendChoice SelfChecked(std::shared_ptr<PassBackend> device, BackendKind requested,
                          std::string reason) {
  BackendChoice choice;
  choice.reason = std::move(reason);
  auto report_slot = std::make_shared<SelfCheckReport>();
  choice.self_check = report_slot;
  const SelfCheckPolicy policy = SelfCheckPolicyFor(requested);
  choice.backend = MakeSelfCheckingBackend(
      std::move(device), MakeCpuPassBackend(), policy,
      [report_slot, policy](const SelfCheckReport& report) {
        *report_slot = report;
        if (report.passed) {
          spdlog::info("{}", report.Describe());
        } else if (policy == SelfCheckPolicy::kFallBack) {
          spdlog::warn("{}; backend auto: computing on the CPU instead", report.Describe());
        }  // kStop: the ConfigError carries the message
      });
  return choice;
}

}  // namespace

BackendChoice SelectBackend(BackendKind requested) {
  if (requested == BackendKind::kCpu) return {MakeCpuPassBackend(), "backend cpu", nullptr};
  CudaAvailability cuda = FindCuda();
  if (requested == BackendKind::kAuto) {
    if (cuda.backend == nullptr) {
      return {MakeCpuPassBackend(), "backend auto: cpu (" + cuda.why_not + ")", nullptr};
    }
    return SelfChecked(std::move(cuda.backend), requested,
                       "backend auto: cuda on device 0: " + cuda.device +
                           " (self-checked against the CPU before the first pass)");
  }
  // docs/design.md section 5: a backend this build or machine lacks is an error, never a silent
  // CPU run.
  if (!cuda::BuiltWithCuda()) {
    throw ConfigError(
        "backend cuda: this homodyne was built without CUDA (this version has no CUDA backend); "
        "use --backend cpu or auto");
  }
  if (cuda.backend == nullptr) {
    throw ConfigError("backend cuda: " + cuda.why_not + "; use --backend cpu or auto");
  }
  return SelfChecked(std::move(cuda.backend), requested,
                     "backend cuda on device 0: " + cuda.device +
                         " (self-checked against the CPU before the first pass)");
}

std::string BackendBuildDescription() {
  return cuda::BuiltWithCuda()
             ? "backend cpu; CUDA runtime linked, with CUDA kernels for sm_80 and sm_90 "
               "(self-checked on every run; not yet run on GPU hardware: docs/backends.md)"
             : "backend cpu; built without CUDA";
}

}  // namespace homodyne
