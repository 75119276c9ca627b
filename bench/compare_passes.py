#!/usr/bin/env python3
"""Two builds' objective_benchmark passes, process by process in turn (A, B, A, B, ...), so both
see the same machine load; prints each pass's wall milliseconds, minimum / median over all runs,
and B's speed-up at the minimum and the median.

Usage:
  bench/compare_passes.py BENCH_A BENCH_B [--rounds R] [--repetitions K] [--filter REGEX]
  e.g. bench/compare_passes.py /work/base/build/bench/objective_benchmark \
         build/bench/objective_benchmark --rounds 5

BENCH_*: objective_benchmark executables. Each round runs each binary once with
--benchmark_repetitions=K (default 3): R x K runs of every pass per binary. One binary (BENCH_B
given as -) measures a single build. The pass timings within one process are less spread than
across processes (address-space layout, the page cache), hence the rounds:
docs/history/performance-notebook.md, "Tiles of 128 points" (the noise).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_FILTER = r"^BM_(Accumulate|Cost|ScalingGrams)(Laminar|Static|TwoComponent)/[12]/"


def run_once(binary, repetitions, pattern):
    """The wall milliseconds of every run of every pass of one process: {name: [ms, ...]}."""
    out = subprocess.run(
        [binary, f"--benchmark_filter={pattern}", f"--benchmark_repetitions={repetitions}",
         "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    times = {}
    for record in json.loads(out)["benchmarks"]:
        if record.get("run_type") != "iteration":
            continue
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[record["time_unit"]]
        name = record["run_name"].replace("/real_time", "")
        times.setdefault(name, []).append(record["real_time"] * unit)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bench_a")
    parser.add_argument("bench_b")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--filter", default=DEFAULT_FILTER)
    args = parser.parse_args()
    binaries = [("a", args.bench_a)] + ([] if args.bench_b == "-" else [("b", args.bench_b)])
    for label, binary in binaries:
        if not os.access(binary, os.X_OK):
            sys.exit(f"compare_passes: {binary}: not an executable (build {label})")
    print(f"machine: {os.cpu_count()} cores; rounds {args.rounds} x repetitions "
          f"{args.repetitions}; filter {args.filter}")
    for label, binary in binaries:
        print(f"build {label}: {os.path.abspath(binary)}")
    times = {label: {} for label, _ in binaries}
    start = time.strftime("%H:%M:%S", time.gmtime())
    loads = []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for label, binary in binaries:
            for name, values in run_once(binary, args.repetitions, args.filter).items():
                times[label].setdefault(name, []).extend(values)
    end = time.strftime("%H:%M:%S", time.gmtime())
    print(f"{start} to {end} UTC, load average {min(loads):.1f} to {max(loads):.1f}")
    names = list(times["a"])
    if len(binaries) == 1:
        print("| pass | wall ms, min / median |")
        print("|---|---|")
        for name in names:
            a = times["a"][name]
            print(f"| {name} | {min(a):.2f} / {statistics.median(a):.2f} |")
        return
    print("| pass | a: min / median | b: min / median | a / b at the min / median |")
    print("|---|---|---|---|")
    for name in names:
        a, b = times["a"][name], times["b"].get(name)
        if not b:
            continue
        print(f"| {name} | {min(a):.2f} / {statistics.median(a):.2f} | {min(b):.2f} / "
              f"{statistics.median(b):.2f} | {min(a) / min(b):.2f}x / "
              f"{statistics.median(a) / statistics.median(b):.2f}x |")


if __name__ == "__main__":
    main()
