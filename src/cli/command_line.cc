#include "command_line.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "homodyne/backend.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "homodyne/override_checks.h"
#include "homodyne/results.h"

namespace homodyne::cli {
namespace {

constexpr const char* kExitCodesHelp =
    "Exit codes:\n"
    "  0  finished\n"
    "  1  bad input or failure (the message says what and where)\n"
    "  2  bad command-line usage\n"
    "  3  interrupted, checkpoint saved (run again to resume)\n"
    "The successor's (xpcsjax) 2, not converged, is 0 here (convergence_status max_iterations)\n"
    "or 1 (failed); its 130, interrupted, is 3 (docs/results.md, Convergence status).\n";

// Adds an optional<T> option: set only when the flag is given.
template <typename T>
CLI::Option* AddOptional(CLI::App& app, const std::string& name, std::optional<T>& target,
                         const std::string& help) {
  return app
      .add_option_function<T>(
          name, [&target](const T& value) { target = value; }, help)
      ->type_name(std::is_same_v<T, std::string> ? "TEXT"
                  : std::is_integral_v<T>        ? "INT"
                                                 : "FLOAT");
}

// One --initial-* flag: its names (CLI11 spelling, a comma between aliases), the parameter it
// starts (canonical name, mode_catalog.cc) and its help. Matched in any case (--initial-D0, the
// successor's spelling, is --initial-d0).
struct InitialFlag {
  const char* names;
  const char* parameter;
  const char* help;
};
constexpr InitialFlag kInitialFlags[] = {
    {"--initial-d0", "D0", "Initial D0 [A^2/s] (> 0)"},
    {"--initial-alpha", "alpha", "Initial alpha"},
    {"--initial-d-offset", "D_offset", "Initial D_offset [A^2/s]"},
    {"--initial-gamma-dot-t0", "gamma_dot_t0", "Initial gamma_dot_t0 [1/s]"},
    {"--initial-beta", "beta", "Initial beta"},
    {"--initial-gamma-dot-offset,--initial-gamma-dot-t-offset", "gamma_dot_t_offset",
     "Initial gamma_dot_t_offset [1/s]"},
    {"--initial-phi0", "phi0", "Initial phi0 [degrees]"},
    // two_component (the successor's parameters; docs/model.md, Modes).
    {"--initial-d0-ref", "D0_ref", "Initial D0_ref [A^2/s] (two_component)"},
    {"--initial-alpha-ref", "alpha_ref", "Initial alpha_ref (two_component)"},
    {"--initial-d-offset-ref", "D_offset_ref", "Initial D_offset_ref [A^2/s] (two_component)"},
    {"--initial-d0-sample", "D0_sample", "Initial D0_sample [A^2/s] (two_component)"},
    {"--initial-alpha-sample", "alpha_sample", "Initial alpha_sample (two_component)"},
    {"--initial-d-offset-sample", "D_offset_sample",
     "Initial D_offset_sample [A^2/s] (two_component)"},
    {"--initial-v0", "v0", "Initial v0 [A/s] (two_component)"},
    {"--initial-v-beta", "v_beta", "Initial v_beta (two_component)"},
    {"--initial-v-offset", "v_offset", "Initial v_offset [A/s] (two_component)"},
    {"--initial-f0", "f0", "Initial f0 (two_component)"},
    {"--initial-f1", "f1", "Initial f1 [1/s] (two_component)"},
    {"--initial-f2", "f2", "Initial f2 [s] (two_component)"},
    {"--initial-f3", "f3", "Initial f3 (two_component)"},
    {"--initial-phi0-het", "phi0_het", "Initial phi0_het [degrees] (two_component)"},
};

// The flag as messages name it: its first name.
std::string FirstName(const char* names) {
  const std::string text(names);
  return text.substr(0, text.find(','));
}

// The flags only the program has (the fit's own options go through CheckOverrides, shared with
// the Python module); throws UsageError naming the flag and the rule.
void ValidateProgramFlags(const CommandLineOptions& options) {
  if (options.output_format && !ParseOutputFormat(*options.output_format)) {
    throw UsageError("--output-format " + *options.output_format +
                     ": must be one of yaml, json, npz, both");
  }
  if (options.q_index && *options.q_index < 0) {
    throw UsageError("--q-index " + std::to_string(*options.q_index) + ": must be >= 0");
  }
  if (options.q_index && options.q_summary_only) {
    throw UsageError("--q-index and --q-summary: give one (--q-summary fits nothing)");
  }
}

}  // namespace

std::optional<OutputFormat> ParseOutputFormat(const std::string& text) {
  if (text == "npz") return OutputFormat{std::nullopt, true};
  if (text == "both") return OutputFormat{LegacySummaryFormat::kJson, true};
  if (const auto summary = ParseLegacySummaryFormat(text)) return OutputFormat{summary, false};
  return std::nullopt;
}

std::optional<CommandLineOptions> ParseCommandLine(int argc, char** argv) {
  CommandLineOptions options;
  CLI::App app{
      "homodyne: fit the homodyne XPCS model to two-time correlation data (NLSQ).\n"
      "Reads the homodyne YAML config and beamline HDF5 files (APS-U, APS-old)."};
  app.footer(kExitCodesHelp);
  // "without CUDA" until CUDA kernels exist: slurm/homodyne_gpu.sbatch reads it. Computed only
  // for --version: an invalid HOMODYNE_ISA is then an error (exit 1), and --help still works.
  app.set_version_flag("--version", [] {
    return std::string("homodyne-cpp ") + HOMODYNE_VERSION + " (" + BackendBuildDescription() +
           "; " + CpuKernelDescription() + ")";
  });

  app.add_option("--config", options.config_path, "YAML config file")
      ->capture_default_str()
      ->each([&options](const std::string&) { options.config_path_given = true; });
  app.add_option("--output-dir", options.output_dir, "Results folder")->capture_default_str();
  app.add_option("--method", options.method, "Fitting method (this engine: nlsq)")
      ->check(CLI::IsMember({"nlsq"}))
      ->capture_default_str();
  AddOptional(app, "--data-file", options.data_file, "HDF5 data file (overrides the config)");
  auto* static_flag = app.add_flag("--static-mode", options.static_mode, "Force static mode");
  auto* laminar_flag =
      app.add_flag("--laminar-flow", options.laminar_flow, "Force laminar_flow mode")
          ->excludes(static_flag);
  // Any analysis mode name or alias of the mode catalog (as homodyne-config --mode).
  const CLI::Validator known_mode(
      [](std::string& text) -> std::string {
        try {
          ParseAnalysisMode(text);
        } catch (const Error&) {
          return "'" + text + "' is not an analysis mode (one of " + AnalysisModeNames() + ")";
        }
        return "";
      },
      "MODE");
  AddOptional(app, "--mode", options.mode,
              "Force the analysis mode: one of " + AnalysisModeNames() +
                  " (the successor's spelling of --static-mode / --laminar-flow)")
      ->check(known_mode)
      ->excludes(static_flag)
      ->excludes(laminar_flag);
  app.add_option("--phi", options.phi,
                 "Fit only these angles [degrees] (e.g. --phi 0 45, or --phi 0,45): each must "
                 "lie within 1 degree of an angle of the file; replaces phi_filtering")
      ->delimiter(',')
      ->expected(1, -1)
      ->type_name("FLOAT");
  AddOptional(app, "--multistart-n", options.multistart_n,
              "Multi-start search with N sampled starts (optimization.nlsq.multi_start.n_starts; "
              "selects --global-search multi-start)");
  AddOptional(app, "--max-iterations", options.max_iterations,
              "optimization.nlsq.max_iterations (> 0)");
  AddOptional(app, "--tolerance", options.tolerance, "optimization.nlsq.tolerance (> 0)");
  for (const InitialFlag& flag : kInitialFlags) {
    app.add_option_function<double>(
           flag.names,
           [&options, parameter = std::string(flag.parameter)](const double& value) {
             options.initial_values[parameter] = value;
           },
           flag.help)
        ->type_name("FLOAT")
        ->ignore_case();
  }
  app.add_flag("--save-plots", options.save_plots,
               "Save one PNG per angle (data | fit | residual)");
  AddOptional(app, "--output-format", options.output_format,
              "Also write the reference's legacy summary OUTPUT_DIR/homodyne_results.yaml | "
              ".json, or (npz) OUTPUT_DIR/nlsq/fitted_data.npz, the successor's arrays; both: "
              "json and npz (default: none; the results are in OUTPUT_DIR/nlsq/)");
  auto* verbose = app.add_flag("-v,--verbose", options.verbosity, "More log output (repeatable)");
  app.add_flag("--quiet", options.quiet, "Only warnings and errors")->excludes(verbose);
  AddOptional(app, "--threads", options.threads, "CPU threads (default: all cores)");
  AddOptional(app, "--strategy", options.strategy,
              "Force a strategy: standard | large | chunked | streaming");
  AddOptional(app, "--memory-limit-gb", options.memory_limit_gb,
              "Memory the run may use [GB] (default: performance.memory_limit_gb, "
              "HOMODYNE_MEMORY_LIMIT, else what the OS allows)");
  AddOptional(app, "--backend", options.backend, "Compute backend: cpu | cuda | auto");
  AddOptional(app, "--checkpoint-dir", options.checkpoint_dir, "Checkpoint folder");
  AddOptional(app, "--checkpoint-frequency", options.checkpoint_frequency,
              "Batches between checkpoints (> 0)");
  AddOptional(app, "--checkpoint-min-interval", options.checkpoint_min_interval,
              "Seconds at least between periodic checkpoints (>= 0, default 5)");
  bool resume_flag = false;
  bool no_resume_flag = false;
  auto* resume = app.add_flag("--resume", resume_flag, "Resume from a valid checkpoint (default)");
  app.add_flag("--no-resume", no_resume_flag, "Start fresh, ignoring checkpoints")
      ->excludes(resume);
  app.add_flag("--fast-mode", options.fast_mode,
               "Skip numerical validation checks (keeps recovery and checkpoints)");
  app.add_option("--global-search", options.global_search,
                 "Global phase before the local fit: auto (default) | off | multi-start | cmaes "
                 "(optimization.nlsq.global_search.method)")
      ->check(CLI::IsMember({"auto", "off", "multi-start", "cmaes"}));
  app.add_flag("--no-variable-projection", options.no_variable_projection,
               "Local fits move contrast and offset with the physical parameters instead of "
               "solving them per angle (optimization.nlsq.variable_projection: false)");
  app.add_option("--solver", options.solver,
                 "Local optimiser of the standard strategy: lm (the LM core, default) | ceres "
                 "(the cross-check; optimization.nlsq.solver)")
      ->check(CLI::IsMember({"lm", "ceres"}));
  app.add_option("--uncertainty", options.uncertainty,
                 "What the uncertainties are: auto (default: jackknife where the residuals are "
                 "correlated along frames, else standard) | jackknife (frame blocks) | standard "
                 "(independent noise) | curvature (the reference's numbers; "
                 "optimization.nlsq.uncertainty)")
      ->check(CLI::IsMember({"auto", "jackknife", "standard", "curvature"}));
  app.add_flag("--profile-intervals", options.profile_intervals,
               "Profile-likelihood 68 % and 95 % intervals of each physical parameter after the "
               "fit (optimization.nlsq.profile_intervals; a few refits per interval end)");
  AddOptional(app, "--q-index", options.q_index,
              "Of several q rings fitted independently, fit ring K alone (0-based; a SLURM "
              "array task: --q-index $SLURM_ARRAY_TASK_ID)");
  app.add_flag("--q-summary", options.q_summary_only,
               "Of several q rings fitted independently, only write OUTPUT_DIR/nlsq/q_summary.json "
               "and .csv from the rings' result folders (after a SLURM array)");
  app.add_flag("--dry-run", options.dry_run,
               "Load config and data, print a summary and the memory each strategy needs; no fit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {
    app.exit(success);  // prints --help / --version
    return std::nullopt;
  } catch (const CLI::ParseError& error) {
    throw UsageError(error.what());
  }
  if (resume_flag) options.resume = true;
  if (no_resume_flag) options.resume = false;
  // Flag values that need no config, before anything is read (exit code 2): the library's check,
  // which ResolveConfig also runs on the Python module's options.
  CheckOverrides(OverridesFromCommandLine(options), OverrideSpelling::kCommandLine);
  ValidateProgramFlags(options);
  return options;
}

ConfigOverrides OverridesFromCommandLine(const CommandLineOptions& options) {
  ConfigOverrides overrides;
  if (options.static_mode) overrides.analysis_mode = AnalysisMode::kStatic;
  if (options.laminar_flow) overrides.analysis_mode = AnalysisMode::kLaminarFlow;
  overrides.data_file = options.data_file;
  overrides.max_iterations = options.max_iterations;
  overrides.tolerance = options.tolerance;
  if (options.mode) overrides.analysis_mode = ParseAnalysisMode(*options.mode);
  overrides.phi_angles = options.phi;
  overrides.multi_start_n = options.multistart_n;
  for (const InitialFlag& flag : kInitialFlags) {
    const auto given = options.initial_values.find(flag.parameter);
    if (given != options.initial_values.end()) {
      overrides.initial_values.push_back({flag.parameter, given->second, FirstName(flag.names)});
    }
  }
  overrides.cpu_threads = options.threads;
  overrides.strategy = options.strategy;
  overrides.memory_limit_gb = options.memory_limit_gb;
  overrides.backend = options.backend;
  overrides.checkpoint_dir = options.checkpoint_dir;
  overrides.checkpoint_frequency = options.checkpoint_frequency;
  overrides.checkpoint_min_interval_seconds = options.checkpoint_min_interval;
  overrides.resume_from_checkpoint = options.resume;
  if (options.fast_mode) overrides.fast_mode = true;
  overrides.global_search = options.global_search;
  if (options.no_variable_projection) overrides.variable_projection = false;
  overrides.solver = options.solver;
  overrides.uncertainty = options.uncertainty;
  if (options.profile_intervals) overrides.profile_intervals = true;
  return overrides;
}

}  // namespace homodyne::cli
