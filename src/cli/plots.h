// `homodyne --save-plots`: the figures of the fit (docs/results.md, Figures), drawn by
// scripts/homodyne_plot.py with matplotlib (the program homodyne-plot runs the same script).
// Plotting stays outside the C++ program: it needs no graphics library, and a missing Python only
// costs the plots, never the fit.
#pragma once

#include <string>

namespace homodyne::cli {

// Writes the PNG files of docs/results.md, Figures, into <output_dir>/nlsq/ (per angle
// c2_heatmaps_phi_{phi:.1f}deg.png and c2_cuts_phi_{phi:.1f}deg.png; residual_histogram.png,
// convergence.png, parameter_correlations.png) from the result files there, which must already be
// written.
//
// The script is the first that exists of: $HOMODYNE_PLOT_SCRIPT; homodyne_plot.py next to the
// executable or in ../share/homodyne/ (installed); the source tree's scripts/homodyne_plot.py
// (compiled in). The interpreter is $HOMODYNE_PYTHON if set, else /usr/bin/python3, then python3
// on PATH; the next one is tried when one is missing or lacks h5py/numpy/matplotlib. The script's
// output goes to stderr, so stdout keeps the fit summary.
//
// Never throws and never ends the program: any failure (no script, no Python, missing module,
// script error) is logged as a warning and false is returned. True when every PNG was written.
bool SavePlots(const std::string& output_dir);

// The figure of several q rings fitted independently (docs/results.md, Several q rings):
// <output_dir>/nlsq/q_dependence.png from nlsq/q_summary.json (homodyne_plot.py --q-summary).
// Never throws; false (with a warning) when it could not be drawn.
bool SaveRingSummaryPlot(const std::string& output_dir);

}  // namespace homodyne::cli
