// What the engine knows about each analysis mode, in one table (docs/design.md section 2c): its
// names, its physical parameters with their default bounds, simulation defaults and physical
// domains, and the builder of its model at a parameter vector (mode_point.h). Code outside
// src/model asks this table (and model.h, which reads it); nothing outside src/model computes a
// mode-specific formula. A new mode is a folder under src/model/ with its ModePoint, pass body and
// device arithmetic, and one entry in mode_catalog.cc (docs/adding-a-mode.md).
#pragma once

#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "homodyne/model.h"

namespace homodyne {

class ModePoint;  // model/mode_point.h

// How the global phase searches a parameter (docs/design.md section 4b; src/optimize/
// global_search.cc and its method files read these). The search's one rule that needs no hint: a
// parameter whose bounds are both > 0 and span two decades is searched on a logarithmic axis
// (SearchSpace::FromBounds in src/optimize/start_sampling.h). Everything that depends on which
// parameter it is sits here, in the parameter's catalog entry.
struct ParameterSearchHints {
  // > 0: sampled by asinh(x / width), linear within +-width and logarithmic in magnitude beyond
  // (symmetric log), whenever its bounds differ: an offset or amplitude whose relevant values
  // span decades.
  double width = 0.0;
  // Non-empty: sampled by symmetric log when its bounds straddle 0, with the width this
  // companion's lower bound where the search holds the companion and that bound is > 0, else
  // 1e-6 of the larger bound magnitude: an offset whose relevant values are of the order of a
  // decade-spanning rate (D_offset of D0), though its bounds are wide.
  std::string_view width_from;
  // The staged grid (methods auto and cmaes): on a logarithmic axis, its values per decade
  // (half decades, 2, where a factor 3 off can leave the true basin).
  int steps_per_decade = 1;
  // Not on a logarithmic axis, bounds that differ: > 0 stages this many values spread over the
  // bounds, at lower + (j + 1/2) / n (upper - lower) (an angle); else staged_decades stages the
  // decades of width .. upper bound (an amplitude); else staged_values, those within the bounds.
  // None of them: 0 where the bounds allow, else the start.
  int spread_values = 0;
  bool staged_decades = false;
  std::vector<double> staged_values;
};

// One fitted parameter of a mode (or one of the per-angle scaling parameters).
struct ParameterDefinition {
  std::string_view name;  // canonical name, as in configs and result files
  std::string_view unit;  // for tables and plot labels ("" dimensionless)
  // Bounds when parameter_space.bounds does not name it (the reference's code defaults; the
  // successor's registry for two_component; docs/model.md, Bounds and start values).
  double default_min = 0.0;
  double default_max = 0.0;
  // The truth of homodyne-simulate when simulation.parameters omits it (the registry default).
  double simulation_default = 0.0;
  // The physical domain a bound may not leave (docs/configuration.md, Model and data), and what
  // the parameter is, for the message; unrestricted when domain_meaning is empty.
  double domain_min = -std::numeric_limits<double>::infinity();
  double domain_max = std::numeric_limits<double>::infinity();
  std::string_view domain_meaning;
  // True: a start given as an override (a --initial-* flag, fit_nlsq's initial_params) must be
  // > 0 (CheckOverrides, include/homodyne/override_checks.h; D0, whose command-line start has
  // always had this rule).
  bool positive_start = false;
  ParameterSearchHints search;  // how the global phase searches it
};

// A new start for a local fit of the global phase (method auto), made from a minimum it found:
// some parameters' values exchanged, some set.
struct SearchMove {
  std::vector<std::pair<std::string_view, std::string_view>> swapped;  // values exchanged
  std::vector<std::pair<std::string_view, double>> reset;              // values set
};
// Moves the global phase makes, after its local fits, from the best `from_minima` distinct minima
// found so far (docs/design.md section 4b): for minima that local fits do not leave because the
// model has a near-symmetry or a narrow basin that the staged grid cannot resolve.
struct SearchMoveStage {
  int from_minima = 1;
  std::vector<SearchMove> moves;
  // Iterations of each moved local fit (a moved start that finds its basin converges in well
  // under 100; one that does not would crawl to the search's max_iterations).
  int max_iterations = 100;
};

// The model of a mode at one physical parameter vector (ModelEvaluation's body).
using ModePointBuilder = std::unique_ptr<const ModePoint> (*)(const HomodyneModel& model,
                                                              std::span<const double> physical);

struct ModeDefinition {
  AnalysisMode mode;
  std::string_view name;                  // canonical (ToString)
  std::vector<std::string_view> aliases;  // lower case; ParseAnalysisMode accepts name and these
  std::string_view description;           // one line for help texts and templates
  std::vector<ParameterDefinition> physical;  // model order
  // True when c2 depends on the angle phi through the physics (flow): the per-angle scaling modes
  // apply (docs/model.md, Per-angle scaling). static: false.
  bool angle_dependent = false;
  // True when parameters of the model are exactly interchangeable (two_component: f0 and f2
  // enter only as f0 exp(-f1 f2)): the LM core then holds such a parameter on its bound
  // (LevenbergMarquardtOptions::hold_bound_parameters_on_undetermined_directions).
  bool exact_degeneracies = false;
  // True when full validation checks the uncertainties of the correlated physical parameters by
  // profile points (src/pipeline/fit_solution.h ProfileWarnings): correlated, curved valleys are
  // the rule in the mode, and the check costs up to two local fits per such parameter.
  bool profile_check = false;
  ModePointBuilder evaluate = nullptr;
  std::vector<SearchMoveStage> search_moves;  // in order; none for the homodyne modes
};

// The definition of `mode`.
const ModeDefinition& DefinitionOf(AnalysisMode mode);
// Every mode, in AnalysisMode order.
std::span<const ModeDefinition> AllModeDefinitions();
// contrast and offset, the per-angle scaling parameters every mode shares.
std::span<const ParameterDefinition> ScalingParameterDefinitions();
// The parameter of that canonical name in any mode, or contrast / offset; nullptr when no mode has
// it. Modes that share a name (static and laminar_flow) share its definition.
const ParameterDefinition* FindParameterDefinition(std::string_view name);

}  // namespace homodyne
