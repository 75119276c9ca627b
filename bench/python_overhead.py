"""Overhead of the Python module against the engine's own time, and memory of a fit on numpy arrays.

For a config (its data file must exist; e.g. written by homodyne-simulate), times
  engine   FitResult.total_seconds: the library call Fit() measures itself
  python   wall time around homodyne_cpp.fit_nlsq, from the file and from numpy arrays
and reports the overhead (python - engine) / engine, plus the peak RSS of the process before and
after the array fit against the size of the array (a copy of c2_exp would add its size).

  PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py CONFIG [--repeats 3] [--float32]

Run on an idle machine; docs/performance.md has the numbers and the command.
"""
import argparse
import resource
import statistics
import time

import numpy as np

import homodyne_cpp as hc


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed_fit(data, config):
    begin = time.perf_counter()
    result = hc.fit_nlsq(data, config, checkpoints=False)
    wall = time.perf_counter() - begin
    return wall, result.execution_time, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--float32", action="store_true", help="pass c2_exp as float32")
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
            rss_before = peak_rss_mb()
        else:
            data = None
        walls, engines = [], []
        for _ in range(args.repeats):
            wall, engine, result = timed_fit(data, config)
            walls.append(wall)
            engines.append(engine)
        wall, engine = statistics.median(walls), statistics.median(engines)
        rows.append((label, wall, engine, result))
        print(f"{label:7s} points {result.n_points:>12d}  python {wall:8.3f} s  engine {engine:8.3f} s"
              f"  overhead {100 * (wall - engine) / engine:+6.2f} %  (median of {args.repeats})")
        if data is not None:
            rss_after = peak_rss_mb()
            print(f"        c2_exp {data['c2_exp'].dtype} {array_mb:.1f} MB; peak RSS before the fits "
                  f"{rss_before:.1f} MB, after {rss_after:.1f} MB (+{rss_after - rss_before:.1f} MB)")
    same = list(rows[0][3].parameters) == list(rows[1][3].parameters)
    print("file and arrays give bitwise the same parameters:", same)


if __name__ == "__main__":
    main()
