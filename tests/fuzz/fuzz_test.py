#!/usr/bin/env python3
"""Seeded mutation fuzzer of the homodyne programs (ctest `fuzz.programs`, label `fuzz`).

Usage: fuzz_test.py BIN_DIR [--seconds S] [--cases N] [--seed K] [--case I] [--timeout T]
                            [--only yaml|hdf5] [--failures-dir DIR] [--log FILE] [--keep-work]
       fuzz_test.py --self-test BIN_DIR   (the checks below, on shell commands; seconds)

BIN_DIR holds homodyne, homodyne-config and homodyne-simulate (the build's src/cli/). The
fuzzer reads its seeds from tests/fuzz/corpus/ and works in a temporary folder:

1. Seeds: every tests/fuzz/corpus/seeds/*.yaml is simulated (homodyne-simulate), validated,
   dry-run and fitted; each must exit 0, so that the mutations start from inputs the programs
   accept (a broken seed fails the test, it is not a finding).
2. As-is: every *.yaml of tests/fuzz/corpus/config/ (reproductions of fixed crashes, when the
   folder exists) runs through every program unchanged.
3. Mutations: case I (0, 1, 2, ...) draws from random.Random("SEED:I") either a YAML config
   (a seed or any *.yaml under tests/fuzz/corpus/, recursively, with 1 to 3 mutations: byte
   flips, deleted, duplicated or cut lines, extreme values, wrong types, unknown keys, aliases,
   tags, deep nesting) or an HDF5 data file (a seed's simulated file rewritten with h5py: wrong
   dtypes or shapes, NaN/Inf, missing datasets or links, huge declared shapes, odd filters,
   truncation, random bytes over the middle). Cases run in order until N cases or S seconds.

Every run of a program must end by itself within T seconds (no hang), not by a signal, with an
exit code of the documented set (0 finished, 1 bad input or failure, 2 usage, 3 interrupted:
docs/user-guide.md section 7), and a non-zero exit must have printed a message on stderr. The
children run with an address-space limit (HOMODYNE_FUZZ_MEMORY_GB, default 4: an input that asks
for more must be refused, a bad_alloc is a message too) and a file-size limit (256 MiB, SIGXFSZ
ignored, so a write past it fails like a full disk). A failing case is printed with its seed,
its mutations and the command that reproduces it, and its files are saved under
DIR/case-I/ (repro.sh runs it again).

The same SEED and corpus give the same cases on every machine (a file added to the corpus
changes what the cases draw); S only decides how many of them run (the summary says how many).
Defaults, also from the environment: S = HOMODYNE_FUZZ_SECONDS (120), N = HOMODYNE_FUZZ_CASES
(400), SEED = HOMODYNE_FUZZ_SEED (1), T = HOMODYNE_FUZZ_CASE_TIMEOUT (20), DIR =
HOMODYNE_FUZZ_FAILURES (fuzz_failures in the current folder). Exit status: 0 all passed, 1 a
finding, a broken seed or an error of the fuzzer itself, 77 no h5py/numpy (skipped).
"""

import argparse
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

try:
    import h5py
    import numpy as np
except ImportError:
    # The system Python has python3-h5py (scripts/install-dependencies.sh); another python3
    # on PATH may not.
    if sys.executable != "/usr/bin/python3" and os.access("/usr/bin/python3", os.X_OK) and \
            subprocess.run(["/usr/bin/python3", "-c", "import h5py, numpy"],
                           capture_output=True).returncode == 0:
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("SKIPPED: no Python with h5py and numpy (install python3-h5py, python3-numpy)")
    sys.exit(77)

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
DOCUMENTED_EXIT_CODES = {0, 1, 2, 3}  # docs/user-guide.md section 7, Exit codes
FILE_SIZE_LIMIT = 256 << 20

# ---------------------------------------------------------------------------------------------
# YAML mutations (text level: the programs' parser must survive what the text becomes)

EXTREME_SCALARS = [
    "0", "-0", "-1", "1", "1e308", "-1e308", "1e-308", "5e-324", "1e309", "-1e309", ".nan",
    ".inf", "-.inf", "nan", "inf", "NaN", "-inf", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "2147483648", "-2147483649", "4294967296",
    "1e20", "0x7fffffff", "0o17", "''", '""', "~", "null", "true", "no", "abc", "1_000", "+1",
    ".5", "1.", "1e", "-", "0.0000001", "3.0e-200", "1e-200", "'1e5'", "!!str 5", "!!binary aGk=",
    "!!float 1", "!!int 1.5", "[]", "{}", "[1, 2]", "{a: 1}", "[[1]]", "[.nan, .inf]", "[~]",
    "*undefined_alias", "'\\0'", '"\\0"', '"\\x00abc"', '"\\u00e9\\U0001F600"', "|\n  block",
    ">-\n  folded",
]
LONG_STRING = "x" * 100000
UNKNOWN_KEYS = ["unknown_key_zz", "optimisation", "nlsq", "<<", "? complex", "0", "true", "~",
                "'quoted key'", "parameters", "bounds", "name", "min", "values"]
KEY_VALUE = re.compile(r"^(\s*(?:-\s+)?)([^#:\s][^#:]*?):(\s+)([^#\s][^#]*?)(\s*(?:#.*)?)$")
FLOW_LIST = re.compile(r"^(\s*(?:-\s+)?[^#:]*:\s*)\[(.*)\](\s*(?:#.*)?)$")


def value_lines(lines):
    return [i for i, line in enumerate(lines) if KEY_VALUE.match(line)]


def extreme_value(rng):
    roll = rng.random()
    if roll < 0.04:
        return LONG_STRING
    if roll < 0.08:
        items = [rng.choice(EXTREME_SCALARS[:30]) for _ in range(rng.randint(0, 40))]
        return "[" + ", ".join(items) + "]"
    return rng.choice(EXTREME_SCALARS)


def m_byte_flips(text, rng):
    data = bytearray(text.encode("utf-8", "surrogateescape"))
    if not data:
        return text, "byte flips: empty"
    spots = []
    for _ in range(rng.randint(1, 8)):
        pos = rng.randrange(len(data))
        if rng.random() < 0.5:
            data[pos] ^= 1 << rng.randrange(8)
        else:
            data[pos] = rng.choice(b"\x00\t\r\n:-[]{}&*!|>'\"#%@`,?\xff\xc3")
        spots.append(pos)
    return data.decode("utf-8", "surrogateescape"), f"byte flips at {sorted(spots)}"


def m_delete_lines(text, rng):
    lines = text.split("\n")
    start = rng.randrange(len(lines))
    count = 1 if rng.random() < 0.7 else rng.randint(2, 6)
    del lines[start:start + count]
    return "\n".join(lines), f"deleted lines {start + 1}..{start + count}"


def m_duplicate_lines(text, rng):
    lines = text.split("\n")
    start = rng.randrange(len(lines))
    count = 1 if rng.random() < 0.7 else rng.randint(2, 6)
    block = lines[start:start + count]
    lines[start:start] = block * rng.choice([1, 1, 2, 50])
    return "\n".join(lines), f"duplicated lines {start + 1}..{start + count}"


def m_swap_value(text, rng):
    lines = text.split("\n")
    candidates = value_lines(lines)
    if not candidates:
        return m_byte_flips(text, rng)
    i = rng.choice(candidates)
    m = KEY_VALUE.match(lines[i])
    value = extreme_value(rng)
    if "\n" in value:  # a block scalar: indent its lines under the key
        head, rest = value.split("\n", 1)
        value = head + "\n" + " " * (len(m.group(1)) + 2) + rest.strip()
    lines[i] = f"{m.group(1)}{m.group(2)}:{m.group(3)}{value}{m.group(5)}"
    return "\n".join(lines), f"line {i + 1}: {m.group(2).strip()} = {value[:60]!r}"


NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
MAGNITUDES = ["1e-300", "1e-200", "1e-100", "1e-30", "1e-12", "1e12", "1e30", "1e100", "1e200",
              "1e300", "-1e-200", "-1e200"]


def m_magnitude(text, rng):
    # A number of the right type at an extreme magnitude: what a valid-looking config can ask.
    lines = text.split("\n")
    candidates = [i for i in value_lines(lines) if NUMBER.match(KEY_VALUE.match(lines[i]).group(4))]
    if not candidates:
        return m_swap_value(text, rng)
    i = rng.choice(candidates)
    m = KEY_VALUE.match(lines[i])
    value = rng.choice(MAGNITUDES)
    if rng.random() < 0.4:  # scaled, keeping the sign
        value = repr(float(m.group(4)) * 10.0 ** rng.choice([-300, -200, -100, -20, 20, 100, 200]))
    lines[i] = f"{m.group(1)}{m.group(2)}:{m.group(3)}{value}{m.group(5)}"
    return "\n".join(lines), f"line {i + 1}: {m.group(2).strip()} = {value}"


# Default bounds of the physical parameters (docs/configuration.md, Parameters and Two-component
# mode): starts on a bound are legal and must fit or be refused cleanly.
DEFAULT_BOUNDS = {
    "D0": (1e2, 1e5), "alpha": (-2, 2), "D_offset": (-1e5, 1e5), "gamma_dot_t0": (1e-6, 0.5),
    "beta": (-2, 2), "gamma_dot_t_offset": (-0.1, 0.1), "phi0": (-10, 10),
    "D0_ref": (0, 1e6), "alpha_ref": (-2, 2), "D_offset_ref": (-1e4, 1e4), "D0_sample": (0, 1e6),
    "alpha_sample": (-2, 2), "D_offset_sample": (-1e4, 1e4), "v0": (0, 1e6), "v_beta": (0, 2),
    "v_offset": (-100, 100), "f0": (0, 1), "f1": (-1, 1), "f2": (-1, 1), "f3": (-1, 1),
    "phi0_het": (-10, 10),
}


def m_values_at_bounds(text, rng):
    names = re.search(r"^\s*parameter_names:\s*\[(.*)\]", text, re.M)
    values = re.search(r"^(\s*values:\s*)\[(.*)\]", text, re.M)
    if not names or not values:
        return m_magnitude(text, rng)
    which = rng.choice(["min", "max", "mixed", "one"])
    current = [v.strip() for v in values.group(2).split(",")]
    new = []
    for k, name in enumerate(n.strip() for n in names.group(1).split(",")):
        low, high = DEFAULT_BOUNDS.get(name, (0, 1))
        pick = {"min": low, "max": high}.get(which, rng.choice([low, high]))
        if which == "one" and k != 0:
            pick = current[k] if k < len(current) else pick
        new.append(str(pick))
    text = text[:values.start(2)] + ", ".join(new) + text[values.end(2):]
    return text, f"initial values on their bounds ({which}): [{', '.join(new)}]"


def m_list_element(text, rng):
    lines = text.split("\n")
    candidates = [i for i, line in enumerate(lines) if FLOW_LIST.match(line)]
    if not candidates:
        return m_swap_value(text, rng)
    i = rng.choice(candidates)
    m = FLOW_LIST.match(lines[i])
    items = [item.strip() for item in m.group(2).split(",")] if m.group(2).strip() else []
    action = rng.choice(["replace", "drop", "add", "empty", "repeat"])
    if action == "replace" and items:
        items[rng.randrange(len(items))] = rng.choice(EXTREME_SCALARS)
    elif action == "drop" and items:
        del items[rng.randrange(len(items))]
    elif action == "add":
        items.insert(rng.randint(0, len(items)), rng.choice(EXTREME_SCALARS[:40]))
    elif action == "repeat":
        items = items * rng.choice([2, 50, 500])  # at most 1500 angles: seconds of work
    else:
        items = []
    lines[i] = f"{m.group(1)}[{', '.join(items)}]{m.group(3)}"
    return "\n".join(lines), f"line {i + 1}: list {action}"


def m_wrong_type(text, rng):
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    line = lines[i]
    indent = len(line) - len(line.lstrip())
    stripped = line.strip()
    if stripped.endswith(":") and not stripped.startswith("#"):
        # A mapping's key: give it a scalar or a list in place of its block.
        replacement = rng.choice(["5", "[1, 2]", "''", "~", "- 1"])
        lines[i] = line + " " + replacement
        return "\n".join(lines), f"line {i + 1}: mapping {stripped} given {replacement!r}"
    m = KEY_VALUE.match(line)
    if m:
        kind = rng.choice(["list", "map", "block list", "block map"])
        if kind == "list":
            value = "[1.0, 2.0, 3.0]"
        elif kind == "map":
            value = "{value: 1.0, min: 0}"
        else:
            value = ""
        lines[i] = f"{m.group(1)}{m.group(2)}:{' ' + value if value else ''}"
        child = " " * (indent + 2)
        if kind == "block list":
            lines[i + 1:i + 1] = [child + "- 1", child + "- two"]
        elif kind == "block map":
            lines[i + 1:i + 1] = [child + "nested: 1", child + "other: [x]"]
        return "\n".join(lines), f"line {i + 1}: {m.group(2).strip()} as a {kind}"
    return m_swap_value(text, rng)


def m_unknown_key(text, rng):
    lines = text.split("\n")
    i = rng.randrange(len(lines) + 1)
    reference = lines[i] if i < len(lines) else ""
    indent = " " * (len(reference) - len(reference.lstrip()))
    key = rng.choice(UNKNOWN_KEYS)
    value = rng.choice(["1", "[1, 2]", "{a: b}", "~", LONG_STRING[:rng.choice([10, 5000])]])
    lines.insert(i, f"{indent}{key}: {value}")
    return "\n".join(lines), f"inserted {key!r} at line {i + 1}"


def m_alias(text, rng):
    lines = text.split("\n")
    candidates = value_lines(lines)
    kind = rng.choice(["scalar", "scalar", "mapping", "undefined", "self", "merge", "laughs"])
    if kind in ("scalar", "mapping") and len(candidates) >= 2:
        a, b = rng.sample(candidates, 2)
        ma = KEY_VALUE.match(lines[a])
        mb = KEY_VALUE.match(lines[b])
        if kind == "scalar":
            lines[a] = f"{ma.group(1)}{ma.group(2)}:{ma.group(3)}&fz {ma.group(4)}{ma.group(5)}"
        else:
            blocks = [j for j, line in enumerate(lines) if line.rstrip().endswith(":")]
            if not blocks:
                return m_swap_value(text, rng)
            a = rng.choice(blocks)
            lines[a] = lines[a].rstrip() + " &fz"
        if b == a:
            return "\n".join(lines), "anchor only"
        lines[b] = f"{mb.group(1)}{mb.group(2)}:{mb.group(3)}*fz{mb.group(5)}"
        return "\n".join(lines), f"{kind} anchor at line {a + 1}, alias at line {b + 1}"
    if kind == "merge":
        lines.append("defaults: &fzm {max_iterations: 7, sigma: 0.02}")
        lines.append("optimization_extra:\n  <<: *fzm\n  <<: [*fzm, *fzm]")
        return "\n".join(lines), "merge keys"
    if kind == "laughs":
        depth = rng.randint(4, 9)
        out = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        for level in range(1, depth):
            refs = ", ".join([f"*l{level - 1}"] * 10)
            out.append(f"l{level}: &l{level} [{refs}]")
        target = rng.choice(candidates) if candidates else None
        if target is not None:
            m = KEY_VALUE.match(lines[target])
            lines[target] = f"{m.group(1)}{m.group(2)}:{m.group(3)}*l{depth - 1}{m.group(5)}"
        return "\n".join(out + lines), f"alias expansion 10^{depth} (billion laughs)"
    if kind == "self":
        # An alias inside its own anchor's node: a cycle the loader must refuse or survive.
        lines.append(rng.choice(["a: &x [*x]", "a: &x {k: *x}", "fixed: &x [1, *x]"]))
        return "\n".join(lines), "self-referencing alias"
    target = rng.choice(candidates) if candidates else None
    if target is None:
        lines.append("x: *nowhere")
    else:
        m = KEY_VALUE.match(lines[target])
        lines[target] = f"{m.group(1)}{m.group(2)}:{m.group(3)}*nowhere{m.group(5)}"
    return "\n".join(lines), "undefined alias"


def m_structure(text, rng):
    kind = rng.choice(["nesting", "documents", "tabs", "crlf", "bom", "nul", "cut", "flow",
                       "empty", "splice"])
    if kind == "nesting":
        depth = rng.choice([100, 1000, 100000])
        opener, closer = rng.choice([("[", "]"), ("{a: ", "}")])
        return text + f"\ndeep: {opener * depth}1{closer * depth}\n", f"nesting depth {depth}"
    if kind == "documents":
        return text + "\n---\n" + text + "\n...\n", "two documents"
    if kind == "tabs":
        return text.replace("  ", "\t", rng.randint(1, 5)), "tabs for indentation"
    if kind == "crlf":
        return text.replace("\n", "\r\n"), "CRLF line ends"
    if kind == "bom":
        return "\ufeff" + text, "byte-order mark"
    if kind == "nul":
        pos = rng.randrange(len(text) + 1)
        return text[:pos] + "\0" + text[pos:], f"NUL byte at {pos}"
    if kind == "cut":
        pos = rng.randrange(len(text) + 1)
        return text[:pos], f"cut at byte {pos}"
    if kind == "flow":
        return "{" + text.replace("\n", " ") + "}", "whole file in braces"
    if kind == "empty":
        return rng.choice(["", "\n", "~\n", "[]\n", "- 1\n", "just text\n", "analysis_mode:\n"]), \
            "replaced by a near-empty document"
    lines = text.split("\n")
    other = rng.choice(SEED_TEXTS).split("\n")
    start = rng.randrange(len(other))
    lines[rng.randrange(len(lines) + 1):0] = other[start:start + rng.randint(1, 10)]
    return "\n".join(lines), "spliced lines of another seed"


YAML_MUTATIONS = [
    (m_byte_flips, 3), (m_delete_lines, 3), (m_duplicate_lines, 2), (m_swap_value, 10),
    (m_list_element, 3), (m_wrong_type, 4), (m_unknown_key, 2), (m_alias, 2), (m_structure, 2),
    (m_magnitude, 3), (m_values_at_bounds, 1),
]
SEED_TEXTS = []  # filled by main(): every seed's text, for splices


def mutate_yaml(text, rng):
    notes = []
    functions = [f for f, _ in YAML_MUTATIONS]
    weights = [w for _, w in YAML_MUTATIONS]
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        function = rng.choices(functions, weights)[0]
        text, note = function(text, rng)
        notes.append(f"{function.__name__[2:]}: {note}")
    return text, notes


# ---------------------------------------------------------------------------------------------
# HDF5 mutations (h5py rewrites a copy of a seed's simulated file)

def datasets_of(f):
    found = []
    f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return sorted(found)


def groups_of(f):
    found = []
    f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Group) else None)
    return sorted(found)


def rewrite(f, name, data, **kwargs):
    del f[name]
    f.create_dataset(name, data=data, **kwargs)


def h_dtype(f, rng):
    name = rng.choice(datasets_of(f))
    data = f[name][()]
    dtype = rng.choice(["i4", "u1", "f2", "c8", "?", "S8", ">f8", ">f4", "i8", "str", "compound"])
    if dtype == "str":
        rewrite(f, name, np.array(np.asarray(data).astype(str).tolist(), dtype=object)
                if np.ndim(data) else str(data), dtype=h5py.string_dtype())
    elif dtype == "compound":
        out = np.zeros(np.shape(data), dtype=[("re", "f8"), ("im", "f8")])
        rewrite(f, name, out)
    else:
        with np.errstate(all="ignore"):
            rewrite(f, name, np.asarray(data).astype(dtype))
    return f"{name} as {dtype}"


def h_shape(f, rng):
    name = rng.choice(datasets_of(f))
    data = np.asarray(f[name][()])
    kind = rng.choice(["drop row", "flatten", "add axis", "empty", "1x1", "scalar", "transpose3",
                       "huge row"])
    if kind == "drop row" and data.ndim >= 1 and data.shape[0] > 0:
        new = data[:-1]
    elif kind == "flatten":
        new = data.reshape(-1)
    elif kind == "add axis":
        new = data[np.newaxis, ...]
    elif kind == "empty":
        new = np.zeros((0,) * max(data.ndim, 1),
                       dtype=data.dtype if data.dtype.kind != "O" else "f8")
    elif kind == "1x1":
        new = np.ones((1, 1), dtype="f4")
    elif kind == "scalar":
        new = np.float64(1.0)
    elif kind == "transpose3":
        new = np.ones((3, 2, 2), dtype="f4")
    else:
        new = np.ones((1, 100000), dtype="f8")
    rewrite(f, name, new)
    return f"{name} {kind} -> shape {np.shape(new)}"


def h_fill(f, rng):
    name = rng.choice(datasets_of(f))
    data = np.array(f[name][()], dtype="f8", copy=True) if f[name].dtype.kind in "fiu" else None
    if data is None or data.size == 0:
        return h_delete(f, rng)
    value = rng.choice([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e308, -1e308, 1e-308, 1e30])
    where = rng.choice(["all", "one", "diagonal", "half"])
    flat = data.reshape(-1)
    if where == "all":
        flat[:] = value
    elif where == "one":
        flat[rng.randrange(flat.size)] = value
    elif where == "diagonal" and data.ndim == 2:
        np.fill_diagonal(data, value)
    else:
        flat[: flat.size // 2] = value
    kind = f[name].dtype
    with np.errstate(all="ignore"):
        rewrite(f, name, data.astype(kind))
    return f"{name} {where} = {value}"


def h_delete(f, rng):
    names = datasets_of(f) + groups_of(f)
    name = rng.choice(names)
    del f[name]
    return f"deleted {name}"


def h_link(f, rng):
    names = datasets_of(f) + groups_of(f)
    name = rng.choice(names)
    kind = rng.choice(["soft missing", "external missing", "soft loop", "soft to other"])
    del f[name]
    if kind == "soft missing":
        f[name] = h5py.SoftLink("/no/such/object")
    elif kind == "external missing":
        f[name] = h5py.ExternalLink("no_such_file.h5", "/xpcs")
    elif kind == "soft loop":
        f[name] = h5py.SoftLink("/" + name)
    else:
        f[name] = h5py.SoftLink("/" + rng.choice([n for n in names if n != name] or ["x"]))
    return f"{name} replaced by a {kind} link"


def h_group_swap(f, rng):
    groups = groups_of(f)
    if groups and rng.random() < 0.5:
        name = rng.choice(groups)
        del f[name]
        f.create_dataset(name, data=np.arange(4.0))
        return f"group {name} replaced by a dataset"
    name = rng.choice(datasets_of(f))
    del f[name]
    f.create_group(name).create_dataset("inner", data=np.ones((3, 3)))
    return f"dataset {name} replaced by a group"


def h_huge(f, rng):
    name = rng.choice(datasets_of(f))
    side = rng.choice([100000, 3000000, 2**31])
    shape = (side, side) if rng.random() < 0.7 else (side,)
    chunks = tuple(min(64, s) for s in shape)
    del f[name]
    f.create_dataset(name, shape=shape, dtype=rng.choice(["f4", "f8"]), chunks=chunks,
                     fillvalue=rng.choice([0.0, 1.0, np.nan]))
    return f"{name} declared with shape {shape}, nothing written"


def h_filters(f, rng):
    name = rng.choice(datasets_of(f))
    data = f[name][()]
    if np.ndim(data) == 0 or np.size(data) == 0:
        return h_shape(f, rng)
    options = rng.choice([
        {"compression": "gzip", "compression_opts": 9, "shuffle": True},
        {"compression": "lzf", "shuffle": True},
        {"fletcher32": True, "chunks": True},
        {"scaleoffset": 2} if np.asarray(data).dtype.kind == "f" else {"scaleoffset": 0},
        {"chunks": tuple(1 for _ in np.shape(data))},
        {"chunks": tuple(np.shape(data))},
    ] + ([{"chunks": (7, np.shape(data)[1]), "compression": "lzf"},
          {"chunks": (8, 8), "compression": "gzip", "shuffle": True},
          {"chunks": (3, 5), "compression": "lzf", "shuffle": True}]
         if np.ndim(data) == 2 and min(np.shape(data)) >= 8 else []))
    rewrite(f, name, data, **options)
    return f"{name} stored with {options}"


def h_rechunk_all(f, rng):
    # Every matrix in small chunks through a filter: the chunk decoder's many-chunk paths.
    rows = rng.choice([1, 3, 7, 16])
    options = rng.choice([{"compression": "lzf"}, {"compression": "lzf", "shuffle": True},
                          {"compression": "gzip", "shuffle": True}, {"compression": "gzip"},
                          {}])
    dtype = rng.choice(["<f4", "<f4", "<f8", ">f4"])
    count = 0
    for name in datasets_of(f):
        if f[name].ndim == 2 and min(f[name].shape) >= 8:
            data = f[name][()].astype(dtype)
            rewrite(f, name, data, chunks=(rows, data.shape[1]), **options)
            count += 1
    return f"{count} matrices as {dtype} in chunks of {rows} rows with {options}"


def h_members(f, rng):
    groups = [g for g in groups_of(f) if any(isinstance(f[g][k], h5py.Dataset) for k in f[g])]
    if not groups:
        return h_delete(f, rng)
    group = f[rng.choice(groups)]
    members = sorted(group.keys())
    kind = rng.choice(["extra", "rename", "remove all", "many"])
    if kind == "extra":
        group.create_dataset("zz_extra", data=group[members[0]][()])
    elif kind == "rename":
        group.move(members[0], "~" + members[0])
    elif kind == "remove all":
        for member in members:
            del group[member]
    else:
        for k in range(200):
            group.create_dataset(f"m{k:04d}", data=np.ones((2, 2), "f4"))
    return f"{group.name} members: {kind}"


def h_values(f, rng):
    # The small lists (q, phi, bin ids): out-of-range or odd values.
    small = [n for n in datasets_of(f) if f[n].size <= 64 and f[n].dtype.kind in "fiu"]
    if not small:
        return h_fill(f, rng)
    name = rng.choice(small)
    data = np.array(f[name][()], dtype="f8", copy=True).reshape(f[name].shape)
    flat = data.reshape(-1)
    if flat.size == 0:
        return h_delete(f, rng)
    value = rng.choice([0, -1, 1e9, 2**31, -2**31, 1e-30, 180.0, -180.0, 1e308, np.nan])
    flat[rng.randrange(flat.size)] = value
    if rng.random() < 0.3:
        flat[:] = flat[0]  # all equal: duplicate bins or angles
    kind = f[name].dtype
    with np.errstate(all="ignore"):
        rewrite(f, name, data.astype(kind))
    return f"{name} value {value}"


def b_truncate(path, rng):
    size = path.stat().st_size
    cut = int(size * rng.choice([0.05, 0.3, 0.5, 0.8, 0.95, 0.999]))
    with open(path, "r+b") as out:
        out.truncate(cut)
    return f"truncated to {cut} of {size} bytes"


def b_overwrite(path, rng):
    size = path.stat().st_size
    length = rng.choice([1, 8, 64, 512, 4096])
    offset = rng.randrange(max(1, size - length))
    if rng.random() < 0.3:
        offset = size // 2  # "the middle"
    with open(path, "r+b") as out:
        out.seek(offset)
        out.write(bytes(rng.randrange(256) for _ in range(length)))
    return f"{length} random bytes at offset {offset} of {size}"


H5_MUTATIONS = [
    (h_dtype, 3), (h_shape, 3), (h_fill, 3), (h_delete, 2), (h_link, 1), (h_group_swap, 1),
    (h_huge, 2), (h_filters, 2), (h_members, 2), (h_values, 3), (h_rechunk_all, 3),
]
BYTE_MUTATIONS = [b_truncate, b_overwrite]


def mutate_h5(source, target, rng):
    shutil.copyfile(source, target)
    notes = []
    structural = rng.choice([0, 1, 1, 1, 2])
    if structural:
        with h5py.File(target, "r+") as f:
            functions = [m for m, _ in H5_MUTATIONS]
            weights = [w for _, w in H5_MUTATIONS]
            for _ in range(structural):
                function = rng.choices(functions, weights)[0]
                try:
                    notes.append(f"{function.__name__[2:]}: {function(f, rng)}")
                except Exception as error:  # h5py refused this change (a link loop, ...)
                    notes.append(f"{function.__name__[2:]}: not applied ({error})")
    if not structural or rng.random() < 0.3:
        function = rng.choices(BYTE_MUTATIONS, [1, 2])[0]  # a cut file rarely opens at all
        notes.append(f"{function.__name__[2:]}: {function(target, rng)}")
    return notes


# ---------------------------------------------------------------------------------------------
# Running the programs

class Runner:
    def __init__(self, bin_dir, timeout, memory_gb):
        self.bin_dir = bin_dir
        self.timeout = timeout
        self.memory_bytes = int(memory_gb * (1 << 30))
        self.env = dict(os.environ)
        # A fit must not find another fit's settings in the environment.
        for name in list(self.env):
            if name.startswith("HOMODYNE_") and not name.startswith("HOMODYNE_FUZZ"):
                del self.env[name]
        self.env["HOMODYNE_PYTHON"] = "/nonexistent"  # no plots, whatever the config says

    def limits(self):
        resource.setrlimit(resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        os.setsid()  # a timeout kills the whole group, threads and children included

    def run(self, args, cwd):
        """Runs BIN_DIR/args[0] args[1:] in cwd; returns (problem or None, rc, stderr tail)."""
        command = [str(self.bin_dir / args[0])] + args[1:]
        process = subprocess.Popen(command, cwd=cwd, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   preexec_fn=self.limits)
        try:
            _, err = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, err = process.communicate()
            return f"hang: no exit within {self.timeout:g} s", None, tail(err)
        rc = process.returncode
        if rc < 0:
            return f"killed by signal {signal.Signals(-rc).name}", rc, tail(err)
        if rc not in DOCUMENTED_EXIT_CODES:
            documented = sorted(DOCUMENTED_EXIT_CODES)
            return f"exit code {rc} outside the documented {documented}", rc, tail(err)
        if rc != 0 and not err.strip():
            return f"exit code {rc} without a message on stderr", rc, ""
        return None, rc, tail(err)


def tail(err, lines=6):
    text = err.decode("utf-8", "replace").rstrip()
    return "\n".join(text.split("\n")[-lines:])


def config_commands(name, fit_flags):
    """The program runs of one config file NAME in the case folder."""
    return [
        ["homodyne-config", "--validate", name],
        ["homodyne", "--config", name, "--dry-run", "--output-dir", "out",
         "--checkpoint-dir", "ckpt"],
        ["homodyne", "--config", name, "--output-dir", "out", "--checkpoint-dir", "ckpt",
         "--quiet"] + fit_flags,
        ["homodyne-simulate", "--config", name, "--output", "simulated_out.h5"],
    ]


def fit_flags_for(rng):
    """Most fits are kept short (--global-search off, few iterations); some keep the config's."""
    flags = []
    roll = rng.random()
    if roll < 0.8:
        flags += ["--global-search", "off"]
    if rng.random() < 0.7:
        flags += ["--max-iterations", str(rng.choice([1, 3, 10]))]
    if rng.random() < 0.3:
        flags += ["--strategy", rng.choice(["standard", "large", "chunked", "streaming"])]
    if rng.random() < 0.1:
        flags += ["--solver", "ceres"]
    if rng.random() < 0.1:
        flags += ["--no-variable-projection"]
    return flags


class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.runner = Runner(args.bin_dir, args.timeout, args.memory_gb)
        self.work = Path(tempfile.mkdtemp(prefix="homodyne_fuzz_"))
        self.seed_dir = self.work / "seeds"
        self.failures_dir = Path(args.failures_dir).resolve()
        self.failures = []
        self.runs = 0
        self.exit_codes = {}  # (program and its first flag, exit code) -> runs
        self.log = open(args.log, "w") if args.log else None
        self.data_files = []  # the seeds' simulated files, read-only, linked into every case

    def case_dir(self, label):
        path = self.work / label
        path.mkdir()
        for data in self.data_files:
            os.symlink(data, path / data.name)
        return path

    def check(self, label, case_seed, notes, commands, cwd):
        """Runs each command in cwd; records a failure per problem. Returns the exit codes."""
        codes = []
        for position, args in enumerate(commands):
            problem, rc, err = self.runner.run(args, cwd)
            self.runs += 1
            codes.append(rc)
            kind = args[0] + (" --validate" if "--validate" in args else "") + \
                (" --dry-run" if "--dry-run" in args else "") + (" (hdf5)" if "case.h5" in
                                                                 os.listdir(cwd) else "")
            outcome = "hang" if rc is None else f"signal {-rc}" if rc < 0 else rc
            self.exit_codes[(kind, outcome)] = self.exit_codes.get((kind, outcome), 0) + 1
            if self.log:
                last = err.split("\n")[-1] if err else ""
                self.log.write(f"{label}\t{kind}\t{outcome}\t{last}\n")
            if problem:
                self.record(label, case_seed, notes, args, cwd, problem, err)
                if rc is None and position + 1 < len(commands):
                    # The programs share the config loader and the reader: the others would
                    # most likely hang too, each for the whole timeout.
                    print(f"  (the case's {len(commands) - position - 1} other runs skipped "
                          "after the hang)", flush=True)
                    break
        return codes

    def record(self, label, case_seed, notes, args, cwd, problem, err):
        saved = self.failures_dir / label
        program = shlex.quote(str(self.args.bin_dir / args[0]))
        command = " ".join([program] + [shlex.quote(a) for a in args[1:]])
        if label not in self.failures:  # the first failing run of the case saves its inputs
            if saved.exists():
                shutil.rmtree(saved)
            saved.mkdir(parents=True)
            for item in cwd.iterdir():
                if item.name.startswith("case.") or item.is_symlink():
                    shutil.copyfile(item, saved / item.name)
            (saved / "repro.sh").write_text(
                f"#!/bin/sh\n# {label}, fuzz seed {case_seed!r}; mutations:\n" +
                "".join(f"#   {n}\n" for n in notes) + 'cd "$(dirname "$0")" || exit 1\n')
            os.chmod(saved / "repro.sh", 0o755)
            self.failures.append(label)
        with open(saved / "repro.sh", "a") as script:
            script.write(f"# {problem}\n{command}\n")
        print(f"FAIL {label}: {problem}\n  seed: {case_seed!r} (--seed "
              f"{self.args.seed} --case {label[5:] if label.startswith('case-') else '-'}"
              f"{' --only ' + self.args.only if self.args.only else ''})"
              "\n  mutations:" +
              "".join(f"\n    {n}" for n in notes) +
              f"\n  reproduce: cd {shlex.quote(str(saved))} && {command}" +
              (f"\n  stderr: " + err.replace("\n", "\n          ") if err else "") +
              f"\n  files: {saved}", flush=True)

    def clear_old_failures(self):
        """Removes the case folders an earlier run saved here, so that only this run's remain."""
        if self.failures_dir.is_dir():
            for old in self.failures_dir.iterdir():
                if old.is_dir() and re.fullmatch(r"(case|as-is|seed)-.+", old.name):
                    shutil.rmtree(old)

    def prepare_seeds(self):
        """Simulates every seed of corpus/seeds/ and checks it passes every program (exit 0)."""
        self.seed_dir.mkdir()
        seeds = sorted((CORPUS / "seeds").glob("*.yaml"))
        if not seeds:
            print(f"FAIL: no seed configs in {CORPUS / 'seeds'}")
            return False
        for seed in seeds:
            shutil.copyfile(seed, self.seed_dir / seed.name)
            problem, rc, err = self.runner.run(["homodyne-simulate", "--config", seed.name],
                                               self.seed_dir)
            if problem or rc != 0:
                print(f"FAIL seed {seed.name}: homodyne-simulate: {problem or f'exit {rc}'}\n{err}")
                return False
        self.data_files = sorted(self.seed_dir.glob("*.h5"))
        for data in self.data_files:
            data.chmod(0o444)
        self.seed_configs = seeds
        ok = True
        for seed in seeds:
            cwd = self.case_dir("seed-" + seed.stem)
            shutil.copyfile(seed, cwd / "case.yaml")
            commands = config_commands("case.yaml", ["--global-search", "off"])[:3]
            codes = self.check("seed-" + seed.stem, "seed", [f"unchanged {seed.name}"], commands,
                               cwd)
            if codes != [0] * len(commands):
                print(f"FAIL seed {seed.name}: exit codes {codes} (validate, dry run, fit), "
                      "expected all 0: the seed must be an input the programs accept")
                ok = False
            shutil.rmtree(cwd)
        return ok

    def run_as_is(self):
        folder = CORPUS / "config"
        files = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
        for index, path in enumerate(files):
            label = f"as-is-{path.stem}"
            cwd = self.case_dir(label)
            shutil.copyfile(path, cwd / "case.yaml")
            self.check(label, f"as-is {path.name}", [f"unchanged {path.relative_to(HERE)}"],
                       config_commands("case.yaml", ["--global-search", "off"]), cwd)
            shutil.rmtree(cwd, ignore_errors=True)
        return len(files)

    def run_case(self, index):
        case_seed = f"{self.args.seed}:{index}"
        rng = random.Random(case_seed)
        label = f"case-{index}"
        cwd = self.case_dir(label)
        if self.args.only == "yaml" or (self.args.only != "hdf5" and rng.random() < 0.65):
            source = rng.choice(self.all_yaml)
            text, notes = mutate_yaml(source.read_text(errors="surrogateescape"), rng)
            notes.insert(0, f"from {source.relative_to(HERE)}")
            (cwd / "case.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
            commands = config_commands("case.yaml", fit_flags_for(rng))
        else:
            seed = rng.choice(self.seed_configs)
            data = self.seed_dir / re.search(r"data_file_name:\s*(\S+)", seed.read_text()).group(1)
            notes = [f"from {data.name} (seed {seed.name})"] + mutate_h5(data, cwd / "case.h5", rng)
            text = re.sub(r"data_file_name:\s*\S+", "data_file_name: case.h5", seed.read_text())
            (cwd / "case.yaml").write_text(text)
            fit = ["homodyne", "--config", "case.yaml", "--output-dir", "out", "--checkpoint-dir",
                   "ckpt", "--quiet", "--global-search", "off"]
            strategy = rng.choice(["streaming", "streaming", "chunked", "standard", None])
            if strategy:
                fit += ["--strategy", strategy]
            commands = [["homodyne", "--config", "case.yaml", "--dry-run"], fit]
            if rng.random() < 0.3:
                commands.append(fit[:3] + ["--data-file", "case.h5"] + fit[3:])
        self.check(label, case_seed, notes, commands, cwd)
        if not self.args.keep_work:
            shutil.rmtree(cwd, ignore_errors=True)

    def run(self):
        start = time.monotonic()
        try:
            if self.args.case is None:
                self.clear_old_failures()
            if not self.prepare_seeds():
                return 1
            SEED_TEXTS.extend(p.read_text(errors="surrogateescape") for p in self.seed_configs)
            # Seeds for the mutations: every *.yaml under corpus/, recursively.
            self.all_yaml = sorted(CORPUS.rglob("*.yaml"))
            as_is = self.run_as_is() if self.args.case is None else 0
            indices = [self.args.case] if self.args.case is not None else range(self.args.cases)
            done = 0
            for index in indices:
                if self.args.case is None and time.monotonic() - start > self.args.seconds:
                    break
                try:
                    self.run_case(index)
                except Exception:  # a bug of this script: say which case, go on with the rest
                    self.failures.append(f"case-{index}")
                    print(f"FAIL case-{index}: the fuzzer itself failed (--seed {self.args.seed} "
                          f"--case {index}):\n{traceback.format_exc()}", flush=True)
                done += 1
            elapsed = time.monotonic() - start
            if done < len(indices):
                print(f"fuzz: the time limit of {self.args.seconds:.0f} s stopped the cases after "
                      f"{done} of {len(indices)}")
            print("fuzz: exit codes: " + ", ".join(
                f"{kind} {rc}: {n}" for (kind, rc), n in
                sorted(self.exit_codes.items(), key=lambda item: (item[0][0], str(item[0][1])))))
            print(f"fuzz: seed {self.args.seed}: {len(self.seed_configs)} seeds, {as_is} as-is "
                  f"configs, {done} of {len(indices)} mutated cases, {self.runs} program runs "
                  f"in {elapsed:.0f} s; {len(self.failures)} failures"
                  + (f" (files under {self.failures_dir})" if self.failures else ""))
            return 1 if self.failures else 0
        finally:
            if self.args.keep_work:
                print(f"fuzz: work folder kept: {self.work}")
            else:
                for path in self.work.rglob("*"):  # the seeds' data files are read-only
                    if path.is_file() and not path.is_symlink():
                        path.chmod(0o644)
                shutil.rmtree(self.work, ignore_errors=True)


def self_test():
    """The checks catch what they are for: a signal, a hang, a stray exit code, a silent exit."""
    runner = Runner(Path("/"), timeout=2, memory_gb=4)
    expected = [
        ("kill -SEGV $$", "killed by signal SIGSEGV"),
        ("sleep 30 & sleep 30", "hang: no exit within 2 s"),
        ("echo a message >&2; exit 5", "exit code 5 outside the documented [0, 1, 2, 3]"),
        ("exit 1", "exit code 1 without a message on stderr"),
        ("echo a message >&2; exit 1", None),
        ("exit 0", None),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as cwd:
        for script, want in expected:
            problem, _, _ = runner.run(["/bin/sh", "-c", script], cwd)
            if problem != want:
                print(f"FAIL self-test: sh -c {script!r}: got {problem!r}, expected {want!r}")
                failures += 1
    print(f"fuzz self-test: {len(expected) - failures} of {len(expected)} checks as expected")
    return 1 if failures else 0


def main():
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bin_dir", type=lambda p: Path(p).resolve())
    parser.add_argument("--seconds", type=float, default=float(env("HOMODYNE_FUZZ_SECONDS", 120)),
                        help="stop starting cases after this long (default 120)")
    parser.add_argument("--cases", type=int, default=int(env("HOMODYNE_FUZZ_CASES", 400)),
                        help="mutated cases at most (default 400)")
    parser.add_argument("--seed", default=env("HOMODYNE_FUZZ_SEED", "1"),
                        help="master seed of the cases (default 1)")
    parser.add_argument("--case", type=int, help="run only this case (reproduce a failure)")
    parser.add_argument("--timeout", type=float,
                        default=float(env("HOMODYNE_FUZZ_CASE_TIMEOUT", 20)),
                        help="seconds a program run may take (default 20)")
    parser.add_argument("--memory-gb", type=float,
                        default=float(env("HOMODYNE_FUZZ_MEMORY_GB", 4)),
                        help="address-space limit of each program run (default 4)")
    parser.add_argument("--failures-dir", default=env("HOMODYNE_FUZZ_FAILURES", "fuzz_failures"),
                        help="where failing cases are saved (default ./fuzz_failures)")
    parser.add_argument("--only", choices=["yaml", "hdf5"],
                        help="mutate only configs or only data files (other cases than without)")
    parser.add_argument("--log", help="write one line per program run: case, program, exit "
                        "code, last line of stderr")
    parser.add_argument("--keep-work", action="store_true", help="keep the temporary folder")
    parser.add_argument("--self-test", action="store_true",
                        help="only check that a signal, a hang, a stray exit code and a silent "
                        "failure of a program are each reported (BIN_DIR unused)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    for program in ("homodyne", "homodyne-config", "homodyne-simulate"):
        if not os.access(args.bin_dir / program, os.X_OK):
            print(f"FAIL: {args.bin_dir / program} is not an executable (build it first)")
            return 1
    return Fuzzer(args).run()


if __name__ == "__main__":
    sys.exit(main())
