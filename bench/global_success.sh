#!/usr/bin/env bash
# Success-rate benchmark of the global phase: how often a laminar-flow fit from untuned starts
# reaches the optimum, per method. Simulates --sets seeded laminar-flow data sets (varied truths,
# 2-8 angles, per-angle contrast/offset, noise 0.01, 150-300 frames; dt, q and the gap chosen per
# set so that the shear phase (2-12 rad) and the diffusion decay (0.5-3) are both visible), fits
# each from the truth (--global-search off: the reference optimum), then from the bound midpoints
# and from --starts random starts with each method (single = --global-search off
# --no-variable-projection, vp = --global-search off, multi-start, cmaes, default = no flag).
# Success: chi2 <= reference + 2 and every physical parameter within 4 reference uncertainties.
# Prints the command line, the machine, one line per fit, then the tables (per method: success,
# wall time, failures by basin; per data set: truth and geometry). Each fit has a timeout.
#
# Usage: bench/global_success.sh [--bin DIR] [--sets N] [--starts K] [--methods a,b]
#          [--frames MIN:MAX] [--angles MIN:MAX] [--seed S] [--timeout SEC] [--threads N]
#          [--fix-gamma-offset] [--markdown FILE] [--work DIR]   (--help for all options)
#   e.g. bench/global_success.sh --markdown /tmp/global_success.md  (20 sets x 6 starts x 5 methods)
#        GS_SETS=3 GS_STARTS=1 GS_METHODS=vp,default bench/global_success.sh   (a quick run)
# --fix-gamma-offset holds gamma_dot_t_offset at 0 (its truth) in every fit: with it free and beta
# near 0, gamma_dot_t0, beta and gamma_dot_t_offset form a flat valley of one chi2, and fits that
# end elsewhere on it count as failures ("same chi2, parameters off"; the table also counts fits
# that reached the optimum's chi2 whatever their parameters).
# Environment defaults: HOMODYNE_BIN (default build/src/cli), GS_SETS, GS_STARTS, GS_METHODS,
# GS_FRAMES, GS_ANGLES, GS_SEED, GS_TIMEOUT, GS_FIX_GAMMA_OFFSET, GS_MARKDOWN, BENCH_DIR (scratch
# folder: $BENCH_DIR/global_success, default /tmp/homodyne_bench/global_success).
# Python 3 standard library only (bench/global_success.py).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
command_line="$0"
for var in HOMODYNE_BIN GS_SETS GS_STARTS GS_METHODS GS_FRAMES GS_ANGLES GS_SEED GS_TIMEOUT \
           GS_FIX_GAMMA_OFFSET GS_MARKDOWN BENCH_DIR; do
  if [ -n "${!var:-}" ]; then command_line="$var=$(printf %q "${!var}") $command_line"; fi
done
for arg in "$@"; do command_line+=" $(printf %q "$arg")"; done
exec python3 "$repo/bench/global_success.py" --command-line "$command_line" "$@"
