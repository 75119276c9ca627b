# The instruction-set levels the fitting pass's kernel is compiled for (docs/design.md section 2b):
# HOMODYNE_ISA_LEVELS, in ascending order, and for each level L the compile options of its variant,
# HOMODYNE_ISA_OPTIONS_<L>. The names are those the environment variable HOMODYNE_ISA takes
# (src/model/isa_level.h). src/model/CMakeLists.txt compiles one variant per level; tests/model
# checks each.
#
# - HOMODYNE_NATIVE_ARCH=ON: everything is compiled with -march=native (CMakeLists.txt), so the
#   kernel once, "native", with no options of its own.
# - x86-64: baseline (x86-64), avx2 (x86-64-v3) and avx512 (x86-64-v4); generic tuning, as the
#   rest of the library. Only baseline with a compiler that lacks the level names (before GCC 11
#   or Clang 12).
# - Other processors (aarch64, ...): one variant, baseline, for the compiler's default target.
include(CheckCXXCompilerFlag)
if(HOMODYNE_NATIVE_ARCH)
  set(HOMODYNE_ISA_LEVELS native)
  set(HOMODYNE_ISA_OPTIONS_native "")
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|x64)$")
  set(HOMODYNE_ISA_LEVELS baseline)
  set(HOMODYNE_ISA_OPTIONS_baseline -march=x86-64 -mtune=generic)
  check_cxx_compiler_flag(-march=x86-64-v4 HOMODYNE_HAS_MARCH_X86_64_V4)
  if(HOMODYNE_HAS_MARCH_X86_64_V4)
    list(APPEND HOMODYNE_ISA_LEVELS avx2 avx512)
    set(HOMODYNE_ISA_OPTIONS_avx2 -march=x86-64-v3 -mtune=generic)
    set(HOMODYNE_ISA_OPTIONS_avx512 -march=x86-64-v4 -mtune=generic)
  else()
    message(STATUS "The compiler lacks -march=x86-64-v3/v4: the pass kernel is built for the "
                   "baseline only (GCC >= 11 or Clang >= 12 builds AVX2 and AVX-512 variants)")
  endif()
else()
  set(HOMODYNE_ISA_LEVELS baseline)
  set(HOMODYNE_ISA_OPTIONS_baseline "")
endif()
message(STATUS "Pass kernel instruction-set levels: ${HOMODYNE_ISA_LEVELS}")
