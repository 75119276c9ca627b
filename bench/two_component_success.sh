#!/usr/bin/env bash
# Success-rate benchmark of the two_component mode: how often the default fit (bound-midpoint
# starts, global phase auto) recovers a simulated truth. Simulates --sets seeded data sets (truths
# drawn over physically sensible ranges: D0_ref 1e2..1e4 and D0_sample 3e3..1e5 log-uniform,
# alpha_* -0.5..0.3, D_offset_* 0 or up to 1 % of D0, v0 1..100 log-uniform, v_beta 0.2..1.2,
# v_offset -2..2, f0 0.1..0.5, f1 -0.02..0.02, f2 0..1, f3 0.05..0.4, phi0_het -5..5; 3 angles
# 0/45/90 or 4 with 135; 300-500 frames; dt 0.1 s, q 0.0054 1/A, contrast 0.3, noise 0.01), fits
# each from the truth (--global-search off: the true optimum's chi2) and with the default config.
# Success: every physical parameter within 4 of the fit's standard errors (SE) of the truth, or
# excused: named by the fit as undetermined ("the data do not determine ...") or in a pair it
# does not separate with |correlation| >= 0.99. Also counted: strict (no excuses) and optimum
# (chi2 <= the truth-started fit's + 1), and where each fit ended (optimum, near optimum: chi2
# within 25, flow phase off, label swap: ref and sample exchanged, other basin). Prints the
# command line, the machine, per set the truth and its flow phase, both fits, the parameters
# beyond 4 SE (by how many, and the truth-started fit's), then the summary and a table.
#
# Usage: bench/two_component_success.sh [--bin DIR] [--sets N] [--frames MIN:MAX] [--angles 3|4]
#          [--seed S] [--timeout SEC] [--threads N] [--max-iterations N] [--markdown FILE]
#          [--work DIR]   (--help for all options)
#   e.g. bench/two_component_success.sh --markdown /tmp/two_component_success.md   (20 sets)
#        TC_SETS=2 TC_FRAMES=100 bench/two_component_success.sh   (a quick run)
# Environment defaults: HOMODYNE_BIN (default build/src/cli), TC_SETS, TC_FRAMES, TC_ANGLES,
# TC_SEED, TC_TIMEOUT, TC_MARKDOWN, BENCH_DIR (scratch folder: $BENCH_DIR/two_component_success,
# default /tmp/homodyne_bench/two_component_success).
# Python 3 standard library only (bench/two_component_success.py).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
command_line="$0"
for var in HOMODYNE_BIN TC_SETS TC_FRAMES TC_ANGLES TC_SEED TC_TIMEOUT TC_MARKDOWN BENCH_DIR; do
  if [ -n "${!var:-}" ]; then command_line="$var=$(printf %q "${!var}") $command_line"; fi
done
for arg in "$@"; do command_line+=" $(printf %q "$arg")"; done
exec python3 "$repo/bench/two_component_success.py" --command-line "$command_line" "$@"
