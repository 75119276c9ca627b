"""Overhead of the Python module against the engine's own time, and memory of a fit on numpy arrays.

For a config (its data file must exist; e.g. written by homodyne-simulate), times
  engine   FitResult.total_seconds: the library call Fit() measures itself
  python   wall time around homodyne_cpp.fit_nlsq, from the file and from numpy arrays
and reports the overhead (python - engine) / engine, plus how far the process's RSS rises during
the array fits above what it holds before them (the arrays included), against the size of
c2_exp: a copy of the array would add its size. The in-memory strategies (standard, large,
chunked) pack the upper triangles as float32 whatever the source, as from a file; streaming
reads batches from the array.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py CONFIG [--repeats 3] [--float32] [--strategy S]

Run on an idle machine; docs/performance.md has the numbers and the command.
"""
import argparse
import statistics
import time

import numpy as np

import homodyne_cpp as hc


def status_mb(key):
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def reset_peak_rss():
    """Sets VmHWM to the current RSS (Linux: clear_refs 5), so that later peaks are the fit's."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def timed_fit(data, config, strategy):
    begin = time.perf_counter()
    result = hc.fit_nlsq(data, config, checkpoints=False, strategy=strategy)
    wall = time.perf_counter() - begin
    return wall, result.execution_time, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--float32", action="store_true", help="pass c2_exp as float32")
    parser.add_argument("--strategy", default=None, help="force a strategy (e.g. streaming)")
    args = parser.parse_args()
    hc.set_log_level("warning")
    config = hc.load_config(args.config)

    rows = []
    for label, make_data in (("file", lambda: None), ("arrays", None)):
        if make_data is None:
            data = hc.load_xpcs_data(config)
            if args.float32:
                data["c2_exp"] = data["c2_exp"].astype(np.float32)
            array_mb = data["c2_exp"].nbytes / 2**20
            reset_peak_rss()
            rss_before = status_mb("VmRSS")
        else:
            data = None
        walls, engines = [], []
        for _ in range(args.repeats):
            wall, engine, result = timed_fit(data, config, args.strategy)
            walls.append(wall)
            engines.append(engine)
        wall, engine = statistics.median(walls), statistics.median(engines)
        rows.append((label, wall, engine, result))
        print(f"{label:7s} points {result.n_points:>12d}  python {wall:8.3f} s  engine {engine:8.3f} s"
              f"  overhead {100 * (wall - engine) / engine:+6.2f} %  (median of {args.repeats})")
        if data is not None:
            peak = status_mb("VmHWM")
            print(f"        c2_exp {data['c2_exp'].dtype} {array_mb:.1f} MB; RSS before the fits "
                  f"{rss_before:.1f} MB, peak during them {peak:.1f} MB "
                  f"(+{peak - rss_before:.1f} MB; strategy {result.strategy})")
    same = list(rows[0][3].parameters) == list(rows[1][3].parameters)
    print("file and arrays give bitwise the same parameters:", same)


if __name__ == "__main__":
    main()
