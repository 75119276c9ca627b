"""pytest options and fixtures of the homodyne_cpp tests (run by ctest as python.pytest)."""
import os
import shutil
import subprocess
import textwrap

import pytest


def pytest_addoption(parser):
    parser.addoption("--homodyne-bin", default=None,
                     help="folder holding the homodyne and homodyne-simulate programs")


@pytest.fixture(scope="session")
def bin_dir(request):
    folder = request.config.getoption("--homodyne-bin")
    if folder is None:
        found = shutil.which("homodyne")
        folder = os.path.dirname(found) if found else None
    if folder is None or not os.path.exists(os.path.join(folder, "homodyne")):
        pytest.fail("give --homodyne-bin=FOLDER (the built homodyne programs)")
    return folder


LAMINAR_CONFIG = textwrap.dedent("""\
    analysis_mode: laminar_flow
    analyzer_parameters:
      dt: 0.1
      start_frame: 1
      end_frame: -1
      scattering: {wavevector_q: 0.0054}
      geometry: {stator_rotor_gap: 2000000}
    experimental_data:
      data_folder_path: ./
      data_file_name: sim.h5
    initial_parameters:
      parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
      values: [1300, -0.4, 12, 0.00025, 0.1, 0, 1]
    optimization:
      streaming: {checkpoint_dir: ./checkpoints}
    simulation:
      output: ./sim.h5
      format: aps_u
      frames: 160
      phi_angles: [0, 45, 90]
      parameters: {D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.0002, beta: 0,
                   gamma_dot_t_offset: 0, phi0: 0}
      contrast: [0.3, 0.28, 0.25]
      offset: 1.0
      noise_sigma: 0.01
      seed: 7
      dtype: float32
      compression: none
    """)


@pytest.fixture(scope="session")
def laminar_set(tmp_path_factory, bin_dir):
    """A simulated laminar-flow data set and its config: (folder, config path)."""
    folder = tmp_path_factory.mktemp("laminar")
    config = folder / "fit.yaml"
    config.write_text(LAMINAR_CONFIG)
    subprocess.run([os.path.join(bin_dir, "homodyne-simulate"), "--config", str(config)],
                   cwd=folder, check=True, capture_output=True)
    return folder, config
