// Parameter bounds and the clipped start (bounds.h).
#include "optimize/bounds.h"

#include <cmath>
#include <limits>

#include "optimize/number_text.h"

namespace homodyne {

ParameterBounds BoundsOrUnbounded(const Eigen::VectorXd& lower_bounds,
                                  const Eigen::VectorXd& upper_bounds, int num_parameters) {
  const double inf = std::numeric_limits<double>::infinity();
  ParameterBounds bounds;
  bounds.lower =
      lower_bounds.size() > 0 ? lower_bounds : Eigen::VectorXd::Constant(num_parameters, -inf);
  bounds.upper =
      upper_bounds.size() > 0 ? upper_bounds : Eigen::VectorXd::Constant(num_parameters, inf);
  return bounds;
}

std::string ParameterName(const std::vector<std::string>& names, int i) {
  if (!names.empty()) return names[static_cast<size_t>(i)];
  std::string name = "#";  // appended, not "#" + ...: GCC 12 -Wrestrict false positive (105651)
  name += std::to_string(i);
  return name;
}

std::optional<std::string> ClipStartIntoBounds(Eigen::VectorXd& theta, const Eigen::VectorXd& lower,
                                               const Eigen::VectorXd& upper,
                                               const std::vector<std::string>& names,
                                               std::vector<std::string>& warnings) {
  for (int i = 0; i < static_cast<int>(theta.size()); ++i) {
    if (!std::isfinite(theta[i])) {
      return "the starting value of " + ParameterName(names, i) + " is " + FormatNumber(theta[i]);
    }
    if (theta[i] < lower[i] || theta[i] > upper[i]) {
      const bool below = theta[i] < lower[i];
      const double bound = below ? lower[i] : upper[i];
      warnings.push_back("initial value of " + ParameterName(names, i) + " = " +
                         FormatNumber(theta[i]) + " is " +
                         (below ? "below its lower" : "above its upper") + " bound " +
                         FormatNumber(bound) + ": clipped to " + FormatNumber(bound));
      theta[i] = bound;
    }
  }
  return std::nullopt;
}

}  // namespace homodyne
