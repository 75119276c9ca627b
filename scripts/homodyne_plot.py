#!/usr/bin/env python3
"""Figures of a finished homodyne fit, drawn from its result files (docs/results.md, Figures).

Usage: homodyne-plot RESULTS_DIR [--plot-dir DIR] [--dpi N] [--max-pixels N] [--cuts N]
                     [--jobs N] [--data-file FILE]
       homodyne-plot --plot-experimental-data (DATA_FILE | RESULTS_DIR | --config CONFIG)
                     [--q Q] [--dt S] [--plot-dir DIR] ...
       (homodyne_plot.py is the same program; `homodyne --save-plots` runs it after the fit)

RESULTS_DIR is the --output-dir of `homodyne` (or of the Python module's fit_nlsq): the files
read are in RESULTS_DIR/nlsq/ (docs/design.md section 8):
  fitted_data.h5            /t (N) fitted times [s], /phi, /contrast, /offset (n_angles), /q,
                            /angles/phi_KKK/{data, fit, residuals} (N x N, element [i, j] <->
                            (t1 = t_i, t2 = t_j)), each group with attributes phi, contrast, offset
  parameters.json           reduced chi2, the parameters, the correlation matrix
  convergence_metrics.json  status, termination reason, the global phase's minima
  convergence_history.json  the final fit's iterations, the sigma the fit assumed and the
                            parameters' units (written by homodyne since the convergence plot;
                            optional: without it the convergence plot says so and labels carry
                            no units)
  derived_rates.json        optional (docs/results.md, What the data determine): "t" and rates ("D", "gamma_dot", ...) with
                            their "KEY_interval_68" (and _95) [lo, hi] per time: bands
  analysis_results_nlsq.json  optional: dataset_info.data_file, the data file's name in titles
Only fitted_data.h5 is required; a figure whose file is missing is drawn with what there is.

Writes into RESULTS_DIR/nlsq (or --plot-dir):
  c2_heatmaps_phi_{phi:.1f}deg.png  per angle: data | fit | residual over (t1, t2); data and fit
                                    share one colour scale over all angles (1st/99th
                                    percentiles), the residual panels one symmetric scale
  c2_cuts_phi_{phi:.1f}deg.png      per angle: c2 against the lag t2 - t1 at --cuts values of
                                    t1, data and fit, with the fit +- 1 and 2 noise sigma
  g2_lag.png                        per angle g2(tau): data and fit averaged over t1 at each
                                    lag on a log lag axis, the residual below (+-sigma/sqrt(n))
  derived_rates.png                 D(t) (and the shear rate, or the two components' rates)
                                    from the fitted values; the bands of derived_rates.json
  residual_histogram.png            every residual (upper triangles, diagonal excluded) against
                                    the Gaussians of the noise sigma
  convergence.png                   chi2, damping and step per iteration of the final fit, and
                                    the chi2 of the global phase's minima (a final fit of one
                                    iteration: the global phase's passes and local fits)
  parameter_correlations.png        the correlation matrix, pairs with |r| >= 0.99 (the data do
                                    not separate them) and >= 0.9 outlined
  profiles.png                      with profile intervals only: chi2 less its minimum with each
                                    parameter held (the others refitted), the quadratic of the
                                    curvature beside it, the 68 % and 95 % interval ends
The noise sigma of the bands and the histogram is the one the fit's residuals show:
sigma_fit = sigma * sqrt(reduced chi2), sigma being optimization.nlsq.sigma (what the fit
assumed, from convergence_history.json); without that file, the RMS of the residuals.
Matrices larger than --max-pixels per side are read with a stride (heat maps, histogram), so
memory and time stay small for any N; the cuts read whole rows, g2 every stride-th row. Titles
carry q and the data file's name where known. The figures are drawn by --jobs processes forked
after the files are read (default one per CPU, at most 8); HOMODYNE_PLOT_TIMES=1 with --jobs 1
prints each figure's time.

--q-summary draws OUTPUT_DIR/nlsq/q_dependence.png from OUTPUT_DIR/nlsq/q_summary.json, the
summary of several q rings fitted independently (docs/results.md, Several q rings): the decay
rate q^2 D(t_ref) against q^2 with the line a pure diffusion gives (slope the rings' weighted
mean D, through 0), and in laminar_flow the shear phase scale q gamma_dot(t_ref) against q with
its line; t_ref is the summary's reference_time_s.

--plot-experimental-data draws the data alone, before any fit (experimental_c2_heatmaps.png,
experimental_g2_lag.png into exp_data/ or --plot-dir): from a beamline HDF5 file (APS-U or
APS-old, selected as src/io/dataset_inspection.cc selects them: the q ring closest to --q, the frame
window with its first frame dropped, --dt or times in frames), from a config (--config or a
.yaml argument: its data file, q, dt and frames) or from a fit's fitted_data.h5.

Every file read is checked first (the keys, types and shapes the figures use); a file that
does not fit is refused in one line naming the file, the key path or dataset, and the rule.
Any other failure while drawing is one line too, naming the file being read or written; with
--debug (or HOMODYNE_PLOT_DEBUG=1 in the environment) the Python traceback follows it.

Exit codes: 0 plots written, 1 bad input (missing or invalid file) or a plot that could not be
drawn, 2 usage, 3 a Python module (h5py, numpy, matplotlib) is missing.
"""

import argparse
import json
import math
import re
import os
import sys
import time
import traceback

EXIT_INPUT = 1
EXIT_MISSING_MODULE = 3
# |correlation| at or above which the fit warns that the data do not separate a pair
# (docs/results.md, The global phase and correlations), and a lower mark for strong ones.
DEGENERATE_CORRELATION = 0.99
STRONG_CORRELATION = 0.9
PROGRAM = "homodyne-plot"
# matplotlib.ticker's MaxNLocator, LogLocator and FuncFormatter, set by import_modules.
MaxNLocator = LogLocator = FuncFormatter = None
# Bounds of the size options: a figure of 16 x 8.5 inches at 1200 dpi is 19200 x 10200 pixels
# (0.8 GB of RGBA), and the matrices held are 3 x angles x max-pixels^2 doubles (0.4 GB per angle
# at 4000).
DPI_RANGE = (10, 1200)
MAX_PIXELS_RANGE = (2, 4000)
# Largest figure drawn, in pixels per side (Agg refuses 2^16) and in all (memory of the canvas).
FIGURE_SIDE_LIMIT = 32768
FIGURE_PIXEL_LIMIT = 4 * 10 ** 8
# The file being read or the figure being drawn, for the message of an unexpected failure.
current_activity = "reading the arguments"


def fail(message, code=EXIT_INPUT):
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    sys.exit(code)


def import_modules():
    """Imports h5py, numpy and matplotlib (Agg backend); exits 3 naming what is missing."""
    try:
        import h5py
        import numpy
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
        from matplotlib import ticker
    except ImportError as error:
        fail(f"{error} (install the Python packages h5py, numpy and matplotlib, e.g. "
             f"apt-get install python3-h5py python3-matplotlib)", EXIT_MISSING_MODULE)
    pyplot.rcParams.update({
        "font.size": 11, "axes.titlesize": 12, "axes.labelsize": 12, "legend.fontsize": 10,
        "xtick.labelsize": 10, "ytick.labelsize": 10, "figure.titlesize": 13,
        "axes.grid": False, "savefig.facecolor": "white"})
    global MaxNLocator, LogLocator, FuncFormatter
    MaxNLocator, LogLocator, FuncFormatter = (ticker.MaxNLocator, ticker.LogLocator,
                                              ticker.FuncFormatter)
    return h5py, numpy, pyplot


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        usage="%(prog)s OUTPUT_DIR [options]\n"
              "       %(prog)s --plot-experimental-data (DATA_FILE | OUTPUT_DIR | "
              "--config CONFIG) [options]",
        description="Figures of a finished homodyne fit: heat maps, g2(tau), 1-D cuts, "
                    "residual histogram, D(t) and shear rate, convergence and parameter "
                    "correlations (PNG files). With --plot-experimental-data: the data alone, "
                    "before any fit.")
    parser.add_argument("output_dir", nargs="?", metavar="OUTPUT_DIR",
                        help="the --output-dir of the fit (holds nlsq/fitted_data.h5); with "
                             "--plot-experimental-data also a beamline HDF5 data file")
    parser.add_argument("--plot-dir", help="folder for the PNG files (default OUTPUT_DIR/nlsq; "
                                           "for a data file, exp_data in the working folder)")
    parser.add_argument("--dpi", type=int, default=150, help="resolution (default 150)")
    parser.add_argument("--max-pixels", type=int, default=1000,
                        help="largest matrix side plotted; larger ones are strided (default 1000)")
    parser.add_argument("--cuts", type=int, default=4,
                        help="values of t1 in the 1-D cut figures (default 4, at most 9)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="processes drawing the figures (default 0: one per CPU, at most "
                             "8; 1: this process alone)")
    parser.add_argument("--data-file",
                        help="the data file: its name in the titles; with "
                             "--plot-experimental-data, the file drawn")
    parser.add_argument("--q-summary", action="store_true",
                        help="draw nlsq/q_dependence.png from nlsq/q_summary.json (several q "
                             "rings fitted independently)")
    experimental = parser.add_argument_group(
        "the data alone (--plot-experimental-data)",
        "draws c2(t1, t2) and g2(tau) of a beamline HDF5 file (APS-U or APS-old layout) or of "
        "a fit's fitted_data.h5, without a fit")
    experimental.add_argument("--plot-experimental-data", action="store_true",
                              help="draw the experimental data alone (no fit needed)")
    experimental.add_argument("--config",
                              help="a homodyne config: the data file, q, dt and frame window "
                                   "of its analyzer_parameters and experimental_data")
    experimental.add_argument("--q", type=float,
                              help="the q ring to draw [1/A] (default: the config's "
                                   "wavevector_q, else the file's first ring)")
    experimental.add_argument("--dt", type=float,
                              help="seconds per frame (default: the config's dt; without one "
                                   "the times are in frames)")
    parser.add_argument("--debug", action="store_true",
                        help="print the Python traceback of an unexpected failure (as does "
                             "HOMODYNE_PLOT_DEBUG=1)")
    arguments = parser.parse_args(argv)
    if arguments.output_dir is None and not (arguments.plot_experimental_data and
                                             (arguments.config or arguments.data_file)):
        parser.error("the following arguments are required: OUTPUT_DIR (with "
                     "--plot-experimental-data: a data file, OUTPUT_DIR or --config)")
    if not arguments.plot_experimental_data:
        for name in ("config", "q", "dt"):
            if getattr(arguments, name) is not None:
                parser.error(f"--{name}: only with --plot-experimental-data")
    if not DPI_RANGE[0] <= arguments.dpi <= DPI_RANGE[1]:
        parser.error(f"--dpi {arguments.dpi}: must be {DPI_RANGE[0]} to {DPI_RANGE[1]}")
    if not MAX_PIXELS_RANGE[0] <= arguments.max_pixels <= MAX_PIXELS_RANGE[1]:
        parser.error(f"--max-pixels {arguments.max_pixels}: must be {MAX_PIXELS_RANGE[0]} to "
                     f"{MAX_PIXELS_RANGE[1]}")
    if not 0 <= arguments.jobs <= 64:
        parser.error(f"--jobs {arguments.jobs}: must be 0 to 64")
    if not 1 <= arguments.cuts <= 9:
        parser.error(f"--cuts {arguments.cuts}: must be 1 to 9")
    for name in ("q", "dt"):
        value = getattr(arguments, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            parser.error(f"--{name} {value}: must be a positive number")
    return arguments


def number(value):
    """A JSON number as homodyne writes it (NaN as null, +-Inf as strings) as a float."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# What the figures read of each JSON result file (docs/results.md): an object maps a key to
# (schema, required); [schema] is an array of it; STRING_MAP an object of strings.
NUMBER, INTEGER, STRING, BOOLEAN, STRING_MAP = "number", "integer", "string", "boolean", "map"
NUMBER_RULE = 'a number (null for NaN, "Infinity" or "-Infinity")'
PARAMETERS_SCHEMA = {
    "analysis_mode": (STRING, True),
    "chi_squared": (NUMBER, True),
    "reduced_chi_squared": (NUMBER, True),
    "correlation": ({"parameter_names": ([STRING], True), "matrix": ([[NUMBER]], True)}, True),
}
METRICS_SCHEMA = {
    "convergence": ({"status": (STRING, True), "iterations": (INTEGER, True),
                     "final_chi_squared": (NUMBER, True)}, True),
    "iterations": (INTEGER, False),
    "passes": (INTEGER, False),
    "quality_flag": (STRING, False),
    "strategy": ({"name": (STRING, False)}, False),
    "termination_reason": (STRING, False),
    "global_search": ({"method": (STRING, False), "starts": (INTEGER, False),
                       "local_fits": (INTEGER, False), "chosen": (INTEGER, False),
                       "minima": ([{"chi2": (NUMBER, True), "status": (STRING, False),
                                    "start": (INTEGER, False)}], False)}, False),
}
HISTORY_SCHEMA = {
    "history": ([{"iteration": (INTEGER, True), "accepted": (BOOLEAN, True),
                  "chi2": (NUMBER, True), "trial_chi2": (NUMBER, True),
                  "damping": (NUMBER, True), "step_norm": (NUMBER, True),
                  "step_standard_errors": (NUMBER, True)}], True),
    "sigma": (NUMBER, True),
    "chi_squared": (NUMBER, False),
    "iterations": (INTEGER, False),
    "parameter_units": (STRING_MAP, False),
}

# analysis_results_nlsq.json: the data file's path when the fit recorded it (titles).
ANALYSIS_SCHEMA = {"dataset_info": ({"data_file": (STRING, False)}, False)}


def shown(value):
    """`value` as JSON, cut to 40 characters, for a message."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def check_json(path, where, value, schema):
    """Exits 1 naming `path` and the key path `where` when `value` does not fit `schema`."""
    def refuse(rule):
        fail(f"{path}, key {where}: {shown(value)} {rule}")

    if isinstance(schema, dict):
        if not isinstance(value, dict):
            refuse("is not an object")
        for key, (item_schema, required) in schema.items():
            inner = f"{where}.{key}" if where else key
            if key in value:
                check_json(path, inner, value[key], item_schema)
            elif required:
                fail(f"{path}, key {inner}: missing (a homodyne result file has it)")
    elif isinstance(schema, list):
        if not isinstance(value, list):
            refuse("is not an array")
        for index, item in enumerate(value):
            check_json(path, f"{where}[{index}]", item, schema[0])
    elif schema == STRING_MAP:
        if not isinstance(value, dict):
            refuse("is not an object")
        for key, item in value.items():
            check_json(path, f"{where}.{key}", item, STRING)
    elif schema == NUMBER:
        if not (value is None or value in ("Infinity", "-Infinity") or
                (isinstance(value, (int, float)) and not isinstance(value, bool))):
            refuse(f"is not {NUMBER_RULE}")
    elif schema == INTEGER:
        if not isinstance(value, int) or isinstance(value, bool):
            refuse("is not an integer")
    elif schema == STRING:
        if not isinstance(value, str):
            refuse("is not a string")
    elif schema == BOOLEAN:
        if not isinstance(value, bool):
            refuse("is not true or false")


def json_kind(value):
    """The JSON name of `value`'s type, for a message."""
    return ("null" if value is None else "a boolean" if isinstance(value, bool) else
            "a number" if isinstance(value, (int, float)) else "a string"
            if isinstance(value, str) else "an array" if isinstance(value, list) else
            "an object")


def read_json(path, schema):
    """The object in `path`, checked against `schema`, or None when the file is absent; exits 1
    naming the file and the key path when it is not valid JSON or does not fit the schema."""
    global current_activity
    if not os.path.isfile(path):
        return None
    current_activity = f"{path}: reading it"
    try:
        with open(path, encoding="utf-8") as file:
            content = json.load(file)
    except (OSError, ValueError, RecursionError) as error:
        fail(f"{path}: cannot read it as JSON ({error})")
    if not isinstance(content, dict):
        fail(f"{path}: holds {json_kind(content)}, "
             f"not an object: not a homodyne result file")
    check_json(path, "", content, schema)
    return content


class Results:
    """What the figures need from RESULTS_DIR/nlsq (fitted_data.h5 strided, the JSON files)."""

    def __init__(self, h5py, numpy, folder, max_pixels, data_file=None):
        self.folder = folder
        self.fitted_data_path = os.path.join(folder, "fitted_data.h5")
        self._h5py = h5py
        self._read_fitted_data(h5py, numpy, max_pixels)
        self.parameters = read_json(os.path.join(folder, "parameters.json"), PARAMETERS_SCHEMA)
        if self.parameters is not None:
            self._check_correlation(os.path.join(folder, "parameters.json"))
        self.metrics = read_json(os.path.join(folder, "convergence_metrics.json"),
                                 METRICS_SCHEMA)
        self.history = read_json(os.path.join(folder, "convergence_history.json"),
                                 HISTORY_SCHEMA)
        if self.history is not None and self.metrics is not None and not self._history_matches():
            print(f"{PROGRAM}: warning: {folder}/convergence_history.json is not of the fit in "
                  f"convergence_metrics.json (chi2 or iterations differ): not used",
                  file=sys.stderr)
            self.history = None
        self.derived_rates = read_derived_rates(numpy, os.path.join(folder,
                                                                    "derived_rates.json"))
        self.analysis = read_json(os.path.join(folder, "analysis_results_nlsq.json"),
                                  ANALYSIS_SCHEMA) or {}
        self.data_file = data_file or self.analysis.get("dataset_info", {}).get("data_file")
        self.units = (self.history or {}).get("parameter_units", {})
        self.sigma_assumed = number(self.history["sigma"]) if self.history else math.nan
        self.sigma_fit, self.sigma_source = self._noise_sigma(numpy)

    def _read_fitted_data(self, h5py, numpy, max_pixels):
        """Reads /t and every angle strided; exits 1 naming the file and the dataset or
        attribute when the file is not a homodyne fitted_data.h5 (docs/results.md)."""
        global current_activity
        path = self.fitted_data_path
        if not os.path.isfile(path):
            results_dir = os.path.dirname(self.folder) or "."
            fail(f"{path}: not found (run homodyne --config ... --output-dir {results_dir} "
                 f"first)")
        current_activity = f"{path}: reading it"
        try:
            with h5py.File(path, "r") as file:
                t = self._fitted_times(numpy, file)
                self.stride = max(1, math.ceil(len(t) / max_pixels))
                self.q = math.nan
                if "q" in file:
                    if not isinstance(file["q"], h5py.Dataset):
                        fail(f"{path}, /q: a group: must be a number (q [1/A])")
                    self.q = self._scalar(numpy, file["q"][()], "/q", False)
                if "angles" not in file or not isinstance(file["angles"], h5py.Group):
                    fail(f"{path}, /angles: missing (not a homodyne fitted_data.h5)")
                self.angles = []
                for name in sorted(file["angles"].keys()):
                    self.angles.append(self._read_angle(h5py, numpy, file["angles"], name, t))
        except OSError as error:
            fail(f"{path}: cannot read it as HDF5 ({error})")
        # Matrices of several q (a joint fit): the figures name each angle's q too, and their
        # files carry it, so that two rings' matrices at one phi do not share a file.
        several_q = len({a["q"] for a in self.angles if math.isfinite(a["q"])}) > 1
        for angle in self.angles:
            angle["label"] = phi_text(angle["phi"])
            angle["tag"] = f"phi_{angle['phi']:.1f}deg"
            if several_q:
                angle["label"] += f", q = {angle['q']:.4g} \u00c5\u207b\u00b9"
                angle["tag"] = f"q_{angle['q']:.4g}_" + angle["tag"]
        if several_q:
            self.q = math.nan  # the titles' q: each angle's, not the file's first
        if not self.angles:
            fail(f"{path}, /angles: holds no angle to plot")
        self.t_full = t
        self.t = t[::self.stride]

    def _fitted_times(self, numpy, file):
        """/t: at least 2 finite, strictly increasing times [s], or exit 1 saying which not."""
        path = self.fitted_data_path
        if "t" not in file:
            fail(f"{path}, /t: missing (not a homodyne fitted_data.h5)")
        dataset = file["t"]
        if (not hasattr(dataset, "dtype") or dataset.dtype.kind not in "iuf"
                or len(dataset.shape) != 1):
            fail(f"{path}, /t: {getattr(dataset, 'shape', 'a group')} "
                 f"{getattr(dataset, 'dtype', '')}: must be a 1-D array of numbers (the "
                 f"fitted times in seconds)".replace("  ", " "))
        t = numpy.asarray(dataset[()], dtype=float)
        if len(t) < 2:
            fail(f"{path}, /t: {len(t)} fitted time(s): at least 2 are needed to plot")
        bad = numpy.flatnonzero(~numpy.isfinite(t))
        if bad.size:
            fail(f"{path}, /t[{bad[0]}]: {t[bad[0]]}: the fitted times must be finite "
                 f"({bad.size} of {len(t)} are not)")
        steps = numpy.flatnonzero(numpy.diff(t) <= 0)
        if steps.size:
            k = steps[0]
            fail(f"{path}, /t[{k + 1}]: {t[k + 1]:.6g} after {t[k]:.6g}: the fitted times "
                 f"must increase")
        return t

    def _scalar(self, numpy, value, where, finite):
        """A real scalar (an attribute's or a dataset's value) as a float, or exit 1 naming
        `where`; `finite`: NaN and +-Inf are refused too."""
        array = numpy.asarray(value)
        if array.dtype.kind not in "iuf" or array.size != 1:
            fail(f"{self.fitted_data_path}, {where}: {shown_array(array)}: must be a number")
        scalar = float(array.reshape(()))
        if finite and not math.isfinite(scalar):
            fail(f"{self.fitted_data_path}, {where}: {scalar}: must be finite")
        return scalar

    def _read_angle(self, h5py, numpy, angles, name, t):
        """One /angles/NAME group: its phi (finite), contrast, offset and strided matrices."""
        path = self.fitted_data_path
        group = angles[name]
        where = f"/angles/{name}"
        if not isinstance(group, h5py.Group):
            fail(f"{path}, {where}: not a group (not a homodyne fitted_data.h5)")
        angle = {"group": name}
        for key in ("phi", "contrast", "offset"):
            if key not in group.attrs:
                fail(f"{path}, {where} attribute {key}: missing (not a homodyne "
                     f"fitted_data.h5)")
            angle[key] = self._scalar(numpy, group.attrs[key], f"{where} attribute {key}",
                                      key == "phi")
        for key in ("data", "fit", "residuals"):
            dataset = group.get(key)
            if not isinstance(dataset, h5py.Dataset):
                fail(f"{path}, {where}/{key}: missing (not a homodyne fitted_data.h5)")
            if dataset.dtype.kind not in "iuf" or dataset.shape != (len(t), len(t)):
                fail(f"{path}, {where}/{key}: {dataset.shape} {dataset.dtype}: must be a "
                     f"{len(t)} x {len(t)} matrix of numbers (one row and column per time "
                     f"of /t)")
            angle[key] = numpy.asarray(dataset[::self.stride, ::self.stride], dtype=float)
        # The matrix's q (written since joint fits of several q rings; absent in older files).
        angle["q"] = (self._scalar(numpy, group.attrs["q"], f"{where} attribute q", False)
                      if "q" in group.attrs else math.nan)
        return angle

    def _check_correlation(self, path):
        """The correlation matrix: one row of len(parameter_names) values per name."""
        correlation = self.parameters["correlation"]
        names, matrix = correlation["parameter_names"], correlation["matrix"]
        for index, row in enumerate(matrix):
            if len(row) != len(names):
                fail(f"{path}, key correlation.matrix[{index}]: {len(row)} values for "
                     f"{len(names)} parameter_names: the matrix must be square, one row and "
                     f"column per name")
        if len(matrix) != len(names):
            fail(f"{path}, key correlation.matrix: {len(matrix)} rows for {len(names)} "
                 f"parameter_names: the matrix must be square, one row and column per name")

    def rows(self, angle, index):
        """Row `index` (t1 = t[index]) of the angle's data and fit at full resolution."""
        with self._h5py.File(self.fitted_data_path, "r") as file:
            group = file["angles"][angle["group"]]
            return group["data"][index, :], group["fit"][index, :]

    def lag_average(self, angle, numpy, with_fit=True):
        """lag_average of the angle's data (and fit): every stride-th row (t1) at full
        resolution in t2, read in blocks."""
        with self._h5py.File(self.fitted_data_path, "r") as file:
            group = file["angles"][angle["group"]]

            def blocks():
                def read(first, stop, stride):
                    return tuple(numpy.asarray(group[key][first:stop:stride, :], dtype=float)
                                 for key in ("data", "fit"))
                for indices, (data, fit) in row_blocks(numpy, len(self.t_full), self.stride,
                                                       read):
                    yield indices, data, fit if with_fit else None
            return lag_average(numpy, self.t_full, blocks())

    def _history_matches(self):
        convergence = self.metrics.get("convergence", {})
        return (number(self.history.get("chi_squared")) ==
                number(convergence.get("final_chi_squared"))
                and self.history.get("iterations") == convergence.get("iterations"))

    def upper_residuals(self, numpy):
        """Every finite strided residual of the strict upper triangles, all angles."""
        values = []
        for angle in self.angles:
            matrix = angle["residuals"]
            upper = matrix[numpy.triu_indices(matrix.shape[0], k=1)]
            values.append(upper[numpy.isfinite(upper)])
        return numpy.concatenate(values) if values else numpy.zeros(0)

    def _noise_sigma(self, numpy):
        """(sigma, how it was found): sigma * sqrt(reduced chi2) when both are recorded."""
        reduced = number((self.parameters or {}).get("reduced_chi_squared"))
        if math.isfinite(self.sigma_assumed) and math.isfinite(reduced) and reduced > 0:
            return (self.sigma_assumed * math.sqrt(reduced),
                    f"assumed \u03c3 {self.sigma_assumed:.3g} \u00d7 \u221a(reduced "
                    f"\u03c7\u00b2 {reduced:.4g})")
        residuals = self.upper_residuals(numpy)
        if residuals.size == 0:
            return math.nan, "no finite residual"
        return float(numpy.sqrt(numpy.mean(residuals ** 2))), "RMS of the residuals"

    def title_tail(self):
        """The q and the data file's name for a figure's title ("" for what is not known)."""
        return title_tail(self.q, self.data_file)

    def label(self, name):
        """`name [unit]`, or the name alone for a dimensionless or unknown unit."""
        base = name.split("[")[0]
        unit = self.units.get(base, "")
        # "s^(1+α)" -> mathtext superscript.
        unit = re.sub(r"\^\(([^)]*)\)", r"$^{\1}$", unit)
        return f"{name} [{unit}]" if unit else name


def title_tail(q, data_file):
    """"    q = 0.0054 1/A    file.h5" with what is known of the two."""
    parts = []
    if isinstance(q, float) and math.isfinite(q) and q > 0:
        parts.append(f"q = {q:.4g} \u00c5\u207b\u00b9")
    if data_file:
        parts.append(os.path.basename(str(data_file)))
    return "".join("    " + part for part in parts)


def shown_array(array):
    """A short description of an HDF5 value for a message: its value, or its shape and type."""
    if array.size == 1:
        return repr(array.reshape(()).item())[:40]
    return f"{array.shape} {array.dtype}"


def phi_text(phi):
    return f"\u03c6 = {phi:.1f}\u00b0"


def drawing(path):
    """Records that the figure `path` is being drawn (for the message of a failure); `path`."""
    global current_activity
    current_activity = f"{path}: drawing it"
    return path


def save(pyplot, figure, path):
    """Writes the figure through a temporary name (never half a PNG under `path`); exits 1 when
    the figure would be larger than FIGURE_SIDE_LIMIT per side or FIGURE_PIXEL_LIMIT in all."""
    drawing(path)
    temporary = path + ".partial.png"
    width, height = (int(round(size * figure.dpi)) for size in figure.get_size_inches())
    if max(width, height) > FIGURE_SIDE_LIMIT or width * height > FIGURE_PIXEL_LIMIT:
        pyplot.close(figure)
        fail(f"{path}: the figure would be {width} x {height} pixels at --dpi "
             f"{figure.dpi:g}, over the {FIGURE_SIDE_LIMIT} per side and "
             f"{FIGURE_PIXEL_LIMIT:.0e} in all that homodyne-plot draws: choose a smaller --dpi")
    try:
        # The layout is fixed (new_figure): no "tight" bounding box, which draws twice. zlib
        # level 1 with its run-length strategy (3): the heat maps' noise does not compress,
        # and the default level 6 takes 3x longer for files a few % smaller.
        figure.savefig(temporary, format="png",
                       pil_kwargs={"compress_level": 1, "compress_type": 3})
        os.replace(temporary, path)
    except OSError as error:
        fail(f"{path}: cannot write the plot ({error})")
    finally:
        pyplot.close(figure)
        if os.path.exists(temporary):
            os.remove(temporary)
    print(f"wrote {path}")


SUPERSCRIPTS = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076"
                             "\u2077\u2078\u2079")


def power_label(value, _position=None):
    """10^k as "10" and unicode superscripts (no mathtext: it is parsed per label), other values
    (minor ticks of a short axis) as "2×10⁻⁵"; "" for a value that is not positive."""
    if not value > 0:
        return ""
    exponent = math.floor(math.log10(value) + 1e-9)
    mantissa = value / 10 ** exponent
    power = "10" + str(exponent).translate(SUPERSCRIPTS)
    if abs(mantissa - 1) < 1e-6:
        return power
    return f"{mantissa:.0f}\u00d7{power}"


def log_scale(axis):
    """A logarithmic x or y axis (an Axis, e.g. axes.xaxis) with decade labels in unicode and
    minor ticks at 2 and 5 times each decade, labelled only when the axis spans less than two
    decades: matplotlib's default makes 8 minor ticks a decade and labels them with mathtext,
    which is most of the time of a figure of log axes."""
    axis.axes.set_xscale("log") if axis is axis.axes.xaxis else axis.axes.set_yscale("log")
    axis.set_major_locator(LogLocator(base=10.0, numticks=12))
    axis.set_major_formatter(FuncFormatter(power_label))
    axis.set_minor_locator(LogLocator(base=10.0, subs=(2.0, 5.0), numticks=12))

    def minor_label(value, position=None):
        low, high = sorted(axis.get_view_interval())
        return power_label(value) if low > 0 and high / low < 100 else ""
    axis.set_minor_formatter(FuncFormatter(minor_label))


def new_figure(pyplot, size, dpi, rows=1, columns=1, margins=(0.8, 0.3, 0.6, 0.7),
               spaces=(0.25, 0.35), **options):
    """A figure of `size` inches with rows x columns axes (a 2-D array) placed by fixed
    margins (left, right, bottom, top, in inches) and spaces between axes (wspace, hspace,
    fractions of an axis), not by constrained layout: that costs 40 % of the drawing time."""
    figure, axes = pyplot.subplots(rows, columns, figsize=size, dpi=dpi, squeeze=False,
                                   **options)
    width, height = size
    left, right, bottom, top = margins
    figure.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                           top=1 - top / height, wspace=spaces[0], hspace=spaces[1])
    return figure, axes


def percentile_limits(numpy, arrays, fallback):
    """1st/99th percentiles of the finite values of all `arrays`; `fallback` when degenerate."""
    finite = numpy.concatenate([a[numpy.isfinite(a)].ravel() for a in arrays])
    if finite.size == 0:
        return fallback
    low, high = numpy.percentile(finite, [1.0, 99.0])
    return (float(low), float(high)) if high > low else fallback


def heatmap_scales(numpy, results):
    """(data limits, residual bound) shared by the heat maps of every angle."""
    data_limits = percentile_limits(numpy, [a["data"] for a in results.angles], (1.0, 1.5))
    bounds = [numpy.nanpercentile(numpy.abs(a["residuals"]), 99.0) for a in results.angles]
    residual_bound = float(numpy.nanmax(bounds)) if bounds else math.nan
    if math.isfinite(results.sigma_fit) and results.sigma_fit > 0:
        residual_bound = 3 * results.sigma_fit  # +-3 noise sigma: comparable between fits
    if not math.isfinite(residual_bound) or residual_bound <= 0:
        residual_bound = 1e-3
    return data_limits, residual_bound


def plot_heatmap(pyplot, results, angle, scales, plot_dir, dpi):
    """One angle's PNG: data | fit | residual, on the colour scales of `heatmap_scales`."""
    t = results.t
    extent = (t[0], t[-1], t[0], t[-1])
    data_limits, residual_bound = scales
    path = drawing(os.path.join(plot_dir, f"c2_heatmaps_{angle['tag']}.png"))
    figure, axes = new_figure(pyplot, (15, 4.8), dpi, 1, 3, margins=(0.7, 0.95, 0.6, 0.8),
                              spaces=(0.45, 0.3))
    axes = axes[0]
    panels = (("data", "data", data_limits, "viridis", "c\u2082"),
              ("fit", "fit", data_limits, "viridis", "c\u2082"),
              ("residuals", "residual (data \u2212 fit)", (-residual_bound, residual_bound),
               "RdBu_r", "c\u2082 data \u2212 fit" +
               (f"  (\u00b13\u03c3, \u03c3 = {results.sigma_fit:.3g})"
                if math.isfinite(results.sigma_fit) else "")))
    for axis, (key, title, limits, colour_map, bar_label) in zip(axes, panels):
        # Element [i, j] is (t1 = t_i, t2 = t_j): transpose so t1 runs along x.
        image = axis.imshow(angle[key].T, origin="lower", extent=extent, aspect="equal",
                            cmap=colour_map, vmin=limits[0], vmax=limits[1],
                            interpolation="nearest")
        axis.set_title(title)
        axis.set_xlabel("t\u2081 [s]")
        axis.set_ylabel("t\u2082 [s]")
        bar = figure.colorbar(image, ax=axis, shrink=0.85)
        bar.set_label(bar_label)
    figure.suptitle(f"{angle['label']}    contrast = {angle['contrast']:.4f}    "
                    f"offset = {angle['offset']:.4f}" + results.title_tail())
    save(pyplot, figure, path)


# Rows of c2 read at a time for g2 (bounded memory whatever N: 64 rows of N doubles each).
LAG_BLOCK_ROWS = 64


def row_blocks(numpy, n, stride, read):
    """(row indices, rows) of every stride-th row (t1) of an n x n matrix, in blocks of
    LAG_BLOCK_ROWS rows; `read(first, stop, stride)` returns those rows at full length."""
    for first in range(0, n, stride * LAG_BLOCK_ROWS):
        stop = min(n, first + stride * LAG_BLOCK_ROWS)
        yield numpy.arange(first, stop, stride), read(first, stop, stride)


def lag_average(numpy, t, blocks, bins=150):
    """g2(lag): the mean over t1 of c2(t1, t1 + lag) at each lag k = 1 .. n-1 of the grid `t`
    (uniform), of the data and, when the blocks carry one, of the fit, over the cells where
    both are finite, and the number of cells averaged. `blocks` yields (row indices, data
    rows, fit rows or None), the rows being c2(t1 = t_i, t2) at full length. Lags are merged
    into `bins` logarithmic bins when there are more (weighted by their cells). Returns
    (lags, data mean, fit mean or None, cells)."""
    n = len(t)
    data_sums, fit_sums, counts = numpy.zeros(n - 1), numpy.zeros(n - 1), numpy.zeros(n - 1)
    with_fit = False
    for row_indices, data_rows, fit_rows in blocks:
        with_fit = fit_rows is not None
        for r, i in enumerate(row_indices):
            data = data_rows[r, i + 1:]
            finite = numpy.isfinite(data)
            if with_fit:
                fit = fit_rows[r, i + 1:]
                finite &= numpy.isfinite(fit)
                fit_sums[:len(fit)] += numpy.where(finite, fit, 0.0)
            data_sums[:len(data)] += numpy.where(finite, data, 0.0)
            counts[:len(data)] += finite
    steps = numpy.arange(1, n, dtype=float)
    if len(steps) > bins:
        edges = numpy.unique(numpy.round(numpy.geomspace(1, n, bins + 1)).astype(int))
        group = numpy.searchsorted(edges, numpy.arange(1, n), side="right") - 1

        def merge(values):
            return numpy.bincount(group, weights=values)
        weights = merge(counts)
        steps = merge(steps * counts) / numpy.where(weights > 0, weights, 1)
        data_sums, fit_sums, counts = merge(data_sums), merge(fit_sums), weights
    keep = counts > 0
    spacing = (t[-1] - t[0]) / (n - 1)
    return (steps[keep] * spacing, data_sums[keep] / counts[keep],
            fit_sums[keep] / counts[keep] if with_fit else None, counts[keep])


def plot_g2(numpy, pyplot, panels, path, title, sigma, dpi, time_unit="s"):
    """g2(lag) per angle on a log lag axis: `panels` of (phi, lags, data mean, fit mean or
    None, cells); with a fit, the residual (data - fit) below each, with the band of
    +- sigma / sqrt(cells) (the noise of a mean of independent cells)."""
    drawing(path)
    with_fit = any(panel[3] is not None for panel in panels)
    columns = min(len(panels), 3)
    rows = math.ceil(len(panels) / columns)
    ratios = [3.0, 1.3, 0.62] if with_fit else [3.0, 0.62]
    height = rows * (sum(ratios) * 1.0) + 0.9
    figure, axes = new_figure(pyplot, (4.9 * columns + 0.4, height), dpi,
                              rows * len(ratios), columns, margins=(0.85, 0.2, 0.0, 0.8),
                              spaces=(0.28, 0.06), gridspec_kw={"height_ratios": ratios * rows})
    for index in range(rows * columns):
        row, column = divmod(index, columns)
        cell = [axes[row * len(ratios) + k, column] for k in range(len(ratios))]
        cell[-1].set_visible(False)  # the space between cells
        if index >= len(panels):
            for axis in cell[:-1]:
                axis.set_visible(False)
            continue
        phi, lags, data, fit, cells = panels[index]
        top = cell[0]
        top.plot(lags, data, "o", color="tab:blue", markersize=3.5, label="data")
        if fit is not None:
            top.plot(lags, fit, "-", color="black", linewidth=1.4, label="fit")
        top.set_title(phi if isinstance(phi, str) else phi_text(phi) if phi is not None else "")
        if column == 0:
            top.set_ylabel("g\u2082(\u03c4) = \u27e8c\u2082(t\u2081, t\u2081 + \u03c4)"
                           "\u27e9 over t\u2081", fontsize=10)
        if index == 0:
            top.legend(frameon=False, loc="upper right")
        bottom = top
        if fit is not None:
            bottom = cell[1]
            residual = data - fit
            if math.isfinite(sigma) and sigma > 0:
                band = sigma / numpy.sqrt(cells)
                bottom.fill_between(lags, -band, band, color="0.85", linewidth=0,
                                    label="\u00b1\u03c3/\u221an")
            bottom.axhline(0.0, color="black", linewidth=0.8)
            bottom.plot(lags, residual, ".", color="tab:red", markersize=3)
            if column == 0:
                bottom.set_ylabel("data \u2212 fit", fontsize=10)
            if index == 0 and math.isfinite(sigma) and sigma > 0:
                bottom.legend(frameon=False, loc="upper left", fontsize=9)
            top.tick_params(labelbottom=False)
        for axis in {top, bottom}:
            log_scale(axis.xaxis)
            axis.set_xlim(lags[0] / 1.25, lags[-1] * 1.25)
        bottom.set_xlabel(f"lag \u03c4 = t\u2082 \u2212 t\u2081 [{time_unit}]")
    figure.suptitle(title)
    save(pyplot, figure, path)


def plot_fit_g2(numpy, pyplot, results, plot_dir, dpi):
    """g2_lag.png: the data and the fit averaged over t1 at each lag, every angle."""
    path = drawing(os.path.join(plot_dir, "g2_lag.png"))
    panels = []
    for angle in results.angles:
        panels.append((angle["label"],) + results.lag_average(angle, numpy))
    sampled = (f", t\u2081 every {results.stride}th time" if results.stride > 1 else "")
    plot_g2(numpy, pyplot, panels, path,
            f"g\u2082(\u03c4): c\u2082 averaged over t\u2081 at each lag{sampled}; residual "
            f"band \u00b1\u03c3/\u221an, \u03c3 = {results.sigma_fit:.3g}"
            + results.title_tail(), results.sigma_fit, dpi)


# The rates of each mode (docs/model.md): (key, label, unit, parameter names, kind). The keys
# are those of nlsq/derived_rates.json (docs/results.md, What the data determine), whose bands are drawn on the same panel.
RATE_FLOOR = 1e-10  # the model's rate floor (model_limits::kRateFloor)
MODE_RATES = {
    "static": [("D", "D(t) = D0 t^\u03b1 + D_offset", "\u00c5\u00b2/s",
                ("D0", "alpha", "D_offset"), "floored")],
    "laminar_flow": [("D", "D(t) = D0 t^\u03b1 + D_offset", "\u00c5\u00b2/s",
                      ("D0", "alpha", "D_offset"), "floored"),
                     ("gamma_dot", "\u03b3\u0307(t) = \u03b3\u0307\u2080 t^\u03b2 + "
                      "\u03b3\u0307_offset", "1/s",
                      ("gamma_dot_t0", "beta", "gamma_dot_t_offset"), "floored")],
    "two_component": [("D_ref", "J_ref(t) = D0_ref t^\u03b1_ref + D_offset_ref",
                       "\u00c5\u00b2/s", ("D0_ref", "alpha_ref", "D_offset_ref"), "zeroed"),
                      ("D_sample", "J_sample(t) = D0_sample t^\u03b1_sample + "
                       "D_offset_sample", "\u00c5\u00b2/s",
                       ("D0_sample", "alpha_sample", "D_offset_sample"), "zeroed"),
                      ("v", "v(t) = v0 t^v_beta + v_offset", "\u00c5/s",
                       ("v0", "v_beta", "v_offset"), "signed"),
                      ("fraction", "sample fraction x_s(t)", "", ("f0", "f1", "f2", "f3"),
                       "fraction")],
}
MODE_RATES["heterodyne"] = MODE_RATES["two_component"]
RATE_SYMBOLS = {"gamma_dot": "\u03b3\u0307", "D_ref": "J_ref", "D_sample": "J_sample",
                "fraction": "x_s"}


def rate_curve(numpy, t, values, kind):
    """A rate of the model at the times `t` from its parameters `values` (docs/model.md)."""
    if kind == "fraction":  # x_s = soft01(f0 exp(clip(f1 (t - f2), -700, 700)) + f3)
        f0, f1, f2, f3 = values
        z = f0 * numpy.exp(numpy.clip(f1 * (t - f2), -700, 700)) + f3
        softplus = lambda x: numpy.logaddexp(0.0, x)  # noqa: E731
        return 1 - softplus(50 * (1 - softplus(50 * z) / 50)) / 50
    prefactor, exponent, offset = values
    # pw(t, e): t^e, with t no smaller than the model's 1e-10 guard (t > 0 on the fitted grid).
    rate = prefactor * numpy.power(numpy.maximum(t, 1e-10), exponent) + offset
    if kind == "floored":
        return numpy.maximum(rate, RATE_FLOOR)
    if kind == "zeroed":
        return numpy.maximum(rate, 0.0)
    return rate


def read_derived_rates(numpy, path):
    """nlsq/derived_rates.json (docs/results.md, What the data determine): {"t": [...], KEY: [...], KEY_interval_68:
    [[lo, hi], ...], ...} as {"t": array, KEY: (values, band 68 or None, band 95 or None)},
    or None when the file is absent; exits 1 naming the key when it does not fit."""
    content = read_json(path, {"t": ([NUMBER], True)})
    if content is None:
        return None
    t = numpy.array([number(value) for value in content["t"]], dtype=float)
    if len(t) < 1 or not numpy.all(numpy.isfinite(t)):
        fail(f"{path}, key t: must hold at least one time, each finite")
    curves = {}
    for key, value in content.items():
        if key == "t" or key.endswith(("_interval_68", "_interval_95")):
            continue
        if not isinstance(value, list):
            continue  # other information (units, a note): not a curve
        check_json(path, key, value, [NUMBER])
        if len(value) != len(t):
            fail(f"{path}, key {key}: {len(value)} values for {len(t)} times in t: one per time")
        bands = []
        for level in ("68", "95"):
            name = f"{key}_interval_{level}"
            if name not in content:
                bands.append(None)
                continue
            check_json(path, name, content[name], [[NUMBER]])
            if len(content[name]) != len(t) or any(len(pair) != 2 for pair in content[name]):
                fail(f"{path}, key {name}: must hold one [lo, hi] per time in t "
                     f"({len(t)})")
            bands.append(numpy.array([[number(v) for v in pair] for pair in content[name]],
                                     dtype=float))
        curves[key] = (numpy.array([number(v) for v in value], dtype=float),) + tuple(bands)
    return {"t": t, "curves": curves}


def plot_rates(numpy, pyplot, results, plot_dir, dpi):
    """derived_rates.png: D(t) and, per mode, the shear rate or the two components' rates,
    velocity and fraction over the fitted window, from the fitted parameters; with
    nlsq/derived_rates.json, its curves and 68 % (and 95 %) bands too."""
    path = drawing(os.path.join(plot_dir, "derived_rates.png"))
    mode = (results.parameters or {}).get("analysis_mode", "")
    fitted = {name: number(entry.get("value")) if isinstance(entry, dict) else math.nan
              for name, entry in (results.parameters or {}).get("parameters", {}).items()}
    derived = results.derived_rates
    t = results.t_full
    panels = []  # (key, title, unit, model curve or None)
    for key, title, unit, names, kind in MODE_RATES.get(mode, []):
        values = [fitted.get(name, math.nan) for name in names]
        curve = (rate_curve(numpy, t, values, kind)
                 if all(math.isfinite(v) for v in values) else None)
        panels.append((key, title, unit, curve))
    known = {panel[0] for panel in panels}
    for key in (derived or {"curves": {}})["curves"]:
        if key not in known:
            panels.append((key, key, "", None))
    if not panels:
        panels.append(("", "no rates: no analysis_mode or parameters in parameters.json", "",
                       None))
    columns = min(len(panels), 2)
    rows = math.ceil(len(panels) / columns)
    figure, axes = new_figure(pyplot, (6.2 * columns, 3.9 * rows + 0.5), dpi, rows, columns,
                              margins=(0.95, 0.25, 0.6, 1.0), spaces=(0.3, 0.5))
    for axis in axes.ravel()[len(panels):]:
        axis.set_visible(False)
    for axis, (key, title, unit, curve) in zip(axes.ravel(), panels):
        shown_values = []
        band_drawn = False
        if derived and key in derived["curves"]:
            values, band68, band95 = derived["curves"][key]
            for band, alpha, level in ((band95, 0.15, "95"), (band68, 0.35, "68")):
                if band is not None:
                    axis.fill_between(derived["t"], band[:, 0], band[:, 1], color="tab:blue",
                                      alpha=alpha, linewidth=0, label=f"{level} % interval")
                    shown_values.append(band.ravel())
                    band_drawn = True
            axis.plot(derived["t"], values, "--", color="tab:blue", linewidth=1.2,
                      label="derived_rates.json")
            shown_values.append(values)
        if curve is not None:
            axis.plot(t, curve, "-", color="black", linewidth=1.6,
                      label="from the fitted parameters")
            shown_values.append(curve)
        if not shown_values:
            message_panel(axis, "no fitted value for this rate")
            axis.set_title(title, fontsize=11)
            continue
        finite = numpy.concatenate(shown_values)
        finite = finite[numpy.isfinite(finite)]
        log_scale(axis.xaxis)
        if key == "fraction":
            axis.set_ylim(-0.02, 1.02)
        elif finite.size and finite.min() > 0 and finite.max() > 3 * finite.min():
            log_scale(axis.yaxis)
        else:
            axis.ticklabel_format(axis="y", useOffset=False)
        axis.set_title(title, fontsize=11)
        axis.set_xlabel("t [s]")
        symbol = RATE_SYMBOLS.get(key, key)
        axis.set_ylabel(f"{symbol} [{unit}]" if unit else symbol)
        if band_drawn or (derived and key in derived["curves"]):
            axis.legend(frameon=False, fontsize=9)
    source = ("bands: the intervals of nlsq/derived_rates.json" if derived else
              "curves of the fitted values (no nlsq/derived_rates.json: no bands)")
    figure.suptitle(f"Rates over the fitted window ({mode or '?'}){results.title_tail()}\n"
                    f"{source}")
    save(pyplot, figure, path)


def cut_indices(count, n):
    """`count` row indices spread over the first 80 % of the window (later rows are short)."""
    last = max(0, int(0.8 * (n - 2)))
    if count == 1:
        return [0]
    return sorted({round(k * last / (count - 1)) for k in range(count)})


def plot_cuts(numpy, pyplot, results, angle, plot_dir, dpi, cut_count):
    """One angle: c2(t1, t1 + lag) against the lag at a few t1, data vs fit, noise bands."""
    t = results.t_full
    n = len(t)
    sigma = results.sigma_fit
    indices = cut_indices(cut_count, n)
    columns = min(len(indices), 2 if len(indices) <= 4 else 3)
    rows = math.ceil(len(indices) / columns)
    path = drawing(os.path.join(plot_dir, f"c2_cuts_{angle['tag']}.png"))
    cuts = [(index,) + tuple(numpy.asarray(row, dtype=float)
                             for row in results.rows(angle, index)) for index in indices]
    finite = numpy.concatenate([numpy.concatenate([d[i + 1:], f[i + 1:]])
                                for i, d, f in cuts])
    finite = finite[numpy.isfinite(finite)]
    pad = 2.5 * sigma if math.isfinite(sigma) else 0.0
    y_limits = ((float(finite.min()) - pad, float(finite.max()) + pad)
                if finite.size else None)
    lines = [f"{angle['label']}: c\u2082(t\u2081, t\u2081 + lag), data and fit",
             results.title_tail().strip(),
             f"bands: noise \u03c3 = {sigma:.3g} ({results.sigma_source})"]
    title = "\n".join(line for line in lines if line)
    top = 0.35 + 0.2 * title.count("\n")
    figure, axes = new_figure(pyplot, (max(5.2 * columns, 7.5), 3.6 * rows + top), dpi, rows,
                              columns, margins=(0.75, 0.2, 0.6, top + 0.25),
                              spaces=(0.08, 0.45), sharey=True)
    for axis in axes.ravel()[len(cuts):]:
        axis.set_visible(False)
    for axis, (index, data, fit) in zip(axes.ravel(), cuts):
        lag = t[index + 1:] - t[index]  # the diagonal (lag 0) is not fitted
        data, fit = data[index + 1:], fit[index + 1:]
        if math.isfinite(sigma):
            axis.fill_between(lag, fit - 2 * sigma, fit + 2 * sigma, color="tab:orange",
                              alpha=0.15, linewidth=0, label="fit \u00b1 2\u03c3")
            axis.fill_between(lag, fit - sigma, fit + sigma, color="tab:orange",
                              alpha=0.3, linewidth=0, label="fit \u00b1 \u03c3")
        axis.plot(lag, data, ".", color="tab:blue", markersize=3, label="data")
        axis.plot(lag, fit, "-", color="black", linewidth=1.4, label="fit")
        axis.set_title(f"t\u2081 = {t[index]:.3g} s")
        axis.set_xlabel("lag t\u2082 \u2212 t\u2081 [s]")
        if axis.get_subplotspec().is_first_col():
            axis.set_ylabel("c\u2082")
        if y_limits:
            axis.set_ylim(*y_limits)
    axes.ravel()[0].legend(loc="upper right", frameon=False)
    figure.suptitle(title, fontsize=11)
    save(pyplot, figure, path)


def plot_residual_histogram(numpy, pyplot, results, plot_dir, dpi):
    """All residuals against the Gaussian of the fit's noise sigma (and the assumed one)."""
    drawing(os.path.join(plot_dir, "residual_histogram.png"))
    residuals = results.upper_residuals(numpy)
    if residuals.size == 0:
        fail(f"{results.fitted_data_path}: no finite residual to plot")
    sigma = results.sigma_fit
    spread = float(numpy.max(numpy.abs(residuals)))
    if math.isfinite(sigma) and sigma > 0:
        spread = max(spread, 5 * sigma)
    edges = numpy.linspace(-spread, spread, 121)
    x = numpy.linspace(-spread, spread, 600)
    figure, axes = new_figure(pyplot, (12, 4.6), dpi, 1, 2, margins=(0.8, 0.2, 0.6, 0.7),
                              spaces=(0.22, 0.3))
    axes = axes[0]
    counts, _ = numpy.histogram(residuals, bins=edges, density=True)
    for axis, scale in zip(axes, ("linear", "log")):
        # One filled outline (stairs), not 120 bar patches: the same picture, drawn faster.
        axis.stairs(counts, edges, fill=True, color="tab:blue", alpha=0.6,
                    label=f"residuals ({residuals.size:,} points)")
        if math.isfinite(sigma) and sigma > 0:
            axis.plot(x, numpy.exp(-0.5 * (x / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi)),
                      color="black", linewidth=1.5,
                      label=f"Gaussian, \u03c3 = {sigma:.3g} (fit)")
        assumed = results.sigma_assumed
        if math.isfinite(assumed) and assumed > 0:
            axis.plot(x, numpy.exp(-0.5 * (x / assumed) ** 2) /
                      (assumed * math.sqrt(2 * math.pi)), "--", color="tab:red",
                      linewidth=1.2, label=f"Gaussian, \u03c3 = {assumed:.3g} (assumed)")
        if scale == "log":
            log_scale(axis.yaxis)
        axis.set_xlabel("residual c\u2082 data \u2212 fit")
        axis.set_ylabel("probability density")
        if scale == "log":
            positive = counts[counts > 0]
            if positive.size:
                axis.set_ylim(0.3 * positive.min(), 3 * positive.max())
    mean = float(numpy.mean(residuals))
    deviation = float(numpy.std(residuals))
    standardised = (residuals - mean) / deviation if deviation > 0 else residuals
    skewness = float(numpy.mean(standardised ** 3))
    kurtosis = float(numpy.mean(standardised ** 4) - 3.0)
    axes[0].legend(loc="upper left", frameon=False)
    axes[1].text(0.98, 0.97, f"mean {mean:.2e}\nstd {deviation:.3g}\nskewness {skewness:.3f}\n"
                 f"excess kurtosis {kurtosis:.3f}", transform=axes[1].transAxes,
                 ha="right", va="top", fontsize=10,
                 bbox={"facecolor": "white", "edgecolor": "0.7"})
    angles = ", ".join(f"{a['phi']:.1f}" for a in results.angles)
    figure.suptitle(f"Residuals of all angles ({angles}\u00b0){results.title_tail()}\nupper "
                    f"triangles without the diagonal" +
                    (f", every {results.stride}th row and column" if results.stride > 1 else ""),
                    fontsize=12)
    save(pyplot, figure, os.path.join(plot_dir, "residual_histogram.png"))


def message_panel(axis, text):
    axis.text(0.5, 0.5, text, transform=axis.transAxes, ha="center", va="center", wrap=True,
              fontsize=11, color="0.35")
    axis.set_xticks([])
    axis.set_yticks([])


def plot_convergence(numpy, pyplot, results, plot_dir, dpi):
    """chi2, damping, step norm and Gauss-Newton step per iteration; the global phase's minima."""
    drawing(os.path.join(plot_dir, "convergence.png"))
    figure, axes = new_figure(pyplot, (16, 8.5), dpi, 2, 3, margins=(0.95, 0.2, 0.6, 0.75),
                              spaces=(0.33, 0.38))
    (chi2_axis, damping_axis, step_axis), (se_axis, minima_axis, text_axis) = axes
    history = (results.history or {}).get("history", [])
    global_search = (results.metrics or {}).get("global_search", {})
    if 0 < len(history) <= 2 and global_search.get("minima"):
        # One iteration (or none): the final fit started at its optimum, found by the global
        # phase; its panels would hold a point or two. Show the global phase's work instead.
        plot_short_final_fit(numpy, (chi2_axis, damping_axis, step_axis, se_axis), results,
                             history)
    elif history:
        iterations = numpy.array([entry["iteration"] for entry in history])
        accepted = numpy.array([bool(entry["accepted"]) or entry["iteration"] == 0
                                for entry in history])
        chi2 = numpy.array([number(entry["chi2"]) for entry in history])
        trial = numpy.array([number(entry["trial_chi2"]) for entry in history])
        final = float(chi2[-1])
        above = chi2 - final > 0  # the final point itself (0 above) has no place on a log axis
        rejected = ~accepted & numpy.isfinite(trial) & (trial - final > 0)
        plotted = set()
        if above.any() or rejected.any():
            chi2_axis.plot(iterations[above], (chi2 - final)[above], "-o", color="tab:blue",
                           markersize=4, label="current point")
            if rejected.any():
                chi2_axis.plot(iterations[rejected], (trial - final)[rejected], "x",
                               color="tab:red", markersize=6, label="rejected trial")
            log_scale(chi2_axis.yaxis)
            chi2_axis.legend(frameon=False)
            plotted.add(chi2_axis)
        else:
            message_panel(chi2_axis, f"the final fit started at its optimum\n"
                                     f"({len(history) - 1} trial steps, none lowered "
                                     f"\u03c7\u00b2)")
        chi2_axis.set_ylabel(f"\u03c7\u00b2 \u2212 final \u03c7\u00b2   "
                             f"(final \u03c7\u00b2 = {final:.6g})")
        chi2_axis.set_title("\u03c7\u00b2 above its final value")
        series = ((damping_axis, "damping", "Marquardt damping \u03bc", "damping \u03bc"),
                  (step_axis, "step_norm", "step |\u0394\u03b8| (fitted parameters)",
                   "|\u0394\u03b8| [parameter units]"),
                  (se_axis, "step_standard_errors",
                   "Gauss-Newton step at the current point", "step [standard errors]"))
        for axis, key, title, label in series:
            values = numpy.array([number(entry[key]) for entry in history])
            shown = numpy.isfinite(values) & (values > 0)
            if shown.any() and values[shown].max() <= 10 * values[shown].min():
                # Within a factor 10: a linear axis (a log one would label minor ticks only).
                axis.plot(iterations[shown], values[shown], "-o", color="tab:green",
                          markersize=4)
                plotted.add(axis)
            elif shown.any():
                axis.plot(iterations[shown], values[shown], "-o", color="tab:green",
                          markersize=4)
                if key != "step_standard_errors" and (shown & ~accepted).any():
                    axis.plot(iterations[shown & ~accepted], values[shown & ~accepted], "x",
                              color="tab:red", markersize=6, label="rejected trial")
                    axis.legend(frameon=False)
                log_scale(axis.yaxis)
                plotted.add(axis)
            else:
                message_panel(axis, "no positive value recorded")
            axis.set_title(title)
            axis.set_ylabel(label)
        for axis in (chi2_axis, damping_axis, step_axis, se_axis):
            axis.set_xlabel("iteration of the final fit")
            if axis in plotted:
                # At least two integer ticks, else MaxNLocator falls back to fractions.
                axis.set_xlim(iterations.min() - 0.5,
                              max(iterations.max(), iterations.min() + 1) + 0.5)
                axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        for axis in (chi2_axis, damping_axis, step_axis, se_axis):
            message_panel(axis, "no convergence_history.json:\nthe final fit's iterations "
                                "were not recorded")
    plot_minima(numpy, minima_axis, results)
    text_axis.axis("off")
    text_axis.text(0.0, 1.0, summary_text(results), transform=text_axis.transAxes, ha="left",
                   va="top", fontsize=10, family="monospace")
    figure.suptitle(f"Convergence ({(results.parameters or {}).get('analysis_mode', '?')})"
                    + results.title_tail())
    save(pyplot, figure, os.path.join(plot_dir, "convergence.png"))


def plot_short_final_fit(numpy, axes, results, history):
    """The four iteration panels of a final fit of at most one iteration: a message, the
    passes of each stage of the global phase and of the final fit, the iterations of the local
    fit that found each minimum, and the final fit's Gauss-Newton step in standard errors."""
    message_axis, passes_axis, local_axis, step_axis = axes
    metrics = results.metrics or {}
    global_search = metrics.get("global_search", {})
    iterations = len(history) - 1
    final = number(history[-1]["chi2"])
    chosen = global_search.get("chosen", -1)
    minima = global_search.get("minima", [])
    start_chi2 = (number(minima[chosen].get("chi2")) if 0 <= chosen < len(minima)
                  else math.nan)
    message_panel(message_axis,
                  f"the final fit converged in {iterations} "
                  f"iteration{'' if iterations == 1 else 's'}:\n"
                  f"it started at the global phase's chosen minimum\n"
                  f"(\u03c7\u00b2 {start_chi2:.6g} on the search data),\n"
                  f"already the optimum: final \u03c7\u00b2 {final:.6g}.\n\n"
                  f"The other panels show the global phase's work.")
    message_axis.set_title("final fit")
    stages = global_search.get("passes_by_stage", {})
    names, counts = [], []
    for name, count in (stages.items() if isinstance(stages, dict) else []):
        if isinstance(count, int) and not isinstance(count, bool):
            names.append(name.replace("_", " "))
            counts.append(count)
    final_passes = metrics.get("passes")
    if isinstance(final_passes, int) and not isinstance(final_passes, bool):
        names.append("final fit")
        counts.append(final_passes)
    if counts:
        positions = numpy.arange(len(counts))
        passes_axis.bar(positions, numpy.maximum(counts, 0.8),
                        color=["tab:blue"] * (len(counts) - 1) + ["tab:green"])
        for position, count in zip(positions, counts):
            passes_axis.text(position, max(count, 0.8) * 1.15, str(count), ha="center",
                             fontsize=9)
        log_scale(passes_axis.yaxis)
        passes_axis.set_ylim(0.5, max(counts + [1]) * 5)
        passes_axis.set_xticks(positions)
        passes_axis.set_xticklabels(names, rotation=20, ha="right", fontsize=9)
        passes_axis.set_ylabel("passes over the data")
    else:
        message_panel(passes_axis, "no passes recorded")
    passes_axis.set_title("passes per stage")
    local = [(k, m.get("iterations")) for k, m in enumerate(minima)
             if isinstance(m.get("iterations"), int)]
    if local:
        positions = numpy.arange(len(local))
        local_axis.bar(positions, [count for _, count in local],
                       color=["tab:red" if k == chosen else "tab:blue" for k, _ in local])
        local_axis.set_xticks(positions)
        local_axis.set_xticklabels([str(k) for k, _ in local],
                                   rotation=90 if len(local) > 12 else 0)
        local_axis.set_xlabel("minimum, lowest first (red: the chosen start)")
        local_axis.set_ylabel("iterations")
    else:
        message_panel(local_axis, "no local fits recorded")
    local_axis.set_title("iterations of the local fit that found each minimum")
    steps = [number(entry["step_standard_errors"]) for entry in history]
    step_axis.bar(numpy.arange(len(steps)), steps, color="tab:green")
    step_axis.set_xticks(numpy.arange(len(steps)))
    step_axis.set_xlabel("iteration of the final fit")
    step_axis.set_ylabel("step [standard errors]")
    step_axis.set_title("Gauss-Newton step at the current point")


def plot_minima(numpy, axis, results):
    """The global phase's distinct minima: chi2 above the lowest, the chosen one marked."""
    global_search = (results.metrics or {}).get("global_search", {})
    minima = global_search.get("minima", [])
    axis.set_title(f"global phase ({global_search.get('method', 'not recorded')}): "
                   f"{len(minima)} {'minimum' if len(minima) == 1 else 'minima'}")
    if not minima:
        message_panel(axis, "no minima recorded\n(global phase off, or no "
                            "convergence_metrics.json)")
        return
    chi2 = numpy.array([number(m.get("chi2")) for m in minima])
    lowest = numpy.nanmin(chi2)
    excess = chi2 - lowest
    positions = numpy.arange(len(minima))
    converged = numpy.array([str(m.get("status", "")).startswith("converged") for m in minima])
    shown = numpy.where(excess > 0, excess, numpy.nan)
    floor = numpy.nanmin(shown) / 10 if numpy.isfinite(shown).any() else 1e-6
    heights = numpy.where(excess > 0, excess, floor)
    axis.bar(positions[converged], heights[converged], color="tab:blue", label="converged")
    if (~converged).any():
        axis.bar(positions[~converged], heights[~converged], color="tab:gray",
                 label="not converged")
    chosen = global_search.get("chosen", -1)
    if 0 <= chosen < len(minima):
        axis.bar([chosen], [heights[chosen]], fill=False, edgecolor="tab:red", linewidth=2,
                 label="chosen (final fit's start)")
    log_scale(axis.yaxis)
    axis.set_ylim(top=float(numpy.nanmax(heights)) * 10 ** 3)  # room for the legend
    axis.set_xticks(positions)
    axis.set_xticklabels([str(m.get("start", "")) if m.get("start", -1) >= 0 else "CMA"
                          for m in minima], rotation=90 if len(minima) > 12 else 0)
    axis.set_xlabel(f"minimum, lowest first (\u03c7\u00b2 = {lowest:.6g}, drawn at the floor); "
                    f"label: its start", fontsize=10)
    axis.set_ylabel("\u03c7\u00b2 \u2212 lowest \u03c7\u00b2 (search data)")
    axis.legend(frameon=False, fontsize=9, loc="upper left", ncol=2)


def summary_text(results):
    metrics = results.metrics or {}
    parameters = results.parameters or {}
    global_search = metrics.get("global_search", {})
    lines = [
        f"status      {metrics.get('convergence', {}).get('status', '?')}",
        f"iterations  {metrics.get('iterations', '?')}, passes {metrics.get('passes', '?')}",
        f"chi2        {number(parameters.get('chi_squared')):.6g}",
        f"reduced     {number(parameters.get('reduced_chi_squared')):.5f}",
        f"quality     {metrics.get('quality_flag', '?')}",
        f"strategy    {metrics.get('strategy', {}).get('name', '?')}",
        f"global      {global_search.get('method', '?')}: "
        f"{global_search.get('starts', 0)} starts,",
        f"            {global_search.get('local_fits', 0)} local fits, "
        f"{len(global_search.get('minima', []))} minima",
        f"sigma       {results.sigma_assumed:.3g} assumed, {results.sigma_fit:.3g} fit",
    ]
    reason = metrics.get("termination_reason", "")
    if reason:
        words, line, wrapped = reason.split(), "", []
        for word in words:
            if len(line) + len(word) + 1 > 36:
                wrapped.append(line)
                line = word
            else:
                line = f"{line} {word}".strip()
        wrapped.append(line)
        lines.append("stopped     " + wrapped[0])
        lines.extend("            " + rest for rest in wrapped[1:6])
    return "\n".join(lines)


def plot_correlations(numpy, pyplot, results, plot_dir, dpi):
    """The correlation matrix of parameters.json, degenerate and strong pairs outlined."""
    drawing(os.path.join(plot_dir, "parameter_correlations.png"))
    correlation = (results.parameters or {}).get("correlation", {})
    names = correlation.get("parameter_names", [])
    matrix = numpy.array([[number(v) for v in row] for row in correlation.get("matrix", [])],
                         dtype=float).reshape(len(names), -1) if names else numpy.zeros((0, 0))
    size = max(6.5, 0.42 * len(names) + 3.0)
    # Margins for the longest tick label (about 0.085 inch a character at 10 points).
    labels = [results.label(name) for name in names]
    longest = max((len(label.replace("$", "")) for label in labels), default=4)
    label_room = 0.35 + 0.07 * longest
    figure, axes = new_figure(pyplot, (size + 1.2 + label_room, size + label_room), dpi,
                              margins=(0.2 + label_room, 0.3, 0.2 + label_room, 1.1))
    axis = axes[0, 0]
    if not names or matrix.shape != (len(names), len(names)):
        message_panel(axis, "no correlation matrix in parameters.json")
        save(pyplot, figure, os.path.join(plot_dir, "parameter_correlations.png"))
        return
    n = len(names)
    fixed = numpy.array([numpy.all(matrix[k] == 0) for k in range(n)])
    shown = numpy.ma.masked_invalid(numpy.where(fixed[:, None] | fixed[None, :], numpy.nan,
                                                matrix))
    colour_map = pyplot.get_cmap("RdBu_r").copy()
    colour_map.set_bad("0.85")
    image = axis.imshow(shown, cmap=colour_map, vmin=-1, vmax=1, interpolation="nearest")
    bar = figure.colorbar(image, ax=axis, shrink=0.8)
    bar.set_label("correlation r")
    axis.set_xticks(range(n))
    axis.set_yticks(range(n))
    axis.set_xticklabels(labels, rotation=60, ha="right", rotation_mode="anchor",
                         fontsize=9 if n > 12 else 10)
    axis.set_yticklabels(labels, fontsize=9 if n > 12 else 10)
    pairs = []
    for i in range(n):
        for j in range(n):
            value = matrix[i, j]
            if n <= 24 and not fixed[i] and not fixed[j] and math.isfinite(value):
                text = f"{value:.2f}"
                axis.text(j, i, "0.00" if text == "-0.00" else text, ha="center", va="center",
                          fontsize=7 if n > 12 else 9,
                          color="white" if abs(value) > 0.6 else "black")
            if i != j and math.isfinite(value) and abs(value) >= STRONG_CORRELATION:
                degenerate = abs(value) >= DEGENERATE_CORRELATION
                axis.add_patch(pyplot.Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False,
                                                edgecolor="black" if degenerate else "gold",
                                                linewidth=2.5 if degenerate else 1.8,
                                                linestyle="-" if degenerate else (0, (2, 1))))
                if i < j:
                    physical = "[" not in names[i] and "[" not in names[j]
                    pairs.append((physical, abs(value), names[i], names[j], value))
    # Pairs of physical parameters first (the fit warns about those), then by |r|.
    pairs.sort(reverse=True)
    first_scaling = next((k for k, name in enumerate(names) if "[" in name), None)
    if first_scaling:  # a line between the physical parameters and the per-angle ones
        for line in (axis.axhline, axis.axvline):
            line(first_scaling - 0.5, color="black", linewidth=1.2)
    listed = ";  ".join(f"{a}\u2013{b} {r:+.3f}" + ("\n" if k % 2 == 1 else "")
                        for k, (_, _, a, b, r) in enumerate(pairs[:4])).replace("\n;  ", "\n")
    listed = listed.rstrip("\n")
    title = "Parameter correlations" + results.title_tail()
    if pairs:
        title += (f"\noutlined: |r| \u2265 {DEGENERATE_CORRELATION} (black: the data do not "
                  f"separate them), \u2265 {STRONG_CORRELATION} (gold, dashed)\n{listed}"
                  + (f" (+{len(pairs) - 4} more)" if len(pairs) > 4 else ""))
    else:
        title += f"\nno pair with |r| \u2265 {STRONG_CORRELATION}"
    if fixed.any():
        title += "\ngrey: held fixed or on a bound (no variance)"
    axis.set_title(title, fontsize=11)
    save(pyplot, figure, os.path.join(plot_dir, "parameter_correlations.png"))


# --plot-experimental-data: the beamline layouts as src/io/dataset_inspection.cc reads them
# (docs/design.md section 8, Input).
APS_U_Q, APS_U_PHI = "/xpcs/qmap/dynamic_v_list_dim0", "/xpcs/qmap/dynamic_v_list_dim1"
APS_U_BINS, APS_U_MATRICES = "/xpcs/twotime/processed_bins", "/xpcs/twotime/correlation_map"
APS_OLD_Q, APS_OLD_PHI, APS_OLD_MATRICES = "/xpcs/dqlist", "/xpcs/dphilist", "/exchange/C2T_all"
APS_U_SAME_Q = 1e-10


def normalised_angle(phi):
    """phi in degrees, normalised to (-180, 180] as the reader does (210 -> -150)."""
    phi = math.fmod(phi, 360.0)
    if phi <= -180.0:
        phi += 360.0
    elif phi > 180.0:
        phi -= 360.0
    return phi


def read_config(path):
    """(data file, q target, dt, start_frame, end_frame, q tolerance) of a homodyne config, the
    keys read as the fit reads them (docs/configuration.md, Model and data); None where the
    config has no value."""
    try:
        import yaml
    except ImportError as error:
        fail(f"--config needs PyYAML ({error}; apt-get install python3-yaml), or give the data "
             f"file with --q and --dt", EXIT_MISSING_MODULE)
    try:
        with open(path, encoding="utf-8") as file:
            config = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as error:
        fail(f"{path}: cannot read it as YAML ({' '.join(str(error).split())[:200]})")
    if not isinstance(config, dict):
        fail(f"{path}: not a homodyne config (a YAML mapping)")

    def section(parent, key):
        value = parent.get(key) if isinstance(parent, dict) else None
        return value if isinstance(value, dict) else {}

    def value(parent, key, kind):
        item = parent.get(key) if isinstance(parent, dict) else None
        if item is None:
            return None
        if kind is str:
            return item if isinstance(item, str) else fail(
                f"{path}: {key}: {shown(item)} is not a string")
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            fail(f"{path}: {key}: {shown(item)} is not a number")
        return item

    analyzer = section(config, "analyzer_parameters")
    data = section(config, "experimental_data")
    folder, name = value(data, "data_folder_path", str), value(data, "data_file_name", str)
    data_file = (folder.rstrip("/") + "/" + name if folder is not None and name is not None
                 else value(data, "file_path", str))
    dt = value(analyzer, "dt", float)
    if dt is None:
        dt = value(data, "dt", float) or value(config, "dt", float)
    return {"data_file": data_file,
            "q": value(section(analyzer, "scattering"), "wavevector_q", float), "dt": dt,
            "start_frame": value(analyzer, "start_frame", int),
            "end_frame": value(analyzer, "end_frame", int),
            "q_tolerance": value(config, "q_tolerance_fraction", float)}


class ExperimentalData:
    """The matrices of one q ring of a beamline HDF5 file (APS-U or APS-old), over the frame
    window with its first frame dropped, as the fit sees them: c2(t1, t2) strided for the heat
    maps and every stride-th row at full resolution for g2."""

    def __init__(self, h5py, numpy, path, q_target, tolerance, window, dt, max_pixels):
        global current_activity
        self.path = path
        if not os.path.isfile(path):
            fail(f"{path}: not found (the data file to plot)")
        current_activity = f"{path}: reading it"
        try:
            with h5py.File(path, "r") as file:
                candidates, layout = self._candidates(h5py, numpy, file)
                kept = self._select(candidates, layout, q_target, tolerance or 0.1)
                self.layout = layout
                self.q = kept[0][0]
                self.angles = []
                for q, phi, name in kept:
                    self.angles.append(self._read(h5py, numpy, file, name, phi, window,
                                                  max_pixels))
        except OSError as error:
            fail(f"{path}: cannot read it as HDF5 ({error})")
        n = self.angles[0]["n"]
        self.dt = dt
        self.time_unit = "s" if dt else "frames"
        self.t_full = (numpy.arange(n) + 1.0) * (dt or 1.0)
        self.stride = self.angles[0]["stride"]
        self.t = self.t_full[::self.stride]
        self.window = self.angles[0]["window"]

    def _candidates(self, h5py, numpy, file):
        """[(q, phi, dataset path)] of every matrix, and the layout's name."""
        def values(name):
            dataset = file.get(name)
            if not isinstance(dataset, h5py.Dataset) or dataset.dtype.kind not in "iuf":
                fail(f"{self.path}, {name}: missing or not numbers")
            array = numpy.asarray(dataset[()], dtype=float).ravel()
            if not numpy.all(numpy.isfinite(array)):
                fail(f"{self.path}, {name}: holds a value that is not finite")
            return array

        def members(name):
            group = file.get(name)
            if not isinstance(group, h5py.Group):
                fail(f"{self.path}, {name}: missing or not a group")
            return [f"{name}/{member}" for member in sorted(group.keys())]

        if APS_U_Q in file and APS_U_MATRICES in file:
            q_list, phi_list = values(APS_U_Q), values(APS_U_PHI)
            bins = values(APS_U_BINS).astype(int)
            names = members(APS_U_MATRICES)
            if not q_list.size or not phi_list.size:
                fail(f"{self.path}, {APS_U_Q} or {APS_U_PHI}: empty")
            pairs = [(q_list[(b - 1) // len(phi_list)], phi_list[(b - 1) % len(phi_list)])
                     for b in bins if b >= 1 and (b - 1) // len(phi_list) < len(q_list)]
            if len(pairs) != len(names):
                fail(f"{self.path}: count mismatch: {len(pairs)} valid bins in {APS_U_BINS} "
                     f"but {len(names)} matrices in {APS_U_MATRICES}")
            return [(q, phi, name) for (q, phi), name in zip(pairs, names)], "APS-U"
        if APS_OLD_Q in file and APS_OLD_PHI in file and APS_OLD_MATRICES in file:
            q_list, phi_list = values(APS_OLD_Q), values(APS_OLD_PHI)
            names = members(APS_OLD_MATRICES)
            if not len(q_list) == len(phi_list) == len(names):
                fail(f"{self.path}: count mismatch: {len(q_list)} q, {len(phi_list)} phi, "
                     f"{len(names)} matrices in {APS_OLD_MATRICES}")
            return list(zip(q_list, phi_list, names)), "APS-old"
        top = ", ".join("/" + key for key in file.keys()) or "nothing"
        fail(f"{self.path}: neither the APS-U layout ({APS_U_Q}, {APS_U_MATRICES}) nor the "
             f"APS-old one ({APS_OLD_Q}, {APS_OLD_MATRICES}); the file holds {top}")

    def _select(self, candidates, layout, q_target, tolerance):
        """The matrices of the ring closest to `q_target` (the first matrix's ring without
        one), chosen as the fit chooses them."""
        if not candidates:
            fail(f"{self.path}: holds no matrix")
        if q_target is None:
            q_target = candidates[0][0]
        best = min(range(len(candidates)), key=lambda k: abs(candidates[k][0] - q_target))
        q_star = candidates[best][0]
        if not abs(q_star - q_target) <= tolerance * abs(q_target):
            rings = sorted({round(c[0], 8) for c in candidates})
            fail(f"{self.path}: wavevector q = {q_target:g} 1/A is not present: the closest "
                 f"is {q_star:g} (rings: {', '.join(f'{q:g}' for q in rings[:12])}"
                 f"{' ...' if len(rings) > 12 else ''})")
        if layout == "APS-U":
            return [c for c in candidates if abs(c[0] - q_star) < APS_U_SAME_Q]
        kept = [k for k, c in enumerate(candidates) if abs(c[0] - q_star) <= tolerance * q_star]
        if len(kept) < 5:
            kept = sorted(sorted(range(len(candidates)),
                                 key=lambda k: abs(candidates[k][0] - q_star))[:10])
        return [candidates[k] for k in kept]

    def _read(self, h5py, numpy, file, name, phi, window, max_pixels):
        dataset = file[name]
        if (not isinstance(dataset, h5py.Dataset) or len(dataset.shape) != 2 or
                dataset.shape[0] != dataset.shape[1] or dataset.dtype.kind not in "iuf"):
            fail(f"{self.path}, {name}: {getattr(dataset, 'shape', 'a group')}: must be a "
                 f"square matrix of numbers")
        frames = dataset.shape[0]
        start, end = window
        start = 1 if start is None else int(start)
        end = frames if end is None or end == -1 else min(int(end), frames)
        if start < 1:
            fail(f"start_frame {start}: frames are numbered from 1")
        # 1-based inclusive [start, end]; the window's first frame is dropped, as in the fit.
        first, stop = start, end
        if stop - first < 2:
            fail(f"{self.path}, {name}: frames {start}..{end} of {frames}: at least 3 are "
                 f"needed")
        n = stop - first
        stride = max(1, math.ceil(n / max_pixels))
        strided = numpy.asarray(dataset[first:stop:stride, first:stop:stride], dtype=float)
        # The files store the upper triangle (with the diagonal): mirror it for the picture.
        upper = numpy.triu(numpy.ones(strided.shape, dtype=bool))
        strided = numpy.where(upper, strided, strided.T)
        t = numpy.arange(1.0, n + 1)  # in frames; scaled by dt where the lags are drawn

        def read(row, row_stop, row_stride):
            return numpy.asarray(dataset[first + row:first + row_stop:row_stride, first:stop],
                                 dtype=float)
        lag = lag_average(numpy, t, ((indices, rows, None) for indices, rows in
                                     row_blocks(numpy, n, stride, read)))
        return {"group": name, "phi": normalised_angle(float(phi)), "data": strided,
                "lag": lag, "n": n, "stride": stride, "window": (start, end)}


def plot_experimental_heatmaps(numpy, pyplot, data, plot_dir, dpi, title_tail):
    """experimental_c2_heatmaps.png: c2(t1, t2) of every angle, one colour scale."""
    path = drawing(os.path.join(plot_dir, "experimental_c2_heatmaps.png"))
    angles = data.angles
    columns = min(len(angles), 4)
    rows = math.ceil(len(angles) / columns)
    figure, axes = new_figure(pyplot, (4.2 * columns + 1.4, 4.0 * rows + 0.5), dpi, rows,
                              columns, margins=(0.75, 1.3, 0.6, 0.85), spaces=(0.32, 0.35))
    limits = percentile_limits(numpy, [a["data"] for a in angles], (1.0, 1.5))
    t = data.t
    extent = (t[0], t[-1], t[0], t[-1])
    image = None
    for axis in axes.ravel()[len(angles):]:
        axis.set_visible(False)
    for axis, angle in zip(axes.ravel(), angles):
        image = axis.imshow(angle["data"].T, origin="lower", extent=extent, aspect="equal",
                            cmap="viridis", vmin=limits[0], vmax=limits[1],
                            interpolation="nearest")
        axis.set_title(phi_text(angle["phi"]))
        axis.set_xlabel(f"t\u2081 [{data.time_unit}]")
        axis.set_ylabel(f"t\u2082 [{data.time_unit}]")
    bar = figure.colorbar(image, ax=list(axes.ravel()[:len(angles)]), shrink=0.85)
    bar.set_label("c\u2082 (1st to 99th percentile)")
    start, end = data.window
    window = (f"frames {start + 1}..{end} ({data.layout})" if data.layout != "fitted_data.h5"
              else "the fitted window (fitted_data.h5)")
    figure.suptitle(f"Experimental c\u2082(t\u2081, t\u2082), {window}{title_tail}" +
                    (f", every {data.stride}th frame" if data.stride > 1 else ""))
    save(pyplot, figure, path)


def plot_experimental_g2(numpy, pyplot, data, plot_dir, dpi, title_tail):
    """experimental_g2_lag.png: the data averaged over t1 at each lag, every angle."""
    path = drawing(os.path.join(plot_dir, "experimental_g2_lag.png"))
    panels = []
    scale = (data.dt or 1.0) if isinstance(data, ExperimentalData) else 1.0
    for angle in data.angles:
        lags, mean, _, cells = angle["lag"]
        panels.append((angle["phi"], lags * scale, mean, None, cells))
    plot_g2(numpy, pyplot, panels, path,
            f"Experimental g\u2082(\u03c4): c\u2082 averaged over t\u2081 at each lag"
            f"{title_tail}", math.nan, dpi, data.time_unit)


def experimental_main(h5py, numpy, pyplot, arguments):
    """--plot-experimental-data: the data alone, from a data file (its argument, --data-file
    or the config's) or from a fit's fitted_data.h5 (an OUTPUT_DIR)."""
    global current_activity
    source = arguments.output_dir
    if (source is not None and arguments.config is None and
            source.lower().endswith((".yaml", ".yml"))):
        arguments.config, source = source, None  # a config given as the argument
    config = read_config(arguments.config) if arguments.config else {}
    if source is not None and os.path.isdir(source):
        folder = os.path.join(source, "nlsq")
        results = Results(h5py, numpy, folder, arguments.max_pixels, arguments.data_file)
        plot_dir = arguments.plot_dir or folder
        for angle in results.angles:
            angle["lag"] = results.lag_average(angle, numpy, with_fit=False)
        results.time_unit, results.layout = "s", "fitted_data.h5"
        results.window = (1, len(results.t_full) + 1)
        tail = results.title_tail()
        data = results
    else:
        path = source or arguments.data_file or config.get("data_file")
        if not path:
            fail(f"{arguments.config}: names no data file (experimental_data.data_folder_path "
                 f"and data_file_name, or file_path): give it as an argument")
        q_target = arguments.q if arguments.q is not None else config.get("q")
        dt = arguments.dt if arguments.dt is not None else config.get("dt")
        data = ExperimentalData(h5py, numpy, path, q_target, config.get("q_tolerance"),
                                (config.get("start_frame"), config.get("end_frame")), dt,
                                arguments.max_pixels)
        plot_dir = arguments.plot_dir or "exp_data"
        tail = title_tail(data.q, path)
        if not dt:
            tail += "    no dt: times in frames"
    current_activity = f"{plot_dir}: creating it"
    try:
        os.makedirs(plot_dir, exist_ok=True)
    except OSError as error:
        fail(f"{plot_dir}: cannot create the plot folder ({error.strerror})")
    jobs = [lambda: plot_experimental_heatmaps(numpy, pyplot, data, plot_dir, arguments.dpi,
                                               tail),
            lambda: plot_experimental_g2(numpy, pyplot, data, plot_dir, arguments.dpi, tail)]
    return run_jobs(jobs, worker_count(arguments.jobs, len(jobs)))


def profiles_of(results):
    """{name: (value, profile, interval_68, interval_95)} of parameters.json's physical
    parameters that have profile points (profile intervals: docs/results.md, Profile
    intervals), in file order; entries that are not well-formed are left out."""
    profiles = {}
    for name, entry in (results.parameters or {}).get("parameters", {}).items():
        profile = entry.get("profile") if isinstance(entry, dict) else None
        if not isinstance(profile, dict):
            continue
        values, rises = profile.get("values"), profile.get("delta_chi2")
        quadratic = number(profile.get("quadratic"))
        if (not isinstance(values, list) or not isinstance(rises, list)
                or len(values) != len(rises) or len(values) < 2 or not math.isfinite(quadratic)):
            continue
        points = [(number(v), number(r)) for v, r in zip(values, rises)]
        points = [(v, r) for v, r in points if math.isfinite(v) and math.isfinite(r)]
        value = number(entry.get("value"))
        if len(points) >= 2 and math.isfinite(value):
            profiles[name] = (value, points, quadratic, entry.get("interval_68"),
                              entry.get("interval_95"))
    return profiles


def plot_profiles(numpy, pyplot, results, plot_dir, dpi):
    """profiles.png (with profile intervals only): per parameter, chi2 less its minimum with the
    parameter held and the others refitted (the profile points), the quadratic of the curvature
    at the result beside it, and the 68 % and 95 % interval ends."""
    profiles = profiles_of(results)
    if not profiles:
        return
    path = drawing(os.path.join(plot_dir, "profiles.png"))
    columns = min(3, len(profiles))
    rows = (len(profiles) + columns - 1) // columns
    figure, axes = new_figure(pyplot, (4.2 * columns, 3.2 * rows), dpi, rows, columns,
                              spaces=(0.3, 0.5))
    for k, (name, (value, points, quadratic, interval68, interval95)) in enumerate(
            profiles.items()):
        axis = axes[k // columns, k % columns]
        x = numpy.array([v for v, _ in points])
        y = numpy.array([r for _, r in points])
        axis.plot(x, y, "o-", color="C0", label="profile")
        grid = numpy.linspace(x.min(), x.max(), 200)
        axis.plot(grid, quadratic * (grid - value) ** 2, "--", color="0.4",
                  label="quadratic (curvature)")
        for interval, colour, level in ((interval68, "C1", "68 %"), (interval95, "C3", "95 %")):
            if isinstance(interval, list) and len(interval) == 2:
                for end in interval:
                    end = number(end)
                    if math.isfinite(end):
                        axis.axvline(end, color=colour, linewidth=0.8)
                axis.plot([], [], color=colour, linewidth=0.8, label=f"{level} interval")
        axis.axvline(value, color="0.6", linewidth=0.6, linestyle=":")
        axis.set_xlabel(results.label(name))
        axis.set_ylabel(r"$\Delta\chi^2$")
        axis.set_ylim(bottom=0.0)
        if k == 0:
            axis.legend(fontsize=8)
    for k in range(len(profiles), rows * columns):
        axes[k // columns, k % columns].set_visible(False)
    figure.suptitle("profile likelihood: chi2 with each parameter held, the others refitted"
                    + title_tail(results.q, results.data_file))
    save(pyplot, figure, path)


def figure_jobs(numpy, pyplot, results, plot_dir, arguments):
    """The figures of a fit, one callable each, the slowest first."""
    dpi = arguments.dpi
    scales = heatmap_scales(numpy, results)
    jobs = []
    for angle in results.angles:
        jobs.append(lambda angle=angle: plot_heatmap(pyplot, results, angle, scales, plot_dir,
                                                     dpi))
    jobs.append(lambda: plot_fit_g2(numpy, pyplot, results, plot_dir, dpi))
    jobs.append(lambda: plot_convergence(numpy, pyplot, results, plot_dir, dpi))
    jobs.append(lambda: plot_residual_histogram(numpy, pyplot, results, plot_dir, dpi))
    jobs.append(lambda: plot_rates(numpy, pyplot, results, plot_dir, dpi))
    for angle in results.angles:
        jobs.append(lambda angle=angle: plot_cuts(numpy, pyplot, results, angle, plot_dir, dpi,
                                                  arguments.cuts))
    jobs.append(lambda: plot_correlations(numpy, pyplot, results, plot_dir, dpi))
    jobs.append(lambda: plot_profiles(numpy, pyplot, results, plot_dir, dpi))
    return jobs


# The figures being drawn by run_jobs' worker processes (inherited when they fork).
JOBS = []
# Set by run(): print the traceback of an unexpected failure.
DEBUG = False


def worker_count(requested, jobs):
    """--jobs N, or with 0 the CPUs this process may use (at most 8), at most one per job."""
    if requested > 0:
        return min(requested, jobs)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8, jobs))


def ignore_interrupts():
    """A worker leaves Ctrl-C to the parent, which stops the pool."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_job(index):
    """Draws JOBS[index] in a worker: (its stdout, its stderr, exit code), the messages of a
    failure being those run() prints in a single process."""
    import contextlib
    import io
    output, errors = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
        try:
            JOBS[index]()
        except SystemExit as stop:  # fail(): its message is in `errors`
            code = stop.code if isinstance(stop.code, int) else EXIT_INPUT
        except Exception as error:  # noqa: BLE001 - reported as run() reports it
            report_failure(error)
            code = EXIT_INPUT
    return output.getvalue(), errors.getvalue(), code


def run_jobs(jobs, workers):
    """Runs the figure jobs, in `workers` processes forked from this one when more than 1 (the
    results are read once, before), printing each job's lines in job order; returns 0, or the
    exit code of the first job that failed (the others are stopped)."""
    global JOBS
    timing = os.environ.get("HOMODYNE_PLOT_TIMES", "") == "1"
    if workers <= 1:
        for job in jobs:
            start, cpu = time.perf_counter(), time.process_time()
            job()
            if timing:
                print(f"{current_activity}: {time.perf_counter() - start:.3f} s, CPU "
                      f"{time.process_time() - cpu:.3f} s", file=sys.stderr)
        return 0
    import multiprocessing
    JOBS = jobs
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pool = multiprocessing.get_context("fork").Pool(workers, initializer=ignore_interrupts)
    except (ValueError, OSError):  # no fork here, or no semaphores (/dev/shm): one process
        return run_jobs(jobs, 1)
    with pool:
        for output, errors, code in pool.imap(run_job, range(len(jobs))):
            sys.stdout.write(output)
            sys.stdout.flush()
            sys.stderr.write(errors)
            sys.stderr.flush()
            if code:
                pool.terminate()
                return code
    return 0


def main(argv):
    global current_activity
    arguments = parse_arguments(argv)
    h5py, numpy, pyplot = import_modules()
    numpy.seterr(invalid="ignore", divide="ignore")
    if arguments.plot_experimental_data:
        return experimental_main(h5py, numpy, pyplot, arguments)
    if arguments.q_summary:
        return q_summary_main(numpy, pyplot, arguments)
    folder = os.path.join(arguments.output_dir, "nlsq")
    results = Results(h5py, numpy, folder, arguments.max_pixels, arguments.data_file)
    plot_dir = arguments.plot_dir or folder
    current_activity = f"{plot_dir}: creating it"
    try:
        os.makedirs(plot_dir, exist_ok=True)
    except OSError as error:
        fail(f"{plot_dir}: cannot create the plot folder ({error.strerror})")
    jobs = figure_jobs(numpy, pyplot, results, plot_dir, arguments)
    return run_jobs(jobs, worker_count(arguments.jobs, len(jobs)))


def weighted_slope_through_zero(numpy, x, y, sigma):
    """The least-squares slope of y = s x (weights 1 / sigma^2; unit weights where sigma is not
    a positive number)."""
    weights = numpy.where(numpy.isfinite(sigma) & (sigma > 0), 1.0 / numpy.square(sigma), 1.0)
    denominator = numpy.sum(weights * x * x)
    return float(numpy.sum(weights * x * y) / denominator) if denominator > 0 else math.nan


def q_summary_main(numpy, pyplot, arguments):
    """--q-summary: nlsq/q_dependence.png from nlsq/q_summary.json."""
    global current_activity
    folder = os.path.join(arguments.output_dir, "nlsq")
    path = os.path.join(folder, "q_summary.json")
    current_activity = f"{path}: reading it"
    if not os.path.isfile(path):
        fail(f"{path}: no such file (run the independent fits of several q rings first)")
    with open(path, encoding="utf-8") as handle:
        summary = json.load(handle)
    rings = [ring for ring in summary.get("rings", [])
             if ring.get("fitted") and ring.get("rates_at_reference_time")]
    if not rings:
        fail(f"{path}: no fitted ring with rates at the reference time")
    t_ref = summary.get("reference_time_s")
    q = numpy.array([ring["q"] for ring in rings], dtype=float)

    def rate(name):
        values, errors = [], []
        for ring in rings:
            entry = ring["rates_at_reference_time"].get(name) or {}
            value, error = entry.get("value"), entry.get("uncertainty")
            values.append(math.nan if value is None else value)
            errors.append(math.nan if error is None else error)
        return numpy.array(values, dtype=float), numpy.array(errors, dtype=float)

    panels = [("D", "q²  [Å⁻²]", "q² D(t_ref)  [1/s]", 2)]
    if any("gamma_dot" in ring["rates_at_reference_time"] for ring in rings):
        panels.append(("gamma_dot", "q  [Å⁻¹]", "q γ̇(t_ref)  [1/(Å s)]", 1))
    figure, axes = pyplot.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for axis, (name, x_label, y_label, power) in zip(axes[0], panels):
        values, errors = rate(name)
        x = q ** power
        y = values * q ** power
        y_errors = errors * q ** power
        axis.errorbar(x, y, yerr=numpy.where(numpy.isfinite(y_errors), y_errors, 0.0), fmt="o",
                      capsize=3, label="rings (independent fits)")
        slope = weighted_slope_through_zero(numpy, x, y, y_errors)
        if math.isfinite(slope):
            line_x = numpy.linspace(0.0, float(numpy.max(x)) * 1.05, 50)
            what = "pure diffusion" if name == "D" else "one shear rate"
            mean_name = "D" if name == "D" else "γ̇"
            axis.plot(line_x, slope * line_x, "--",
                      label=f"{what}: {mean_name} = {slope:.4g} (weighted mean)")
        axis.set_xlabel(x_label)
        axis.set_ylabel(y_label)
        axis.set_xlim(left=0.0)
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    time_text = f"t_ref = {t_ref:.4g} s" if isinstance(t_ref, (int, float)) else "t_ref unknown"
    figure.suptitle(f"{len(rings)} q rings, rates at {time_text}")
    figure.tight_layout()
    plot_dir = arguments.plot_dir or folder
    os.makedirs(plot_dir, exist_ok=True)
    output = os.path.join(plot_dir, "q_dependence.png")
    current_activity = f"{output}: writing it"
    figure.savefig(output, dpi=arguments.dpi)
    pyplot.close(figure)
    print(f"{PROGRAM}: wrote {output}")
    return 0


def report_failure(error):
    """Prints the one line of an unexpected failure (and the traceback with DEBUG)."""
    if DEBUG:
        traceback.print_exc()
    what = " ".join(str(error).split())
    what = what if len(what) <= 300 else what[:297] + "..."
    hint = "" if DEBUG else " (--debug or HOMODYNE_PLOT_DEBUG=1 prints the traceback)"
    print(f"{PROGRAM}: error: {current_activity}: {type(error).__name__}: {what}{hint}",
          file=sys.stderr)


def run(argv):
    """main(argv) with every failure one line: the messages of fail(), and any other exception
    as `homodyne-plot: error: FILE: drawing it: TYPE: WHAT` (exit 1), its traceback only with
    --debug or HOMODYNE_PLOT_DEBUG=1 (a bug stays diagnosable)."""
    global DEBUG
    DEBUG = "--debug" in argv or os.environ.get("HOMODYNE_PLOT_DEBUG", "") == "1"
    try:
        return main(argv)
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted while {current_activity}", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place that turns any failure into a line
        report_failure(error)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
