#!/usr/bin/env python3
"""The repository stands alone and its layout is what the docs say (docs/design.md section 9).

Checks, over the files git tracks:
  1. no text cites a document the repository lacks (the design brief, the style notes or the
     reference package's specification by section number, or a folder beside the repository);
  2. every repository path named in README.md, docs/*.md and slurm/README.md exists (a brace
     list such as src/objective/batched_objective.{h,cc} names each file; names of files a run
     makes, such as checkpoints/homodyne_state_batch_000004.h5, are not checked);
  3. the public headers (include/homodyne/) include only public headers;
  4. the programs (src/cli/) and the Python module (python/) include only public headers and
     headers of their own folder.
Usage: self_contained_test.py REPO_DIR. Exit 0 when all hold, 1 with one line per failure.
"""
import os
import re
import subprocess
import sys

repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
this_file = os.path.relpath(os.path.abspath(__file__), repo)
files = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True,
                       check=True).stdout.split()
failures = []


def read(path):
    try:
        with open(os.path.join(repo, path), encoding="utf-8") as handle:
            return handle.read()
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None


# 1. Citations of documents outside the repository.
outside = re.compile(r"DESIGN sections? \d|STYLE habit|reference sections? \d|\(reference \d"
                     r"|\.\./shared|shared/reference|DESIGN\.md|STYLE\.md")
for path in files:
    if path == this_file or path.endswith((".h5", ".png")):
        continue
    text = read(path)
    if text is None:
        continue
    for number, line in enumerate(text.splitlines(), 1):
        if outside.search(line):
            failures.append(f"{path}:{number}: cites a document outside the repository: "
                            f"{line.strip()[:100]}")

# 2. Paths named in the documentation exist.
roots = ("src", "include", "tests", "docs", "bench", "scripts", "configs", "slurm", "python",
         "cuda", "cmake", "examples", "checkpoints")
path_pattern = re.compile(r"(?<![\w./-])((?:%s)/[\w./{},*-]*[\w}])" % "|".join(roots))
tracked = set(files)
tracked_dirs = {os.path.dirname(f) for f in files}
for d in list(tracked_dirs):
    while d:
        d = os.path.dirname(d)
        tracked_dirs.add(d)
docs = ["README.md", "slurm/README.md"] + [f for f in files if f.startswith("docs/") and
                                           f.endswith(".md")]


def expand(path):
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [alt for choice in match.group(1).split(",")
            for alt in expand(path[:match.start()] + choice + path[match.end():])]


# Names of files that a run makes, not the repository: checkpoints, a user's own config, built
# programs.
made_at_run_time = re.compile(r"^(checkpoints/homodyne_state_batch_|configs/my_|bench/\w+_benchmark$)")
for doc in docs:
    text = read(doc) or ""
    for number, line in enumerate(text.splitlines(), 1):
        for found in path_pattern.findall(line):
            if "*" in found or made_at_run_time.match(found):
                continue  # a pattern, not a path
            for path in expand(found.rstrip(".,:;")):
                path = path.rstrip("/")
                if path not in tracked and path not in tracked_dirs:
                    failures.append(f"{doc}:{number}: names {path}, which the repository lacks")

# 3 and 4. Who includes what.
include_pattern = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
public = {f[len("include/"):] for f in files if f.startswith("include/homodyne/")}
for path in files:
    in_public = path.startswith("include/homodyne/")
    in_shell = path.startswith(("src/cli/", "python/")) and path.endswith((".cc", ".h"))
    if not (in_public or in_shell):
        continue
    for included in include_pattern.findall(read(path) or ""):
        if included in public:
            continue
        if in_shell and os.path.join(os.path.dirname(path), included) in tracked:
            continue
        failures.append(f"{path}: includes \"{included}\", which is not a public header"
                        + ("" if in_public else " or one of its folder"))

for failure in failures:
    print(failure)
print(f"self-contained layout: {len(failures)} problems in {len(files)} files")
sys.exit(1 if failures else 0)
