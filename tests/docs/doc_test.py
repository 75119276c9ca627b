#!/usr/bin/env python3
"""The guide matches the program: runs what README.md and docs/*.md show and compares.

Usage: doc_test.py SOURCE_DIR BIN_DIR [CHECK...]
  SOURCE_DIR  the repository; BIN_DIR  the folder of the built homodyne, homodyne-config and
  homodyne-simulate (build/src/cli). CHECK: run only these checks (names below); default all.
Exit 0 when every check holds, 1 with one line per drift, each naming the document and its line.

The conventions of the documents (docs/conventions.md, Documentation checked by a test):
  <!-- doc-test -->               before a ```console block: its `$ ` lines (with `\\`
                                  continuations) are run in order and every other line is output
                                  the command must print (stdout and stderr together).
  <!-- doc-test: exit=N -->       the same, each command exiting N instead of 0.
  <!-- doc-test: skip REASON -->  a block that is not run, and why. In README.md and
                                  docs/user-guide.md every ```console block carries one of these.
  <!-- doc-test: file NAME -->    the next block's text is written to NAME in the working folder.
  <!-- doc-test: json-keys FILE --> every "key": of the next block is a key of the JSON FILE.
Output lines compare by shape: runs of blanks count as one, numbers match any number, `...` on a
line of its own stands for any lines (none included) and inside a line for any text. Without a
leading `...` the first output line is the program's first line; without a trailing one the last
is its last.

Blocks of one document run in order in one sandbox that looks like a checkout: configs/, scripts/
and slurm/ of the repository, and build/src/cli holding the programs, which are also on PATH;
`cd DIR` moves the working folder for the next commands. The checks:
  blocks    the marked blocks of README.md and docs/*.md (the other checks read what
            docs/user-guide.md's blocks left in build/demo: the demo's data and its fit)
  messages  the messages of docs/user-guide.md section 9, reproduced from a small bad config or
            file (MESSAGE_RECIPES); the rows that cannot be are listed in NOT_REPRODUCED with why
  results   the files of docs/results.md exist after the demo's fit, with the JSON fields it names
  flags     each flag the docs name exists in a program's --help (or is another tool's,
            OTHER_TOOLS_FLAGS); each flag in a --help is in the docs; README.md, Programs, lists
            every homodyne flag
  config    the keys of docs/configuration.md's tables are in homodyne-config's template (rows
            saying "not in the template" aside; the Simulation table's in configs/simulate_*.yaml)
  slurm     the start line slurm/README.md quotes is what the fit scripts print
"""
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

source_dir = os.path.abspath(sys.argv[1])
bin_dir = os.path.abspath(sys.argv[2])
only = set(sys.argv[3:])
failures = []
COMMAND_TIMEOUT_S = 120


def fail(where, message):
    failures.append(f"{where}: {message}")


def read_lines(relative):
    with open(os.path.join(source_dir, relative), encoding="utf-8") as handle:
        return handle.read().splitlines()


def doc_files():
    docs = sorted("docs/" + name for name in os.listdir(os.path.join(source_dir, "docs"))
                  if name.endswith(".md"))
    return ["README.md"] + docs


# --- the sandbox: a checkout with the programs ---------------------------------------------------

work_root = tempfile.mkdtemp(prefix="homodyne_doc_test_")
env = dict(os.environ)
env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
env["COLUMNS"] = "200"  # ls -C lays names out as on a wide terminal
for variable in ("HOMODYNE_MEMORY_LIMIT", "HOMODYNE_PLOT_SCRIPT", "HOMODYNE_PYTHON"):
    env.pop(variable, None)
# The pass kernel's baseline level, which every CPU runs: the levels' sums differ in the last bits,
# and a fit step at the rounding limit (the demo's last step) is accepted at one level and
# rejected at another, so the printed fits would depend on the machine.
env["HOMODYNE_ISA"] = "baseline"
# ls as on a terminal (columns), whatever stdout is.
PRELUDE = 'ls() { command ls -C "$@"; }\n'


def make_sandbox(name):
    root = os.path.join(work_root, name)
    os.makedirs(os.path.join(root, "build", "src"))
    for folder in ("configs", "scripts", "slurm"):
        os.symlink(os.path.join(source_dir, folder), os.path.join(root, folder))
    os.symlink(bin_dir, os.path.join(root, "build", "src", "cli"))
    return root


def run(command, cwd, extra_env=None):
    """Runs a bash command line; returns (exit code, output lines of stdout and stderr)."""
    try:
        done = subprocess.run(["bash", "-c", PRELUDE + command], cwd=cwd,
                              env=dict(env, **(extra_env or {})), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, [f"(timed out after {COMMAND_TIMEOUT_S} s)"]
    return done.returncode, done.stdout.decode("utf-8", "replace").splitlines()


# --- comparing output by shape -------------------------------------------------------------------

NUMBER_IN_TEXT = re.compile(r"(?<![A-Za-z_\d.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def shape(line):
    return NUMBER_IN_TEXT.sub("#", " ".join(line.split()))


def line_pattern(expected):
    parts = [re.escape(shape(part)).replace("\\#", "#").replace("\\ ", " ")
             for part in expected.split("...")]
    return re.compile("^" + ".*".join(part.strip() if len(parts) > 1 else part
                                      for part in parts) + "$")


def line_matches(pattern, actual):
    return pattern.match(shape(actual).strip()) is not None


def compare_output(doc, expected, actual, command):
    """expected: [(doc line number, text)]. Reports the first drifting line of each group."""
    groups, current = [], []
    for number, text in expected:
        if text.strip() == "...":
            groups.append(current)
            current = []
        else:
            current.append((number, text, line_pattern(text)))
    groups.append(current)
    anchored_start = bool(expected) and expected[0][1].strip() != "..."
    anchored_end = bool(expected) and expected[-1][1].strip() != "..."
    position = 0
    for index, group in enumerate(groups):
        if not group:
            continue
        last = index == len(groups) - 1
        starts = [position] if (index == 0 and anchored_start) else range(position, len(actual))
        best = (-1, position)
        found = None
        for start in starts:
            count = 0
            while (count < len(group) and start + count < len(actual)
                   and line_matches(group[count][2], actual[start + count])):
                count += 1
            if count == len(group) and (not (last and anchored_end) or
                                        start + count == len(actual)):
                found = start
                break
            if count > best[0]:
                best = (count, start)
        if found is None:
            count, start = best
            count = max(count, 0)
            number, text, _ = group[min(count, len(group) - 1)]
            at = start + count
            if at < len(actual):
                got = f"the program printed `{actual[at]}`"
            elif count == len(group):
                got = f"the program printed {len(actual) - at} more lines after it"
            else:
                close = difflib.get_close_matches(text, actual, n=1, cutoff=0.3)
                got = ("closest line printed: `" + close[0] + "`") if close else \
                    "no such line was printed"
            fail(f"{doc}:{number}", f"`{text.strip()}` does not match the output of "
                                    f"`{command}`: {got}")
            return
        position = found + len(group)


# --- check: blocks -------------------------------------------------------------------------------

MARKER = re.compile(r"^\s*<!--\s*doc-test(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def parse_blocks(doc):
    """Yields ((marker options, marker line) or None, language, fence line, [(number, text)])
    for every fenced block of doc; a marker that no block follows is a failure."""
    lines = read_lines(doc)
    i = 0
    pending = None
    while i < len(lines):
        marker = MARKER.match(lines[i])
        if marker:
            pending = (marker.group(1) or "", i + 1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if fence:
            indent, language = fence.group(1), fence.group(2)
            start = i + 1
            body = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append((i + 1, lines[i][len(indent):]))
                i += 1
            yield pending, language, start, body
            pending = None
        elif lines[i].strip() and pending is not None:
            fail(f"{doc}:{pending[1]}", "a doc-test marker must be the line before a ``` fence")
            pending = None
        i += 1


def split_console(doc, body):
    """[(command, command line number, [(number, expected output line)])]."""
    steps = []
    continuing = False
    for number, text in body:
        if continuing:
            steps[-1][0] += "\n" + text
            continuing = text.endswith("\\")
        elif text.startswith("$ "):
            steps.append([text[2:], number, []])
            continuing = text.endswith("\\")
        elif steps:
            steps[-1][2].append((number, text))
        else:
            fail(f"{doc}:{number}", "output before the first `$ ` command")
    return steps


def flatten_keys(value, keys):
    if isinstance(value, dict):
        for key, child in value.items():
            keys.add(key)
            flatten_keys(child, keys)
    elif isinstance(value, list):
        for child in value:
            flatten_keys(child, keys)
    return keys


sandboxes = {}
counts = {"blocks": 0, "commands": 0, "messages": 0}


def check_blocks():
    for doc in doc_files():
        must_mark = doc in ("README.md", "docs/user-guide.md")
        root = None
        cwd = None
        for marker, language, start, body in parse_blocks(doc):
            where = f"{doc}:{start}"
            if marker is None:
                if must_mark and language == "console":
                    fail(where, "a console block without <!-- doc-test --> or "
                                "<!-- doc-test: skip REASON --> before it")
                continue
            options, marker_line = marker
            if root is None:
                root = sandboxes[doc] = make_sandbox(doc.replace("/", "_"))
                cwd = root
            words = options.split()
            if words and words[0] == "skip":
                if len(words) < 2:
                    fail(f"{doc}:{marker_line}", "doc-test: skip needs a reason")
                continue
            if words and words[0] == "file":
                with open(os.path.join(cwd, words[1]), "w", encoding="utf-8") as handle:
                    handle.write("\n".join(text for _, text in body) + "\n")
                continue
            if words and words[0] == "json-keys":
                check_json_keys(doc, body, os.path.join(cwd, words[1]))
                continue
            counts["blocks"] += 1
            want_exit = 0
            for word in words:
                if word.startswith("exit="):
                    want_exit = int(word[5:])
                else:
                    fail(f"{doc}:{marker_line}", f"unknown doc-test option `{word}`")
            if language not in ("console", "bash"):
                fail(where, f"doc-test on a `{language}` block (console or bash only)")
                continue
            steps = (split_console(doc, body) if language == "console" else
                     [[text.split(" #")[0].strip(), number, []] for number, text in body
                      if text.strip() and not text.lstrip().startswith("#")])
            for command, number, expected in steps:
                cd = re.fullmatch(r"cd\s+(\S+)", command.strip())
                if cd:
                    cwd = os.path.normpath(os.path.join(cwd, cd.group(1)))
                    if not os.path.isdir(cwd):
                        fail(f"{doc}:{number}", f"`{command}`: no such folder")
                        return
                    continue
                code, output = run(command, cwd)
                counts["commands"] += 1
                if code != want_exit:
                    fail(f"{doc}:{number}", f"`{command}` exited {code}, expected {want_exit}: "
                                            + " | ".join(output[-5:]))
                    continue
                compare_output(doc, expected, output, command.split("\n")[0])
        if root is not None:
            sandboxes[doc + ":cwd"] = cwd


def check_json_keys(doc, body, path):
    try:
        with open(path, encoding="utf-8") as handle:
            keys = flatten_keys(json.load(handle), set())
    except (OSError, ValueError) as error:
        fail(f"{doc}:{body[0][0] if body else '?'}", f"cannot read {path}: {error}")
        return
    for number, text in body:
        for key in re.findall(r'"(\w+)"\s*:', text):
            if key not in keys:
                fail(f"{doc}:{number}", f"key \"{key}\" is not in {os.path.basename(path)}")


# --- check: messages of docs/user-guide.md section 9 ---------------------------------------------

DEMO_CONFIG = "laminar_flow.yaml"
# The first words of a message, its reproduction (shell commands run in build/demo after the
# guide's blocks) and the exit code. The message must appear in the output as the table quotes it.
MESSAGE_RECIPES = {
    "./homodyne_config.yaml: config file not found": ("mkdir -p empty && cd empty && homodyne", 1),
    "missing.yaml: config file not found": ("homodyne --config missing.yaml", 1),
    "broken.yaml: invalid YAML": (
        "printf 'analysis_mode: static\\nanalyzer_parameters:\\n  dt: [0.1, 0.2\\n' > broken.yaml"
        " && homodyne --config broken.yaml --dry-run", 1),
    "bad_iter.yaml: optimization.nlsq.max_iterations = -3": (
        "sed 's/max_iterations: 100/max_iterations: -3/' laminar_flow.yaml > bad_iter.yaml"
        " && homodyne --config bad_iter.yaml --dry-run", 1),
    "./data/simulated_laminar_flw.h5: no such file": (
        "sed 's/data_file_name: simulated_laminar_flow.h5/data_file_name: simulated_laminar_flw.h5/'"
        " laminar_flow.yaml > typo.yaml && homodyne --config typo.yaml --dry-run", 1),
    "laminar_flow.yaml: not an HDF5 file": (
        "homodyne --config laminar_flow.yaml --data-file laminar_flow.yaml --dry-run", 1),
    "./data/simulated_laminar_flow.h5: wavevector q = 0.01": (
        "sed 's/wavevector_q: 0.0054/wavevector_q: 0.01/' laminar_flow.yaml > q.yaml"
        " && homodyne --config q.yaml --dry-run", 1),
    "./data/simulated_laminar_flow.h5: start_frame = 600": (
        "sed 's/start_frame: 1/start_frame: 600/' laminar_flow.yaml > frames.yaml"
        " && homodyne --config frames.yaml --dry-run", 1),
    "results/nlsq/fitted_data.h5: neither APS-U layout": (
        "homodyne --config laminar_flow.yaml --data-file results/nlsq/fitted_data.h5 --dry-run", 1),
    "perangle.yaml: initial_parameters.per_angle_scaling.contrast": (
        "sed 's/^  values: \\(.*\\)$/  values: \\1\\n  per_angle_scaling:\\n    contrast: [0.3, 0.3]/'"
        " laminar_flow.yaml > perangle.yaml && homodyne --config perangle.yaml --output-dir r_x", 1),
    "fixall.yaml: initial_parameters.fixed_parameters fixes every parameter": (
        "sed 's/^  values: \\(.*\\)$/  values: \\1\\n  fixed_parameters: [D0, alpha, D_offset,"
        " gamma_dot_t0, beta, gamma_dot_t_offset, phi0, contrast, offset]/' laminar_flow.yaml"
        " > fixall.yaml && homodyne --config fixall.yaml --output-dir r_x", 1),
    "strategy standard needs about": (
        "homodyne --config laminar_flow.yaml --output-dir r_memory --strategy standard"
        " --solver ceres --memory-limit-gb 0.01", 1),
    "HOMODYNE_MEMORY_LIMIT = 'abc'": (
        "HOMODYNE_MEMORY_LIMIT=abc homodyne --config laminar_flow.yaml --dry-run", 1),
    "laminar_flow.yaml: optimization.nlsq.solver = ceres": (
        "homodyne --config laminar_flow.yaml --output-dir r_ceres --solver ceres"
        " --strategy large", 1),
    "laminar_flow.yaml: backend cuda": (
        "homodyne --config laminar_flow.yaml --backend cuda --output-dir r_x", 1),
    "--strategy fast": ("homodyne --config laminar_flow.yaml --strategy fast --dry-run", 2),
    "--initial-phi0 applies to laminar_flow only": (
        "homodyne --config laminar_flow.yaml --static-mode --initial-phi0 1 --dry-run", 2),
    "[warning] ... unknown key": (
        "sed 's/max_iterations:/max_iteration:/' laminar_flow.yaml > unknown.yaml"
        " && homodyne --config unknown.yaml --dry-run", 0),
    "--output-format xml": (
        "homodyne --config laminar_flow.yaml --output-format xml --dry-run", 2),
    "homodyne-config: -v is not a flag": ("homodyne-config -v laminar_flow.yaml", 2),
}
# Rows that a small bad config or file cannot produce, and why.
NOT_REPRODUCED = {
    "FILE: DATASET uses HDF5 filter": "needs a file written with another compression filter",
    "out of memory": "needs an allocation to fail after the fallbacks",
    "ck2/homodyne_state_batch_003060.h5: checkpoint was written for a different config":
        "needs an interrupted fit (tests/cli/fault_injection_test.sh, foreign_checkpoint)",
    "./data/simulated_laminar_flow.h5: dataset /xpcs/twotime/correlation_map/c2_00001: batch 3":
        "needs the test build homodyne_with_faults (tests/cli/fault_injection_test.sh)",
    "[warning] N non-finite data points excluded": "quoted from the source",
    "[warning] FILE: target q Q 1/A not in the file": "quoted from the source",
}


def message_rows():
    """The rows of the table of docs/user-guide.md section 9: (line number, message)."""
    lines = read_lines("docs/user-guide.md")
    start = next(i for i, line in enumerate(lines) if line.startswith("## 9."))
    rows = []
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith("## ") and number > start + 1:
            break
        match = re.match(r"^\| `(.*?)`( \((?:source|usage error)[^)]*\))? \|", line)
        if match and not line.startswith("| message"):
            rows.append((number, match.group(1)))
    return rows


def check_messages():
    demo = os.path.join(sandboxes.get("docs/user-guide.md", ""), "build", "demo")
    if not os.path.isfile(os.path.join(demo, DEMO_CONFIG)):
        fail("docs/user-guide.md", "the messages need build/demo from the guide's blocks")
        return
    # "backend cpu; built without CUDA", or with the runtime "CUDA runtime linked, ..."
    cuda_build = "CUDA runtime linked" in " ".join(run("homodyne --version", demo)[1])
    rows = message_rows()
    if not rows:
        fail("docs/user-guide.md", "section 9 has no table of messages")
    used = set()
    for number, message in rows:
        key = next((k for k in list(MESSAGE_RECIPES) + list(NOT_REPRODUCED)
                    if message.startswith(k)), None)
        if key is None:
            fail(f"docs/user-guide.md:{number}", f"`{message[:60]}...`: no reproduction in "
                 "tests/docs/doc_test.py (MESSAGE_RECIPES) and not listed in NOT_REPRODUCED")
            continue
        used.add(key)
        if key in NOT_REPRODUCED:
            continue
        command, want_exit = MESSAGE_RECIPES[key]
        code, output = run(command, demo)
        counts["messages"] += 1
        if code != want_exit:
            fail(f"docs/user-guide.md:{number}", f"`{command}` exited {code}, expected "
                                                 f"{want_exit}: " + " | ".join(output[-3:]))
            continue
        if key == "laminar_flow.yaml: backend cuda" and cuda_build:
            message = "laminar_flow.yaml: backend cuda: ..."  # the table names the CUDA variants
        pattern = quote_pattern(message)
        if not any(pattern.search(line) for line in output):
            close = difflib.get_close_matches(message, output, n=1, cutoff=0.3)
            fail(f"docs/user-guide.md:{number}",
                 f"`{message}` is not what `{command}` printed: "
                 f"`{close[0] if close else ' | '.join(output[-2:])}`")
    for key in sorted(set(MESSAGE_RECIPES) | set(NOT_REPRODUCED)):
        if key not in used:
            fail("docs/user-guide.md", f"section 9 no longer quotes `{key}` (a recipe or "
                                       "NOT_REPRODUCED entry of tests/docs/doc_test.py without "
                                       "its row)")


# --- check: results ------------------------------------------------------------------------------

def check_results():
    demo = os.path.join(sandboxes.get("docs/user-guide.md", ""), "build", "demo")
    folder = os.path.join(demo, "results", "nlsq")
    if not os.path.isdir(folder):
        fail("docs/results.md", "no results/nlsq from the guide's demo fit to compare with")
        return
    lines = read_lines("docs/results.md")
    in_files_table = False
    for number, line in enumerate(lines, 1):
        if line.startswith("| file | holds |"):
            in_files_table = True
            continue
        if in_files_table and not line.startswith("|"):
            in_files_table = False
        if not in_files_table or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        name = cells[0].strip("`")
        if "*" in name:
            continue  # written only with --save-plots
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            fail(f"docs/results.md:{number}", f"the demo fit wrote no {name}: "
                                              f"{sorted(os.listdir(folder))}")
            continue
        named = [word for word in re.findall(r"`([\w/]+)`", cells[1]) if "/" not in word]
        if name.endswith(".json"):
            with open(path, encoding="utf-8") as handle:
                keys = flatten_keys(json.load(handle), set())
        else:
            _, listing = run(f"h5ls -r {path}", demo)
            keys = {entry.split()[0].rsplit("/", 1)[-1] for entry in listing if entry.strip()}
        for word in named:
            if word not in keys:
                fail(f"docs/results.md:{number}", f"`{word}` is not in the demo's {name}")
    # Fields shared with the reference: "- `FILE`: ... `field` ..." bullets, with continuations.
    bullets = []  # [file, line number, text with its continuation lines]
    for number, line in enumerate(lines, 1):
        match = re.match(r"^- `(\w+\.json)`:", line)
        if match:
            bullets.append([match.group(1), number, line])
        elif bullets and bullets[-1][2] is not None and line.startswith("  "):
            bullets[-1][2] += " " + line
        elif bullets and bullets[-1][2] is not None:
            bullets.append([None, number, None])  # the bullet ended
    for name, number, text in bullets:
        if name is None:
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            keys = flatten_keys(json.load(handle), set())
        for word in re.findall(r"`(\w+)`", text.split(":", 1)[1]):
            if word not in keys:
                fail(f"docs/results.md:{number}", f"`{word}` is not a key of the demo's {name}")
    # The convergence history's table: each field it names is a key of the demo's history entries.
    with open(os.path.join(folder, "convergence_history.json"), encoding="utf-8") as handle:
        history_keys = flatten_keys(json.load(handle).get("history", []), set())
    in_table = False
    for number, line in enumerate(lines, 1):
        if line.startswith("| history field | meaning |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not line.startswith("|---"):
            for word in re.findall(r"`(\w+)`", line.strip("|").split("|", 1)[0]):
                if word not in history_keys:
                    fail(f"docs/results.md:{number}", f"`{word}` is not a field of the "
                                                      "demo's convergence_history.json history")
    # The global_search fields table.
    with open(os.path.join(folder, "convergence_metrics.json"), encoding="utf-8") as handle:
        global_keys = flatten_keys(json.load(handle).get("global_search", {}), set())
    in_table = False
    for number, line in enumerate(lines, 1):
        if line.startswith("| field | meaning |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not line.startswith("|---"):
            first, rest = line.strip("|").split("|", 1)
            words = re.findall(r"`(\w+)`", first)
            if words and words[0] == "minima":
                words += re.findall(r"`(\w+)`", rest)
            for word in words:
                if word not in global_keys:
                    fail(f"docs/results.md:{number}", f"`{word}` is not in global_search of "
                                                      "the demo's convergence_metrics.json")


# --- check: flags --------------------------------------------------------------------------------

PROGRAMS = ("homodyne", "homodyne-config", "homodyne-simulate")
# Flags of other tools that the docs show, by tool.
OTHER_TOOLS_FLAGS = {
    "cmake": {"--build", "--install", "--prefix", "--target"},
    "ctest": {"--test-dir", "--output-on-failure"},
    "sbatch, #SBATCH lines": {"--export", "--array", "--mem", "--mem-per-cpu", "--cpus-per-task",
                              "--time", "--signal", "--requeue", "--open-mode", "--gres",
                              "--output", "--job-name"},
    "scancel": {"--signal", "--batch"},
    "mpirun, srun (docs/design.md section 5b)": {"--oversubscribe", "--mca", "--mpi",
                                                 "--kill-on-bad-exit", "--allow-run-as-root",
                                                 "--cpu-bind", "--ntasks-per-node", "--nodes"},
    "bench/ programs": {"--benchmark", "--methods", "--repeats", "--float32", "--cold",
                        "--no-prefetch", "--passes", "--sets", "--starts", "--losses",
                        "--hot-fraction", "--fix-gamma-offset", "--rounds", "--repetitions",
                        "--filter", "--runs", "--scenario", "--json", "--fixed-truth", "--set",
                        "--first-set"},
    "pip, python3 -m venv": {"--no-build-isolation", "--system-site-packages"},
    "nvcc (cmake/HomodyneCuda.cmake, docs/backends.md)": {"--fmad", "--resource-usage"},
    "homodyne-plot (scripts/homodyne_plot.py)": {"--plot-dir", "--dpi", "--max-pixels",
                                                  "--cuts", "--debug", "--jobs",
                                                  "--plot-experimental-data", "--q", "--dt"},
}
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9]|-[a-zA-Z])(?![\w*-])")


def help_flags(program):
    _, output = run(f"{program} --help", work_root)
    flags = set()
    for line in output:
        match = re.match(r"^\s+((?:-{1,2}[\w-]+,?)+)", line)
        if match:
            flags.update(flag for flag in match.group(1).split(",") if flag)
    return flags


def check_flags():
    helps = {program: help_flags(program) for program in PROGRAMS}
    known = set().union(*helps.values())
    other = set().union(*OTHER_TOOLS_FLAGS.values())
    mentioned = {}
    for doc in doc_files() + ["slurm/README.md"]:
        for number, line in enumerate(read_lines(doc), 1):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9])(?![\w*-])", line):
                mentioned.setdefault(flag, (doc, number))
                if flag not in known and flag not in other:
                    fail(f"{doc}:{number}", f"{flag} is not a flag of {', '.join(PROGRAMS)} "
                         "(--help), nor of another tool in OTHER_TOOLS_FLAGS")
    for program, flags in helps.items():
        if not flags:
            fail(program, "--help printed no flags")
        for flag in sorted(flags):
            if flag.startswith("--") and flag not in mentioned and flag != "--help":
                fail(program, f"{flag} (in --help) is named in no document "
                              "(README.md, docs/*.md, slurm/README.md)")
    # README.md, Programs: the paragraph that lists homodyne's flags names all of them.
    lines = read_lines("README.md")
    start = next((i for i, line in enumerate(lines) if "`homodyne` accepts" in line), None)
    if start is None:
        fail("README.md", "no paragraph \"`homodyne` accepts ...\" listing the flags")
        return
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    listed = set(FLAG.findall(" ".join(lines[start:end])))
    for flag in sorted(listed - helps["homodyne"]):
        fail(f"README.md:{start + 1}", f"{flag} is listed but homodyne --help has no such flag")
    for flag in sorted(helps["homodyne"] - listed - {"--help", "-h"}):
        if not (flag == "--verbose" and "-v" in listed) and not (flag == "-h"):
            fail(f"README.md:{start + 1}", f"homodyne's {flag} (in --help) is not listed")


# --- check: config keys --------------------------------------------------------------------------

def template_keys(text):
    """Dotted paths of a block-style YAML text (list items add no level); flow maps included."""
    keys = set()
    stack = []  # (indent, key)
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        item = re.match(r"^(\s*)-\s*\{(.*)\}$", line)
        if item:  # - {name: D0, min: 100}: keys of the list above
            parents = [key for indent, key in stack if indent < len(item.group(1))]
            keys.update(".".join(parents + [inner])
                        for inner in re.findall(r"(\w+)\s*:", item.group(2)))
            continue
        match = re.match(r"^(\s*(?:-\s+)?)([A-Za-z_][\w]*)\s*:(.*)$", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([key for _, key in stack] + [match.group(2)])
        keys.add(path)
        stack.append((indent, match.group(2)))
        for inner in re.findall(r"[{,]\s*(\w+)\s*:", match.group(3)):
            keys.add(path + "." + inner)
    return keys


def documented_keys():
    """(line number, dotted key) of every key in the first column of configuration.md's tables."""
    lines = read_lines("docs/configuration.md")
    section_prefix = ""
    section = ""
    keys = []
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            section = line[3:]
            found = re.search(r"\((optimization\.streaming)\)", line)
            section_prefix = found.group(1) + "." if found else ""
            continue
        if not line.startswith("| `") or "not in the template" in line:
            continue
        cell = line.strip("|").split("|")[0]
        cell = re.sub(r"\(alias[^)]*\)|\(or `\w+`\)", "", cell)
        tokens = re.findall(r"`([^`]+)`", cell)
        parent = ""
        for token in tokens:
            if "(" in token or " " in token.replace(", ", ","):
                continue
            if token.startswith("."):
                key = parent + token[1:]
            elif "." not in token and parent and not section_prefix:
                key = parent + token
            else:
                key = section_prefix + token
                parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
            brace = re.match(r"^(.*)\{([^}]*)\}$", key)
            names = ([brace.group(1) + name.strip() for name in brace.group(2).split(",")]
                     if brace else [key])
            keys += [(number, name.replace("[]", ""), section) for name in names]
    return keys


def check_config():
    keys = set()
    for mode in ("laminar_flow", "static"):
        path = os.path.join(work_root, f"template_{mode}.yaml")
        code, output = run(f"homodyne-config --mode {mode} --output {path}", work_root)
        if code != 0:
            fail("homodyne-config", f"--mode {mode} exited {code}: {' | '.join(output)}")
            return
        with open(path, encoding="utf-8") as handle:
            keys |= template_keys(handle.read())
    simulation_keys = set()
    for mode in ("laminar_flow", "static"):
        with open(os.path.join(source_dir, "configs", f"simulate_{mode}.yaml"),
                  encoding="utf-8") as handle:
            simulation_keys |= template_keys(handle.read())
    for number, key, section in documented_keys():
        if section.startswith("Simulation"):
            if key not in simulation_keys:
                fail(f"docs/configuration.md:{number}", f"`{key}` is in neither "
                     "configs/simulate_laminar_flow.yaml nor configs/simulate_static.yaml")
        elif key not in keys:
            fail(f"docs/configuration.md:{number}", f"`{key}` is not in homodyne-config's "
                                                    "template (--mode laminar_flow or static)")


# --- check: slurm --------------------------------------------------------------------------------

def quote_pattern(text):
    """A quoted line as a regex: words in capitals (N, JOBID, HOST) stand for any word."""
    escaped = re.escape(text).replace(r"\.\.\.", ".*")
    return re.compile(re.sub(r"(?<!\w)[A-Z]+(?!\w)", r"\\S+", escaped))


def check_slurm():
    """slurm/README.md: "Each start begins with a line `start ...`; the array script's goes on
    with ... (`: task ...`)": the start lines of homodyne_cpu.sbatch and homodyne_array.sbatch,
    run without SLURM (its variables set by hand, homodyne --dry-run)."""
    lines = read_lines("slurm/README.md")
    number = next((i for i, line in enumerate(lines, 1) if "Each start" in line), None)
    if number is None:
        fail("slurm/README.md", "no sentence \"Each start begins with a line `start ...`\"")
        return
    quotes = re.findall(r"`([^`]+)`", " ".join(lines[number - 1:number + 2]))
    starts = [quote for quote in quotes if quote.startswith("start ")]
    suffixes = [quote for quote in quotes if quote.startswith(": task")]
    if not starts or not suffixes:
        fail(f"slurm/README.md:{number}", "expected the quoted start line and the array's "
                                          "`: task ...` continuation")
        return
    start_line, suffix = quote_pattern(starts[0]), quote_pattern(suffixes[0])
    demo = os.path.join(sandboxes.get("docs/user-guide.md", work_root), "build", "demo")
    config = os.path.join(demo, DEMO_CONFIG)
    with open(os.path.join(work_root, "list.txt"), "w", encoding="utf-8") as handle:
        handle.write("# one data set\n" + config + "\n")
    common = {"SLURM_JOB_ID": "4242", "SLURM_CPUS_PER_TASK": "1", "SLURM_MEM_PER_NODE": "2048",
              "SCRATCH_DIR": os.path.join(work_root, "scratch"), "HOMODYNE_ARGS": "--dry-run",
              "HOMODYNE": os.path.join(bin_dir, "homodyne"), "SLURM_SUBMIT_DIR": work_root,
              "CONFIG": config}
    runs = {"homodyne_cpu.sbatch": ({}, ""),
            "homodyne_array.sbatch": ({"LIST": "list.txt", "SLURM_ARRAY_TASK_ID": "1",
                                       "SLURM_ARRAY_JOB_ID": "4240"}, suffix)}
    for script, (extra, continuation) in runs.items():
        _, output = run(f"bash {os.path.join(source_dir, 'slurm', script)}", work_root,
                        dict(common, **extra))
        printed = [line.split("]: ", 1)[1] for line in output if "]: start " in line]
        if not printed:
            fail(f"slurm/README.md:{number}", f"slurm/{script} printed no start line: "
                                              + " | ".join(output[:3]))
            continue
        match = start_line.match(printed[0])
        rest = printed[0][match.end():] if match else ""
        if not match or (continuation and not continuation.fullmatch(rest)) or \
                (not continuation and rest):
            fail(f"slurm/README.md:{number}", f"`{starts[0]}` (and for the array "
                 f"`{suffixes[0]}`) is not how slurm/{script} starts: `{printed[0]}`")


CHECKS = [("blocks", check_blocks), ("messages", check_messages), ("results", check_results),
          ("flags", check_flags), ("config", check_config), ("slurm", check_slurm)]
unknown_checks = only - {name for name, _ in CHECKS}
if unknown_checks:
    print(f"unknown checks {sorted(unknown_checks)}; the checks: "
          f"{', '.join(name for name, _ in CHECKS)}")
    shutil.rmtree(work_root, ignore_errors=True)
    sys.exit(2)
try:
    for name, check in CHECKS:
        # messages, results and slurm use what the guide's blocks leave in build/demo.
        if only and name not in only and not (name == "blocks" and only & {"messages", "results",
                                                                            "slurm"}):
            continue
        before = len(failures)
        check()
        detail = {"blocks": f" ({counts['blocks']} blocks, {counts['commands']} commands run)",
                  "messages": f" ({counts['messages']} messages reproduced)"}.get(name, "")
        print(f"{name}: {'ok' if len(failures) == before else 'FAILED'}{detail}", flush=True)
finally:
    shutil.rmtree(work_root, ignore_errors=True)
for failure in failures:
    print(failure)
sys.exit(1 if failures else 0)
