// `homodyne --save-plots`: heat maps of the fit (docs/design.md section 8), drawn by
// scripts/homodyne_plot.py with matplotlib. Plotting stays outside the C++ program: it needs no
// graphics library, and a missing Python only costs the plots, never the fit.
#pragma once

#include <string>

namespace homodyne::cli {

// Writes one PNG per angle, <output_dir>/nlsq/c2_heatmaps_phi_{phi:.1f}deg.png (data | fit |
// residual), from <output_dir>/nlsq/fitted_data.h5, which must already be written.
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

}  // namespace homodyne::cli
