#!/usr/bin/env python3
"""Every C++ and CUDA source the repository tracks is formatted as .clang-format says
(docs/conventions.md, Habits): clang-format of each file equals the file.

usage: clang_format_test.py REPOSITORY CLANG_FORMAT

The test first checks itself: a badly formatted snippet must differ from its formatting, so a
clang-format that formats nothing cannot make the test pass.
"""
import subprocess
import sys

SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".cpp", ".hpp")


def formatted(clang_format, repository, path=None, text=None):
    """clang-format's output for a file (path) or for text (as a .cc file), with the repository's
    style file."""
    command = [clang_format, "--style=file"]
    if path is not None:
        command.append(path)
        return subprocess.run(command, cwd=repository, check=True, capture_output=True,
                              text=True).stdout
    command.append("--assume-filename=" + repository + "/src/snippet.cc")
    return subprocess.run(command, cwd=repository, input=text, check=True, capture_output=True,
                          text=True).stdout


def main():
    repository, clang_format = sys.argv[1], sys.argv[2]
    snippet = "int  f( int a ){return a+1;}\n"
    if formatted(clang_format, repository, text=snippet) == snippet:
        sys.exit("FAIL: clang-format left a badly formatted snippet unchanged: the check checks nothing")
    files = subprocess.run(["git", "ls-files"], cwd=repository, check=True, capture_output=True,
                           text=True).stdout.split()
    sources = [f for f in files if f.endswith(SUFFIXES)]
    differ = []
    for path in sources:
        with open(f"{repository}/{path}", encoding="utf-8") as handle:
            if formatted(clang_format, repository, path=path) != handle.read():
                differ.append(path)
    if differ:
        print("differ from clang-format (run: clang-format -i FILE):")
        for path in differ:
            print("  " + path)
        sys.exit(f"FAIL: {len(differ)} of {len(sources)} sources are not formatted")
    print(f"ok: {len(sources)} sources formatted as .clang-format says")


if __name__ == "__main__":
    main()
