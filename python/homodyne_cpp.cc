// homodyne_cpp._core: the compiled part of the Python package homodyne_cpp (docs/python.md). A
// thin shell over the library's Fit (include/homodyne/fit.h); python/homodyne_cpp/__init__.py
// gives it the reference package's notebook API (load_config, load_xpcs_data, fit_nlsq,
// compute_c2) and checks the Python types of the arguments, so the functions here take them
// converted. Errors of the C++ side arrive as Python exceptions with the same message; the GIL is
// released while fitting; Ctrl-C stops a fit cleanly (KeyboardInterrupt, after a checkpoint when
// checkpoints are on). A fit leaves no process state behind (the OpenMP thread count included).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "homodyne/checkpoint_errors.h"
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

// Python's way to start afresh where the CLI says --no-resume (CheckpointMismatchError).
constexpr const char* kPythonFreshStart = "resume=False";

// `array` made read-only: results hand out copies that cannot be changed by mistake.
DoubleArray ReadOnly(DoubleArray array) {
  array.attr("setflags")(py::arg("write") = false);
  return array;
}

// The model c2 on evaluation's whole grid for each angle: (n_phi, n_t, n_t), angle k with
// contrasts[k] and offsets[k] (no diagonal correction).
DoubleArray ModelMatrices(const ModelEvaluation& evaluation, const std::vector<double>& phi,
                          const std::vector<double>& contrasts,
                          const std::vector<double>& offsets) {
  const auto n = static_cast<py::ssize_t>(evaluation.model().num_times());
  DoubleArray c2({static_cast<py::ssize_t>(phi.size()), n, n});
  for (size_t k = 0; k < phi.size(); ++k) {
    // Each matrix at its own q (a joint fit of several rings).
    evaluation.OfAngle(static_cast<int>(k))
        .ComputeC2Matrix(phi[k], contrasts[k], offsets[k],
                         std::span<double>(c2.mutable_data(static_cast<py::ssize_t>(k)),
                                           static_cast<size_t>(n * n)));
  }
  return c2;
}

// ---------------------------------------------------------------------------------------------
// The fields of the result structs, each once with its name (results.h): NlsqResult.to_dict()
// and pickling both go through this list, so a field added here is in both.

template <typename V>
void Fields(ParameterEstimate& estimate, V& visit) {
  visit("name", estimate.name);
  visit("value", estimate.value);
  visit("uncertainty", estimate.uncertainty);
  visit("at_bound", estimate.at_bound);
  visit("interval_68", estimate.interval_68);
  visit("interval_95", estimate.interval_95);
  visit("interval_note", estimate.interval_note);
  visit("interval_method", estimate.interval_method);
  visit("profile_values", estimate.profile_values);
  visit("profile_delta_chi2", estimate.profile_delta_chi2);
  visit("profile_quadratic", estimate.profile_quadratic);
  visit("fixed", estimate.fixed);
  visit("unit", estimate.unit);
}
template <typename V>
void Fields(AngleScaling& angle, V& visit) {
  visit("phi_degrees", angle.phi_degrees);
  visit("contrast", angle.contrast);
  visit("offset", angle.offset);
  visit("q_inv_angstrom", angle.q_inv_angstrom);
}
template <typename V>
void Fields(BatchStatisticsSummary& statistics, V& visit) {
  visit("batches", statistics.batches);
  visit("retries", statistics.retries);
  visit("read_failures", statistics.read_failures);
  visit("checkpoint_failures", statistics.checkpoint_failures);
  visit("checkpoints_saved", statistics.checkpoints_saved);
}
template <typename V>
void Fields(GlobalSearchRecord::Minimum& minimum, V& visit) {
  visit("chi2", minimum.chi2);
  visit("names", minimum.names);
  visit("values", minimum.values);
  visit("start", minimum.start);
  visit("status", minimum.status);
  visit("iterations", minimum.iterations);
  visit("passes", minimum.passes);
}
template <typename V>
void Fields(GlobalSearchRecord& search, V& visit) {
  visit("method", search.method);
  visit("reason", search.reason);
  visit("candidates", search.candidates);
  visit("local_fits", search.local_fits);
  visit("generations", search.generations);
  visit("cmaes_runs", search.cmaes_runs);
  visit("moved_fits", search.moved_fits);
  visit("refined_fits", search.refined_fits);
  visit("passes", search.passes);
  visit("screening_passes", search.screening_passes);
  visit("local_fit_passes", search.local_fit_passes);
  visit("moved_fit_passes", search.moved_fit_passes);
  visit("refine_passes", search.refine_passes);
  visit("replayed_passes", search.replayed_passes);
  visit("point_evaluations", search.point_evaluations);
  visit("search_points", search.search_points);
  visit("row_stride", search.row_stride);
  visit("coarse_points", search.coarse_points);
  visit("coarse_row_stride", search.coarse_row_stride);
  visit("seconds", search.seconds);
  visit("minima", search.minima);
  visit("chosen", search.chosen);
}
template <typename V>
void Fields(Phi0MirrorRecord& mirror, V& visit) {
  visit("checked", mirror.checked);
  visit("measure", mirror.measure);
  visit("angles_degrees", mirror.angles_degrees);
  visit("phi0", mirror.phi0);
  visit("phi0_uncertainty", mirror.phi0_uncertainty);
  visit("cost", mirror.cost);
  visit("mirror_phi0", mirror.mirror_phi0);
  visit("mirror_uncertainty", mirror.mirror_uncertainty);
  visit("mirror_cost", mirror.mirror_cost);
  visit("tie", mirror.tie);
  visit("note", mirror.note);
}
template <typename V>
void Fields(FitResult& result, V& visit) {
  visit("analysis_mode", result.analysis_mode);
  visit("physical", result.physical);
  visit("per_angle", result.per_angle);
  visit("covariance_names", result.covariance_names);
  visit("covariance", result.covariance);
  visit("uncertainty_method", result.uncertainty_method);
  visit("uncertainty_blocks", result.uncertainty_blocks);
  visit("noise_correlation_frames", result.noise_correlation_frames);
  visit("uncertainty_ratio_to_standard", result.uncertainty_ratio_to_standard);
  visit("residual_lag1_correlation", result.residual_lag1_correlation);
  visit("per_angle_mode", result.per_angle_mode);
  visit("chi_squared", result.chi_squared);
  visit("reduced_chi_squared", result.reduced_chi_squared);
  visit("degrees_of_freedom", result.degrees_of_freedom);
  visit("loss", result.loss);  // docs/model.md, Robust loss
  visit("f_scale", result.f_scale);
  visit("robust_cost", result.robust_cost);
  visit("convergence_status", result.convergence_status);
  visit("termination_reason", result.termination_reason);
  visit("quality_flag", result.quality_flag);
  visit("quality_reasons", result.quality_reasons);
  visit("n_points", result.n_points);
  visit("n_angles", result.n_angles);
  visit("n_times", result.n_times);
  visit("q_inv_angstrom", result.q_inv_angstrom);
  visit("iterations", result.iterations);
  visit("passes", result.passes);
  visit("point_evaluations", result.point_evaluations);
  visit("strategy", result.strategy);
  visit("strategy_reason", result.strategy_reason);
  visit("backend", result.backend);
  visit("threads", result.threads);
  visit("load_seconds", result.load_seconds);
  visit("optimization_seconds", result.optimization_seconds);
  visit("total_seconds", result.total_seconds);
  visit("memory_peak_mb", result.memory_peak_mb);
  visit("batch_statistics", result.batch_statistics);
  visit("global_search", result.global_search);
  visit("phi0_mirror", result.phi0_mirror);  // docs/results.md, The phi0 mirror check
  visit("recovery_actions", result.recovery_actions);
  visit("warnings", result.warnings);
}

struct IgnoreField {
  template <typename T>
  void operator()(const char*, T&) {}
};
template <typename T, typename = void>
struct HasFields : std::false_type {};
template <typename T>
struct HasFields<T, std::void_t<decltype(Fields(std::declval<T&>(), std::declval<IgnoreField&>()))>>
    : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// A field as plain Python: a struct as a dict, a vector as a list, the mode as its name.
template <typename T>
py::object ToPython(T& value);
struct ToDict {
  py::dict dict;
  template <typename T>
  void operator()(const char* name, T& value) {
    dict[name] = ToPython(value);
  }
};
template <typename T>
py::object ToPython(T& value) {
  if constexpr (HasFields<T>::value) {
    ToDict visitor;
    Fields(value, visitor);
    return std::move(visitor.dict);
  } else if constexpr (IsVector<T>::value) {
    py::list list;
    for (auto& each : value) list.append(ToPython(each));
    return list;
  } else if constexpr (std::is_same_v<T, AnalysisMode>) {
    return py::str(std::string(ToString(value)));
  } else if constexpr (std::is_same_v<T, double>) {
    // NaN ("not computed": a profile's quadratic, an unmeasured correlation) as None, so that
    // equal results compare equal and to_dict() is strict JSON.
    return std::isnan(value) ? py::none() : py::cast(value);
  } else {
    return py::cast(value);
  }
}

// The inverse of ToPython (for unpickling: the dict is one ToPython made).
template <typename T>
void FromPython(const py::handle& source, T& value);
struct FromDict {
  py::dict dict;
  template <typename T>
  void operator()(const char* name, T& value) {
    FromPython(dict[name], value);
  }
};
template <typename T>
void FromPython(const py::handle& source, T& value) {
  if constexpr (HasFields<T>::value) {
    FromDict visitor{py::reinterpret_borrow<py::dict>(source)};
    Fields(value, visitor);
  } else if constexpr (IsVector<T>::value) {
    value.clear();
    for (const py::handle item : source) {
      typename T::value_type each{};
      FromPython(item, each);
      value.push_back(std::move(each));
    }
  } else if constexpr (std::is_same_v<T, AnalysisMode>) {
    value = ParseAnalysisMode(py::cast<std::string>(source));
  } else if constexpr (std::is_same_v<T, double>) {
    value = source.is_none() ? std::numeric_limits<double>::quiet_NaN() : py::cast<double>(source);
  } else {
    value = py::cast<T>(source);
  }
}

// ---------------------------------------------------------------------------------------------

// A fit's outcome with the data it needs to evaluate the fitted model.
struct NlsqResult {
  FitOutcome outcome;
  std::vector<double> phi_degrees;  // the data's angles, in data order

  DoubleArray Physical(bool uncertainties) const {
    std::vector<double> values;
    for (const ParameterEstimate& p : outcome.result.physical) {
      values.push_back(uncertainties ? p.uncertainty : p.value);
    }
    return ReadOnly(DoubleArray(static_cast<py::ssize_t>(values.size()), values.data()));
  }
  // (P, 2) [lower, upper] of each physical parameter's interval (docs/results.md, Intervals);
  // NaN rows where none was computed.
  DoubleArray Intervals(bool ninety_five) const {
    const auto& physical = outcome.result.physical;
    DoubleArray ends({static_cast<py::ssize_t>(physical.size()), py::ssize_t{2}});
    double* out = ends.mutable_data();
    for (size_t p = 0; p < physical.size(); ++p) {
      const std::vector<double>& interval =
          ninety_five ? physical[p].interval_95 : physical[p].interval_68;
      for (size_t e = 0; e < 2; ++e) {
        out[2 * p + e] = interval.size() == 2 ? interval[e] : std::nan("");
      }
    }
    return ReadOnly(std::move(ends));
  }
  DoubleArray PerAngle(bool contrast, bool uncertainties) const {
    std::vector<double> values;
    for (const AngleScaling& angle : outcome.result.per_angle) {
      const ParameterEstimate& p = contrast ? angle.contrast : angle.offset;
      values.push_back(uncertainties ? p.uncertainty : p.value);
    }
    return ReadOnly(DoubleArray(static_cast<py::ssize_t>(values.size()), values.data()));
  }
  // NaN throughout when the fit computed no covariance (it failed before one: docs/results.md,
  // Convergence status), never uninitialised memory.
  DoubleArray Covariance() const {
    const auto n = static_cast<py::ssize_t>(outcome.result.covariance_names.size());
    DoubleArray matrix({n, n});
    const std::vector<double>& covariance = outcome.result.covariance;
    if (covariance.size() == static_cast<size_t>(n * n)) {
      std::copy(covariance.begin(), covariance.end(), matrix.mutable_data());
    } else {
      std::fill(matrix.mutable_data(), matrix.mutable_data() + n * n,
                std::numeric_limits<double>::quiet_NaN());
    }
    return ReadOnly(std::move(matrix));
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

  // Every field of the result as plain Python (Fields), plus the one-line report and the angles.
  py::dict ToDictionary() const {
    FitResult result = outcome.result;
    py::dict dict = py::reinterpret_borrow<py::dict>(ToPython(result));
    dict["report"] = outcome.final_fit_report;
    dict["phi_angles"] = phi_degrees;
    return dict;
  }
  // {name: "lower" | "upper"} of the parameters held by a bound (ParameterEstimate::at_bound),
  // per-angle ones named "contrast[k]" / "offset[k]".
  py::dict AtBound() const {
    py::dict held;
    const FitResult& result = outcome.result;
    for (const ParameterEstimate& p : result.physical) {
      if (!p.at_bound.empty()) held[py::str(p.name)] = p.at_bound;
    }
    for (size_t k = 0; k < result.per_angle.size(); ++k) {
      for (const ParameterEstimate* p :
           {&result.per_angle[k].contrast, &result.per_angle[k].offset}) {
        if (!p->at_bound.empty())
          held[py::str(p->name + "[" + std::to_string(k) + "]")] = p->at_bound;
      }
    }
    return held;
  }
  // What pickling keeps: to_dict() and what fitted_c2() needs (the fitted physical parameters and
  // the model's mode, q, L, dt and times), as plain Python.
  py::tuple State() const {
    const HomodyneModel& model = *outcome.model;
    py::dict model_state;
    model_state["mode"] = std::string(ToString(model.mode()));
    model_state["q"] = model.geometry().q_inv_angstrom;
    model_state["L"] = model.geometry().gap_angstrom;
    model_state["dt"] = model.geometry().dt_seconds;
    model_state["times"] = model.times_seconds();
    model_state["q_per_angle"] = model.angle_q_inv_angstrom();  // empty: every matrix at q
    return py::make_tuple(ToDictionary(), outcome.physical, model_state, outcome.exit_code);
  }
  static NlsqResult FromState(const py::tuple& state) {
    if (state.size() != 4) throw py::value_error("NlsqResult: not a pickled NlsqResult");
    NlsqResult restored;
    const auto dict = py::cast<py::dict>(state[0]);
    FromPython(dict, restored.outcome.result);
    restored.outcome.final_fit_report = py::cast<std::string>(dict["report"]);
    restored.phi_degrees = py::cast<std::vector<double>>(dict["phi_angles"]);
    restored.outcome.physical = py::cast<std::vector<double>>(state[1]);
    const auto model = py::cast<py::dict>(state[2]);
    const AnalysisMode mode = ParseAnalysisMode(py::cast<std::string>(model["mode"]));
    const ScatteringGeometry geometry{py::cast<double>(model["q"]), py::cast<double>(model["L"]),
                                      py::cast<double>(model["dt"])};
    std::vector<double> times = py::cast<std::vector<double>>(model["times"]);
    std::vector<double> angle_q;
    if (model.contains("q_per_angle")) {
      angle_q = py::cast<std::vector<double>>(model["q_per_angle"]);
    }
    if (angle_q.empty()) {
      restored.outcome.model.emplace(mode, geometry, std::move(times));
    } else {
      restored.outcome.model.emplace(mode, geometry, std::move(times), std::move(angle_q));
    }
    restored.outcome.exit_code = py::cast<int>(state[3]);
    return restored;
  }
};

// The name of value's type, for messages that must not print the value (an array, the data).
std::string TypeName(const py::handle& value) { return Py_TYPE(value.ptr())->tp_name; }

// data[key] as doubles; TypeError naming data[key] (never printing it) when it is not numbers.
std::vector<double> DoublesOf(const py::dict& data, const char* key) {
  const py::object values = data[key];
  try {
    if (py::isinstance<py::str>(values) || py::isinstance<py::bytes>(values)) {
      throw py::cast_error("text");
    }
    if (!py::isinstance<py::iterable>(values)) return {py::cast<double>(values)};
    return py::cast<std::vector<double>>(values);
  } catch (const py::cast_error&) {
    throw py::type_error(std::string("data['") + key +
                         "'] must be a number or a sequence of numbers, not " + TypeName(values));
  }
}

// A number as a message shows it: shortest form, "inf" and "nan" as such (std::to_string wrote
// "-nan" for a NaN that had been an inf).
std::string NumberText(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// The c2_exp array of a data dict as an in-memory source, without a copy. Raises TypeError /
// ValueError naming what is wrong.
struct ArrayInput {
  py::array values;  // kept alive while the source is used
  std::unique_ptr<BatchSource> source;
};

ArrayInput SourceFromDict(const py::dict& data, const Config& config) {
  if (!data.contains("c2_exp")) {
    throw py::value_error(
        "data has no 'c2_exp': give a dict as load_xpcs_data returns "
        "(c2_exp, t1, phi_angles_list, wavevector_q_list)");
  }
  const py::object given = data["c2_exp"];
  py::array c2 = py::array::ensure(given);  // an array as it is, else numpy's conversion
  if (!c2) throw py::type_error("data['c2_exp'] must be an array, not " + TypeName(given));
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
  if (c2.shape(0) < 1 || c2.shape(1) < 2) {
    throw py::value_error("data['c2_exp'] has shape (" + std::to_string(c2.shape(0)) + ", " +
                          std::to_string(c2.shape(1)) + ", " + std::to_string(c2.shape(2)) +
                          "): needs at least 1 angle and 2 times");
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
  input.phi_degrees = DoublesOf(data, "phi_angles_list");
  // q: the first of wavevector_q_list, as the reference; dt: data['dt'], else the spacing of t1,
  // else the config's analyzer_parameters.dt.
  // A wavevector_q_list of one q per matrix whose values differ (load_xpcs_data of several
  // rings) makes a joint fit: each matrix at its own q (docs/design.md section 2d).
  input.q_inv_angstrom = config.geometry.q_inv_angstrom;
  if (data.contains("wavevector_q_list")) {
    const std::vector<double> q = DoublesOf(data, "wavevector_q_list");
    if (!q.empty()) input.q_inv_angstrom = q.front();
    const bool one_q = std::all_of(q.begin(), q.end(), [&](double v) { return v == q.front(); });
    if (!one_q) {
      if (q.size() != static_cast<size_t>(input.num_angles)) {
        throw py::value_error("data['wavevector_q_list'] has " + std::to_string(q.size()) +
                              " different q values for " + std::to_string(input.num_angles) +
                              " matrices: give one q, or one per matrix of c2_exp");
      }
      input.q_per_angle = q;
    }
  }
  input.dt_seconds = config.data.dt_seconds;
  if (data.contains("dt")) {
    const std::vector<double> dt = DoublesOf(data, "dt");
    if (dt.size() != 1) throw py::value_error("data['dt'] must be one number (seconds)");
    input.dt_seconds = dt.front();
  } else if (data.contains("t1")) {
    const std::vector<double> t1 = DoublesOf(data, "t1");
    if (t1.size() >= 2) input.dt_seconds = t1[1] - t1[0];
  }
  // t1 and t2, where given, are the fitted grid of c2_exp: one time per row, t_i = (i + 1) dt
  // (docs/model.md, Time grid). A matrix that still holds frame 0 (t from 0) would be fitted one
  // frame late, with other rates, in silence.
  for (const char* key : {"t1", "t2"}) {
    if (!data.contains(key)) continue;
    const std::vector<double> times = DoublesOf(data, key);
    const std::string name = std::string("data['") + key + "']";
    if (times.size() != static_cast<size_t>(input.num_times)) {
      throw py::value_error(name + " has " + std::to_string(times.size()) +
                            " times but c2_exp has " + std::to_string(input.num_times) +
                            " rows: give one time per row of the matrices");
    }
    const double dt = input.dt_seconds;
    for (size_t i = 0; i < times.size(); ++i) {
      const double expected = static_cast<double>(i + 1) * dt;
      if (std::isfinite(dt) && std::abs(times[i] - expected) <= 1e-6 * expected) continue;
      throw py::value_error(
          name + "[" + std::to_string(i) + "] = " + NumberText(times[i]) + ", expected " +
          NumberText(expected) + " ((i + 1) dt, dt = " + NumberText(dt) +
          "): the fitted grid starts one frame after frame 0, which the fit drops (as "
          "load_xpcs_data does); for a matrix that still holds frame 0 pass c2_exp[:, 1:, 1:] "
          "and " +
          key + "[1:]");
    }
  }
  input.name = "data['c2_exp']";
  ArrayInput result;
  result.values = std::move(c2);
  result.source = MakeInMemoryBatchSource(std::move(input));
  return result;
}

// What load_config returns: the config as read, resolved without overrides (for the properties
// and load_xpcs_data); fit_nlsq resolves it again with its keyword options.
struct LoadedConfig {
  ConfigSource source;
  Config config;
};

LoadedConfig LoadConfigSource(ConfigSource source) {
  LoadedConfig loaded{std::move(source), {}};
  loaded.config = ResolveConfig(loaded.source);
  return loaded;
}

// fit_nlsq's keyword options that set config values, as the CLI's flags do; the package checked
// their Python types, ResolveConfig checks their values (CheckOverrides, as the CLI's flags).
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
  std::optional<std::string> uncertainty;
};

// One initial value as the package passes it: (parameter name, value, origin for messages, e.g.
// "initial_params['D0']").
using InitialValue = std::tuple<std::string, double, std::string>;

ConfigOverrides OverridesFromKeywords(const PythonFitOptions& options,
                                      const std::vector<InitialValue>& initial_values) {
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
  overrides.uncertainty = options.uncertainty;
  for (const auto& [name, value, origin] : initial_values) {
    overrides.initial_values.push_back({name, value, origin});
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
      // The engine knows stops by signal only; what the user sees is error_, raised by FitNlsq.
      RequestInterrupt(SIGINT);
    }
  }

  py::object progress_;
  std::optional<py::error_already_set> error_;
};

bool SelectsSeveralRings(const DataSelection& data) {
  return data.all_q_rings || !data.wavevector_q_list.empty();
}

// ring_q: the fit of one ring of several fitted independently (fit_nlsq loops over them; its
// checkpoints in checkpoint_dir/q_<q>, as the CLI's: docs/python.md, Several q rings). Several
// rings with q_fit joint: every ring's matrices in one data set.
NlsqResult FitNlsq(const std::optional<py::dict>& data, const LoadedConfig& loaded,
                   const std::vector<InitialValue>& initial_values, const PythonFitOptions& options,
                   const py::object& progress, const std::optional<std::string>& output_dir,
                   const std::optional<double>& ring_q = std::nullopt) {
  Config config = ResolveConfig(loaded.source, OverridesFromKeywords(options, initial_values));
  if (ring_q) {
    RingInfo ring;
    ring.q_inv_angstrom = *ring_q;
    config.data = SelectionOfRing(config.data, ring);
    config.geometry.q_inv_angstrom = *ring_q;
    config.streaming.checkpoint_dir =
        (std::filesystem::path(config.streaming.checkpoint_dir) / RingFolderName(*ring_q)).string();
  } else if (SelectsSeveralRings(config.data) && config.data.q_fit == QFitMode::kJoint && !data) {
    config.data = JointSelection(config.data);
  }
  ArrayInput input;
  if (!data) {
    input.source = OpenBatchSource(config.data);
  } else {
    input = SourceFromDict(*data, config);
  }
  PythonObserver observer(progress);
  FitJobOptions job;
  job.output_dir = output_dir;
  ClearInterrupt();
  NlsqResult result;
  std::optional<FitInterrupted> stopped;
  {
    // Options hold for this call only: the fit gives the caller's thread count back (Fit,
    // include/homodyne/fit.h).
    py::gil_scoped_release release;
    try {
      result.outcome = RunFitJob(config, *input.source, job, observer.Make());
    } catch (const FitInterrupted& interrupted) {
      stopped.emplace(interrupted);
    }
  }
  ClearInterrupt();
  if (observer.error()) {
    // KeyboardInterrupt or the callback's own error, raised as it is, after saying what became of
    // the fit (the engine's message names a signal: not what happened here).
    py::error_already_set error = std::move(*observer.error());
    const std::string raised = py::str(error.type().attr("__name__")).cast<std::string>();
    if (stopped) {
      const std::string what = error.matches(PyExc_KeyboardInterrupt)
                                   ? "fit interrupted (KeyboardInterrupt)"
                                   : "fit stopped: the progress callback raised " + raised;
      const std::string checkpoint =
          stopped->checkpoint_saved()
              ? "checkpoint saved; the next fit_nlsq call with the same config and data resumes "
                "from it"
              : "no checkpoint saved (checkpoints disabled or failed)";
      PySys_WriteStderr("homodyne_cpp: %s; %s\n", what.c_str(), checkpoint.c_str());
    }
    throw error;
  }
  if (stopped) throw *stopped;  // a stop with no Python error behind it
  for (const AngleInfo& angle : input.source->info().angles) {
    result.phi_degrees.push_back(angle.phi_degrees);
  }
  return result;
}

py::dict LoadXpcsData(const LoadedConfig& loaded) {
  // Several rings: every selected ring's matrices, ring after ring, a q per matrix
  // (wavevector_q_list; docs/python.md, Several q rings).
  const DataSelection& selection = loaded.config.data;
  std::unique_ptr<BatchSource> source =
      OpenBatchSource(SelectsSeveralRings(selection) ? JointSelection(selection) : selection);
  const DatasetInfo& info = source->info();
  const auto n = static_cast<py::ssize_t>(info.num_times());
  const auto n_phi = static_cast<py::ssize_t>(info.num_angles());
  DoubleArray c2({n_phi, n, n});
  {
    py::gil_scoped_release release;
    for (py::ssize_t k = 0; k < n_phi; ++k) {
      source->ReadCorrectedMatrix(
          static_cast<int>(k), std::span<double>(c2.mutable_data(k), static_cast<size_t>(n * n)));
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

// ValueError "<name>: <rule>" unless every value is finite.

void RequireFinite(const std::vector<double>& values, const std::string& name) {
  for (size_t k = 0; k < values.size(); ++k) {
    if (!std::isfinite(values[k])) {
      throw py::value_error(name + "[" + std::to_string(k) + "] = " + NumberText(values[k]) +
                            ": must be finite");
    }
  }
}

// The model on grid t for each angle. The package made phi, contrast and offset 1-D (a scalar is
// one angle). The angles, q and the grid step pass the checks every data set passes
// (MakeInMemoryBatchSource: q and dt finite and > 0, phi finite, each angle once), the rest is
// checked here; ValueError / DataError name the argument. gap_angstrom (L) is required by
// laminar_flow, the one mode whose model reads it (ScatteringGeometry); the others take it or not
// and, when given, check it as laminar_flow does.
DoubleArray ComputeC2(const std::vector<double>& params, const std::vector<double>& t,
                      const std::vector<double>& phi, const std::vector<double>& q_values,
                      const std::optional<double>& gap_angstrom,
                      const std::vector<double>& contrast, const std::vector<double>& offset,
                      const std::string& mode_name, double dt) {
  const AnalysisMode mode = ParseAnalysisMode(mode_name);
  if (params.size() != static_cast<size_t>(NumPhysicalParameters(mode))) {
    throw py::value_error("params has " + std::to_string(params.size()) + " values; " + mode_name +
                          " has " + std::to_string(NumPhysicalParameters(mode)));
  }
  RequireFinite(params, "params");
  if (t.size() < 2) throw py::value_error("t needs at least 2 times");
  RequireFinite(t, "t");
  for (size_t i = 1; i < t.size(); ++i) {
    if (!(t[i] > t[i - 1])) {
      throw py::value_error("t[" + std::to_string(i) + "] <= t[" + std::to_string(i - 1) +
                            "]: t must increase");
    }
  }
  if (phi.empty()) throw py::value_error("phi needs at least one angle");
  if (!gap_angstrom.has_value() && mode == AnalysisMode::kLaminarFlow) {
    throw py::value_error("L (the stator-rotor gap in A) is required for laminar_flow");
  }
  if (gap_angstrom.has_value() && !(std::isfinite(*gap_angstrom) && *gap_angstrom > 0.0)) {
    throw py::value_error("L = " + std::to_string(*gap_angstrom) + ": must be finite and > 0");
  }
  if (!(std::isfinite(dt) && dt >= 0.0)) {
    throw py::value_error("dt = " + std::to_string(dt) + ": must be finite and >= 0");
  }
  const auto expand = [&phi](const std::vector<double>& values, const char* name) {
    RequireFinite(values, name);
    if (values.size() == 1) return std::vector<double>(phi.size(), values.front());
    if (values.size() != phi.size()) {
      throw py::value_error(std::string(name) + " has " + std::to_string(values.size()) +
                            " values: give 1 or one per angle (" + std::to_string(phi.size()) +
                            ")");
    }
    return values;
  };
  // q: one for every angle, or one per angle (matrices of several q rings).
  // Not RequireFinite: a q that is not finite and > 0 is the data checks' DataError (below).
  if (q_values.size() != 1 && q_values.size() != phi.size()) {
    throw py::value_error("q has " + std::to_string(q_values.size()) +
                          " values: give 1 or one per angle (" + std::to_string(phi.size()) + ")");
  }
  const std::vector<double> angle_q =
      q_values.size() == 1 ? std::vector<double>(phi.size(), q_values.front()) : q_values;
  const double q = angle_q.front();
  const std::vector<double> contrasts = expand(contrast, "contrast");
  const std::vector<double> offsets = expand(offset, "offset");
  // dt: the model's prefactors use the grid step (docs/model.md); t1 - t0 unless given. The
  // model integrates the rates over a uniform grid: a grid of another spacing, or a dt that is
  // not its spacing, would give c2 of other times than t.
  const double step = dt > 0.0 ? dt : t[1] - t[0];
  constexpr double kGridTolerance = 1e-6;  // relative, beyond the rounding of t's values
  if (dt > 0.0 && std::abs(dt - (t[1] - t[0])) > kGridTolerance * dt) {
    // Allowed, as the reference and its successor allow it (the successor's residual fixture
    // does it), but never in silence.
    const std::string warning =
        "dt = " + NumberText(dt) +
        " is not the spacing of t (t[1] - t[0] = " + NumberText(t[1] - t[0]) +
        "): the rates are integrated with step dt and evaluated at t, as the reference does; "
        "give dt=0 for the grid's own step";
    if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 1) != 0) throw py::error_already_set();
  }
  const double spacing = t[1] - t[0];
  for (size_t i = 2; i < t.size(); ++i) {
    if (std::abs((t[i] - t[i - 1]) - spacing) > kGridTolerance * spacing) {
      throw py::value_error("t is not uniform: t[" + std::to_string(i) + "] - t[" +
                            std::to_string(i - 1) + "] = " + NumberText(t[i] - t[i - 1]) +
                            ", t[1] - t[0] = " + NumberText(spacing) +
                            " (the model integrates over a uniform grid)");
    }
  }
  const auto n = static_cast<py::ssize_t>(t.size());
  DoubleArray c2({static_cast<py::ssize_t>(phi.size()), n, n});
  {
    // The data-set checks, over the output buffer (only its size is looked at).
    InMemoryData described;
    described.float64_values = std::span<const double>(c2.data(), static_cast<size_t>(c2.size()));
    described.num_angles = static_cast<int>(phi.size());
    described.num_times = static_cast<int>(t.size());
    described.phi_degrees = phi;
    described.q_inv_angstrom = q;
    if (q_values.size() > 1) described.q_per_angle = angle_q;
    described.dt_seconds = step;
    described.name = "compute_c2";
    const std::unique_ptr<BatchSource> checked = MakeInMemoryBatchSource(std::move(described));
    for (const std::string& warning : checked->info().warnings) {
      if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 1) != 0) throw py::error_already_set();
    }
  }
  const ScatteringGeometry geometry{q, gap_angstrom.value_or(ScatteringGeometry{}.gap_angstrom),
                                    step};
  const HomodyneModel model = q_values.size() > 1 ? HomodyneModel(mode, geometry, t, angle_q)
                                                  : HomodyneModel(mode, geometry, t);
  const ModelEvaluation evaluation(model, params);
  for (size_t k = 0; k < phi.size(); ++k) {
    // Each matrix at its own q (a joint fit of several rings).
    evaluation.OfAngle(static_cast<int>(k))
        .ComputeC2Matrix(phi[k], contrasts[k], offsets[k],
                         std::span<double>(c2.mutable_data(static_cast<py::ssize_t>(k)),
                                           static_cast<size_t>(n * n)));
  }
  return c2;
}

// The module's parts, one function each, in the order PYBIND11_MODULE adds them.

// The engine's error classes as Python exceptions (docs/python.md, API): HomodyneError (a
// RuntimeError) and below it InputError (ConfigError, DataError, CheckpointMismatchError) and
// FitInterrupted; a UsageError becomes a ValueError. Each C++ exception thrown through a binding
// is translated to its class.
void BindErrors(py::module_& m) {
  static py::exception<Error> error(m, "HomodyneError", PyExc_RuntimeError);
  static py::exception<InputError> input_error(m, "InputError", error.ptr());
  static py::exception<ConfigError> config_error(m, "ConfigError", input_error.ptr());
  static py::exception<DataError> data_error(m, "DataError", input_error.ptr());
  static py::exception<CheckpointMismatchError> checkpoint_mismatch(m, "CheckpointMismatchError",
                                                                    input_error.ptr());
  static py::exception<FitInterrupted> interrupted(m, "FitInterrupted", error.ptr());
  error.attr("__doc__") =
      "Base of the engine's errors (a RuntimeError); the message names what and where.";
  input_error.attr("__doc__") =
      "Bad input: a file, a config value, data (ConfigError, DataError, ...).";
  config_error.attr("__doc__") =
      "A config value that breaks a rule: names the file, YAML path and rule.";
  data_error.attr("__doc__") =
      "Data that cannot be used: names the file or array and the rule broken.";
  checkpoint_mismatch.attr("__doc__") =
      "A checkpoint in checkpoint_dir written for another config or data set: remove it, or "
      "pass resume=False to start afresh.";
  interrupted.attr("__doc__") = "A fit stopped by a signal with no Python error behind it.";
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const ConfigError& e) {
      config_error(e.what());
    } catch (const DataError& e) {
      data_error(e.what());
    } catch (const CheckpointMismatchError& e) {
      checkpoint_mismatch(e.Message(kPythonFreshStart).c_str());
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
}

// Config: what load_config returns (read-only properties; docs/python.md).
void BindConfig(py::module_& m) {
  py::class_<LoadedConfig>(m, "Config", "A validated config: what load_config returns.")
      .def_property_readonly(
          "path", [](const LoadedConfig& c) { return c.config.source_path; },
          "The file the config was read from ('' for a dict).")
      .def_property_readonly(
          "analysis_mode",
          [](const LoadedConfig& c) { return std::string(ToString(c.config.analysis_mode)); },
          "'static' or 'laminar_flow'.")
      .def_property_readonly(
          "data_file", [](const LoadedConfig& c) { return c.config.data.file_path; },
          "The data file the config names.")
      .def_property_readonly(
          "warnings", [](const LoadedConfig& c) { return c.config.warnings; },
          "Unknown keys (with the closest known key) and deprecated keys.")
      .def_property_readonly(
          "param_names",
          [](const LoadedConfig& c) { return PhysicalParameterNames(c.config.analysis_mode); },
          "The physical parameters of the mode, in model order.")
      .def("__repr__", [](const LoadedConfig& c) { return BriefReport(c.config); });
}

// set_log_level and _log_level: the engine's log lines.
void BindLogging(py::module_& m) {
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
      "The engine's log lines (standard output): 'warning' (default: warnings only), 'info' "
      "(progress "
      "and iterations too), 'off', ...");
  m.def(
      "_log_level",
      [] {
        const auto name = spdlog::level::to_string_view(spdlog::get_level());
        return std::string(name.data(), name.size());
      },
      "The engine's log level now (fit_nlsq restores it after verbose=True).");
}

// The loaders behind load_config (a file or YAML text) and load_xpcs_data.
void BindLoaders(py::module_& m) {
  m.def(
      "_load_config_file",
      [](const std::string& path) { return LoadConfigSource(ReadConfigFile(path)); },
      py::arg("path"), "load_config of a file path.");
  m.def(
      "_load_config_text",
      [](const std::string& text, const std::string& name) {
        return LoadConfigSource(ConfigSource{text, name, ""});
      },
      py::arg("text"), py::arg("name"), "load_config of YAML text; name names it in messages.");
  m.def("_load_xpcs_data", &LoadXpcsData, py::arg("config"), "load_xpcs_data of a Config.");
}

// NlsqResult, what fit_nlsq returns (read-only copies of arrays, to_dict, write, pickling through
// _state and _nlsq_result_from_state).
void BindNlsqResult(py::module_& m) {
  py::class_<NlsqResult>(m, "NlsqResult",
                         "What fit_nlsq returns. Array properties are read-only copies.")
      .def_property_readonly(
          "parameters", [](const NlsqResult& r) { return r.Physical(false); },
          "Fitted physical parameters (model order, param_names).")
      .def_property_readonly(
          "uncertainties", [](const NlsqResult& r) { return r.Physical(true); },
          "One standard error per physical parameter, as uncertainty_method says (0: held "
          "fixed).")
      .def_property_readonly(
          "interval_68", [](const NlsqResult& r) { return r.Intervals(false); },
          "(P, 2) 68 % interval [lower, upper] of each physical parameter (docs/results.md, "
          "Intervals: a profile or value +- t u, as interval_method in to_dict()['physical'] "
          "says); NaN rows where none was computed (uncertainty curvature, a fixed parameter).")
      .def_property_readonly(
          "interval_95", [](const NlsqResult& r) { return r.Intervals(true); },
          "(P, 2) 95 % interval, as interval_68.")
      .def_property_readonly(
          "uncertainty_method",
          [](const NlsqResult& r) { return r.outcome.result.uncertainty_method; },
          "What the uncertainties are: 'jackknife' (frame blocks), 'standard' (independent "
          "noise) or 'curvature' (the reference's numbers).")
      .def_property_readonly(
          "uncertainty_blocks",
          [](const NlsqResult& r) { return r.outcome.result.uncertainty_blocks; },
          "The frame blocks of the jackknife (0 for another method).")
      .def_property_readonly(
          "noise_correlation_frames",
          [](const NlsqResult& r) { return r.outcome.result.noise_correlation_frames; },
          "The residuals' correlation length along a row [frames] (jackknife only; 0 else).")
      .def_property_readonly(
          "residual_lag1_correlation",
          [](const NlsqResult& r) { return r.outcome.result.residual_lag1_correlation; },
          "The residuals' correlation at lag 1 along a row, which the default method 'auto' "
          "chose by (NaN when not measured: 'standard' or 'curvature' asked for, fast mode).")
      .def_property_readonly(
          "uncertainty_ratio_to_standard",
          [](const NlsqResult& r) {
            const FitResult& result = r.outcome.result;
            py::dict ratios;
            if (result.uncertainty_ratio_to_standard.size() != result.physical.size())
              return ratios;
            for (size_t p = 0; p < result.physical.size(); ++p) {
              ratios[py::str(result.physical[p].name)] = result.uncertainty_ratio_to_standard[p];
            }
            return ratios;
          },
          "Jackknife only: {parameter: its uncertainty over the standard error of independent "
          "noise}; above 1 where the noise is correlated along frames. Empty for another method.")
      .def_property_readonly(
          "param_names",
          [](const NlsqResult& r) {
            std::vector<std::string> names;
            for (const auto& p : r.outcome.result.physical) names.push_back(p.name);
            return names;
          },
          "Names of the physical parameters, model order.")
      .def_property_readonly("covariance", &NlsqResult::Covariance,
                             "(P, P) covariance of every parameter (covariance_names).")
      .def_property_readonly(
          "covariance_names", [](const NlsqResult& r) { return r.outcome.result.covariance_names; },
          "Rows and columns of covariance: physical, then contrast and offset per angle.")
      .def_property_readonly(
          "contrast", [](const NlsqResult& r) { return r.PerAngle(true, false); },
          "Contrast per angle (phi_angles order).")
      .def_property_readonly(
          "contrast_uncertainties", [](const NlsqResult& r) { return r.PerAngle(true, true); },
          "Standard error of the contrast per angle.")
      .def_property_readonly(
          "offset", [](const NlsqResult& r) { return r.PerAngle(false, false); },
          "Offset per angle (phi_angles order).")
      .def_property_readonly(
          "offset_uncertainties", [](const NlsqResult& r) { return r.PerAngle(false, true); },
          "Standard error of the offset per angle.")
      .def_property_readonly(
          "phi_angles",
          [](const NlsqResult& r) {
            return ReadOnly(
                DoubleArray(static_cast<py::ssize_t>(r.phi_degrees.size()), r.phi_degrees.data()));
          },
          "The data's angles in degrees, data order.")
      .def_property_readonly(
          "chi_squared", [](const NlsqResult& r) { return r.outcome.result.chi_squared; },
          "chi2 of the final fit.")
      .def_property_readonly(
          "reduced_chi_squared",
          [](const NlsqResult& r) { return r.outcome.result.reduced_chi_squared; },
          "chi2 per degree of freedom.")
      .def_property_readonly(
          "convergence_status",
          [](const NlsqResult& r) { return r.outcome.result.convergence_status; },
          "'converged', 'max_iterations', 'no_progress', 'failed_non_finite_objective' or "
          "'failed' (docs/results.md, Convergence status).")
      .def_property_readonly(
          "success",
          [](const NlsqResult& r) { return r.outcome.result.convergence_status == "converged"; },
          "convergence_status == 'converged'.")
      .def_property_readonly(
          "message", [](const NlsqResult& r) { return r.outcome.result.termination_reason; },
          "Why the fit stopped, one sentence.")
      .def_property_readonly(
          "iterations", [](const NlsqResult& r) { return r.outcome.result.iterations; },
          "Iterations of the final fit.")
      .def_property_readonly(
          "execution_time", [](const NlsqResult& r) { return r.outcome.result.total_seconds; },
          "Wall seconds of the whole fit.")
      .def_property_readonly(
          "strategy", [](const NlsqResult& r) { return r.outcome.result.strategy; },
          "The strategy that ran: standard, large, chunked or streaming.")
      .def_property_readonly(
          "strategy_reason", [](const NlsqResult& r) { return r.outcome.result.strategy_reason; },
          "Why that strategy ran.")
      .def_property_readonly(
          "threads", [](const NlsqResult& r) { return r.outcome.result.threads; },
          "CPU threads the fit used.")
      .def_property_readonly(
          "warnings", [](const NlsqResult& r) { return r.outcome.result.warnings; },
          "Warnings of the fit.")
      .def_property_readonly("at_bound", &NlsqResult::AtBound,
                             "The parameters the fit ended with held by a bound, by name (as in "
                             "covariance_names: 'D0', 'contrast[0]'), each 'lower' or 'upper'; "
                             "their uncertainties are the data's with the bound released "
                             "(docs/results.md, Parameters at a bound).")
      .def_property_readonly(
          "quality_flag", [](const NlsqResult& r) { return r.outcome.result.quality_flag; },
          "'good', 'marginal' or 'poor' (docs/results.md, Quality flag).")
      .def_property_readonly(
          "quality_reasons", [](const NlsqResult& r) { return r.outcome.result.quality_reasons; },
          "Why quality_flag is not 'good', one sentence each.")
      .def_property_readonly(
          "n_points", [](const NlsqResult& r) { return r.outcome.result.n_points; },
          "Points fitted.")
      .def_property_readonly(
          "report", [](const NlsqResult& r) { return r.outcome.final_fit_report; },
          "One-line summary: status, iterations, passes, chi2, time.")
      .def("fitted_c2", &NlsqResult::FittedC2,
           "The fitted model on the fitted grid: (n_phi, n_t, n_t), per-angle contrast and "
           "offset (a new, writable array).")
      .def("to_dict", &NlsqResult::ToDictionary,
           "Every field of the result as plain Python (dicts, lists, str, int, float: "
           "JSON-serialisable), named as FitResult's fields (docs/results.md), with report and "
           "phi_angles.")
      .def(
          "write",
          [](const NlsqResult& r, const std::string& output_dir) {
            WriteResultFiles(r.outcome.result, output_dir);
          },
          py::arg("output_dir"),
          "Writes nlsq/*.json as the CLI does, as one set (an earlier fitted_data.h5 there is "
          "removed with the earlier JSON files; docs/results.md, How the files are written).")
      .def(
          "__eq__",
          [](const NlsqResult& a, const py::object& b) -> py::object {
            if (!py::isinstance<NlsqResult>(b))
              return py::reinterpret_borrow<py::object>(Py_NotImplemented);
            return py::bool_(a.State().equal(py::cast<const NlsqResult&>(b).State()));
          },
          py::arg("other"), "Equal when every field and the fitted model are equal.")
      .def("__repr__",
           [](const NlsqResult& r) { return "<NlsqResult " + r.outcome.final_fit_report + ">"; })
      // What pickling keeps; the package pickles a result as a call of its
      // _nlsq_result_from_state(state) (homodyne_cpp/__init__.py), so that unpickling never
      // makes an instance through __new__ (refused below) and then fills it.
      .def("_state", &NlsqResult::State, "The state a pickle keeps (NlsqResult.__reduce__).");
  m.def(
      "_nlsq_result_from_state",
      [](const py::tuple& state) { return NlsqResult::FromState(state); }, py::arg("state"),
      "The NlsqResult of a pickled state (NlsqResult.__reduce__).");
}

// Refuses NlsqResult() and Config() from Python. Needs both classes bound.
void RefuseDirectConstruction(py::module_& m) {
  // Every instance comes from the engine (a C++ value converted). A class's __new__ would make
  // one whose C++ value was never constructed, and reading it crashed the interpreter: refused.
  for (const char* name : {"NlsqResult", "Config"}) {
    const std::string message =
        std::string(name) + " cannot be created directly: " +
        (std::string(name) == "Config" ? "load_config returns one" : "fit_nlsq returns one");
    m.attr(name).attr("__new__") = py::staticmethod(
        py::cpp_function([message](const py::args&, const py::kwargs&) -> py::object {
          throw py::type_error(message);
        }));
  }
}

// The fit: _fit_nlsq (behind fit_nlsq) and the rings of a multi-ring config (_rings,
// _ring_folder_name, _write_ring_summary).
void BindFit(py::module_& m) {
  m.def(
      "_fit_nlsq",
      [](const std::optional<py::dict>& data, const LoadedConfig& config,
         const std::vector<InitialValue>& initial_values, std::optional<int> threads,
         std::optional<std::string> strategy, std::optional<double> memory_limit_gb,
         std::optional<std::string> global_search, std::optional<bool> fast_mode,
         std::optional<int> max_iterations, std::optional<std::string> checkpoint_dir,
         std::optional<bool> checkpoints, std::optional<bool> resume, const py::object& progress,
         std::optional<std::string> output_dir, std::optional<std::string> uncertainty,
         std::optional<double> ring_q) {
        const PythonFitOptions options{threads,   strategy,       memory_limit_gb, global_search,
                                       fast_mode, max_iterations, checkpoint_dir,  checkpoints,
                                       resume,    uncertainty};
        return FitNlsq(data, config, initial_values, options, progress, output_dir, ring_q);
      },
      py::arg("data"), py::arg("config"), py::arg("initial_values"), py::arg("threads"),
      py::arg("strategy"), py::arg("memory_limit_gb"), py::arg("global_search"),
      py::arg("fast_mode"), py::arg("max_iterations"), py::arg("checkpoint_dir"),
      py::arg("checkpoints"), py::arg("resume"), py::arg("progress"), py::arg("output_dir"),
      py::arg("uncertainty"), py::arg("ring_q") = py::none(),
      "fit_nlsq with its arguments converted (homodyne_cpp.fit_nlsq).");
  m.def(
      "_rings",
      [](const LoadedConfig& loaded) -> py::object {
        const DataSelection& selection = loaded.config.data;
        if (!SelectsSeveralRings(selection)) return py::none();
        std::vector<double> qs;
        for (const RingInfo& ring : ListSelectedRings(selection)) qs.push_back(ring.q_inv_angstrom);
        return py::make_tuple(std::string(ToString(selection.q_fit)), qs);
      },
      py::arg("config"),
      "None for one ring, else (q_fit, [q of each selected ring]) (docs/python.md, Several q "
      "rings).");
  m.def("_ring_folder_name", &RingFolderName, py::arg("q"), "q_<q>, a ring's results folder.");
  m.def("_write_ring_summary", &WriteRingSummary, py::arg("output_dir"), py::arg("ring_qs"),
        "Writes OUTPUT_DIR/nlsq/q_summary.json and .csv; returns the JSON's path.");
}

// _compute_c2, behind compute_c2: the model at given parameters.
void BindModel(py::module_& m) {
  m.def("_compute_c2", &ComputeC2, py::arg("params"), py::arg("t"), py::arg("phi"), py::arg("q"),
        py::arg("L"), py::arg("contrast"), py::arg("offset"), py::arg("mode"), py::arg("dt"),
        "compute_c2 with its arguments converted (homodyne_cpp.compute_c2).");
}

}  // namespace
}  // namespace homodyne::python

PYBIND11_MODULE(_core, m) {
  using namespace homodyne::python;
  m.doc() = "The compiled part of homodyne_cpp (docs/python.md); import homodyne_cpp instead.";
  m.attr("__version__") = HOMODYNE_VERSION;
  // The interval_note's start for an interval that is the bounds (homodyne/results.h), for the
  // printed result's marks.
  m.attr("_NOT_DETERMINED_NOTE") = homodyne::kNotDeterminedNote;
  // Quiet by default in Python: a notebook shows the engine's warnings, not its progress lines
  // (fit_nlsq(verbose=True) or set_log_level("info") shows them).
  spdlog::set_level(spdlog::level::warn);

  BindErrors(m);
  BindConfig(m);
  BindLogging(m);
  BindLoaders(m);
  BindNlsqResult(m);
  RefuseDirectConstruction(m);
  BindFit(m);
  BindModel(m);
}
