"""The two_component mode (alias heterodyne) from Python: compute_c2 against the successor's own
residual fixture, L left out where the mode does not use it, and a fit of a simulated set."""
import json
import os
import pathlib
import subprocess
import textwrap

import numpy as np
import pytest

import homodyne_cpp as hc

FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / \
    "two_component_residuals.json"

# Model order (docs/model.md, Two-component mode).
NAMES = ["D0_ref", "alpha_ref", "D_offset_ref", "D0_sample", "alpha_sample", "D_offset_sample",
         "v0", "v_beta", "v_offset", "f0", "f1", "f2", "f3", "phi0_het"]


def fixture_c2(mode="two_component"):
    """The fixture's spec and compute_c2 on its grid (t from 0, its own dt), without L."""
    with open(FIXTURE) as handle:
        fixture = json.load(handle)
    spec = fixture["spec"]
    t = np.linspace(0.0, spec["t_max"], spec["N"])
    c2 = hc.compute_c2(spec["params"], t, spec["phi_angles"], spec["q"],
                       contrast=spec["contrasts"], offset=spec["offsets"], mode=mode,
                       dt=spec["dt"])
    return fixture, c2


def test_compute_c2_reproduces_the_successors_residual_fixture():
    fixture, c2 = fixture_c2()
    spec = fixture["spec"]
    n = spec["N"]
    assert c2.shape == (spec["n_phi"], n, n)
    # The fixture's residuals: c2_model - c2 at i > 0, j > 0, i != j, row-major, angle by angle.
    data = np.asarray(fixture["c2"])
    cells = [(k, i, j) for k in range(spec["n_phi"]) for i in range(1, n) for j in range(1, n)
             if i != j]
    residuals = np.array([c2[k, i, j] - data[k, i, j] for k, i, j in cells])
    upstream = np.asarray(fixture["upstream_residuals"])
    assert residuals.shape == upstream.shape == (84,)
    np.testing.assert_allclose(residuals, upstream, rtol=1e-10, atol=1e-12)
    # The alias is the same mode.
    np.testing.assert_array_equal(fixture_c2("heterodyne")[1], c2)


T = 0.1 * np.arange(1, 21)
STATIC = [1500.0, -0.6, 5.0]
LAMINAR = [1500.0, -0.6, 5.0, 3e-4, -0.3, 0.0, 10.0]
TWO_COMPONENT = [1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 20.0, 0.5, 1.0, 0.3, 0.01, 0.5, 0.2, 2.0]


@pytest.mark.parametrize("mode, params", [("static", STATIC), ("two_component", TWO_COMPONENT)])
def test_compute_c2_needs_no_L_where_the_mode_does_not_use_it(mode, params):
    without = hc.compute_c2(params, T, [0.0, 45.0], 0.0054, mode=mode)
    assert without.shape == (2, 20, 20)
    assert np.all(np.isfinite(without))
    # Given, it is checked and changes nothing.
    np.testing.assert_array_equal(hc.compute_c2(params, T, [0.0, 45.0], 0.0054, 3e6, mode=mode),
                                  without)
    with pytest.raises(ValueError, match="L = -1"):
        hc.compute_c2(params, T, [0.0, 45.0], 0.0054, L=-1.0, mode=mode)


def test_compute_c2_requires_L_for_laminar_flow():
    with pytest.raises(ValueError, match=r"^L \(the stator-rotor gap in A\) is required for "
                                         r"laminar_flow$"):
        hc.compute_c2(LAMINAR, T, [0.0, 45.0], 0.0054)
    with pytest.raises(ValueError, match="L .* required for laminar_flow"):
        hc.compute_c2(LAMINAR, T, 0.0, 0.0054, None, mode="laminar_flow")
    # The positional form of before is unchanged: L fifth.
    positional = hc.compute_c2(LAMINAR, T, [0.0, 45.0], 0.0054, 2e6, 0.3, 1.0)
    keyword = hc.compute_c2(LAMINAR, T, [0.0, 45.0], q=0.0054, L=2e6, contrast=0.3, offset=1.0)
    np.testing.assert_array_equal(positional, keyword)


TWO_COMPONENT_CONFIG = textwrap.dedent("""\
    analysis_mode: two_component
    analyzer_parameters:
      dt: 0.1
      start_frame: 1
      end_frame: -1
      scattering: {wavevector_q: 0.0054}
    experimental_data:
      data_folder_path: ./
      data_file_name: sim.h5
    simulation:
      output: ./sim.h5
      format: aps_u
      frames: 120
      phi_angles: [0, 45, 90]
      parameters: {D0_ref: 1000, alpha_ref: -0.3, D_offset_ref: 10, D0_sample: 20000,
                   alpha_sample: -0.5, D_offset_sample: 0, v0: 20, v_beta: 0.5, v_offset: 1,
                   f0: 0.3, f1: 0.01, f2: 0.5, f3: 0.2, phi0_het: 2}
      contrast: [0.3, 0.28, 0.25]
      offset: 1.0
      noise_sigma: 0.01
      seed: 7
      dtype: float32
      compression: none
    """)


def test_fit_of_a_simulated_two_component_set_names_its_14_parameters(tmp_path, bin_dir,
                                                                       monkeypatch):
    config_path = tmp_path / "fit.yaml"
    config_path.write_text(TWO_COMPONENT_CONFIG)
    subprocess.run([os.path.join(bin_dir, "homodyne-simulate"), "--config", str(config_path)],
                   cwd=tmp_path, check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    config = hc.load_config(str(config_path))
    assert config.analysis_mode == "two_component"
    assert config.param_names == NAMES
    result = hc.fit_nlsq(None, config, checkpoints=False)
    assert result.param_names == NAMES
    assert result.parameters.shape == (14,)
    assert np.all(np.isfinite(result.parameters))
    assert result.covariance.shape == (20, 20)  # 14 physical + contrast and offset per angle
    assert list(result.phi_angles) == [0.0, 45.0, 90.0]
    # The fit reaches the noise level (sigma = the simulated noise): reduced chi2 near 1.
    assert 0.9 < result.reduced_chi_squared < 1.1, result.report
    # The fitted model is compute_c2 at the result on the fitted grid (t_i = (i + 1) dt).
    t = 0.1 * np.arange(1, 120)
    np.testing.assert_allclose(
        result.fitted_c2(),
        hc.compute_c2(result.parameters, t, result.phi_angles, 0.0054, contrast=result.contrast,
                      offset=result.offset, mode="two_component", dt=0.1),
        rtol=1e-12, atol=1e-12)
