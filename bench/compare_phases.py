#!/usr/bin/env python3
"""Builds of homodyne on the same fit, runs in turn (A, B, ..., A, B, ...), timing each run by
phase: start, load, fit, error bars, writing, and the CPU seconds of the whole run and of its
writing. The same way for every build, including builds without the performance log's phase line:
load, fit and error bars are `timings_s` of analysis_results_nlsq.json (load, total - load -
uncertainty, uncertainty; 0 where a build has no uncertainty), writing is the time from the fit's
summary line (the one with "reduced chi2" and "points,") to the process's exit (the result files,
their fsync and the exit, as bench/compare_writing.py), start is the rest of the run's wall. CPU:
user + system of the process (getrusage), of its load (the process's CPU, from /proc, between the
log lines "strategy ..." and "per-angle scaling ...", which enclose the load) and of its writing
(from the summary line on). Prints every run, then per build the minimum and median of each column, and whether
the last runs' fitted_data.h5 (h5diff) and parameters.json (timestamps aside) agree between the
builds.

Usage:
  bench/compare_phases.py CONFIG RUNS BIN_DIR [BIN_DIR ...] [-- homodyne flags...]
  e.g. bench/compare_phases.py /tmp/homodyne_bench/fit_3x2001_lzf.yaml 5 /tmp/before build/src/cli

BIN_DIR: folders holding homodyne. CONFIG: a fit config (bench/fit_end_to_end.sh writes them next
to their data). Scratch: $BENCH_DIR (default /tmp/homodyne_bench)/compare_phases.
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time


def process_cpu(pid):
    """User + system seconds of process `pid` so far (/proc, clock ticks)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_run(binary, config, output_dir, flags):
    """The phases and CPU seconds of one run of `binary` (a dict)."""
    shutil.rmtree(output_dir, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    summary = None
    cpu_at = {}
    with subprocess.Popen([binary, "--config", config, "--output-dir", output_dir, *flags],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=os.path.dirname(config)) as process:
        for line in process.stdout:
            if "strategy" not in cpu_at and "] strategy " in line:
                cpu_at["strategy"] = process_cpu(process.pid)
            if "scaling" not in cpu_at and "] per-angle scaling " in line:
                cpu_at["scaling"] = process_cpu(process.pid)
            if summary is None and "reduced chi2" in line and "points," in line:
                summary = time.monotonic()
                cpu_at["summary"] = process_cpu(process.pid)
    end = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        sys.exit(f"{binary} exited {process.returncode}")
    if summary is None:
        sys.exit(f"{binary} printed no fit summary line")
    with open(os.path.join(output_dir, "nlsq", "analysis_results_nlsq.json")) as results:
        timings = json.load(results)["timings_s"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    whole = end - start
    writing = end - summary
    uncertainty = timings.get("uncertainty", 0.0)
    return {"whole": whole, "start": whole - timings["total"] - writing, "load": timings["load"],
            "fit": timings["total"] - timings["load"] - uncertainty, "error bars": uncertainty,
            "writing": writing, "cpu": cpu,
            "cpu load": cpu_at.get("scaling", float("nan")) - cpu_at.get("strategy", float("nan")),
            "cpu writing": cpu - cpu_at["summary"]}


def parameters_without_timestamp(path):
    with open(path) as file:
        return [line for line in file if '"timestamp"' not in line]


def main():
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1:] if "--" in argv else []  # homodyne's, after --
    args = argv[:argv.index("--")] if "--" in argv else argv
    if len(args) < 3:
        sys.exit(__doc__)
    config = os.path.abspath(args[0])
    runs = int(args[1])
    binaries = [os.path.join(os.path.abspath(folder), "homodyne") for folder in args[2:]]
    work = os.path.join(os.environ.get("BENCH_DIR", "/tmp/homodyne_bench"), "compare_phases")
    os.makedirs(work, exist_ok=True)
    print(f"command: {' '.join(sys.argv)}")
    print(f"machine: {os.cpu_count()} cores; started {time.strftime('%H:%M:%S', time.gmtime())} UTC,"
          f" load {os.getloadavg()[0]:.2f}")
    times = [[] for _ in binaries]
    for run in range(1, runs + 1):
        for index, binary in enumerate(binaries):
            row = timed_run(binary, config, os.path.join(work, str(index)), flags)
            times[index].append(row)
            print(f"run {run} {binary}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()),
                  flush=True)
    print(f"ended {time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.2f}")
    for index, binary in enumerate(binaries):
        print(f"{binary}: min / median of {runs} runs, seconds")
        for key in times[index][0]:
            values = [row[key] for row in times[index]]
            print(f"  {key:12s} {min(values):7.3f} {statistics.median(values):7.3f}")
    for index in range(1, len(binaries)):
        files = [os.path.join(work, str(i), "nlsq", "fitted_data.h5") for i in (0, index)]
        if shutil.which("h5diff"):
            same = subprocess.run(["h5diff", "-q", *files]).returncode == 0
            print(f"fitted_data.h5 of builds 1 and {index + 1} equal (h5diff): "
                  f"{'yes' if same else 'no'}")
        same = parameters_without_timestamp(
            os.path.join(work, "0", "nlsq", "parameters.json")) == parameters_without_timestamp(
                os.path.join(work, str(index), "nlsq", "parameters.json"))
        print(f"parameters.json of builds 1 and {index + 1} equal (timestamps aside): "
              f"{'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
