// The parameters of a fit (docs/model.md, Per-angle scaling, Bounds and start values): the
// objective's full layout (the physical parameters, then a contrast and an offset per angle) with
// its start, bounds and names, and the reduced layout the optimisers search (the per-angle mode's
// map, with initial_parameters.fixed_parameters held at their start values).
#pragma once

#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"
#include "homodyne/results.h"
#include "objective/batched_objective.h"
#include "optimize/initial_values.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

struct FitParameters {
  // Names of the full layout, in the objective's order (batched_objective.h: ContrastIndex,
  // OffsetIndex): the physical names, "contrast[k]", "offset[k]".
  std::vector<std::string> full_names;
  // The reduced layout (full = map.Expand(reduced)), its start and its parameter_space bounds.
  ScalingMap map;
  Eigen::VectorXd reduced_start;
  BoundBox reduced_bounds;
  // One per start value outside its bounds, clipped into them before anything runs (the same
  // text as ClipStartIntoBounds, src/optimize/bounds.h); the fit logs them and adds them to the
  // result's warnings, whatever path (global phase, variable projection, solver) follows.
  std::vector<std::string> start_warnings;
};

// The start of the physical parameters comes from initial_parameters (InitialPhysicalParameters);
// the per-angle contrast and offset from initial_parameters.per_angle_scaling, else its scalar
// contrast/offset replicated, else `scaling_from_data` (the data's quantile estimate, one per
// angle). Every start, fixed ones included, is clipped into its bounds with a start_warning.
// scaling: the resolved per-angle mode; phi_degrees: the data's angles. Throws ConfigError
// (naming config.source_path) when fixed_parameters fixes every parameter, or every physical
// parameter while the global phase or variable projection (which search them) is on.
FitParameters BuildFitParameters(const Config& config, const ResolvedScaling& scaling,
                                 const BatchedObjective& objective,
                                 const std::vector<double>& phi_degrees,
                                 const std::vector<ScalingEstimate>& scaling_from_data);

// True when `name` (of the full or the reduced layout) is one of the mode's physical parameters,
// not a contrast or an offset (per angle, shared, or a Fourier coefficient of them).
bool IsPhysicalParameter(AnalysisMode mode, const std::string& name);

// Sets ParameterEstimate::unit (the mode catalog's, mode_catalog.h) and ParameterEstimate::fixed
// (the names of initial_parameters.fixed_parameters, as BuildFitParameters holds them) of every
// physical parameter and per-angle contrast and offset of `result`.
void AnnotateParameters(const std::vector<std::string>& fixed_parameters, FitResult& result);

// The final fit's options from the config: the reduced bounds and names of `parameters`,
// optimization.nlsq's max_iterations, tolerance (ftol), xtol, gtol and statistical_tolerance, and
// numerical validation unless performance.fast_mode. No callback and no resume state.
LevenbergMarquardtOptions FinalFitOptions(const Config& config, const FitParameters& parameters);

}  // namespace homodyne
