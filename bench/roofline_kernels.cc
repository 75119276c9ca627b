// The probes of roofline_kernels.h for one vector level: compiled once per level with its -march
// and ROOFLINE_LEVEL set to its name (bench/CMakeLists.txt), defining
// homodyne::roofline::<level>::kProbes.
#include "roofline_kernels.h"

#include "model/gram_block.h"

#ifndef ROOFLINE_LEVEL
#error "ROOFLINE_LEVEL (avx2 or avx512) must name the level"
#endif

#define ROOFLINE_STRING_(x) #x
#define ROOFLINE_STRING(x) ROOFLINE_STRING_(x)

namespace homodyne::roofline::ROOFLINE_LEVEL {
namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef double Vector __attribute__((vector_size(8 * kLanes)));

double FmaChains(int chains, int64_t iterations) {
  // x = x * a + b keeps |x| bounded (a < 1); ten accumulators cover the FMA latency (4 cycles) of
  // two pipes.
  Vector a, b;
  for (int l = 0; l < kLanes; ++l) {
    a[l] = 0.999999 - 1e-6 * l;
    b[l] = 1e-7 * (l + 1);
  }
  Vector x[10];
  for (int c = 0; c < 10; ++c) x[c] = b * (c + 1);
  switch (chains) {
#define HOMODYNE_FMA_CASE(N)                                                        \
  case N:                                                                           \
    for (int64_t it = 0; it < iterations; ++it) {                                   \
      _Pragma("GCC unroll 10") for (int c = 0; c < N; ++c) { x[c] = x[c] * a + b; } \
    }                                                                               \
    break;
    HOMODYNE_FMA_CASE(1)
    HOMODYNE_FMA_CASE(2)
    HOMODYNE_FMA_CASE(4)
    HOMODYNE_FMA_CASE(8)
    HOMODYNE_FMA_CASE(10)
#undef HOMODYNE_FMA_CASE
    default:
      return 0.0;
  }
  double sum = 0.0;
  for (int c = 0; c < 10; ++c) {
    for (int l = 0; l < kLanes; ++l) sum += x[c][l];
  }
  return sum;
}

double SumFloats(const float* values, int64_t count) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(values[i]);
  return sum;
}

void RepeatTileGram(const double* tile, int count, int gram_size, int repeats, double* gram) {
  for (int r = 0; r < repeats; ++r) {
    pass_kernel::AddTileGram(tile, count, gram_size, gram);
    __asm__ volatile("" : : "r"(gram) : "memory");  // keep every repeat
  }
}

void RepeatLaneGram(double* tile, int count, int gram_size, int repeats, double* lanes,
                    double* gram) {
  for (int r = 0; r < repeats; ++r) {
    pass_kernel::AddTileToLaneGram(tile, count, gram_size, lanes);
    __asm__ volatile("" : : "r"(lanes) : "memory");
  }
  pass_kernel::FlushLaneGram(lanes, gram_size, gram);
}

void RepeatOffsetLaneGram(double* tile, int count, int gram_size, int repeats, double* lanes,
                          double* gram) {
  for (int r = 0; r < repeats; ++r) {
    pass_kernel::AddTileToOffsetLaneGram(tile, count, count, gram_size, lanes);
    __asm__ volatile("" : : "r"(lanes) : "memory");
  }
  pass_kernel::FlushOffsetLaneGram(lanes, gram_size, gram);
}

}  // namespace

extern const Probes kProbes;
const Probes kProbes = {ROOFLINE_STRING(ROOFLINE_LEVEL),
                        kLanes,
                        &FmaChains,
                        &SumFloats,
                        &RepeatTileGram,
                        &RepeatLaneGram,
                        &RepeatOffsetLaneGram};

}  // namespace homodyne::roofline::ROOFLINE_LEVEL
