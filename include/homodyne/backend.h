// The compute backends this build has (docs/design.md section 5; docs/backends.md). The backend a
// fit runs on is chosen by performance.backend (config.h BackendKind) and reported in its result.
#pragma once

#include <string>

namespace homodyne {

// What this build can compute on, for --version: "backend cpu; built without CUDA", or in a
// build with the CUDA runtime "backend cpu; CUDA runtime linked, built without CUDA kernels".
// (slurm/homodyne_gpu.sbatch reads "without CUDA" as: do not ask for --backend cuda.)
std::string BackendBuildDescription();

}  // namespace homodyne
