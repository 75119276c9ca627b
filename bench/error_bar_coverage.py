#!/usr/bin/env python3
"""Coverage of the error bars on simulated ensembles (docs/results.md, Checking error bars).

For each set: a truth drawn at random (seeded by the set's index), a data set written by
homodyne-simulate (independent Gaussian noise, or speckle-level noise: --noise speckle), a fit
from the bound midpoints (a start nobody tuned) with each uncertainty method, and for each
fitted physical parameter whether the truth lies within its 68 % and 95 % intervals (the
result's interval_68 and interval_95 where it has them: docs/results.md, Intervals; else value
+- 1 and +- 1.96 uncertainties).
Prints, per method and parameter, the fraction of sets covered (68 % and 95 % nominal), the rms
error over the median uncertainty, and the fit times; per rate of nlsq/derived_rates.json (D(t),
and gamma_dot(t) or the two-component rates) the fraction of sets whose 68 % interval at the
middle of the window holds the truth's rate there; where some 68 % intervals are the
parameter's bounds (interval_note "not determined within parameter_space.bounds"), also the
coverage of the other (set, parameter) pairs.

  bench/error_bar_coverage.py --scenario iid_laminar --sets 30 --bin build/src/cli

Scenarios: iid_laminar (3 angles x 300 frames, noise 0.01), iid_static (static, 3 angles x 300
frames, noise 0.01), speckle_static (3 angles x 600
frames, 1000 pixels per angle), speckle_laminar (3 angles x 600 frames, 1000 pixels),
iid_two_component (3 angles x 200 frames, noise 0.01), speckle_two_component (3 angles x 200
frames, 1000 pixels).
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

METHODS = ["auto", "jackknife", "standard", "curvature"]
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "configs")


def log_uniform(rng, low, high):
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def laminar_truth(rng):
    return {"D0": 3000.0 * log_uniform(rng, 0.5, 2.0), "alpha": rng.uniform(-0.7, -0.3),
            "D_offset": rng.uniform(0.0, 20.0), "gamma_dot_t0": 5e-5 * log_uniform(rng, 0.5, 2.0),
            "beta": rng.uniform(-0.5, -0.1), "gamma_dot_t_offset": 0.0,
            "phi0": rng.uniform(-10.0, 10.0)}


def static_truth(rng):
    return {"D0": log_uniform(rng, 15000.0, 60000.0), "alpha": rng.uniform(-0.7, -0.3),
            "D_offset": rng.uniform(0.0, 20.0)}


def two_component_truth(rng):
    return {"D0_ref": 1000.0 * log_uniform(rng, 0.7, 1.4), "alpha_ref": 0.0, "D_offset_ref": 0.0,
            "D0_sample": 20000.0 * log_uniform(rng, 0.7, 1.4), "alpha_sample": rng.uniform(-0.4, -0.2),
            "D_offset_sample": 0.0, "v0": 20.0 * log_uniform(rng, 0.7, 1.4), "v_beta": 0.5,
            "v_offset": 1.0, "f0": 0.3, "f1": 0.01, "f2": 0.5, "f3": 0.2,
            "phi0_het": rng.uniform(-5.0, 5.0)}


def power(t, exponent):
    """docs/model.md's pw(t, e): 0 for t <= 0, (1e-10)^e up to 1e-10, t^e beyond."""
    if t <= 0.0:
        return 0.0
    return max(t, 1e-10) ** exponent


def softplus(z):
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


def true_rates(mode, truth, t):
    """The rates of nlsq/derived_rates.json (docs/results.md, What the data determine) at time t
    [s] from the truth's parameters (docs/model.md: Rates; Two-component mode)."""
    if mode == "two_component":
        def soft01(z):
            return 1.0 - softplus(50.0 * (1.0 - softplus(50.0 * z) / 50.0)) / 50.0
        exponent = min(max(truth["f1"] * (t - truth["f2"]), -700.0), 700.0)
        return {"D_ref": max(truth["D0_ref"] * power(t, truth["alpha_ref"]) + truth["D_offset_ref"], 0.0),
                "D_sample": max(truth["D0_sample"] * power(t, truth["alpha_sample"])
                                + truth["D_offset_sample"], 0.0),
                "v": truth["v0"] * power(t, truth["v_beta"]) + truth["v_offset"],
                "fraction": soft01(truth["f0"] * math.exp(exponent) + truth["f3"])}
    rates = {"D": max(truth["D0"] * t ** truth["alpha"] + truth["D_offset"], 1e-10)}
    if mode == "laminar_flow":
        rates["gamma_dot"] = max(truth["gamma_dot_t0"] * t ** truth["beta"]
                                 + truth["gamma_dot_t_offset"], 1e-10)
    return rates


def middle_rates(path, mode, truth):
    """{rate: (value, lo, hi, true value)} at the fitted window's middle time, from the fit's
    derived_rates.json (its 68 % interval)."""
    with open(path) as handle:
        derived = json.load(handle)
    times = derived["t"]
    k = len(times) // 2
    truths = true_rates(mode, truth, times[k])
    out = {}
    for name, true_value in truths.items():
        interval = derived.get(name + "_interval_68")
        lo, hi = interval[k] if interval else (None, None)
        out[name] = (derived[name][k], lo, hi, true_value)
    return out


SCENARIOS = {
    # name: (config, truth sampler, frames, noise flags)
    "iid_laminar": ("simulate_laminar_flow.yaml", laminar_truth, 300, ["--noise", "0.01"]),
    "iid_static": ("simulate_static.yaml", static_truth, 300, ["--noise", "0.01"]),
    "speckle_static": ("simulate_static.yaml", static_truth, 600,
                       ["--noise", "speckle", "--pixels", "1000"]),
    "speckle_laminar": ("simulate_laminar_flow.yaml", laminar_truth, 600,
                        ["--noise", "speckle", "--pixels", "1000"]),
    "iid_two_component": ("simulate_two_component.yaml", two_component_truth, 200,
                          ["--noise", "0.01"]),
    "speckle_two_component": ("simulate_two_component.yaml", two_component_truth, 200,
                              ["--noise", "speckle", "--pixels", "1000"]),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    parser.add_argument("--sets", type=int, default=30)
    parser.add_argument("--first-set", type=int, default=0,
                        help="index of the first set (sets FIRST .. FIRST + SETS - 1: an ensemble "
                             "of new sets beside one measured before)")
    parser.add_argument("--frames", type=int, help="override the scenario's frames")
    parser.add_argument("--bin", default=os.path.join(HERE, "..", "build", "src", "cli"),
                        help="folder of homodyne and homodyne-simulate")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--json", help="write the per-set results here")
    parser.add_argument("--fixed-truth", action="store_true",
                        help="the same truth (the first draw) for every set: only the noise varies")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key for every fit, e.g. optimization.nlsq.profile_check=true "
                             "(repeatable; VALUE read as YAML)")
    args = parser.parse_args()
    config_name, sampler, frames, noise = SCENARIOS[args.scenario]
    frames = args.frames or frames
    methods = args.methods.split(",")
    with open(os.path.join(CONFIGS, config_name)) as handle:
        base = yaml.safe_load(handle)
    rows = []
    seconds = {m: [] for m in methods}
    with tempfile.TemporaryDirectory(prefix="coverage_") as work:
        for index in range(args.first_set, args.first_set + args.sets):
            rng = random.Random(1000 + (0 if args.fixed_truth else index))
            truth = sampler(rng)
            config = json.loads(json.dumps(base))
            config["simulation"]["parameters"] = truth
            config["simulation"]["noise_sigma"] = 0.0
            config["simulation"]["output"] = os.path.join(work, "data.h5")
            config["simulation"]["frames"] = frames
            config["experimental_data"] = {"file_path": os.path.join(work, "data.h5")}
            config["initial_parameters"] = {"parameter_names": None, "values": None}
            for setting in args.set:
                key, _, value = setting.partition("=")
                node = config
                for part in key.split(".")[:-1]:
                    node = node.setdefault(part, {})
                node[key.split(".")[-1]] = yaml.safe_load(value)
            path = os.path.join(work, "config.yaml")
            with open(path, "w") as handle:
                yaml.safe_dump(config, handle)
            subprocess.run([os.path.join(args.bin, "homodyne-simulate"), "--config", path,
                            "--seed", str(index + 1)] + noise, check=True, capture_output=True)
            row = {"truth": truth}
            for method in methods:
                out = os.path.join(work, "out_" + method)
                start = time.perf_counter()
                done = subprocess.run([os.path.join(args.bin, "homodyne"), "--config", path,
                                       "--output-dir", out, "--uncertainty", method],
                                      capture_output=True, text=True)
                seconds[method].append(time.perf_counter() - start)
                if done.returncode != 0:
                    sys.exit(f"set {index}: homodyne exited {done.returncode}: {done.stderr[-2000:]}")
                with open(os.path.join(out, "nlsq", "parameters.json")) as handle:
                    result = json.load(handle)
                used = (result.get("uncertainty") or {}).get("method", method)
                row.setdefault("used", {})[method] = used
                row.setdefault("uncertainty", {})[method] = result.get("uncertainty")
                row.setdefault("rates", {})[method] = middle_rates(
                    os.path.join(out, "nlsq", "derived_rates.json"), config["analysis_mode"], truth)
                row[method] = {name: (entry["value"], entry["uncertainty"],
                                      entry.get("interval_68"), entry.get("interval_95"),
                                      entry.get("interval_note", ""))
                               for name, entry in result["parameters"].items()
                               if name in truth and not entry.get("fixed", False)}
            rows.append(row)
            print(f"set {index + 1 - args.first_set}/{args.sets} done", file=sys.stderr)
    names = [n for n in rows[0][methods[0]]]
    print(f"scenario {args.scenario}: {args.sets} sets"
          + (f" from set {args.first_set}" if args.first_set else "")
          + f", {frames} frames, noise {' '.join(noise)}"
          + "".join(f", {setting}" for setting in args.set))
    print(f"{'method':10s} {'parameter':20s} {'68% cover':>9s} {'95% cover':>9s} "
          f"{'rms err / median unc':>21s} {'median |z|':>10s} {'rms z':>6s}")
    for method in methods:
        all68, all95 = [], []
        # The (set, parameter) pairs whose 68 % interval is the parameter's bounds (the result's
        # interval_note says "not determined within parameter_space.bounds"): they cover the
        # truth by construction, so the coverage is also given without them.
        determined_hits68, determined_hits95, determined_count, undetermined = 0, 0, 0, {}
        for name in names:
            z = []
            errors, uncertainties = [], []
            inside68, inside95 = 0, 0
            for row in rows:
                value, unc, interval68, interval95, note = (
                    list(row[method][name]) + [None, None, ""])[:5]
                truth = row["truth"][name]
                error = value - truth
                errors.append(error)
                uncertainties.append(unc if unc is not None else float("nan"))
                z.append(abs(error) / unc if unc and unc > 0 else float("inf"))
                for interval, level, counter in ((interval68, 1.0, "68"), (interval95, 1.96, "95")):
                    if interval and None not in interval:
                        hit = interval[0] <= truth <= interval[1]
                    else:
                        hit = z[-1] <= level
                    if counter == "68":
                        inside68 += hit
                    else:
                        inside95 += hit
                    if not (note or "").startswith("not determined"):
                        if counter == "68":
                            determined_hits68 += hit
                            determined_count += 1
                        else:
                            determined_hits95 += hit
                if (note or "").startswith("not determined"):
                    undetermined[name] = undetermined.get(name, 0) + 1
            c68 = inside68 / len(z)
            c95 = inside95 / len(z)
            all68.append(c68)
            all95.append(c95)
            rms = math.sqrt(sum(e * e for e in errors) / len(errors))
            ratio = rms / statistics.median(uncertainties) if statistics.median(uncertainties) else float("inf")
            finite_z = [v for v in z if math.isfinite(v)]
            median_z = statistics.median(finite_z) if finite_z else float("nan")
            rms_z = math.sqrt(sum(v * v for v in finite_z) / len(finite_z)) if finite_z else float("nan")
            print(f"{method:10s} {name:20s} {c68:9.2f} {c95:9.2f} {ratio:21.2f} {median_z:10.2f} "
                  f"{rms_z:6.2f}")
        used = {}
        for row in rows:
            name_used = row.get("used", {}).get(method, method)
            used[name_used] = used.get(name_used, 0) + 1
        print(f"{method:10s} {'(all)':20s} {statistics.mean(all68):9.2f} {statistics.mean(all95):9.2f}"
              f"   fit wall median {statistics.median(seconds[method]):.2f} s; sets by method "
              + ", ".join(f"{k} {v}" for k, v in sorted(used.items())))
        if undetermined:
            print(f"{method:10s} {'(determined)':20s} "
                  f"{determined_hits68 / max(determined_count, 1):9.2f} "
                  f"{determined_hits95 / max(determined_count, 1):9.2f}   without the "
                  f"{sum(undetermined.values())} intervals not determined within the bounds ("
                  + ", ".join(f"{k} {v}" for k, v in undetermined.items()) + ")")
        # What the data determine: the rates at the middle of the window and their 68 % intervals
        # (derived_rates.json).
        rate_names = list(rows[0]["rates"][method])
        covered = []
        for name in rate_names:
            hits = [lo is not None and lo <= true <= hi
                    for value, lo, hi, true in (row["rates"][method][name] for row in rows)]
            errors = [abs(value - true) / abs(true) if true else float("nan")
                      for value, lo, hi, true in (row["rates"][method][name] for row in rows)]
            covered.append(sum(hits) / len(hits))
            print(f"{method:10s} {'rate ' + name:20s} {covered[-1]:9.2f} {'':>9s}   at the window's "
                  f"middle; median |error| / rate {statistics.median(errors):.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
