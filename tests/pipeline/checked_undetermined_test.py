#!/usr/bin/env python3
"""A parameter that the data do not determine and that the checks name too is profiled once
(docs/results.md, Intervals).

The two-component example (configs/simulate_two_component.yaml, 3 angles x 500 frames): with
alpha_ref = 0 J^T J is singular along D0_ref, alpha_ref and D_offset_ref, and the global phase
finds another minimum with alpha_ref far away, so the check against the other minima names
alpha_ref as well. Its intervals must come from one profile (one set of profile points, each
value once), with one note per end and one warning for every profile that reaches a bound.

Usage: checked_undetermined_test.py BIN_DIR CONFIGS_DIR.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    bin_dir, configs = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    # Whether the global phase finds the other minimum that names alpha_ref depends on the pass
    # kernel's rounding (measured: yes with the baseline and AVX-512 levels, no with AVX2): the
    # baseline level, which every x86-64 CPU runs, makes the fit the same on every machine.
    os.environ["HOMODYNE_ISA"] = "baseline"
    failures = []
    with tempfile.TemporaryDirectory(prefix="checked_undetermined_") as work:
        os.chdir(work)
        config = "c.yaml"
        shutil.copy(os.path.join(configs, "simulate_two_component.yaml"), config)
        subprocess.run([os.path.join(bin_dir, "homodyne-simulate"), "--config", config],
                       check=True, capture_output=True)
        run = subprocess.run([os.path.join(bin_dir, "homodyne"), "--config", config,
                              "--output-dir", "out", "--threads", "2"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"FAIL: homodyne exited {run.returncode}\n{run.stderr[-2000:]}")
        log = run.stderr
        with open(os.path.join("out", "nlsq", "parameters.json")) as handle:
            parameters = json.load(handle)["parameters"]
    singular = re.search(r"the data do not determine ([\w, ]+) \(J\^T J is singular", log)
    checked = re.findall(r"the data do not determine ([\w, ]+) \((?:the global phase|4 standard)",
                         log)
    singular = set(singular.group(1).split(", ")) if singular else set()
    checked = {name for names in checked for name in names.split(", ")}
    both = sorted(singular & checked)
    print(f"singular {sorted(singular)}, named by the checks {sorted(checked)}: both {both}")
    if not both:
        failures.append("no parameter is both singular and named by the checks: the example "
                        "tests nothing (choose another set)")
    for name in both:
        estimate = parameters[name]
        values = estimate.get("profile", {}).get("values", [])
        print(f"{name}: {estimate['interval_method']} {estimate['interval_68']}, "
              f"{len(values)} profile values, note: {estimate.get('interval_note', '')}")
        if estimate["interval_method"] != "profile":
            failures.append(f"{name}: interval_method {estimate['interval_method']}, not profile")
        if len(values) != len(set(values)) or values != sorted(values):
            failures.append(f"{name}: its profile values repeat (profiled twice): {values}")
        notes = [note.strip() for note in estimate.get("interval_note", "").split(";")]
        if len(notes) != len(set(notes)) or any(note.count(" end ") > 1 for note in notes):
            failures.append(f"{name}: its interval_note repeats: {estimate['interval_note']}")
    # The printed table marks the parameters whose 68 % interval is their bounds.
    marked = {line.split()[0] for line in run.stdout.splitlines()
              if line.endswith(" (not determined within the bounds)")}
    spanning = {name for name, estimate in parameters.items()
                if estimate.get("interval_note", "").startswith(
                    "not determined within parameter_space.bounds")}
    print(f"marked in the table: {sorted(marked)}; intervals that are the bounds: "
          f"{sorted(spanning)}")
    if not spanning or marked != spanning:
        failures.append(f"the table marks {sorted(marked)} as not determined, the intervals "
                        f"say {sorted(spanning)}")
    warnings = [line for line in log.splitlines() if "the profile intervals of" in line]
    if len(warnings) != 1:
        failures.append(f"{len(warnings)} warnings of profile intervals at a bound, not one: "
                        f"{warnings}")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
