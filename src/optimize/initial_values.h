// Starting values of a fit (docs/model.md, Bounds and start values; bound midpoints for `values:
// null`).
#pragma once

#include <span>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/process_group.h"

namespace homodyne {

// Physical starting values in model order: initial_parameters.values by name where given, the
// bound midpoint (min + max) / 2 of every parameter not given (the reference's documented rule for
// `values: null`, which its NLSQ code does not follow; docs/model.md, Same as the reference, and
// different).
std::vector<double> InitialPhysicalParameters(const Config& config);

struct ScalingEstimate {
  double contrast = 0.0;
  double offset = 0.0;
};

// The reference's quantile estimator of one angle's contrast and offset (docs/model.md, Bounds and
// start values), on the packed strict upper triangle of n_times times (lag = j - i frames):
//   offset   = 10th percentile of c2 at lags >= the 80th lag percentile,
//   contrast = 90th percentile of c2 at lags <= the 20th lag percentile - offset,
// each clipped to its bounds; percentiles interpolate linearly (numpy's default); non-finite values
// are ignored; fewer than 100 finite points give the bound midpoints.
ScalingEstimate EstimateScalingFromData(std::span<const float> packed_upper, int n_times,
                                        const ParameterBound& contrast_bound,
                                        const ParameterBound& offset_bound);

// The same estimator on a sample of whole rows (the streaming strategy, which never holds a whole
// angle): `values` concatenates the packed strict upper-triangle segments (j = i+1..N-1) of the
// ascending `rows`. The lag thresholds are those of the full triangle, so an evenly spread sample
// of rows approximates the full-data estimate.
ScalingEstimate EstimateScalingFromRows(std::span<const float> values, std::span<const int> rows,
                                        int n_times, const ParameterBound& contrast_bound,
                                        const ParameterBound& offset_bound);

// The same estimator on the rows of every rank of `group` together (docs/design.md section 5b: a
// rank of an in-memory fit holds only the rows of its batches): `values` and `rows` as for
// EstimateScalingFromRows, this rank's part; the ranks' rows together must be every row of the
// triangle, each once. The percentiles are order statistics found exactly over all ranks (a radix
// selection on the values' bits: 4 AllGathers of 256 counts per order statistic), so every rank
// returns bitwise what EstimateScalingFromData returns on the whole triangle in one process.
// Collective: every rank of the group calls it with the same bounds.
ScalingEstimate EstimateScalingOverRanks(std::span<const float> values, std::span<const int> rows,
                                         int n_times, const ParameterBound& contrast_bound,
                                         const ParameterBound& offset_bound, ProcessGroup& group);

// numpy.percentile(values, q) with linear interpolation; reorders `values`. Empty -> NaN.
double Percentile(std::vector<double>& values, double q);

}  // namespace homodyne
