// Branch-free exp and sin/cos that the compiler vectorises inside `#pragma omp simd` loops (the
// libm calls do not vectorise without -ffast-math). Used by the fitting pass (pass_kernel.cc);
// ModelEvaluation keeps libm as the scalar reference, and the pass kernel is tested against it.
//
// Accuracy: a few units in the last place on the documented domains (tested in
// tests/model/pass_kernel_test.cc against std::exp, std::sin, std::cos).
//
// Internal linkage (static), at every optimisation level: the pass kernel is compiled once per
// instruction-set level (homodyne/homodyne_pass_variant.h), and a translation unit must never hand
// its copy of these functions to the linker, which would keep one copy for the whole program (an
// AVX-512 one in baseline code stops the program with SIGILL on an older CPU). For the same reason
// the bit casts are memcpy, not the std::bit_cast template.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace homodyne::vector_math {

static inline uint64_t BitsOf(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

static inline double DoubleWithBits(uint64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// 1.5 * 2^52: adding it to |x| < 2^51 rounds x to an integer held in the low mantissa bits.
inline constexpr double kRoundingShifter = 0x1.8p52;

// exp(x) for x in [-708, 708] (callers clip; log g1 is clipped at -700 by the model).
// Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2, Taylor polynomial of degree 13
// (truncation error < 1e-17 relative), scaled by 2^k built in the exponent bits.
static inline double Exp(double x) {
  constexpr double kLog2E = 1.4426950408889634;
  constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;   // ln 2, upper bits (k * kLn2Hi is exact)
  constexpr double kLn2Lo = 0x1.ef35793c76730p-45;  // ln 2 - kLn2Hi
  const double shifted = x * kLog2E + kRoundingShifter;
  const double k = shifted - kRoundingShifter;
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // The low bits of `shifted` hold k (two's complement); (k + 1023) << 52 is 2^k.
  const uint64_t exponent_bits = (BitsOf(shifted) + 1023u) << 52;
  return p * DoubleWithBits(exponent_bits);
}

// Largest |x| for which SinCos is accurate to a few ulp (three-part Cody-Waite reduction by pi/2
// with 33-bit parts stays exact for |quotient| < 2^20). Callers use libm beyond it.
inline constexpr double kSinCosMaxArgument = 1.0e5;

// sin(x) and cos(x) for |x| <= kSinCosMaxArgument: reduction x = q pi/2 + r, |r| <= pi/4, then
// the fdlibm kernel polynomials (__kernel_sin, __kernel_cos) and the quadrant of q.
static inline void SinCos(double x, double* sin_out, double* cos_out) {
  constexpr double kTwoOverPi = 0.63661977236758134308;
  constexpr double kPiOver2Part1 = 0x1.921fb544p+0;  // pi/2 = part1 + part2 + part3
  constexpr double kPiOver2Part2 = 0x1.0b4611a6p-34;
  constexpr double kPiOver2Part3 = 0x1.3198a2e037073p-69;
  const double shifted = x * kTwoOverPi + kRoundingShifter;
  const double q = shifted - kRoundingShifter;
  const double r = ((x - q * kPiOver2Part1) - q * kPiOver2Part2) - q * kPiOver2Part3;
  const double z = r * r;
  // fdlibm __kernel_sin / __kernel_cos coefficients (|r| <= pi/4).
  constexpr double kS1 = -1.66666666666666324348e-01;
  constexpr double kS2 = 8.33333333332248946124e-03;
  constexpr double kS3 = -1.98412698298579493134e-04;
  constexpr double kS4 = 2.75573137070700676789e-06;
  constexpr double kS5 = -2.50507602534068634195e-08;
  constexpr double kS6 = 1.58969099521155010221e-10;
  constexpr double kC1 = 4.16666666666666019037e-02;
  constexpr double kC2 = -1.38888888888741095749e-03;
  constexpr double kC3 = 2.48015872894767294178e-05;
  constexpr double kC4 = -2.75573143513906633035e-07;
  constexpr double kC5 = 2.08757232129817482790e-09;
  constexpr double kC6 = -1.13596475577881948265e-11;
  const double sin_poly = kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)));
  const double sin_r = r + r * z * (kS1 + z * sin_poly);
  const double cos_poly = kC1 + z * (kC2 + z * (kC3 + z * (kC4 + z * (kC5 + z * kC6))));
  const double cos_r = 1.0 - 0.5 * z + z * z * cos_poly;
  // Quadrant from the low bits of q: 0: (s, c), 1: (c, -s), 2: (-s, -c), 3: (-c, s).
  const uint64_t quadrant = BitsOf(shifted) & 3u;
  const bool swap = (quadrant & 1u) != 0;
  const double sin_base = swap ? cos_r : sin_r;
  const double cos_base = swap ? sin_r : cos_r;
  *sin_out = (quadrant & 2u) ? -sin_base : sin_base;
  *cos_out = ((quadrant + 1u) & 2u) ? -cos_base : cos_base;
}

// exp(-scale (minuend - subtrahend)) with libm's exp, the rounding of the difference (an exact
// two-difference) and of the product (an FMA) carried to first order: within a few ulp of the
// exact value at any argument size (for the per-row factors of the separable exp,
// homodyne_pass_variant.cc). Scalar; not for vector loops.
static inline double ExpOfScaledDifference(double scale, double minuend, double subtrahend) {
  const double difference = minuend - subtrahend;
  const double subtrahend_part = difference - minuend;  // Knuth's two-sum of minuend, -subtrahend
  const double difference_error =
      (minuend - (difference - subtrahend_part)) + (-subtrahend - subtrahend_part);
  const double argument = -scale * difference;
  const double argument_error = std::fma(-scale, difference, -argument) - scale * difference_error;
  return std::exp(argument) * (1.0 + argument_error);
}

}  // namespace homodyne::vector_math
