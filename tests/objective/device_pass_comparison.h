// What the device backends' tests share (emulated_pass_backend_test.cc on the host emulation,
// cuda_pass_backend_test.cc on a device): data sets with non-finite cells, and the comparison of a
// backend's per-batch sums with the CPU backend's.
//
// The tolerance (docs/backends.md, Verified where): a Gram entry (a, c) agrees when
//   |x - y| <= tolerance sqrt(G_aa G_cc)   (G: the CPU's Gram),
// the scale that bounds |G_ac| (Cauchy-Schwarz); entries such as J^T e sum terms of both signs to
// far less than that scale near an optimum, and a relative bound on the sum itself would measure
// the cancellation, not the backend. Diagonal entries and costs: plain relative error. Finite
// counts: equal.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "objective/pass_backend.h"

namespace homodyne::device_pass_testing {

// One comparison case: a model, its data (with NaN and inf cells), a point and a batch list.
struct PassCase {
  std::string name;
  HomodyneModel model;
  std::vector<double> physical;
  std::vector<double> phi = {0.0, 45.0, 95.0};
  std::vector<double> contrast = {0.3, 0.25, 0.2};
  std::vector<double> offset = {1.0, 1.02, 0.98};
  InMemoryPassData::PackedData data;
  std::vector<RowBatch> batches;
};

inline HomodyneModel MakeModel(AnalysisMode mode, int num_times) {
  std::vector<double> times(static_cast<size_t>(num_times));
  for (int i = 0; i < num_times; ++i) times[static_cast<size_t>(i)] = (i + 1) * 0.1;
  return HomodyneModel(mode, ScatteringGeometry{0.0054, 2.0e6, 0.1}, std::move(times));
}

inline std::vector<double> PhysicalOf(AnalysisMode mode) {
  if (mode == AnalysisMode::kStatic) return {3000.0, -0.5, 10.0};
  if (mode == AnalysisMode::kTwoComponent) {  // as tests/support/simulated_data_fixture.h
    return {1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 20.0, 0.5, 1.0, 0.3, 0.01, 0.5, 0.2, 2.0};
  }
  return {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
}

// The model at 0.95 times the point plus noise, so the residuals are not noise only, with NaN
// and inf cells where the triangle has room for them (nan_cells of them per angle, spread).
// physical: the point (empty: PhysicalOf(mode)).
inline PassCase MakeCase(std::string name, AnalysisMode mode, int num_times, int64_t batch_points,
                         int nan_cells = 2, std::vector<double> physical = {}) {
  PassCase pass_case{std::move(name),
                     MakeModel(mode, num_times),
                     physical.empty() ? PhysicalOf(mode) : std::move(physical),
                     {0.0, 45.0, 95.0},
                     {0.3, 0.25, 0.2},
                     {1.0, 1.02, 0.98},
                     {},
                     {}};
  std::vector<double> truth = pass_case.physical;
  for (double& value : truth) value *= 0.95;
  const ModelEvaluation evaluation(pass_case.model, truth);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 0.01);
  const int64_t size = UpperTriangleSize(num_times);
  std::vector<double> c2(static_cast<size_t>(size));
  for (size_t k = 0; k < pass_case.phi.size(); ++k) {
    evaluation.EvaluateUpperTriangleRows(pass_case.phi[k], pass_case.contrast[k],
                                         pass_case.offset[k], 0, num_times, c2, {});
    std::vector<float> values(c2.size());
    for (size_t p = 0; p < c2.size(); ++p) values[p] = static_cast<float>(c2[p] + noise(rng));
    for (int cell = 0; cell < nan_cells && size > 1; ++cell) {
      const size_t where = static_cast<size_t>((cell * 7919 + 13 * static_cast<int64_t>(k)) % size);
      values[where] = cell % 2 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                    : std::numeric_limits<float>::infinity();
    }
    pass_case.data.push_back(std::move(values));
  }
  pass_case.batches = SplitIntoBatches(num_times, batch_points);
  return pass_case;
}

// The data pointers of batches (PassData::Fetch layout).
inline std::vector<const float*> PointersOf(const PassCase& pass_case,
                                            std::span<const RowBatch> batches) {
  std::vector<const float*> pointers;
  for (const RowBatch& batch : batches) {
    for (const std::vector<float>& values : pass_case.data) {
      pointers.push_back(values.data() + batch.offset);
    }
  }
  return pointers;
}

// A backend's sums over batches[first, last) of a case, computed in one call of each kind.
struct PassSums {
  std::vector<Eigen::MatrixXd> grams;
  std::vector<int64_t> finite;
  std::vector<double> costs;
};

// stable_data_id: PassPoint::stable_data_id (0: the data count as buffers reused between calls);
// columns: PassPoint::columns.
inline PassSums ComputeSums(PassBackend& backend, const PassCase& pass_case, const PassLoss& loss,
                            int first, int last, uint64_t stable_data_id = 0,
                            PassColumns columns = PassColumns::kAll) {
  const ModelEvaluation evaluation(pass_case.model, pass_case.physical);
  const PassPoint point{&evaluation,    pass_case.phi, pass_case.contrast, pass_case.offset, loss,
                        stable_data_id, columns};
  const std::unique_ptr<PreparedPass> pass = backend.Prepare(point);
  const std::span<const RowBatch> batches =
      std::span<const RowBatch>(pass_case.batches)
          .subspan(static_cast<size_t>(first), static_cast<size_t>(last - first));
  const std::vector<const float*> pointers = PointersOf(pass_case, batches);
  PassSums sums;
  const int g = pass->gram_size();
  sums.grams.assign(pointers.size(), Eigen::MatrixXd::Constant(g, g, -1.0));
  sums.finite.assign(pointers.size(), -1);
  sums.costs.assign(batches.size(), -1.0);
  pass->ComputeGrams(batches, pointers, sums.grams, sums.finite);
  pass->ComputeSquaredResiduals(batches, pointers, sums.costs);
  return sums;
}

inline PassSums ComputeAllSums(PassBackend& backend, const PassCase& pass_case,
                               const PassLoss& loss = PassLoss(), uint64_t stable_data_id = 0,
                               PassColumns columns = PassColumns::kAll) {
  return ComputeSums(backend, pass_case, loss, 0, static_cast<int>(pass_case.batches.size()),
                     stable_data_id, columns);
}

// The largest error of `actual` against `expected` by the measure at the top of this file, over
// every Gram entry (lower triangle and diagonal) and cost; finite counts must be equal (a
// mismatch is reported as infinity).
inline double LargestError(const PassSums& actual, const PassSums& expected, std::string* where) {
  double largest = 0.0;
  auto note = [&](double error, const std::string& what) {
    if (!(error <= largest)) {  // NaN counts as the largest
      largest = std::isnan(error) ? std::numeric_limits<double>::infinity() : error;
      *where = what;
    }
  };
  if (actual.grams.size() != expected.grams.size() ||
      actual.costs.size() != expected.costs.size()) {
    *where = "sizes differ";
    return std::numeric_limits<double>::infinity();
  }
  for (size_t slot = 0; slot < expected.grams.size(); ++slot) {
    const Eigen::MatrixXd& x = actual.grams[slot];
    const Eigen::MatrixXd& y = expected.grams[slot];
    if (actual.finite[slot] != expected.finite[slot]) {
      note(std::numeric_limits<double>::infinity(), "finite count of slot " + std::to_string(slot));
    }
    for (int a = 0; a < y.rows(); ++a) {
      for (int c = 0; c <= a; ++c) {
        const double scale = std::sqrt(std::abs(y(a, a) * y(c, c)));
        const double difference = std::abs(x(a, c) - y(a, c));
        const double error = difference == 0.0 ? 0.0 : difference / scale;
        note(error, "slot " + std::to_string(slot) + " entry (" + std::to_string(a) + ", " +
                        std::to_string(c) + ")");
      }
    }
  }
  for (size_t b = 0; b < expected.costs.size(); ++b) {
    const double difference = std::abs(actual.costs[b] - expected.costs[b]);
    note(difference == 0.0 ? 0.0 : difference / std::abs(expected.costs[b]),
         "cost of batch " + std::to_string(b));
  }
  return largest;
}

// True when every lower-triangle entry, finite count and cost is bitwise equal.
inline bool BitwiseEqual(const PassSums& a, const PassSums& b) {
  if (a.grams.size() != b.grams.size() || a.finite != b.finite || a.costs != b.costs) return false;
  for (size_t slot = 0; slot < a.grams.size(); ++slot) {
    for (int r = 0; r < a.grams[slot].rows(); ++r) {
      for (int c = 0; c <= r; ++c) {
        if (a.grams[slot](r, c) != b.grams[slot](r, c)) return false;
      }
    }
  }
  return true;
}

// The cases every device backend is compared on: the three modes, a large triangle in batches of
// 1500 points (not a multiple of any block size), a grid of 2 times (one point), batches of one
// row, and a triangle whose first rows are all NaN; and the static mode's full pass through
// per-frame sums (docs/design.md section 2) at slow decay (D0 30: its sums run over the whole
// grid) and fast decay (D0 3e6: floored and clipped points), with NaN and inf cells, as the CPU
// pass kernel's test of that form (tests/model/pass_kernel_test.cc).
inline std::vector<PassCase> ComparisonCases() {
  std::vector<PassCase> cases;
  cases.push_back(MakeCase("static slow decay (D0 30), 300 times, batches of 2000",
                           AnalysisMode::kStatic, 300, 2000, 7, {30.0, -0.5, 10.0}));
  cases.push_back(MakeCase("static fast decay (D0 3e6), 300 times, batches of 2000",
                           AnalysisMode::kStatic, 300, 2000, 7, {3.0e6, -0.5, 10.0}));
  for (AnalysisMode mode :
       {AnalysisMode::kStatic, AnalysisMode::kLaminarFlow, AnalysisMode::kTwoComponent}) {
    const std::string prefix(ToString(mode));
    cases.push_back(MakeCase(prefix + " 200 times, batches of 1500", mode, 200, 1500, 5));
    cases.push_back(MakeCase(prefix + " one point", mode, 2, 1, 0));
    cases.push_back(MakeCase(prefix + " one-row batches", mode, 23, 1, 3));
    PassCase nan_rows = MakeCase(prefix + " NaN rows", mode, 41, 100, 0);
    for (std::vector<float>& values : nan_rows.data) {
      for (size_t p = 0; p < 120; ++p) values[p] = std::numeric_limits<float>::quiet_NaN();
    }
    cases.push_back(std::move(nan_rows));
  }
  return cases;
}

}  // namespace homodyne::device_pass_testing
