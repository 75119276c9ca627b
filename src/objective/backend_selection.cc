// SelectBackend and BackendBuildDescription (include/homodyne/backend.h): performance.backend
// resolved in one place, from what this build links (cuda_device_query.h) and what the CUDA
// runtime finds on this machine.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/backend.h"
#include "homodyne/errors.h"
#include "objective/backend_selection.h"
#include "objective/backend_self_check.h"
#include "objective/cuda_device_query.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

// The CUDA backend on the devices asked for (gpu_devices; empty: every visible device), or why
// there is none: the build, the machine, the list, or a device.
struct CudaAvailability {
  std::shared_ptr<PassBackend> backend;  // null when CUDA cannot run
  std::string why_not;                   // set when backend is null
  std::string devices;  // "device 0: NAME (X GiB)" (one device) or "devices 0, 1 (...)"
};

std::string JoinIndices(const std::vector<int>& indices) {
  std::string text;
  for (size_t i = 0; i < indices.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(indices[i]);
  }
  return text;
}

CudaAvailability FindCuda(const std::vector<int>& gpu_devices) {
  CudaAvailability availability;
  if (!cuda::BuiltWithCuda()) {
    availability.why_not = "built without CUDA";
    return availability;
  }
  const cuda::DeviceQuery query = cuda::QueryDevices();
  if (query.device_count == 0) {
    availability.why_not = "no CUDA device (" + query.error + ")";
    return availability;
  }
  std::vector<int> devices = gpu_devices;
  if (devices.empty()) {
    for (int d = 0; d < query.device_count; ++d) devices.push_back(d);
  }
  for (const int device : devices) {
    if (device < 0 || device >= query.device_count) {
      availability.why_not = "performance.gpu_devices names device " + std::to_string(device) +
                             ", but the CUDA runtime sees " + std::to_string(query.device_count) +
                             " device(s), numbered from 0";
      return availability;
    }
  }
  const std::string which = devices.size() == 1 ? "device " + std::to_string(devices[0])
                                                : "devices " + JoinIndices(devices);
  try {
    availability.backend = MakeCudaPassBackend(devices);
  } catch (const Error& error) {
    availability.why_not = "CUDA " + which +
                           (devices == std::vector<int>{0} ? " (" + query.device0 + ")" : "") +
                           " unusable: " + error.what();
    return availability;
  }
  if (devices.size() == 1 && devices[0] == 0) {
    availability.devices = which + ": " + query.device0;
  } else {
    const auto& backend = dynamic_cast<const DevicePassBackend&>(*availability.backend);
    availability.devices = which + " (";
    for (int d = 0; d < backend.num_devices(); ++d) {
      availability.devices += (d == 0 ? "" : "; ") + backend.device(d).description();
    }
    availability.devices += ")";
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

BackendChoice SelectBackend(BackendKind requested, const std::vector<int>& gpu_devices) {
  if (requested == BackendKind::kCpu) return {MakeCpuPassBackend(), "backend cpu", nullptr};
  CudaAvailability cuda = FindCuda(gpu_devices);
  if (requested == BackendKind::kAuto) {
    if (cuda.backend == nullptr) {
      return {MakeCpuPassBackend(), "backend auto: cpu (" + cuda.why_not + ")", nullptr};
    }
    return SelfChecked(std::move(cuda.backend), requested,
                       "backend auto: cuda on " + cuda.devices +
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
  return SelfChecked(
      std::move(cuda.backend), requested,
      "backend cuda on " + cuda.devices + " (self-checked against the CPU before the first pass)");
}

std::string BackendBuildDescription() {
  return cuda::BuiltWithCuda()
             ? "backend cpu; CUDA runtime linked, with CUDA kernels for sm_80 and sm_90 "
               "(self-checked on every run; not yet run on GPU hardware: docs/backends.md)"
             : "backend cpu; built without CUDA";
}

}  // namespace homodyne
