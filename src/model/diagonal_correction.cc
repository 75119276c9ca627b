// Diagonal correction "basic" (reference section 1.9).
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
  // s_i = symmetrised first off-diagonal; read all of them before any diagonal is written (the
  // diagonal is not among them, so in-place is safe).
  double previous = 0.5 * (at(0, 1) + at(1, 0));  // s_0
  at(0, 0) = previous;
  for (int i = 1; i < n - 1; ++i) {
    const double current = 0.5 * (at(i, i + 1) + at(i + 1, i));  // s_i
    at(i, i) = 0.5 * (previous + current);
    previous = current;
  }
  at(n - 1, n - 1) = previous;  // s_{N-2}
}

}  // namespace homodyne
