#!/usr/bin/env python3
"""Writes a small set of homodyne result files (nlsq/fitted_data.h5, parameters.json) that
homodyne-plot draws, or one with a fault, for tests/cli/cli_test.sh (case plot_bad_input).

Usage: plot_results.py DIR [FAULT]   (needs h5py and numpy)
FAULT of fitted_data.h5: nan_time, decreasing_time, one_time, string_phi, nan_phi,
missing_residuals, wrong_shape, no_angles; without FAULT the files are valid (8 fitted times,
one angle, a 2 x 2 correlation matrix).
"""
import json
import os
import sys

import h5py
import numpy


def write(folder, fault=None):
    os.makedirs(os.path.join(folder, "nlsq"), exist_ok=True)
    n = 8
    t = numpy.arange(1, n + 1) * 0.1
    if fault == "nan_time":
        t[3] = numpy.nan
    elif fault == "decreasing_time":
        t[5] = t[2]
    elif fault == "one_time":
        n, t = 1, t[:1]
    fit = 1 + 0.3 * numpy.exp(-numpy.abs(t[:, None] - t[None, :]))
    data = fit + 0.01 * numpy.random.default_rng(1).standard_normal((n, n))
    with h5py.File(os.path.join(folder, "nlsq", "fitted_data.h5"), "w") as file:
        file["t"] = t
        file["phi"] = [0.0]
        file["q"] = 0.0054
        if fault == "no_angles":
            return
        group = file.create_group("angles/phi_000")
        group.attrs["phi"] = {"string_phi": "zero", "nan_phi": numpy.nan}.get(fault, 0.0)
        group.attrs["contrast"] = 0.3
        group.attrs["offset"] = 1.0
        group["data"] = data if fault != "wrong_shape" else data[:, :-1]
        group["fit"] = fit
        if fault != "missing_residuals":
            group["residuals"] = data - fit
    if fault is None:
        parameters = {"analysis_mode": "static", "chi_squared": 1.0, "reduced_chi_squared": 1.0,
                      "correlation": {"parameter_names": ["D0", "alpha"],
                                      "matrix": [[1, 0.5], [0.5, 1]]}}
        with open(os.path.join(folder, "nlsq", "parameters.json"), "w") as file:
            json.dump(parameters, file)


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
