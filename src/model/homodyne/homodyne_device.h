// The homodyne modes' (static, laminar_flow) per-point arithmetic of the device passes
// (docs/design.md section 5; docs/backends.md), written once for nvcc (the CUDA kernels of
// cuda/pass_kernels.cu) and for the host compiler (the host emulation,
// src/objective/emulated_pass_backend.cc): c2 at one point (i, j) of one angle and its row of
// [J | e], and the mode's device traits (HomodyneDeviceMode) that the shared schedule
// (src/model/device/device_schedule.h) is instantiated on.
//
// The formulas and guards are those of the scalar reference, HomodynePoint::EvaluateSegmentOf
// (homodyne_point.cc beside this file; docs/model.md: Diffusion factor, Shear factor, g1 floor and
// c2, Jacobian), one point at a time and with libm's functions (the CUDA math library's on a
// device). Contract: that of src/model/device/device_point.h (contraction off in every including
// file).
#pragma once

#include <cstdint>

#include "model/device/device_point.h"

namespace homodyne::device_pass {

// Guards of the reference (include/homodyne/model.h model_limits), repeated here because that
// header is not device code. tests/objective/emulated_pass_backend_test.cc checks they agree.
inline constexpr double kLogG1DiffusionMin = -700.0;
inline constexpr double kSincTaylorRadius = 1e-4;
inline constexpr double kG1Floor = 1e-10;

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

// g1 of diffusion at point (i, j), exp(-w M_D) with M_D = sqrt(diff_D^2 + 1e-12) and the exponent
// clipped at kLogG1DiffusionMin (*clipped then true); diff_D = C_D[i] - C_D[j] and M_D returned
// through diff_d and m_d.
HOMODYNE_HOST_DEVICE inline double DiffusionG1(const ModelTables& tables, int i, int j,
                                               double* diff_d, double* m_d, bool* clipped) {
  const double w = tables.diffusion_prefactor;
  *diff_d = tables.cumulative_diffusion[i] - tables.cumulative_diffusion[j];
  *m_d = DeviceSqrt(*diff_d * *diff_d + kSmoothAbsEpsilon);
  double log_g1d = -w * *m_d;
  *clipped = log_g1d < kLogG1DiffusionMin;
  if (*clipped) log_g1d = kLogG1DiffusionMin;
  return DeviceExp(log_g1d);
}

// c2 at point (i, j) of one angle, and with kWithJacobian its row of [J | e] in row[0, kGramSize):
// J = d c2 / d(physical..., contrast, offset), e = data - c2. A non-finite data value gives a zero
// row (it counts for nothing). Returns c2.
template <bool kLaminar, bool kWithJacobian>
HOMODYNE_HOST_DEVICE inline double PointModel(const ModelTables& tables, const AngleTerms& angle,
                                              int i, int j, double data, double* row) {
  const int n = tables.num_times;
  const double w = tables.diffusion_prefactor;
  double diff_d, m_d;
  bool clipped;
  const double g1d = DiffusionG1(tables, i, j, &diff_d, &m_d, &clipped);

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

// The point's term of a cost pass (ResidualCost); 0 for a non-finite data value.
template <bool kLaminar>
HOMODYNE_HOST_DEVICE inline double PointCost(const ModelTables& tables, const AngleTerms& angle,
                                             const LossTerms& loss, int i, int j, double data) {
  if (!IsFiniteValue(data)) return 0.0;
  return ResidualCost(loss, data - PointModel<kLaminar, false>(tables, angle, i, j, data, nullptr));
}

// The static full pass through per-frame sums (docs/design.md section 2, The static full pass
// through per-frame sums; docs/backends.md): the data-free part of the Gram, J^T J, comes from the
// CPU's per-row sums (StaticRowSums, homodyne_point.h) on the host, and the device threads sum
// only the point terms that read the data, kStaticDataSums per thread instead of the point-by-point
// Gram's 21 products and the count. Their layout:
inline constexpr int kStaticDataE2 = 0;     // sum e^2
inline constexpr int kStaticDataE = 1;      // sum e
inline constexpr int kStaticDataU = 2;      // sum u, u = e g1f^2 (the contrast column's J^T e)
inline constexpr int kStaticDataUD = 3;     // sum u D_p (3), D_p = dC_D / d theta_p at j less at i
inline constexpr int kStaticDataCount = 6;  // the finite points
inline constexpr int kStaticDataSums = 7;

// Adds the point (i, j)'s data terms to partial[0, kStaticDataSums) (nothing but the count's 0
// for non-finite data): e = data - c2 with the point's own g1 (smoothed, clipped and floored, as
// PointModel and the CPU's per-frame pass), e^2 and u D_p each by one DeviceFma.
HOMODYNE_HOST_DEVICE inline void StaticPointDataTerms(const ModelTables& tables,
                                                      const AngleTerms& angle, int i, int j,
                                                      double data, double* partial) {
  if (!IsFiniteValue(data)) return;
  double diff_d, m_d;
  bool clipped;
  const double g1 = DiffusionG1(tables, i, j, &diff_d, &m_d, &clipped);
  const double g1_floored = g1 > kG1Floor ? g1 : kG1Floor;
  const double g1_squared = g1_floored * g1_floored;
  const double e = data - (angle.offset + angle.contrast * g1_squared);
  const double u = e * g1_squared;
  const int n = tables.num_times;
  const double* dc_d = tables.cumulative_diffusion_derivatives;
  partial[kStaticDataE2] = DeviceFma(e, e, partial[kStaticDataE2]);
  partial[kStaticDataE] += e;
  partial[kStaticDataU] += u;
  for (int p = 0; p < 3; ++p) {
    partial[kStaticDataUD + p] =
        DeviceFma(u, dc_d[p * n + j] - dc_d[p * n + i], partial[kStaticDataUD + p]);
  }
  partial[kStaticDataCount] += 1.0;
}

// The device traits of the homodyne modes, static (false) and laminar_flow (true): what the
// shared schedule, the host emulation and the CUDA kernels are instantiated on
// (src/model/device/device_modes.h lists the modes; docs/adding-a-mode.md).
template <bool kLaminar>
struct HomodyneDeviceMode {
  // The mode's name (ToString(AnalysisMode), include/homodyne/model.h).
  static constexpr const char* kName = kLaminar ? "laminar_flow" : "static";
  using Tables = ModelTables;
  using Angle = AngleTerms;
  using Shape = ModeShape<kLaminar>;

  // The tables over one array of MakeInputs (host memory or its copy on a device): C_D (N), its
  // derivatives (3 N), and for laminar_flow C_G (N) and its derivatives (3 N); scalars.values[0]
  // is the diffusion prefactor 0.5 q^2 dt.
  HOMODYNE_HOST_DEVICE static Tables TablesAt(const TableScalars& scalars, const double* base) {
    const int64_t n = scalars.num_times;
    Tables tables;
    tables.num_times = scalars.num_times;
    tables.diffusion_prefactor = scalars.values[0];
    tables.cumulative_diffusion = base;
    tables.cumulative_diffusion_derivatives = base + n;
    if constexpr (kLaminar) {
      tables.cumulative_shear = base + 4 * n;
      tables.cumulative_shear_derivatives = base + 5 * n;
    }
    return tables;
  }

  HOMODYNE_HOST_DEVICE static void Row(const Tables& tables, const Angle& angle, int i, int j,
                                       double data, double* row) {
    PointModel<kLaminar, true>(tables, angle, i, j, data, row);
  }
  HOMODYNE_HOST_DEVICE static double Cost(const Tables& tables, const Angle& angle,
                                          const LossTerms& loss, int i, int j, double data) {
    return PointCost<kLaminar>(tables, angle, loss, i, j, data);
  }

  // The full pass through per-frame sums (device_modes.h, the optional members): static only;
  // laminar_flow builds its Gram point by point (docs/design.md section 2: no per-frame product).
  static constexpr int kDataSums = kLaminar ? 0 : kStaticDataSums;
  HOMODYNE_HOST_DEVICE static void DataTerms(const Tables& tables, const Angle& angle, int i, int j,
                                             double data, double* partial) {
    if constexpr (!kLaminar) StaticPointDataTerms(tables, angle, i, j, data, partial);
  }
  // Host only (homodyne_device.cc): a job's Gram from its data sums (DataTerms added over its
  // points) and the inputs' row sums (DeviceInputs::row_sums) of rows [row_begin, row_end),
  // scaled by the angle's contrast and w as the CPU's per-frame pass; the terms of the job's
  // non-finite points (host_data: the job's values on the host, read only when the count says
  // some are not finite) subtracted from the row sums. triangle: TriangleEntries(kGramSize)
  // values, row by row (the block sums' layout); *finite the count.
  static void GramFromDataSums(const Tables& tables, const double* row_sums, const Angle& angle,
                               int row_begin, int row_end, const float* host_data,
                               const double* data_sums, double* triangle, int64_t* finite);

  // Host only (homodyne_device.cc): the inputs at a point of this mode, the tables computed by
  // the CPU model's own arithmetic (ComputeHomodyneRateTables) and the angles' coefficients as
  // the CPU kernel's (docs/model.md, Shear factor).
  static void MakeInputs(const DevicePoint& point, DeviceInputs<Angle>* inputs);
};

}  // namespace homodyne::device_pass
