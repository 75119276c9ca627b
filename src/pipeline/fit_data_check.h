// The checks a fit makes on its data before it reports anything (docs/results.md, When a fit is
// refused): enough finite points for the parameters it fits, and data that vary at all. A fit
// that fails one ends in DataError (exit 1, no result files), never in a "converged" result
// with dof <= 0 or start values fitted to nothing.
#pragma once

#include <string>

#include "objective/batched_objective.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// Throws DataError, naming data_name (DatasetInfo::file_path) and c2_exp, when
//  - the objective's finite points are fewer than the fitted parameters (num_reduced), or the
//    degrees of freedom 2 * finite points - n_eff (EffectiveParameterCount of mode) are <= 0;
//  - its finite values are all equal (checked once finite_value_range() is complete).
// The count is the objective's: exact for data in memory from the start, for streamed data only
// after a pass (before it every point counts as finite), so a fit calls this before its first
// pass and again after its final fit.
void CheckDataCanBeFitted(const BatchedObjective& objective, const std::string& data_name,
                          PerAngleMode mode, int num_reduced);

}  // namespace homodyne
