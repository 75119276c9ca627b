#!/usr/bin/env python3
"""Heat maps of a homodyne fit: one PNG per angle with data | fit | residual over (t1, t2).

Usage: homodyne_plot.py OUTPUT_DIR [--plot-dir DIR] [--dpi N] [--max-pixels N]

Reads OUTPUT_DIR/nlsq/fitted_data.h5 as `homodyne` writes it (docs/design.md section 8):
  /t (N) fitted times [s], /phi, /contrast, /offset (n_angles), /q (scalar),
  /angles/phi_KKK/{data, fit, residuals} (N x N, element [i, j] <-> (t1 = t_i, t2 = t_j)),
  each group with attributes phi, contrast, offset.
Writes OUTPUT_DIR/nlsq/c2_heatmaps_phi_{phi:.1f}deg.png, the reference's name and place
(docs/results.md). Colour limits follow the reference: 1st/99th
percentiles per panel (fallback 1.0-1.5); the residual panel is symmetric about 0. Matrices larger
than --max-pixels per side are read with a stride, so memory and time stay small for any N.

Exit codes: 0 plots written, 1 bad input (missing or invalid file), 2 usage, 3 a Python module
(h5py, numpy, matplotlib) is missing.
"""

import argparse
import math
import os
import sys

EXIT_INPUT = 1
EXIT_MISSING_MODULE = 3


def fail(message, code=EXIT_INPUT):
    print(f"homodyne_plot.py: error: {message}", file=sys.stderr)
    sys.exit(code)


def import_modules():
    """Imports h5py, numpy and matplotlib (Agg backend); exits 3 naming what is missing."""
    try:
        import h5py
        import numpy
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError as error:
        fail(f"{error} (install the Python packages h5py, numpy and matplotlib, e.g. "
             f"apt-get install python3-h5py python3-matplotlib)", EXIT_MISSING_MODULE)
    return h5py, numpy, pyplot


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        description="Plot data, fit and residual heat maps of a homodyne fit (one PNG per angle).")
    parser.add_argument("output_dir",
                        help="the --output-dir of the fit (holds nlsq/fitted_data.h5)")
    parser.add_argument("--plot-dir", help="folder for the PNG files (default OUTPUT_DIR/nlsq)")
    parser.add_argument("--dpi", type=int, default=150, help="resolution (default 150)")
    parser.add_argument("--max-pixels", type=int, default=1000,
                        help="largest matrix side plotted; larger ones are strided (default 1000)")
    arguments = parser.parse_args(argv)
    if arguments.dpi <= 0:
        parser.error(f"--dpi {arguments.dpi}: must be > 0")
    if arguments.max_pixels < 2:
        parser.error(f"--max-pixels {arguments.max_pixels}: must be >= 2")
    return arguments


def read_angles(h5py, path, max_pixels):
    """Returns (t, [angle dict]) read from fitted_data.h5, each matrix strided to <= max_pixels."""
    if not os.path.isfile(path):
        fail(f"{path}: not found (run homodyne --config ... --output-dir "
             f"{os.path.dirname(os.path.dirname(path)) or '.'} first)")
    try:
        with h5py.File(path, "r") as file:
            t = file["t"][()]
            stride = max(1, math.ceil(len(t) / max_pixels))
            angles = []
            for name in sorted(file["angles"].keys()):
                group = file["angles"][name]
                angle = {key: float(group.attrs[key]) for key in ("phi", "contrast", "offset")}
                for key in ("data", "fit", "residuals"):
                    angle[key] = group[key][::stride, ::stride] if len(t) else None
                angles.append(angle)
    except OSError as error:
        fail(f"{path}: cannot read it as HDF5 ({error})")
    except KeyError as error:
        fail(f"{path}: not a homodyne fitted_data.h5 (missing {error})")
    if len(t) == 0 or not angles:
        fail(f"{path}: holds no angles or no times to plot")
    return t[::stride], angles


def colour_limits(numpy, values, fallback):
    """1st/99th percentiles of the finite values; `fallback` when there are none or they agree."""
    finite = values[numpy.isfinite(values)]
    if finite.size == 0:
        return fallback
    low, high = numpy.percentile(finite, [1.0, 99.0])
    return (low, high) if high > low else fallback


def plot_angle(numpy, pyplot, t, angle, path, dpi):
    """Writes one PNG with the data, fit and residual panels of one angle."""
    extent = (t[0], t[-1], t[0], t[-1])
    figure, axes = pyplot.subplots(1, 3, figsize=(16, 5), constrained_layout=True)
    data_limits = colour_limits(numpy, angle["data"], (1.0, 1.5))
    residual_bound = numpy.nanpercentile(numpy.abs(angle["residuals"]), 99.0)
    if not numpy.isfinite(residual_bound) or residual_bound <= 0:
        residual_bound = 1e-3
    panels = (("data", "c2 data", data_limits, "viridis"),
              ("fit", "c2 fit", data_limits, "viridis"),
              ("residuals", "residual (data - fit)", (-residual_bound, residual_bound), "RdBu_r"))
    for axis, (key, title, limits, colour_map) in zip(axes, panels):
        # Element [i, j] is (t1 = t_i, t2 = t_j): transpose so t1 runs along x.
        image = axis.imshow(angle[key].T, origin="lower", extent=extent, aspect="equal",
                            cmap=colour_map, vmin=limits[0], vmax=limits[1],
                            interpolation="nearest")
        axis.set_title(title)
        axis.set_xlabel("t1 [s]")
        axis.set_ylabel("t2 [s]")
        figure.colorbar(image, ax=axis, shrink=0.85)
    figure.suptitle(f"phi = {angle['phi']:.1f} deg    contrast = {angle['contrast']:.4f}    "
                    f"offset = {angle['offset']:.4f}")
    temporary = path + ".partial.png"
    figure.savefig(temporary, dpi=dpi)
    pyplot.close(figure)
    os.replace(temporary, path)


def main(argv):
    arguments = parse_arguments(argv)
    h5py, numpy, pyplot = import_modules()
    path = os.path.join(arguments.output_dir, "nlsq", "fitted_data.h5")
    t, angles = read_angles(h5py, path, arguments.max_pixels)
    plot_dir = arguments.plot_dir or os.path.join(arguments.output_dir, "nlsq")
    try:
        os.makedirs(plot_dir, exist_ok=True)
    except OSError as error:
        fail(f"{plot_dir}: cannot create the plot folder ({error.strerror})")
    for angle in angles:
        png = os.path.join(plot_dir, f"c2_heatmaps_phi_{angle['phi']:.1f}deg.png")
        try:
            plot_angle(numpy, pyplot, t, angle, png, arguments.dpi)
        except OSError as error:
            fail(f"{png}: cannot write the plot ({error})")
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
