// The one place that resolves performance.backend (or --backend) into a compute backend
// (docs/design.md section 5; docs/backends.md).
#pragma once

#include <memory>
#include <string>

#include "homodyne/config.h"
#include "objective/pass_backend.h"

namespace homodyne {

// The backend a fit computes on, and why.
struct BackendChoice {
  std::shared_ptr<PassBackend> backend;  // never null
  std::string reason;  // one line for the log, e.g. "backend auto: cpu (built without CUDA)"
};

// performance.backend (or --backend) resolved, the one place that does it (docs/design.md
// section 5):
//   kCpu:  the CPU backend.
//   kAuto: the CPU backend; the reason says why not CUDA (built without CUDA, no CUDA device, or
//          no CUDA kernels in this version).
//   kCuda: throws ConfigError starting "backend cuda: " and naming the reason it cannot run: the
//          build has no CUDA, the CUDA runtime found no device (its error text), or this version
//          has no CUDA kernels. Never falls back to the CPU in silence.
BackendChoice SelectBackend(BackendKind requested);

}  // namespace homodyne
