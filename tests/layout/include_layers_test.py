#!/usr/bin/env python3
"""The folders of src/ are layers, and no include climbs (docs/design.md section 9, Layers).

Every #include "..." of every source under src/, cuda/ and include/ is resolved as the compiler
resolves it (the including file's folder first, then src/ and include/, the paths the build
gives); the include fails when the header lies in a higher layer than the including file's. The
public headers (include/homodyne/) are the lowest layer: every file may include them, and they
include nothing else. A header that resolves nowhere fails too (a stale include), and so does a
file in a folder this test does not know (give the folder a layer in LAYERS).

Before checking the repository, the test checks itself on a small tree written to a temporary
folder: a climbing include, one that resolves nowhere and a folder with no layer must each fail,
and the includes the layers allow must not.

Usage: include_layers_test.py REPO_DIR. Exit 0 when every include holds, 1 with one line per
failure.
"""
import os
import re
import sys
import tempfile

# The layers, lowest first; a file may include headers of its own folder and of lower layers.
# Keep this list and docs/design.md section 9 (Layers) the same.
LAYERS = [
    "include",      # the public headers, include/homodyne/
    "base",         # what every folder may ask: the fault seam
    "model",        # the mode catalog, the modes' c2 and pass kernels
    "distributed",  # the process group (its interface is public: process_group.h)
    "config",       # YAML and overrides; reads the mode catalog
    "io",           # HDF5 data and result files; the path checks of config
    "checkpoint",   # checkpoint files and the checkpointed state (checkpoint_state.h)
    "objective",    # the batched objective, its passes and backends
    "cuda",         # the CUDA backend: defines what objective/cuda_*.h declare
    "optimize",     # the LM core, Ceres, variable projection, the global search
    "pipeline",     # the fit as steps
    "cli",          # the programs (public headers only: layout.self_contained)
]
RANK = {folder: rank for rank, folder in enumerate(LAYERS)}

# Includes allowed against the order, each with its reason: (including file, included header).
# Empty: the structure needs no exception.
EXCEPTIONS = {}

SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(relative_path):
    """The layer of a repository path: src/X/... -> X, cuda/... -> cuda, include/... -> include."""
    parts = relative_path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] in ("cuda", "include"):
        return parts[0]
    return None


def sources(repo):
    for top in ("src", "cuda", "include"):
        for folder, _, names in os.walk(os.path.join(repo, top)):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), repo).replace(os.sep, "/")


def resolve(repo, including, included):
    """The repository path `included` resolves to from `including`, or None."""
    for base in (os.path.dirname(including), "src", "include"):
        candidate = os.path.normpath(os.path.join(base, included)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(repo, candidate)):
            return candidate
    return None


def check(repo):
    failures = []
    for path in sorted(sources(repo)):
        layer = layer_of(path)
        if layer not in RANK:
            failures.append(f"{path}: in folder {layer or '?'}, which has no layer (give it one)")
            continue
        with open(os.path.join(repo, path), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        for number, line in enumerate(lines, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            included = match.group(1)
            target = resolve(repo, path, included)
            if target is None:
                failures.append(f"{path}:{number}: includes \"{included}\", which resolves to no "
                                "file of src/ or include/")
                continue
            target_layer = layer_of(target)
            if target_layer == layer or (path, included) in EXCEPTIONS:
                continue
            if target_layer not in RANK:
                failures.append(f"{path}:{number}: includes \"{included}\" ({target}), in a "
                                "folder with no layer")
            elif RANK[target_layer] > RANK[layer]:
                failures.append(f"{path}:{number}: includes \"{included}\": layer "
                                f"{target_layer} is above {layer}")
    return failures


def self_test():
    """The check fails on a climbing include, one that resolves nowhere and a folder with no layer,
    and passes the includes the layers allow. Returns the problems of the check itself."""
    tree = {
        "include/homodyne/fit.h": "",
        "src/base/fault.h": '#include "homodyne/fit.h"\n',
        "src/model/kernel.h": '#include "base/fault.h"\n#include "kernel_detail.h"\n',
        "src/model/kernel_detail.h": "",
        "src/model/homodyne/point.h": '#include "model/kernel.h"\n',
        "src/pipeline/fit.cc": '#include "model/homodyne/point.h"\n#include "homodyne/fit.h"\n',
        "src/objective/pass.cc": '#include "pipeline/fit_step.h"\n',    # climbs
        "src/pipeline/fit_step.h": "",
        "src/cuda_like/kernels.cc": "",                                  # no layer
        "cuda/kernels.cu": '#include "objective/pass.h"\n',
        "src/objective/pass.h": '#  include "missing/header.h"\n',      # resolves nowhere
    }
    expected = {"src/objective/pass.cc:1", "src/cuda_like/kernels.cc", "src/objective/pass.h:1"}
    with tempfile.TemporaryDirectory() as repo:
        for path, text in tree.items():
            os.makedirs(os.path.join(repo, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(repo, path), "w", encoding="utf-8") as handle:
                handle.write(text)
        found = {failure.split(": ")[0] for failure in check(repo)}
    problems = []
    if found != expected:
        problems.append(f"self-test: the check reported {sorted(found)}, expected "
                        f"{sorted(expected)}")
    return problems


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    failures = self_test() + check(repo)
    for failure in failures:
        print(failure)
    order = " < ".join(LAYERS)
    print(f"include layers ({order}): {len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
