#include "fit_parameters.h"

#include <algorithm>
#include <optional>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/mode_catalog.h"
#include "optimize/bounds.h"

namespace homodyne {
namespace {

// Per-angle starting contrast and offset: per_angle_scaling lists, else scalar contrast/offset of
// initial_parameters replicated, else the quantile estimate from the data (docs/model.md, Bounds
// and start values).
std::vector<ScalingEstimate> InitialScaling(const Config& config,
                                            const std::vector<ScalingEstimate>& from_data) {
  std::optional<double> scalar_contrast, scalar_offset;
  if (config.initial.values) {
    for (size_t k = 0; k < config.initial.parameter_names.size(); ++k) {
      if (config.initial.parameter_names[k] == "contrast") {
        scalar_contrast = (*config.initial.values)[k];
      }
      if (config.initial.parameter_names[k] == "offset") {
        scalar_offset = (*config.initial.values)[k];
      }
    }
  }
  std::vector<ScalingEstimate> scaling = from_data;
  for (size_t k = 0; k < scaling.size(); ++k) {
    ScalingEstimate& start = scaling[k];
    if (config.initial.per_angle_contrast) {
      start.contrast = (*config.initial.per_angle_contrast)[k];
    } else if (scalar_contrast) {
      start.contrast = *scalar_contrast;
    }
    if (config.initial.per_angle_offset) {
      start.offset = (*config.initial.per_angle_offset)[k];
    } else if (scalar_offset) {
      start.offset = *scalar_offset;
    }
  }
  return scaling;
}

}  // namespace

FitParameters BuildFitParameters(const Config& config, const ResolvedScaling& scaling,
                                 const BatchedObjective& objective,
                                 const std::vector<double>& phi_degrees,
                                 const std::vector<ScalingEstimate>& scaling_from_data) {
  const std::vector<ScalingEstimate> initial_scaling = InitialScaling(config, scaling_from_data);
  // Start, bounds and names in the objective's (full) layout.
  const int n_full = objective.num_parameters();
  const int n_angles = static_cast<int>(phi_degrees.size());
  FitParameters parameters;
  Eigen::VectorXd start(n_full), lower(n_full), upper(n_full);
  std::vector<std::string>& names = parameters.full_names;
  names.resize(static_cast<size_t>(n_full));
  const std::vector<double> physical0 = InitialPhysicalParameters(config);
  const std::vector<std::string>& physical_names = PhysicalParameterNames(config.analysis_mode);
  const int n_physical = static_cast<int>(physical_names.size());
  for (int p = 0; p < n_physical; ++p) {
    const std::string& name = physical_names[static_cast<size_t>(p)];
    start[p] = physical0[static_cast<size_t>(p)];
    names[static_cast<size_t>(p)] = name;
    lower[p] = config.BoundOf(name).min;
    upper[p] = config.BoundOf(name).max;
  }
  for (int k = 0; k < n_angles; ++k) {
    const int c = objective.ContrastIndex(k);
    const int o = objective.OffsetIndex(k);
    start[c] = initial_scaling[static_cast<size_t>(k)].contrast;
    start[o] = initial_scaling[static_cast<size_t>(k)].offset;
    names[static_cast<size_t>(c)] = "contrast[" + std::to_string(k) + "]";
    names[static_cast<size_t>(o)] = "offset[" + std::to_string(k) + "]";
    lower[c] = config.BoundOf("contrast").min;
    upper[c] = config.BoundOf("contrast").max;
    lower[o] = config.BoundOf("offset").min;
    upper[o] = config.BoundOf("offset").max;
  }
  if (const std::optional<std::string> non_finite =
          ClipStartIntoBounds(start, lower, upper, names, parameters.start_warnings)) {
    throw ConfigError(config.source_path + ": " + *non_finite);
  }
  // The parameters the fit optimises: the per-angle mode's map (docs/model.md, Per-angle scaling),
  // with initial_parameters.fixed_parameters held at their start values.
  const ScalingMap full_map = BuildScalingMap(scaling, n_physical, physical_names, phi_degrees,
                                              initial_scaling, config.nlsq.fourier_order);
  std::vector<bool> fixed(static_cast<size_t>(n_full), false);
  for (const std::string& name : config.initial.fixed_parameters) {
    for (int i = 0; i < n_full; ++i) {
      const std::string& full_name = names[static_cast<size_t>(i)];
      if (full_name == name || full_name.rfind(name + "[", 0) == 0) {
        fixed[static_cast<size_t>(i)] = true;
      }
    }
  }
  parameters.map = FixParameters(full_map, fixed, start);
  if (parameters.map.num_reduced() == 0) {
    throw ConfigError(config.source_path +
                      ": initial_parameters.fixed_parameters fixes every parameter: nothing to "
                      "fit");
  }
  // The global phase and the projected local fit search the physical parameters, with contrast
  // and offset solved for each point (variable projection): with none of them free they would
  // search a space of no dimension.
  const bool searches_physical = config.nlsq.global_search.method != GlobalSearchMethod::kOff ||
                                 config.nlsq.variable_projection;
  const std::vector<std::string>& fitted = parameters.map.reduced_names;
  const bool none_physical = std::none_of(
      fitted.begin(), fitted.end(),
      [&](const std::string& name) { return IsPhysicalParameter(config.analysis_mode, name); });
  if (none_physical && searches_physical) {
    throw ConfigError(config.source_path +
                      ": initial_parameters.fixed_parameters fixes every physical parameter: "
                      "nothing left to fit (the global search and the variable projection search "
                      "the physical parameters; contrast and offset alone are fitted with "
                      "--global-search off --no-variable-projection)");
  }
  parameters.reduced_start = ReduceStartingPoint(parameters.map, start);
  parameters.reduced_bounds = ReduceBounds(parameters.map, lower, upper);
  return parameters;
}

bool IsPhysicalParameter(AnalysisMode mode, const std::string& name) {
  const std::vector<std::string>& physical = PhysicalParameterNames(mode);
  return std::find(physical.begin(), physical.end(), name) != physical.end();
}

LevenbergMarquardtOptions FinalFitOptions(const Config& config, const FitParameters& parameters) {
  LevenbergMarquardtOptions lm;
  lm.lower_bounds = parameters.reduced_bounds.lower;
  lm.upper_bounds = parameters.reduced_bounds.upper;
  lm.parameter_names = parameters.map.reduced_names;
  lm.max_iterations = config.nlsq.max_iterations;
  lm.ftol = config.nlsq.tolerance;
  lm.xtol = config.nlsq.xtol;
  lm.gtol = config.nlsq.gtol;
  lm.statistical_tolerance = config.nlsq.statistical_tolerance;
  lm.validate_numerics = !config.performance.fast_mode;
  lm.hold_bound_parameters_on_undetermined_directions =
      DefinitionOf(config.analysis_mode).exact_degeneracies;
  return lm;
}

void AnnotateParameters(const std::vector<std::string>& fixed_parameters, FitResult& result) {
  const auto held = [&](const std::string& name) {
    return std::find(fixed_parameters.begin(), fixed_parameters.end(), name) !=
           fixed_parameters.end();
  };
  const auto unit = [](const std::string& name) {
    const ParameterDefinition* definition = FindParameterDefinition(name);
    return definition == nullptr ? std::string() : std::string(definition->unit);
  };
  for (ParameterEstimate& estimate : result.physical) {
    estimate.fixed = held(estimate.name);
    estimate.unit = unit(estimate.name);
  }
  for (size_t k = 0; k < result.per_angle.size(); ++k) {
    // "contrast[k]" and "offset[k]", the full layout's names (fit_parameters.h).
    std::string contrast_k = "contrast[";
    contrast_k.append(std::to_string(k)).push_back(']');
    std::string offset_k = "offset[";
    offset_k.append(std::to_string(k)).push_back(']');
    result.per_angle[k].contrast.fixed = held("contrast") || held(contrast_k);
    result.per_angle[k].offset.fixed = held("offset") || held(offset_k);
    result.per_angle[k].contrast.unit = unit("contrast");
    result.per_angle[k].offset.unit = unit("offset");
  }
}

}  // namespace homodyne
