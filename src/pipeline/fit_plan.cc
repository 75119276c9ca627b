#include "fit_plan.h"

#include <omp.h>

#include "model/mode_catalog.h"

namespace homodyne {

FitPlan PlanFit(const Config& config, const DatasetInfo& info) {
  FitPlan plan;
  const int n_angles = info.num_angles();
  plan.requested_scaling = ResolvePerAngleMode(config.nlsq, n_angles);
  plan.scaling = plan.requested_scaling;
  // As the reference (docs/model.md, Per-angle scaling): the per-angle modes apply to the modes
  // whose c2 depends on the angle through the physics (laminar_flow, two_component; the mode
  // catalog's angle_dependent) with anti_degeneracy.enable; otherwise every angle has its own
  // contrast and offset.
  if (plan.requested_scaling.mode != PerAngleMode::kIndividual &&
      (!DefinitionOf(config.analysis_mode).angle_dependent ||
       !config.nlsq.anti_degeneracy_enabled)) {
    plan.scaling = {PerAngleMode::kIndividual, 2 * n_angles, "one contrast and offset per angle"};
    std::string angle_dependent_modes;  // "laminar_flow and two_component"
    for (const ModeDefinition& mode : AllModeDefinitions()) {
      if (!mode.angle_dependent) continue;
      angle_dependent_modes +=
          (angle_dependent_modes.empty() ? "" : " and ") + std::string(mode.name);
    }
    plan.scaling_warning = "per-angle mode " + std::string(ToString(plan.requested_scaling.mode)) +
                           " applies to " + angle_dependent_modes +
                           " with anti_degeneracy.enable (docs/model.md, Per-angle scaling): "
                           "fitting individual";
  }
  plan.num_physical = NumPhysicalParameters(config.analysis_mode);
  plan.num_parameters = plan.num_physical + plan.scaling.num_scaling_parameters;

  const PerformanceOptions& performance = config.performance;
  const std::optional<double> no_limit;
  plan.available = performance.memory_limit_from_command_line
                       ? DetectAvailableMemory(performance.memory_limit_gb, no_limit)
                       : DetectAvailableMemory(no_limit, performance.memory_limit_gb);
  ProblemSize& size = plan.size;
  size.fit_points = n_angles * UpperTriangleSize(info.num_times());
  size.num_parameters = plan.num_parameters;
  size.num_times = info.num_times();
  size.num_angles = n_angles;
  size.bytes_per_value = 4;  // data are kept as float32 in memory, whatever the file's type
  size.batch_points = config.streaming.batch_size.value_or(
      AutomaticBatchSize(plan.available.bytes, plan.num_parameters));
  size.threads = config.performance.cpu_threads.value_or(omp_get_max_threads());
  size.full_jacobian = config.nlsq.solver == LmSolver::kCeres;
  plan.strategy = SelectStrategy(size, plan.available.bytes, config.performance.strategy_override);
  return plan;
}

}  // namespace homodyne
