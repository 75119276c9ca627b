// The checkpoint identity (FitIdentityText over fit_identity.h's field list) and the layout check
// of a resumed checkpoint (CheckCheckpointFits): every field that can change a fit's numbers
// changes the identity, none of the others does, and a checkpoint of another parameter count is
// refused with an InputError, never an abort.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_lock.h"
#include "checkpoint/checkpoint_store.h"
#include "homodyne/checkpoint_errors.h"
#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/model.h"
#include "pipeline/fit_checkpoints.h"
#include "pipeline/fit_identity.h"

namespace homodyne {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

// A config with every section set: the laminar_flow template, with start values, per-angle
// lists, phi ranges and custom starts, so that lists and optionals hold something.
Config FullConfig() {
  Config config = ParseConfig(ConfigTemplate(AnalysisMode::kLaminarFlow), "template.yaml");
  config.data.file_path = "/data/run.h5";
  config.data.phi_ranges = {{-10.0, 10.0}, {80.0, 100.0}};
  config.initial.values = std::vector<double>{1000, -0.5, 10, 1e-3, 0.1, 0.0, 1.0};
  config.initial.per_angle_contrast = std::vector<double>{0.3, 0.2};
  config.nlsq.multi_start.custom_starts = {{1000, -0.5, 10, 1e-3, 0.1, 0.0, 1.0}};
  config.nlsq.cmaes.popsize = 12;
  config.performance.cpu_threads = 4;
  config.streaming.batch_size = 4096;
  return config;
}

std::string Identity(const Config& config) {
  return FitIdentityText(config, 1000, GlobalSearchMethod::kAuto);
}

// Changes a field so that any text form of it changes.
void Mutate(double& value) { value += 1.0 + std::abs(value); }
void Mutate(int& value) { ++value; }
void Mutate(int64_t& value) { ++value; }
void Mutate(uint64_t& value) { ++value; }
void Mutate(bool& value) { value = !value; }
void Mutate(std::string& value) { value += "x"; }
void Mutate(AnalysisMode& value) {
  value = value == AnalysisMode::kStatic ? AnalysisMode::kLaminarFlow : AnalysisMode::kStatic;
}
void Mutate(StrategyKind& value) {
  value = value == StrategyKind::kLarge ? StrategyKind::kStreaming : StrategyKind::kLarge;
}
void Mutate(PerAngleModeRequest& value) {
  value = value == PerAngleModeRequest::kAuto ? PerAngleModeRequest::kFourier
                                              : PerAngleModeRequest::kAuto;
}
void Mutate(GlobalSearchMethod& value) {
  value = value == GlobalSearchMethod::kOff ? GlobalSearchMethod::kCmaes : GlobalSearchMethod::kOff;
}
void Mutate(SamplingStrategy& value) {
  value = value == SamplingStrategy::kSobol ? SamplingStrategy::kRandom : SamplingStrategy::kSobol;
}
void Mutate(CmaesPreset& value) {
  value = value == CmaesPreset::kCmaesFast ? CmaesPreset::kCmaesHpc : CmaesPreset::kCmaesFast;
}
void Mutate(CmaesRestartStrategy& value) {
  value = value == CmaesRestartStrategy::kIpop ? CmaesRestartStrategy::kNone
                                               : CmaesRestartStrategy::kIpop;
}
void Mutate(LmSolver& value) {
  value = value == LmSolver::kLmCore ? LmSolver::kCeres : LmSolver::kLmCore;
}
void Mutate(LossOptions& value) {
  value.function = value.is_linear() ? LossFunction::kCauchy : LossFunction::kLinear;
}
void Mutate(BackendKind& value) {
  value = value == BackendKind::kCpu ? BackendKind::kCuda : BackendKind::kCpu;
}
void Mutate(UncertaintyMethod& value) {
  value = value == UncertaintyMethod::kJackknife ? UncertaintyMethod::kCurvature
                                                 : UncertaintyMethod::kJackknife;
}
void Mutate(QFitMode& value) {
  value = value == QFitMode::kJoint ? QFitMode::kIndependent : QFitMode::kJoint;
}
void Mutate(PhiRange& value) { value.max_angle_degrees += 1.0; }
void Mutate(std::pair<double, double>& value) { value.second += 1.0; }
void Mutate(SimulationOptions& value) { value.present = !value.present; }
void Mutate(LoggingOptions& value) { value.performance.enabled = !value.performance.enabled; }
template <typename T>
void Mutate(std::vector<T>& values) {
  values.push_back(T{});
}
template <typename T>
void Mutate(std::optional<T>& value) {
  if (value) {
    Mutate(*value);
  } else {
    value = T{};
  }
}

// Mutates the `target`-th field VisitConfigFields visits (none when target < 0); counts fields.
struct MutateField {
  int target = -1;
  int index = 0;
  std::string path;
  FieldRole role = FieldRole::kNotNumbers;

  template <FieldRole kRole, typename T>
  void operator()(const char* field_path, FieldRoleTag<kRole>, T& value) {
    if (index++ != target) return;
    Mutate(value);
    path = field_path;
    role = kRole;
  }
};

TEST(FitIdentityTest, EveryFieldThatCanChangeTheNumbersChangesTheIdentityAndNoOther) {
  const Config base = FullConfig();
  const std::string base_identity = Identity(base);
  Config counted = base;
  MutateField counter;
  VisitConfigFields(counted, counter);
  ASSERT_GT(counter.index, 50);

  int numbers_fields = 0;
  for (int k = 0; k < counter.index; ++k) {
    Config changed = base;
    MutateField mutate;
    mutate.target = k;
    VisitConfigFields(changed, mutate);
    SCOPED_TRACE(mutate.path);
    if (mutate.role == FieldRole::kNotNumbers) {
      EXPECT_EQ(Identity(changed), base_identity);
    } else {
      ++numbers_fields;
      EXPECT_NE(Identity(changed), base_identity);
    }
  }
  EXPECT_GT(numbers_fields, 40);
}

// The roles themselves: what the fit reads to compute its numbers is in the identity (the
// review found anti_degeneracy.enable missing: it switches the per-angle modes, so the number
// of parameters); threads, checkpoint settings and paths are not.
TEST(FitIdentityTest, RolesOfTheFieldsThatMatter) {
  std::map<std::string, FieldRole> roles;
  const Config config = FullConfig();
  VisitConfigFields(config, [&](const char* path, auto role, const auto&) {
    roles[path] = decltype(role)::value;
  });
  for (const char* numbers :
       {"analysis_mode", "geometry.gap_angstrom", "data.start_frame", "data.phi_ranges",
        "parameter_space.bounds", "initial_parameters.values",
        "initial_parameters.fixed_parameters", "optimization.nlsq.max_iterations",
        "optimization.nlsq.sigma", "optimization.nlsq.anti_degeneracy.enable",
        "optimization.nlsq.anti_degeneracy.per_angle_mode",
        "optimization.nlsq.anti_degeneracy.constant_scaling_threshold",
        "optimization.nlsq.anti_degeneracy.fourier_order", "optimization.nlsq.variable_projection",
        "optimization.nlsq.statistical_tolerance", "optimization.nlsq.global_search.max_points",
        "optimization.nlsq.multi_start.seed", "optimization.nlsq.cmaes.refine_with_nlsq",
        "performance.fast_mode"}) {
    ASSERT_TRUE(roles.count(numbers)) << numbers;
    EXPECT_EQ(roles[numbers], FieldRole::kNumbers) << numbers;
  }
  EXPECT_EQ(roles["data.file_path"], FieldRole::kInputFile);
  for (const char* other :
       {"source_path", "performance.computation.cpu_threads", "performance.enable_progress",
        "performance.strategy_override", "optimization.streaming.checkpoint_dir",
        "optimization.streaming.checkpoint_frequency",
        "optimization.streaming.resume_from_checkpoint", "warnings", "logging", "simulation"}) {
    ASSERT_TRUE(roles.count(other)) << other;
    EXPECT_EQ(roles[other], FieldRole::kNotNumbers) << other;
  }
}

TEST(FitIdentityTest, AntiDegeneracyEnableChangesTheIdentity) {
  Config changed = FullConfig();
  changed.nlsq.anti_degeneracy_enabled = !changed.nlsq.anti_degeneracy_enabled;
  EXPECT_NE(Identity(changed), Identity(FullConfig()));
}

TEST(FitIdentityTest, ThreadsAndPathsOfOutputsDoNotChangeTheIdentity) {
  Config changed = FullConfig();
  changed.performance.cpu_threads = 1;
  changed.streaming.checkpoint_dir = "/elsewhere/checkpoints";
  changed.streaming.keep_last_checkpoints = 9;
  changed.streaming.resume_from_checkpoint = false;
  changed.source_path = "/elsewhere/config.yaml";
  changed.performance.enable_progress = false;
  EXPECT_EQ(Identity(changed), Identity(FullConfig()));
}

TEST(FitIdentityTest, ElementsOfListsOfStructsAndResolvedInputsCount) {
  const std::string base = Identity(FullConfig());
  Config bound = FullConfig();
  bound.bounds[3].min *= 0.5;
  EXPECT_NE(Identity(bound), base);
  Config range = FullConfig();
  range.data.phi_ranges[1].max_angle_degrees = 101.0;
  EXPECT_NE(Identity(range), base);
  EXPECT_NE(FitIdentityText(FullConfig(), 1001, GlobalSearchMethod::kAuto), base);
  EXPECT_NE(FitIdentityText(FullConfig(), 1000, GlobalSearchMethod::kOff), base);
}

// The identity text itself, pinned: checkpoints that earlier versions wrote hold its hash, so a
// change of how a field is held (a string that became an enum) must write the same text, or they
// no longer resume. A default config, with an absolute data path (the text holds it absolute).
constexpr char kDefaultIdentityText[] = R"(homodyne fit identity 2
analysis_mode=laminar_flow
geometry.q_inv_angstrom=0.0054000000000000003
geometry.gap_angstrom=2000000
geometry.dt_seconds=0.001
data.file_path="/data/run.h5"
data.wavevector_q_target=0.0054000000000000003
data.start_frame=1
data.end_frame=-1
data.dt_seconds=0.001
data.q_tolerance_fraction=0.10000000000000001
data.phi_filtering_enabled=false
data.phi_ranges=[]
parameter_space.bounds=[]
initial_parameters.parameter_names=[]
initial_parameters.values=null
initial_parameters.per_angle_scaling.contrast=null
initial_parameters.per_angle_scaling.offset=null
initial_parameters.fixed_parameters=[]
optimization.nlsq.max_iterations=100
optimization.nlsq.tolerance=1e-08
optimization.nlsq.xtol=1e-08
optimization.nlsq.gtol=1e-08
optimization.nlsq.sigma=0.01
optimization.nlsq.anti_degeneracy.enable=true
optimization.nlsq.anti_degeneracy.per_angle_mode="individual"
optimization.nlsq.anti_degeneracy.constant_scaling_threshold=3
optimization.nlsq.anti_degeneracy.fourier_order=2
optimization.nlsq.variable_projection=true
optimization.nlsq.statistical_tolerance=0.001
optimization.nlsq.global_search.max_points=1000000
optimization.nlsq.multi_start.n_starts=10
optimization.nlsq.multi_start.seed=42
optimization.nlsq.multi_start.sampling_strategy="latin_hypercube"
optimization.nlsq.multi_start.use_screening=true
optimization.nlsq.multi_start.screen_keep_fraction=0.5
optimization.nlsq.multi_start.refine_top_k=3
optimization.nlsq.multi_start.refinement_ftol=9.9999999999999998e-13
optimization.nlsq.multi_start.custom_starts=[]
optimization.nlsq.cmaes.preset="cmaes-global"
optimization.nlsq.cmaes.max_generations=null
optimization.nlsq.cmaes.popsize=null
optimization.nlsq.cmaes.sigma=0.5
optimization.nlsq.cmaes.sigma_warmstart=0.050000000000000003
optimization.nlsq.cmaes.tol_fun=1e-08
optimization.nlsq.cmaes.tol_x=1e-08
optimization.nlsq.cmaes.restart_strategy="bipop"
optimization.nlsq.cmaes.max_restarts=null
optimization.nlsq.cmaes.refine_with_nlsq=true
performance.fast_mode=false
batch_points=1000
global_search_method="auto"
)";

Config DefaultConfig() {
  Config config;
  config.data.file_path = "/data/run.h5";
  return config;
}

TEST(FitIdentityTest, TextOfADefaultConfigIsPinned) {
  EXPECT_EQ(FitIdentityText(DefaultConfig(), 1000, GlobalSearchMethod::kAuto),
            kDefaultIdentityText);
}

// The lines of the fields that hold one of a few names, for every name: quoted as the config
// spells it. The solver is no part of the identity (a checkpoint of the other optimiser is
// refused with its own message); the global method enters resolved, as the last line.
TEST(FitIdentityTest, LinesOfNamedValuesArePinned) {
  // The line `path`="name" for every name, set into a default config by set(config, name).
  auto expect_lines = [](const std::string& path, std::initializer_list<const char*> names,
                         auto set) {
    for (const char* name : names) {
      Config config = DefaultConfig();
      set(config, name);
      EXPECT_THAT(FitIdentityText(config, 1000, GlobalSearchMethod::kAuto),
                  HasSubstr("\n" + path + "=\"" + name + "\"\n"));
    }
  };
  expect_lines("optimization.nlsq.anti_degeneracy.per_angle_mode",
               {"individual", "constant", "auto", "fourier"}, [](Config& c, const char* name) {
                 c.nlsq.per_angle_mode = ParsePerAngleModeRequest(name).value();
               });
  expect_lines("optimization.nlsq.multi_start.sampling_strategy",
               {"latin_hypercube", "sobol", "random"}, [](Config& c, const char* name) {
                 c.nlsq.multi_start.sampling_strategy = ParseSamplingStrategy(name).value();
               });
  expect_lines(
      "optimization.nlsq.cmaes.preset", {"cmaes-fast", "cmaes", "cmaes-global", "cmaes-hpc"},
      [](Config& c, const char* name) { c.nlsq.cmaes.preset = ParseCmaesPreset(name).value(); });
  expect_lines("optimization.nlsq.cmaes.restart_strategy", {"ipop", "bipop", "none"},
               [](Config& c, const char* name) {
                 c.nlsq.cmaes.restart_strategy = ParseCmaesRestartStrategy(name).value();
               });

  const std::string identity = FitIdentityText(DefaultConfig(), 1000, GlobalSearchMethod::kAuto);
  Config ceres = DefaultConfig();
  ceres.nlsq.solver = LmSolver::kCeres;
  EXPECT_EQ(FitIdentityText(ceres, 1000, GlobalSearchMethod::kAuto), identity);
  EXPECT_THAT(identity, Not(HasSubstr("solver")));
  for (const char* method : {"auto", "off", "multi_start", "cmaes"}) {
    EXPECT_THAT(FitIdentityText(DefaultConfig(), 1000, ParseGlobalSearchMethod(method).value()),
                EndsWith(std::string("\nglobal_search_method=\"") + method + "\"\n"));
  }
}

// --- CheckCheckpointFits -------------------------------------------------------------------

Checkpoint CoreState(int num_parameters) {
  Checkpoint checkpoint;
  checkpoint.global_batch = 40;
  checkpoint.lm.theta = Eigen::VectorXd::Ones(num_parameters);
  checkpoint.lm.jtj = Eigen::MatrixXd::Identity(num_parameters, num_parameters);
  checkpoint.lm.jtr = Eigen::VectorXd::Zero(num_parameters);
  checkpoint.lm.iterations = 2;
  return checkpoint;
}

std::string LayoutErrorOf(const Checkpoint& checkpoint, const CheckpointLayout& layout) {
  try {
    CheckCheckpointFits(checkpoint, layout, "ck");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(CheckCheckpointFitsTest, AcceptsStatesOfThisFit) {
  const CheckpointLayout layout{9, 9, 12};
  EXPECT_EQ(LayoutErrorOf(Checkpoint(), layout), "");  // still in the first pass
  EXPECT_EQ(LayoutErrorOf(CoreState(9), layout), "");
  Checkpoint ceres = CoreState(9);
  ceres.lm.jtj.resize(0, 0);
  ceres.lm.jtr.resize(0);
  ceres.lm.trust_region_radius = 1.0;
  EXPECT_EQ(LayoutErrorOf(ceres, layout), "");
  Checkpoint in_pass = CoreState(9);
  in_pass.pass = PassState{Eigen::VectorXd::Zero(9), true, 5,  Eigen::MatrixXd::Zero(9, 9),
                           Eigen::VectorXd::Zero(9), 1.0,  100};
  in_pass.global_search.minima.push_back({Eigen::VectorXd::Zero(9), 1.0, 0, 3, "converged", 4});
  EXPECT_EQ(LayoutErrorOf(in_pass, layout), "");
}

TEST(CheckCheckpointFitsTest, RefusesOtherParameterCountsWithInputError) {
  const CheckpointLayout layout{9, 9, 12};
  EXPECT_THAT(LayoutErrorOf(CoreState(13), layout),
              HasSubstr("the checkpoint at batch 40 in ck holds a fit state of 13 parameters "
                        "(J^T J 13 x 13) and this fit has 9: it was written for another config or "
                        "data set; remove it or start afresh with --no-resume"));
  Checkpoint pass = CoreState(9);
  pass.pass = PassState{Eigen::VectorXd::Zero(13), true, 5,  Eigen::MatrixXd::Zero(13, 13),
                        Eigen::VectorXd::Zero(13), 1.0,  100};
  EXPECT_THAT(LayoutErrorOf(pass, layout), HasSubstr("holds a pass over 13 parameters"));
  Checkpoint late = CoreState(9);
  late.pass = PassState{Eigen::VectorXd::Zero(9), false, 30, {}, {}, 1.0, 100};
  EXPECT_THAT(LayoutErrorOf(late, layout), HasSubstr("holds a pass at batch 30"));
  Checkpoint minimum;
  minimum.global_search.minima.push_back({Eigen::VectorXd::Zero(5), 1.0, 0, 3, "converged", 4});
  EXPECT_THAT(LayoutErrorOf(minimum, layout),
              HasSubstr("holds a global-search minimum of 5 parameters"));
}

// CheckCheckpointSolver: a state of one optimiser is not continued by the other; a checkpoint
// without a state (inside the global phase) resumes with either.
std::string SolverErrorOf(const Checkpoint& checkpoint, StateSolver solver) {
  try {
    CheckCheckpointSolver(checkpoint, solver, "ck");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(CheckCheckpointSolverTest, RefusesAStateOfTheOtherOptimiserNamingTheWayOut) {
  Checkpoint core = CoreState(9);
  core.lm.solver = StateSolver::kLmCore;
  Checkpoint ceres = CoreState(9);
  ceres.lm.solver = StateSolver::kCeres;
  EXPECT_EQ(SolverErrorOf(core, StateSolver::kLmCore), "");
  EXPECT_EQ(SolverErrorOf(ceres, StateSolver::kCeres), "");
  EXPECT_EQ(SolverErrorOf(Checkpoint{}, StateSolver::kCeres), "");
  EXPECT_EQ(SolverErrorOf(ceres, StateSolver::kLmCore),
            "the checkpoint at batch 40 in ck was written by the Ceres solver and this run uses "
            "the LM core: resume it with --strategy standard --solver ceres "
            "(optimization.nlsq.solver: ceres, strategy standard), or start afresh with "
            "--no-resume");
  EXPECT_EQ(SolverErrorOf(core, StateSolver::kCeres),
            "the checkpoint at batch 40 in ck was written by the LM core and this run uses the "
            "Ceres solver: resume it with --solver lm (optimization.nlsq.solver: lm), or start "
            "afresh with --no-resume");
  // A typed error, so that the Python module words the fresh start its own way.
  try {
    CheckCheckpointSolver(core, StateSolver::kCeres, "ck");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointMismatchError& error) {
    EXPECT_THAT(error.Message("resume=False"), EndsWith("or start afresh with resume=False"));
  }
}

// --- The resume announcement ----------------------------------------------------------------

// A checkpoint written at 2026-11-24T06:00:00Z by version 0.1.0, at batch 40.
Checkpoint WrittenAtSix() {
  Checkpoint checkpoint;
  checkpoint.global_batch = 40;
  checkpoint.engine_version = "0.1.0";
  checkpoint.timestamp_utc = "2026-11-24T06:00:00Z";
  return checkpoint;
}

// `seconds` after WrittenAtSix's timestamp (1795500000 s since the epoch).
std::chrono::system_clock::time_point AfterSix(int64_t seconds) {
  return std::chrono::system_clock::from_time_t(static_cast<std::time_t>(1795500000 + seconds));
}

TEST(ResumeAnnouncementTest, NamesTheFileBatchAgeAndVersion) {
  EXPECT_EQ(ResumeAnnouncement(WrittenAtSix(), "checkpoints/homodyne_state_batch_000040.h5",
                               AfterSix(3 * 60 + 20)),
            "resuming from checkpoints/homodyne_state_batch_000040.h5 (batch 40, written 3 min "
            "ago by homodyne-cpp 0.1.0); --no-resume starts afresh");
}

TEST(ResumeAnnouncementTest, AgeInSecondsMinutesHoursOrDays) {
  const auto age = [](int64_t seconds) {
    const std::string line = ResumeAnnouncement(WrittenAtSix(), "f.h5", AfterSix(seconds));
    const size_t start = line.find("written ") + 8;
    return line.substr(start, line.find(" by ") - start);
  };
  EXPECT_EQ(age(0), "0 s ago");
  EXPECT_EQ(age(119), "119 s ago");
  EXPECT_EQ(age(120), "2 min ago");
  EXPECT_EQ(age(2 * 3600 - 1), "119 min ago");
  EXPECT_EQ(age(2 * 3600), "2 h ago");
  EXPECT_EQ(age(48 * 3600), "2 days ago");
  // Ahead of now (a clock set back), or not a timestamp: quoted as written.
  EXPECT_EQ(age(-5), "at 2026-11-24T06:00:00Z");
  Checkpoint garbled = WrittenAtSix();
  garbled.timestamp_utc = "yesterday";
  EXPECT_THAT(ResumeAnnouncement(garbled, "f.h5", AfterSix(10)), HasSubstr("written at yesterday"));
}

TEST(ResumeAnnouncementTest, PathIsTheStoresFileOfTheBatch) {
  EXPECT_EQ(CheckpointStore({"./checkpoints", 3, true}).PathOf(40),
            "./checkpoints/homodyne_state_batch_000040.h5");
}

// --- Resume through Fit ----------------------------------------------------------------------

class FitResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("homodyne_pipeline_resume_" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
    // c2 of the static model on 3 angles and 40 times, with a little noise.
    const int n = 40;
    ScatteringGeometry geometry{0.0054, 2.0e6, 0.1};
    std::vector<double> times;
    for (int k = 1; k <= n; ++k) times.push_back(0.1 * k);
    const HomodyneModel model(AnalysisMode::kStatic, geometry, times);
    const ModelEvaluation evaluation(model, std::vector<double>{3000.0, -0.5, 10.0});
    std::mt19937_64 generator(3);
    std::normal_distribution<double> noise(0.0, 0.01);
    values_.resize(3 * static_cast<size_t>(n) * n);
    for (int k = 0; k < 3; ++k) {
      std::span<double> matrix(values_.data() + static_cast<size_t>(k) * n * n,
                               static_cast<size_t>(n) * n);
      evaluation.ComputeC2Matrix(phi_[static_cast<size_t>(k)], 0.3, 1.0, matrix);
      for (double& value : matrix) value += noise(generator);
    }
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::unique_ptr<BatchSource> Source() const {
    InMemoryData data;
    data.float64_values = values_;
    data.num_angles = 3;
    data.num_times = 40;
    data.phi_degrees = phi_;
    data.q_inv_angstrom = 0.0054;
    data.dt_seconds = 0.1;
    return MakeInMemoryBatchSource(std::move(data));
  }

  std::filesystem::path directory_;
  std::vector<double> phi_ = {0.0, 45.0, 90.0};
  std::vector<double> values_;
};

TEST_F(FitResumeTest, CheckpointOfAnotherParameterCountIsInputErrorNotAnAbort) {
  Config config = ParseConfig("analysis_mode: static\n", "static.yaml");
  config.streaming.checkpoint_dir = directory_.string();
  config.streaming.batch_size = 300;  // 100 points per angle in a batch
  config.performance.cpu_threads = 1;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;  // as --global-search off
  std::unique_ptr<BatchSource> source = Source();
  // A checkpoint that passes the identity and data checks (as one would that the identity had
  // missed a field for) but holds a state of 4 parameters; this fit has 3 + 6.
  Checkpoint foreign = CoreState(4);
  foreign.config_sha256 = Sha256Hex(FitIdentityText(config, 100, GlobalSearchMethod::kOff));
  foreign.data_fingerprint = DataFingerprint(*source);
  foreign.engine_version = HOMODYNE_VERSION;
  CheckpointStore({directory_.string(), 3, true}).Save(foreign);

  try {
    Fit(config, *source);
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("holds a fit state of 4 parameters (J^T J 4 x 4) and "
                                        "this fit has 9"));
  }
}

// A fit job (RunFitJob) that saves a checkpoint at every iteration into checkpoints().
class FitJobTest : public FitResumeTest {
 protected:
  Config JobConfig() const {
    Config config = ParseConfig("analysis_mode: static\n", "static.yaml");
    config.streaming.checkpoint_dir = checkpoints().string();
    config.streaming.checkpoint_frequency = 1;
    config.streaming.checkpoint_min_interval_seconds = 0.0;
    config.performance.strategy_override = StrategyKind::kLarge;  // saves at iteration ends
    config.performance.cpu_threads = 1;
    config.nlsq.global_search.method = GlobalSearchMethod::kOff;
    return config;
  }
  std::filesystem::path lock_file() const {
    return checkpoints() / FolderLock::LockFileName(LockedFolder::kCheckpoints);
  }
  std::filesystem::path checkpoints() const { return directory_ / "checkpoints"; }
};

TEST_F(FitJobTest, AResultWriteFailureKeepsTheCheckpointsAndReleasesTheLock) {
  std::filesystem::create_directories(directory_);
  const std::string blocker = (directory_ / "plain_file").string();  // no nlsq/ can go under it
  std::ofstream(blocker) << "x";
  bool fitted = false;
  FitJobOptions job;
  job.on_fitted = [&fitted](const FitOutcome&) { fitted = true; };
  job.output_dir = blocker;
  std::unique_ptr<BatchSource> source = Source();

  EXPECT_THROW(RunFitJob(JobConfig(), *source, job), InputError);

  EXPECT_TRUE(fitted);
  EXPECT_FALSE(CheckpointStore({checkpoints().string(), 3, true}).List().empty());
  EXPECT_FALSE(std::filesystem::exists(lock_file()));
  // The rerun resumes from them, writes the results and only then removes them.
  job.output_dir = (directory_ / "out").string();
  const FitOutcome outcome = RunFitJob(JobConfig(), *Source(), job);
  EXPECT_THAT(outcome.result.recovery_actions.front(), HasSubstr("resumed from the checkpoint"));
  EXPECT_TRUE(std::filesystem::exists(directory_ / "out" / "nlsq" / "parameters.json"));
  EXPECT_TRUE(CheckpointStore({checkpoints().string(), 3, true}).List().empty());
  EXPECT_EQ(outcome.checkpoint_lock, nullptr);
  EXPECT_FALSE(std::filesystem::exists(lock_file()));
}

TEST_F(FitJobTest, ALockedCheckpointFolderStopsTheJobBeforeItFits) {
  std::string note;
  const std::unique_ptr<FolderLock> held =
      FolderLock::Acquire(checkpoints().string(), LockedFolder::kCheckpoints, note);
  ASSERT_NE(held, nullptr);
  int iterations = 0;
  FitObserver observer;
  observer.on_iteration = [&iterations](const IterationProgress&) { ++iterations; };
  FitJobOptions job;
  job.output_dir = (directory_ / "out").string();
  std::unique_ptr<BatchSource> source = Source();

  try {
    RunFitJob(JobConfig(), *source, job, observer);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("checkpoint folder " + checkpoints().string() +
                                        " is in use by PID " + std::to_string(::getpid())));
  }
  EXPECT_EQ(iterations, 0);
  EXPECT_FALSE(std::filesystem::exists(directory_ / "out" / "nlsq"));
}

TEST_F(FitJobTest, ANulInTheOutputFolderStopsTheJobNamingIt) {
  FitJobOptions job;
  job.output_dir = std::string("out\0put", 7);
  std::unique_ptr<BatchSource> source = Source();
  try {
    RunFitJob(JobConfig(), *source, job);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("output_dir = 'out\\0put': contains a NUL"));
  }
  EXPECT_FALSE(std::filesystem::exists(checkpoints()));
}

}  // namespace
}  // namespace homodyne
