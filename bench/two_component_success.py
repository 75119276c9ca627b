#!/usr/bin/env python3
"""Success rate of two_component fits from untuned starts (the default config).

Run through bench/two_component_success.sh (which passes the command line).
Python 3 standard library only.

For each of --sets simulated two_component data sets (seeded: the same options give the same
data; truths drawn over physically sensible ranges, see make_truth):
  1. a reference fit started at the truth with --global-search off (the true optimum's chi2);
  2. the default fit: initial_parameters.values null (the bound midpoints), no flag (global
     phase auto).
The default fit is judged against the truth, with its own standard errors (SE):
  success  every physical parameter is within --nsigma SE of the truth, OR is excused: named by
           the fit as undetermined ("the data do not determine ...") or in a pair the fit says it
           does not separate ("the data do not separate A and B (correlation c)") with
           |c| >= --min-correlation.
  strict   every physical parameter within --nsigma SE, no excuses.
  optimum  the fit's chi2 <= the truth-started fit's chi2 + --dchi2 (the true optimum reached).
A fit that exits non-zero or runs past --timeout fails with that reason. Each finished fit is
also sorted by where it ended (classify): optimum, near optimum (chi2 within 25: a flat valley),
flow phase off (the velocity phase across the window more than 1 rad from the truth's), label
swap (ref and sample exchanged), other basin. Each set prints its flow phase (flow_phase: the
velocity phase across the window at the best angle), and each parameter beyond the SE limit also
how far the truth-started fit's value is (in that fit's SE).
"""
import argparse
import json
import math
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

PHYSICAL = ["D0_ref", "alpha_ref", "D_offset_ref", "D0_sample", "alpha_sample",
            "D_offset_sample", "v0", "v_beta", "v_offset", "f0", "f1", "f2", "f3", "phi0_het"]
# The demo's geometry (configs/simulate_two_component.yaml).
DT = 0.1             # s
Q = 0.0054           # 1/Angstrom
ANGLE_SETS = {3: [0.0, 45.0, 90.0], 4: [0.0, 45.0, 90.0, 135.0]}
UNDETERMINED = re.compile(r"the data do not determine (.+?) \(")
NOT_SEPARATED = re.compile(
    r"the data do not separate (\w+) and (\w+) \(correlation ([-+0-9.eE]+)\)")


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
        description="Success rate of two_component fits from the bound midpoints.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin",
                   default=env_default("HOMODYNE_BIN", os.path.join(repo, "build/src/cli")),
                   help="folder holding homodyne and homodyne-simulate (env HOMODYNE_BIN)")
    p.add_argument("--sets", type=int, default=int(env_default("TC_SETS", 20)),
                   help="simulated data sets (env TC_SETS)")
    p.add_argument("--frames", type=parse_range, default=env_default("TC_FRAMES", "300:500"),
                   help="frames per data set, MIN:MAX, drawn uniformly (env TC_FRAMES)")
    p.add_argument("--angles", type=int, choices=sorted(ANGLE_SETS),
                   default=int(env_default("TC_ANGLES", 3)),
                   help="3 (0, 45, 90 deg) or 4 (and 135 deg) angles (env TC_ANGLES)")
    p.add_argument("--seed", type=int, default=int(env_default("TC_SEED", 1)),
                   help="seed of truths and noise (env TC_SEED)")
    p.add_argument("--timeout", type=float, default=float(env_default("TC_TIMEOUT", 600)),
                   help="seconds per fit; past it the fit is killed and counts as a failure "
                        "(env TC_TIMEOUT)")
    p.add_argument("--threads", type=int, default=None,
                   help="--threads for homodyne (unset: homodyne's own default, all cores)")
    p.add_argument("--max-iterations", type=int, default=None,
                   help="optimization.nlsq.max_iterations of every fit (unset: the config "
                        "default of configs/simulate_two_component.yaml, 200)")
    p.add_argument("--nsigma", type=float, default=4.0,
                   help="success: every physical parameter within NSIGMA of the fit's SE")
    p.add_argument("--min-correlation", type=float, default=0.99,
                   help="a parameter in a reported inseparable pair is excused when "
                        "|correlation| >= this")
    p.add_argument("--dchi2", type=float, default=1.0,
                   help="optimum reached: chi2 <= truth-started chi2 + DCHI2")
    p.add_argument("--work", default=os.path.join(env_default("BENCH_DIR", "/tmp/homodyne_bench"),
                                                  "two_component_success"),
                   help="scratch folder (env BENCH_DIR/two_component_success)")
    p.add_argument("--markdown", default=env_default("TC_MARKDOWN", None),
                   help="also write the tables as markdown to this file (env TC_MARKDOWN)")
    p.add_argument("--json", default=None,
                   help="write every fit's record to this file (unset: WORK/results.json)")
    p.add_argument("--command-line", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if isinstance(args.frames, str):
        args.frames = parse_range(args.frames)
    if args.sets < 1:
        p.error("--sets >= 1")
    if args.frames[0] < 10:
        p.error("--frames: at least 10")
    args.bin = os.path.abspath(args.bin)
    args.work = os.path.abspath(args.work)
    return args


# ----------------------------------------------------------------------------------------------
# Data sets


def log_uniform(rng, low, high):
    return 10 ** rng.uniform(math.log10(low), math.log10(high))


def small_offset(rng, d0):
    """D_offset: 0 half of the time, else up to 1 % of D0 (a small constant part)."""
    return 0.0 if rng.random() < 0.5 else round(rng.uniform(0.0, 0.01 * d0), 3)


def make_truth(rng, index, args):
    frames = rng.randint(*args.frames)
    d0_ref = log_uniform(rng, 1e2, 1e4)
    d0_sample = log_uniform(rng, 3e3, 1e5)
    truth = {
        "D0_ref": d0_ref,
        "alpha_ref": rng.uniform(-0.5, 0.3),
        "D_offset_ref": small_offset(rng, d0_ref),
        "D0_sample": d0_sample,
        "alpha_sample": rng.uniform(-0.5, 0.3),
        "D_offset_sample": small_offset(rng, d0_sample),
        "v0": log_uniform(rng, 1.0, 100.0),
        "v_beta": rng.uniform(0.2, 1.2),
        "v_offset": rng.uniform(-2.0, 2.0),
        "f0": rng.uniform(0.1, 0.5),
        "f1": rng.uniform(-0.02, 0.02),
        "f2": rng.uniform(0.0, 1.0),
        "f3": rng.uniform(0.05, 0.4),
        "phi0_het": rng.uniform(-5.0, 5.0),
    }
    truth = {k: float(f"{v:.6g}") for k, v in truth.items()}
    ds = {"name": f"set{index:02d}", "index": index, "frames": frames,
          "angles": ANGLE_SETS[args.angles], "truth": truth, "seed": args.seed * 1000 + index}
    ds["flow_phase"] = flow_phase(ds)
    return ds


def flow_phase(ds):
    """The velocity phase across the window at the best angle: q |cos(phi + phi0_het)| times the
    trapezoid integral of v(t) = v0 t^v_beta + v_offset over t = 0, dt, ... (rad). cos(Phi)
    oscillates with it: the larger, the narrower the basin in v0 and v_beta."""
    t = ds["truth"]
    times = [k * DT for k in range(ds["frames"])]
    rates = [(t["v0"] * x ** t["v_beta"] if x > 0 else 0.0) + t["v_offset"] for x in times]
    integral = DT * sum(0.5 * (a + b) for a, b in zip(rates, rates[1:]))
    cos_max = max(abs(math.cos(math.radians(a + t["phi0_het"]))) for a in ds["angles"])
    return Q * cos_max * abs(integral)


def yaml_list(values):
    return "[" + ", ".join(repr(float(v)) for v in values) + "]"


def write_config(path, ds, start, max_iterations):
    """The fit (and simulate) config of a data set; start: dict of physical values or None
    (the bound midpoints)."""
    t = ds["truth"]
    names = "null" if start is None else "[" + ", ".join(PHYSICAL) + "]"
    values = "null" if start is None else yaml_list([start[n] for n in PHYSICAL])
    with open(path, "w") as f:
        f.write(f"""# {ds['name']} (bench/two_component_success.py)
analysis_mode: two_component
analyzer_parameters:
  dt: {DT!r}
  start_frame: 1
  end_frame: -1
  scattering: {{wavevector_q: {Q!r}}}
experimental_data:
  data_folder_path: ./
  data_file_name: data.h5
simulation:
  output: ./data.h5
  format: aps_u
  frames: {ds['frames']}
  phi_angles: {yaml_list(ds['angles'])}
  parameters: {{{', '.join(f'{n}: {t[n]!r}' for n in PHYSICAL)}}}
  contrast: 0.3
  offset: 1.0
  noise_sigma: 0.01
  seed: {ds['seed']}
  dtype: float32
  compression: none
initial_parameters:
  parameter_names: {names}
  values: {values}
optimization:
  nlsq:
    max_iterations: {max_iterations}
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


def parse_warnings(output):
    """(undetermined names, [(a, b, correlation)]) from the fit's warnings."""
    undetermined = set()
    pairs = []
    for line in output.splitlines():
        match = UNDETERMINED.search(line)
        if match:
            for name in re.split(r",\s*|\s+and\s+", match.group(1)):
                if name.strip():
                    undetermined.add(name.strip())
        for a, b, corr in NOT_SEPARATED.findall(line):
            pairs.append((a, b, float(corr)))
    return sorted(undetermined), pairs


def run_fit(args, set_dir, config, out_name, flags):
    out_dir = os.path.join(set_dir, out_name)
    command = [os.path.join(args.bin, "homodyne"), "--config", config, "--output-dir", out_name,
               "--no-resume", "--quiet"] + flags
    if args.threads:
        command += ["--threads", str(args.threads)]
    code, output, wall = run_limited(command, set_dir, args.timeout)
    with open(os.path.join(set_dir, out_name + ".log"), "w") as f:
        f.write(output)
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
    record["values"] = {n: params["parameters"][n]["value"] for n in PHYSICAL}
    record["uncertainties"] = {n: params["parameters"][n].get("uncertainty") for n in PHYSICAL}
    record["status"] = params.get("convergence_status")
    record["undetermined"], record["pairs"] = parse_warnings(output)
    metrics = read_json(os.path.join(out_dir, "nlsq", "convergence_metrics.json")) or {}
    record["iterations"] = metrics.get("iterations")
    search = metrics.get("global_search")
    if isinstance(search, dict) and search.get("method") not in (None, "off"):
        record["search"] = {k: search.get(k) for k in
                            ("method", "starts", "local_fits", "point_evaluations", "seconds")}
        record["search"]["minima"] = len(search.get("minima") or [])
    timings = metrics.get("timings_s") or {}
    record["local_fit_s"] = timings.get("optimization")
    return record


def z_score(fit, name, truth):
    """|value - truth| in the fit's standard errors (inf for a zero or missing SE)."""
    error = abs(fit["values"][name] - truth[name])
    sigma = fit["uncertainties"].get(name)
    if sigma is None or not math.isfinite(sigma) or sigma <= 0.0:
        return math.inf if error > 0.0 else 0.0
    return error / sigma


def soft01(z):
    """The model's soft clip of the sample fraction to [0, 1] (two_component_point.h)."""
    def softplus(x):
        return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))
    return 1.0 - softplus(50.0 * (1.0 - softplus(50.0 * z) / 50.0)) / 50.0


def component_summary(p, frames):
    """Transport at the window's middle (D0 t^alpha + D_offset, floored at 1e-3) of each
    component, and the mean sample fraction over the window."""
    t_mid = 0.5 * frames * DT
    transport = {c: max(p[f"D0_{c}"] * t_mid ** p[f"alpha_{c}"] + p[f"D_offset_{c}"], 1e-3)
                 for c in ("ref", "sample")}
    times = [k * DT for k in range(1, frames)]
    fractions = [soft01(p["f0"] * math.exp(max(min(p["f1"] * (t - p["f2"]), 700.0), -700.0))
                        + p["f3"]) for t in times]
    return transport, sum(fractions) / len(fractions)


def velocity_phases(p, frames, angles):
    """The velocity phase across the window, q cos(phi + phi0_het) C[v](T), at each angle (rad)."""
    times = [k * DT for k in range(frames)]
    rates = [(p["v0"] * x ** p["v_beta"] if x > 0 else 0.0) + p["v_offset"] for x in times]
    integral = DT * sum(0.5 * (a + b) for a, b in zip(rates, rates[1:]))
    return [Q * math.cos(math.radians(a + p["phi0_het"])) * integral for a in angles]


def classify(fit, ds, args):
    """Where a finished fit ended, against the truth-started fit:
      "optimum"         chi2 within --dchi2;
      "near optimum"    within 25: on a flat valley (the f0-f2 and D0-D_offset degeneracies),
                        often stopped by max_iterations;
      "flow phase off"  the velocity phase across the window differs from the truth's by more
                        than 1 rad at some angle (cos(Phi) is even: the sign does not count);
      "label swap"      ref and sample exchanged: each fitted transport (at mid-window) nearer
                        the other component's true one, and the mean sample fraction nearer
                        1 - the true one;
      "other basin"."""
    if "dchi2" not in fit:
        return "no reference"
    if fit["dchi2"] <= args.dchi2:
        return "optimum"
    if fit["dchi2"] <= 25.0:
        return "near optimum"
    fitted_phases = velocity_phases(fit["values"], ds["frames"], ds["angles"])
    true_phases = velocity_phases(ds["truth"], ds["frames"], ds["angles"])
    fit["phase_error"] = max(min(abs(a - b), abs(a + b))
                             for a, b in zip(fitted_phases, true_phases))
    fitted, fitted_fraction = component_summary(fit["values"], ds["frames"])
    true, true_fraction = component_summary(ds["truth"], ds["frames"])
    fit["transport_mid"] = {"fit": fitted, "truth": true}
    fit["mean_sample_fraction"] = {"fit": fitted_fraction, "truth": true_fraction}
    if fit["phase_error"] > 1.0:
        return "flow phase off"
    lg = math.log10
    straight = abs(lg(fitted["ref"] / true["ref"])) + abs(lg(fitted["sample"] / true["sample"]))
    swapped = abs(lg(fitted["ref"] / true["sample"])) + abs(lg(fitted["sample"] / true["ref"]))
    fraction_swapped = abs(fitted_fraction - (1 - true_fraction)) < abs(fitted_fraction -
                                                                        true_fraction)
    if swapped < straight and fraction_swapped:
        return "label swap"
    return "other basin"


def judge(fit, ds, args):
    """Fills fit["success"], fit["strict"], fit["misses"] (name, z, excuse or None)."""
    if not fit["ok"]:
        fit.update(success=False, strict=False, misses=[])
        return
    excused = {name: "undetermined" for name in fit["undetermined"]}
    for a, b, corr in fit["pairs"]:
        if abs(corr) >= args.min_correlation:
            for name in (a, b):
                excused.setdefault(name, f"pair {a}/{b} {corr:+.4f}")
    misses = []
    for name in PHYSICAL:
        z = z_score(fit, name, ds["truth"])
        if z > args.nsigma:
            misses.append((name, z, excused.get(name)))
    fit["misses"] = misses
    fit["strict"] = not misses
    fit["success"] = all(excuse is not None for _, _, excuse in misses)


# ----------------------------------------------------------------------------------------------
# Report


def fmt_g(x, digits=3):
    return "-" if x is None else f"{x:.{digits}g}"


def machine_line():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return (f"machine: {os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), {model}; "
            f"load average at start {load}")


def miss_text(misses, ref=None, truth=None):
    """The parameters beyond the SE limit; with ref (a finished truth-started fit), also how far
    that fit's value is from the truth in its own SE (the optimum itself off the truth?)."""
    if not misses:
        return "-"
    parts = []
    for name, z, excuse in misses:
        text = f"{name} {z:.3g} SE"
        if ref and ref.get("ok"):
            text += f" (truth start: {z_score(ref, name, truth):.3g} SE)"
        if excuse:
            text += f" (excused: {excuse})"
        parts.append(text)
    return ", ".join(parts)


def set_table(sets):
    lines = ["| set | frames | flow phase [rad] | " + " | ".join(PHYSICAL) + " | default fit | strict | "
             "dchi2 vs truth start | ended | wall [s] | parameters beyond the SE limit |",
             "|" + "---|" * (len(PHYSICAL) + 9)]
    for ds in sets:
        t = ds["truth"]
        fit = ds.get("fit") or {}
        if not fit.get("ok"):
            verdict = fit.get("error", ds.get("error", "-"))
            lines.append(f"| {ds['name']} | {ds['frames']} | {ds['flow_phase']:.3g} | "
                         + " | ".join(f"{t[n]:.4g}" for n in PHYSICAL)
                         + f" | FAIL: {verdict} | | | | | |")
            continue
        lines.append(
            f"| {ds['name']} | {ds['frames']} | {ds['flow_phase']:.3g} | "
            + " | ".join(f"{t[n]:.4g}" for n in PHYSICAL)
            + f" | {'ok' if fit['success'] else 'FAIL'} | {'ok' if fit['strict'] else 'no'} "
            f"| {fmt_g(fit.get('dchi2'), 3)} | {fit.get('basin', '-')} | {fit['wall_s']:.1f} "
            f"| {miss_text(fit['misses'], ds.get('reference'), t)} |")
    return lines


# ----------------------------------------------------------------------------------------------


def main(argv):
    args = parse_args(argv)
    command_line = args.command_line or " ".join(shlex.quote(a) for a in [sys.argv[0]] + argv)
    header = [f"command: {command_line}", machine_line()]
    for binary in ("homodyne", "homodyne-simulate"):
        if not os.access(os.path.join(args.bin, binary), os.X_OK):
            sys.exit(f"error: {args.bin}/{binary} not found or not executable "
                     "(--bin / HOMODYNE_BIN)")
    _, version, _ = run_limited([os.path.join(args.bin, "homodyne"), "--version"], "/", 30)
    version = version.strip().splitlines()[0] if version.strip() else "?"
    header.append(f"binary: {args.bin}/homodyne ({version})")
    max_iterations = args.max_iterations or 200
    header.append(
        f"settings: {args.sets} data sets, {len(ANGLE_SETS[args.angles])} angles "
        f"{ANGLE_SETS[args.angles]}, frames {args.frames[0]}..{args.frames[1]}, dt {DT} s, "
        f"q {Q} 1/A, contrast 0.3, noise 0.01, seed {args.seed}, max_iterations "
        f"{max_iterations}, timeout {args.timeout:g} s per fit; success: every physical "
        f"parameter within {args.nsigma:g} SE of the truth or excused (named undetermined, or in "
        f"a reported pair with |correlation| >= {args.min_correlation:g}); optimum: chi2 <= "
        f"truth-started chi2 + {args.dchi2:g}")
    for line in header:
        print(line, flush=True)
    _, help_text, _ = run_limited([os.path.join(args.bin, "homodyne"), "--help"], "/", 30)
    ref_flags = ["--global-search", "off"] if "--global-search" in help_text else []
    if not ref_flags:
        print("note: this homodyne has no --global-search; the reference fit runs without it")

    os.makedirs(args.work, exist_ok=True)
    rng_master = random.Random(args.seed)
    sets = []
    began = time.monotonic()
    for index in range(args.sets):
        rng = random.Random(rng_master.getrandbits(64))
        ds = make_truth(rng, index, args)
        sets.append(ds)
        set_dir = os.path.join(args.work, ds["name"])
        subprocess.run(["rm", "-rf", set_dir], check=True)
        os.makedirs(set_dir)
        write_config(os.path.join(set_dir, "truth.yaml"), ds, ds["truth"], max_iterations)
        write_config(os.path.join(set_dir, "default.yaml"), ds, None, max_iterations)
        t = ds["truth"]
        print(f"\n{ds['name']}: {len(ds['angles'])} angles x {ds['frames']} frames, flow phase "
              f"{ds['flow_phase']:.3g} rad; " + " ".join(f"{n} {t[n]:.4g}" for n in PHYSICAL),
              flush=True)
        code, output, _ = run_limited([os.path.join(args.bin, "homodyne-simulate"), "--config",
                                       "truth.yaml"], set_dir, args.timeout)
        if code != 0:
            ds["error"] = f"simulate failed ({code})"
            print(f"  homodyne-simulate failed ({code}): {output.strip()[-300:]}")
            continue
        ref = run_fit(args, set_dir, "truth.yaml", "reference", ref_flags)
        ds["reference"] = ref
        if ref["ok"]:
            print(f"  truth start{', ' + ' '.join(ref_flags) if ref_flags else ''}: chi2 "
                  f"{ref['chi2']:.10g} ({ref['status']}, {ref['iterations']} iterations), "
                  f"{ref['wall_s']:.1f} s", flush=True)
        else:
            print(f"  truth start failed: {ref['error']}", flush=True)
        fit = run_fit(args, set_dir, "default.yaml", "default", [])
        ds["fit"] = fit
        judge(fit, ds, args)
        if not fit["ok"]:
            print(f"  default   FAIL {fit['wall_s']:.1f} s  {fit['error']}", flush=True)
            continue
        if ref["ok"]:
            fit["dchi2"] = fit["chi2"] - ref["chi2"]
            fit["optimum"] = fit["dchi2"] <= args.dchi2
        fit["basin"] = classify(fit, ds, args)
        search = fit.get("search") or {}
        print(f"  default   {'ok  ' if fit['success'] else 'FAIL'} {fit['wall_s']:.1f} s "
              f"(search {fmt_g(search.get('seconds'))} s, {search.get('local_fits', '-')} local "
              f"fits; local fit {fmt_g(fit.get('local_fit_s'))} s, {fit['iterations']} "
              f"iterations, {fit['status']}); chi2 {fit['chi2']:.10g}, dchi2 vs truth start "
              f"{fmt_g(fit.get('dchi2'), 4)} ({fit['basin']}); strict "
              f"{'ok' if fit['strict'] else 'no'}", flush=True)
        if fit.get("transport_mid"):
            tm, fr = fit["transport_mid"], fit["mean_sample_fraction"]
            print(f"    velocity phase off by {fit['phase_error']:.3g} rad; transport at "
                  f"mid-window ref/sample: fit {tm['fit']['ref']:.4g} / {tm['fit']['sample']:.4g}"
                  f", truth {tm['truth']['ref']:.4g} / {tm['truth']['sample']:.4g}; mean sample "
                  f"fraction: fit {fr['fit']:.3f}, truth {fr['truth']:.3f}")
        print(f"    undetermined: {', '.join(fit['undetermined']) or '-'}; pairs: "
              + (", ".join(f"{a}/{b} {c:+.4f}" for a, b, c in fit["pairs"]) or "-"))
        print(f"    beyond {args.nsigma:g} SE: {miss_text(fit['misses'], ref, t)}", flush=True)
    total = time.monotonic() - began

    fits = [ds["fit"] for ds in sets if ds.get("fit")]
    done = [f for f in fits if f["ok"]]
    success = sum(f["success"] for f in fits)
    strict = sum(f["strict"] for f in fits)
    optimum = sum(bool(f.get("optimum")) for f in fits)
    with_ref = sum(1 for f in fits if "optimum" in f)
    walls = [f["wall_s"] for f in fits]
    refs = [ds["reference"]["wall_s"] for ds in sets if ds.get("reference")]
    search_s = [f["search"]["seconds"] for f in done if f.get("search")
                and f["search"].get("seconds") is not None]
    both = sum(1 for f in fits if f["success"] and f.get("optimum"))
    basins = {}
    for f in done:
        basins[f.get("basin", "-")] = basins.get(f.get("basin", "-"), 0) + 1
    misses = {}
    for f in done:
        for name, _, excuse in f["misses"]:
            if excuse is None:
                misses[name] = misses.get(name, 0) + 1
    summary = [
        f"success: {success}/{len(sets)} sets ({success / len(sets):.0%}); strict (no excuses): "
        f"{strict}/{len(sets)}; optimum reached (chi2 <= truth start + {args.dchi2:g}): "
        f"{optimum}/{with_ref}; time per default fit: median "
        f"{fmt_g(statistics.median(walls) if walls else None)} s, max "
        f"{fmt_g(max(walls) if walls else None)} s (search median "
        f"{fmt_g(statistics.median(search_s) if search_s else None)} s); truth-started fit: "
        f"median {fmt_g(statistics.median(refs) if refs else None)} s; all in {total:.0f} s",
        f"success and optimum: {both}/{len(sets)}; where the default fits ended: "
        + ", ".join(f"{k} {v}" for k, v in sorted(basins.items(), key=lambda kv: -kv[1]))
        + (f", failed to run {len(fits) - len(done)}" if len(fits) > len(done) else ""),
        "unexcused misses by parameter: "
        + (", ".join(f"{k} {v}" for k, v in sorted(misses.items(), key=lambda kv: -kv[1]))
           or "-"),
    ]
    table = set_table(sets)
    print("\n" + "\n".join(summary))
    print("\n" + "\n".join(table))
    json_path = args.json or os.path.join(args.work, "results.json")
    with open(json_path, "w") as f:
        json.dump({"header": header, "sets": sets, "summary": summary}, f, indent=1)
    print(f"\nevery fit: {json_path}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(f"    {line}" for line in header) + "\n\n")
            f.write("\n".join(summary) + "\n\n")
            f.write("\n".join(table) + "\n")
        print(f"markdown: {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
