#!/usr/bin/env python3
"""Success rate of laminar-flow fits from untuned starts, per fitting method.

Run through bench/global_success.sh (which prints the machine and passes the command line).
Python 3 standard library only.

For each of --sets simulated laminar-flow data sets (seeded: the same options give the same data):
  1. a reference fit started at the truth with --global-search off: it defines the optimum;
  2. fits from the bound midpoints (initial_parameters.values: null) and from --starts random
     starts drawn uniformly inside the default bounds (D0 and gamma_dot_t0 log-uniform), with
     each method of --methods:
       single       --global-search off --no-variable-projection   (the plain local fit)
       vp           --global-search off                            (local fit, variable projection)
       multi-start  --global-search multi-start
       cmaes        --global-search cmaes
       default      no flag
A fit succeeds when its chi2 <= reference chi2 + --dchi2 AND every physical parameter is within
--nsigma of the reference's reported uncertainties of the reference value. A fit that exits
non-zero or runs past --timeout fails with that reason. Failures are sorted into basins
(gamma_dot_t0 on its lower bound = "no flow", another parameter on a bound, ...). With
gamma_dot_t_offset free and beta near 0, gamma_dot_t0, beta and gamma_dot_t_offset trade along a
flat valley: fits ending elsewhere on it fail as "same chi2, parameters off" (the table counts
them in "optimum's chi2"); --fix-gamma-offset holds gamma_dot_t_offset at 0 to remove it.
"""
import argparse
import json
import math
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import time

PHYSICAL = ["D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "gamma_dot_t_offset", "phi0"]
# Default bounds of the engine (docs/configuration.md, "Parameters").
DEFAULT_BOUNDS = {
    "D0": (1e2, 1e5), "alpha": (-2.0, 2.0), "D_offset": (-1e5, 1e5),
    "gamma_dot_t0": (1e-6, 0.5), "beta": (-2.0, 2.0), "gamma_dot_t_offset": (-0.1, 0.1),
    "phi0": (-10.0, 10.0),
}
LOG_UNIFORM = {"D0", "gamma_dot_t0"}
ALL_METHODS = ["single", "vp", "multi-start", "cmaes", "default"]
METHOD_FLAGS = {
    "single": ["--global-search", "off", "--no-variable-projection"],
    "vp": ["--global-search", "off"],
    "multi-start": ["--global-search", "multi-start"],
    "cmaes": ["--global-search", "cmaes"],
    "default": [],
}
REFERENCE_FLAGS = ["--global-search", "off"]
# The demo's geometry (configs/simulate_laminar_flow.yaml): dt is chosen per data set so that the
# shear phase is visible, then q and the gap are rescaled (q L kept) so that diffusion is too.
Q0 = 0.0054          # 1/Angstrom
GAP0 = 2.0e6         # Angstrom


def env_default(name, fallback):
    value = os.environ.get(name)
    return value if value not in (None, "") else fallback


def parse_range(text, kind=int):
    low, _, high = text.partition(":")
    low = kind(low)
    high = kind(high) if high else low
    if high < low:
        raise argparse.ArgumentTypeError(f"{text}: MIN:MAX with MIN <= MAX")
    return low, high


def parse_args(argv):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(
        description="Success rate of laminar-flow fits from untuned starts, per method.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin",
                   default=env_default("HOMODYNE_BIN", os.path.join(repo, "build/src/cli")),
                   help="folder holding homodyne and homodyne-simulate (env HOMODYNE_BIN)")
    p.add_argument("--sets", type=int, default=int(env_default("GS_SETS", 20)),
                   help="simulated data sets (env GS_SETS)")
    p.add_argument("--starts", type=int, default=int(env_default("GS_STARTS", 5)),
                   help="random starts per data set, besides the bound midpoints (env GS_STARTS)")
    p.add_argument("--methods", default=env_default("GS_METHODS", ",".join(ALL_METHODS)),
                   help="comma-separated subset of " + ",".join(ALL_METHODS) + " (env GS_METHODS)")
    p.add_argument("--frames", type=parse_range, default=env_default("GS_FRAMES", "150:300"),
                   help="frames per data set, MIN:MAX, drawn uniformly (env GS_FRAMES)")
    p.add_argument("--angles", type=parse_range, default=env_default("GS_ANGLES", "2:8"),
                   help="angles per data set, MIN:MAX (env GS_ANGLES)")
    p.add_argument("--seed", type=int, default=int(env_default("GS_SEED", 1)),
                   help="seed of truths, starts and noise (env GS_SEED)")
    p.add_argument("--timeout", type=float, default=float(env_default("GS_TIMEOUT", 120)),
                   help="seconds per fit; past it the fit is killed and counts as a failure "
                        "(env GS_TIMEOUT)")
    p.add_argument("--threads", type=int, default=None,
                   help="--threads for homodyne (unset: homodyne's own default, all cores)")
    p.add_argument("--dchi2", type=float, default=2.0,
                   help="success: chi2 <= reference chi2 + DCHI2")
    p.add_argument("--nsigma", type=float, default=4.0,
                   help="success: every physical parameter within NSIGMA reference uncertainties")
    p.add_argument("--work", default=os.path.join(env_default("BENCH_DIR", "/tmp/homodyne_bench"),
                                                  "global_success"),
                   help="scratch folder (emptied of earlier sets; env BENCH_DIR/global_success)")
    p.add_argument("--fix-gamma-offset", action="store_true",
                   default=env_default("GS_FIX_GAMMA_OFFSET", "0") not in ("0", "false", "no"),
                   help="hold gamma_dot_t_offset at 0 (its truth) in every fit: removes the flat "
                        "valley of gamma_dot_t0, beta and gamma_dot_t_offset when beta is near 0 "
                        "(env GS_FIX_GAMMA_OFFSET=1)")
    p.add_argument("--markdown", default=env_default("GS_MARKDOWN", None),
                   help="also write the tables as markdown to this file (env GS_MARKDOWN)")
    p.add_argument("--json", default=None,
                   help="write every fit's record to this file (unset: WORK/results.json)")
    p.add_argument("--command-line", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if isinstance(args.frames, str):
        args.frames = parse_range(args.frames)
    if isinstance(args.angles, str):
        args.angles = parse_range(args.angles)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in METHOD_FLAGS]
    if bad:
        p.error(f"--methods: unknown {bad}; choose from {ALL_METHODS}")
    if args.sets < 1 or args.starts < 0:
        p.error("--sets >= 1 and --starts >= 0")
    if args.frames[0] < 10:
        p.error("--frames: at least 10")
    if args.angles[0] < 1:
        p.error("--angles: at least 1")
    args.bin = os.path.abspath(args.bin)
    args.work = os.path.abspath(args.work)
    return args


# ----------------------------------------------------------------------------------------------
# Data sets


def cumulative_window(times, amplitude, exponent, offset):
    """The engine's trapezoid sum of amplitude t^exponent + offset over the grid, in steps
    (src/model/model.cc IntegrateRate, without the rate floor): C[-1] - C[0]."""
    rates = [amplitude * t ** exponent + offset for t in times]
    return sum(0.5 * (a + b) for a, b in zip(rates, rates[1:]))


def make_truth(rng, index, args):
    """One data set's truth, angles, scaling and geometry, and what makes the flow visible."""
    n_angles = rng.randint(*args.angles)
    frames = rng.randint(*args.frames)
    truth = {
        "D0": 10 ** rng.uniform(math.log10(1e3), math.log10(2e4)),
        "alpha": rng.uniform(-1.0, 0.0),
        "D_offset": rng.uniform(0.0, 20.0),
        "gamma_dot_t0": 10 ** rng.uniform(-4.0, -2.0),
        "beta": rng.uniform(-0.5, 0.5),
        "gamma_dot_t_offset": 0.0,
        "phi0": rng.uniform(-8.0, 8.0),
    }
    # Angles evenly spread over 180 degrees, rotated at random: at least one is within
    # 90/n_angles degrees of the flow direction, so |cos(phi0 - phi)| >= cos(45 deg) there.
    rotation = rng.uniform(-90.0, -90.0 + 180.0 / n_angles)
    angles = [round(rotation + 180.0 * k / n_angles, 1) for k in range(n_angles)]
    contrast = [round(rng.uniform(0.1, 0.4), 4) for _ in range(n_angles)]
    offset = [round(rng.uniform(0.95, 1.05), 4) for _ in range(n_angles)]
    # Targets over the whole window: shear phase Phi = q L / (2 pi) * integral of gamma_dot (rad,
    # at cos(phi0 - phi) = 1; sinc(Phi) has its first zero at pi) and diffusion decay
    # E = q^2 / 2 * integral of D (g1 = e^-E across the window).
    phase_target = 10 ** rng.uniform(math.log10(2.0), math.log10(12.0))
    decay_target = 10 ** rng.uniform(math.log10(0.5), math.log10(3.0))
    steps = list(range(1, frames))  # the fitted grid t_k = k dt, k = 1..frames-1

    def shear_phase(dt, q, gap):
        times = [k * dt for k in steps]
        integral = dt * cumulative_window(times, truth["gamma_dot_t0"], truth["beta"], 0.0)
        return q * gap / (2 * math.pi) * integral

    def decay(dt, q):
        times = [k * dt for k in steps]
        integral = dt * cumulative_window(times, truth["D0"], truth["alpha"], truth["D_offset"])
        return 0.5 * q * q * integral

    # Phi grows as dt^(1 + beta) (no shear offset): solve for dt at the demo's q and gap.
    phase_at_1 = shear_phase(1.0, Q0, GAP0)
    dt = (phase_target / phase_at_1) ** (1.0 / (1.0 + truth["beta"]))
    dt = float(f"{dt:.6g}")
    # Then q for the diffusion decay, and the gap so that q L (the phase) stays.
    q = Q0 * math.sqrt(decay_target / decay(dt, Q0))
    q = float(f"{q:.6g}")
    gap = float(f"{GAP0 * Q0 / q:.6g}")
    cos_max = max(abs(math.cos(math.radians(truth["phi0"] - a))) for a in angles)
    return {
        "name": f"set{index:02d}", "index": index, "frames": frames, "angles": angles,
        "truth": truth, "contrast": contrast, "offset": offset, "dt": dt, "q": q, "gap": gap,
        "seed": args.seed * 1000 + index,
        "phase": shear_phase(dt, q, gap), "phase_best_angle": shear_phase(dt, q, gap) * cos_max,
        "decay": decay(dt, q),
    }


def random_start(rng):
    start = {}
    for name in PHYSICAL:
        low, high = DEFAULT_BOUNDS[name]
        if name in LOG_UNIFORM:
            start[name] = 10 ** rng.uniform(math.log10(low), math.log10(high))
        else:
            start[name] = rng.uniform(low, high)
    return start


def yaml_list(values):
    return "[" + ", ".join(repr(float(v)) if not isinstance(v, str) else v for v in values) + "]"


def write_config(path, ds, start, fix_gamma_offset=False):
    """The fit (and simulate) config of a data set; start: dict of physical values or None
    (the bound midpoints). fix_gamma_offset: gamma_dot_t_offset held at 0."""
    if start is not None and fix_gamma_offset:
        start = dict(start, gamma_dot_t_offset=0.0)
    values = "null" if start is None else yaml_list([start[n] for n in PHYSICAL])
    # The midpoint of gamma_dot_t_offset's default bounds is 0, so null starts there too.
    fixed = "[gamma_dot_t_offset]" if fix_gamma_offset else "null"
    t = ds["truth"]
    with open(path, "w") as f:
        f.write(f"""# {ds['name']}: shear phase {ds['phase']:.2f} rad, decay {ds['decay']:.2f}
analysis_mode: laminar_flow
analyzer_parameters:
  dt: {ds['dt']!r}
  start_frame: 1
  end_frame: -1
  scattering: {{wavevector_q: {ds['q']!r}}}
  geometry: {{stator_rotor_gap: {ds['gap']!r}}}
experimental_data:
  data_folder_path: ./
  data_file_name: data.h5
simulation:
  output: ./data.h5
  format: aps_u
  frames: {ds['frames']}
  phi_angles: {yaml_list(ds['angles'])}
  parameters: {{{', '.join(f'{n}: {t[n]!r}' for n in PHYSICAL)}}}
  contrast: {yaml_list(ds['contrast'])}
  offset: {yaml_list(ds['offset'])}
  noise_sigma: 0.01
  seed: {ds['seed']}
  dtype: float64
  compression: none
initial_parameters:
  parameter_names: [{', '.join(PHYSICAL)}]
  values: {values}
  fixed_parameters: {fixed}
optimization:
  nlsq:
    max_iterations: 100
    tolerance: 1.0e-8
    sigma: 0.01
  streaming:
    enable_checkpoints: false
    resume_from_checkpoint: false
""")


# ----------------------------------------------------------------------------------------------
# Running


def run_limited(command, cwd, timeout):
    """Runs command in its own process group; kills the group past timeout.
    Returns (exit code or None on timeout, combined output, wall seconds)."""
    began = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True, errors="replace")
    try:
        output, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        output, _ = proc.communicate()
        code = None
    return code, output, time.monotonic() - began


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_fit(args, set_dir, config, out_name, flags):
    out_dir = os.path.join(set_dir, out_name)
    command = [os.path.join(args.bin, "homodyne"), "--config", config, "--output-dir", out_name,
               "--no-resume", "--quiet"] + flags
    if args.threads:
        command += ["--threads", str(args.threads)]
    code, output, wall = run_limited(command, set_dir, args.timeout)
    record = {"command": " ".join(shlex.quote(c) for c in command), "wall_s": wall, "ok": False}
    if code is None:
        record["error"] = f"timeout ({args.timeout:g} s)"
        return record
    if code != 0:
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        record["error"] = f"exit {code}: " + (lines[-1][:160] if lines else "no output")
        return record
    params = read_json(os.path.join(out_dir, "nlsq", "parameters.json"))
    if not params or "parameters" not in params:
        record["error"] = "no nlsq/parameters.json"
        return record
    record["ok"] = True
    record["chi2"] = params.get("chi_squared")
    record["values"] = {n: params["parameters"][n]["value"] for n in PHYSICAL
                        if n in params["parameters"]}
    record["uncertainties"] = {n: params["parameters"][n].get("uncertainty") for n in PHYSICAL
                               if n in params["parameters"]}
    record["status"] = params.get("convergence_status")
    metrics = read_json(os.path.join(out_dir, "nlsq", "convergence_metrics.json")) or {}
    search = metrics.get("global_search")
    if isinstance(search, dict):
        record["search"] = {k: search.get(k) for k in
                            ("method", "point_evaluations", "seconds", "starts", "generations")}
        record["search"]["minima"] = len(search.get("minima") or [])
    return record


def at_bound(name, value):
    """"lower", "upper" or None: value on one of the default bounds (as the fit leaves it)."""
    low, high = DEFAULT_BOUNDS[name]
    if name in LOG_UNIFORM:  # positive, spanning decades: relative tolerance
        near_low, near_high = value <= low * (1 + 1e-6), value >= high * (1 - 1e-9)
    else:
        width = high - low
        near_low, near_high = value <= low + 1e-9 * width, value >= high - 1e-9 * width
    return "lower" if near_low else "upper" if near_high else None


def judge(fit, ref, args):
    """(success, basin) of a fit against the reference fit."""
    if not fit["ok"]:  # "timeout", "exit 1", "no nlsq/parameters.json"
        return False, fit["error"].split(":")[0].split(" (")[0]
    off = []
    for name in PHYSICAL:
        sigma = ref["uncertainties"].get(name) or 0.0
        low, high = DEFAULT_BOUNDS[name]
        allowed = args.nsigma * sigma + 1e-9 * (high - low if name not in LOG_UNIFORM else high)
        if abs(fit["values"][name] - ref["values"][name]) > allowed:
            off.append(name)
    chi2_ok = fit["chi2"] <= ref["chi2"] + args.dchi2
    if chi2_ok and not off:
        return True, "optimum"
    gamma = fit["values"]["gamma_dot_t0"]
    if at_bound("gamma_dot_t0", gamma) == "lower":
        return False, "no flow (gamma_dot_t0 at lower bound)"
    if gamma < 0.1 * ref["values"]["gamma_dot_t0"]:
        return False, "little flow (gamma_dot_t0 < 10% of the optimum)"
    if fit["chi2"] < ref["chi2"] - args.dchi2:
        return False, "chi2 below the reference"
    if chi2_ok:
        return False, "same chi2, parameters off (flat valley)"
    bounded = [f"{n} at {at_bound(n, fit['values'][n])} bound" for n in PHYSICAL
               if at_bound(n, fit["values"][n]) and n != "gamma_dot_t0"]
    if at_bound("gamma_dot_t0", gamma) == "upper":
        bounded.insert(0, "gamma_dot_t0 at upper bound")
    if bounded:
        return False, bounded[0]
    return False, "other local minimum"


def supported_flags(args):
    code, output, _ = run_limited([os.path.join(args.bin, "homodyne"), "--help"], "/", 30)
    if code != 0:
        sys.exit(f"error: {args.bin}/homodyne --help failed ({code}):\n{output}")
    return {flag for flag in ("--global-search", "--no-variable-projection") if flag in output}


# ----------------------------------------------------------------------------------------------
# Report


def fmt_g(x, digits=3):
    return "-" if x is None else f"{x:.{digits}g}"


def machine_lines():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    lines = [f"machine: {os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), {model}"]
    return lines


def summarise(records, methods, skipped):
    rows = []
    for method in methods:
        if method in skipped:
            rows.append({"method": method, "skipped": skipped[method]})
            continue
        fits = [r for r in records if r["method"] == method]
        success = [r for r in fits if r["success"]]
        chi2_ok = [r for r in fits if r["success"] or r["basin"].startswith("same chi2")]
        mid = [r for r in fits if r["start"] == "midpoint"]
        rnd = [r for r in fits if r["start"] != "midpoint"]
        basins = {}
        for r in fits:
            if not r["success"]:
                basins[r["basin"]] = basins.get(r["basin"], 0) + 1
        searched = [r["search"] for r in fits
                    if r.get("search") and r["search"].get("method") not in (None, "off")]
        evals = [x["point_evaluations"] for x in searched if x.get("point_evaluations") is not None]
        search_s = [x["seconds"] for x in searched if x.get("seconds") is not None]
        rows.append({
            "method": method, "n": len(fits), "ok": len(success), "chi2_ok": len(chi2_ok),
            "mid_ok": sum(r["success"] for r in mid), "mid_n": len(mid),
            "rnd_ok": sum(r["success"] for r in rnd), "rnd_n": len(rnd),
            "median_wall": statistics.median([r["wall_s"] for r in fits]) if fits else None,
            "max_wall": max([r["wall_s"] for r in fits]) if fits else None,
            "total_wall": sum(r["wall_s"] for r in fits),
            "median_search_s": statistics.median(search_s) if search_s else None,
            "median_evals": statistics.median(evals) if evals else None,
            "basins": ", ".join(f"{k} {v}" for k, v in
                                sorted(basins.items(), key=lambda kv: (-kv[1], kv[0]))) or "-",
        })
    return rows


def method_table(rows):
    head = ("| method | success | from midpoints | from random starts "
            "| optimum's chi2 (any parameters) | median wall per fit "
            "| max wall | all fits | median search | median point evaluations (search) "
            "| failures by basin |")
    lines = [head, "|" + "---|" * 11]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['method']} | skipped: {row['skipped']} | | | | | | | | | |")
            continue
        frac = row["ok"] / row["n"] if row["n"] else 0.0
        lines.append(
            f"| {row['method']} | {frac:.0%} ({row['ok']}/{row['n']}) "
            f"| {row['mid_ok']}/{row['mid_n']} | {row['rnd_ok']}/{row['rnd_n']} "
            f"| {row['chi2_ok']}/{row['n']} "
            f"| {fmt_g(row['median_wall'])} s | {fmt_g(row['max_wall'])} s "
            f"| {row['total_wall']:.0f} s "
            f"| {'-' if row['median_search_s'] is None else fmt_g(row['median_search_s']) + ' s'} "
            f"| {fmt_g(row['median_evals'])} "
            f"| {row['basins']} |")
    return lines


def set_table(sets):
    lines = ["| set | angles | frames | dt [s] | q [1/A] | gap [A] | D0 | alpha | D_offset "
             "| gamma_dot_t0 | beta | phi0 | shear phase [rad] | diffusion decay | reference chi2 "
             "| reference gamma_dot_t0 |", "|" + "---|" * 16]
    for ds in sets:
        t = ds["truth"]
        ref = ds.get("reference") or {}
        ref_chi2 = fmt_g(ref.get("chi2"), 8) if ref.get("ok") else ref.get("error", "-")
        ref_gamma = fmt_g(ref["values"]["gamma_dot_t0"]) if ref.get("ok") else "-"
        lines.append(
            f"| {ds['name']} | {len(ds['angles'])} | {ds['frames']} | {ds['dt']:.4g} "
            f"| {ds['q']:.4g} | {ds['gap']:.4g} | {t['D0']:.4g} | {t['alpha']:.3f} "
            f"| {t['D_offset']:.3g} | {t['gamma_dot_t0']:.3g} | {t['beta']:.3f} | {t['phi0']:.2f} "
            f"| {ds['phase']:.2f} ({ds['phase_best_angle']:.2f} at the best angle) "
            f"| {ds['decay']:.2f} | {ref_chi2} | {ref_gamma} |")
    return lines


# ----------------------------------------------------------------------------------------------


def main(argv):
    args = parse_args(argv)
    command_line = args.command_line or " ".join(shlex.quote(a) for a in [sys.argv[0]] + argv)
    header = [f"command: {command_line}"] + machine_lines()
    for binary in ("homodyne", "homodyne-simulate"):
        if not os.access(os.path.join(args.bin, binary), os.X_OK):
            sys.exit(f"error: {args.bin}/{binary} not found or not executable "
                     "(--bin / HOMODYNE_BIN)")
    _, version, _ = run_limited([os.path.join(args.bin, "homodyne"), "--version"], "/", 30)
    version = version.strip().splitlines()[0] if version.strip() else "?"
    header.append(f"binary: {args.bin}/homodyne ({version})")
    header.append(f"settings: {args.sets} data sets, midpoints + {args.starts} random starts each, "
                  f"methods {','.join(args.methods)}, frames {args.frames[0]}..{args.frames[1]}, "
                  f"angles {args.angles[0]}..{args.angles[1]}, seed {args.seed}, "
                  f"timeout {args.timeout:g} s per fit, "
                  f"success: chi2 <= reference + {args.dchi2:g} "
                  f"and physical parameters within {args.nsigma:g} reference uncertainties"
                  + (", gamma_dot_t_offset held at 0" if args.fix_gamma_offset else ""))
    for line in header:
        print(line, flush=True)

    flags = supported_flags(args)
    skipped = {}
    for method in args.methods:
        missing = [f for f in METHOD_FLAGS[method] if f.startswith("--") and f not in flags]
        if missing:
            skipped[method] = f"this homodyne has no {' '.join(missing)}"
            print(f"note: method {method} skipped: {skipped[method]}")
    ref_flags = [f for f in REFERENCE_FLAGS]
    if "--global-search" not in flags:
        ref_flags = []
        print("note: this homodyne has no --global-search; the reference fit runs without it")

    os.makedirs(args.work, exist_ok=True)
    rng_master = random.Random(args.seed)
    sets = []
    records = []
    began = time.monotonic()
    for index in range(args.sets):
        rng = random.Random(rng_master.getrandbits(64))
        ds = make_truth(rng, index, args)
        starts = [("midpoint", None)] + [(f"random{k + 1}", random_start(rng))
                                         for k in range(args.starts)]
        set_dir = os.path.join(args.work, ds["name"])
        subprocess.run(["rm", "-rf", set_dir], check=True)
        os.makedirs(set_dir)
        write_config(os.path.join(set_dir, "truth.yaml"), ds, ds["truth"], args.fix_gamma_offset)
        code, output, _ = run_limited([os.path.join(args.bin, "homodyne-simulate"), "--config",
                                       "truth.yaml"], set_dir, args.timeout)
        sets.append(ds)
        t = ds["truth"]
        print(f"\n{ds['name']}: {len(ds['angles'])} angles x {ds['frames']} frames, "
              f"dt {ds['dt']:.4g} s, "
              f"q {ds['q']:.4g}, gap {ds['gap']:.4g}; D0 {t['D0']:.4g} alpha {t['alpha']:.3f} "
              f"D_offset {t['D_offset']:.3g} gamma_dot_t0 {t['gamma_dot_t0']:.3g} "
              f"beta {t['beta']:.3f} "
              f"phi0 {t['phi0']:.2f}; shear phase {ds['phase']:.2f} rad, diffusion decay "
              f"{ds['decay']:.2f}", flush=True)
        if code != 0:
            ds["reference"] = {"ok": False, "error": f"simulate failed ({code})"}
            print(f"  homodyne-simulate failed ({code}): {output.strip()[-300:]}")
            continue
        ref = run_fit(args, set_dir, "truth.yaml", "reference", ref_flags)
        ds["reference"] = ref
        if not ref["ok"]:
            print(f"  reference fit failed: {ref['error']}; set left out")
            continue
        print(f"  reference (truth start{', ' + ' '.join(ref_flags) if ref_flags else ''}): "
              f"chi2 {ref['chi2']:.10g}, gamma_dot_t0 {ref['values']['gamma_dot_t0']:.4g} "
              f"+- {fmt_g(ref['uncertainties']['gamma_dot_t0'])}, phi0 "
              f"{ref['values']['phi0']:.3f}, {ref['wall_s']:.2f} s", flush=True)
        for start_name, start in starts:
            config = f"{start_name}.yaml"
            write_config(os.path.join(set_dir, config), ds, start, args.fix_gamma_offset)
            for method in args.methods:
                if method in skipped:
                    continue
                fit = run_fit(args, set_dir, config, f"{start_name}_{method}", METHOD_FLAGS[method])
                success, basin = judge(fit, ref, args)
                fit.update({"set": ds["name"], "start": start_name, "method": method,
                            "success": success, "basin": basin,
                            "start_values": start})
                if fit["ok"]:
                    fit["dchi2"] = fit["chi2"] - ref["chi2"]
                records.append(fit)
                detail = (f"dchi2 {fit['dchi2']:+.3g}, gamma_dot_t0 "
                          f"{fit['values']['gamma_dot_t0']:.3g}" if fit["ok"] else fit["error"])
                print(f"  {start_name:9s} {method:12s} {'ok  ' if success else 'FAIL'} "
                      f"{fit['wall_s']:6.2f} s  {basin if not success else ''}  ({detail})",
                      flush=True)
    total = time.monotonic() - began

    usable = [ds for ds in sets if ds.get("reference", {}).get("ok")]
    rows = summarise(records, args.methods, skipped)
    below = sum(1 for r in records if r["basin"] == "chi2 below the reference")
    fits_per_method = len(usable) * (1 + args.starts)
    summary = [f"{len(usable)} data sets with a reference fit (of {len(sets)}), "
               f"{fits_per_method} fits per method (midpoints + {args.starts} random starts "
               f"each); {len(records) + len(usable)} fits in {total:.0f} s"]
    if below:
        summary.append(f"warning: {below} fits ended more than {args.dchi2:g} below the "
                       "truth-started reference chi2 (the reference is then not the optimum)")
    table = method_table(rows)
    sets_lines = set_table(sets)
    print("\n" + "\n".join(summary))
    print("\n" + "\n".join(table))
    print("\nData sets (shear phase: q L / 2 pi x integral of gamma_dot over the window at "
          "cos = 1; diffusion decay: q^2 / 2 x integral of D):")
    print("\n".join(sets_lines))

    json_path = args.json or os.path.join(args.work, "results.json")
    with open(json_path, "w") as f:
        json.dump({"header": header, "sets": sets, "fits": records, "summary": rows}, f, indent=1)
    print(f"\nevery fit: {json_path}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(f"    {line}" for line in header) + "\n\n")
            f.write("\n".join(summary) + "\n\n")
            f.write("\n".join(table) + "\n\n")
            f.write("Success: chi2 <= the truth-started fit's + " f"{args.dchi2:g} and every "
                    f"physical parameter within {args.nsigma:g} of its uncertainties. Optimum's "
                    "chi2: the chi2 condition alone (the rest ended elsewhere on a flat valley "
                    "of the same chi2). Wall time: the whole `homodyne` run (load, search, fit, "
                    "result files). Search: `global_search.seconds` of "
                    "convergence_metrics.json.\n\n")
            f.write("\n".join(sets_lines) + "\n")
        print(f"markdown: {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
