// The arithmetic every mode's device passes share (docs/design.md section 5; docs/backends.md),
// written once for nvcc (the CUDA kernels of cuda/pass_kernels.cu) and for the host compiler (the
// host emulation, src/objective/emulated_pass_backend.cc): the math functions of both compilers,
// the Gram triangle's layout, and the robust loss's rescaling of a point's row of [J | e] (the
// loss of src/model/robust_loss_tile.h; docs/model.md, Robust loss) and its cost term. A mode's
// own point arithmetic is in its folder, beside its scalar model
// (src/model/homodyne/homodyne_device.h, src/model/two_component/two_component_device.h;
// docs/adding-a-mode.md).
//
// Contract of every file that includes this header (and device_schedule.h, and a mode's device
// header): it is compiled with floating-point contraction off (g++ -ffp-contract=off, nvcc
// --fmad=false; cmake/HomodyneCuda.cmake, src/model/CMakeLists.txt and
// src/objective/CMakeLists.txt), so that a * b + c is two roundings on both compilers and the
// only fused operations are the explicit DeviceFma calls. Then the host emulation and a device
// compute the same arithmetic in the same order and differ only where the functions exp, sin,
// cos, log1p and atan of the host's libm and of the CUDA math library differ (both within 2 ulp;
// sqrt and division are correctly rounded on both).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define HOMODYNE_HOST_DEVICE __host__ __device__
#else
#define HOMODYNE_HOST_DEVICE
#endif

namespace homodyne {

class ModelEvaluation;  // include/homodyne/model.h (not device code)

namespace device_pass {

// Entries of the lower triangle and diagonal of a Gram matrix of side g, stored row by row:
// entry (a, c), c <= a, at a (a + 1) / 2 + c.
HOMODYNE_HOST_DEVICE constexpr int TriangleEntries(int gram_size) {
  return gram_size * (gram_size + 1) / 2;
}

// The loss (robust_loss.h PassLoss, as plain values): function 0 linear, 1 soft_l1, 2 huber,
// 3 cauchy, 4 arctan (LossFunction's values); residual_scale s = sigma f_scale > 0.
struct LossTerms {
  int function = 0;
  double residual_scale = 1.0;
};

// The smoothing of |x| every mode's model uses, sqrt(x^2 + 1e-12) (include/homodyne/model.h
// model_limits, repeated here because that header is not device code; the modes' guards are in
// their device headers). tests/objective/emulated_pass_backend_test.cc checks it agrees.
inline constexpr double kSmoothAbsEpsilon = 1e-12;
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

// What a mode's host side reads to make the device inputs at a point (a device mode's
// MakeInputs, docs/adding-a-mode.md): the model at the point's physical parameters and the
// angles, one value each.
struct DevicePoint {
  const ModelEvaluation* evaluation = nullptr;
  const double* phi_degrees = nullptr;
  const double* contrast = nullptr;
  const double* offset = nullptr;
  int num_angles = 0;
  int loss_function = 0;  // LossTerms::function: a mode takes its per-frame form under 0 only
};

// The scalars of a mode's tables, passed by value to a kernel: N and the mode's own numbers
// (each mode's TablesAt says which).
struct TableScalars {
  static constexpr int kMaxValues = 4;
  int num_times = 0;
  double values[kMaxValues] = {};
};

// A mode's device inputs at a point, as its MakeInputs makes them on the host: the tables'
// scalars and one array (the layout of the mode's TablesAt), and one Angle per angle. The tables'
// array is copied to a device as it is, the angles as bytes (Angle is trivially copyable).
// row_sums: a mode with a full pass through per-frame sums (kDataSums, device_modes.h) fills them
// where that form holds at the point (the data-free part of the Gram, read on the host only:
// GramFromDataSums); empty: the full pass builds the Gram point by point.
template <class Angle>
struct DeviceInputs {
  TableScalars scalars;
  std::vector<double> tables;
  std::vector<Angle> angles;
  std::vector<double> row_sums;
};

}  // namespace device_pass
}  // namespace homodyne
