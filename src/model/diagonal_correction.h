// The diagonal correction "basic" of the reference (docs/model.md, Diagonal correction), one entry
// at a time: the one formula behind ApplyDiagonalCorrection (include/homodyne/model.h) and the
// file reader's corrected matrices and rows (src/io/beamline_reader.cc), so they agree bit for
// bit. Private to src/.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace homodyne::model_internal {

// The corrected value of diagonal entry (i, i) of an n x n matrix, n >= 2, 0 <= i < n: the mean
// of its first off-diagonal neighbours s_{i-1} = C[i-1, i] and s_i = C[i, i+1] (each symmetrised,
// (C[k, k+1] + C[k+1, k]) / 2, where the matrix is not symmetric). Row 0 has only s_0 and row
// n-1 only s_{n-2}; the missing neighbour's argument is ignored there.
inline double CorrectedDiagonalValue(int64_t i, int64_t n, double s_before, double s_after) {
  if (i == 0) return s_after;
  if (i == n - 1) return s_before;
  return 0.5 * (s_before + s_after);
}

// Method "statistical" (docs/model.md, Diagonal correction): the estimate of one diagonal value
// from its off-diagonal neighbours `values` (C[r, r+k] and C[r-k, r], k = 1..window, those inside
// the matrix; reordered in place, non-finite ones left out). estimator: "median" (the mean of the
// middle two of an even count), "mean", or "trimmed_mean" (int(trim_fraction * count) values cut
// from each end of the sorted values, as scipy.stats.trim_mean). NaN when no value is finite.
double StatisticalDiagonalValue(std::span<double> values, std::string_view estimator,
                                double trim_fraction);

}  // namespace homodyne::model_internal
