// The per-point arithmetic of the device passes (docs/design.md section 5; docs/backends.md),
// written once for nvcc (the CUDA kernels of cuda/pass_kernels.cu) and for the host compiler (the
// host emulation, src/objective/emulated_pass_backend.cc): the homodyne model's c2 and its row of
// [J | e] at one point (i, j) of one angle, and the robust loss's rescaling of that row.
//
// The formulas and guards are those of the scalar reference, HomodynePoint::EvaluateSegmentOf
// (src/model/homodyne/homodyne_point.cc; docs/model.md: Diffusion factor, Shear factor, g1 floor
// and c2, Jacobian) and of the robust loss (src/model/robust_loss_tile.h; docs/model.md, Robust
// loss), one point at a time and with libm's functions (the CUDA math library's on a device).
//
// Contract of every file that includes this header (and device_schedule.h): it is compiled with
// floating-point contraction off (g++ -ffp-contract=off, nvcc --fmad=false;
// cmake/HomodyneCuda.cmake and src/objective/CMakeLists.txt), so that a * b + c is two roundings on
// both compilers and the only fused operations are the explicit HOMODYNE_DEVICE_FMA calls. Then the
// host emulation and a device compute the same arithmetic in the same order and differ only where
// the functions exp, sin, cos, log1p and atan of the host's libm and of the CUDA math library
// differ (both within 2 ulp; sqrt and division are correctly rounded on both).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define HOMODYNE_HOST_DEVICE __host__ __device__
#else
#define HOMODYNE_HOST_DEVICE
#endif

namespace homodyne::device_pass {

// The largest Gram side of a mode the device passes compute: two_component, 14 physical
// parameters, contrast, offset and e (device_two_component.h; laminar_flow's is 10). Each mode's
// kernels are their own instantiation (device_schedule.h, HomodyneDeviceMode and
// TwoComponentDeviceMode), sized by the mode's own Gram side, so this bound costs the homodyne
// kernels no registers.
inline constexpr int kMaxGramSize = 17;

// Entries of the lower triangle and diagonal of a Gram matrix of side g, stored row by row:
// entry (a, c), c <= a, at a (a + 1) / 2 + c.
HOMODYNE_HOST_DEVICE constexpr int TriangleEntries(int gram_size) {
  return gram_size * (gram_size + 1) / 2;
}

// The homodyne mode's physical parameters and Gram side (static: D0, alpha, D_offset; laminar_flow:
// those and gamma_dot_0, beta, gamma_dot_offset, phi0).
template <bool kLaminar>
struct ModeShape {
  static constexpr int kPhysical = kLaminar ? 7 : 3;
  static constexpr int kGramSize = kPhysical + 3;  // J (physical, contrast, offset) and e
  static constexpr int kTriangle = TriangleEntries(kGramSize);
};

// The model's tables at the pass's physical parameters (ModelEvaluation's, docs/model.md, The
// time integrals): arrays on the host for the emulation, in device memory for a kernel.
struct ModelTables {
  int num_times = 0;                                         // N
  double diffusion_prefactor = 0.0;                          // 0.5 q^2 dt
  const double* cumulative_diffusion = nullptr;              // C_D, N values
  const double* cumulative_diffusion_derivatives = nullptr;  // 3 N: d C_D / d(D0, alpha, D_off)
  const double* cumulative_shear = nullptr;                  // C_G, N values (laminar_flow)
  const double* cumulative_shear_derivatives = nullptr;      // 3 N (laminar_flow)
};

// One angle's coefficients (as HomodynePass's AngleCoefficients): Phi = phase_per_step M_G.
struct AngleTerms {
  double contrast = 0.0;
  double offset = 0.0;
  double phase_per_step = 0.0;         // s cos(phi0 - phi)            (laminar_flow)
  double dphase_dphi0_per_step = 0.0;  // d(s cos(phi0 - phi)) / d phi0, phi0 in degrees
};

// The loss (robust_loss.h PassLoss, as plain values): function 0 linear, 1 soft_l1, 2 huber,
// 3 cauchy, 4 arctan (LossFunction's values); residual_scale s = sigma f_scale > 0.
struct LossTerms {
  int function = 0;
  double residual_scale = 1.0;
};

// Guards of the reference (include/homodyne/model.h model_limits), repeated here because that
// header is not device code. tests/objective/emulated_pass_backend_test.cc checks they agree.
inline constexpr double kSmoothAbsEpsilon = 1e-12;
inline constexpr double kLogG1DiffusionMin = -700.0;
inline constexpr double kSincTaylorRadius = 1e-4;
inline constexpr double kG1Floor = 1e-10;
inline constexpr double kDoubleEpsilon = 2.220446049250313e-16;  // DBL_EPSILON (scipy's EPS)

// The one fused operation of the shared code: x y + z rounded once, on both compilers (std::fma
// on the host, which glibc computes exactly where the CPU has no FMA instruction).
HOMODYNE_HOST_DEVICE inline double DeviceFma(double x, double y, double z) {
#if defined(__CUDA_ARCH__)
  return ::fma(x, y, z);
#else
  return std::fma(x, y, z);
#endif
}

HOMODYNE_HOST_DEVICE inline double DeviceSqrt(double x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}
HOMODYNE_HOST_DEVICE inline double DeviceExp(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}
HOMODYNE_HOST_DEVICE inline double DeviceSin(double x) {
#if defined(__CUDA_ARCH__)
  return ::sin(x);
#else
  return std::sin(x);
#endif
}
HOMODYNE_HOST_DEVICE inline double DeviceCos(double x) {
#if defined(__CUDA_ARCH__)
  return ::cos(x);
#else
  return std::cos(x);
#endif
}
HOMODYNE_HOST_DEVICE inline double DeviceLog1p(double x) {
#if defined(__CUDA_ARCH__)
  return ::log1p(x);
#else
  return std::log1p(x);
#endif
}
HOMODYNE_HOST_DEVICE inline double DeviceAtan(double x) {
#if defined(__CUDA_ARCH__)
  return ::atan(x);
#else
  return std::atan(x);
#endif
}
HOMODYNE_HOST_DEVICE inline double DeviceFabs(double x) { return x < 0.0 ? -x : x; }

// True for a finite float (NaN and +-inf: false), branch-free as the CPU kernel's test.
HOMODYNE_HOST_DEVICE inline bool IsFiniteValue(double value) { return (value - value) == 0.0; }

// c2 at point (i, j) of one angle, and with kWithJacobian its row of [J | e] in row[0, kGramSize):
// J = d c2 / d(physical..., contrast, offset), e = data - c2. A non-finite data value gives a zero
// row (it counts for nothing). Returns c2.
template <bool kLaminar, bool kWithJacobian>
HOMODYNE_HOST_DEVICE inline double PointModel(const ModelTables& tables, const AngleTerms& angle,
                                              int i, int j, double data, double* row) {
  const int n = tables.num_times;
  const double w = tables.diffusion_prefactor;
  const double diff_d = tables.cumulative_diffusion[i] - tables.cumulative_diffusion[j];
  const double m_d = DeviceSqrt(diff_d * diff_d + kSmoothAbsEpsilon);
  double log_g1d = -w * m_d;
  const bool clipped = log_g1d < kLogG1DiffusionMin;
  if (clipped) log_g1d = kLogG1DiffusionMin;
  const double g1d = DeviceExp(log_g1d);

  double g1 = g1d;
  double diff_g = 0.0;
  double m_g = 0.0;
  double sinc = 1.0;
  double dsinc = 0.0;
  if constexpr (kLaminar) {
    diff_g = tables.cumulative_shear[i] - tables.cumulative_shear[j];
    m_g = DeviceSqrt(diff_g * diff_g + kSmoothAbsEpsilon);
    const double phase = angle.phase_per_step * m_g;
    if (DeviceFabs(phase) < kSincTaylorRadius) {
      const double x2 = phase * phase;
      sinc = 1.0 - x2 / 6.0 + x2 * x2 / 120.0;
      dsinc = -phase / 3.0 + phase * x2 / 30.0;
    } else {
      const double sin_x = DeviceSin(phase);
      sinc = sin_x / phase;
      if constexpr (kWithJacobian) {
        dsinc = (phase * DeviceCos(phase) - sin_x) / (phase * phase);
      }
    }
    g1 = g1d * (sinc * sinc);
  }
  const bool floored = !(g1 > kG1Floor);
  const double g1_floored = floored ? kG1Floor : g1;
  const double g1_squared = g1_floored * g1_floored;
  const double c2 = angle.offset + angle.contrast * g1_squared;
  if constexpr (kWithJacobian) {
    using Shape = ModeShape<kLaminar>;
    const bool finite = IsFiniteValue(data);
    if (!finite) {
      for (int c = 0; c < Shape::kGramSize; ++c) row[c] = 0.0;
      return c2;
    }
    const double* dc_d = tables.cumulative_diffusion_derivatives;
    const double dc2_dg1 = floored ? 0.0 : 2.0 * angle.contrast * g1;
    const double dc2_dc_d = clipped ? 0.0 : dc2_dg1 * (-w * g1) * (diff_d / m_d);
    for (int p = 0; p < 3; ++p) row[p] = dc2_dc_d * (dc_d[p * n + i] - dc_d[p * n + j]);
    if constexpr (kLaminar) {
      const double* dc_g = tables.cumulative_shear_derivatives;
      const double dc2_dphase = dc2_dg1 * g1d * 2.0 * sinc * dsinc;
      const double dc2_dc_g = dc2_dphase * angle.phase_per_step * (diff_g / m_g);
      for (int p = 0; p < 3; ++p) row[3 + p] = dc2_dc_g * (dc_g[p * n + i] - dc_g[p * n + j]);
      row[6] = dc2_dphase * angle.dphase_dphi0_per_step * m_g;
    }
    row[Shape::kPhysical] = g1_squared;     // d c2 / d contrast
    row[Shape::kPhysical + 1] = 1.0;        // d c2 / d offset
    row[Shape::kPhysical + 2] = data - c2;  // e
  }
  return c2;
}

// scipy's loss rho(z) and its derivatives (robust_loss_tile.h EvaluateLoss), z >= 0.
HOMODYNE_HOST_DEVICE inline void EvaluateLoss(int function, double z, double* rho, double* d1,
                                              double* d2) {
  switch (function) {
    case 1: {  // soft_l1
      const double t = 1.0 + z;
      const double root = DeviceSqrt(t);
      *rho = 2.0 * (root - 1.0);
      *d1 = 1.0 / root;
      *d2 = -0.5 / (t * root);
      return;
    }
    case 2:  // huber
      if (z <= 1.0) {
        *rho = z;
        *d1 = 1.0;
        *d2 = 0.0;
      } else {
        const double root = DeviceSqrt(z);
        *rho = 2.0 * root - 1.0;
        *d1 = 1.0 / root;
        *d2 = -0.5 / (z * root);
      }
      return;
    case 3: {  // cauchy
      const double t = 1.0 + z;
      *rho = DeviceLog1p(z);
      *d1 = 1.0 / t;
      *d2 = -1.0 / (t * t);
      return;
    }
    case 4: {  // arctan
      const double t = 1.0 + z * z;
      *rho = DeviceAtan(z);
      *d1 = 1.0 / t;
      *d2 = -2.0 * z / (t * t);
      return;
    }
    default:
      *rho = z;
      *d1 = 1.0;
      *d2 = 0.0;
  }
}

// A robust loss's rescaling of one row of [J | e] (robust_loss_tile.h RescaleTileFor, one point):
// J *= sqrt(J_scale), e *= rho' / sqrt(J_scale). Returns s^2 rho(z), the point's cost term.
HOMODYNE_HOST_DEVICE inline double RescaleRowForLoss(const LossTerms& loss, int gram_size,
                                                     double* row) {
  const double u = row[gram_size - 1] / loss.residual_scale;
  const double z = u * u;
  double rho, d1, d2;
  EvaluateLoss(loss.function, z, &rho, &d1, &d2);
  double j_scale = d1 + 2.0 * z * d2;
  if (j_scale < kDoubleEpsilon) j_scale = kDoubleEpsilon;
  const double row_scale = DeviceSqrt(j_scale);
  for (int c = 0; c < gram_size - 1; ++c) row[c] *= row_scale;
  row[gram_size - 1] *= d1 / row_scale;
  return rho * (loss.residual_scale * loss.residual_scale);
}

// A residual's term of a cost pass, every mode's: e^2 (linear loss) or s^2 rho((e / s)^2).
HOMODYNE_HOST_DEVICE inline double ResidualCost(const LossTerms& loss, double e) {
  if (loss.function == 0) return e * e;
  const double u = e / loss.residual_scale;
  double rho, d1, d2;
  EvaluateLoss(loss.function, u * u, &rho, &d1, &d2);
  return rho * (loss.residual_scale * loss.residual_scale);
}

// The point's term of a cost pass (ResidualCost); 0 for a non-finite data value.
template <bool kLaminar>
HOMODYNE_HOST_DEVICE inline double PointCost(const ModelTables& tables, const AngleTerms& angle,
                                             const LossTerms& loss, int i, int j, double data) {
  if (!IsFiniteValue(data)) return 0.0;
  return ResidualCost(loss,
                      data - PointModel<kLaminar, false>(tables, angle, i, j, data, nullptr));
}

}  // namespace homodyne::device_pass
