#include "fit_data_check.h"

#include <cstdint>
#include <string>

#include "homodyne/errors.h"
#include "optimize/number_text.h"

namespace homodyne {

void CheckDataCanBeFitted(const BatchedObjective& objective, const std::string& data_name,
                          PerAngleMode mode, int num_reduced) {
  const int64_t finite_points = objective.num_residuals() / 2;
  const int n_effective =
      EffectiveParameterCount(mode, objective.num_physical(), objective.num_angles(), num_reduced);
  const int64_t dof = 2 * finite_points - n_effective;
  if (finite_points < num_reduced || dof <= 0) {
    throw DataError(
        data_name + ": too few finite c2_exp points to fit: " + std::to_string(finite_points) +
        " of the " + std::to_string(objective.num_points()) + " fitted points (" +
        std::to_string(objective.num_angles()) +
        " angles, upper triangles without the diagonal) are finite, for " +
        std::to_string(num_reduced) + " fitted parameters (degrees of freedom " +
        std::to_string(dof) +
        "; docs/results.md, Degrees of freedom). NaN and +-inf points are excluded, and so are "
        "values beyond +-3.4e38, the float32 range the fit reads");
  }
  const FiniteValueRange& range = objective.finite_value_range();
  if (range.complete && range.min == range.max) {
    throw DataError(data_name + ": every finite c2_exp point equals " + FormatNumber(range.min) +
                    ": constant data carry no correlation decay to fit (is it the right "
                    "dataset?)");
  }
}

}  // namespace homodyne
