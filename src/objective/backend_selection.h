// The one place that resolves performance.backend (or --backend) into a compute backend
// (docs/design.md section 5; docs/backends.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "objective/backend_self_check.h"
#include "objective/pass_backend.h"

namespace homodyne {

// The backend a fit computes on, and why.
struct BackendChoice {
  std::shared_ptr<PassBackend> backend;  // never null
  std::string reason;  // one line for the log, e.g. "backend auto: cpu (built without CUDA)"
  // The CUDA backend's self-check (backend_self_check.h), filled in when it has run (before the
  // fit's first pass); null for the CPU backend. For the log (SelectBackend logs it when it runs)
  // and convergence_metrics.json.
  std::shared_ptr<SelfCheckReport> self_check;
};

// performance.backend (or --backend) resolved, the one place that does it (docs/design.md
// section 5):
//   kCpu:  the CPU backend.
//   kAuto: the CUDA backend on the gpu_devices behind its self-check (kFallBack: a device that
//          disagrees with the CPU is not used; the fit runs on the CPU with a warning) when this
//          build has CUDA and the runtime finds a usable device; else the CPU backend, the reason
//          saying why not CUDA (built without CUDA, no CUDA device, or the device could not be
//          used).
//   kCuda: the CUDA backend behind its self-check (kStop: a device that disagrees stops the fit
//          with the difference); throws ConfigError starting "backend cuda: " and naming the
//          reason when it cannot run: the build has no CUDA, the CUDA runtime found no device (its
//          error text), or the device could not be used. Never falls back to the CPU in silence.
// gpu_devices (performance.gpu_devices): the CUDA devices to compute on, their batches split as
// DevicePassBackend splits them (device_pass_backend.h); empty: every device the runtime sees. A
// device the runtime does not see makes CUDA unavailable, the reason naming it.
BackendChoice SelectBackend(BackendKind requested, const std::vector<int>& gpu_devices = {});

}  // namespace homodyne
