// What a fit of a data set will do: parameters, memory, batch size, threads, strategy. Shared by
// `--dry-run` (which prints it) and the fit (which runs it), so both always agree.
#pragma once

#include <optional>
#include <string>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "optimize/per_angle_mode.h"
#include "pipeline/memory_budget.h"

namespace homodyne {

struct FitPlan {
  ResolvedScaling requested_scaling;  // the config's per-angle mode, resolved for the angle count
  ResolvedScaling scaling;            // what the fit uses
  std::string scaling_warning;        // non-empty when the two differ
  int num_physical = 0;
  int num_parameters = 0;  // physical + scaling parameters optimised (before fixed_parameters)
  AvailableMemory available;
  ProblemSize size;  // data kept as float32, batch size, threads
  StrategyChoice strategy;
};

// Throws ConfigError (bad per-angle mode), InputError (bad HOMODYNE_MEMORY_LIMIT, or a forced
// strategy that cannot fit in memory).
FitPlan PlanFit(const Config& config, const DatasetInfo& info);

}  // namespace homodyne
