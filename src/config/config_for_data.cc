// ValidateConfigForData (config_for_data.h).
#include "config/config_for_data.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/errors.h"

namespace homodyne {

void ValidateConfigForData(const Config& config, const FitShape& shape) {
  const std::pair<const std::optional<std::vector<double>>*, const char*> per_angle_lists[] = {
      {&config.initial.per_angle_contrast, "contrast"},
      {&config.initial.per_angle_offset, "offset"}};
  for (const auto& [list, name] : per_angle_lists) {
    if (*list && static_cast<int>((*list)->size()) != shape.num_angles) {
      throw ConfigError(config.source_path + ": initial_parameters.per_angle_scaling." + name +
                        " has " + std::to_string((*list)->size()) + " values but the data has " +
                        std::to_string(shape.num_angles) + " angles");
    }
  }
  if (config.nlsq.solver == LmSolver::kCeres && !config.nlsq.loss.is_linear()) {
    throw ConfigError(config.source_path + ": optimization.nlsq.loss = " +
                      std::string(ToString(config.nlsq.loss.function)) +
                      " needs the LM core (the Ceres solver fits the linear loss only): use "
                      "optimization.nlsq.solver: lm, or loss: linear");
  }
  if (config.nlsq.solver == LmSolver::kCeres && shape.strategy != StrategyKind::kStandard) {
    throw ConfigError(config.source_path +
                      ": optimization.nlsq.solver = ceres needs the standard "
                      "strategy (this fit uses " +
                      std::string(ToString(shape.strategy)) +
                      "): use --strategy standard, or solver lm");
  }
}

}  // namespace homodyne
