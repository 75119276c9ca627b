// Instruction-set levels of the pass kernel (docs/design.md section 2b).
// The build compiles the modes' pass bodies (*_pass_variant.cc) once per level; the process runs
// one of them, chosen once: the best level the build has and the CPU supports, or the one the
// environment variable HOMODYNE_ISA names. The rest of the library is compiled for the baseline,
// so one binary runs on any x86-64 CPU and still uses AVX2 or AVX-512 in the fitting pass.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace homodyne {

// In ascending order of capability; kNative alone in a HOMODYNE_NATIVE_ARCH=ON build.
enum class IsaLevel {
  kBaseline,  // "baseline": x86-64 (SSE2), or the compiler's default target on other CPUs
  kAvx2,      // "avx2": x86-64-v3 (AVX2, FMA, BMI2)
  kAvx512,    // "avx512": x86-64-v4 (AVX-512 F, BW, CD, DQ, VL)
  kNative,    // "native": -march=native, the building machine's CPU
};

// The names HOMODYNE_ISA takes: "baseline", "avx2", "avx512", "native".
std::string_view ToString(IsaLevel level);
// What the level means, e.g. "x86-64-v3: AVX2, FMA".
std::string_view IsaLevelMeaning(IsaLevel level);

// The levels this build compiled the kernel for, in ascending order (never empty).
std::span<const IsaLevel> BuiltIsaLevels();
// True when this CPU (and its operating system) can run code of the level.
bool CpuSupportsIsaLevel(IsaLevel level);

// The level a process runs: `requested` is HOMODYNE_ISA's value (nullptr or empty: not set).
// Not set: the highest of `built` that cpu_supports accepts. Set: that level, which must be one
// of `built` and supported. Throws InputError naming the variable, its value and the rule: an
// unknown name (with the list of the build's levels), a level the build lacks, or one the CPU
// lacks (with the levels it supports).
IsaLevel ChooseIsaLevel(const char* requested, std::span<const IsaLevel> built,
                        const std::function<bool(IsaLevel)>& cpu_supports);

// This process's level: ChooseIsaLevel(HOMODYNE_ISA, BuiltIsaLevels(), CpuSupportsIsaLevel),
// chosen at the first call and kept (a failed choice throws again at the next call).
IsaLevel ActiveIsaLevel();

}  // namespace homodyne
