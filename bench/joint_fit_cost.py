"""Cost of a joint fit of K q rings against one ring (docs/design.md section 2d).

Simulates K rings x A angles of laminar_flow (or static) with one physical truth on N frames
(each ring's matrices made by the model at the ring's q, plus Gaussian noise 0.01), fits
  one    the middle ring alone (A matrices),
  joint  every ring as one data set (K A matrices, physical parameters shared)
with the same config and start, and prints for each: its passes over the data
(FitResult.passes) and the points they evaluated (point_evaluations), iterations, the
engine's wall time (FitResult.total_seconds, the best of --repeats), seconds per pass, and the
physical parameters' uncertainties. A pass of the joint fit holds K times the points of one ring.

  PYTHONPATH=build/python /usr/bin/python3 bench/joint_fit_cost.py [--rings 3] [--angles 2] \
      [--frames 300] [--mode laminar_flow] [--repeats 3] [--threads 2]

Run on an idle machine; docs/performance.md, Joint fits of several q, has the numbers.
"""
import argparse

import numpy as np

import homodyne_cpp as hc

TRUTH = {
    "static": [3000.0, -0.5, 10.0],
    "laminar_flow": [3000.0, -0.5, 10.0, 2e-4, 0.3, 1e-5, 5.0],
}


def config_text(mode, dt):
    return {
        "analysis_mode": mode,
        "analyzer_parameters": {"dt": dt, "scattering": {"wavevector_q": 0.02},
                                "geometry": {"stator_rotor_gap": 2.0e6}},
        "optimization": {"nlsq": {"sigma": 0.01},
                         "streaming": {"enable_checkpoints": False}},
    }


def simulate(mode, rings, angles, frames, dt, seed):
    t = dt * np.arange(1, frames + 1)
    q_values = np.linspace(0.015, 0.025, rings) if rings > 1 else np.array([0.02])
    phi = np.tile(np.linspace(0.0, 90.0, angles, endpoint=False), rings)
    q = np.repeat(q_values, angles)
    contrast = np.repeat(np.linspace(0.32, 0.24, rings) if rings > 1 else [0.28], angles)
    clean = hc.compute_c2(TRUTH[mode], t, phi, q=q, L=2e6, contrast=contrast, offset=1.0,
                          mode=mode)
    noise = np.random.default_rng(seed).normal(0.0, 0.01, clean.shape)
    upper = np.triu(noise, 1)
    noisy = clean + upper + upper.transpose(0, 2, 1) + noise * np.eye(frames)  # symmetric
    return {"c2_exp": noisy, "t1": t, "t2": t, "phi_angles_list": phi, "wavevector_q_list": q}


def measure(data, config, repeats, threads, global_search):
    best = None
    for _ in range(repeats):
        result = hc.fit_nlsq(data, config, checkpoints=False, threads=threads,
                             global_search=global_search)
        assert result.success, result.message
        info = result.to_dict()
        if best is None or info["total_seconds"] < best["total_seconds"]:
            best = info
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rings", type=int, default=3)
    parser.add_argument("--angles", type=int, default=2)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--mode", default="laminar_flow", choices=sorted(TRUTH))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--global-search", default="auto",
                        help="auto (the default fit) or off (the local fit alone)")
    arguments = parser.parse_args()
    dt = 0.05
    config = hc.load_config(config_text(arguments.mode, dt))
    joint = simulate(arguments.mode, arguments.rings, arguments.angles, arguments.frames, dt, 5)
    middle = arguments.rings // 2
    a = arguments.angles
    one = {key: (value[middle * a:(middle + 1) * a] if key in
                 ("c2_exp", "phi_angles_list", "wavevector_q_list") else value)
           for key, value in joint.items()}
    rows = []
    for name, data in (("one", one), ("joint", joint)):
        info = measure(data, config, arguments.repeats, arguments.threads,
                       arguments.global_search)
        passes = info["passes"]
        rows.append((name, len(data["phi_angles_list"]), info, passes))
    print(f"{arguments.mode}, {arguments.rings} rings x {a} angles, {arguments.frames} frames, "
          f"{arguments.threads} threads, global search {arguments.global_search}, "
          f"best of {arguments.repeats}")
    print(f"{'fit':6} {'matrices':>8} {'passes':>7} {'global':>7} {'points':>10} {'iter':>5} "
          f"{'wall s':>8} {'fit s':>7} {'ns/point':>9}  physical uncertainties")
    for name, matrices, info, passes in rows:
        # The final fit's time per point evaluated (its passes; the global phase apart).
        per_point = 1e9 * info["optimization_seconds"] / max(info["point_evaluations"], 1)
        errors = " ".join(f"{p['name']}={p['uncertainty']:.3g}" for p in info["physical"])
        print(f"{name:6} {matrices:8d} {passes:7d} {info['global_search']['passes']:7d} "
              f"{info['point_evaluations']:10.3g} {info['iterations']:5d} "
              f"{info['total_seconds']:8.3f} {info['optimization_seconds']:7.3f} "
              f"{per_point:9.1f}  {errors}")
    (_, _, one_info, one_passes), (_, _, joint_info, joint_passes) = rows
    print(f"joint / one: wall {joint_info['total_seconds'] / one_info['total_seconds']:.2f}x, "
          f"passes {joint_passes / max(one_passes, 1):.2f}x, points evaluated "
          f"{joint_info['point_evaluations'] / one_info['point_evaluations']:.2f}x")


if __name__ == "__main__":
    main()
