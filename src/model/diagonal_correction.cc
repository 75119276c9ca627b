// Diagonal correction "basic" (docs/model.md, Diagonal correction).
#include "model/diagonal_correction.h"

#include <span>

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

}  // namespace homodyne
