// The homodyne YAML configuration (docs/configuration.md) as plain option structs.
//
// Every field carries its default and meaning in place. LoadConfig accepts every key of the
// reference's templates; keys the engine uses are parsed into these structs and validated with
// messages of the form "<yaml.path> = <value>: <rule>" (ConfigError). Unknown keys produce a
// warning naming the closest known key. yaml-cpp appears only in src/config/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "homodyne/robust_loss.h"

namespace homodyne {

// The four fitting strategies (docs/design.md section 3).
enum class StrategyKind { kStandard, kLarge, kChunked, kStreaming };

// "standard", "large", "chunked", "streaming".
std::string_view ToString(StrategyKind kind);
// Case-insensitive; std::nullopt for an unknown name.
std::optional<StrategyKind> ParseStrategyKind(std::string_view text);

// Bounds of one parameter (parameter_space.bounds[]); defaults in
// docs/configuration.md, Parameters.
struct ParameterBound {
  std::string name;  // canonical name (aliases mapped), e.g. "D0", "contrast"
  double min = 0.0;
  double max = 1.0;
};

// initial_parameters (docs/model.md, Bounds and start values). parameter_names defaults to the
// mode's physical names; it holds only names of the mode plus contrast/offset (names of the other
// mode are dropped with a warning, together with their values). values, when set, has one entry
// per name.
struct InitialParameterOptions {
  std::vector<std::string> parameter_names;               // canonical names, order of `values`
  std::optional<std::vector<double>> values;              // null -> bound midpoints
  std::optional<std::vector<double>> per_angle_contrast;  // per_angle_scaling.contrast
  std::optional<std::vector<double>> per_angle_offset;    // per_angle_scaling.offset
  std::vector<std::string> fixed_parameters;              // fixed_parameters (names), empty if null
};

// How multi-start samples its starts (optimization.nlsq.multi_start.sampling_strategy;
// SampleUnitCube, src/optimize/start_sampling.h).
enum class SamplingStrategy {
  // One point per stratum [k/n, (k+1)/n) in every dimension (McKay, Beckman, Conover 1979):
  // independent seeded random permutations of the strata per dimension, a uniform jitter inside.
  kLatinHypercube,
  // The unscrambled Sobol sequence (Joe and Kuo direction numbers, boost::random::sobol), from its
  // second point on: the all-zero first point is skipped, so the first points are (0.5, ...),
  // (0.75, 0.25, ...), (0.25, 0.75, ...). The same for every seed; at most 3667 dimensions.
  kSobol,
  // Independent uniform points.
  kRandom,
};

// "latin_hypercube", "sobol", "random".
std::string_view ToString(SamplingStrategy strategy);
// Those names, case-insensitive; std::nullopt for anything else.
std::optional<SamplingStrategy> ParseSamplingStrategy(std::string_view text);

// optimization.nlsq.multi_start (docs/configuration.md, Global phase): starts sampled in the
// search box (log coordinates for parameters spanning decades), screened by their projected chi2,
// the kept ones fitted locally, the best refined. Values are the reference's defaults.
struct MultiStartOptions {
  bool enable = false;  // selects multi-start as the global method (see GlobalSearchOptions)
  int n_starts = 10;    // sampled starts, >= 1
  uint64_t seed = 42;   // sampling seed: the same seed gives the same starts and result
  SamplingStrategy sampling_strategy = SamplingStrategy::kLatinHypercube;
  bool use_screening = true;          // keep only the best screen_keep_fraction by start chi2
  double screen_keep_fraction = 0.5;  // in (0, 1]
  int refine_top_k = 3;               // best local minima refined with refinement_ftol, >= 1
  double refinement_ftol = 1e-12;     // > 0
  // Two distinct minima whose chi2 differ by less than this fraction are reported degenerate.
  double degeneracy_threshold = 0.1;  // >= 0
  // Extra starts: physical parameter vectors in the mode's order (custom_starts), always fitted.
  std::vector<std::vector<double>> custom_starts;
};

// The budget of the CMA-ES search (optimization.nlsq.cmaes.preset; restarts, evaluations and
// population size per preset in src/optimize/global_search.cc).
enum class CmaesPreset { kCmaesFast, kCmaes, kCmaesGlobal, kCmaesHpc };
// "cmaes-fast", "cmaes", "cmaes-global", "cmaes-hpc".
std::string_view ToString(CmaesPreset preset);
// Those names, case-insensitive; std::nullopt for anything else.
std::optional<CmaesPreset> ParseCmaesPreset(std::string_view text);

// How CMA-ES restarts (optimization.nlsq.cmaes.restart_strategy; src/optimize/cmaes_search.h): not
// at all, IPOP (every restart doubles the population) or BIPOP (large- and small-population
// restarts alternate).
enum class CmaesRestartStrategy { kNone, kIpop, kBipop };
// "none", "ipop", "bipop".
std::string_view ToString(CmaesRestartStrategy strategy);
// Those names, case-insensitive; std::nullopt for anything else.
std::optional<CmaesRestartStrategy> ParseCmaesRestartStrategy(std::string_view text);

// optimization.nlsq.cmaes (docs/configuration.md, Global phase): CMA-ES over the projected chi2 in
// the unit box of the physical parameters (pagmo2), then the local fit.
struct CmaesSearchOptions {
  bool enable = false;  // selects CMA-ES as the global method
  CmaesPreset preset = CmaesPreset::kCmaesGlobal;
  std::optional<int> max_generations;  // per run; null = the preset's
  std::optional<int> popsize;          // first run's population; null = 4 + 3 ln(dimension)
  double sigma = 0.5;                  // initial step in unit coordinates, > 0
  double sigma_warmstart = 0.05;       // step of the warm run from the screened start, > 0
  double tol_fun = 1e-8;               // > 0
  double tol_x = 1e-8;                 // > 0
  CmaesRestartStrategy restart_strategy = CmaesRestartStrategy::kBipop;
  std::optional<int> max_restarts;  // null = the preset's
  bool refine_with_nlsq = true;  // false: report CMA-ES's best point, refined only by the final fit
};

// A method of the global phase before the local fit (global_search.h): kAuto the staged grid plus
// sampled starts, kOff none, kMultiStart and kCmaes the reference's methods with their sections'
// keys. optimization.nlsq.global_search.method and --global-search ask for one; ResolveConfig
// settles the one that runs (GlobalSearchOptions::method): a kAuto asked for by the config gives
// way to multi_start.enable or cmaes.enable, a kAuto settled on is the staged search.
enum class GlobalSearchMethod { kAuto, kOff, kMultiStart, kCmaes };
// "auto", "off", "multi_start", "cmaes": the config's spellings, also those of the result files,
// the logs and the checkpoint identity.
std::string_view ToString(GlobalSearchMethod method);
// The config's spelling, case-insensitive; std::nullopt for any other name. (--global-search has
// its own: ConfigOverrides::global_search.)
std::optional<GlobalSearchMethod> ParseGlobalSearchMethod(std::string_view text);

// optimization.nlsq.global_search (homodyne-cpp; docs/design.md section 4b): the global phase
// before the local fit. Default on: laminar-flow fits have a wide false "no flow" minimum.
struct GlobalSearchOptions {
  // auto: staged grid + sampled starts, screened (our default; measured in docs/performance.md).
  // off: the local fit from initial_parameters only. multi_start | cmaes: that method with its
  // section's keys. With method auto, multi_start.enable or cmaes.enable select that method
  // (cmaes first, as the reference).
  // As the config file asks; after ResolveConfig, the method that runs (--global-search first,
  // then the config's method, cmaes.enable, multi_start.enable, else auto).
  GlobalSearchMethod method = GlobalSearchMethod::kAuto;
  bool method_from_config = false;  // true when the config set method
  // Why `method` runs, set by ResolveConfig (written to the results' global_search.reason), e.g.
  // "--global-search cmaes" or "optimization.nlsq.multi_start.enable = true".
  std::string method_reason;
  // Points the search evaluates: above this the search runs on a row subsample (every s-th row
  // of each angle's upper triangle); the chosen minimum is always refined on all the data.
  int64_t max_points = 1000000;  // >= 1000
};

// The local optimiser of the standard strategy (optimization.nlsq.solver, --solver), and which
// optimiser wrote a LevenbergMarquardtState (levenberg_marquardt.h; a state resumes only with the
// optimiser that wrote it): the LM core (Minimize, levenberg_marquardt.h) or the Ceres standard fit
// (ceres_standard_fit.h).
enum class LmSolver { kLmCore, kCeres };
// "lm" and "ceres": the spellings of optimization.nlsq.solver and of a checkpoint's /lm/solver.
std::string_view ToString(LmSolver solver);
// Case-insensitive; std::nullopt for an unknown name.
std::optional<LmSolver> ParseLmSolver(std::string_view text);

// What a result's uncertainties are (optimization.nlsq.uncertainty, --uncertainty; docs/results.md,
// What the uncertainties mean):
//   kAuto (default): kJackknife where the residuals are correlated along frames (a correlator's
//     output, a model that misses a feature), kStandard where they are not (ResidualsUncorrelated
//     in src/pipeline/fit_uncertainty.h): there both are right on average and the standard error
//     scatters less from one data set to the next;
//   kJackknife: the frame-block jackknife, right for noise correlated along frames as a
//     correlator's output is, and for independent noise;
//   kStandard: the statistical standard error of independent noise, s^2 (J^T J)^-1 over the
//     stored points (the reference's value times about sqrt(2));
//   kCurvature: the reference's value, s^2 (J^T J)^-1 with both triangles counted.
enum class UncertaintyMethod { kAuto, kJackknife, kStandard, kCurvature };
// "auto", "jackknife", "standard", "curvature".
std::string_view ToString(UncertaintyMethod method);
std::optional<UncertaintyMethod> ParseUncertaintyMethod(std::string_view text);

// "linear", "soft_l1", "huber", "cauchy", "arctan" (scipy's names; robust_loss.h).
std::string_view ToString(LossFunction function);
// Case-insensitive; std::nullopt for an unknown name.
std::optional<LossFunction> ParseLossFunction(std::string_view text);

// optimization.nlsq.anti_degeneracy.per_angle_mode as the config asks for it; ResolvePerAngleMode
// (per_angle_mode.h) turns it into the PerAngleMode a fit uses for its number of angles.
enum class PerAngleModeRequest { kIndividual, kConstant, kAuto, kFourier };
// "individual", "constant", "auto", "fourier".
std::string_view ToString(PerAngleModeRequest mode);
// Case-insensitive, and the reference's "fixed_constant" reads as kConstant; std::nullopt for
// any other name ("auto_averaged" included: that is what auto resolves to).
std::optional<PerAngleModeRequest> ParsePerAngleModeRequest(std::string_view text);

// optimization.nlsq (and its anti_degeneracy part)
struct NlsqOptions {
  int max_iterations = 100;  // optimization.nlsq.max_iterations, > 0
  double tolerance = 1e-8;   // ftol: relative chi2 change (`tolerance` or `ftol`), > 0
  double xtol = 1e-8;        // relative step, > 0
  double gtol = 1e-8;        // scaled gradient, > 0
  double sigma = 0.01;       // per-point noise when the data has none, > 0
  // optimization.nlsq.sigma: auto. Fit (fit.h) runs a first fit at `sigma`, estimates the noise
  // from its residuals, sqrt(chi2 / dof) at sigma 1, and fits again at that sigma from the first
  // fit's minimum (docs/results.md, Noise sigma).
  bool sigma_auto = false;
  // optimization.nlsq.loss (linear | soft_l1 | huber | cauchy | arctan) and f_scale (> 0): the
  // loss of the fit's local minimisation, on r = (data - c2) / sigma (docs/model.md, Robust loss).
  // linear (the default here; the reference's is soft_l1) is the plain chi2.
  LossOptions loss;
  // optimization.nlsq.x_scale as written ("jac", a number > 0 or a list of numbers > 0): accepted
  // and checked; it changes no step, because the LM core's damping is Marquardt-scaled by
  // diag(J^T J), i.e. scipy's x_scale = 'jac' (docs/configuration.md, Fit (optimization.nlsq)).
  std::string x_scale = "jac";
  bool anti_degeneracy_enabled = true;  // anti_degeneracy.enable
  // individual | constant | auto | fourier (the reference's fixed_constant reads as constant)
  PerAngleModeRequest per_angle_mode = PerAngleModeRequest::kIndividual;
  int constant_scaling_threshold = 3;       // anti_degeneracy.constant_scaling_threshold, >= 1
  int fourier_order = 2;                    // anti_degeneracy.fourier_order, >= 1
  bool per_angle_mode_from_config = false;  // true when the config set per_angle_mode
  // Variable projection of contrast and offset (docs/design.md section 4b): local fits search only
  // the physical parameters, each evaluated with its best per-angle scaling; the result is then
  // refined on the full problem. optimization.nlsq.variable_projection.
  bool variable_projection = true;
  // Local optimiser of the standard strategy: lm (our core; 12x faster than Ceres on 7.5e5 points,
  // same optimum) or ceres (Ceres DENSE_QR: the independent cross-check, and a second opinion on
  // ill-conditioned problems). optimization.nlsq.solver. The other strategies always use lm.
  LmSolver solver = LmSolver::kLmCore;
  // docs/design.md section 4: ftol/xtol may stop a fit only when the Gauss-Newton step is at most
  // this many standard errors. optimization.nlsq.statistical_tolerance, >= 0 (0 disables).
  double statistical_tolerance = 1e-3;
  // The profile check of the uncertainties (docs/results.md, What the uncertainties mean):
  // optimization.nlsq.profile_check, true or false; absent (nullopt) = the mode's default (on for
  // two_component, off for the homodyne modes, where it costs as much as the rest of a fit).
  std::optional<bool> profile_check;
  // optimization.nlsq.uncertainty (UncertaintyMethod above).
  UncertaintyMethod uncertainty = UncertaintyMethod::kAuto;
  // optimization.nlsq.profile_intervals (--profile-intervals): each physical parameter's 68 % and
  // 95 % profile-likelihood intervals after the fit (docs/results.md, Profile intervals); off by
  // default: each end costs a few refits of all the data.
  bool profile_intervals = false;
  GlobalSearchOptions global_search;
  MultiStartOptions multi_start;
  CmaesSearchOptions cmaes;
};

// optimization.streaming (also accepted under optimization.nlsq.streaming; per key,
// optimization.streaming wins and a differing value elsewhere is a warning)
struct StreamingOptions {
  bool enable_checkpoints = true;
  std::string checkpoint_dir = "./checkpoints";
  int checkpoint_frequency = 10;  // batches between checkpoints, > 0
  // ... and at least this many seconds between periodic checkpoints, >= 0. A batch takes about a
  // millisecond here (seconds in the reference), so batches alone would save hundreds of times a
  // second; interruption and failure saves are never held back.
  double checkpoint_min_interval_seconds = 5.0;
  bool resume_from_checkpoint = true;
  int keep_last_checkpoints = 3;  // >= 1
  bool enable_fault_tolerance = true;
  int max_retries_per_batch = 2;      // >= 0
  double min_success_rate = 0.5;      // in [0, 1]
  std::optional<int64_t> batch_size;  // points per batch; null = auto (docs/design.md section 3)
  bool enable_compression = true;     // deflate inside checkpoints
};

// What computes a fit's passes (performance.backend, --backend; docs/design.md section 5).
// SelectBackend (backend.h) resolves it: auto means cuda when it can run, else cpu (with the
// reason logged).
enum class BackendKind { kAuto, kCpu, kCuda };
// "auto", "cpu", "cuda".
std::string_view ToString(BackendKind kind);
// Case-insensitive; std::nullopt for an unknown name.
std::optional<BackendKind> ParseBackendKind(std::string_view text);

// performance
struct PerformanceOptions {
  std::optional<StrategyKind> strategy_override;  // performance.strategy_override
  // performance.memory_limit_gb, > 0; after ResolveConfig, --memory-limit-gb (Python's
  // memory_limit_gb=) when given. Either wins over HOMODYNE_MEMORY_LIMIT and the system's.
  std::optional<double> memory_limit_gb;
  bool memory_limit_from_command_line = false;  // memory_limit_gb is the shell's, not the file's
  bool fast_mode = false;                       // performance.fast_mode (or top-level fast_mode)
  BackendKind backend = BackendKind::kCpu;      // performance.backend: cpu | cuda | auto
  // performance.gpu_devices: the CUDA devices the cuda backend computes on (indices as the CUDA
  // runtime numbers them, distinct, >= 0); empty (the key absent or null) = every visible device.
  std::vector<int> gpu_devices;
  std::optional<int> cpu_threads;  // performance.computation.cpu_threads; null/auto = all cores
  bool enable_progress = true;     // performance.enable_progress
};

// logging.performance (docs/configuration.md, Performance log): a timestamped log of passes,
// checkpoint saves, global-search stages, final-fit iterations and the total, written to <output
// folder>/filename by the CLI and the Python module (src/pipeline/performance_log.h). Severity of
// a line: DEBUG (every chunk of a pass, every global-search step), INFO (passes, checkpoint saves,
// stages, phases, iterations, the total), WARNING (operations slower than threshold_seconds,
// written whatever the level). A level writes its lines and those above it.
enum class PerformanceLogLevel { kDebug, kInfo, kWarning };
// "DEBUG", "INFO" or "WARNING".
const char* ToString(PerformanceLogLevel level);

struct PerformanceLogOptions {
  bool enabled = false;                                    // logging.performance.enabled
  PerformanceLogLevel level = PerformanceLogLevel::kInfo;  // DEBUG | INFO | WARNING
  // Inside the output folder: a file name or a relative path (not absolute, no '..').
  std::string filename = "performance.log";
  // Operations (chunks, passes, checkpoint saves, global-search steps, iterations) slower than
  // this get a "[WARNING] slow:" line, >= 0 [s]; 0 marks every operation.
  double threshold_seconds = 0.1;
};

// logging (only logging.performance is read; the rest is accepted, see docs/configuration.md)
struct LoggingOptions {
  PerformanceLogOptions performance;
};

// simulation: (homodyne-simulate only)
// The range of simulation.frames and of homodyne-simulate --frames: at least 3 (the fitted grid
// drops frame 0 and needs 2 times), at most 1e6.
inline constexpr int kMinSimulationFrames = 3;
inline constexpr int kMaxSimulationFrames = 1000000;

struct SimulationOptions {
  bool present = false;  // the config has a simulation section
  std::string output = "simulated_xpcs.h5";
  FileLayout format = FileLayout::kApsU;  // aps_u | aps_old
  int frames = 500;  // frames in the file, kMinSimulationFrames to kMaxSimulationFrames
  std::vector<double> phi_angles_degrees = {0.0, 45.0, 90.0};
  std::vector<double>
      physical_parameters;  // model order; from `parameters` (map by name), defaults below
  std::vector<double> contrast = {0.3};  // one value, or one per angle
  std::vector<double> offset = {1.0};    // one value, or one per angle
  double noise_sigma = 0.0;              // Gaussian noise added to each stored value, >= 0
  // "gaussian" (noise_sigma per stored value) or "speckle": pixel intensities whose field
  // correlation is the model's g1, correlated as a correlator's output (io/speckle_simulation.h).
  std::string noise_model = "gaussian";
  int pixels = 1000;  // speckle: pixels averaged per angle, 1 to 1e6
  int modes = 1;      // speckle: incoherent modes per pixel (raw contrast 1 / modes), 1 to 100
  uint64_t seed = 42;
  std::string dtype = "float32";     // float32 | float64
  std::string compression = "none";  // none | gzip | lzf
};

struct Config {
  std::string source_path;  // file it was loaded from ("" if from text)
  AnalysisMode analysis_mode = AnalysisMode::kLaminarFlow;
  ScatteringGeometry geometry;  // analyzer_parameters: dt, scattering.wavevector_q (as q target),
                                // geometry.stator_rotor_gap
  DataSelection data;           // experimental_data + analyzer_parameters + phi_filtering
  std::vector<ParameterBound> bounds;  // every parameter of the mode plus contrast and offset
  InitialParameterOptions initial;
  NlsqOptions nlsq;
  StreamingOptions streaming;
  PerformanceOptions performance;
  LoggingOptions logging;
  SimulationOptions simulation;
  std::vector<std::string> warnings;  // unknown keys (with the closest known key), deprecated keys
  // The YAML paths of unknown keys whose value is a mapping (a misspelt section: every key in it
  // is ignored); each also has its warning. homodyne-config --validate fails on any.
  std::vector<std::string> unknown_sections;
  // The keys of the file that are accepted and have no effect here (docs/configuration.md,
  // Accepted but not used; the documentation-only keys left out), in file order; a section
  // whose every key has no effect as "path.*". Listed by --validate, the dry run and the run log.
  std::vector<std::string> ignored_keys;
  // Where the frame time data.dt_seconds came from: its YAML path, or "" when the config gives
  // none (the default 0.001 s; beamline files carry no frame time). Shown by --validate and the
  // dry run, so that a default dt is never missed.
  std::string dt_source;

  // The bound for a canonical parameter name; throws ConfigError if absent.
  const ParameterBound& BoundOf(const std::string& name) const;
};

// A config file as read, before anything is parsed: ResolveConfig turns it into a Config.
struct ConfigSource {
  std::string yaml_text;
  std::string name;  // names the config in messages: the file path, or a name for the text
  std::string path;  // the file it was read from; "" when given as text (Config::source_path)
};

// What a shell sets over the config file: the `homodyne` flags (README.md, Programs; the
// reference's NLSQ flags and ours) and the Python module's keyword options. A set field replaces
// the file's value; ResolveConfig applies the analysis mode before it builds anything that depends
// on the mode, the rest after.
struct ConfigOverrides {
  std::optional<AnalysisMode> analysis_mode;  // --static-mode, --laminar-flow, --mode
  std::optional<std::string> data_file;       // --data-file
  std::optional<int> max_iterations;          // --max-iterations, max_iterations=; > 0
  std::optional<double> tolerance;            // --tolerance (optimization.nlsq.tolerance); > 0
  // A start value of one physical parameter (--initial-*, Python's initial_params).
  struct InitialValue {
    std::string name;    // canonical name or alias, e.g. "gamma_dot_t_offset"
    double value = 0.0;  // in the parameter's unit; finite
    std::string origin;  // as the user wrote it, for messages: "--initial-phi0"
  };
  std::vector<InitialValue> initial_values;  // applied in order (a later one wins)
  // --phi: the angles to fit [degrees], each within 1 degree of a file angle; replaces
  // phi_filtering (DataSelection::phi_selected_degrees). Empty: not given. Finite.
  std::vector<double> phi_angles;
  // --multistart-n: optimization.nlsq.multi_start.n_starts, and the multi-start method unless
  // --global-search names another (then a UsageError); 1 .. 100000.
  std::optional<int> multi_start_n;
  std::optional<int> cpu_threads;       // --threads, threads=; >= 1
  std::optional<std::string> strategy;  // --strategy: standard | large | chunked | streaming
  std::optional<std::string> backend;   // --backend: cpu | cuda | auto
  std::optional<std::string> solver;    // --solver: lm | ceres
  std::optional<std::string>
      uncertainty;  // --uncertainty, uncertainty=: jackknife | standard | curvature
  std::optional<bool> profile_intervals;      // --profile-intervals
  std::optional<bool> fast_mode;              // --fast-mode, fast_mode=
  std::optional<bool> variable_projection;    // false: --no-variable-projection
  std::optional<std::string> checkpoint_dir;  // --checkpoint-dir, checkpoint_dir=; non-empty
  std::optional<bool> enable_checkpoints;     // Python's checkpoints=
  std::optional<int> checkpoint_frequency;    // --checkpoint-frequency [batches]; > 0
  std::optional<double> checkpoint_min_interval_seconds;  // --checkpoint-min-interval; >= 0
  std::optional<bool> resume_from_checkpoint;             // --resume / --no-resume, resume=
  // --memory-limit-gb, memory_limit_gb=: replaces performance.memory_limit_gb and is reported as
  // "--memory-limit-gb"; > 0 (the rules of every field here: CheckOverrides, override_checks.h).
  std::optional<double> memory_limit_gb;
  // --global-search, global_search=: auto, off, multi-start (or multi_start), cmaes, case as
  // written; empty = not given. Wins over the config's method; any other text is a UsageError
  // (CheckOverrides) naming the override: "must be one of auto, off, multi-start, cmaes".
  std::optional<std::string> global_search;
};

// Reads a config file; nothing is parsed yet. Throws InputError (missing, a folder, unreadable).
ConfigSource ReadConfigFile(const std::string& path);

// The config a fit runs with, resolved once at the boundary (the CLI and the Python module both
// call this): `source` parsed and validated for the final analysis mode (overrides.analysis_mode,
// else the file's), so that bounds, default initial values, custom starts and the names of the
// other mode that are dropped are those of that mode; then the other overrides applied, with
// string values parsed (strategy, backend, solver), and the global-search method settled
// (GlobalSearchOptions::method and method_reason). Throws ConfigError / InputError for the file
// (message names file, YAML path, value and rule), UsageError for an override that breaks a rule
// or does not fit the mode (the message names it as the user wrote it).
Config ResolveConfig(const ConfigSource& source, const ConfigOverrides& overrides = {});

// ResolveConfig(ReadConfigFile(path)): reads and validates a config file without overrides.
Config LoadConfig(const std::string& path);
// ResolveConfig of YAML text without overrides; source_name is used in messages.
Config ParseConfig(const std::string& yaml_text, const std::string& source_name);

// A few lines for logs and `homodyne-config --validate`: mode, data file, q, dt, L, frame window,
// phi filtering, NLSQ settings, strategy, backend, memory limit, checkpoints.
std::string BriefReport(const Config& config);

// One line naming Config::ignored_keys ("accepted and ignored (...): a, b.*"), "" when none.
std::string IgnoredKeysText(const Config& config);

// "linear loss (...)" or "soft_l1 loss, f_scale 2 (...)": what a fit minimises, for --validate,
// the dry run and the printed result.
std::string LossText(const LossOptions& loss);

// Where the frame time comes from, for --validate and the dry run: "(analyzer_parameters.dt)",
// or, when the config gives none, a sentence saying that the default is used and that beamline
// files carry no frame time.
std::string DtSourceNote(const Config& config);

// A documented template (our text: every key explained with its default) for the mode.
std::string ConfigTemplate(AnalysisMode mode);

// Maps a parameter alias to its canonical name (gamma_dot_0 -> gamma_dot_t0, phi_0 -> phi0, ...).
std::string CanonicalParameterName(const std::string& name);

}  // namespace homodyne
