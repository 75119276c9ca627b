#!/usr/bin/env python3
"""Profile intervals against iminuit's MINOS (docs/results.md, Profile intervals).

A small static set (2 angles x 80 frames, independent noise 0.01) is fitted by `homodyne
--profile-intervals --uncertainty curvature`; MINOS then profiles the same chi2 (both triangles,
sigma 0.01, as the fit counts it: docs/results.md, Degrees of freedom) over the same parameters
(D0, alpha, D_offset and a contrast and an offset per angle, the model from homodyne_cpp's
compute_c2), with errordef = the reduced chi2, the rise at which the curvature method's 68 %
interval ends. Each end must agree within 3 % of MINOS's half-width. Prints both intervals and
their times.

Usage: minos_test.py BIN_DIR. Needs numpy, h5py and iminuit (python3-iminuit) and the
homodyne_cpp package on PYTHONPATH: exits 77 (skipped) without them.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
    from iminuit import Minuit
    import homodyne_cpp as hc
except ImportError as missing:
    print(f"skipped: {missing}")
    sys.exit(77)

CONFIG = """analysis_mode: static
analyzer_parameters: {dt: 0.1, scattering: {wavevector_q: 0.0054}}
experimental_data: {file_path: ./sim.h5}
initial_parameters: {parameter_names: null, values: null}
optimization:
  nlsq: {sigma: 0.01}
  streaming: {enable_checkpoints: false}
simulation:
  output: ./sim.h5
  frames: 81
  phi_angles: [0.0, 90.0]
  parameters: {D0: 20000.0, alpha: -0.4, D_offset: 50.0}
  contrast: [0.3, 0.25]
  offset: 1.0
  noise_sigma: 0.01
  seed: 5
  dtype: float64
"""
NAMES = ["D0", "alpha", "D_offset"]


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="minos_") as work:
        os.chdir(work)
        with open("c.yaml", "w") as handle:
            handle.write(CONFIG)
        subprocess.run([os.path.join(bin_dir, "homodyne-simulate"), "--config", "c.yaml"],
                       check=True, capture_output=True)
        start = time.perf_counter()
        subprocess.run([os.path.join(bin_dir, "homodyne"), "--config", "c.yaml", "--output-dir",
                        "out", "--profile-intervals", "--uncertainty", "curvature", "--quiet"],
                       check=True, capture_output=True)
        ours_seconds = time.perf_counter() - start
        with open("out/nlsq/parameters.json") as handle:
            result = json.load(handle)
        with h5py.File("out/nlsq/fitted_data.h5", "r") as fitted:
            t = fitted["t"][()]
            phi = fitted["phi"][()]
            q = float(fitted["q"][()])
            data = [fitted[f"angles/phi_{k:03d}/data"][()] for k in range(len(phi))]
    n = len(t)
    upper = np.triu_indices(n, 1)
    stored = [d[upper] for d in data]
    angles = len(phi)

    def chi2(*theta):
        physical = list(theta[:3])
        contrast = list(theta[3:3 + angles])
        offset = list(theta[3 + angles:])
        model = hc.compute_c2(physical, t, list(phi), q, contrast=contrast, offset=offset,
                              mode="static", dt=float(t[1] - t[0]))
        return sum(2.0 * np.sum(((stored[k] - model[k][upper]) / 0.01) ** 2)
                   for k in range(angles))

    values = [result["parameters"][name]["value"] for name in NAMES]
    values += [angle["contrast"]["value"] for angle in result["per_angle"]]
    values += [angle["offset"]["value"] for angle in result["per_angle"]]
    names = NAMES + [f"contrast{k}" for k in range(angles)] + [f"offset{k}" for k in range(angles)]
    minuit = Minuit(chi2, *values, name=names)
    minuit.errordef = result["reduced_chi_squared"]
    start = time.perf_counter()
    minuit.migrad()
    minuit.minos(*NAMES)
    minos_seconds = time.perf_counter() - start
    failures = 0
    print(f"our fit with profile intervals {ours_seconds:.2f} s (the whole run); MIGRAD + MINOS "
          f"{minos_seconds:.2f} s")
    for name in NAMES:
        ours = result["parameters"][name]["interval_68"]
        value = result["parameters"][name]["value"]
        error = minuit.merrors[name]
        low, high = minuit.values[name] + error.lower, minuit.values[name] + error.upper
        half = 0.5 * (high - low)
        print(f"{name}: ours [{ours[0]:.6g}, {ours[1]:.6g}] around {value:.6g}; MINOS "
              f"[{low:.6g}, {high:.6g}] around {minuit.values[name]:.6g}")
        for mine, theirs, side in [(ours[0], low, "lower"), (ours[1], high, "upper")]:
            if not abs(mine - theirs) <= 0.03 * half:
                print(f"FAIL: {name}'s {side} end {mine:.6g} differs from MINOS's {theirs:.6g} "
                      f"by more than 3 % of its half-width {half:.3g}")
                failures += 1
    if failures:
        sys.exit(1)
    print("minos: all checks passed")


if __name__ == "__main__":
    main()
