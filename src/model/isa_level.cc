// Instruction-set levels of the pass kernel (isa_level.h) and CpuKernelDescription
// (include/homodyne/backend.h). The build says which levels it compiled through the definitions
// HOMODYNE_PASS_KERNEL_HAS_<LEVEL> (src/model/CMakeLists.txt).
#include "model/isa_level.h"

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "homodyne/backend.h"
#include "homodyne/errors.h"

namespace homodyne {
namespace {

constexpr std::array<IsaLevel, 4> kAllLevels = {IsaLevel::kBaseline, IsaLevel::kAvx2,
                                                IsaLevel::kAvx512, IsaLevel::kNative};

constexpr IsaLevel kBuiltLevels[] = {
#ifdef HOMODYNE_PASS_KERNEL_HAS_BASELINE
    IsaLevel::kBaseline,
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_AVX2
    IsaLevel::kAvx2,
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_AVX512
    IsaLevel::kAvx512,
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_NATIVE
    IsaLevel::kNative,
#endif
};

// "a, b, c"
std::string JoinNames(std::span<const IsaLevel> levels) {
  std::string text;
  for (IsaLevel level : levels) {
    if (!text.empty()) text += ", ";
    text += ToString(level);
  }
  return text;
}

bool Contains(std::span<const IsaLevel> levels, IsaLevel level) {
  for (IsaLevel candidate : levels) {
    if (candidate == level) return true;
  }
  return false;
}

// The x86-64 levels as the CPU reports them (cpuid, and xgetbv for the operating system's support
// of the wide registers, which the compiler's run-time library checks). GCC 12 knows the level
// names; Clang (before 17) and GCC 11 only the features, of which these are the ones that tell the
// levels apart (every CPU with AVX2 and BMI2 also has x86-64-v3's F16C, LZCNT and MOVBE).
bool CpuHasX86Level(int version) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
#if defined(__clang__) || __GNUC__ < 12
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
#else
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
#endif
  return version == 3 ? v3 : v4;
#else
  (void)version;
  return false;
#endif
}

// The process's choice, made once (ActiveIsaLevel).
struct ActiveChoice {
  IsaLevel level = IsaLevel::kBaseline;
  bool requested = false;  // HOMODYNE_ISA chose it
};

const ActiveChoice& Active() {
  static const ActiveChoice choice = [] {
    const char* requested = std::getenv("HOMODYNE_ISA");
    return ActiveChoice{ChooseIsaLevel(requested, BuiltIsaLevels(), CpuSupportsIsaLevel),
                        requested != nullptr && *requested != '\0'};
  }();
  return choice;
}

}  // namespace

std::string_view ToString(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline:
      return "baseline";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kNative:
      return "native";
  }
  return "?";
}

std::string_view IsaLevelMeaning(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline:
#if defined(__x86_64__)
      return "x86-64";
#else
      return "the compiler's default target";
#endif
    case IsaLevel::kAvx2:
      return "x86-64-v3 (AVX2, FMA)";
    case IsaLevel::kAvx512:
      return "x86-64-v4 (AVX-512)";
    case IsaLevel::kNative:
      return "-march=native";
  }
  return "?";
}

std::span<const IsaLevel> BuiltIsaLevels() { return kBuiltLevels; }

bool CpuSupportsIsaLevel(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline:
    case IsaLevel::kNative:  // the promise of a HOMODYNE_NATIVE_ARCH=ON build
      return true;
    case IsaLevel::kAvx2:
      return CpuHasX86Level(3);
    case IsaLevel::kAvx512:
      return CpuHasX86Level(4);
  }
  return false;
}

IsaLevel ChooseIsaLevel(const char* requested, std::span<const IsaLevel> built,
                        const std::function<bool(IsaLevel)>& cpu_supports) {
  HOMODYNE_CHECK(!built.empty());
  std::vector<IsaLevel> supported;
  for (IsaLevel level : built) {
    if (cpu_supports(level)) supported.push_back(level);
  }
  if (requested == nullptr || *requested == '\0') {
    HOMODYNE_CHECK(!supported.empty());  // the build's lowest level runs on its target
    return supported.back();
  }
  const std::string prefix = std::string("HOMODYNE_ISA = '") + requested + "': ";
  for (IsaLevel level : kAllLevels) {
    if (ToString(level) != requested) continue;
    if (!Contains(built, level)) {
      throw InputError(prefix + "this build has no such kernel; it has " + JoinNames(built) +
                       " (unset HOMODYNE_ISA to use the best of them)");
    }
    if (!Contains(supported, level)) {
      throw InputError(prefix + "this CPU lacks " + std::string(IsaLevelMeaning(level)) +
                       "; it supports " + JoinNames(supported) +
                       " (unset HOMODYNE_ISA to use the best of them)");
    }
    return level;
  }
  throw InputError(prefix + "unknown instruction-set level; must be one of " + JoinNames(built) +
                   " (the levels of this build), or unset");
}

IsaLevel ActiveIsaLevel() { return Active().level; }

std::string CpuKernelDescription() {
  const ActiveChoice& active = Active();
  const std::string text = "pass kernel " + std::string(ToString(active.level)) + ": " +
                           std::string(IsaLevelMeaning(active.level));
  const std::string built = JoinNames(BuiltIsaLevels());
  if (active.requested) return text + ", set by HOMODYNE_ISA (built: " + built + ")";
  if (BuiltIsaLevels().size() == 1) return text + ", the only level of this build";
  return text + ", the best of " + built + " on this CPU";
}

}  // namespace homodyne
