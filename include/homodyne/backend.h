// The compute backends this build has (docs/design.md section 5; docs/backends.md). The backend a
// fit runs on is chosen by performance.backend (config.h BackendKind) and reported in its result.
#pragma once

#include <string>

namespace homodyne {

// What this build can compute on, for --version: "backend cpu; built without CUDA", or in a
// build with CUDA "backend cpu; CUDA runtime linked, with CUDA kernels for sm_80 and sm_90
// (self-checked on every run; not yet run on GPU hardware: docs/backends.md)".
// (slurm/homodyne_gpu.sbatch reads "without CUDA" as: do not ask for --backend cuda.)
std::string BackendBuildDescription();

// The instruction-set level the CPU backend's pass kernel runs at in this process, for --version
// and the fit's log (docs/design.md section 2b), e.g. "pass kernel avx512: x86-64-v4 (AVX-512), the
// best of baseline, avx2, avx512 on this CPU". The level is chosen once per process: the best one
// this build has and the CPU supports, or the one the environment variable HOMODYNE_ISA names
// (baseline, avx2, avx512; native in a HOMODYNE_NATIVE_ARCH=ON build). Throws InputError, naming
// the variable, its value and the levels allowed, when HOMODYNE_ISA names an unknown level, one
// this build lacks, or one the CPU lacks.
std::string CpuKernelDescription();

}  // namespace homodyne
