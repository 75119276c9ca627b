#!/usr/bin/env python3
"""Two builds of homodyne on the same fit, runs in turn (A, B, A, B, ...), timing the whole run and
its result files: "writing" is the time from the fit's summary line (the one with "reduced chi2"
and "points,") to the process's exit, which is writing nlsq/fitted_data.h5 and the JSON files,
their fsync, and the exit. Prints every run, then per build the median and minimum of both, and
whether the two builds' fitted_data.h5 are equal (h5diff, when installed).

Usage:
  bench/compare_writing.py BIN_DIR_A BIN_DIR_B CONFIG [--runs R] [-- homodyne flags...]
  e.g. bench/compare_writing.py /work/base/build/src/cli build/src/cli \\
         /tmp/homodyne_bench/fit_1x6001_lzf.yaml --runs 4

BIN_DIR_*: folders holding homodyne. CONFIG: a fit config (bench/fit_end_to_end.sh writes them
next to their data). Scratch: $BENCH_DIR (default /tmp/homodyne_bench)/compare_writing.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def timed_run(binary, config, output_dir, flags):
    """(whole run, writing) seconds of one run of `binary`."""
    shutil.rmtree(output_dir, ignore_errors=True)
    start = time.monotonic()
    summary = None
    with subprocess.Popen([binary, "--config", config, "--output-dir", output_dir, *flags],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=os.path.dirname(config)) as process:
        for line in process.stdout:
            if "reduced chi2" in line and "points," in line:
                summary = time.monotonic()
    end = time.monotonic()
    if process.returncode != 0:
        sys.exit(f"{binary} exited {process.returncode}")
    if summary is None:
        sys.exit(f"{binary} printed no fit summary line")
    return end - start, end - summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bin_a")
    parser.add_argument("bin_b")
    parser.add_argument("config")
    parser.add_argument("--runs", type=int, default=3)
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1:] if "--" in argv else []  # homodyne's, after --
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    config = os.path.abspath(args.config)
    binaries = {"a": os.path.join(os.path.abspath(args.bin_a), "homodyne"),
                "b": os.path.join(os.path.abspath(args.bin_b), "homodyne")}
    work = os.path.join(os.environ.get("BENCH_DIR", "/tmp/homodyne_bench"), "compare_writing")
    os.makedirs(work, exist_ok=True)
    print(f"command: {' '.join(sys.argv)}")
    print(f"machine: {os.cpu_count()} cores; started {time.strftime('%H:%M:%S', time.gmtime())} UTC,"
          f" load {os.getloadavg()[0]:.2f}")
    times = {label: [] for label in binaries}
    for run in range(1, args.runs + 1):
        for label, binary in binaries.items():
            whole, writing = timed_run(binary, config, os.path.join(work, label), flags)
            times[label].append((whole, writing))
            print(f"run {run} {label}: whole {whole:.2f} s, writing {writing:.2f} s", flush=True)
    print(f"ended {time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.2f}")
    for label, binary in binaries.items():
        whole = [t[0] for t in times[label]]
        writing = [t[1] for t in times[label]]
        print(f"{label} ({binary}): whole median {statistics.median(whole):.2f} s (min "
              f"{min(whole):.2f}), writing median {statistics.median(writing):.2f} s (min "
              f"{min(writing):.2f})")
    files = [os.path.join(work, label, "nlsq", "fitted_data.h5") for label in binaries]
    if shutil.which("h5diff"):
        same = subprocess.run(["h5diff", "-q", *files]).returncode == 0
        print(f"fitted_data.h5 equal (h5diff): {'yes' if same else 'no'}")
    else:
        print("fitted_data.h5 not compared (no h5diff)")


if __name__ == "__main__":
    main()
