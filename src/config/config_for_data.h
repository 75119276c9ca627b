// The checks of a config that need the data set: what ResolveConfig cannot know before the data
// are opened and the fit is planned (docs/configuration.md, Parameters).
#pragma once

#include "homodyne/config.h"

namespace homodyne {

// What a fit of a data set has to agree with the config on.
struct FitShape {
  int num_angles = 0;                               // angles kept after phi filtering
  StrategyKind strategy = StrategyKind::kStandard;  // the strategy the plan chose
};

// Throws ConfigError, naming config.source_path, when initial_parameters.per_angle_scaling
// contrast or offset has not one value per kept angle, or when optimization.nlsq.solver = ceres
// meets a strategy other than standard (Ceres holds the whole Jacobian).
void ValidateConfigForData(const Config& config, const FitShape& shape);

}  // namespace homodyne
