// homodyne_cpp: the Python module (docs/python.md). A thin shell over the library's Fit
// (include/homodyne/fit.h), shaped after the reference package's notebook API: load_config,
// load_xpcs_data, fit_nlsq, compute_c2. Errors of the C++ side arrive as Python exceptions with
// the same message; the GIL is released while fitting; Ctrl-C stops a fit cleanly
// (KeyboardInterrupt, after a checkpoint when checkpoints are on).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/interrupts.h"
#include "homodyne/model.h"
#include "homodyne/results.h"

namespace py = pybind11;

namespace homodyne::python {
namespace {

using DoubleArray = py::array_t<double, py::array::c_style>;

// The model c2 on evaluation's whole grid for each angle: (n_phi, n_t, n_t), angle k with
// contrasts[k] and offsets[k] (no diagonal correction).
DoubleArray ModelMatrices(const ModelEvaluation& evaluation, const std::vector<double>& phi,
                          const std::vector<double>& contrasts, const std::vector<double>& offsets) {
  const auto n = static_cast<py::ssize_t>(evaluation.model().num_times());
  DoubleArray c2({static_cast<py::ssize_t>(phi.size()), n, n});
  for (size_t k = 0; k < phi.size(); ++k) {
    evaluation.ComputeC2Matrix(
        phi[k], contrasts[k], offsets[k],
        std::span<double>(c2.mutable_data(static_cast<py::ssize_t>(k)), static_cast<size_t>(n * n)));
  }
  return c2;
}

// A fit's outcome with the data it needs to evaluate the fitted model.
struct NlsqResult {
  FitOutcome outcome;
  std::vector<double> phi_degrees;

  DoubleArray Physical(bool uncertainties) const {
    std::vector<double> values;
    for (const ParameterEstimate& p : outcome.result.physical) {
      values.push_back(uncertainties ? p.uncertainty : p.value);
    }
    return DoubleArray(static_cast<py::ssize_t>(values.size()), values.data());
  }
  DoubleArray PerAngle(bool contrast, bool uncertainties) const {
    std::vector<double> values;
    for (const AngleScaling& angle : outcome.result.per_angle) {
      const ParameterEstimate& p = contrast ? angle.contrast : angle.offset;
      values.push_back(uncertainties ? p.uncertainty : p.value);
    }
    return DoubleArray(static_cast<py::ssize_t>(values.size()), values.data());
  }
  DoubleArray Covariance() const {
    const auto n = static_cast<py::ssize_t>(outcome.result.covariance_names.size());
    DoubleArray matrix({n, n});
    std::copy(outcome.result.covariance.begin(), outcome.result.covariance.end(),
              matrix.mutable_data());
    return matrix;
  }
  // c2 of the fitted model on the fitted grid, every angle: (n_phi, n_t, n_t).
  DoubleArray FittedC2() const {
    std::vector<double> phi, contrasts, offsets;
    for (const AngleScaling& angle : outcome.result.per_angle) {
      phi.push_back(angle.phi_degrees);
      contrasts.push_back(angle.contrast.value);
      offsets.push_back(angle.offset.value);
    }
    return ModelMatrices(ModelEvaluation(*outcome.model, outcome.physical), phi, contrasts,
                         offsets);
  }
};

// The c2_exp array of a data dict as an in-memory source, without a copy. Raises TypeError /
// ValueError naming what is wrong.
struct ArrayInput {
  py::array values;  // kept alive while the source is used
  std::unique_ptr<BatchSource> source;
};

ArrayInput SourceFromDict(const py::dict& data, const Config& config) {
  if (!data.contains("c2_exp")) {
    throw py::value_error("data has no 'c2_exp': give a dict as load_xpcs_data returns "
                          "(c2_exp, t1, phi_angles_list, wavevector_q_list)");
  }
  py::array c2 = py::reinterpret_borrow<py::array>(py::array::ensure(data["c2_exp"]));
  if (!c2) throw py::type_error("data['c2_exp'] is not an array");
  const bool float32 = py::isinstance<py::array_t<float>>(c2);
  const bool float64 = py::isinstance<py::array_t<double>>(c2);
  if (!float32 && !float64) {
    throw py::type_error("data['c2_exp'] has dtype " + py::str(c2.dtype()).cast<std::string>() +
                         ": give float32 or float64 (e.g. c2_exp.astype(numpy.float64))");
  }
  if (c2.ndim() != 3 || c2.shape(1) != c2.shape(2)) {
    std::string shape = "(";
    for (py::ssize_t d = 0; d < c2.ndim(); ++d) {
      shape += (d ? ", " : "") + std::to_string(c2.shape(d));
    }
    throw py::value_error("data['c2_exp'] has shape " + shape +
                          "): expected (n_phi, n_t, n_t), one square matrix per angle");
  }
  if (!(c2.flags() & py::array::c_style)) {
    throw py::value_error("data['c2_exp'] is not C-contiguous: pass numpy.ascontiguousarray(...)");
  }
  InMemoryData input;
  input.num_angles = static_cast<int>(c2.shape(0));
  input.num_times = static_cast<int>(c2.shape(1));
  const auto size = static_cast<size_t>(c2.size());
  if (float32) {
    input.float32_values = std::span<const float>(static_cast<const float*>(c2.data()), size);
  } else {
    input.float64_values = std::span<const double>(static_cast<const double*>(c2.data()), size);
  }
  if (!data.contains("phi_angles_list")) {
    throw py::value_error("data has no 'phi_angles_list' (one angle in degrees per matrix)");
  }
  input.phi_degrees = py::cast<std::vector<double>>(data["phi_angles_list"]);
  // q: the first of wavevector_q_list, as the reference; dt: data['dt'], else the spacing of t1,
  // else the config's analyzer_parameters.dt.
  input.q_inv_angstrom = config.geometry.q_inv_angstrom;
  if (data.contains("wavevector_q_list")) {
    const auto q = py::cast<std::vector<double>>(data["wavevector_q_list"]);
    if (!q.empty()) input.q_inv_angstrom = q.front();
  }
  input.dt_seconds = config.data.dt_seconds;
  if (data.contains("dt")) {
    input.dt_seconds = py::cast<double>(data["dt"]);
  } else if (data.contains("t1")) {
    const auto t1 = py::cast<std::vector<double>>(data["t1"]);
    if (t1.size() >= 2) input.dt_seconds = t1[1] - t1[0];
  }
  input.name = "data['c2_exp']";
  ArrayInput result;
  result.values = std::move(c2);
  result.source = MakeInMemoryBatchSource(std::move(input));
  return result;
}

// What load_config returns: the file as read, resolved without overrides (for the properties and
// load_xpcs_data); fit_nlsq resolves the file again with its keyword options.
struct LoadedConfig {
  ConfigSource source;
  Config config;
};

LoadedConfig LoadConfigFile(const std::string& path) {
  LoadedConfig loaded{ReadConfigFile(path), {}};
  loaded.config = ResolveConfig(loaded.source);
  return loaded;
}

// fit_nlsq's keyword options that set config values, as the CLI's flags do.
struct PythonFitOptions {
  std::optional<int> threads;
  std::optional<std::string> strategy;
  std::optional<double> memory_limit_gb;
  std::optional<std::string> global_search;
  std::optional<bool> fast_mode;
  std::optional<int> max_iterations;
  std::optional<std::string> checkpoint_dir;
  std::optional<bool> checkpoints;
  std::optional<bool> resume;
};

// The overrides of fit_nlsq's options; initial_params: a dict {name: value} or one value per
// physical parameter of the config's mode, in model order. ResolveConfig checks them (UsageError,
// raised as ValueError).
ConfigOverrides OverridesFromKeywords(const LoadedConfig& loaded, const PythonFitOptions& options,
                                      const std::optional<py::object>& initial_params) {
  ConfigOverrides overrides;
  overrides.cpu_threads = options.threads;
  overrides.strategy = options.strategy;
  overrides.fast_mode = options.fast_mode;
  overrides.max_iterations = options.max_iterations;
  overrides.checkpoint_dir = options.checkpoint_dir;
  overrides.enable_checkpoints = options.checkpoints;
  overrides.resume_from_checkpoint = options.resume;
  overrides.memory_limit_gb = options.memory_limit_gb;
  overrides.global_search = options.global_search;
  if (initial_params && !initial_params->is_none()) {
    if (py::isinstance<py::dict>(*initial_params)) {
      for (const auto& [key, value] : py::cast<py::dict>(*initial_params)) {
        const auto name = py::cast<std::string>(key);
        overrides.initial_values.push_back(
            {name, py::cast<double>(value), "initial_params['" + name + "']"});
      }
    } else {
      const AnalysisMode mode = loaded.config.analysis_mode;
      const std::vector<std::string>& names = PhysicalParameterNames(mode);
      const auto values = py::cast<std::vector<double>>(*initial_params);
      if (values.size() != names.size()) {
        throw py::value_error("initial_params has " + std::to_string(values.size()) +
                              " values; " + std::string(ToString(mode)) + " has " +
                              std::to_string(names.size()) + " physical parameters");
      }
      for (size_t i = 0; i < values.size(); ++i) {
        overrides.initial_values.push_back(
            {names[i], values[i], "initial_params[" + std::to_string(i) + "]"});
      }
    }
  }
  return overrides;
}

// Runs the Python progress callback and checks for Ctrl-C between chunks, candidates and
// iterations (under the GIL). Either stops the fit through RequestInterrupt; the error is raised
// once the fit has saved its checkpoint and returned.
class PythonObserver {
 public:
  explicit PythonObserver(py::object progress) : progress_(std::move(progress)) {}

  FitObserver Make() {
    FitObserver observer;
    observer.on_pass_chunk = [this](const PassProgress& p) {
      Call("pass", p.batches_done, p.num_batches, static_cast<double>(p.pass));
    };
    observer.on_global_search = [this](const GlobalSearchProgress& p) {
      Call("global search " + p.stage, p.index, p.total, p.best_chi2);
    };
    observer.on_iteration = [this](const IterationProgress& i) {
      Call("iteration", i.iteration, 0, i.chi2);
    };
    return observer;
  }

  // The Python error that stopped the fit (KeyboardInterrupt, or the callback's own), if any.
  std::optional<py::error_already_set>& error() { return error_; }

 private:
  void Call(const std::string& stage, int64_t index, int64_t total, double value) {
    if (error_) return;
    py::gil_scoped_acquire gil;
    try {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (progress_ && !progress_.is_none()) {
        py::dict event;
        event["stage"] = stage;
        event["index"] = index;
        event["total"] = total;
        event["value"] = value;
        progress_(event);
      }
    } catch (py::error_already_set& error) {
      error_.emplace(std::move(error));
      RequestInterrupt(SIGINT);
    }
  }

  py::object progress_;
  std::optional<py::error_already_set> error_;
};

NlsqResult FitNlsq(const py::object& data, const LoadedConfig& loaded,
                   const std::optional<py::object>& initial_params,
                   const PythonFitOptions& options, const py::object& progress,
                   const std::optional<std::string>& output_dir) {
  const Config config =
      ResolveConfig(loaded.source, OverridesFromKeywords(loaded, options, initial_params));
  ArrayInput input;
  if (data.is_none()) {
    input.source = OpenBatchSource(config.data);
  } else if (py::isinstance<py::dict>(data)) {
    input = SourceFromDict(py::cast<py::dict>(data), config);
  } else {
    throw py::type_error("data must be None (read the config's file) or a dict as "
                         "load_xpcs_data returns");
  }
  PythonObserver observer(progress);
  FitJobOptions job;
  job.output_dir = output_dir;
  ClearInterrupt();
  NlsqResult result;
  try {
    py::gil_scoped_release release;
    result.outcome = RunFitJob(config, *input.source, job, observer.Make());
  } catch (const FitInterrupted& interrupted) {
    ClearInterrupt();
    if (observer.error()) {
      // KeyboardInterrupt (or the callback's own error), after saying what became of the fit.
      PySys_WriteStderr("homodyne_cpp: %s\n", interrupted.what());
      py::error_already_set error = std::move(*observer.error());
      throw error;
    }
    throw;
  }
  ClearInterrupt();
  for (const AngleInfo& angle : input.source->info().angles) {
    result.phi_degrees.push_back(angle.phi_degrees);
  }
  return result;
}

py::dict LoadXpcsData(const LoadedConfig& loaded) {
  std::unique_ptr<BatchSource> source = OpenBatchSource(loaded.config.data);
  const DatasetInfo& info = source->info();
  const auto n = static_cast<py::ssize_t>(info.num_times());
  const auto n_phi = static_cast<py::ssize_t>(info.num_angles());
  DoubleArray c2({n_phi, n, n});
  {
    py::gil_scoped_release release;
    for (py::ssize_t k = 0; k < n_phi; ++k) {
      source->ReadCorrectedMatrix(static_cast<int>(k),
                                  std::span<double>(c2.mutable_data(k), static_cast<size_t>(n * n)));
    }
  }
  std::vector<double> phi, q;
  for (const AngleInfo& angle : info.angles) {
    phi.push_back(angle.phi_degrees);
    q.push_back(angle.q_inv_angstrom);
  }
  const std::vector<double> t = info.FittedTimes();
  py::dict data;
  data["c2_exp"] = c2;
  data["t1"] = DoubleArray(n, t.data());
  data["t2"] = DoubleArray(n, t.data());
  data["phi_angles_list"] = DoubleArray(n_phi, phi.data());
  data["wavevector_q_list"] = DoubleArray(n_phi, q.data());
  data["dt"] = info.dt_seconds;
  data["file_path"] = info.file_path;
  return data;
}

DoubleArray ComputeC2(const std::vector<double>& params, const std::vector<double>& t,
                      const std::vector<double>& phi, double q, double gap_angstrom,
                      const std::vector<double>& contrast, const std::vector<double>& offset,
                      const std::string& mode_name, double dt) {
  const AnalysisMode mode = ParseAnalysisMode(mode_name);
  if (params.size() != static_cast<size_t>(NumPhysicalParameters(mode))) {
    throw py::value_error("params has " + std::to_string(params.size()) + " values; " +
                          mode_name + " has " + std::to_string(NumPhysicalParameters(mode)));
  }
  if (t.size() < 2) throw py::value_error("t needs at least 2 times");
  const auto expand = [&phi](const std::vector<double>& values, const char* name) {
    if (values.size() == 1) return std::vector<double>(phi.size(), values.front());
    if (values.size() != phi.size()) {
      throw py::value_error(std::string(name) + " needs 1 value or one per angle");
    }
    return values;
  };
  const std::vector<double> contrasts = expand(contrast, "contrast");
  const std::vector<double> offsets = expand(offset, "offset");
  // dt: the model's prefactors use the grid step (docs/model.md); t1 - t0 unless given.
  const double step = dt > 0.0 ? dt : t[1] - t[0];
  const HomodyneModel model(mode, ScatteringGeometry{q, gap_angstrom, step}, t);
  return ModelMatrices(ModelEvaluation(model, params), phi, contrasts, offsets);
}

}  // namespace
}  // namespace homodyne::python

PYBIND11_MODULE(homodyne_cpp, m) {
  using namespace homodyne;
  using namespace homodyne::python;
  m.doc() = "homodyne-cpp: fits of the homodyne XPCS model (docs/python.md)";
  m.attr("__version__") = HOMODYNE_VERSION;

  static py::exception<Error> error(m, "HomodyneError", PyExc_RuntimeError);
  static py::exception<InputError> input_error(m, "InputError", error.ptr());
  static py::exception<ConfigError> config_error(m, "ConfigError", input_error.ptr());
  static py::exception<DataError> data_error(m, "DataError", input_error.ptr());
  static py::exception<FitInterrupted> interrupted(m, "FitInterrupted", error.ptr());
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const ConfigError& e) {
      config_error(e.what());
    } catch (const DataError& e) {
      data_error(e.what());
    } catch (const InputError& e) {
      input_error(e.what());
    } catch (const UsageError& e) {
      // A keyword option that breaks a rule or does not fit the config (ResolveConfig).
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      error(e.what());
    } catch (const FitInterrupted& e) {
      interrupted(e.what());
    }
  });

  py::class_<LoadedConfig>(m, "Config", "A validated config (load_config)")
      .def_property_readonly("path", [](const LoadedConfig& c) { return c.config.source_path; })
      .def_property_readonly(
          "analysis_mode",
          [](const LoadedConfig& c) { return std::string(ToString(c.config.analysis_mode)); })
      .def_property_readonly("data_file",
                             [](const LoadedConfig& c) { return c.config.data.file_path; })
      .def_property_readonly("warnings", [](const LoadedConfig& c) { return c.config.warnings; })
      .def_property_readonly(
          "param_names",
          [](const LoadedConfig& c) { return PhysicalParameterNames(c.config.analysis_mode); })
      .def("__repr__", [](const LoadedConfig& c) { return BriefReport(c.config); });

  m.def(
      "set_log_level",
      [](const std::string& level) {
        const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
        if (parsed == spdlog::level::off && level != "off") {
          throw py::value_error("log level '" + level +
                                "': one of trace, debug, info, warning, error, critical, off");
        }
        spdlog::set_level(parsed);
      },
      py::arg("level"),
      "The engine's log lines (stderr): 'info' (default: progress and iterations), 'warning' "
      "(warnings only), 'off', ...");

  m.def("load_config", &LoadConfigFile, py::arg("path"),
        "Reads and validates a YAML config (the reference's keys); raises ConfigError naming the "
        "file, YAML path, value and rule.");

  m.def("load_xpcs_data", &LoadXpcsData, py::arg("config"),
        "The config's data set as the fit sees it: dict of c2_exp (n_phi, n_t, n_t) float64 on the "
        "fitted grid (frame 0 dropped, diagonal corrected), t1, t2 (t_i = (i + 1) dt), "
        "phi_angles_list, wavevector_q_list, dt, file_path.");

  py::class_<NlsqResult>(m, "NlsqResult", "What fit_nlsq returns")
      .def_property_readonly("parameters", [](const NlsqResult& r) { return r.Physical(false); })
      .def_property_readonly("uncertainties", [](const NlsqResult& r) { return r.Physical(true); })
      .def_property_readonly("param_names",
                             [](const NlsqResult& r) {
                               std::vector<std::string> names;
                               for (const auto& p : r.outcome.result.physical) names.push_back(p.name);
                               return names;
                             })
      .def_property_readonly("covariance", &NlsqResult::Covariance)
      .def_property_readonly("covariance_names",
                             [](const NlsqResult& r) { return r.outcome.result.covariance_names; })
      .def_property_readonly("contrast",
                             [](const NlsqResult& r) { return r.PerAngle(true, false); })
      .def_property_readonly("contrast_uncertainties",
                             [](const NlsqResult& r) { return r.PerAngle(true, true); })
      .def_property_readonly("offset", [](const NlsqResult& r) { return r.PerAngle(false, false); })
      .def_property_readonly("offset_uncertainties",
                             [](const NlsqResult& r) { return r.PerAngle(false, true); })
      .def_property_readonly("phi_angles", [](const NlsqResult& r) { return r.phi_degrees; })
      .def_property_readonly("chi_squared",
                             [](const NlsqResult& r) { return r.outcome.result.chi_squared; })
      .def_property_readonly(
          "reduced_chi_squared", [](const NlsqResult& r) { return r.outcome.result.reduced_chi_squared; })
      .def_property_readonly("convergence_status",
                             [](const NlsqResult& r) { return r.outcome.result.convergence_status; })
      .def_property_readonly(
          "success", [](const NlsqResult& r) { return r.outcome.result.convergence_status == "converged"; })
      .def_property_readonly("message",
                             [](const NlsqResult& r) { return r.outcome.result.termination_reason; })
      .def_property_readonly("iterations",
                             [](const NlsqResult& r) { return r.outcome.result.iterations; })
      .def_property_readonly("execution_time",
                             [](const NlsqResult& r) { return r.outcome.result.total_seconds; })
      .def_property_readonly("strategy", [](const NlsqResult& r) { return r.outcome.result.strategy; })
      .def_property_readonly("strategy_reason",
                             [](const NlsqResult& r) { return r.outcome.result.strategy_reason; })
      .def_property_readonly("warnings", [](const NlsqResult& r) { return r.outcome.result.warnings; })
      .def_property_readonly("quality_flag",
                             [](const NlsqResult& r) { return r.outcome.result.quality_flag; })
      .def_property_readonly("quality_reasons",
                             [](const NlsqResult& r) { return r.outcome.result.quality_reasons; })
      .def_property_readonly("n_points", [](const NlsqResult& r) { return r.outcome.result.n_points; })
      .def_property_readonly("report", [](const NlsqResult& r) { return r.outcome.final_fit_report; })
      .def("fitted_c2", &NlsqResult::FittedC2,
           "The fitted model on the fitted grid: (n_phi, n_t, n_t), per-angle contrast and offset")
      .def("write", [](const NlsqResult& r, const std::string& output_dir) {
        WriteResultFiles(r.outcome.result, output_dir);
      }, py::arg("output_dir"),
      "Writes nlsq/*.json as the CLI does, as one set (an earlier fitted_data.h5 there is removed)")
      .def("__repr__", [](const NlsqResult& r) { return "<NlsqResult " + r.outcome.final_fit_report + ">"; });

  m.def(
      "fit_nlsq",
      [](const py::object& data, const LoadedConfig& config,
         const std::optional<py::object>& initial_params,
         std::optional<int> threads, std::optional<std::string> strategy,
         std::optional<double> memory_limit_gb, std::optional<std::string> global_search,
         std::optional<bool> fast_mode, std::optional<int> max_iterations,
         std::optional<std::string> checkpoint_dir, std::optional<bool> checkpoints,
         std::optional<bool> resume, const py::object& progress,
         std::optional<std::string> output_dir) {
        PythonFitOptions options{threads,        strategy,       memory_limit_gb,
                                 global_search,  fast_mode,      max_iterations,
                                 checkpoint_dir, checkpoints,    resume};
        return FitNlsq(data, config, initial_params, options, progress, output_dir);
      },
      py::arg("data"), py::arg("config"), py::arg("initial_params") = py::none(), py::kw_only(),
      py::arg("threads") = py::none(), py::arg("strategy") = py::none(),
      py::arg("memory_limit_gb") = py::none(), py::arg("global_search") = py::none(),
      py::arg("fast_mode") = py::none(), py::arg("max_iterations") = py::none(),
      py::arg("checkpoint_dir") = py::none(), py::arg("checkpoints") = py::none(),
      py::arg("resume") = py::none(), py::arg("progress") = py::none(),
      py::arg("output_dir") = py::none(),
      "Fits data (None: the config's file; or a dict as load_xpcs_data returns, float32/float64 "
      "C-contiguous c2_exp used without a copy) with the config's settings. Returns NlsqResult.");

  m.def("compute_c2", &ComputeC2, py::arg("params"), py::arg("t"), py::arg("phi"), py::arg("q"),
        py::arg("L"), py::arg("contrast") = std::vector<double>{0.5},
        py::arg("offset") = std::vector<double>{1.0}, py::arg("mode") = "laminar_flow",
        py::arg("dt") = 0.0,
        "The model c2 on the grid t (1-D, seconds) for each angle phi (degrees): array "
        "(n_phi, n_t, n_t). params: the mode's physical parameters (docs/model.md); q in 1/A, L "
        "(stator_rotor_gap) in A; contrast and offset: one value or one per angle.");
}
