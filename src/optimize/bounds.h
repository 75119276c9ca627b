// Parameter bounds and the start clipped into them, shared by the LM core
// (src/optimize/levenberg_marquardt.h) and the Ceres standard fit
// (src/optimize/ceres_standard_fit.h), so that both treat bounds and a start alike
// (docs/design.md section 4).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <Eigen/Dense>

namespace homodyne {

// Lower and upper bounds of P parameters; a side without a bound holds -inf or +inf.
struct ParameterBounds {
  Eigen::VectorXd lower;  // P values
  Eigen::VectorXd upper;  // P values
};

// The bounds as the optimisers' options give them (LevenbergMarquardtOptions::lower_bounds and
// upper_bounds): each side as given, or all -inf (lower) or +inf (upper) when it is empty. A side
// that is given is copied unchanged; its length is the caller's to check.
ParameterBounds BoundsOrUnbounded(const Eigen::VectorXd& lower_bounds,
                                  const Eigen::VectorXd& upper_bounds, int num_parameters);

// The name of parameter i in messages: names[i], or "#i" when `names` is empty.
std::string ParameterName(const std::vector<std::string>& names, int i);

// Clips the start `theta` into [lower, upper] in place, parameter by parameter in index order, and
// appends one warning per clipped parameter to `warnings`:
//   "initial value of NAME = V is below its lower bound B: clipped to B"
//   "initial value of NAME = V is above its upper bound B: clipped to B"
// (numbers as FormatNumber writes them; docs/user-guide.md section 5 quotes the text). At the
// first value that is not finite it stops and returns the reason the fit fails with, "the
// starting value of NAME is V": the parameters before it are clipped already, those after it are
// untouched. Returns std::nullopt when every value is finite. lower, upper and theta have the
// same length; names is empty or of that length.
std::optional<std::string> ClipStartIntoBounds(Eigen::VectorXd& theta, const Eigen::VectorXd& lower,
                                               const Eigen::VectorXd& upper,
                                               const std::vector<std::string>& names,
                                               std::vector<std::string>& warnings);

}  // namespace homodyne
