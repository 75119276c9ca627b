#!/usr/bin/env bash
# examples/python_fit.py runs as its header says with homodyne-cpp installed: installs the build
# into a temporary prefix and runs the example from a folder outside the repository, with
# PYTHONPATH and PATH pointing at the prefix only (not at the build tree). Checks that the
# installed package (with its stubs) is the one imported, that the example writes its figure,
# and that a run whose simulation fails leaves no output folder behind.
# Usage: python_example_test.sh BUILD_DIR PYTHON PYTHON_INSTALL_DIR (relative to the prefix)
set -euo pipefail
build_dir=$(cd "$1" && pwd)
python=$2
site=$3
example=$(cd "$(dirname "$0")/../../examples" && pwd)/python_fit.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
export PYTHONPATH="$work/prefix/$site" PYTHONDONTWRITEBYTECODE=1
package="$work/prefix/$site/homodyne_cpp"
for file in __init__.py __init__.pyi py.typed; do
  [ -e "$package/$file" ] || fail "$package/$file not installed"
done
imported=$(cd "$work" && "$python" -c 'import homodyne_cpp; print(homodyne_cpp._core.__file__)')
case "$imported" in
  "$package/"*) ;;
  *) fail "imported $imported, not the installed package" ;;
esac

mkdir "$work/run"
(cd "$work/run" && PATH="$work/prefix/bin:/usr/bin:/bin" "$python" "$example") \
  > "$work/example.log" 2>&1 || { cat "$work/example.log"; fail "the example"; }
grep -q "wrote .*examples_output/python_fit.png" "$work/example.log" ||
  { cat "$work/example.log"; fail "no 'wrote' line"; }
[ -s "$work/run/examples_output/python_fit.png" ] || fail "no python_fit.png"

# A simulator that fails: the example fails and leaves no (empty) examples_output behind.
mkdir "$work/failing" "$work/broken_bin"
printf '#!/bin/sh\necho "simulation failed" >&2\nexit 1\n' > "$work/broken_bin/homodyne-simulate"
chmod +x "$work/broken_bin/homodyne-simulate"
if (cd "$work/failing" && PATH="$work/broken_bin:/usr/bin:/bin" "$python" "$example") \
     > "$work/failing.log" 2>&1; then
  fail "the example succeeded with a failing simulator"
fi
[ ! -e "$work/failing/examples_output" ] || fail "a failed run left examples_output behind"
# Without a simulator at all it says so before making anything.
if (cd "$work/failing" && PATH="/usr/bin:/bin" "$python" "$example") > "$work/none.log" 2>&1; then
  fail "the example succeeded without homodyne-simulate"
fi
grep -q "homodyne-simulate is not on PATH" "$work/none.log" || { cat "$work/none.log"; fail "message"; }
[ ! -e "$work/failing/examples_output" ] || fail "examples_output made without a simulator"
echo "examples/python_fit.py with the installed package: ok"
