# A notebook-style walk through homodyne_cpp (docs/python.md): simulate a laminar-flow data set,
# load it, fit it, print the table and plot data, fit and residuals. Each "# %%" starts a cell
# (VS Code, Jupyter's "open as notebook", or plain `python3 examples/python_fit.py`).
#
# With homodyne-cpp installed (`cmake --install build`: the package on python3's path, the
# programs on PATH), from any folder:
#   python3 path/to/examples/python_fit.py
# From a build tree, without installing (from the repository root, after scripts/build.sh):
#   PATH=$PWD/build/src/cli:$PATH PYTHONPATH=build/python /usr/bin/python3 examples/python_fit.py
# Writes examples_output/python_fit.png under the working folder; when it fails, it leaves no
# empty folder behind. ctest runs it the installed way (tests/install/python_example_test.sh).

# %% Simulate the built-in example data set (the same one scripts/demo.sh fits).
import os
import shutil
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")  # files, no window; drop this line in a notebook
import matplotlib.pyplot as plt
import numpy as np

import homodyne_cpp as hc

# The config beside this script (configs/ of the repository), the simulator on PATH.
config_path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                            "configs", "simulate_laminar_flow.yaml"))
simulate = shutil.which("homodyne-simulate")
if simulate is None:
    sys.exit("python_fit.py: homodyne-simulate is not on PATH: install homodyne-cpp "
             "(cmake --install build) or put build/src/cli on PATH")
work = os.path.abspath("examples_output")
created = not os.path.exists(work)
os.makedirs(work, exist_ok=True)


def remove_empty_folders(top):
    """Removes top and the folders below it that hold no file (this run made them)."""
    for folder, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
        if not os.listdir(folder):
            os.rmdir(folder)


try:
    os.chdir(work)  # the config's relative paths (./data/) now point into examples_output/
    subprocess.run([simulate, "--config", config_path], check=True, stdout=subprocess.DEVNULL)
except BaseException:
    if created:
        os.chdir(os.path.dirname(work))
        remove_empty_folders(work)
    raise

# %% Load the config and the data as the fit sees them.
config = hc.load_config(config_path)
print(config)
data = hc.load_xpcs_data(config)
print("c2_exp", data["c2_exp"].shape, "angles", data["phi_angles_list"], "dt", data["dt"])

# %% Fit: the global phase, then the final fit on all the data.
hc.set_log_level("warning")  # only warnings from the engine; the result is printed below
result = hc.fit_nlsq(data, config, checkpoints=False)
print(result.report)
print(f"{'parameter':20s} {'value':>14s}   uncertainty")
for name, value, error in zip(result.param_names, result.parameters, result.uncertainties):
    print(f"{name:20s} {value:14.6g}   {error:.3g}")
for phi, contrast, offset in zip(result.phi_angles, result.contrast, result.offset):
    print(f"phi {phi:7.2f} deg   contrast {contrast:.5f}   offset {offset:.5f}")
print(f"reduced chi2 {result.reduced_chi_squared:.4f}, {result.execution_time:.2f} s, "
      f"strategy {result.strategy}")

# %% Plot data, fit and residuals per angle.
fitted = result.fitted_c2()
t = data["t1"]
extent = [t[0], t[-1], t[0], t[-1]]
n_phi = len(result.phi_angles)
figure, axes = plt.subplots(n_phi, 3, figsize=(11, 3.4 * n_phi), squeeze=False)
for k in range(n_phi):
    residual = data["c2_exp"][k] - fitted[k]
    limit = np.percentile(np.abs(residual), 99)
    panels = [(data["c2_exp"][k], "data", "viridis", None),
              (fitted[k], "fit", "viridis", None),
              (residual, "data - fit", "RdBu_r", (-limit, limit))]
    for column, (image, title, colormap, limits) in enumerate(panels):
        axis = axes[k][column]
        shown = axis.imshow(image, origin="lower", extent=extent, cmap=colormap,
                            vmin=None if limits is None else limits[0],
                            vmax=None if limits is None else limits[1])
        axis.set_title(f"phi {result.phi_angles[k]:.0f} deg: {title}")
        axis.set_xlabel("t2 [s]")
        axis.set_ylabel("t1 [s]")
        figure.colorbar(shown, ax=axis, shrink=0.8)
figure.tight_layout()
figure.savefig("python_fit.png", dpi=90)
print("wrote", os.path.join(work, "python_fit.png"))
