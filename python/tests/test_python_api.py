"""homodyne_cpp as a Python API: options per call, argument errors, configs of every kind,
results as Python objects, compute_c2's inputs, checkpoint advice in Python's words."""
import copy
import json
import os
import pathlib
import pickle
import subprocess

import numpy as np
import pytest

import homodyne_cpp as hc

# The laminar set's config (conftest.LAMINAR_CONFIG) as the dict a YAML loader makes of it.
LAMINAR_DICT = {
    "analysis_mode": "laminar_flow",
    "analyzer_parameters": {"dt": 0.1, "start_frame": 1, "end_frame": -1,
                            "scattering": {"wavevector_q": 0.0054},
                            "geometry": {"stator_rotor_gap": 2000000}},
    "experimental_data": {"data_folder_path": "./", "data_file_name": "sim.h5"},
    "initial_parameters": {
        "parameter_names": ["D0", "alpha", "D_offset", "gamma_dot_t0", "beta",
                            "gamma_dot_t_offset", "phi0"],
        "values": [1300, -0.4, 12, 0.00025, 0.1, 0, 1]},
    "optimization": {"streaming": {"checkpoint_dir": "./checkpoints"}},
}


@pytest.fixture
def in_set(laminar_set, monkeypatch):
    """(folder, config path), with the folder as working directory."""
    monkeypatch.chdir(laminar_set[0])
    return laminar_set


# 1. Options are per call, checked by the CLI's checker.

def test_threads_option_holds_for_one_call(in_set):
    config = hc.load_config(in_set[1])
    default = hc.fit_nlsq(None, config, checkpoints=False).threads
    other = 1 if default > 1 else 2
    assert hc.fit_nlsq(None, config, checkpoints=False, threads=other).threads == other
    assert hc.fit_nlsq(None, config, checkpoints=False).threads == default


@pytest.mark.parametrize("options, flags, keyword_message, flag_message", [
    ({"memory_limit_gb": -1}, ["--memory-limit-gb=-1"], "memory_limit_gb = -1: must be > 0",
     "--memory-limit-gb -1: must be > 0"),
    ({"threads": 0}, ["--threads=0"], "threads = 0: must be >= 1",
     "--threads 0: must be >= 1"),
    ({"initial_params": {"D0": -5.0}}, ["--initial-d0=-5"],
     r"initial_params\['D0'\] = -5: must be > 0", "--initial-d0 -5: must be > 0"),
])
def test_options_are_refused_as_the_cli_refuses_the_flag(in_set, bin_dir, options, flags,
                                                         keyword_message, flag_message):
    folder, config_path = in_set
    with pytest.raises(ValueError, match=keyword_message):
        hc.fit_nlsq(None, config_path, checkpoints=False, **options)
    cli = subprocess.run([os.path.join(bin_dir, "homodyne"), "--config", str(config_path),
                          "--dry-run", *flags], cwd=folder, capture_output=True, text=True)
    assert cli.returncode == 2
    assert flag_message in cli.stderr


def test_uncertainty_keyword_chooses_the_method_and_changes_no_value(in_set):
    config = hc.load_config(in_set[1])
    results = {method: hc.fit_nlsq(None, config, checkpoints=False, uncertainty=method)
               for method in ("jackknife", "standard", "curvature")}
    # The default (auto): independent noise here, so the standard error, chosen by the residuals'
    # lag-1 correlation.
    default = hc.fit_nlsq(None, config, checkpoints=False)
    assert default.uncertainty_method == "standard"
    assert abs(default.residual_lag1_correlation) < 0.02
    assert default.uncertainty_ratio_to_standard == {}
    assert results["jackknife"].uncertainty_ratio_to_standard.keys() == set(default.param_names)
    for method, result in results.items():
        assert result.uncertainty_method == method
        assert (result.parameters == results["curvature"].parameters).all()
    ratio = results["standard"].uncertainties / results["curvature"].uncertainties
    assert abs(ratio - 2 ** 0.5).max() < 0.01
    assert results["jackknife"].uncertainty_blocks >= 8
    assert results["curvature"].uncertainty_blocks == 0
    assert "uncertainties: frame-block jackknife" in str(results["jackknife"])
    assert results["jackknife"].interval_68.shape == (7, 2)
    # Without profile intervals: value +- t u (Student's t with the jackknife's blocks - 1
    # degrees of freedom), none for curvature.
    lower, upper = results["jackknife"].interval_68.T
    free = np.isfinite(lower)
    assert free.any()
    assert (lower[free] < results["jackknife"].parameters[free]).all()
    assert (upper[free] > results["jackknife"].parameters[free]).all()
    assert np.isnan(results["curvature"].interval_68).all()
    asked = copy.deepcopy(LAMINAR_DICT)
    asked["optimization"]["nlsq"] = {"profile_intervals": True}
    with_intervals = hc.fit_nlsq(None, asked, checkpoints=False)
    lower, upper = with_intervals.interval_68.T
    values = with_intervals.parameters
    assert np.isfinite(lower[0]) and np.isfinite(upper[0])  # D0's ends
    # An end a profile fit could not compute is NaN (its estimate's interval_note says so).
    assert (np.isnan(lower) | (lower < values)).all() and (np.isnan(upper) | (values < upper)).all()
    assert (np.isnan(lower) | (with_intervals.interval_95[:, 0] <= lower)).all()  # bound: equal
    # Printed as the CLI prints them: the 68 % profile interval relative to the value.
    d0 = next(line for line in str(with_intervals).splitlines() if line.split()[:1] == ["D0"])
    assert f"  [{lower[0] - values[0]:+.3g}, {upper[0] - values[0]:+.3g}]" in d0
    with pytest.raises(ValueError, match="uncertainty = 'sandwich': must be one of auto, jackknife, "
                                         "standard, curvature"):
        hc.fit_nlsq(None, config, checkpoints=False, uncertainty="sandwich")


# 2. progress is checked first; its exceptions come back as they are.

def test_progress_must_be_callable(in_set):
    with pytest.raises(TypeError, match="progress must be a callable"):
        hc.fit_nlsq(None, in_set[1], progress=5)
    # Checked before anything is read: a missing config is not even looked at.
    with pytest.raises(TypeError, match="progress must be a callable"):
        hc.fit_nlsq(None, in_set[0] / "missing.yaml", progress=5)


def test_progress_exception_is_raised_as_itself_not_as_a_signal(in_set, capfd):
    class Stop(Exception):
        pass

    calls = []

    def progress(event):
        calls.append(event)
        if len(calls) == 30:
            raise Stop("enough")

    checkpoints = in_set[0] / "callback_checkpoints"
    with pytest.raises(Stop, match="enough"):
        hc.fit_nlsq(None, in_set[1], progress=progress, checkpoint_dir=checkpoints)
    err = capfd.readouterr().err
    assert "SIGINT" not in err
    assert "the progress callback raised Stop; checkpoint saved" in err


def test_fits_are_quiet_unless_verbose(in_set, capfd):
    checkpoints = in_set[0] / "quiet_checkpoints"
    def printed():
        captured = capfd.readouterr()
        return captured.out + captured.err

    hc.fit_nlsq(None, in_set[1], checkpoint_dir=checkpoints, max_iterations=2)
    assert "[info]" not in printed()
    hc.fit_nlsq(None, in_set[1], checkpoint_dir=checkpoints, max_iterations=2, verbose=True)
    assert "[info] iteration" in printed()
    hc.fit_nlsq(None, in_set[1], checkpoint_dir=checkpoints, max_iterations=2)
    assert "[info]" not in printed()  # the level is restored after the call


# 3. Short errors naming the argument, never the data.

@pytest.mark.parametrize("arguments, error, text", [
    ({"thread": 2}, TypeError, "unexpected keyword argument 'thread'"),
    ({"threads": "x"}, TypeError, "threads must be an int, not str"),
    ({"threads": 2.5}, TypeError, "threads must be an int, not float"),
    ({"initial_params": "abc"}, TypeError, "initial_params must be a dict"),
    ({"initial_params": {"D0": "big"}}, TypeError, r"initial_params\['D0'\] must be a number"),
    ({"checkpoints": "no"}, TypeError, "checkpoints must be True or False, not str"),
    ({"strategy": 3}, TypeError, "strategy must be a str, not int"),
    ({"output_dir": 3}, TypeError, "output_dir must be a path"),
    # Beyond an int: pybind11's overload error printed the whole data dict (5.8 KB).
    ({"threads": 2**70}, ValueError,
     "threads = 1180591620717411303424: must be an int from -2147483648 to 2147483647"),
    ({"max_iterations": -2**40}, ValueError, "max_iterations = -1099511627776: must be an int"),
])
def test_bad_arguments_give_short_errors_naming_them(in_set, arguments, error, text):
    config = hc.load_config(in_set[1])
    data = hc.load_xpcs_data(config)
    with pytest.raises(error, match=text) as raised:
        hc.fit_nlsq(data, config, **arguments)
    message = str(raised.value)
    assert len(message) < 200 and "array(" not in message and "c2_exp" not in message


@pytest.mark.parametrize("change, text", [
    ({"phi_angles_list": "abc"}, r"data\['phi_angles_list'\] must be a number or a sequence"),
    ({"dt": None}, r"data\['dt'\] must be a number"),
    ({"c2_exp": None}, r"data\['c2_exp'\] has dtype object"),
])
def test_bad_data_entries_give_short_type_errors(in_set, change, text):
    config = hc.load_config(in_set[1])
    data = dict(hc.load_xpcs_data(config), **change)
    with pytest.raises(TypeError, match=text) as raised:
        hc.fit_nlsq(data, config, checkpoints=False)
    assert len(str(raised.value)) < 200
    with pytest.raises(TypeError, match="data must be None .* not list"):
        hc.fit_nlsq([data["c2_exp"]], config)


def test_times_that_are_not_the_fitted_grid_are_refused(in_set):
    # A raw matrix that still holds frame 0 (t from 0) was fitted one frame late, in silence.
    config = hc.load_config(in_set[1])
    data = hc.load_xpcs_data(config)
    dt = float(data["dt"]) if "dt" in data else float(data["t1"][1] - data["t1"][0])
    from_zero = dict(data, t1=data["t1"] - dt, t2=data["t2"] - dt)
    from_zero.pop("dt", None)
    with pytest.raises(ValueError, match=r"data\['t1'\]\[0\] = 0, expected .*c2_exp\[:, 1:, 1:\]"):
        hc.fit_nlsq(from_zero, config, checkpoints=False)
    with pytest.raises(ValueError, match=r"data\['t2'\] has 3 times but c2_exp has"):
        hc.fit_nlsq(dict(data, t2=data["t2"][:3]), config, checkpoints=False)


# 4. Configs: a str, a path, a dict.

def test_config_from_path_or_dict_fits_as_the_file(in_set):
    folder, config_path = in_set
    from_text = hc.fit_nlsq(None, str(config_path), checkpoints=False)
    from_path = hc.fit_nlsq(None, pathlib.Path(config_path), checkpoints=False)
    from_dict = hc.fit_nlsq(None, LAMINAR_DICT, checkpoints=False)
    assert list(from_path.parameters) == list(from_text.parameters)
    assert list(from_dict.parameters) == list(from_text.parameters)
    assert hc.load_config(LAMINAR_DICT).param_names == hc.load_config(config_path).param_names


def test_config_dict_is_validated_as_a_file():
    unknown = dict(LAMINAR_DICT, optimisation={"nlsq": {}})
    with pytest.warns(UserWarning, match="optimisation.*optimization"):
        loaded = hc.load_config(unknown)
    assert any("optimisation" in warning and "optimization" in warning
               for warning in loaded.warnings)
    bad = dict(LAMINAR_DICT, optimization={"nlsq": {"max_iterations": -3}})
    with pytest.raises(hc.ConfigError,
                       match="config dict.*optimization.nlsq.max_iterations = -3: must be > 0"):
        hc.load_config(bad)
    with pytest.raises(TypeError, match=r"config\['optimization'\] is a set"):
        hc.load_config(dict(LAMINAR_DICT, optimization={1, 2}))
    with pytest.raises(TypeError, match="config must be a path .* not int"):
        hc.load_config(3)


# 5. Results: read-only arrays, to_dict, HTML, pickling, docstrings.

@pytest.fixture(scope="module")
def fitted(laminar_set):
    folder, config_path = laminar_set
    previous = os.getcwd()
    os.chdir(folder)
    try:
        return hc.fit_nlsq(None, config_path, checkpoints=False)
    finally:
        os.chdir(previous)


def test_result_arrays_cannot_be_changed(fitted):
    for name in ("parameters", "uncertainties", "covariance", "contrast", "offset",
                 "contrast_uncertainties", "offset_uncertainties", "phi_angles"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(fitted, name)[0] = 1.0
    assert fitted.parameters[0] != 1.0


def test_to_dict_is_plain_and_json_serialisable(fitted):
    as_dict = fitted.to_dict()
    again = json.loads(json.dumps(as_dict))
    assert again == as_dict
    assert [p["name"] for p in as_dict["physical"]] == fitted.param_names
    assert [p["value"] for p in as_dict["physical"]] == list(fitted.parameters)
    assert as_dict["chi_squared"] == fitted.chi_squared
    assert as_dict["quality_flag"] == fitted.quality_flag
    assert as_dict["report"] == fitted.report


def test_classes_cannot_be_made_without_the_engine(fitted):
    # __new__ made an instance whose C++ value was never constructed: reading it crashed.
    for cls, source in ((hc.NlsqResult, "fit_nlsq"), (hc.Config, "load_config")):
        with pytest.raises(TypeError, match=f"{cls.__name__} cannot be created directly: "
                                            f"{source} returns one"):
            cls.__new__(cls)
        with pytest.raises(TypeError, match="cannot be created directly"):
            cls()
    # Copies and pickles still work (they call the engine's factory).
    assert copy.copy(fitted) == fitted
    assert copy.deepcopy(fitted) == fitted
    with pytest.raises((TypeError, ValueError, KeyError, RuntimeError)):
        type(fitted).__reduce__(fitted)[0](("not", "a", "state"))


def test_a_config_path_with_a_nul_is_named():
    with pytest.raises(ValueError, match=r"config = 'a\\x00b.yaml': contains a NUL character "
                                         r"at position 1"):
        hc.load_config("a\0b.yaml")


def test_pickle_round_trip_is_equal(fitted):
    restored = pickle.loads(pickle.dumps(fitted))
    assert restored == fitted
    assert restored.to_dict() == fitted.to_dict()
    np.testing.assert_array_equal(restored.fitted_c2(), fitted.fitted_c2())
    np.testing.assert_array_equal(restored.covariance, fitted.covariance)


def test_print_shows_the_parameter_table(fitted):
    text = str(fitted)
    assert text.splitlines()[0] == fitted.report
    for name, value in zip(fitted.param_names, fitted.parameters):
        assert any(line.split()[:2] == [name, f"{value:.6g}"] for line in text.splitlines())
    assert f"quality {fitted.quality_flag}" in text
    assert repr(fitted).startswith("<NlsqResult ")  # repr stays one line


def test_print_shows_units_and_fixed_parameters(in_set):
    """Each parameter's unit after its uncertainty, and " (fixed)" after a held one
    (docs/results.md, Fields shared with the reference)."""
    config = dict(LAMINAR_DICT, initial_parameters=dict(
        LAMINAR_DICT.get("initial_parameters", {}), fixed_parameters=["gamma_dot_t_offset"]))
    result = hc.fit_nlsq(None, config, checkpoints=False, global_search="off")
    lines = str(result).splitlines()
    d0 = next(line for line in lines if line.split()[:1] == ["D0"])
    assert d0.endswith(" Å²/s^(1+α)")
    held = next(line for line in lines if line.split()[:1] == ["gamma_dot_t_offset"])
    assert held.endswith(" 1/s (fixed)")
    assert not d0.endswith("(fixed)")
    physical = {p["name"]: p for p in result.to_dict()["physical"]}
    assert physical["phi0"]["unit"] == "deg" and physical["gamma_dot_t_offset"]["fixed"]
    assert "<td>Å²/s^(1+α)</td>" in result._repr_html_()


def test_parameters_whose_interval_is_the_bounds_are_marked(in_set):
    """print(result) and the HTML table mark a parameter whose 68 % interval is its bounds, as the
    CLI's table does (docs/results.md, Intervals): with alpha held at 0, D(t) = D0 + D_offset, and
    the data fix only the sum."""
    config = copy.deepcopy(LAMINAR_DICT)
    config["initial_parameters"]["values"][1] = 0.0
    config["initial_parameters"]["fixed_parameters"] = ["alpha"]
    fitted = hc.fit_nlsq(None, config, checkpoints=False, global_search="off")
    notes = {p["name"]: p["interval_note"] for p in fitted.to_dict()["physical"]}
    spanning = {name for name, note in notes.items()
                if note.startswith("not determined within parameter_space.bounds")}
    assert spanning
    lines = {line.split()[0]: line for line in str(fitted).splitlines()[1:]
             if line.split() and line.split()[0] in notes}
    html = fitted._repr_html_()
    for name in notes:
        marked = lines[name].endswith(" (not determined within the bounds)")
        assert marked == (name in spanning), lines[name]
        row = html[html.index(f"<td>{name}</td>"):]
        row = row[:row.index("</tr>")]
        assert ("not determined within the bounds" in row) == (name in spanning), row


def test_html_table_lists_parameters_and_quality(fitted):
    html = fitted._repr_html_()
    assert html.startswith("<table>")
    for name in fitted.param_names:
        assert f"<td>{name}</td>" in html
    assert "reduced chi2" in html and f"quality {fitted.quality_flag}" in html


def test_parameter_held_by_a_bound_is_marked_with_an_honest_uncertainty(in_set):
    """D0's lower bound lies above the truth (1000): the fit ends on it, says so, and reports
    the data's uncertainty with the bound released, not 0 (docs/results.md, Parameters at a
    bound)."""
    config = dict(LAMINAR_DICT, parameter_space={
        "bounds": [{"name": "D0", "min": 2000, "max": 100000}]})
    result = hc.fit_nlsq(None, config, checkpoints=False, global_search="off")
    d0 = result.param_names.index("D0")
    assert result.parameters[d0] == 2000.0
    assert result.at_bound["D0"] == "lower"
    assert result.uncertainties[d0] > 0.0
    assert result.to_dict()["physical"][d0]["at_bound"] == "lower"
    assert "at lower bound" in result._repr_html_()
    assert result.quality_flag != "good"


def test_every_public_function_and_property_has_a_docstring():
    for owner in (hc, hc.NlsqResult, hc.Config):
        for name in dir(owner):
            if name.startswith("_") and name != "_repr_html_":
                continue
            member = getattr(owner, name)
            if isinstance(member, (str, type(hc))) or isinstance(member, type):
                continue
            assert (member.__doc__ or "").strip(), f"{owner.__name__}.{name}"


# 6. compute_c2: scalars for one angle, inputs checked as a fit's data.

T = 0.1 * np.arange(1, 21)
TRUTH = [1500.0, -0.6, 5.0, 3e-4, -0.3, 0.0, 10.0]


def test_compute_c2_warns_when_dt_is_not_the_grid_step():
    # The reference integrates with step dt whatever t's spacing: allowed, never in silence.
    with pytest.warns(UserWarning, match=r"dt = 0.5 is not the spacing of t \(t\[1\] - t\[0\] = 0.1"):
        hc.compute_c2(TRUTH, T, [0.0], 0.0054, 2e6, dt=0.5)


def test_compute_c2_takes_scalars_for_one_angle():
    one = hc.compute_c2(TRUTH, T, 30.0, 0.0054, 2e6, contrast=0.3, offset=1.0)
    listed = hc.compute_c2(TRUTH, T, [30.0], 0.0054, 2e6, contrast=[0.3], offset=[1.0])
    assert one.shape == (1, 20, 20)
    np.testing.assert_array_equal(one, listed)


@pytest.mark.parametrize("change, error, text", [
    ({"q": -1.0}, hc.DataError, "q = -1 1/A; q must be finite and > 0"),
    ({"q": float("nan")}, hc.DataError, "q must be finite and > 0"),
    ({"phi": [0.0, float("nan")]}, hc.DataError, "phi must be a finite angle"),
    # An inf angle is named as given (it read "phi = -nan").
    ({"phi": [float("inf")]}, hc.DataError, r"has phi = inf; phi must be a finite angle"),
    # The model integrates over a uniform grid: another grid, or a dt that is not its step, is
    # refused (it was integrated as uniform).
    ({"t": [0.1, 0.2, 0.4]}, ValueError, r"t is not uniform: t\[2\] - t\[1\] = 0.2"),

    ({"phi": [10.0, 10.0]}, hc.DataError, "each angle once"),
    ({"t": [0.2, 0.1, 0.3]}, ValueError, r"t\[1\] <= t\[0\]: t must increase"),
    ({"t": [0.1, float("inf")]}, ValueError, r"t\[1\] = inf: must be finite"),
    ({"params": TRUTH[:3]}, ValueError, "params has 3 values; laminar_flow has 7"),
    ({"params": "abc"}, TypeError, "params must be a number or a sequence of numbers, not str"),
    ({"contrast": [0.3, 0.2, 0.1]}, ValueError, "contrast has 3 values: give 1 or one per angle"),
    ({"L": 0.0}, ValueError, "L = 0"),
    ({"phi": np.zeros((2, 2))}, ValueError, r"phi must be a number or 1-D"),
])
def test_compute_c2_checks_its_inputs(change, error, text):
    arguments = dict(params=TRUTH, t=T, phi=[0.0, 45.0], q=0.0054, L=2e6)
    arguments.update(change)
    with pytest.raises(error, match=text):
        hc.compute_c2(**arguments)


# 7. A checkpoint of other data: advice in Python's words.

def test_stale_checkpoint_advice_names_resume_false(in_set):
    config = hc.load_config(in_set[1])
    data = hc.load_xpcs_data(config)
    checkpoints = in_set[0] / "stale_checkpoints"
    calls = []

    def stop_early(event):
        calls.append(event)
        if len(calls) == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hc.fit_nlsq(data, config, progress=stop_early, checkpoint_dir=checkpoints)
    assert any(name.endswith(".h5") for name in os.listdir(checkpoints))
    other = dict(data, c2_exp=data["c2_exp"] * 1.001)
    with pytest.raises(hc.CheckpointMismatchError, match="different data set") as raised:
        hc.fit_nlsq(other, config, checkpoint_dir=checkpoints)
    assert str(raised.value).endswith("remove it or use resume=False")
    assert "--no-resume" not in str(raised.value)
    assert isinstance(raised.value, hc.InputError)
    assert hc.fit_nlsq(other, config, checkpoint_dir=checkpoints, resume=False).success
