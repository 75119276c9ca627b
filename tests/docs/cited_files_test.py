#!/usr/bin/env python3
"""Every file that the documents and the code's comments cite exists, and every section of docs/.

Usage: cited_files_test.py REPO_DIR [--list]
Exit 0 when every citation resolves, 1 with one line per citation that does not (file:line, what).
--list prints every citation checked and how it resolved.

What is read (the files git tracks):
  documents  README.md, docs/*.md, slurm/README.md: the whole text;
  comments   src/, include/, cuda/, python/, scripts/, bench/, tests/, examples/ and the CMake
             files: the // comments of C++ and CUDA sources, the # comments of Python, shell and
             CMake files, and the docstrings of Python files.
What counts as a citation of a file: a name ending in .h, .cc, .cu, .md, .py or .sh (a brace list
such as batched_objective.{h,cc} names each file). With a folder part it must be a tracked path
from the repository root or from the citing file's folder, or the tail of one
(homodyne/fit.h is include/homodyne/fit.h); without one, some tracked file must have that name.
A repository path without an extension (src/io/, tests/support/) must be a tracked file or folder.
Not citations of this repository, and not checked: names inside a URL, names with a placeholder
(<mode>, *, NAME, X, ...), headers that some source includes with #include <...> (system and
library headers), the reference Python package's modules (homodyne/..., xpcsjax/...; EXTERNAL
below) and files a run writes (MADE_AT_RUN_TIME).
What counts as a citation of a section: `docs/X.md` followed by "section N" (a numbered heading
"## N." of X must exist) or by ", Heading" (a heading of X, its number and a trailing
parenthesis aside, must start the text up to the next ")", ";", ":", "]" or the sentence's end, or
begin with its first words).
"""
import os
import re
import subprocess
import sys

repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
listing = "--list" in sys.argv[2:]
files = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True,
                       check=True).stdout.split()
tracked = set(files)
tracked_dirs = set()
for path in files:
    folder = os.path.dirname(path)
    while folder:
        tracked_dirs.add(folder)
        folder = os.path.dirname(folder)
basenames = {os.path.basename(path) for path in files}
failures = []
checked = []

# Files of other projects that the comments name on purpose: the reference package's modules and
# files, and tools' files. A name here is not looked up in the repository.
EXTERNAL = {
    # The reference package homodyne and its successor xpcsjax (named where the engine follows
    # or departs from them; docs/model.md, Same as the reference, and different).
    "homodyne_v2.py", "xpcs_loader.py", "core.py", "wrapper.py", "physics.py", "models.py",
    "cli.py", "config.py", "strategies.py", "residual.py", "jax_backend.py",
    "run_homodyne.py", "create_config.py", "conftest.py", "setup.py",
    "heterodyne_physics_utils.py",
    # The verification script docs/checkpoints.md shows, saved by the reader.
    "verify.py",
    # Python's and the tools' own files.
    "__init__.py", "pyproject.toml", "CMakeLists.txt",
}
# The beginnings of paths in other projects: the reference packages' trees, system folders.
EXTERNAL_PREFIXES = ("homodyne/", "xpcsjax/", "internal/ceres/", "path/to/", "/usr/", "/tmp/",
                     "/proc/", "/dev/", "/sys/", "/etc/", "~/", "$", "site-packages/", "build/",
                     "build-")
# Files that a run, a build or a test writes (not the repository's).
MADE_AT_RUN_TIME = re.compile(r"(^|/)(repro\.sh|performance\.log|fuzz_failures/.*|"
                              r"homodyne_results\.\w+|my_\w+\.\w+|big\w*\.\w+)$")

EXTENSIONS = ("h", "cc", "cu", "md", "py", "sh")
NAME = re.compile(r"(?<![\w./{}@:*<>-])((?:[\w.{},-]+/)*[\w.{},-]*?\w"
                  r"(?:\.\{[\w,]+\}|\.(?:%s)))(?![\w/])" % "|".join(EXTENSIONS))
ROOTS = ("src", "include", "tests", "docs", "bench", "scripts", "configs", "slurm", "python",
         "cuda", "cmake", "examples")
ROOT_PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*)" % "|".join(ROOTS))
URL = re.compile(r"\w+://\S+")
PLACEHOLDER = re.compile(r"[<>*$]|\.\.\.|(^|/)[A-Z][A-Z_]*(\.|/|$)|_N\b|\bN\b")


def expand(name):
    match = re.search(r"\{([^{}]*)\}", name)
    if not match:
        return [name]
    return [alternative for choice in match.group(1).split(",")
            for alternative in expand(name[:match.start()] + choice + name[match.end():])]


def read(path):
    try:
        with open(os.path.join(repo, path), encoding="utf-8") as handle:
            return handle.read()
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None


# Headers included from outside the repository (#include <...>): system and library headers.
included = set()
for path in files:
    if path.endswith((".h", ".cc", ".cu", ".cpp")):
        for header in re.findall(r"^\s*#\s*include\s*<([^>]+)>", read(path) or "", re.M):
            included.add(header)
            included.add(os.path.basename(header))


def resolve(name, citing):
    """How a cited file name resolves ('' when it does not)."""
    if name in tracked:
        return name
    beside = os.path.normpath(os.path.join(os.path.dirname(citing), name))
    if beside in tracked:
        return beside
    if "/" in name:
        tails = [path for path in files if path.endswith("/" + name)]
        return tails[0] if tails else ""
    return name if name in basenames else ""


def check_text(path, number, text):
    text = URL.sub(" ", text)
    for found in NAME.findall(text):
        found = found.rstrip(".,")
        if PLACEHOLDER.search(found) or found.startswith(EXTERNAL_PREFIXES) or "//" in found:
            continue
        for name in expand(found):
            base = os.path.basename(name)
            if (base in EXTERNAL or name in included or base in included or
                    MADE_AT_RUN_TIME.search(name)):
                continue
            where = resolve(name, path)
            checked.append(f"{path}:{number}: {name} -> {where or 'MISSING'}")
            if not where:
                failures.append(f"{path}:{number}: cites {name}, which the repository lacks")
    for found in ROOT_PATH.findall(text):
        found = found.rstrip(".,:;")
        if (not found.endswith("/") or PLACEHOLDER.search(found) or "{" in found or
                MADE_AT_RUN_TIME.search(found)):
            continue  # files are checked above; here folders (a trailing slash) only
        folder = found.rstrip("/")
        exists = folder in tracked_dirs or folder in tracked
        checked.append(f"{path}:{number}: {found} -> {'ok' if exists else 'MISSING'}")
        if not exists:
            failures.append(f"{path}:{number}: cites the folder {found}, "
                            "which the repository lacks")


# --- the sections of docs/ ----------------------------------------------------------------------

HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
# A paragraph or list item that starts with a bold label, as docs/backends.md's parts do.
BOLD_LABEL = re.compile(r"^(?:- )?\*\*([^*]+)\*\*", re.M)


def headings(doc):
    """(numbers, names) of a document's headings: '4b' of '## 4b. The global phase', and its
    name without the number and without a trailing parenthesis."""
    numbers, names = set(), []
    for heading in HEADING.findall(read(doc) or ""):
        number = re.match(r"(\d+[a-z]?)\.\s+", heading)
        if number:
            numbers.add(number.group(1))
            heading = heading[number.end():]
        names.append(re.sub(r"\s*\([^()]*\)$", "", heading).strip())
    names.extend(label.strip() for label in BOLD_LABEL.findall(read(doc) or ""))
    return numbers, names


section_cache = {}
SECTION_NUMBER = re.compile(r"`?(docs/[\w/-]+\.md)`?,?\s+sections?\s+"
                            r"(\d+[a-z]?(?:(?:,\s*|\s+and\s+)\d+[a-z]?)*)")
SECTION_NAME = re.compile(r"`?(docs/[\w/-]+\.md)`?,\s+\(?\"?([A-Z][^)\];:\"]*)")


def check_sections(path, text, line_of):
    for match in SECTION_NUMBER.finditer(text):
        doc = match.group(1)
        if doc not in tracked:
            continue  # reported as a missing file
        numbers, _ = section_cache.setdefault(doc, headings(doc))
        for number in re.split(r",\s*|\s+and\s+", match.group(2)):
            checked.append(f"{path}:{line_of(match.start())}: {doc} section {number}")
            if number not in numbers:
                failures.append(f"{path}:{line_of(match.start())}: cites {doc} section {number}, "
                                "which it does not have")
    for match in SECTION_NAME.finditer(text):
        doc, cited = match.group(1), " ".join(match.group(2).split())
        cited = cited.split(". ")[0].rstrip(".")  # the end of the sentence
        if doc not in tracked:
            continue
        _, names = section_cache.setdefault(doc, headings(doc))
        # The text may go on after the heading ("Streaming passes, Direct reads") or give its
        # first words only ("Rates" for "Rates, with the t -> 0 guard and the floor").
        first = cited.split(", ")[0]
        ok = any(cited.startswith(name) or name.startswith(first) for name in names if name)
        checked.append(f"{path}:{line_of(match.start())}: {doc}, {cited[:60]} -> {ok}")
        if not ok:
            failures.append(f"{path}:{line_of(match.start())}: cites {doc}, \"{cited[:60]}\": "
                            "no heading of it begins that text")


# --- the documents and the comments -------------------------------------------------------------

DOCUMENTS = ["README.md", "slurm/README.md"] + [f for f in files if f.startswith("docs/") and
                                                f.endswith(".md") and f.count("/") == 1]
COMMENTED = ("src/", "include/", "cuda/", "python/", "scripts/", "bench/", "tests/", "examples/",
             "cmake/")
this_file = os.path.relpath(os.path.abspath(__file__), repo)


def comment_lines(path, text):
    """(line number, comment text) of a source file."""
    lines = text.splitlines()
    if path.endswith((".h", ".cc", ".cu", ".cpp")):
        for number, line in enumerate(lines, 1):
            # The comment of a line: after a // that no string literal holds.
            code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
            if "//" in code:
                yield number, code[code.index("//") + 2:]
    elif path.endswith((".py", ".sh", ".cmake", "CMakeLists.txt", ".sbatch")):
        in_docstring = False
        for number, line in enumerate(lines, 1):
            quotes = line.count('"""') + line.count("'''")
            if path.endswith(".py") and (in_docstring or quotes):
                yield number, line
                if quotes % 2:
                    in_docstring = not in_docstring
                continue
            code = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'', '""', line)
            if "#" in code and not code.lstrip().startswith("#!"):
                yield number, code[code.index("#") + 1:]


for doc in DOCUMENTS:
    text = read(doc)
    if text is None:
        continue
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def line_of(offset, starts=starts):
        low, high = 0, len(starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if starts[middle] <= offset:
                low = middle
            else:
                high = middle - 1
        return low + 1

    for number, line in enumerate(text.splitlines(), 1):
        check_text(doc, number, line)
    check_sections(doc, text, line_of)

for path in files:
    if path == this_file or not (path.startswith(COMMENTED) or os.path.basename(path) ==
                                 "CMakeLists.txt"):
        continue
    text = read(path)
    if text is None:
        continue
    comments = list(comment_lines(path, text))
    for number, comment in comments:
        check_text(path, number, comment)
    # Section citations may run over two comment lines: check them on the joined comment text.
    joined, numbers = "", []
    for number, comment in comments:
        joined += comment.strip() + " "
        numbers.extend([number] * (len(comment.strip()) + 1))
    check_sections(path, joined, lambda offset, numbers=numbers:
                   numbers[min(offset, len(numbers) - 1)] if numbers else 0)

if listing:
    print("\n".join(checked))
for failure in failures:
    print(failure)
print(f"cited files and sections: {len(checked)} citations checked, {len(failures)} missing")
sys.exit(1 if failures else 0)
