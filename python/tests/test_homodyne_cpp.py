"""The Python module homodyne_cpp against the CLI and against known truths."""
import json
import os
import pickle
import re
import signal
import subprocess
import threading

import numpy as np
import pytest

import homodyne_cpp as hc


def cli_fit(bin_dir, folder, config, output):
    subprocess.run([os.path.join(bin_dir, "homodyne"), "--config", str(config), "--quiet",
                    "--output-dir", str(output)], cwd=folder, check=True, capture_output=True)
    with open(os.path.join(output, "nlsq", "parameters.json")) as handle:
        parameters = json.load(handle)
    with open(os.path.join(output, "nlsq", "analysis_results_nlsq.json")) as handle:
        parameters["fit_quality"] = json.load(handle)["fit_quality"]
    return parameters


def assert_same_as_cli(result, cli):
    names = result.param_names
    values = [cli["parameters"][name]["value"] for name in names]
    errors = [cli["parameters"][name]["uncertainty"] for name in names]
    # Bitwise: the JSON holds round-trip decimal doubles.
    assert list(result.parameters) == values
    assert list(result.uncertainties) == errors
    assert result.chi_squared == cli["chi_squared"]
    assert result.reduced_chi_squared == cli["reduced_chi_squared"]
    assert result.quality_flag == cli["fit_quality"]["quality_flag"]
    assert result.quality_reasons == cli["fit_quality"]["quality_reasons"]


def test_fit_equals_the_cli_bitwise(laminar_set, bin_dir, monkeypatch):
    folder, config_path = laminar_set
    monkeypatch.chdir(folder)
    cli = cli_fit(bin_dir, folder, config_path, folder / "cli")
    config = hc.load_config(str(config_path))
    from_file = hc.fit_nlsq(None, config)
    assert_same_as_cli(from_file, cli)
    # The same data through numpy (load_xpcs_data -> in-memory source): the same numbers.
    data = hc.load_xpcs_data(config)
    assert data["c2_exp"].shape == (3, 159, 159)
    assert data["c2_exp"].dtype == np.float64
    from_arrays = hc.fit_nlsq(data, config)
    assert_same_as_cli(from_arrays, cli)
    # float32 arrays are used as they are (the file's values), with the same result.
    data32 = dict(data, c2_exp=data["c2_exp"].astype(np.float32))
    assert_same_as_cli(hc.fit_nlsq(data32, config), cli)
    assert from_arrays.success
    assert from_arrays.covariance.shape == (13, 13)
    assert len(from_arrays.contrast) == 3
    leftover = folder / "checkpoints"
    assert not leftover.exists() or not os.listdir(leftover)  # removed after success


def test_recovers_a_known_truth_from_arrays_built_in_python(laminar_set):
    folder, config_path = laminar_set
    config = hc.load_config(str(config_path))
    dt = 0.1
    t = dt * np.arange(1, 121)
    phi = np.array([-30.0, 20.0, 75.0])
    # beta != 0: with beta = 0, gamma_dot_t0 and gamma_dot_t_offset are one parameter.
    truth = [1500.0, -0.6, 5.0, 3e-4, -0.3, 0.0, 10.0]
    clean = hc.compute_c2(truth, t, phi, q=0.0054, L=2e6, contrast=[0.25, 0.3, 0.2],
                          offset=[1.0], mode="laminar_flow")
    rng = np.random.default_rng(3)
    noisy = clean + rng.normal(0.0, 0.01, clean.shape)
    noisy = 0.5 * (noisy + noisy.transpose(0, 2, 1))  # c2 is symmetric
    data = {"c2_exp": noisy, "t1": t, "t2": t, "phi_angles_list": phi,
            "wavevector_q_list": np.full(3, 0.0054)}
    result = hc.fit_nlsq(data, config, checkpoints=False)
    assert result.success, result.message
    values = dict(zip(result.param_names, result.parameters))
    errors = dict(zip(result.param_names, result.uncertainties))
    for name in ("D0", "alpha", "gamma_dot_t0", "beta", "phi0"):
        assert abs(values[name] - truth[result.param_names.index(name)]) < 5 * errors[name], name
    np.testing.assert_allclose(result.contrast, [0.25, 0.3, 0.2], atol=0.01)
    # fitted_c2 is the model at the fitted parameters.
    fitted = result.fitted_c2()
    assert fitted.shape == noisy.shape
    assert np.sqrt(np.mean((fitted - clean) ** 2)) < 0.002


@pytest.mark.parametrize("c2, error, text", [
    (np.ones((3, 10, 10), dtype=np.int64), TypeError, "dtype int64"),
    (np.ones((10, 10)), ValueError, "shape (10, 10)"),
    (np.ones((3, 10, 12)), ValueError, "(n_phi, n_t, n_t)"),
    (np.ones((3, 10, 10, 2))[..., 0], ValueError, "C-contiguous"),
    (np.ones((0, 10, 10)), ValueError, "needs at least 1 angle and 2 times"),
    (np.ones((1, 1, 1)), ValueError, "needs at least 1 angle and 2 times"),
])
def test_bad_arrays_give_clear_errors(laminar_set, c2, error, text):
    config = hc.load_config(str(laminar_set[1]))
    data = {"c2_exp": c2, "phi_angles_list": [0.0, 45.0, 90.0][: len(c2)], "t1": np.arange(1.0, 11.0)}
    with pytest.raises(error, match=text.replace("(", r"\(").replace(")", r"\)")):
        hc.fit_nlsq(data, config, checkpoints=False)


def test_inconsistent_angles_raise_input_error(laminar_set):
    config = hc.load_config(str(laminar_set[1]))
    data = {"c2_exp": np.ones((3, 10, 10)), "phi_angles_list": [0.0, 45.0], "t1": np.arange(1.0, 11.0)}
    with pytest.raises(hc.InputError, match="2 phi angles for 3 matrices"):
        hc.fit_nlsq(data, config, checkpoints=False)


def test_config_errors_keep_the_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("analysis_mode: laminar_flow\noptimization:\n  nlsq: {max_iterations: -3}\n")
    with pytest.raises(hc.ConfigError, match="max_iterations"):
        hc.load_config(str(bad))
    with pytest.raises(hc.InputError, match="not found"):
        hc.load_config(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("initial_params, options, text", [
    ({"D1": 1.0}, {}, r"initial_params\['D1'\]: 'D1' is not a parameter of laminar_flow"),
    ([1.0, 2.0], {}, "initial_params has 2 values; laminar_flow has 7"),
    (None, {"strategy": "fastest"}, "strategy = 'fastest': must be one of standard"),
    (None, {"max_iterations": 0}, "max_iterations = 0: must be > 0"),
])
def test_keyword_options_are_checked_as_the_cli_flags(laminar_set, initial_params, options,
                                                      text):
    # The options go through the library's ResolveConfig, as the CLI's flags do.
    config = hc.load_config(str(laminar_set[1]))
    with pytest.raises(ValueError, match=text):
        hc.fit_nlsq(None, config, initial_params, checkpoints=False, **options)


def test_global_search_option_is_checked_as_the_cli_flag(laminar_set, monkeypatch):
    # --global-search's spelling (case as written), named as the keyword.
    monkeypatch.chdir(laminar_set[0])
    config = hc.load_config(str(laminar_set[1]))
    for text in ("simplex", "AUTO"):
        with pytest.raises(ValueError, match=f"global_search = '{text}': must be one of auto, "
                                             "off, multi-start, cmaes"):
            hc.fit_nlsq(None, config, checkpoints=False, global_search=text)


def test_keyboard_interrupt_stops_the_fit_and_saves_a_checkpoint(laminar_set, monkeypatch):
    folder, config_path = laminar_set
    monkeypatch.chdir(folder)
    config = hc.load_config(str(config_path))
    checkpoints = folder / "interrupted_checkpoints"
    calls = []

    def progress(event):
        calls.append(event)
        if len(calls) == 30:  # a real SIGINT, as Ctrl-C in a notebook sends
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        hc.fit_nlsq(None, config, progress=progress, checkpoint_dir=str(checkpoints))
    assert len(calls) == 30  # stopped at once
    assert any(name.endswith(".h5") for name in os.listdir(checkpoints))
    # The next call resumes and finishes.
    result = hc.fit_nlsq(None, config, checkpoint_dir=str(checkpoints))
    assert result.success


def test_progress_callback_errors_propagate(laminar_set, monkeypatch):
    monkeypatch.chdir(laminar_set[0])
    config = hc.load_config(str(laminar_set[1]))

    def progress(event):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        hc.fit_nlsq(None, config, progress=progress, checkpoints=False)


def test_the_fit_releases_the_gil(laminar_set, monkeypatch):
    folder, config_path = laminar_set
    monkeypatch.chdir(folder)
    config = hc.load_config(str(config_path))
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        hc.fit_nlsq(None, config, checkpoints=False)
    finally:
        done.set()
        counter.join()
    assert len(ticks) > 20  # the other thread ran during the fit


def test_performance_log_is_written_to_the_output_dir(laminar_set, monkeypatch):
    folder, config_path = laminar_set
    monkeypatch.chdir(folder)
    logged = folder / "logged.yaml"
    logged.write_text(config_path.read_text() +
                      "logging:\n  performance: {enabled: true, filename: perf/fit.log,\n"
                      "                threshold_seconds: 1.0e+9}\n")
    config = hc.load_config(str(logged))
    output = folder / "logged_out"
    result = hc.fit_nlsq(None, config, output_dir=str(output))
    lines = (output / "perf" / "fit.log").read_text().splitlines()
    assert any(re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[INFO\] pass \d+ \(J\) completed in", line)
               for line in lines)
    assert any("[INFO] iteration 0 (start) completed in" in line for line in lines)
    assert sum("[INFO] fit completed in" in line and " s total (converged" in line
               for line in lines) == 1
    assert not any("[DEBUG]" in line for line in lines)  # the default level is INFO
    # Without output_dir there is nowhere to put it: no file, the fit runs the same.
    again = hc.fit_nlsq(None, config)
    assert list(again.parameters) == list(result.parameters)
    assert not (folder / "perf").exists()


def test_paths_with_a_nul_are_refused_before_the_fit(laminar_set, monkeypatch):
    # Data from a dict (load_xpcs_data -> in-memory source) go through the CLI's path checks
    # (RunFitJob): a Python str can hold a NUL, which the system would read as the path's end.
    folder, config_path = laminar_set
    monkeypatch.chdir(folder)
    config = hc.load_config(str(config_path))
    data = hc.load_xpcs_data(config)
    calls = []
    with pytest.raises(hc.ConfigError, match=r"output_dir = 'nul\\0out': contains a NUL"):
        hc.fit_nlsq(data, config, progress=calls.append, output_dir="nul\0out")
    with pytest.raises(ValueError, match=r"checkpoint_dir = 'nul\\0ckpt': contains a NUL"):
        hc.fit_nlsq(data, config, progress=calls.append, checkpoint_dir="nul\0ckpt")
    assert calls == []  # nothing fitted
    assert not (folder / "nul").exists()


def test_fits_matrices_of_several_q_as_one_joint_fit(laminar_set):
    """A wavevector_q_list of one q per matrix with two values: one joint fit (docs/design.md
    section 2d), the physics shared, each matrix at its own q in the result and fitted_c2."""
    folder, config_path = laminar_set
    config = hc.load_config(str(config_path))
    t = 0.1 * np.arange(1, 81)
    phi = np.array([-30.0, 20.0, -30.0, 20.0])  # the same angles in two rings
    q = np.array([0.0054, 0.0054, 0.0081, 0.0081])
    truth = [1500.0, -0.6, 5.0, 3e-4, -0.3, 0.0, 10.0]
    clean = hc.compute_c2(truth, t, phi, q=q, L=2e6, contrast=[0.3, 0.3, 0.25, 0.25],
                          offset=1.0, mode="laminar_flow")
    # Each matrix is the model at its own q: the ring at 0.0081 decays faster.
    one_q = hc.compute_c2(truth, t, phi[2:], q=0.0081, L=2e6, contrast=0.25, mode="laminar_flow")
    np.testing.assert_array_equal(clean[2:], one_q)
    assert not np.allclose(clean[0], clean[2] * 0.3 / 0.25)
    noisy = clean + np.random.default_rng(4).normal(0.0, 0.01, clean.shape)
    noisy = 0.5 * (noisy + noisy.transpose(0, 2, 1))
    data = {"c2_exp": noisy, "t1": t, "t2": t, "phi_angles_list": phi, "wavevector_q_list": q}
    result = hc.fit_nlsq(data, config, checkpoints=False)
    assert result.success, result.message
    assert [angle["q_inv_angstrom"] for angle in result.to_dict()["per_angle"]] == list(q)
    values = dict(zip(result.param_names, result.parameters))
    errors = dict(zip(result.param_names, result.uncertainties))
    for name in ("D0", "alpha", "gamma_dot_t0", "beta", "phi0"):
        assert abs(values[name] - truth[result.param_names.index(name)]) < 5 * errors[name], name
    fitted = result.fitted_c2()
    assert np.sqrt(np.mean((fitted - clean) ** 2)) < 0.002
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(result)).fitted_c2(), fitted)
    with pytest.raises(ValueError, match="3 different q values for 4 matrices"):
        hc.fit_nlsq(dict(data, wavevector_q_list=q[:3]), config, checkpoints=False)
