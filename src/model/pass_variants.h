// A mode's pass body compiled once per instruction-set level, and the choice of the level's body
// (docs/design.md section 2b), written once for every mode.
//
// A mode's variant source (its *_pass_variant.cc; src/model/CMakeLists.txt compiles it once per
// level, in namespace homodyne::pass_kernel::<level>) defines there one table of its entry points,
// `const Table name`. The mode's variant header declares the tables of every level, inside
// namespace homodyne::pass_kernel, with
//   HOMODYNE_DECLARE_PASS_VARIANTS(Table, name)
// and the mode's point (its ModePoint::PreparePass, in homodyne_model) takes the table of a level
// with
//   HOMODYNE_PASS_VARIANT(Table, name, level)
// which is nullptr for a level this build did not compile (BuiltIsaLevels()). Only the sources of
// homodyne_model may use HOMODYNE_PASS_VARIANT: they alone are told the built levels
// (HOMODYNE_PASS_KERNEL_HAS_<LEVEL>). The variant sources themselves use neither the template nor
// the macro below (their objects define symbols of their own namespace only).
#pragma once

#include "model/isa_level.h"

#define HOMODYNE_DECLARE_PASS_VARIANTS(Table, name) \
  namespace baseline {                              \
  extern const Table name;                          \
  }                                                 \
  namespace avx2 {                                  \
  extern const Table name;                          \
  }                                                 \
  namespace avx512 {                                \
  extern const Table name;                          \
  }                                                 \
  namespace native {                                \
  extern const Table name;                          \
  }

namespace homodyne::pass_kernel {

// The table of `level` among those of the levels (nullptr where the build lacks one).
template <class Table>
const Table* PassVariantOfLevel(IsaLevel level, const Table* baseline, const Table* avx2,
                                const Table* avx512, const Table* native) {
  switch (level) {
    case IsaLevel::kBaseline:
      return baseline;
    case IsaLevel::kAvx2:
      return avx2;
    case IsaLevel::kAvx512:
      return avx512;
    case IsaLevel::kNative:
      return native;
  }
  return nullptr;
}

}  // namespace homodyne::pass_kernel

#ifdef HOMODYNE_PASS_KERNEL_HAS_BASELINE
#define HOMODYNE_PASS_VARIANT_BASELINE(name) &::homodyne::pass_kernel::baseline::name
#else
#define HOMODYNE_PASS_VARIANT_BASELINE(name) nullptr
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_AVX2
#define HOMODYNE_PASS_VARIANT_AVX2(name) &::homodyne::pass_kernel::avx2::name
#else
#define HOMODYNE_PASS_VARIANT_AVX2(name) nullptr
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_AVX512
#define HOMODYNE_PASS_VARIANT_AVX512(name) &::homodyne::pass_kernel::avx512::name
#else
#define HOMODYNE_PASS_VARIANT_AVX512(name) nullptr
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_NATIVE
#define HOMODYNE_PASS_VARIANT_NATIVE(name) &::homodyne::pass_kernel::native::name
#else
#define HOMODYNE_PASS_VARIANT_NATIVE(name) nullptr
#endif

#define HOMODYNE_PASS_VARIANT(Table, name, level)                                      \
  ::homodyne::pass_kernel::PassVariantOfLevel<Table>(                                  \
      (level), HOMODYNE_PASS_VARIANT_BASELINE(name), HOMODYNE_PASS_VARIANT_AVX2(name), \
      HOMODYNE_PASS_VARIANT_AVX512(name), HOMODYNE_PASS_VARIANT_NATIVE(name))
