#!/usr/bin/env bash
# Checkpoint overhead and fast mode, end to end (docs/performance.md, Checkpoint overhead and fast
# mode). Times the fit of one simulated data set with checkpoints off, saved every 5/10/20/50 batches (with the default 5 s floor between saves
# and with --checkpoint-min-interval 0), and with --fast-mode, interleaved: round r runs every
# variant once, R rounds, so drift and other load on the machine fall on all variants alike. The
# order within a round is shuffled (the same shuffles on every call), so no variant always follows
# the same one.
# Usage: bench/checkpoint_overhead.sh ANGLES FRAMES COMPRESSION [homodyne flags...]
#   e.g. bench/checkpoint_overhead.sh 3 2001 lzf                            (chunked, 12e6 points)
#        R=3 VARIANTS="off f10 f10i0 fast" \
#          bench/checkpoint_overhead.sh 5 6325 none --strategy streaming --memory-limit-gb 1
# Environment: R rounds [5]; VARIANTS (space separated, from the list below) [all];
#   BENCH_DIR [/tmp/homodyne_bench_ck]; KEEP_OUTPUT=1 keeps fitted_data.h5 (deleted by default:
#   4.9 GB for 2e8 points).
# Variants: off      optimization.streaming.enable_checkpoints: false
#           default  no flag: checkpoints every 10 batches, at least 5 s apart; full validation
#           fN       --checkpoint-frequency N (N = 5, 10, 20, 50), default min interval (5 s)
#           fNi0     --checkpoint-frequency N --checkpoint-min-interval 0
#           fast     --fast-mode, otherwise the default
# Per fit: optimisation time (timings_s.optimization of nlsq/analysis_results_nlsq.json, i.e.
# without loading and without writing results), batch_statistics.checkpoints_saved, and the time
# spent in the saves themselves (sum of the -v log's "checkpoint ... saved in X ms" lines: write,
# fsync, rename, prune; the only debug message of the program). Every fit
# has its own --output-dir and --checkpoint-dir and runs with --no-resume; the results files are
# removed and `sync` run after each fit, so the next one does not share the disk with writeback.
# Prints a markdown table: median, min-max, overhead of the medians and of the minima against
# `off`, and the median (min-max) of the per-round overheads (each variant against `off` of the
# same round); the minimum is the run least disturbed by other load. Also records the 1-minute
# load average before each fit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/build/src/cli"
angles=${1:?ANGLES}
frames=${2:?FRAMES}
compression=${3:?COMPRESSION}
shift 3
rounds=${R:-5}
variants=${VARIANTS:-"off default f5 f10 f20 f50 f5i0 f10i0 f20i0 f50i0 fast"}
export BENCH_DIR=${BENCH_DIR:-/tmp/homodyne_bench_ck}
work=$BENCH_DIR
name="fit_${angles}x${frames}_${compression}"

flags_of() {
  case "$1" in
    off | default) echo "" ;;
    f[0-9]*i0) local f=${1#f}; echo "--checkpoint-frequency ${f%i0} --checkpoint-min-interval 0" ;;
    f[0-9]*) echo "--checkpoint-frequency ${1#f}" ;;
    fast) echo "--fast-mode" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
for v in $variants; do flags_of "$v" > /dev/null; done

# Simulates the file (kept and reused) and writes $name.yaml; this first fit also warms the page
# cache and is not counted.
echo "== warm-up: bench/fit_end_to_end.sh $angles $frames $compression $*"
"$repo/bench/fit_end_to_end.sh" "$angles" "$frames" "$compression" "$@"
rm -f "$work/out_$name/nlsq/fitted_data.h5"
cd "$work"
{
  cat "$name.yaml"
  printf 'optimization:\n  streaming:\n    enable_checkpoints: false\n'
} > "${name}_nockpt.yaml"

runs="$work/ck_$name"
rm -rf "$runs"
mkdir -p "$runs"
table="$runs/runs.tsv"
printf 'round\tvariant\toptimization_s\tcheckpoints_saved\tbatches\tpasses\tchi2\tload1\tsave_s\n' > "$table"
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo "== R=$rounds, variants: $variants; flags: $*"
echo "== load before: $(uptime)"
sync
for ((r = 1; r <= rounds; r++)); do
  # shellcheck disable=SC2086
  for v in $(printf '%s\n' $variants | shuf --random-source=<(yes "$r")); do
    config="$name.yaml"
    [ "$v" = off ] && config="${name}_nockpt.yaml"
    out="$runs/out_${v}_$r"
    ckdir="$runs/checkpoints_${v}_$r"
    load1=$(cut -d' ' -f1 /proc/loadavg)  # 1-minute load average before the fit
    # shellcheck disable=SC2046
    if ! "$bin/homodyne" --config "$config" --output-dir "$out" --checkpoint-dir "$ckdir" \
        --no-resume -v $(flags_of "$v") "$@" > "$out.log" 2>&1; then
      echo "fit failed: round $r variant $v (log $out.log)" >&2
      tail -5 "$out.log" >&2
      exit 1
    fi
    python3 - "$out/nlsq/analysis_results_nlsq.json" "$r" "$v" "$load1" "$out.log" >> "$table" <<'PY'
import json, re, sys
res = json.load(open(sys.argv[1]))
save_ms = [float(m) for m in re.findall(r"checkpoint \S+ \(\d+ bytes\) saved in ([0-9.]+) ms",
                                        open(sys.argv[5]).read())]
b = res["batch_statistics"]
chi2 = res["fit_quality"]["chi_squared"]
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{res['timings_s']['optimization']:.4f}\t"
      f"{b['checkpoints_saved']}\t{b['batches']}\t{res['passes']}\t{chi2!r}\t{sys.argv[4]}\t{sum(save_ms) / 1e3:.4f}")
PY
    tail -1 "$table" | awk -F'\t' '{printf "round %s %-7s optimisation %s s, %s checkpoints in %s s (load before %s)\n", $1, $2, $3, $4, $9, $8}'
    [ "${KEEP_OUTPUT:-0}" = 1 ] || rm -f "$out/nlsq/fitted_data.h5"
    rm -rf "$ckdir"
    sync
  done
done
echo "== load after: $(uptime)"
echo "== per-fit numbers: $table"

python3 - "$table" "$variants" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
variants = sys.argv[2].split()
t = {}
for row in rows:
    t.setdefault(row["variant"], {})[int(row["round"])] = row
def flags(v):
    if v == "off": return "enable_checkpoints: false"
    if v == "default": return "default (no flag)"
    if v == "fast": return "--fast-mode (otherwise default)"
    if v.endswith("i0"): return f"--checkpoint-frequency {v[1:-2]} --checkpoint-min-interval 0"
    return f"--checkpoint-frequency {v[1:]}"
def times(v): return [float(r["optimization_s"]) for r in t[v].values()]
def pct(x): return f"{100 * x:+.1f}%"
base = "off" if "off" in t else None
print()
print("| variant | checkpoints saved | time in saves, median | optimisation, median | min-max "
      "| overhead (medians) | overhead (minima) | per-round overhead, median (min-max) |")
print("|---|---|---|---|---|---|---|---|")
for v in variants:
    ts = times(v)
    saved = sorted({int(r["checkpoints_saved"]) for r in t[v].values()})
    saved_text = str(saved[0]) if len(saved) == 1 else f"{saved[0]}-{saved[-1]}"
    med = statistics.median(ts)
    save = statistics.median(float(r["save_s"]) for r in t[v].values())
    save_text = f"{save:.3f} s" + (f" ({pct(save / statistics.median(times(base)))[1:]} of off)"
                                   if base and save > 0 else "")
    over = over_min = paired = "-"
    if base and v != base:
        over = pct(med / statistics.median(times(base)) - 1)
        over_min = pct(min(ts) / min(times(base)) - 1)
        ratios = [float(t[v][r]["optimization_s"]) / float(t[base][r]["optimization_s"]) - 1
                  for r in t[v] if r in t[base]]
        paired = f"{pct(statistics.median(ratios))} ({pct(min(ratios))} to {pct(max(ratios))})"
    print(f"| {flags(v)} | {saved_text} | {save_text} | {med:.3f} s | {min(ts):.3f}-{max(ts):.3f} s "
          f"| {over} | {over_min} | {paired} |")
if "fast" in t and "default" in t:
    ratios = [float(t["fast"][r]["optimization_s"]) / float(t["default"][r]["optimization_s"]) - 1
              for r in t["fast"] if r in t["default"]]
    print(f"\nfast mode vs default, per round: median {pct(statistics.median(ratios))}, "
          f"min {pct(min(ratios))}, max {pct(max(ratios))}; medians "
          f"{pct(statistics.median(times('fast')) / statistics.median(times('default')) - 1)}, "
          f"minima {pct(min(times('fast')) / min(times('default')) - 1)}")
loads = [float(r["load1"]) for r in rows]
print(f"\n1-minute load average before the fits: median {statistics.median(loads):.2f}, "
      f"min {min(loads):.2f}, max {max(loads):.2f}")
passes = {(r["passes"], r["batches"], r["chi2"]) for r in rows}
print(f"\nall fits: passes, batches, chi2 = {sorted(passes)}"
      + ("  (identical)" if len(passes) == 1 else "  (NOT identical)"))
PY
