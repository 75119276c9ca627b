"""Several q rings from Python (docs/python.md, Several q rings): load_xpcs_data returns every
selected ring's matrices with a q per matrix, fit_nlsq fits them independently ({q: result},
each ring's folder and the summary), and q_fit joint is refused until the engine fits several
q."""
import json
import os
import subprocess

import numpy as np
import pytest

import homodyne_cpp as hc

from conftest import LAMINAR_CONFIG

RINGS = [0.0048, 0.0054, 0.006]


@pytest.fixture(scope="module")
def rings_set(tmp_path_factory, bin_dir):
    """A 3-ring x 2-angle simulated laminar-flow file with one truth: (folder, config path)."""
    folder = tmp_path_factory.mktemp("rings")
    text = (LAMINAR_CONFIG
            .replace("scattering: {wavevector_q: 0.0054}",
                     "scattering: {wavevector_q: [0.0048, 0.0054, 0.0060]}")
            .replace("phi_angles: [0, 45, 90]", "phi_angles: [0, 90]")
            .replace("contrast: [0.3, 0.28, 0.25]", "contrast: 0.3")
            .replace("frames: 160", "frames: 80"))
    config = folder / "rings.yaml"
    config.write_text(text)
    subprocess.run([os.path.join(bin_dir, "homodyne-simulate"), "--config", str(config)],
                   cwd=folder, check=True, capture_output=True)
    return folder, config


@pytest.fixture
def in_rings(rings_set, monkeypatch):
    monkeypatch.chdir(rings_set[0])
    return rings_set


def test_load_xpcs_data_returns_every_ring_with_a_q_per_matrix(in_rings):
    data = hc.load_xpcs_data(in_rings[1])
    assert data["c2_exp"].shape == (6, 79, 79)
    np.testing.assert_allclose(data["wavevector_q_list"], np.repeat(RINGS, 2))
    np.testing.assert_allclose(data["phi_angles_list"], [0, 90] * 3)


def test_independent_fits_return_a_result_per_ring_and_the_summary(in_rings, tmp_path):
    results = hc.fit_nlsq(None, in_rings[1], global_search="off", output_dir=tmp_path)
    assert list(results) == pytest.approx(RINGS)
    truth = {"D0": 1000.0, "alpha": -0.5, "D_offset": 10.0}
    for q, result in results.items():
        for name, value in truth.items():
            k = result.param_names.index(name)
            assert abs(result.parameters[k] - value) < 4 * result.uncertainties[k], (q, name)
    summary = json.loads((tmp_path / "nlsq" / "q_summary.json").read_text())
    assert [ring["folder"] for ring in summary["rings"]] == ["q_0.0048", "q_0.0054", "q_0.006"]
    assert (tmp_path / "q_0.006" / "nlsq" / "parameters.json").is_file()
    # From the loaded dict: each ring's matrices by their q, the same numbers.
    from_dict = hc.fit_nlsq(hc.load_xpcs_data(in_rings[1]), in_rings[1], global_search="off")
    for q in RINGS:
        np.testing.assert_array_equal(from_dict[q].parameters, results[q].parameters)


def test_joint_fits_every_ring_at_once(in_rings):
    text = in_rings[1].read_text().replace(
        "scattering: {wavevector_q: [0.0048, 0.0054, 0.0060]}",
        "scattering: {wavevector_q: [0.0048, 0.0054, 0.0060], q_fit: joint}")
    path = in_rings[0] / "joint.yaml"
    path.write_text(text)
    joint = hc.fit_nlsq(None, path, global_search="off")
    # Angles 0 and 90 only: beta and gamma_dot_t_offset trade off along a valley (and phi0 has its
    # mirror), so the fit may stop at max_iterations; it must fit every ring's data.
    assert joint.convergence_status in ("converged", "max_iterations")
    assert 0.8 < joint.reduced_chi_squared < 1.2
    per_angle = joint.to_dict()["per_angle"]
    assert sorted({round(angle["q_inv_angstrom"], 6) for angle in per_angle}) == sorted(RINGS)
    # The same rings from the loaded dict (a q per matrix): the same joint fit.
    from_dict = hc.fit_nlsq(hc.load_xpcs_data(path), path, global_search="off")
    np.testing.assert_allclose(from_dict.parameters, joint.parameters, rtol=1e-9)
