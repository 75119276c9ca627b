#!/usr/bin/env python3
"""The global phase under a robust loss: laminar-flow fits of data with outliers from untuned starts.

Usage: /usr/bin/python3 bench/robust_global.py [--bin DIR] [--sets N] [--starts K]
         [--losses soft_l1,cauchy] [--f-scale F] [--seed S] [--hot-fraction F] [--hot-value V]
         [--fix-gamma-offset] [--work DIR]
  e.g. /usr/bin/python3 bench/robust_global.py --sets 8 --starts 3 --losses linear,soft_l1,cauchy

For each of --sets seeded laminar-flow data sets (bench/global_success.py's truths, geometry and
config, in the aps_old layout), every angle gets one dead row (about 1% of the points at these
sizes) and --hot-fraction of its points (default 0.25%) become hot pixels --hot-value above the
offset (default 0.5, 50 sigma) (tests/pipeline/add_outliers.py). Then, per loss:
  1. a reference fit started at the truth with --global-search off: the loss's optimum;
  2. fits with the default global phase from the bound midpoints and from --starts random starts
     (bench/global_success.py's draws).
A fit succeeds when its robust cost is at most the reference's + 1 and every physical parameter
is within 4 reference uncertainties of the reference; the table also gives the largest distance
of a physical parameter from the truth in the fit's own uncertainties (truth within 4 SE), the
global phase's passes and the wall time per fit. Needs numpy and h5py (add_outliers.py).
"""
import argparse
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import global_success as gs  # noqa: E402  (the success benchmark's sets, starts and runs)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=os.path.join(REPO, "build/src/cli"))
    p.add_argument("--sets", type=int, default=4)
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--losses", default="soft_l1,cauchy")
    p.add_argument("--f-scale", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hot-fraction", type=float, default=0.0025)
    p.add_argument("--hot-value", type=float, default=0.5)
    p.add_argument("--fix-gamma-offset", action="store_true",
                   help="hold gamma_dot_t_offset at 0 (its truth), as bench/global_success.py's "
                        "option: removes the flat valley of gamma_dot_t0 and gamma_dot_t_offset")
    p.add_argument("--frames", default="150:300")
    p.add_argument("--angles", default="2:4")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--work", default="/tmp/homodyne_bench/robust_global")
    args = p.parse_args(argv)
    args.frames = gs.parse_range(args.frames)
    args.angles = gs.parse_range(args.angles)
    args.bin = os.path.abspath(args.bin)
    args.threads = None
    args.losses = [x for x in args.losses.split(",") if x]
    return args


def write_config(path, ds, start, loss, f_scale, fix_gamma_offset=False):
    """global_success.py's config in the aps_old layout (add_outliers.py's), with the loss."""
    gs.write_config(path, ds, start, fix_gamma_offset)
    with open(path) as f:
        text = f.read()
    text = text.replace("format: aps_u", "format: aps_old")
    text = text.replace("data_folder_path: ./\n  data_file_name: data.h5",
                        "file_path: ./data.h5")
    text = text.replace("    sigma: 0.01\n",
                        f"    sigma: 0.01\n    loss: {loss}\n    f_scale: {f_scale}\n")
    with open(path, "w") as f:
        f.write(text)


def robust_cost(set_dir, out_name):
    params = gs.read_json(os.path.join(set_dir, out_name, "nlsq", "parameters.json")) or {}
    return params.get("robust_cost", params.get("chi_squared"))


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    rng_master = random.Random(args.seed)
    rows = {loss: [] for loss in args.losses}
    for index in range(args.sets):
        rng = random.Random(rng_master.getrandbits(64))
        ds = gs.make_truth(rng, index, args)
        starts = [("midpoint", None)] + [(f"random{k + 1}", gs.random_start(rng))
                                         for k in range(args.starts)]
        set_dir = os.path.join(args.work, ds["name"])
        subprocess.run(["rm", "-rf", set_dir], check=True)
        os.makedirs(set_dir)
        write_config(os.path.join(set_dir, "truth.yaml"), ds, ds["truth"], "linear", 1.0)
        code, output, _ = gs.run_limited([os.path.join(args.bin, "homodyne-simulate"), "--config",
                                          "truth.yaml"], set_dir, args.timeout)
        if code != 0:
            print(f"{ds['name']}: simulate failed: {output[-300:]}")
            continue
        subprocess.run([sys.executable, os.path.join(REPO, "tests/pipeline/add_outliers.py"),
                        os.path.join(set_dir, "data.h5"), "--hot-fraction", str(args.hot_fraction),
                        "--hot-value", str(args.hot_value)], check=True, capture_output=True)
        t = ds["truth"]
        print(f"\n{ds['name']}: {len(ds['angles'])} angles x {ds['frames']} frames; "
              f"gamma_dot_t0 {t['gamma_dot_t0']:.3g} phi0 {t['phi0']:.2f} D0 {t['D0']:.4g}",
              flush=True)
        for loss in args.losses:
            f_scale = args.f_scale if loss != "linear" else 1.0
            write_config(os.path.join(set_dir, f"{loss}_truth.yaml"), ds, ds["truth"], loss,
                         f_scale, args.fix_gamma_offset)
            ref = gs.run_fit(args, set_dir, f"{loss}_truth.yaml", f"{loss}_reference",
                             ["--global-search", "off"])
            if not ref["ok"]:
                print(f"  {loss} reference failed: {ref['error']}")
                continue
            ref_cost = robust_cost(set_dir, f"{loss}_reference")
            for start_name, start in starts:
                config = f"{loss}_{start_name}.yaml"
                write_config(os.path.join(set_dir, config), ds, start, loss, f_scale,
                             args.fix_gamma_offset)
                fit = gs.run_fit(args, set_dir, config, f"{loss}_{start_name}", [])
                if not fit["ok"]:
                    rows[loss].append((False, float("inf"), fit["wall_s"], 0))
                    print(f"  {loss:8s} {start_name:9s} FAIL {fit['error']}")
                    continue
                cost = robust_cost(set_dir, f"{loss}_{start_name}")
                off = [n for n in gs.PHYSICAL
                       if abs(fit["values"][n] - ref["values"][n]) >
                       4 * (ref["uncertainties"][n] or 0) + 1e-12]
                success = cost <= ref_cost + 1.0 and not off
                truth_se = max(abs(fit["values"][n] - t[n]) / fit["uncertainties"][n]
                               for n in gs.PHYSICAL if fit["uncertainties"][n])
                metrics = gs.read_json(os.path.join(set_dir, f"{loss}_{start_name}", "nlsq",
                                                    "convergence_metrics.json")) or {}
                passes = (metrics.get("global_search") or {}).get("passes", 0)
                rows[loss].append((success, truth_se, fit["wall_s"], passes))
                print(f"  {loss:8s} {start_name:9s} {'ok  ' if success else 'FAIL'} "
                      f"cost {cost - ref_cost:+.3g} vs reference, truth {truth_se:.2f} SE, "
                      f"gamma_dot_t0 {fit['values']['gamma_dot_t0']:.3g} "
                      f"phi0 {fit['values']['phi0']:.2f}{'' if not off else ' off: ' + ','.join(off)}"
                      f", {passes} phase passes, {fit['wall_s']:.2f} s", flush=True)
    print()
    for loss, entries in rows.items():
        if not entries:
            continue
        ok = sum(1 for e in entries if e[0])
        within = sum(1 for e in entries if e[1] <= 4.0)
        print(f"{loss}: {ok}/{len(entries)} reach the loss's optimum, {within}/{len(entries)} "
              f"have the truth within 4 SE; mean {sum(e[2] for e in entries) / len(entries):.2f} s "
              f"and {sum(e[3] for e in entries) / len(entries):.0f} phase passes per fit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
