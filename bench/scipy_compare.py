#!/usr/bin/env python3
"""The homodyne fit with scipy.optimize.least_squares, for comparison with `homodyne`.

Usage: scipy_compare.py --config FILE.yaml [--jac analytic|2-point] [--x-scale 1|jac]
                        [--max-nfev N] [--json OUT.json] [--check-jacobian]
       scipy_compare.py --check-reference tests/data/reference_c2.h5

Fits the same problem `homodyne --config FILE.yaml` fits, with its own numpy model:
  * data: the APS-U file of experimental_data (as homodyne-simulate writes it; path relative to
    the working directory, as homodyne reads it), the q ring closest to
    analyzer_parameters.scattering.wavevector_q, frames [start_frame, end_frame] with the first
    kept frame dropped (docs/model.md, Time grid), the strict upper triangle of every angle;
  * model: docs/model.md (cumulative trapezoid integrals, smooth |.|, floors and clips,
    unnormalised sinc to the fourth power); matches the reference package's values in
    reference_c2.h5 to 1e-14 (--check-reference);
  * objective: docs/design.md section 1, sum over i != j of ((model - data) / sigma)^2 with
    sigma = optimization.nlsq.sigma (default 0.01), evaluated on the strict upper triangle with
    weight sqrt(2), so chi2 is the value homodyne reports;
  * parameters: [contrast_0..n-1, offset_0..n-1, physical] (per_angle_mode individual, the
    reference's order); physical starts from initial_parameters.values (bound midpoints where
    absent), contrast/offset from per_angle_scaling or the reference's quantile estimator; bounds
    from parameter_space.bounds with the default bounds (docs/model.md, Bounds and start values);
  * solver: least_squares(method="trf", bounds, loss="linear", ftol = optimization.nlsq.tolerance,
    xtol, gtol (1e-8), max_nfev = optimization.nlsq.max_iterations, x_scale 1), the settings the
    reference package uses on its stratified least-squares path (1e6 points and more). The
    Jacobian is analytic (docs/model.md, Jacobian; the reference computes the same by JAX
    autodiff), checked against central differences by --check-jacobian, unless --jac 2-point.

Prints the wall time of the fit (and of loading), nfev/njev, chi2 and the parameters; --json writes
them for bench/scipy_compare.sh. Exit 1 on bad input or a missing module.
"""

import argparse
import json
import math
import os
import sys
import time

PHYSICAL_NAMES = {
    "static": ["D0", "alpha", "D_offset"],
    "laminar_flow": ["D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "gamma_dot_t_offset",
                     "phi0"],
}
# The default bounds (docs/model.md, Bounds and start values; src/config/config_loader.cc).
DEFAULT_BOUNDS = {
    "D0": (1e2, 1e5), "alpha": (-2.0, 2.0), "D_offset": (-1e5, 1e5),
    "gamma_dot_t0": (1e-6, 0.5), "beta": (-2.0, 2.0), "gamma_dot_t_offset": (-0.1, 0.1),
    "phi0": (-10.0, 10.0), "contrast": (0.0, 1.0), "offset": (0.5, 1.5),
}
ALIASES = {"gamma_dot_0": "gamma_dot_t0", "gamma_dot_t_0": "gamma_dot_t0",
           "gamma_dot_offset": "gamma_dot_t_offset", "phi_0": "phi0"}


def fail(message):
    print(f"scipy_compare.py: error: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import h5py
    import numpy as np
    import scipy
    import yaml
    from scipy.optimize import least_squares
except ImportError as missing:
    fail(f"{missing} (needs numpy, scipy, h5py and PyYAML: apt-get install python3-numpy "
         f"python3-scipy python3-h5py python3-yaml)")


# ----------------------------------------------------------------------------------------------
# Configuration


def read_config(path):
    """The settings of FILE.yaml that the fit uses, with homodyne's defaults."""
    try:
        with open(path) as file:
            raw = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as error:
        fail(f"{path}: {error}")
    mode = str(raw.get("analysis_mode", "laminar_flow")).lower()
    mode = "static" if "static" in mode else mode
    if mode not in PHYSICAL_NAMES:
        fail(f"{path}: analysis_mode = {mode}: must be static or laminar_flow")
    analyzer = raw.get("analyzer_parameters", {})
    experimental = raw.get("experimental_data", {})
    nlsq = (raw.get("optimization") or {}).get("nlsq") or {}
    if (raw.get("phi_filtering") or {}).get("enabled"):
        fail(f"{path}: phi_filtering.enabled is not supported by this benchmark")
    per_angle_mode = (nlsq.get("anti_degeneracy") or {}).get("per_angle_mode", "individual")
    if per_angle_mode != "individual":
        fail(f"{path}: optimization.nlsq.anti_degeneracy.per_angle_mode = {per_angle_mode}: "
             f"this benchmark fits individual contrast/offset per angle only")
    bounds = dict(DEFAULT_BOUNDS)
    for entry in (raw.get("parameter_space") or {}).get("bounds") or []:
        name = ALIASES.get(entry["name"], entry["name"])
        bounds[name] = (float(entry["min"]), float(entry["max"]))
    initial = raw.get("initial_parameters") or {}
    names = [ALIASES.get(n, n) for n in initial.get("parameter_names") or PHYSICAL_NAMES[mode]]
    values = initial.get("values")
    given = dict(zip(names, [float(v) for v in values])) if values is not None else {}
    scaling = initial.get("per_angle_scaling") or {}
    return {
        "mode": mode,
        "dt": float(analyzer.get("dt", 0.001)),
        "q_target": float(analyzer["scattering"]["wavevector_q"]),
        "gap": float((analyzer.get("geometry") or {}).get("stator_rotor_gap", 2e6)),
        "start_frame": int(analyzer.get("start_frame", 1)),
        "end_frame": int(analyzer.get("end_frame", -1)),
        # Relative to the working directory, as homodyne resolves it.
        "data_file": (os.path.join(experimental["data_folder_path"], experimental["data_file_name"])
                      if "data_folder_path" in experimental and "data_file_name" in experimental
                      else experimental.get("file_path", experimental.get("data_file_name"))),
        "bounds": bounds,
        "initial": given,
        "initial_contrast": scaling.get("contrast"),
        "initial_offset": scaling.get("offset"),
        "sigma": float(nlsq.get("sigma", 0.01)),
        "max_iterations": int(nlsq.get("max_iterations", 100)),
        "ftol": float(nlsq.get("ftol", nlsq.get("tolerance", 1e-8))),
        "xtol": float(nlsq.get("xtol", 1e-8)),
        "gtol": float(nlsq.get("gtol", 1e-8)),
    }


# ----------------------------------------------------------------------------------------------
# Data (docs/design.md section 8; docs/model.md, Time grid)


def read_aps_u(config):
    """Returns (q, phi[n], t[N], data[n, P]) with data the strict upper triangles, float64."""
    path = config["data_file"]
    if not path or not os.path.isfile(path):
        fail(f"{path}: not found (experimental_data.data_folder_path + data_file_name, relative "
             f"to the working directory)")
    with h5py.File(path, "r") as file:
        q_values = file["/xpcs/qmap/dynamic_v_list_dim0"][()].ravel()
        phi_values = file["/xpcs/qmap/dynamic_v_list_dim1"][()].ravel()
        bins = file["/xpcs/twotime/processed_bins"][()].ravel()
        group = file["/xpcs/twotime/correlation_map"]
        names = sorted(group.keys())
        pairs = []  # (q, phi, matrix name) of every valid processed bin
        for index, name in zip([b - 1 for b in bins if 0 < b <= len(q_values) * len(phi_values)],
                               names):
            pairs.append((q_values[index // len(phi_values)], phi_values[index % len(phi_values)],
                          name))
        q_best = min((p[0] for p in pairs), key=lambda q: abs(q - config["q_target"]))
        kept = [p for p in pairs if abs(p[0] - q_best) < 1e-10]
        n_raw = group[kept[0][2]].shape[0]
        first = max(config["start_frame"], 1) - 1
        end = n_raw if config["end_frame"] < 0 else min(config["end_frame"], n_raw)
        # The first kept frame (t = 0) is dropped: rows/columns first+1 .. end-1.
        n_times = end - first - 1
        upper = np.triu_indices(n_times, 1)
        data = np.empty((len(kept), len(upper[0])))
        for k, (_, _, name) in enumerate(kept):
            matrix = group[name][first + 1:end, first + 1:end].astype(np.float64)
            data[k] = matrix[upper]
    # phi normalised to (-180, 180] (docs/design.md section 8).
    phi = np.array([p[1] % 360.0 for p in kept])
    phi = np.where(phi > 180.0, phi - 360.0, phi)
    t = config["dt"] * np.arange(1, n_times + 1, dtype=np.float64)
    return float(q_best), phi, t, data


def quantile_scaling(values, n_times, contrast_bound, offset_bound):
    """The quantile estimate (docs/model.md, Bounds and start values) on one angle's strict upper
    triangle (as src/optimize/initial_values.cc)."""
    finite = np.isfinite(values)
    if finite.sum() < 100:
        return 0.5 * sum(contrast_bound), 0.5 * sum(offset_bound)
    i, j = np.triu_indices(n_times, 1)
    lag = (j - i).astype(np.float64)
    high, low = np.percentile(lag, [80.0, 20.0])
    far = values[finite & (lag >= high)]
    near = values[finite & (lag <= low)]
    offset = np.percentile(far if far.size >= 10 else values[finite], 10.0)
    ceiling = np.percentile(near if near.size >= 10 else values[finite], 90.0)
    offset = float(np.clip(offset, *offset_bound))
    return float(np.clip(ceiling - offset, *contrast_bound)), offset


# ----------------------------------------------------------------------------------------------
# Model (docs/model.md) and its analytic Jacobian (docs/model.md, Jacobian)


class HomodyneModel:
    """c2 on the strict upper triangle of every angle; parameters [contrast, offset, physical].

    Residuals are (model - data) * sqrt(2) / sigma: each strict-upper point stands for (i, j) and
    (j, i), so chi2 is the sum over i != j of docs/design.md section 1, the value homodyne
    reports. The forward pass is cached for the last x, so the Jacobian at an accepted point does
    not redo it.
    """

    def __init__(self, mode, q, gap, dt, phi, t, data, sigma):
        self.laminar = mode == "laminar_flow"
        self.n_angles = len(phi)
        self.phi = phi
        self.wq_dt = 0.5 * q * q * dt
        self.sinc_prefactor = 0.5 / math.pi * q * gap * dt
        spacing = abs(t[min(1, len(t) - 1)] - t[0])
        eps_t = max(0.5 * spacing, 1e-8)
        self.ts = np.where(t > eps_t, t, eps_t)
        self.log_ts = np.log(self.ts)
        self.i, self.j = np.triu_indices(len(t), 1)
        self.data = data
        self.weight = math.sqrt(2.0) / sigma
        self.cache_key = None
        self.cache = None

    @staticmethod
    def cumulative(f):
        """C_0 = 0, C_k = sum_{m<k} (f_m + f_{m+1}) / 2 along the last axis."""
        steps = 0.5 * (f[..., 1:] + f[..., :-1])
        return np.concatenate([np.zeros(f.shape[:-1] + (1,)), np.cumsum(steps, axis=-1)], axis=-1)

    def integral(self, amplitude, exponent, constant):
        """(M_ij on the pairs, C_i - C_j, dC/d(amplitude, exponent, constant) per time) for the
        rate amplitude * t^exponent + constant floored at 1e-10 (docs/model.md: Rates, The time
        integrals)."""
        power = self.ts ** exponent
        rate = amplitude * power + constant
        active = rate > 1e-10
        rate = np.where(active, rate, 1e-10)
        derivatives = np.stack([power, amplitude * power * self.log_ts, np.ones_like(power)])
        c = self.cumulative(rate)
        dc = self.cumulative(derivatives * active)
        difference = c[self.i] - c[self.j]
        return np.sqrt(difference * difference + 1e-12), difference, dc

    def integral_derivatives(self, m, difference, dc):
        """dM_ij / d(amplitude, exponent, constant), shape (3, pairs) (docs/model.md, Jacobian)."""
        return (difference / m) * (dc[:, self.i] - dc[:, self.j])

    def forward(self, x):
        """Model pieces and residuals at x (cached for the last x)."""
        key = x.tobytes()
        if key == self.cache_key:
            return self.cache
        n = self.n_angles
        contrast, offset, physical = x[:n], x[n:2 * n], x[2 * n:]
        pieces = {"diffusion": self.integral(physical[0], physical[1], physical[2])}
        log_g1d = -self.wq_dt * pieces["diffusion"][0]
        pieces["not_clipped"] = log_g1d > -700.0
        pieces["g1d"] = np.exp(np.maximum(log_g1d, -700.0))
        if self.laminar:
            pieces["shear"] = self.integral(physical[3], physical[4], physical[5])
        residuals = np.empty((n, len(self.i)))
        angles = []
        for k in range(n):
            angle = {}
            if self.laminar:
                angle["psi"] = np.deg2rad(physical[6] - self.phi[k])
                angle["scale"] = self.sinc_prefactor * math.cos(angle["psi"])
                phase = angle["scale"] * pieces["shear"][0]
                small = np.abs(phase) < 1e-4
                safe = np.where(small, 1.0, phase)
                sinc = np.where(small, 1.0 - phase ** 2 / 6.0 + phase ** 4 / 120.0,
                                np.sin(safe) / safe)
                angle.update(phase=phase, small=small, safe=safe, sinc=sinc)
                angle["g1s"] = sinc * sinc
            else:
                angle["g1s"] = 1.0
            g1_raw = pieces["g1d"] * angle["g1s"]
            angle["g1_active"] = g1_raw > 1e-10
            angle["g1"] = np.where(angle["g1_active"], g1_raw, 1e-10)
            model = offset[k] + contrast[k] * angle["g1"] ** 2
            residuals[k] = (model - self.data[k]) * self.weight
            angles.append(angle)
        pieces["angles"] = angles
        pieces["residuals"] = residuals.reshape(-1)
        self.cache_key, self.cache = key, pieces
        return pieces

    def residuals(self, x):
        return self.forward(x)["residuals"]

    def jacobian(self, x):
        """d residuals / dx, shape (points, parameters), analytic (docs/model.md, Jacobian)."""
        n = self.n_angles
        contrast, physical = x[:n], x[2 * n:]
        pieces = self.forward(x)
        dm_d = self.integral_derivatives(*pieces["diffusion"])
        dg1d = -self.wq_dt * pieces["g1d"] * dm_d * pieces["not_clipped"]
        if self.laminar:
            m_g = pieces["shear"][0]
            dm_g = self.integral_derivatives(*pieces["shear"])
        points = len(self.i)
        jacobian = np.zeros((n, points, len(x)))
        for k, angle in enumerate(pieces["angles"]):
            row, g1 = jacobian[k], angle["g1"]
            row[:, k] = g1 * g1 * self.weight
            row[:, n + k] = self.weight
            dmodel_dg1 = 2.0 * contrast[k] * self.weight * g1 * angle["g1_active"]
            for p in range(3):
                row[:, 2 * n + p] = dmodel_dg1 * dg1d[p] * angle["g1s"]
            if not self.laminar:
                continue
            phase, safe = angle["phase"], angle["safe"]
            dsinc = np.where(angle["small"], -phase / 3.0 + phase ** 3 / 30.0,
                             (safe * np.cos(safe) - np.sin(safe)) / safe ** 2)
            dmodel_dphase = dmodel_dg1 * pieces["g1d"] * 2.0 * angle["sinc"] * dsinc
            for p in range(3):
                row[:, 2 * n + 3 + p] = dmodel_dphase * angle["scale"] * dm_g[p]
            row[:, 2 * n + 6] = (dmodel_dphase * self.sinc_prefactor * m_g
                                 * -math.sin(angle["psi"]) * math.pi / 180.0)
        return jacobian.reshape(n * points, len(x))


# ----------------------------------------------------------------------------------------------
# Fit


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="the homodyne YAML config (required for a fit)")
    parser.add_argument("--jac", choices=["analytic", "2-point"], default="analytic",
                        help="Jacobian: analytic (default; the reference uses autodiff) or "
                             "scipy's 2-point finite differences")
    parser.add_argument("--x-scale", default="1",
                        help="least_squares x_scale: 1 (the reference's stratified path, default) "
                             "or jac")
    parser.add_argument("--max-nfev", type=int,
                        help="evaluation limit (default optimization.nlsq.max_iterations)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--check-reference", metavar="REFERENCE_C2_H5",
                        help="compare the model with the reference package's c2 values and exit")
    parser.add_argument("--check-jacobian", action="store_true",
                        help="compare the analytic Jacobian with central differences and exit")
    return parser.parse_args()


def starting_point(config, data, n_times, n_angles):
    """x0, lower and upper bounds and the parameter names, in the model's order."""
    contrast_bound, offset_bound = config["bounds"]["contrast"], config["bounds"]["offset"]
    estimates = [quantile_scaling(data[k], n_times, contrast_bound, offset_bound)
                 for k in range(n_angles)]
    contrast = config["initial_contrast"] or [e[0] for e in estimates]
    offset = config["initial_offset"] or [e[1] for e in estimates]
    physical_names = PHYSICAL_NAMES[config["mode"]]
    physical = [config["initial"].get(name, 0.5 * sum(config["bounds"][name]))
                for name in physical_names]
    names = ([f"contrast[{k}]" for k in range(n_angles)] +
             [f"offset[{k}]" for k in range(n_angles)] + physical_names)
    lower = [contrast_bound[0]] * n_angles + [offset_bound[0]] * n_angles + [
        config["bounds"][name][0] for name in physical_names]
    upper = [contrast_bound[1]] * n_angles + [offset_bound[1]] * n_angles + [
        config["bounds"][name][1] for name in physical_names]
    x0 = np.clip(np.array(contrast + offset + physical, dtype=np.float64), lower, upper)
    return x0, np.array(lower), np.array(upper), names


def check_jacobian(model, x0, lower, upper):
    """Largest relative difference between the analytic and a central-difference Jacobian."""
    analytic = model.jacobian(x0)
    worst = 0.0
    for p in range(len(x0)):
        step = 1e-6 * max(abs(x0[p]), 1e-4 * (upper[p] - lower[p]))
        plus, minus = x0.copy(), x0.copy()
        plus[p] += step
        minus[p] -= step
        numeric = (model.residuals(plus) - model.residuals(minus)) / (2 * step)
        scale = max(np.abs(numeric).max(), 1e-30)
        error = np.abs(numeric - analytic[:, p]).max() / scale
        worst = max(worst, error)
        print(f"  column {p:2d}: max |analytic - numeric| / max |numeric| = {error:.2e}")
    print(f"worst {worst:.2e}")
    return 0 if worst < 1e-4 else 1


def check_reference(path):
    """Largest |model - reference| over the strict upper triangles of every case of
    reference_c2.h5 (c2 computed by the reference package); 0 when all are within 1e-10."""
    worst = 0.0
    with h5py.File(path, "r") as file:
        for name, case in file.items():
            t, c2 = case["t"][()], case["c2"][()]
            upper = np.triu_indices(len(t), 1)
            mode = case.attrs["mode"]
            mode = mode.decode() if isinstance(mode, bytes) else str(mode)
            data = np.stack([matrix[upper] for matrix in c2])
            model = HomodyneModel(mode, case.attrs["q"], case.attrs["L"], case.attrs["dt"],
                                  case["phi"][()], t, data, math.sqrt(2.0))
            x = np.concatenate([case["contrast"][()], case["offset"][()], case["params"][()]])
            error = float(np.abs(model.residuals(x)).max())
            worst = max(worst, error)
            print(f"  {name:20s} max |model - reference| = {error:.2e}")
    print(f"worst {worst:.2e}")
    return 0 if worst < 1e-10 else 1


def main():
    arguments = parse_arguments()
    if arguments.check_reference:
        return check_reference(arguments.check_reference)
    if not arguments.config:
        fail("--config is required")
    config = read_config(arguments.config)
    load_start = time.perf_counter()
    q, phi, t, data = read_aps_u(config)
    load_seconds = time.perf_counter() - load_start
    model = HomodyneModel(config["mode"], q, config["gap"], config["dt"], phi, t, data,
                          config["sigma"])
    x0, lower, upper, names = starting_point(config, data, len(t), len(phi))
    points = 2 * data.size  # i != j pairs (docs/design.md section 1), as homodyne counts them
    print(f"scipy {scipy.__version__}, numpy {np.__version__}: {len(phi)} angles x {len(t)} "
          f"times, {points} points ({data.size} evaluated: strict upper triangles), "
          f"{len(x0)} parameters, load {load_seconds:.2f} s")
    if arguments.check_jacobian:
        return check_jacobian(model, x0, lower, upper)

    jacobian = model.jacobian if arguments.jac == "analytic" else "2-point"
    x_scale = arguments.x_scale if arguments.x_scale == "jac" else float(arguments.x_scale)
    max_nfev = arguments.max_nfev or config["max_iterations"]
    start = time.perf_counter()
    result = least_squares(model.residuals, x0, jac=jacobian,
                           bounds=(lower, upper), method="trf", loss="linear",
                           ftol=config["ftol"], xtol=config["xtol"], gtol=config["gtol"],
                           x_scale=x_scale, max_nfev=max_nfev)
    fit_seconds = time.perf_counter() - start
    chi2 = float(2.0 * result.cost)
    report = {
        "method": f"scipy.optimize.least_squares(trf, jac={arguments.jac}, x_scale={x_scale})",
        "points": int(points), "load_s": load_seconds, "fit_s": fit_seconds,
        "nfev": int(result.nfev), "njev": int(result.njev or 0), "status": int(result.status),
        "message": result.message, "chi2": chi2,
        "reduced_chi2": chi2 / max(points - len(x0), 1),
        "parameters": dict(zip(names, map(float, result.x))), "phi": phi.tolist(),
    }
    print(f"{report['method']}: {fit_seconds:.2f} s, nfev {result.nfev}, njev {result.njev}, "
          f"status {result.status} ({result.message})")
    print(f"chi2 {chi2:.6g}, reduced chi2 {report['reduced_chi2']:.6f}")
    for name, value in report["parameters"].items():
        print(f"  {name:20s} {value: .8g}")
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(report, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
