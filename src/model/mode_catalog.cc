// The mode catalog (mode_catalog.h): one entry per analysis mode. Default bounds are the reference
// packages' code defaults (docs/model.md, Bounds and start values); simulation defaults are their
// parameter registries' defaults (docs/configuration.md, Simulation).
#include "model/mode_catalog.h"

#include <array>
#include <tuple>
#include <utility>

#include "homodyne/errors.h"
#include "model/homodyne/homodyne_point.h"
#include "model/two_component/two_component_point.h"

namespace homodyne {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A parameter that may take any finite value.
ParameterDefinition Free(std::string_view name, std::string_view unit, double default_min,
                         double default_max, double simulation_default) {
  return {name, unit, default_min, default_max, simulation_default, -kInf, kInf, "", false, {}};
}
// A parameter whose bounds must stay within [domain_min, domain_max].
ParameterDefinition Bounded(std::string_view name, std::string_view unit, double default_min,
                            double default_max, double simulation_default, double domain_min,
                            double domain_max, std::string_view meaning) {
  return {name,       unit,       default_min, default_max, simulation_default,
          domain_min, domain_max, meaning,     false,       {}};
}

// The homodyne modes' search hints (ParameterSearchHints; docs/design.md section 4b):
// - D_offset and gamma_dot_t_offset are searched in symmetric log coordinates: their bounds
//   straddle 0 and are wide ([-1e5, 1e5], [-0.1, 0.1]), but the values that matter are of the
//   order of D0 and gamma_dot_t0, which span decades; linearly, almost every sample would be a
//   huge offset (a negative shear rate is floored: the whole "no flow" plateau). Their linear
//   width is the companion's lower bound.
// - gamma_dot_t0 sets the flow phase, which the sinc^2 factor turns into oscillations of chi2: a
//   factor 3 off can leave the true basin, so the staged grid gives it half-decade steps.
// - phi0 gets 5 staged values spread over its bounds.
// D0 and gamma_dot_t0 need no hint for their logarithmic axes: bounds > 0 that span two decades
// (their defaults do) make one.
ParameterDefinition SymmetricLogFrom(ParameterDefinition parameter, std::string_view companion) {
  parameter.search.width_from = companion;
  return parameter;
}
ParameterDefinition StepsPerDecade(ParameterDefinition parameter, int steps) {
  parameter.search.steps_per_decade = steps;
  return parameter;
}
ParameterDefinition SpreadValues(ParameterDefinition parameter, int count) {
  parameter.search.spread_values = count;
  return parameter;
}
ParameterDefinition PositiveStart(ParameterDefinition parameter) {
  parameter.positive_start = true;
  return parameter;
}

// The homodyne transport parameters, shared by static and laminar_flow.
const ParameterDefinition kD0 = PositiveStart(
    Bounded("D0", "Å²/s^(1+α)", 1e2, 1e5, 1000.0, 0.0, kInf, "a diffusion coefficient"));
const ParameterDefinition kAlpha = Free("alpha", "", -2.0, 2.0, 0.5);
const ParameterDefinition kDOffset =
    SymmetricLogFrom(Free("D_offset", "Å²/s", -1e5, 1e5, 10.0), "D0");
// laminar_flow's shear parameters.
const ParameterDefinition kGammaDotT0 = StepsPerDecade(
    Bounded("gamma_dot_t0", "1/s^(1+β)", 1e-6, 0.5, 0.01, 0.0, kInf, "a shear-rate amplitude"), 2);
const ParameterDefinition kBeta = Free("beta", "", -2.0, 2.0, 0.5);
const ParameterDefinition kGammaDotTOffset =
    SymmetricLogFrom(Free("gamma_dot_t_offset", "1/s", -0.1, 0.1, 0.0), "gamma_dot_t0");
const ParameterDefinition kPhi0Definition = SpreadValues(Free("phi0", "deg", -10.0, 10.0, 0.0), 5);

// A decade-spanning parameter of two_component: searched by asinh(x / width)
// (ParameterSearchHints::width), and, for the amplitudes, by decades in the staged grid.
ParameterDefinition Decades(ParameterDefinition parameter, double width) {
  parameter.search.width = width;
  return parameter;
}
ParameterDefinition StagedDecades(ParameterDefinition parameter, double width) {
  parameter.search.width = width;
  parameter.search.staged_decades = true;
  return parameter;
}
ParameterDefinition Staged(ParameterDefinition parameter, std::vector<double> values) {
  parameter.search.staged_values = std::move(values);
  return parameter;
}

// two_component (the successor's parameter registry). Search widths: with q ~ 5e-3 1/Å, a
// transport of D ~ 1e2 Å²/s decorrelates over ~1e3 s and one of 1e6 Å²/s in ~0.1 s, so the
// relevant D0 span the decades from 1e2; a velocity of 1 Å/s turns the phase by q v t ~ 0.5 rad in
// 100 s. The offsets' widths are a tenth of those. f0 = 0 (no sample at all) would make the
// sample's parameters irrelevant in every staged candidate: f0 is staged at 0.5. v_beta is staged
// at 0.5 and 1 (v_beta = 0, the bound rule's value, misses flow phases of tens of radians:
// bench/two_component_success.sh, docs/performance.md, Two-component mode).
std::vector<ParameterDefinition> TwoComponentParameters() {
  return {
      StagedDecades(
          Bounded("D0_ref", "Å²/s^(1+α)", 0.0, 1e6, 1e4, 0.0, kInf, "a transport coefficient"),
          100.0),
      Free("alpha_ref", "", -2.0, 2.0, 0.0),
      Decades(Free("D_offset_ref", "Å²/s", -1e4, 1e4, 0.0), 10.0),
      StagedDecades(
          Bounded("D0_sample", "Å²/s^(1+α)", 0.0, 1e6, 1e4, 0.0, kInf, "a transport coefficient"),
          100.0),
      Free("alpha_sample", "", -2.0, 2.0, 0.0),
      Decades(Free("D_offset_sample", "Å²/s", -1e4, 1e4, 0.0), 10.0),
      StagedDecades(Free("v0", "Å/s^(1+β)", 0.0, 1e6, 1e3), 1.0),
      Staged(Free("v_beta", "", 0.0, 2.0, 1.0), {0.5, 1.0}),
      Decades(Free("v_offset", "Å/s", -100.0, 100.0, 0.0), 0.1),
      Staged(Free("f0", "", 0.0, 1.0, 0.5), {0.5}),
      Free("f1", "1/s", -1.0, 1.0, 0.0),
      Free("f2", "s", -1.0, 1.0, 0.0),
      Free("f3", "", -1.0, 1.0, 0.0),
      Free("phi0_het", "deg", -10.0, 10.0, 0.0),
  };
}

// The global phase's moves for two_component (docs/design.md section 4b), measured by
// bench/two_component_success.sh (docs/performance.md, Two-component mode):
// - Velocity restarts from the best minimum: v0 at each decade 1 .. 1e6 times v_beta 0.5 and 1,
//   v_offset 0. The flow phase q cos(phi + phi0_het) C[v] reaches hundreds of radians, so the
//   true basin is narrow in v0; at the staged grid's neutral transports a candidate of the wrong
//   phase screens as well as one of the right phase, and local fits from the grid end with no flow
//   (v0 on its lower bound). From the best minimum's transports a local fit finds the flow from
//   v0 within about a decade.
// - Component exchange from the 3 best minima: the reference and sample transports swapped and the
//   fraction reset to x_s = 1/2 (f0 0.5, f1 = f2 = f3 = 0). With f0 >= 0 the fraction
//   f0 exp(f1 (t - f2)) + f3 follows 1 - x_s only approximately, so the exchanged labelling is a
//   separate minimum that local fits do not leave.
// - Transport restarts from the 3 best minima: each component's (D0, alpha, D_offset) set to
//   (1e2 .. 1e5 by decades, 0, 0). A component whose D0 t^alpha + D_offset ends below 0 is
//   floored (J = 0): its three parameters no longer change c2, and no local fit moves them back;
//   the slow reference component's weak decay is easily lost that way, also by an exchanged fit
//   (so this stage comes last, and runs from the exchanged minima too: on the 23-angle set the
//   right labelling was the third best minimum, with the reference floored).
std::vector<SearchMoveStage> TwoComponentSearchMoves() {
  SearchMoveStage velocity{1, {}};
  for (double v0 = 1.0; v0 <= 1e6; v0 *= 10.0) {
    for (double v_beta : {0.5, 1.0}) {
      velocity.moves.push_back({{}, {{"v0", v0}, {"v_beta", v_beta}, {"v_offset", 0.0}}});
    }
  }
  SearchMoveStage transport{3, {}};
  for (const auto& [d0, alpha, offset] :
       {std::tuple{"D0_ref", "alpha_ref", "D_offset_ref"},
        std::tuple{"D0_sample", "alpha_sample", "D_offset_sample"}}) {
    for (double value = 1e2; value <= 1e5; value *= 10.0) {
      transport.moves.push_back({{}, {{d0, value}, {alpha, 0.0}, {offset, 0.0}}});
    }
  }
  const SearchMoveStage exchange{3,
                                 {{{{"D0_ref", "D0_sample"},
                                    {"alpha_ref", "alpha_sample"},
                                    {"D_offset_ref", "D_offset_sample"}},
                                   {{"f0", 0.5}, {"f1", 0.0}, {"f2", 0.0}, {"f3", 0.0}}}}};
  return {velocity, exchange, transport};
}

const std::array<ModeDefinition, 3>& Catalog() {
  static const std::array<ModeDefinition, 3> kCatalog = {
      ModeDefinition{AnalysisMode::kStatic,
                     "static",
                     {"static_isotropic", "static_anisotropic"},
                     "equilibrium diffusion: D(t) = D0 t^alpha + D_offset",
                     {kD0, kAlpha, kDOffset},
                     /*angle_dependent=*/false,
                     /*exact_degeneracies=*/false,
                     /*profile_check=*/false,
                     &MakeHomodynePoint,
                     /*search_moves=*/{}},
      ModeDefinition{AnalysisMode::kLaminarFlow,
                     "laminar_flow",
                     {},
                     "diffusion and laminar shear flow (adds gamma_dot(t) and the flow angle phi0)",
                     {kD0, kAlpha, kDOffset, kGammaDotT0, kBeta, kGammaDotTOffset, kPhi0Definition},
                     /*angle_dependent=*/true,
                     /*exact_degeneracies=*/false,
                     /*profile_check=*/false,
                     &MakeHomodynePoint,
                     /*search_moves=*/{}},
      ModeDefinition{AnalysisMode::kTwoComponent,
                     "two_component",
                     {"heterodyne"},
                     "reference and sample components, flow velocity v(t), sample fraction f(t)",
                     TwoComponentParameters(),
                     /*angle_dependent=*/true,
                     /*exact_degeneracies=*/true,
                     /*profile_check=*/true,
                     &MakeTwoComponentPoint,
                     TwoComponentSearchMoves()},
  };
  return kCatalog;
}

const std::array<ParameterDefinition, 2> kScaling = {
    Bounded("contrast", "", 0.0, 1.0, 0.5, 0.0, 1.0, "a speckle contrast"),
    Bounded("offset", "", 0.5, 1.5, 1.0, 0.0, kInf, "the baseline of c2"),
};

}  // namespace

const ModeDefinition& DefinitionOf(AnalysisMode mode) {
  for (const ModeDefinition& definition : Catalog()) {
    if (definition.mode == mode) return definition;
  }
  HOMODYNE_CHECK(false && "AnalysisMode missing from the mode catalog");
  return Catalog()[0];
}

std::span<const ModeDefinition> AllModeDefinitions() { return Catalog(); }

std::span<const ParameterDefinition> ScalingParameterDefinitions() { return kScaling; }

const ParameterDefinition* FindParameterDefinition(std::string_view name) {
  for (const ModeDefinition& mode : Catalog()) {
    for (const ParameterDefinition& parameter : mode.physical) {
      if (parameter.name == name) return &parameter;
    }
  }
  for (const ParameterDefinition& parameter : kScaling) {
    if (parameter.name == name) return &parameter;
  }
  return nullptr;
}

}  // namespace homodyne
