// The two-component mode's per-point arithmetic of the device passes (docs/model.md,
// Two-component mode; formula in two_component_point.h beside this file), written once for nvcc
// (cuda/pass_kernels.cu) and the host compiler (the host emulation,
// src/objective/emulated_pass_backend.cc), under the contract of src/model/device/device_point.h
// (contraction off in every including file), and the mode's device traits
// (TwoComponentDeviceMode) that the shared schedule (src/model/device/device_schedule.h) is
// instantiated on.
//
// The per-row tables (C[J_ref], C[J_sample], C[v] and their derivatives, the sample fraction x_s
// and its derivatives, and each angle's sin and cos of phase_per_unit C[v]_j) are computed on the
// host by the arithmetic of the CPU model's tables. The point arithmetic is that of the CPU pass
// body (two_component_pass_variant.cc, AccumulateTile and TileSquaredResiduals) with the transport
// factors H_r, H_s in the direct form (one exp per point and component, the exponent clipped at
// -700 with a zero derivative there) and the phase in the per-row product form
// (sin Phi = S_j K_i - K_j S_i, cos Phi = K_j K_i + S_j S_i; no sin or cos per point on the
// device).
#pragma once

#include <cstdint>

#include "model/device/device_point.h"

namespace homodyne::device_pass {

// The two-component mode's shape: 14 physical parameters, contrast, offset and e.
struct TwoComponentShape {
  static constexpr int kPhysical = 14;
  static constexpr int kGramSize = kPhysical + 3;
  static constexpr int kTriangle = TriangleEntries(kGramSize);
};

// Guards of the reference (two_component_point.h namespace two_component), repeated here because
// that header is not device code. tests/objective/emulated_pass_backend_test.cc checks they agree.
inline constexpr double kTwoComponentLogTransportMin = -700.0;
inline constexpr double kTwoComponentNormalizationFloor = 1e-10;

// The mode's tables at the pass's physical parameters: arrays on the host for the emulation, in
// device memory for a kernel. Every array has N values per column.
struct TwoComponentTables {
  int num_times = 0;                                         // N
  double transport_prefactor = 0.0;                          // q^2 / 2
  const double* cumulative_reference = nullptr;              // C[J_ref], N
  const double* cumulative_reference_derivatives = nullptr;  // 3 N
  const double* cumulative_sample = nullptr;                 // C[J_sample], N
  const double* cumulative_sample_derivatives = nullptr;     // 3 N
  const double* cumulative_velocity = nullptr;               // C[v], N
  const double* cumulative_velocity_derivatives = nullptr;   // 3 N: d / d(v0, v_beta, v_offset)
  const double* fraction = nullptr;                          // x_s, N
  const double* fraction_derivatives = nullptr;              // 4 N: d x_s / d(f0, f1, f2, f3)
  // Per angle k, at velocity_tables + 2 N k: N values sin(s_k C[v]_j), then N values
  // cos(s_k C[v]_j) (TwoComponentAngleTerms::phase_per_unit s_k; two_component_point.cc,
  // BuildVelocityTables).
  const double* velocity_tables = nullptr;
};

// Doubles of the tables' one array (TwoComponentTablesAt) for N times and K angles.
HOMODYNE_HOST_DEVICE inline int64_t TwoComponentTableDoubles(int64_t n, int64_t angles) {
  return 17 * n + 2 * n * angles;
}

// The tables over one array of TwoComponentTableDoubles(N, K) values (on the host, or its copy in
// device memory), in this order: C[J_ref] (N), its derivatives (3 N), C[J_sample] (N), its
// derivatives (3 N), C[v] (N), its derivatives (3 N), x_s (N), its derivatives (4 N), the
// velocity tables (2 N K).
HOMODYNE_HOST_DEVICE inline TwoComponentTables TwoComponentTablesAt(int n,
                                                                    double transport_prefactor,
                                                                    const double* base) {
  const int64_t size = n;
  TwoComponentTables tables;
  tables.num_times = n;
  tables.transport_prefactor = transport_prefactor;
  tables.cumulative_reference = base;
  tables.cumulative_reference_derivatives = base + size;
  tables.cumulative_sample = base + 4 * size;
  tables.cumulative_sample_derivatives = base + 5 * size;
  tables.cumulative_velocity = base + 8 * size;
  tables.cumulative_velocity_derivatives = base + 9 * size;
  tables.fraction = base + 12 * size;
  tables.fraction_derivatives = base + 13 * size;
  tables.velocity_tables = base + 17 * size;
  return tables;
}

// One angle's coefficients: Phi = phase_per_unit (C[v]_j - C[v]_i).
struct TwoComponentAngleTerms {
  double contrast = 0.0;
  double offset = 0.0;
  double phase_per_unit = 0.0;         // q cos((phi + phi0_het) pi/180)
  double dphase_dphi0_per_unit = 0.0;  // d(phase_per_unit) / d phi0_het, phi0_het in degrees
  int angle = 0;                       // the angle's index into velocity_tables
};

// H_c at (i, j) for the component with cumulative table `cumulative` (the direct form of the CPU
// body's SharedFactors) and, with kWithJacobian, d H_c / d(C_j - C_i) into *factor (0 where the
// clip binds).
template <bool kWithJacobian>
HOMODYNE_HOST_DEVICE inline double TransportFactor(const double* cumulative, double prefactor,
                                                   int i, int j, double* factor) {
  const double diff = cumulative[j] - cumulative[i];
  const double m = DeviceSqrt(diff * diff + kSmoothAbsEpsilon);
  const double log_h = -prefactor * m;
  const bool clipped = log_h < kTwoComponentLogTransportMin;
  const double value = DeviceExp(clipped ? kTwoComponentLogTransportMin : log_h);
  if constexpr (kWithJacobian) *factor = clipped ? 0.0 : value * (-prefactor) * (diff / m);
  return value;
}

// c2 at point (i, j), i < j, of one angle, and with kWithJacobian its row of [J | e] in
// row[0, 17): J = d c2 / d(14 physical, contrast, offset), e = data - c2. A non-finite data value
// gives a zero row (it counts for nothing). Returns c2.
template <bool kWithJacobian>
HOMODYNE_HOST_DEVICE inline double TwoComponentPointModel(const TwoComponentTables& tables,
                                                          const TwoComponentAngleTerms& angle,
                                                          int i, int j, double data, double* row) {
  const int n = tables.num_times;
  const double w_q = tables.transport_prefactor;
  double factor_r = 0.0, factor_s = 0.0;
  const double hr =
      TransportFactor<kWithJacobian>(tables.cumulative_reference, w_q, i, j, &factor_r);
  const double hs = TransportFactor<kWithJacobian>(tables.cumulative_sample, w_q, i, j, &factor_s);
  const double* sin_table = tables.velocity_tables + 2 * static_cast<int64_t>(n) * angle.angle;
  const double* cos_table = sin_table + n;
  const double cos_phase = cos_table[j] * cos_table[i] + sin_table[j] * sin_table[i];
  const double u = tables.fraction[i], ur = 1.0 - u;
  const double w = tables.fraction[j], wr = 1.0 - w;
  const double a = ur * wr;
  const double b = u * w;
  const double norm_i = u * u + ur * ur;
  const double norm_j = w * w + wr * wr;
  const double den_raw = norm_i * norm_j;
  const bool floored = !(den_raw > kTwoComponentNormalizationFloor);
  const double inverse_den = 1.0 / (floored ? kTwoComponentNormalizationFloor : den_raw);
  const double num = a * a * hr * hr + b * b * hs * hs + 2.0 * (a * b) * hr * hs * cos_phase;
  const double g = num * inverse_den;
  const double c2 = angle.offset + angle.contrast * g;
  if constexpr (kWithJacobian) {
    using Shape = TwoComponentShape;
    if (!IsFiniteValue(data)) {
      for (int c = 0; c < Shape::kGramSize; ++c) row[c] = 0.0;
      return c2;
    }
    const double sin_phase = sin_table[j] * cos_table[i] - cos_table[j] * sin_table[i];
    const double dden_du = floored ? 0.0 : (4.0 * u - 2.0) * norm_j;
    const double dden_dw = floored ? 0.0 : (4.0 * w - 2.0) * norm_i;
    const double contrast = angle.contrast;
    const double dg_dhr = 2.0 * (a * a * hr + a * b * hs * cos_phase) * inverse_den;
    const double dg_dhs = 2.0 * (b * b * hs + a * b * hr * cos_phase) * inverse_den;
    const double dg_dphase = -2.0 * a * b * hr * hs * sin_phase * inverse_den;
    const double n_a = 2.0 * a * hr * hr + 2.0 * b * hr * hs * cos_phase;
    const double n_b = 2.0 * b * hs * hs + 2.0 * a * hr * hs * cos_phase;
    const double dg_du = ((n_a * (-wr) + n_b * w) - g * dden_du) * inverse_den;
    const double dg_dw = ((n_a * (-ur) + n_b * u) - g * dden_dw) * inverse_den;
    const double c_hr = contrast * dg_dhr, c_hs = contrast * dg_dhs;
    const double c_phase = contrast * dg_dphase;
    const double c_velocity = c_phase * angle.phase_per_unit;
    const double* dr = tables.cumulative_reference_derivatives;
    const double* ds = tables.cumulative_sample_derivatives;
    const double* dv = tables.cumulative_velocity_derivatives;
    // In the CPU body's order: c_hr (factor_r (dC_j - dC_i)), (c_phase s) (dC[v]_j - dC[v]_i).
    for (int p = 0; p < 3; ++p) {
      const int64_t at_j = static_cast<int64_t>(p) * n + j, at_i = static_cast<int64_t>(p) * n + i;
      row[p] = c_hr * (factor_r * (dr[at_j] - dr[at_i]));
      row[3 + p] = c_hs * (factor_s * (ds[at_j] - ds[at_i]));
      row[6 + p] = c_velocity * (dv[at_j] - dv[at_i]);
    }
    const double c_du = contrast * dg_du, c_dw = contrast * dg_dw;
    const double* dx = tables.fraction_derivatives;
    for (int m = 0; m < 4; ++m) {
      row[9 + m] =
          c_du * dx[static_cast<int64_t>(m) * n + i] + c_dw * dx[static_cast<int64_t>(m) * n + j];
    }
    const double phase_difference = tables.cumulative_velocity[j] - tables.cumulative_velocity[i];
    row[13] = c_phase * angle.dphase_dphi0_per_unit * phase_difference;
    row[Shape::kPhysical] = g;              // d c2 / d contrast
    row[Shape::kPhysical + 1] = 1.0;        // d c2 / d offset
    row[Shape::kPhysical + 2] = data - c2;  // e
  }
  return c2;
}

// The point's term of a cost pass: e^2 (linear loss) or s^2 rho((e / s)^2); 0 for a non-finite
// data value.
HOMODYNE_HOST_DEVICE inline double TwoComponentPointCost(const TwoComponentTables& tables,
                                                         const TwoComponentAngleTerms& angle,
                                                         const LossTerms& loss, int i, int j,
                                                         double data) {
  if (!IsFiniteValue(data)) return 0.0;
  return ResidualCost(loss,
                      data - TwoComponentPointModel<false>(tables, angle, i, j, data, nullptr));
}

// The device traits of the two-component mode (as HomodyneDeviceMode, homodyne_device.h).
struct TwoComponentDeviceMode {
  static constexpr const char* kName = "two_component";
  using Tables = TwoComponentTables;
  using Angle = TwoComponentAngleTerms;
  using Shape = TwoComponentShape;

  // TwoComponentTablesAt; scalars.values[0] is the transport prefactor q^2 / 2.
  HOMODYNE_HOST_DEVICE static Tables TablesAt(const TableScalars& scalars, const double* base) {
    return TwoComponentTablesAt(scalars.num_times, scalars.values[0], base);
  }

  HOMODYNE_HOST_DEVICE static void Row(const Tables& tables, const Angle& angle, int i, int j,
                                       double data, double* row) {
    TwoComponentPointModel<true>(tables, angle, i, j, data, row);
  }
  HOMODYNE_HOST_DEVICE static double Cost(const Tables& tables, const Angle& angle,
                                          const LossTerms& loss, int i, int j, double data) {
    return TwoComponentPointCost(tables, angle, loss, i, j, data);
  }

  // Host only (two_component_device.cc): the inputs at a point of this mode, the tables computed
  // by the CPU model's own arithmetic (ComputeTwoComponentTables, FillVelocityPhaseTables).
  static void MakeInputs(const DevicePoint& point, DeviceInputs<Angle>* inputs);
};

}  // namespace homodyne::device_pass
