#!/usr/bin/env bash
# examples/simulate_and_inspect.sh runs as its header says with homodyne-cpp installed: installs
# the build into a temporary prefix and runs the example from a folder outside the repository
# with only the prefix's programs on PATH; checks that it used them and that both dry runs ran.
# Usage: shell_example_test.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
example=$(cd "$(dirname "$0")/../../examples" && pwd)/simulate_and_inspect.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
mkdir "$work/run"
(cd "$work/run" && PATH="$work/prefix/bin:/usr/bin:/bin" bash "$example") > "$work/example.log" 2>&1 ||
  { cat "$work/example.log"; fail "the example"; }
grep -qxF "programs from $work/prefix/bin" "$work/example.log" ||
  { cat "$work/example.log"; fail "the example did not use the installed programs"; }
[ "$(grep -c '^homodyne dry run (no fit)' "$work/example.log")" -eq 2 ] ||
  { cat "$work/example.log"; fail "expected two dry runs"; }
echo "examples/simulate_and_inspect.sh ran with the installed programs"
