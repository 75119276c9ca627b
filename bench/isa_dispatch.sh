#!/usr/bin/env bash
# Pass throughput of a portable build (the pass kernel's instruction-set level chosen at run time,
# docs/design.md section 2b) against a -march=native build: the laminar_flow full pass
# (Accumulate) and cost pass (Cost) of bench/objective_benchmark on 1 and 2 threads.
# The programs run in turn, ROUNDS times each, and the best run of each counts: on a shared
# machine other work only ever slows a run down. Rates are of wall time; the 1-thread rows are
# also given per CPU second of the thread that does the work ("(CPU time)"), which time slices
# lost to other processes do not change. docs/performance.md (Instruction-set levels)
# holds the numbers this printed.
#
# Usage: bench/isa_dispatch.sh PORTABLE_BENCH NATIVE_BENCH [ROUNDS] [LEVEL...]
#   PORTABLE_BENCH  objective_benchmark of the portable build (HOMODYNE_NATIVE_ARCH=OFF)
#   NATIVE_BENCH    objective_benchmark of a -march=native build (HOMODYNE_NATIVE_ARCH=ON, or
#                   a build from before the levels, when it was the default)
#   ROUNDS          turns per program (default 5)
#   LEVEL...        also the portable build forced to these levels (HOMODYNE_ISA: baseline avx2 ...)
# Example: bench/isa_dispatch.sh build/bench/objective_benchmark ../main/build/bench/objective_benchmark 5 avx2
set -euo pipefail
portable=$1
native=$2
rounds=${3:-5}
shift $(($# < 3 ? $# : 3))
extra_levels=("$@")
filter='BM_(Accumulate|Cost)Laminar/[12]/'
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME PROGRAM [HOMODYNE_ISA]: one run of the filtered benchmarks, JSON into $out/NAME.ROUND.
run() {
  local name=$1 program=$2 level=${3:-}
  env ${level:+HOMODYNE_ISA=$level} "$program" --benchmark_filter="$filter" \
    --benchmark_min_time=0.5 --benchmark_out="$out/$name.$round.json" \
    --benchmark_out_format=json > /dev/null 2>&1
}

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= rounds; ++round)); do
  run portable "$portable"
  run native "$native"
  for level in "${extra_levels[@]}"; do run "portable-$level" "$portable" "$level"; done
  echo "round $round of $rounds done (load $(cut -d' ' -f1 /proc/loadavg))"
done

python3 - "$out" native portable "${extra_levels[@]/#/portable-}" <<'PY'
import collections, glob, json, os, sys
folder, names = sys.argv[1], sys.argv[2:]
# Best points/s of wall time, and for one thread also of the thread's CPU time (the work runs on
# the calling thread, so time slices lost to other processes do not count).
best = collections.defaultdict(float)
context = {}
for name in names:
    for path in glob.glob(os.path.join(folder, name + ".*.json")):
        report = json.load(open(path))
        context.setdefault(name, report["context"].get("pass_kernel", "(not named: a build before the levels)"))
        for entry in report["benchmarks"]:
            benchmark = entry["name"].replace("/real_time", "")
            best[(name, benchmark)] = max(best[(name, benchmark)], entry["items_per_second"])
            if benchmark.endswith("/1"):
                cpu_rate = entry["items_per_second"] * entry["real_time"] / entry["cpu_time"]
                key = (name, benchmark + " (CPU time)")
                best[key] = max(best[key], cpu_rate)
for name in names:
    print(f"{name}: {context.get(name)}")
benchmarks = sorted({b for (_, b) in best})
print("| benchmark | " + " | ".join(f"{n} (M points/s)" for n in names) + " | " +
      " | ".join(f"{n} / native" for n in names[1:]) + " |")
print("|" + "---|" * (2 * len(names)))
for b in benchmarks:
    values = [best[(n, b)] for n in names]
    ratios = [f"{v / values[0]:.3f}" for v in values[1:]]
    print(f"| {b} | " + " | ".join(f"{v / 1e6:.1f}" for v in values) + " | " + " | ".join(ratios) + " |")
PY
