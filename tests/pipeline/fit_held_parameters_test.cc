// Fits whose parameters are held in every way the config allows (docs/configuration.md,
// Parameters; docs/results.md, Convergence status): each physical parameter free, fixed
// (initial_parameters.fixed_parameters), with its optimum below its lower bound, above its upper
// bound, or in a box of 1e-12 relative width, for static and laminar_flow, through the LM core and
// Ceres and every global method. None may crash (an empty free set used to be inverted: SIGSEGV),
// and each ends either in a typed error (fixing every physical parameter while the global phase
// or variable projection searches them is one) or in a result that is finite or says it failed:
// a converged or max_iterations fit has finite chi2, values and uncertainties, each within its
// bounds; any other status exits 1 with a poor quality flag.
//
// The combinations are a fixed subset (FuzzCombinations): each mode's 5 uniform states (every
// parameter held alike) with each of the 8 solver and method pairs, with the contrasts and
// offsets free and held (160 fits); every one of static's 5^3 states and 40 of laminar_flow's 5^7
// drawn with a fixed seed, each with one pair in turn and every third with the scaling held
// (165 fits): 325 fits on 2 x 90 x 90 points, about 10 s on one core.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "laminar_data.h"
#include "model/mode_catalog.h"

namespace homodyne {
namespace {

// How a physical parameter is held.
enum class Hold { kFree, kFixed, kAtLower, kAtUpper, kTinyBox };
constexpr int kHolds = 5;
const char* const kHoldNames[kHolds] = {"free", "fixed", "at_lower", "at_upper", "tiny_box"};

struct SolverAndMethod {
  LmSolver solver;
  GlobalSearchMethod method;
};
const SolverAndMethod kPairs[] = {{LmSolver::kLmCore, GlobalSearchMethod::kOff},
                                  {LmSolver::kLmCore, GlobalSearchMethod::kAuto},
                                  {LmSolver::kLmCore, GlobalSearchMethod::kMultiStart},
                                  {LmSolver::kLmCore, GlobalSearchMethod::kCmaes},
                                  {LmSolver::kCeres, GlobalSearchMethod::kOff},
                                  {LmSolver::kCeres, GlobalSearchMethod::kAuto},
                                  {LmSolver::kCeres, GlobalSearchMethod::kMultiStart},
                                  {LmSolver::kCeres, GlobalSearchMethod::kCmaes}};
constexpr int kNumPairs = 8;

struct Combination {
  AnalysisMode mode;
  std::vector<Hold> holds;  // one per physical parameter, model order
  int pair = 0;             // into kPairs
  // Every contrast and offset held too: started on a lower bound above its optimum (contrast
  // [0.5, 0.6] against 0.3, offset [1.2, 1.5] against 1), so that nothing may be free at all.
  bool hold_scaling = false;
};

// The fixed subset of the file comment.
std::vector<Combination> FuzzCombinations() {
  std::vector<Combination> combinations;
  const auto add_uniform = [&combinations](AnalysisMode mode, int count) {
    for (int h = 0; h < kHolds; ++h) {
      for (int pair = 0; pair < kNumPairs; ++pair) {
        for (const bool hold_scaling : {false, true}) {
          combinations.push_back(
              {mode, std::vector<Hold>(static_cast<size_t>(count), static_cast<Hold>(h)), pair,
               hold_scaling});
        }
      }
    }
  };
  add_uniform(AnalysisMode::kStatic, 3);
  add_uniform(AnalysisMode::kLaminarFlow, 7);
  int turn = 0;
  for (int code = 0; code < kHolds * kHolds * kHolds; ++code) {
    std::vector<Hold> holds;
    for (int rest = code, a = 0; a < 3; ++a, rest /= kHolds) {
      holds.push_back(static_cast<Hold>(rest % kHolds));
    }
    combinations.push_back({AnalysisMode::kStatic, holds, turn % kNumPairs, turn % 3 == 2});
    ++turn;
  }
  std::mt19937 random(20261129);
  std::uniform_int_distribution<int> hold(0, kHolds - 1);
  for (int drawn = 0; drawn < 40; ++drawn) {
    std::vector<Hold> holds;
    for (int a = 0; a < 7; ++a) holds.push_back(static_cast<Hold>(hold(random)));
    combinations.push_back({AnalysisMode::kLaminarFlow, holds, turn % kNumPairs, turn % 3 == 2});
    ++turn;
  }
  return combinations;
}

const std::vector<double> kPhi = {0.0, 60.0};
const std::vector<double> kStaticTruth = {3000.0, -0.5, 10.0};
const std::vector<double> kLaminarTruth = {3000.0, -0.5, 10.0, 2e-4, 0.3, 1e-5, 5.0};

std::string Number(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

// The bounds and start of a parameter with truth v held as `hold`: the optimum below [2v, 4v]
// (or [v + d, v + 2d]) for kAtLower, above [v / 4, v / 2] (or [v - 2d, v - d]) for kAtUpper,
// each starting on the bound the optimum lies beyond; a box [v, v (1 + 1e-12)] for kTinyBox.
// Parameters with a domain of [0, inf) (D0, gamma_dot_t0) scale, the others shift by
// d = |v|. Free and fixed ones keep their default bounds and start 20% off the truth (fixed:
// at the truth).
struct Placement {
  std::optional<std::pair<double, double>> bounds;
  double start = 0.0;
};
Placement Place(const ParameterDefinition& parameter, double v, Hold hold) {
  const bool positive = parameter.domain_min >= 0.0;
  const double d = std::abs(v);
  switch (hold) {
    case Hold::kFree:
      return {std::nullopt, 1.2 * v};
    case Hold::kFixed:
      return {std::nullopt, v};
    case Hold::kAtLower: {
      const double lower = positive ? 2.0 * v : v + d;
      return {std::make_pair(lower, positive ? 4.0 * v : v + 2.0 * d), lower};
    }
    case Hold::kAtUpper: {
      const double upper = positive ? 0.5 * v : v - d;
      return {std::make_pair(positive ? 0.25 * v : v - 2.0 * d, upper), upper};
    }
    case Hold::kTinyBox:
      return {std::make_pair(v, v + 1e-12 * d), v};
  }
  return {};
}

std::string Describe(const Combination& combination) {
  std::string text = std::string(ToString(combination.mode)) + " [";
  for (size_t a = 0; a < combination.holds.size(); ++a) {
    if (a > 0) text += ' ';
    text += kHoldNames[static_cast<int>(combination.holds[a])];
  }
  const SolverAndMethod& pair = kPairs[combination.pair];
  return text + "]" + (combination.hold_scaling ? " scaling held" : "") + ", solver " +
         std::string(ToString(pair.solver)) + ", global search " +
         std::string(ToString(pair.method));
}

class FitHeldParametersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static_c2_ =
        new std::vector<double>(test::SimulatedC2(AnalysisMode::kStatic, kStaticTruth, kPhi));
    laminar_c2_ = new std::vector<double>(test::LaminarC2(kLaminarTruth, kPhi));
  }
  static void TearDownTestSuite() {
    delete static_c2_;
    delete laminar_c2_;
  }

  // Fits one combination; checks what the file comment says. Returns the status (or "error").
  static std::string FitAndCheck(const Combination& combination) {
    SCOPED_TRACE(Describe(combination));
    const bool laminar = combination.mode == AnalysisMode::kLaminarFlow;
    const std::vector<double>& truth = laminar ? kLaminarTruth : kStaticTruth;
    const std::vector<ParameterDefinition>& definitions = DefinitionOf(combination.mode).physical;
    std::string yaml = laminar ? test::kLaminarConfig : test::kStaticConfig;
    std::string bounds;
    std::string fixed;
    std::vector<double> start;
    std::vector<std::pair<double, double>> box;  // each parameter's bounds (defaults: +-inf)
    for (size_t a = 0; a < truth.size(); ++a) {
      const ParameterDefinition& parameter = definitions[a];
      const Placement placement = Place(parameter, truth[a], combination.holds[a]);
      start.push_back(placement.start);
      box.emplace_back(parameter.default_min, parameter.default_max);
      if (placement.bounds) {
        box.back() = *placement.bounds;
        bounds += (bounds.empty() ? "" : ", ") + std::string("{name: ") +
                  std::string(parameter.name) + ", min: " + Number(placement.bounds->first) +
                  ", max: " + Number(placement.bounds->second) + "}";
      }
      if (combination.holds[a] == Hold::kFixed) {
        fixed += (fixed.empty() ? "" : ", ") + std::string(parameter.name);
      }
    }
    if (combination.hold_scaling) {
      bounds +=
          (bounds.empty() ? "" : ", ") +
          std::string("{name: contrast, min: 0.5, max: 0.6}, {name: offset, min: 1.2, max: 1.5}");
    }
    if (!bounds.empty()) yaml += "parameter_space:\n  bounds: [" + bounds + "]\n";
    if (!fixed.empty()) yaml += "initial_parameters: {fixed_parameters: [" + fixed + "]}\n";
    const SolverAndMethod& pair = kPairs[combination.pair];
    const std::vector<double>& c2 = laminar ? *laminar_c2_ : *static_c2_;
    const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));

    FitOutcome outcome;
    try {
      Config config = ParseConfig(yaml, "fit_held_parameters_test");
      config.initial.values = start;
      if (combination.hold_scaling) {
        config.initial.per_angle_contrast = std::vector<double>(kPhi.size(), 0.5);
        config.initial.per_angle_offset = std::vector<double>(kPhi.size(), 1.2);
      }
      config.nlsq.solver = pair.solver;
      config.nlsq.global_search.method = pair.method;
      config.nlsq.multi_start.n_starts = 4;  // a short search: the holds are what is tested
      config.nlsq.max_iterations = 40;
      outcome = Fit(config, *source);
    } catch (const ConfigError& error) {
      // The one refusal: nothing physical left for the global phase or variable projection.
      EXPECT_THAT(error.what(), ::testing::HasSubstr("fixed_parameters fixes every"));
      return "error";
    }
    const FitResult& result = outcome.result;
    const std::string& status = result.convergence_status;
    EXPECT_THAT((std::vector<std::string>{"converged", "max_iterations", "no_progress",
                                          "failed_non_finite_objective", "failed"}),
                ::testing::Contains(status));
    EXPECT_EQ(outcome.exit_code, FitExitCodeOf(status));
    EXPECT_FALSE(result.termination_reason.empty());
    if (pair.solver == LmSolver::kCeres) {
      EXPECT_EQ(result.strategy, "standard");  // the strategy Ceres solves
      EXPECT_THAT(result.termination_reason, ::testing::HasSubstr("Ceres"));
      ++ceres_fits_;
    }
    const bool nothing_free =
        std::any_of(result.warnings.begin(), result.warnings.end(), [](const std::string& w) {
          return w.find("no fitted parameter was free to move") != std::string::npos;
        });
    if (status == "converged" || status == "max_iterations") {
      EXPECT_TRUE(std::isfinite(result.chi_squared)) << status;
      EXPECT_TRUE(std::isfinite(result.reduced_chi_squared)) << status;
      for (size_t a = 0; a < result.physical.size(); ++a) {
        const ParameterEstimate& estimate = result.physical[a];
        EXPECT_TRUE(std::isfinite(estimate.value)) << estimate.name;
        EXPECT_TRUE(std::isfinite(estimate.uncertainty) && estimate.uncertainty >= 0.0)
            << estimate.name;
        EXPECT_GE(estimate.value, box[a].first) << estimate.name;
        EXPECT_LE(estimate.value, box[a].second) << estimate.name;
        if (combination.holds[a] == Hold::kFixed) {
          EXPECT_EQ(estimate.value, start[a]) << estimate.name;
        }
      }
      for (const double value : result.covariance) EXPECT_TRUE(std::isfinite(value));
      if (nothing_free) return status + ", nothing free";
    } else {
      EXPECT_EQ(outcome.exit_code, kExitFailure) << status;
      EXPECT_EQ(result.quality_flag, "poor") << status;
    }
    return status;
  }

  static int FitExitCodeOf(const std::string& status) {
    return status == "converged" || status == "max_iterations" ? kExitSuccess : kExitFailure;
  }

  static std::vector<double>* static_c2_;
  static std::vector<double>* laminar_c2_;
  static int ceres_fits_;  // fits the Ceres solver ran (not refused before the fit)
};
int FitHeldParametersTest::ceres_fits_ = 0;
std::vector<double>* FitHeldParametersTest::static_c2_ = nullptr;
std::vector<double>* FitHeldParametersTest::laminar_c2_ = nullptr;

TEST_F(FitHeldParametersTest, NoHoldCrashesAndEveryResultIsFiniteOrFlagged) {
  const std::vector<Combination> combinations = FuzzCombinations();
  std::map<std::string, int> statuses;
  for (const Combination& combination : combinations) ++statuses[FitAndCheck(combination)];
  std::string counts;
  for (const auto& [status, count] : statuses) {
    counts += " " + status + " " + std::to_string(count);
  }
  std::printf("%zu fits:%s; %d by Ceres\n", combinations.size(), counts.c_str(), ceres_fits_);
  EXPECT_EQ(combinations.size(), 325u);
  // The subset reaches the held cases: fits with nothing free (a converged result with the
  // warning) and the refusal of an all-fixed search.
  EXPECT_GT(statuses["converged"], 0);
  EXPECT_GT(statuses["converged, nothing free"], 0);
  EXPECT_GT(statuses["error"], 0);
  EXPECT_GT(ceres_fits_, 100);
}

// The result names each parameter's unit (the mode catalog's, docs/model.md, Symbols and units)
// and marks the parameters initial_parameters.fixed_parameters held (docs/results.md, Fields
// shared with the reference): static with D_offset and contrast held.
TEST(FitAnnotationsTest, ResultMarksFixedParametersAndUnits) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0};
  const std::vector<double> c2 = test::SimulatedC2(AnalysisMode::kStatic, truth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  Config config = ParseConfig(std::string(test::kStaticConfig) +
                                  "initial_parameters: {fixed_parameters: [D_offset, contrast]}\n",
                              "fixed_units_test");
  config.initial.values = truth;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;
  const FitResult result = Fit(config, *source).result;
  ASSERT_EQ(result.physical.size(), 3u);
  EXPECT_EQ(result.physical[0].unit, "Å²/s^(1+α)");
  EXPECT_FALSE(result.physical[0].fixed);
  EXPECT_EQ(result.physical[1].unit, "");
  EXPECT_EQ(result.physical[2].unit, "Å²/s");
  EXPECT_TRUE(result.physical[2].fixed);
  EXPECT_EQ(result.physical[2].value, 5.0);
  for (const AngleScaling& angle : result.per_angle) {
    EXPECT_TRUE(angle.contrast.fixed);
    EXPECT_FALSE(angle.offset.fixed);
  }
}

}  // namespace
}  // namespace homodyne
