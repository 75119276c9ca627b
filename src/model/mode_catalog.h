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
  // How the global phase searches it (src/optimize/global_search.cc) when the homodyne rules
  // (log scale for bounds > 0 spanning two decades, symmetric log for D_offset and
  // gamma_dot_t_offset) do not name it. search_width > 0: sampled by asinh(x / search_width)
  // (linear within +-search_width, logarithmic in magnitude beyond). staged_values: its values in the staged
  // grid when not a decade axis (none: 0 where the bounds allow, else the start). staged_decades:
  // the staged grid tries the decades of search_width .. upper bound.
  double search_width = 0.0;
  bool staged_decades = false;
  std::vector<double> staged_values;
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
