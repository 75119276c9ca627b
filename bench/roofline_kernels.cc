// The AVX-512 probes of roofline_kernels.h (compiled with -march=x86-64-v4, bench/CMakeLists.txt).
#include "roofline_kernels.h"

#include "model/gram_block.h"

namespace homodyne::roofline {
namespace {
typedef double Vector8 __attribute__((vector_size(64)));
}  // namespace

bool CpuHasAvx512() { return __builtin_cpu_supports("avx512f"); }

double FmaChains(int chains, int64_t iterations) {
  // x = x * a + b keeps |x| bounded (a < 1); ten accumulators cover the FMA latency (4 cycles) of
  // two pipes.
  const Vector8 a = {0.999999, 0.999998, 0.999997, 0.999996, 0.999995, 0.999994, 0.999993, 0.99999};
  const Vector8 b = {1e-7, 2e-7, 3e-7, 4e-7, 5e-7, 6e-7, 7e-7, 8e-7};
  Vector8 x[10];
  for (int c = 0; c < 10; ++c) x[c] = b * (c + 1);
  switch (chains) {
#define HOMODYNE_FMA_CASE(N)                                          \
  case N:                                                             \
    for (int64_t it = 0; it < iterations; ++it) {                     \
      _Pragma("GCC unroll 10") for (int c = 0; c < N; ++c) {          \
        x[c] = x[c] * a + b;                                          \
      }                                                               \
    }                                                                 \
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
    for (int l = 0; l < 8; ++l) sum += x[c][l];
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

}  // namespace homodyne::roofline
