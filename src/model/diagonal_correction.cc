// Diagonal correction: "basic", "interpolation" and "statistical" (docs/model.md, Diagonal
// correction).
#include "model/diagonal_correction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"

namespace homodyne {

void ApplyDiagonalCorrection(int n, std::span<double> matrix) {
  HOMODYNE_CHECK(n >= 0);
  HOMODYNE_CHECK(matrix.size() >= static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  if (n <= 1) return;
  const auto at = [&](int i, int j) -> double& {
    return matrix[static_cast<std::size_t>(i) * static_cast<std::size_t>(n) +
                  static_cast<std::size_t>(j)];
  };
  // s_i = symmetrised first off-diagonal; both neighbours of (i, i) are read before it is written
  // (the diagonal is not among them, so in-place is safe).
  double previous = 0.0;  // s_{i-1}; unused for i = 0
  for (int i = 0; i < n; ++i) {
    const double current = i < n - 1 ? 0.5 * (at(i, i + 1) + at(i + 1, i)) : 0.0;  // s_i
    at(i, i) = model_internal::CorrectedDiagonalValue(i, n, previous, current);
    previous = current;
  }
}

namespace model_internal {

double StatisticalDiagonalValue(std::span<double> values, std::string_view estimator,
                                double trim_fraction) {
  const auto finite_end =
      std::partition(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
  const std::size_t count = static_cast<std::size_t>(finite_end - values.begin());
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), finite_end);
  if (estimator == "median") {
    return count % 2 == 1 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
  }
  std::size_t cut = 0;
  if (estimator == "trimmed_mean") {
    cut = static_cast<std::size_t>(trim_fraction * static_cast<double>(count));
    if (2 * cut >= count) cut = (count - 1) / 2;  // keep at least one value
  }
  double sum = 0.0;
  for (std::size_t k = cut; k < count - cut; ++k) sum += values[k];
  return sum / static_cast<double>(count - 2 * cut);
}

}  // namespace model_internal

void ApplyDiagonalCorrection(const DiagonalCorrectionOptions& options, int n,
                             std::span<double> matrix) {
  HOMODYNE_CHECK(n >= 0);
  HOMODYNE_CHECK(matrix.size() >= static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  if (!options.apply || n <= 1) return;
  // basic; interpolation is basic on a symmetric matrix. Statistical replaces it where its
  // neighbours hold a finite value (the diagonal is none of them).
  ApplyDiagonalCorrection(n, matrix);
  if (options.method != "statistical") return;
  const auto at = [&](int i, int j) {
    return matrix[static_cast<std::size_t>(i) * static_cast<std::size_t>(n) +
                  static_cast<std::size_t>(j)];
  };
  std::vector<double> diagonal(static_cast<std::size_t>(n));
  std::vector<double> neighbours;
  for (int r = 0; r < n; ++r) {
    neighbours.clear();
    for (int k = 1; k <= options.window; ++k) {
      if (r + k < n) neighbours.push_back(at(r, r + k));
      if (r - k >= 0) neighbours.push_back(at(r - k, r));
    }
    diagonal[static_cast<std::size_t>(r)] = model_internal::StatisticalDiagonalValue(
        neighbours, options.estimator, options.trim_fraction);
  }
  for (int r = 0; r < n; ++r) {
    const double value = diagonal[static_cast<std::size_t>(r)];
    if (std::isfinite(value)) {
      matrix[static_cast<std::size_t>(r) * static_cast<std::size_t>(n) +
             static_cast<std::size_t>(r)] = value;
    }
  }
}

}  // namespace homodyne
