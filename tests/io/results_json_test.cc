// The JSON result files: the reference's fields, ours, the NaN/Inf convention, failures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/results.h"
#include "io/derived_rates.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

class ResultsJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("homodyne_results_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  nlohmann::json Read(const std::string& name) const {
    std::ifstream file(directory_ / "nlsq" / name);
    return nlohmann::json::parse(file);
  }

  static FitResult StaticResult() {
    FitResult result;
    result.analysis_mode = AnalysisMode::kStatic;
    result.physical = {{"D0", 1000.0, 5.0}, {"alpha", -0.5, 0.01}, {"D_offset", 10.0, 1.0}};
    result.per_angle = {{0.0, {"contrast", 0.3, 0.003}, {"offset", 1.0, 0.004}},
                        {45.0, {"contrast", 0.2, 0.004}, {"offset", 1.02, 0.003}}};
    result.covariance_names = {"D0", "alpha"};
    result.covariance = {25.0, 0.01, 0.01, 1e-4};
    result.chi_squared = 2000.0;
    result.reduced_chi_squared = 1.6;
    result.degrees_of_freedom = 1250;
    result.convergence_status = "converged";
    result.quality_flag = "marginal";
    result.quality_reasons = {"reduced chi2 1.6 is at least 1.5"};
    result.termination_reason = "ftol";
    result.n_angles = 2;
    result.n_times = 25;
    result.n_points = 1200;
    result.q_inv_angstrom = 0.0054;
    result.iterations = 7;
    result.passes = 8;
    result.point_evaluations = 9600;
    result.strategy = "large";
    result.strategy_reason = "size tier";
    result.threads = 2;
    result.total_seconds = 1.5;
    result.uncertainty_seconds = 0.25;
    return result;
  }

  std::filesystem::path directory_;
};

TEST(QualityFlagTest, ReferenceBoundaries) {
  EXPECT_EQ(QualityFlag(0.49), "marginal");  // below the reference's range: sigma overestimated
  EXPECT_EQ(QualityFlag(0.5), "good");
  EXPECT_EQ(QualityFlag(1.49), "good");
  EXPECT_EQ(QualityFlag(1.5), "marginal");
  EXPECT_EQ(QualityFlag(3.0), "poor");
  EXPECT_EQ(QualityFlag(std::nan("")), "poor");
}

TEST_F(ResultsJsonTest, ParametersJsonHasReferenceFieldsAndPerAngleValues) {
  WriteResultFiles(StaticResult(), directory_.string());
  const nlohmann::json json = Read("parameters.json");
  EXPECT_EQ(json["analysis_mode"], "static");
  EXPECT_EQ(json["convergence_status"], "converged");
  EXPECT_DOUBLE_EQ(json["chi_squared"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(json["parameters"]["D0"]["value"].get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(json["parameters"]["alpha"]["uncertainty"].get<double>(), 0.01);
  // Scalar contrast: mean of the per-angle values, RMS of their uncertainties.
  EXPECT_DOUBLE_EQ(json["parameters"]["contrast"]["value"].get<double>(), 0.25);
  EXPECT_NEAR(json["parameters"]["contrast"]["uncertainty"].get<double>(),
              std::sqrt((0.003 * 0.003 + 0.004 * 0.004) / 2), 1e-15);
  ASSERT_EQ(json["per_angle"].size(), 2u);
  EXPECT_DOUBLE_EQ(json["per_angle"][1]["phi"].get<double>(), 45.0);
  EXPECT_DOUBLE_EQ(json["per_angle"][1]["offset"]["value"].get<double>(), 1.02);
  EXPECT_EQ(json["covariance"]["parameter_names"][1], "alpha");
  EXPECT_DOUBLE_EQ(json["covariance"]["matrix"][0][1].get<double>(), 0.01);
  EXPECT_TRUE(json.contains("timestamp"));
}

// A parameter that ended held by a bound says which ("at_bound"); the others keep the reference's
// two fields only (docs/results.md, Parameters at a bound).
TEST_F(ResultsJsonTest, ParameterHeldByABoundIsMarked) {
  FitResult result = StaticResult();
  result.physical[0].at_bound = "lower";
  result.per_angle[1].contrast.at_bound = "upper";
  WriteResultFiles(result, directory_.string());
  const nlohmann::json json = Read("parameters.json");
  EXPECT_EQ(json["parameters"]["D0"]["at_bound"], "lower");
  EXPECT_FALSE(json["parameters"]["alpha"].contains("at_bound"));
  EXPECT_EQ(json["per_angle"][1]["contrast"]["at_bound"], "upper");
  EXPECT_FALSE(json["per_angle"][0]["contrast"].contains("at_bound"));
}

// Every parameter carries its unit; a held one "fixed": true (docs/results.md, Fields shared with
// the reference); the phi0 mirror check's record only when it ran (docs/results.md, The phi0
// mirror check).
TEST_F(ResultsJsonTest, UnitsFixedMarksAndThePhi0MirrorRecord) {
  FitResult result = StaticResult();
  result.physical[0].unit = "Å²/s^(1+α)";
  result.physical[2].unit = "Å²/s";
  result.physical[2].fixed = true;
  WriteResultFiles(result, directory_.string());
  nlohmann::json json = Read("parameters.json");
  EXPECT_EQ(json["parameters"]["D0"]["unit"], "Å²/s^(1+α)");
  EXPECT_EQ(json["parameters"]["alpha"]["unit"], "");
  EXPECT_EQ(json["parameters"]["D_offset"]["fixed"], true);
  EXPECT_FALSE(json["parameters"]["D0"].contains("fixed"));
  EXPECT_FALSE(json.contains("phi0_mirror"));

  Phi0MirrorRecord& mirror = result.phi0_mirror;
  mirror.checked = true;
  mirror.angles_degrees = "0, 90";
  mirror.phi0 = 3.1;
  mirror.phi0_uncertainty = 0.2;
  mirror.cost = 100.0;
  mirror.mirror_phi0 = -3.1;
  mirror.mirror_uncertainty = 0.2;
  mirror.mirror_cost = 100.5;
  mirror.tie = true;
  WriteResultFiles(result, directory_.string());
  json = Read("parameters.json");
  EXPECT_EQ(json["phi0_mirror"]["angles_degrees"], "0, 90");
  EXPECT_EQ(json["phi0_mirror"]["measure"], "chi2");
  EXPECT_DOUBLE_EQ(json["phi0_mirror"]["fit"]["phi0"].get<double>(), 3.1);
  EXPECT_DOUBLE_EQ(json["phi0_mirror"]["fit"]["chi2"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(json["phi0_mirror"]["mirror"]["phi0"].get<double>(), -3.1);
  EXPECT_DOUBLE_EQ(json["phi0_mirror"]["mirror"]["chi2"].get<double>(), 100.5);
  EXPECT_EQ(json["phi0_mirror"]["tie"], true);
}

TEST_F(ResultsJsonTest, AnalysisAndConvergenceFilesCarryRunDetails) {
  WriteResultFiles(StaticResult(), directory_.string());
  const nlohmann::json analysis = Read("analysis_results_nlsq.json");
  EXPECT_EQ(analysis["method"], "nlsq");
  EXPECT_EQ(analysis["fit_quality"]["quality_flag"], "marginal");
  EXPECT_EQ(analysis["fit_quality"]["quality_reasons"],
            nlohmann::json::array({"reduced chi2 1.6 is at least 1.5"}));
  EXPECT_EQ(analysis["fit_quality"]["degrees_of_freedom"], 1250);
  EXPECT_EQ(analysis["dataset_info"]["n_time_points"], 625);
  EXPECT_EQ(analysis["dataset_info"]["total_data_points"], 1250);
  EXPECT_EQ(analysis["strategy"]["name"], "large");
  EXPECT_EQ(analysis["passes"], 8);
  EXPECT_EQ(analysis["point_evaluations"], 9600);
  EXPECT_EQ(analysis["timings_s"]["total"], 1.5);
  EXPECT_EQ(analysis["timings_s"]["uncertainty"], 0.25);

  const nlohmann::json convergence = Read("convergence_metrics.json");
  EXPECT_EQ(convergence["convergence"]["iterations"], 7);
  EXPECT_DOUBLE_EQ(convergence["convergence"]["chi_squared_reduction"].get<double>(), 0.0);
  EXPECT_EQ(convergence["termination_reason"], "ftol");
  EXPECT_EQ(convergence["quality_flag"], "marginal");
  EXPECT_EQ(convergence["quality_reasons"].size(), 1u);
  EXPECT_EQ(convergence["device_info"]["threads"], 2);
}

TEST_F(ResultsJsonTest, DeviceInfoCarriesTheGpuSelfCheckOnlyWhenItRan) {
  WriteResultFiles(StaticResult(), directory_.string());
  EXPECT_FALSE(Read("convergence_metrics.json")["device_info"].contains("self_check"));

  FitResult result = StaticResult();
  result.backend = "cpu";  // auto fell back
  result.backend_self_check = {true,   false,
                               2.5e-3, "batch 0 angle 1 Gram entry (4, 2)",
                               0.25,   "backend self-check failed: ..."};
  WriteResultFiles(result, directory_.string());
  const nlohmann::json check = Read("convergence_metrics.json")["device_info"]["self_check"];
  EXPECT_EQ(check["passed"], false);
  EXPECT_DOUBLE_EQ(check["largest_difference"].get<double>(), 2.5e-3);
  EXPECT_EQ(check["where"], "batch 0 angle 1 Gram entry (4, 2)");
  EXPECT_DOUBLE_EQ(check["seconds"].get<double>(), 0.25);
  EXPECT_EQ(check["report"], "backend self-check failed: ...");
}

TEST_F(ResultsJsonTest, NonFiniteNumbersFollowTheReferenceConvention) {
  FitResult result = StaticResult();
  result.chi_squared = std::numeric_limits<double>::infinity();
  result.reduced_chi_squared = std::nan("");
  result.convergence_status = "failed";
  WriteResultFiles(result, directory_.string());
  const nlohmann::json json = Read("parameters.json");
  EXPECT_EQ(json["chi_squared"], "Infinity");
  EXPECT_TRUE(json["reduced_chi_squared"].is_null());
}

// nlsq/convergence_history.json (docs/results.md, Convergence history): one entry per iteration
// in order, the assumed sigma, the catalog's units and the result's chi2 and iterations.
TEST_F(ResultsJsonTest, ConvergenceHistoryRecordsEveryIteration) {
  const FitResult result = StaticResult();
  std::vector<IterationProgress> iterations(3);
  for (int k = 0; k < 3; ++k) {
    iterations[k].iteration = k;
    iterations[k].step_accepted = k == 2;
    iterations[k].chi2 = 3000.0 - 100.0 * k;
    iterations[k].trial_chi2 = k == 1 ? std::nan("") : iterations[k].chi2;
    iterations[k].damping = 1e-3 * (k + 1);
    iterations[k].step_norm = 0.5 * k;
    iterations[k].passes = k + 1;
    iterations[k].cost_passes = k;
  }
  WriteConvergenceHistory(iterations, result, 0.02, directory_.string());
  const nlohmann::json json = Read("convergence_history.json");
  EXPECT_EQ(json["analysis_mode"], "static");
  EXPECT_DOUBLE_EQ(json["sigma"].get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(json["chi_squared"].get<double>(), result.chi_squared);
  EXPECT_EQ(json["iterations"], result.iterations);
  EXPECT_EQ(json["parameter_units"]["D_offset"], "\u00c5\u00b2/s");
  EXPECT_EQ(json["parameter_units"]["alpha"], "");
  EXPECT_EQ(json["parameter_units"]["contrast"], "");
  ASSERT_EQ(json["history"].size(), 3u);
  EXPECT_EQ(json["history"][2]["iteration"], 2);
  EXPECT_EQ(json["history"][2]["accepted"], true);
  EXPECT_EQ(json["history"][0]["accepted"], false);
  EXPECT_DOUBLE_EQ(json["history"][2]["chi2"].get<double>(), 2800.0);
  EXPECT_TRUE(json["history"][1]["trial_chi2"].is_null());  // NaN, as in every result file
  EXPECT_DOUBLE_EQ(json["history"][1]["damping"].get<double>(), 2e-3);
  EXPECT_DOUBLE_EQ(json["history"][2]["step_norm"].get<double>(), 1.0);
  EXPECT_EQ(json["history"][2]["passes"], 5);  // full and cost passes
}

// A new result set removes an earlier run's history, so a history beside a set is of that set.
TEST_F(ResultsJsonTest, NewResultSetRemovesAnEarlierHistory) {
  WriteResultFiles(StaticResult(), directory_.string());
  WriteConvergenceHistory({IterationProgress{}}, StaticResult(), 0.01, directory_.string());
  const std::filesystem::path history = directory_ / "nlsq" / "convergence_history.json";
  ASSERT_TRUE(std::filesystem::exists(history));
  WriteResultFiles(StaticResult(), directory_.string());
  EXPECT_FALSE(std::filesystem::exists(history));
  EXPECT_TRUE(std::filesystem::exists(directory_ / "nlsq" / "parameters.json"));
}

TEST_F(ResultsJsonTest, UnwritableFolderIsAnErrorNamingThePath) {
  std::filesystem::create_directories(directory_);
  std::ofstream(directory_ / "plain_file") << "not a folder";
  const std::string output = (directory_ / "plain_file").string();
  try {
    WriteResultFiles(StaticResult(), output);
    FAIL() << "writing under a regular file must fail";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("plain_file/nlsq"));
  }
}

// nlsq/derived_rates.json (docs/results.md, What the data determine): D(t) with its 68 % interval
// from the covariance by the delta method, checked against the derivatives written out.
TEST(DerivedRatesTest, StaticRateAndIntervalFollowTheCovariance) {
  FitResult result;
  result.analysis_mode = AnalysisMode::kStatic;
  result.uncertainty_method = "jackknife";
  result.physical = {{"D0", 1000.0, 50.0}, {"alpha", -0.5, 0.02}, {"D_offset", 10.0, 3.0}};
  result.covariance_names = {"D0", "alpha", "D_offset", "contrast[0]", "offset[0]"};
  result.covariance.assign(25, 0.0);
  const double variances[5] = {2500.0, 4e-4, 9.0, 1e-6, 1e-6};
  for (int i = 0; i < 5; ++i) result.covariance[static_cast<size_t>(i * 5 + i)] = variances[i];
  std::vector<double> times;
  for (int i = 0; i < 3000; ++i) times.push_back(0.1 * (i + 1));
  const nlohmann::ordered_json json = io_internal::DerivedRatesJson(result, times);
  EXPECT_EQ(json["uncertainty_method"], "jackknife");
  const auto& t = json["t"];
  ASSERT_LE(t.size(), static_cast<size_t>(io_internal::kDerivedRatesMaxTimes) + 1);
  EXPECT_DOUBLE_EQ(t.back().get<double>(), times.back());  // the last time is kept
  EXPECT_FALSE(json.contains("gamma_dot"));
  for (size_t k = 0; k < t.size(); k += 97) {
    const double time = t[k].get<double>();
    const double d = 1000.0 * std::pow(time, -0.5) + 10.0;
    const double sigma =
        std::sqrt(std::pow(time, -1.0) * 2500.0 +
                  std::pow(1000.0 * std::pow(time, -0.5) * std::log(time), 2) * 4e-4 + 9.0);
    EXPECT_NEAR(json["D"][k].get<double>(), d, 1e-9 * d);
    EXPECT_NEAR(json["D_interval_68"][k][0].get<double>(), d - sigma, 1e-5 * sigma) << time;
    EXPECT_NEAR(json["D_interval_68"][k][1].get<double>(), d + sigma, 1e-5 * sigma) << time;
  }
  EXPECT_EQ(json["units"]["D"], "Å²/s");
}

TEST(DerivedRatesTest, EachModeWritesItsRatesAndNullIntervalsWithoutACovariance) {
  FitResult laminar;
  laminar.analysis_mode = AnalysisMode::kLaminarFlow;
  for (const char* name :
       {"D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "gamma_dot_t_offset", "phi0"}) {
    laminar.physical.push_back({name, 0.5, 0.1});
  }
  const std::vector<double> times = {0.1, 0.2, 0.3};
  const nlohmann::ordered_json json = io_internal::DerivedRatesJson(laminar, times);
  ASSERT_TRUE(json.contains("gamma_dot"));
  EXPECT_TRUE(json["gamma_dot_interval_68"][0][0].is_null());
  FitResult two;
  two.analysis_mode = AnalysisMode::kTwoComponent;
  for (const std::string& name : PhysicalParameterNames(AnalysisMode::kTwoComponent)) {
    two.physical.push_back({name, 0.5, 0.1});
  }
  const nlohmann::ordered_json rates = io_internal::DerivedRatesJson(two, times);
  for (const char* key : {"D_ref", "D_sample", "v", "fraction"}) {
    EXPECT_TRUE(rates.contains(key)) << key;
    EXPECT_EQ(rates[key].size(), 3u) << key;
  }
}

}  // namespace
}  // namespace homodyne
