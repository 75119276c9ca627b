// The global phase (src/optimize/global_search.h) on simulated laminar-flow data whose truth
// is known: from the bound midpoints, where a local fit stops in the "no flow" minimum, every
// method finds the true basin; results are reproducible and independent of the thread count.
#include "optimize/global_search.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/errors.h"
#include "model/mode_catalog.h"
#include "optimize/global_search_internal.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"
#include "optimize/reparametrized_problem.h"
#include "support/simulated_data_fixture.h"
#include "support/thread_ranks.h"

namespace homodyne {
namespace {

class GlobalSearchTest : public SimulatedDataTest {
 protected:
  // The fixture's 3-angle laminar data set (truth gamma_dot_t0 2e-4, phi0 5) with 120 frames.
  void SetUp() override {
    SimulatedDataTest::SetUp();
    SetUpMode(AnalysisMode::kLaminarFlow);
  }

  void SetUpMode(AnalysisMode mode, int frames = 120,
                 const std::vector<double>& physical_parameters = {}) {
    config_ = SimulationConfig(mode, frames);
    if (!physical_parameters.empty()) config_.simulation.physical_parameters = physical_parameters;
    objective_ = MakeObjective(config_, 4000);
    truth_ = Truth(config_);
    std::vector<ScalingEstimate> starts;
    for (int k = 0; k < objective_->num_angles(); ++k) starts.push_back({0.5, 1.0});
    map_ = BuildScalingMap(ResolvePerAngleMode(NlsqOptions{}, objective_->num_angles()),
                           objective_->num_physical(), PhysicalParameterNames(mode),
                           config_.simulation.phi_angles_degrees, starts, 2);
    const LevenbergMarquardtOptions full = BoundedOptions(*objective_);
    bounds_ = ReduceBounds(map_, full.lower_bounds, full.upper_bounds);
    // The bound midpoints (initial_parameters.values: null), contrast 0.5, offset 1.
    midpoints_ = 0.5 * (bounds_.lower + bounds_.upper);
  }

  GlobalSearchInputs Inputs() const {
    GlobalSearchInputs inputs;
    inputs.data = objective_.get();
    inputs.coarse_data = coarse_.get();
    inputs.map = map_;
    inputs.bounds = bounds_;
    inputs.start = midpoints_;
    return inputs;
  }

  // The full fit from a reduced point.
  LevenbergMarquardtSummary FitFrom(const Eigen::VectorXd& start) const {
    ReparametrizedProblem problem(*objective_, map_);
    LevenbergMarquardtOptions options;
    options.lower_bounds = bounds_.lower;
    options.upper_bounds = bounds_.upper;
    return Minimize(options, problem, start);
  }

  // The search's chosen minimum, refined, reaches the optimum the truth-started fit finds:
  // chi2 within 2 and every physical parameter (or those named) within 4 standard errors.
  void ExpectGlobalOptimum(const GlobalSearchSummary& summary,
                           const std::vector<std::string>& checked = {}) {
    ASSERT_GE(summary.chosen, 0);
    const LevenbergMarquardtSummary reference = FitFrom(ReduceStartingPoint(map_, truth_));
    const LevenbergMarquardtSummary found =
        FitFrom(summary.minima[static_cast<size_t>(summary.chosen)].reduced);
    EXPECT_LE(found.final_chi2, reference.final_chi2 + 2.0) << summary.BriefReport();
    for (int p = 0; p < objective_->num_physical(); ++p) {
      const std::string& name =
          PhysicalParameterNames(config_.analysis_mode)[static_cast<size_t>(p)];
      if (!checked.empty() && std::find(checked.begin(), checked.end(), name) == checked.end()) {
        continue;
      }
      EXPECT_NEAR(found.theta[p], reference.theta[p], 4.0 * reference.uncertainties[p]) << name;
    }
  }

  // Method auto's coarse level (GlobalSearchInputs::coarse_data): every row_stride-th row, under
  // the objective's loss.
  void UseCoarseLevel(int row_stride) {
    coarse_ = MakeRowSubsampleObjective(objective_->data(), objective_->model(),
                                        config_.simulation.phi_angles_degrees, objective_->sigma(),
                                        row_stride, nullptr, nullptr, objective_->loss());
  }

  // The data with outliers (every 97th point of each angle's triangle 0.5 above its value, about
  // 50 sigma: hot pixels) under the cauchy loss, f_scale 3 (docs/design.md section 4c).
  void UseRobustLossOnOutliers() {
    PackedDataObjective::PackedData data = objective_->data();
    for (std::vector<float>& angle : data) {
      for (size_t i = 0; i < angle.size(); i += 97) angle[i] += 0.5f;
    }
    PassOptions options;
    options.batch_points = 4000;
    options.loss = LossOptions{LossFunction::kCauchy, 3.0};
    objective_ = std::make_unique<PackedDataObjective>(
        objective_->model(), config_.simulation.phi_angles_degrees, objective_->sigma(),
        std::move(data), options);
  }

  Config config_;
  std::unique_ptr<PackedDataObjective> objective_;
  std::unique_ptr<BatchedObjective> coarse_;  // null: one level
  Eigen::VectorXd truth_;
  ScalingMap map_;
  BoundBox bounds_;
  Eigen::VectorXd midpoints_;
};

// The homodyne search rules are the catalog's hints (ParameterSearchHints in
// src/model/mode_catalog.h) and the search follows them: D_offset and gamma_dot_t_offset on
// symmetric-log axes as wide as their companions' lower bounds (no other parameter), the staged
// grid with D0 by decades, gamma_dot_t0 by half decades and phi0 at 5 values spread over its
// bounds, every other parameter at 0.
TEST_F(GlobalSearchTest, SearchSpaceAndStagedGridFollowTheCatalogHints) {
  GlobalSearchSummary summary;
  const GlobalSearchInputs inputs = Inputs();
  const global_search_internal::Search search(inputs, nullptr, summary);
  const SearchSpace& space = search.space();
  const auto index = [&search](const std::string& name) {
    const auto at = std::find(search.names().begin(), search.names().end(), name);
    EXPECT_NE(at, search.names().end()) << name;
    return static_cast<int>(at - search.names().begin());
  };
  const int d0 = index("D0");
  const int gamma_dot = index("gamma_dot_t0");
  const int phi0 = index("phi0");
  ASSERT_GT(space.lower[d0], 0.0);
  ASSERT_GT(space.lower[gamma_dot], 0.0);
  for (int i = 0; i < search.dimensions(); ++i) {
    const std::string& name = search.names()[static_cast<size_t>(i)];
    const double width = space.symmetric_log_width[static_cast<size_t>(i)];
    if (name == "D_offset") {
      EXPECT_EQ(width, space.lower[d0]);
    } else if (name == "gamma_dot_t_offset") {
      EXPECT_EQ(width, space.lower[gamma_dot]);
    } else {
      EXPECT_EQ(width, 0.0) << name;
    }
  }
  EXPECT_TRUE(space.log_scale[static_cast<size_t>(d0)]);
  EXPECT_TRUE(space.log_scale[static_cast<size_t>(gamma_dot)]);

  const std::vector<global_search_internal::Candidate> candidates =
      global_search_internal::StagedCandidates(search);
  std::vector<std::set<double>> axes(static_cast<size_t>(search.dimensions()));
  for (size_t k = 1; k < candidates.size(); ++k) {  // 0: the start
    for (int i = 0; i < search.dimensions(); ++i) {
      axes[static_cast<size_t>(i)].insert(candidates[k].n[i]);
    }
  }
  // Decades (steps per decade) within the bounds, as many as the grid keeps (at most 7 decades).
  const auto decade_values = [&space](int i, int steps) {
    const int first = static_cast<int>(std::ceil(steps * std::log10(space.lower[i]) - 1e-9));
    const int last = static_cast<int>(std::floor(steps * std::log10(space.upper[i]) + 1e-9));
    return static_cast<size_t>(std::min(last - first + 1, 7 * steps));
  };
  EXPECT_EQ(axes[static_cast<size_t>(d0)].size(), decade_values(d0, 1));
  EXPECT_EQ(axes[static_cast<size_t>(gamma_dot)].size(), decade_values(gamma_dot, 2));
  const std::set<double>& gamma_values = axes[static_cast<size_t>(gamma_dot)];
  EXPECT_NEAR(*std::next(gamma_values.begin()) / *gamma_values.begin(), std::sqrt(10.0), 1e-9);
  std::set<double> phi0_expected;
  for (int j = 0; j < 5; ++j) {
    phi0_expected.insert(space.lower[phi0] +
                         (j + 0.5) / 5 * (space.upper[phi0] - space.lower[phi0]));
  }
  EXPECT_EQ(axes[static_cast<size_t>(phi0)], phi0_expected);
  size_t grid_size = 1;
  for (int i = 0; i < search.dimensions(); ++i) {
    if (i != d0 && i != gamma_dot && i != phi0) {
      EXPECT_EQ(axes[static_cast<size_t>(i)], std::set<double>{0.0})
          << search.names()[static_cast<size_t>(i)];
    }
    grid_size *= axes[static_cast<size_t>(i)].size();
  }
  EXPECT_EQ(candidates.size(), 1 + grid_size);
}

TEST_F(GlobalSearchTest, LocalFitFromMidpointsStopsInTheNoFlowMinimum) {
  // The trap the global phase exists for: a plain fit from the midpoints ends with no flow.
  const LevenbergMarquardtSummary local = FitFrom(midpoints_);
  const LevenbergMarquardtSummary reference = FitFrom(ReduceStartingPoint(map_, truth_));
  EXPECT_GT(local.final_chi2, reference.final_chi2 + 100.0);
}

TEST_F(GlobalSearchTest, AutoFindsTheGlobalOptimumFromTheMidpoints) {
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  EXPECT_EQ(summary.method, GlobalSearchMethod::kAuto);
  EXPECT_GT(summary.candidates, 100);  // the staged grid and the Sobol points
  EXPECT_GE(summary.local_fits, 2);
  EXPECT_GE(summary.minima.size(), 2u);  // the no-flow minimum is found too
  EXPECT_EQ(summary.point_evaluations, summary.passes * objective_->num_points());
  // How the passes were spent: laminar_flow has no search moves.
  EXPECT_EQ(summary.moved_fits, 0);
  EXPECT_EQ(summary.moved_fit_passes, 0);
  EXPECT_EQ(summary.screening_passes, summary.candidates);
  EXPECT_EQ(summary.screening_passes + summary.local_fit_passes, summary.passes);
  for (size_t i = 1; i < summary.minima.size(); ++i) {
    EXPECT_LE(summary.minima[i - 1].chi2, summary.minima[i].chi2);
  }
  // Every local fit ends in one minimum (or joins one found before it). The ranked fits stop
  // once the lowest minimum, inside the box, has been reached from 3 starts: of the start and
  // the 12 ranked candidates, some are left out.
  int reached = 0;
  for (const GlobalMinimum& minimum : summary.minima) reached += minimum.reached_by;
  EXPECT_EQ(reached, summary.local_fits);
  EXPECT_GT(summary.skipped_starts, 0) << summary.BriefReport();
  EXPECT_EQ(summary.local_fits + summary.skipped_starts, 13) << summary.BriefReport();
  EXPECT_GE(summary.minima.front().reached_by, 3) << summary.BriefReport();
  ExpectGlobalOptimum(summary);
}

TEST_F(GlobalSearchTest, AutoWithACoarseLevelRefinesItsBestMinimaOnTheSearchData) {
  // Screening and local fits on every 4th row (30 of 120), the best minima refined on all rows
  // (docs/design.md section 4b, coarse to fine); the answer is the optimum all the same.
  UseCoarseLevel(4);
  std::vector<int64_t> batches;
  GlobalSearchInputs inputs = Inputs();
  inputs.on_progress = [&batches](const GlobalSearchProgress& progress) {
    batches.push_back(progress.batches);
    return true;
  };
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, inputs);
  EXPECT_EQ(summary.coarse_points, coarse_->num_points());
  EXPECT_GE(summary.refined_fits, 1);
  EXPECT_LE(summary.refined_fits, 4);  // kAutoRefinements per unit
  EXPECT_GT(summary.refine_passes, 0);
  EXPECT_EQ(summary.screening_passes + summary.local_fit_passes + summary.refine_passes,
            summary.passes);
  const int64_t coarse_passes = summary.passes - summary.refine_passes;
  EXPECT_EQ(summary.point_evaluations, coarse_passes * coarse_->num_points() +
                                           summary.refine_passes * objective_->num_points());
  EXPECT_EQ(summary.batches, coarse_passes * coarse_->num_batches() +
                                 summary.refine_passes * objective_->num_batches());
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(batches.back(), summary.batches);
  EXPECT_TRUE(std::is_sorted(batches.begin(), batches.end()));
  // The minima are the refined ones, with chi2 on the search data (the coarse data's are about
  // a quarter of it).
  ASSERT_LE(summary.minima.size(), static_cast<size_t>(summary.refined_fits));
  const GlobalSearchSummary one_level = [this] {
    coarse_.reset();
    return RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  }();
  EXPECT_NEAR(summary.minima.front().chi2, one_level.minima.front().chi2,
              1e-6 * one_level.minima.front().chi2);
  EXPECT_LT(summary.point_evaluations, one_level.point_evaluations / 2);
  ExpectGlobalOptimum(summary);
}

TEST_F(GlobalSearchTest, MethodsOtherThanAutoIgnoreTheCoarseLevel) {
  UseCoarseLevel(4);
  NlsqOptions nlsq;
  nlsq.multi_start.n_starts = 8;
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kMultiStart, nlsq, Inputs());
  EXPECT_EQ(summary.coarse_points, 0);
  EXPECT_EQ(summary.refined_fits, 0);
  EXPECT_EQ(summary.point_evaluations, summary.passes * objective_->num_points());
}

TEST_F(GlobalSearchTest, AutoFindsTheStaticOptimumFromTheMidpoints) {
  // Static mode: from D0 = 50050 (the midpoint of [1e2, 1e5]) a local fit can stop with D0 on a
  // bound; the decade grid over D0 starts fits near the truth (3000).
  SetUpMode(AnalysisMode::kStatic);
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  EXPECT_GE(summary.candidates, 4 + 1);  // D0 decades and the start, plus Sobol points
  ExpectGlobalOptimum(summary);
}

TEST_F(GlobalSearchTest, AutoFindsTheTwoComponentOptimumFromTheMidpoints) {
  // two_component (14 physical parameters): the staged grid, the local fits and the catalog's
  // moves (velocity and transport restarts, component exchange) reach the optimum of the fit
  // started at the truth from the bound midpoints (docs/design.md section 4b).
  SetUpMode(AnalysisMode::kTwoComponent);
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  int moves = 0;
  for (const SearchMoveStage& stage : DefinitionOf(AnalysisMode::kTwoComponent).search_moves) {
    moves += stage.from_minima * static_cast<int>(stage.moves.size());
  }
  // The start, 24 ranked starts, and at most one fit per move (repeated starts are left out).
  EXPECT_GT(summary.local_fits, 25);
  EXPECT_LE(summary.local_fits, 25 + moves);
  EXPECT_EQ(summary.moved_fits, summary.local_fits - 25);
  EXPECT_GT(summary.moved_fit_passes, 0);
  EXPECT_EQ(summary.screening_passes + summary.local_fit_passes + summary.moved_fit_passes,
            summary.passes);
  // Over these 12 s a transport's D0, alpha and D_offset trade off within the noise (here the
  // search's minimum has alpha_sample -0.06, the truth-started fit's -0.51, chi2 within 2): the
  // chi2 and the flow decide.
  ExpectGlobalOptimum(summary, {"v0", "v_beta", "v_offset", "phi0_het"});
}

TEST_F(GlobalSearchTest, MultiStartFindsTheGlobalOptimum) {
  NlsqOptions nlsq;
  nlsq.multi_start.n_starts = 24;
  nlsq.multi_start.sampling_strategy = SamplingStrategy::kSobol;
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kMultiStart, nlsq, Inputs());
  EXPECT_EQ(summary.candidates, 25);  // the start and 24 sampled
  ExpectGlobalOptimum(summary);
}

TEST_F(GlobalSearchTest, CmaesFindsTheGlobalOptimum) {
  NlsqOptions nlsq;
  nlsq.cmaes.preset = CmaesPreset::kCmaesFast;
  const GlobalSearchSummary summary = RunGlobalSearch(GlobalSearchMethod::kCmaes, nlsq, Inputs());
  EXPECT_GT(summary.generations, 0);
  EXPECT_GE(summary.cmaes_runs, 1);
  ExpectGlobalOptimum(summary);
}

TEST_F(GlobalSearchTest, SameResultBitwiseAcrossRunsAndThreadCounts) {
  NlsqOptions nlsq;
  nlsq.multi_start.n_starts = 8;
  omp_set_num_threads(1);
  const GlobalSearchSummary one = RunGlobalSearch(GlobalSearchMethod::kMultiStart, nlsq, Inputs());
  omp_set_num_threads(2);
  const GlobalSearchSummary two = RunGlobalSearch(GlobalSearchMethod::kMultiStart, nlsq, Inputs());
  ASSERT_EQ(one.minima.size(), two.minima.size());
  for (size_t i = 0; i < one.minima.size(); ++i) {
    EXPECT_EQ(one.minima[i].chi2, two.minima[i].chi2);
    EXPECT_TRUE((one.minima[i].reduced.array() == two.minima[i].reduced.array()).all());
  }
  EXPECT_EQ(one.passes, two.passes);
  nlsq.multi_start.seed = 7;  // another seed samples other starts
  const GlobalSearchSummary other =
      RunGlobalSearch(GlobalSearchMethod::kMultiStart, nlsq, Inputs());
  EXPECT_NE(other.passes, one.passes);
}

TEST_F(GlobalSearchTest, ProgressCallbackStopsTheSearch) {
  GlobalSearchInputs inputs = Inputs();
  int calls = 0;
  inputs.on_progress = [&calls](const GlobalSearchProgress&) { return ++calls < 5; };
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, inputs);
  EXPECT_TRUE(summary.stopped);
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(summary.local_fits, 0);
}

// Interrupted at the `stop_after`-th progress report of stage `stop_stage` ("screening", "local
// fit", "cmaes"), then resumed from the trail it saved: the resumed search returns bitwise the
// uninterrupted one's minima and computes only the passes the interrupted one had not.
void ExpectResumedSearchIsBitwise(GlobalSearchMethod method, const NlsqOptions& nlsq,
                                  const GlobalSearchInputs& base, int stop_after,
                                  const std::string& stop_stage) {
  const GlobalSearchSummary whole = RunGlobalSearch(method, nlsq, base);
  GlobalSearchInputs interrupted = base;
  int reports = 0;
  GlobalSearchTrail saved;
  int64_t passes_before_stop = 0;
  std::string stage;
  interrupted.on_progress = [&](const GlobalSearchProgress& progress) {
    saved = *progress.trail;
    stage = progress.stage;
    passes_before_stop = progress.passes;
    if (progress.stage == stop_stage) ++reports;
    return reports < stop_after;
  };
  const GlobalSearchSummary first = RunGlobalSearch(method, nlsq, interrupted);
  ASSERT_TRUE(first.stopped) << ToString(method);
  EXPECT_EQ(stage, stop_stage) << ToString(method);
  ASSERT_FALSE(saved.empty()) << ToString(method);

  GlobalSearchInputs resumed = base;
  resumed.replay = saved;
  const GlobalSearchSummary second = RunGlobalSearch(method, nlsq, resumed);
  EXPECT_FALSE(second.stopped);
  ASSERT_EQ(second.minima.size(), whole.minima.size()) << ToString(method);
  for (size_t i = 0; i < whole.minima.size(); ++i) {
    EXPECT_EQ(second.minima[i].chi2, whole.minima[i].chi2) << ToString(method) << " minimum " << i;
    EXPECT_TRUE((second.minima[i].reduced.array() == whole.minima[i].reduced.array()).all())
        << ToString(method) << " minimum " << i;
  }
  EXPECT_EQ(second.passes, whole.passes) << ToString(method);
  EXPECT_EQ(second.local_fits, whole.local_fits) << ToString(method);
  EXPECT_EQ(second.moved_fits, whole.moved_fits) << ToString(method);
  EXPECT_EQ(second.moved_fit_passes, whole.moved_fit_passes) << ToString(method);
  EXPECT_EQ(second.local_fit_passes, whole.local_fit_passes) << ToString(method);
  EXPECT_EQ(second.refined_fits, whole.refined_fits) << ToString(method);
  EXPECT_EQ(second.refine_passes, whole.refine_passes) << ToString(method);
  EXPECT_GT(second.replayed_passes, 0) << ToString(method);
  EXPECT_LE(second.replayed_passes, passes_before_stop) << ToString(method);
  EXPECT_EQ(second.trail.evaluations, whole.trail.evaluations) << ToString(method);
  EXPECT_EQ(second.trail.minima.size(), whole.trail.minima.size()) << ToString(method);

  // A trail of the whole search replays everything: no pass computed.
  GlobalSearchInputs replay_all = base;
  replay_all.replay = whole.trail;
  const GlobalSearchSummary third = RunGlobalSearch(method, nlsq, replay_all);
  EXPECT_EQ(third.replayed_passes, whole.passes) << ToString(method);
  ASSERT_EQ(third.minima.size(), whole.minima.size());
  EXPECT_EQ(third.minima.front().chi2, whole.minima.front().chi2);
}

TEST_F(GlobalSearchTest, ResumedAutoSearchIsBitwise) {
  // Stopped in the screening, and after two local fits.
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 40, "screening");
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 2, "local fit");
}

TEST_F(GlobalSearchTest, ResumedAutoSearchWithACoarseLevelIsBitwise) {
  // Stopped in the coarse screening, in the coarse local fits, and in the refinements.
  UseCoarseLevel(4);
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 40, "screening");
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 3, "local fit");
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 1, "refine");
}

// Method auto spread over in-process ranks (GlobalSearchInputs::spread_group; docs/design.md
// section 5b): threads stand for the ranks of a job, each with its own copy of the data and of
// the coarse level (every row on every rank), as fit.cc builds them.
class SpreadSearchTest : public GlobalSearchTest {
 protected:
  static constexpr int kCoarseRowStride = 4;

  // What one rank returns, and the passes its own coarse level computed.
  struct RankRun {
    GlobalSearchSummary summary;
    int64_t own_coarse_passes = 0;
    int reports = 0;
    GlobalSearchTrail saved;  // the trail of its last progress report
  };

  // RunGlobalSearch(kAuto) on `ranks` thread ranks, from `replay`. signal_on_rank1_after: rank
  // 1's stop_requested_here turns true at its n-th call (0: never), as a signal that reached
  // that rank alone; the ranks agree on stopping in on_progress, as FitCheckpoints does.
  std::vector<RankRun> RunOnRanks(int ranks, const GlobalSearchTrail& replay = {},
                                  int signal_on_rank1_after = 0) {
    SharedState state(ranks);
    std::vector<RankRun> runs(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        omp_set_num_threads(1);
        ThreadRank group(state, r, ranks);
        PackedDataObjective data(objective_->model(), config_.simulation.phi_angles_degrees,
                                 objective_->sigma(), objective_->data(), 4000);
        std::unique_ptr<BatchedObjective> coarse = MakeRowSubsampleObjective(
            data.data(), data.model(), config_.simulation.phi_angles_degrees, data.sigma(),
            kCoarseRowStride, nullptr, nullptr, data.loss());
        GlobalSearchInputs inputs = Inputs();
        inputs.data = &data;
        inputs.coarse_data = coarse.get();
        inputs.replay = replay;
        inputs.spread_group = &group;
        int calls = 0;
        bool signalled = false;
        inputs.stop_requested_here = [&] {
          ++calls;
          signalled =
              signalled || (r == 1 && signal_on_rank1_after > 0 && calls >= signal_on_rank1_after);
          return signalled;
        };
        RankRun& run = runs[static_cast<size_t>(r)];
        inputs.on_progress = [&](const GlobalSearchProgress& progress) {
          ++run.reports;
          run.saved = *progress.trail;
          return group.MaxOverRanks(signalled ? 1 : 0) == 0;
        };
        run.summary = RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, inputs);
        run.own_coarse_passes = coarse->passes();
      });
    }
    for (std::thread& thread : threads) thread.join();
    return runs;
  }

  // One process's search, on the same coarse level.
  GlobalSearchSummary RunSingle(const GlobalSearchTrail& replay = {}) {
    omp_set_num_threads(1);
    UseCoarseLevel(kCoarseRowStride);
    GlobalSearchInputs inputs = Inputs();
    inputs.replay = replay;
    return RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, inputs);
  }

  static void ExpectSameSearch(const GlobalSearchSummary& a, const GlobalSearchSummary& b,
                               const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(a.minima.size(), b.minima.size());
    for (size_t i = 0; i < a.minima.size(); ++i) {
      EXPECT_EQ(a.minima[i].chi2, b.minima[i].chi2) << "minimum " << i;
      EXPECT_TRUE((a.minima[i].reduced.array() == b.minima[i].reduced.array()).all())
          << "minimum " << i;
      EXPECT_EQ(a.minima[i].reached_by, b.minima[i].reached_by) << "minimum " << i;
      EXPECT_EQ(a.minima[i].status, b.minima[i].status) << "minimum " << i;
    }
    EXPECT_EQ(a.passes, b.passes);
    EXPECT_EQ(a.candidates, b.candidates);
    EXPECT_EQ(a.local_fits, b.local_fits);
    EXPECT_EQ(a.local_fit_passes, b.local_fit_passes);
    EXPECT_EQ(a.refine_passes, b.refine_passes);
    EXPECT_EQ(a.trail.evaluations, b.trail.evaluations);
    ASSERT_EQ(a.trail.minima.size(), b.trail.minima.size());
    for (size_t i = 0; i < a.trail.minima.size(); ++i) {
      EXPECT_EQ(a.trail.minima[i].chi2, b.trail.minima[i].chi2) << "trail minimum " << i;
      EXPECT_EQ(a.trail.minima[i].passes, b.trail.minima[i].passes) << "trail minimum " << i;
      EXPECT_EQ(a.trail.minima[i].iterations, b.trail.minima[i].iterations);
    }
  }
};

TEST_F(SpreadSearchTest, EveryRankCountTakesBitwiseTheSingleProcessPath) {
  const GlobalSearchSummary single = RunSingle();
  ASSERT_GT(single.coarse_points, 0);
  // The single process's coarse fits joined minima found before them and left starts out: the
  // ranks, which fit a round's starts at once, take them in order as it did (LocalFitRound).
  EXPECT_GT(single.joined_local_fits, 0) << single.BriefReport();
  EXPECT_GT(single.skipped_starts, 0) << single.BriefReport();
  const int64_t coarse_passes = single.passes - single.refine_passes;
  for (int ranks : {2, 3}) {
    const std::vector<RankRun> runs = RunOnRanks(ranks);
    for (int r = 0; r < ranks; ++r) {
      const RankRun& run = runs[static_cast<size_t>(r)];
      const std::string what = std::to_string(ranks) + " ranks, rank " + std::to_string(r);
      ExpectSameSearch(single, run.summary, what);
      EXPECT_EQ(single.batches, run.summary.batches) << what;  // every rank counts every batch
      // The coarse level's work was shared: each rank computed a part of its passes (the
      // refinements, on the search data, run on every rank here: no group of their own).
      EXPECT_GT(run.own_coarse_passes, 0) << what;
      EXPECT_LT(run.own_coarse_passes, coarse_passes * 2 / ranks) << what;
      // One progress report per round of `ranks` items, not per item (the ranked starts: at
      // most 12 and 12 in reserve, and the user's; the refinements report one by one).
      EXPECT_LE(run.reports, (single.candidates + ranks - 1) / ranks + (25 + ranks - 1) / ranks +
                                 single.refined_fits)
          << what;
    }
  }
}

TEST_F(SpreadSearchTest, ASignalOnOneRankStopsEveryRankAndTheTrailResumesBitwise) {
  const GlobalSearchSummary single = RunSingle();
  // The signal reaches rank 1 during its first spread local fit (its 5th LM iteration).
  const std::vector<RankRun> stopped = RunOnRanks(2, {}, 5);
  for (const RankRun& run : stopped) {
    EXPECT_TRUE(run.summary.stopped);
    // The screening is all in the trail; of the round that was stopped, only the fit that
    // finished before the one stopped (rank 0's item).
    EXPECT_EQ(run.saved.evaluations, single.trail.evaluations);
    EXPECT_EQ(run.saved.minima.size(), 1u);
  }
  EXPECT_EQ(stopped[0].saved.minima.front().chi2, stopped[1].saved.minima.front().chi2);
  EXPECT_EQ(stopped[0].saved.minima.front().chi2, single.trail.minima.front().chi2);

  // Resumed by one process, and by a job of 3 ranks: bitwise the uninterrupted search.
  const GlobalSearchSummary resumed = RunSingle(stopped[0].saved);
  ExpectSameSearch(single, resumed, "resumed by one process");
  EXPECT_GT(resumed.replayed_passes, 0);
  for (const RankRun& run : RunOnRanks(3, stopped[1].saved)) {
    ExpectSameSearch(single, run.summary, "resumed on 3 ranks");
  }
}

TEST_F(GlobalSearchTest, RobustAutoSearchFindsTheRobustOptimumAndResumesBitwise) {
  // Under a robust loss every evaluation is one reweighted pass (variable_projection.h), on both
  // levels; the chosen minimum, refined on the full problem, is the robust optimum of the fit
  // from the truth; a resumed search is bitwise the whole one.
  UseRobustLossOnOutliers();
  UseCoarseLevel(4);
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  EXPECT_EQ(summary.screening_passes, summary.candidates);
  EXPECT_EQ(summary.screening_passes + summary.local_fit_passes + summary.refine_passes,
            summary.passes);
  ExpectGlobalOptimum(summary);
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 40, "screening");
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 3, "local fit");
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 1, "refine");
}

TEST_F(GlobalSearchTest, RobustCmaesSearchResumesBitwise) {
  UseRobustLossOnOutliers();
  NlsqOptions nlsq;
  nlsq.cmaes.preset = CmaesPreset::kCmaesFast;
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kCmaes, nlsq, Inputs(), 5, "cmaes");
}

TEST_F(GlobalSearchTest, ResumedTwoComponentSearchIsBitwiseInItsMoves) {
  // Stopped in the catalog's moved fits, after the ranked local fits.
  SetUpMode(AnalysisMode::kTwoComponent);
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 3, "moved fit");
}

TEST_F(GlobalSearchTest, ResumedMultiStartSearchIsBitwise) {
  NlsqOptions nlsq;
  nlsq.multi_start.n_starts = 8;
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kMultiStart, nlsq, Inputs(), 2, "local fit");
}

TEST_F(GlobalSearchTest, ResumedCmaesSearchIsBitwise) {
  NlsqOptions nlsq;
  nlsq.cmaes.preset = CmaesPreset::kCmaesFast;
  // Stopped inside CMA-ES (the staged grid is screened first).
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kCmaes, nlsq, Inputs(), 5, "cmaes");
}

TEST_F(GlobalSearchTest, ARefinementThatJoinsARefinedMinimumStopsThereAndResumesBitwise) {
  // beta 0: gamma_dot_t0 and gamma_dot_t_offset form a flat valley, along which the coarse fits
  // stop at distinct points. Their refinements on all rows crawl into one minimum; those that
  // reach a minimum refined before them stop there (docs/design.md section 4b, coarse to fine).
  // On every 3rd row the coarse fits end at 3 distinct minima of the valley within the refining
  // window (they join each other there too: the coarse level's joined fits).
  SetUpMode(AnalysisMode::kLaminarFlow, 120, {3000.0, -0.5, 10.0, 2.0e-4, 0.0, -5.0e-5, 5.0});
  UseCoarseLevel(3);
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  ASSERT_EQ(summary.refined_fits, 3) << summary.BriefReport();
  EXPECT_EQ(summary.joined_refinements, 1) << summary.BriefReport();
  EXPECT_NE(summary.BriefReport().find("3 refinements " + std::to_string(summary.refine_passes) +
                                       " (1 joined)"),
            std::string::npos)
      << summary.BriefReport();
  // In the trail, a joined refinement holds the minimum it joined: bitwise one of the
  // refinements before it, with its own passes.
  const std::vector<GlobalMinimum>& trail = summary.trail.minima;
  ASSERT_GE(trail.size(), 3u);
  const size_t first_refinement = trail.size() - 3;
  int joined = 0;
  for (size_t i = first_refinement; i < trail.size(); ++i) {
    if (trail[i].status != "joined a refined minimum") continue;
    ++joined;
    EXPECT_GT(trail[i].passes, 0);
    bool found = false;
    for (size_t j = first_refinement; j < i; ++j) {
      found = found || (trail[j].chi2 == trail[i].chi2 &&
                        (trail[j].reduced.array() == trail[i].reduced.array()).all());
    }
    EXPECT_TRUE(found) << "refinement " << i - first_refinement;
  }
  EXPECT_EQ(joined, 1);
  // The joined refinement counts for the minimum it joined (with its coarse minimum's local
  // fits).
  ASSERT_EQ(summary.minima.size(), 2u);
  EXPECT_GE(summary.minima.front().reached_by, 2);
  ExpectGlobalOptimum(summary, {"D0", "alpha", "D_offset"});
  // Stopped after the first refinement, and after the last.
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 1, "refine");
  ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), 3, "refine");
}

TEST_F(GlobalSearchTest, CoarseFitsJoinFoundMinimaAndStopOnceTheBestIsReachedFromThreeStarts) {
  // Method auto's ranked local fits (docs/design.md section 4b): a fit that comes within reach
  // of a minimum found before it stops there and counts as that minimum; once the lowest
  // minimum (inside the box) has been reached from 3 starts, the remaining ranked starts whose
  // screening chi2 is not within reach of it are left out.
  UseCoarseLevel(4);
  const GlobalSearchSummary summary =
      RunGlobalSearch(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs());
  EXPECT_GT(summary.joined_local_fits, 0) << summary.BriefReport();
  EXPECT_GT(summary.skipped_starts, 0) << summary.BriefReport();
  const int coarse_fits = summary.local_fits - summary.refined_fits;
  EXPECT_EQ(coarse_fits + summary.skipped_starts, 13) << summary.BriefReport();
  EXPECT_NE(
      summary.BriefReport().find("(" + std::to_string(summary.joined_local_fits) + " joined, " +
                                 std::to_string(summary.skipped_starts) + " starts left out)"),
      std::string::npos)
      << summary.BriefReport();
  // In the trail, a joined coarse fit holds the minimum it joined: bitwise a fit's before it,
  // with its own start, iterations and passes.
  const std::vector<GlobalMinimum>& trail = summary.trail.minima;
  ASSERT_EQ(trail.size(), static_cast<size_t>(summary.local_fits));
  int joined = 0;
  for (int i = 0; i < coarse_fits; ++i) {
    if (trail[static_cast<size_t>(i)].status != "joined a minimum found before") continue;
    ++joined;
    EXPECT_GT(trail[static_cast<size_t>(i)].passes, 0);
    bool found = false;
    for (int j = 0; j < i; ++j) {
      found = found || (trail[static_cast<size_t>(j)].chi2 == trail[static_cast<size_t>(i)].chi2 &&
                        (trail[static_cast<size_t>(j)].reduced.array() ==
                         trail[static_cast<size_t>(i)].reduced.array())
                            .all() &&
                        trail[static_cast<size_t>(j)].start != trail[static_cast<size_t>(i)].start);
    }
    EXPECT_TRUE(found) << "coarse fit " << i;
  }
  EXPECT_EQ(joined, summary.joined_local_fits);
  // The chosen minimum was reached from 3 starts or more on the coarse level.
  EXPECT_GE(summary.minima.front().reached_by, 3) << summary.BriefReport();
  EXPECT_EQ(summary.screening_passes + summary.local_fit_passes + summary.refine_passes,
            summary.passes);
  ExpectGlobalOptimum(summary);
  // Stopped after each of the first local fits (a joined one among them) and resumed: bitwise,
  // with the same starts left out.
  for (int stop_after : {2, 3, 4, 5}) {
    ExpectResumedSearchIsBitwise(GlobalSearchMethod::kAuto, NlsqOptions{}, Inputs(), stop_after,
                                 "local fit");
  }
}

}  // namespace
}  // namespace homodyne
