#!/usr/bin/env bash
# `pip install . --no-build-isolation` (setup.py, pyproject.toml; docs/python.md) in a temporary
# venv made with --system-site-packages: Debian's setuptools drives the project's CMake build
# (in build-pip/ of the source tree, with ccache when it is installed) and the package is
# installed in the venv; it imports from outside the repository, from the venv, with its stubs,
# and computes. About a minute with a warm ccache on 2 cores.
# Usage: pip_install_test.sh SOURCE_DIR PYTHON
set -euo pipefail
source_dir=$(cd "$1" && pwd)
python=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$python" -m venv --system-site-packages "$work/venv"
cmake_args="-DHOMODYNE_CUDA=OFF"
if command -v ccache > /dev/null; then
  cmake_args="$cmake_args -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
(cd "$work" && CMAKE_ARGS="$cmake_args" PIP_NO_INDEX=1 \
   "$work/venv/bin/python" -m pip install "$source_dir" --no-build-isolation) \
  > "$work/pip.log" 2>&1 || { tail -40 "$work/pip.log"; fail "pip install"; }

site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cd "$work"
PYTHONPATH= PYTHONNOUSERSITE=1 "$work/venv/bin/python" - "$site" <<'PY' || fail "the installed package"
import sys
import numpy as np
import homodyne_cpp as hc
site = sys.argv[1]
assert hc.__file__.startswith(site + "/homodyne_cpp/"), hc.__file__
assert hc._core.__file__.startswith(site + "/homodyne_cpp/"), hc._core.__file__
for name in ("__init__.pyi", "py.typed"):
    assert (__import__("pathlib").Path(hc.__file__).with_name(name)).exists(), name
c2 = hc.compute_c2([1000.0, -0.5, 10.0], 0.1 * np.arange(1, 11), 0.0, 0.0054, 2e6, mode="static")
assert c2.shape == (1, 10, 10) and np.all(np.isfinite(c2)) and c2[0, 0, 0] > 1.0
print("homodyne_cpp", hc.__version__, "from", hc.__file__)
PY
echo "pip install . --no-build-isolation: ok"
