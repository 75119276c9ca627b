"""`pip install .`: the Python package homodyne_cpp, its extension built by the project's CMake build
(docs/python.md, Build, install, import), as in pybind11's cmake_example: a CMakeExtension without
sources and a build_ext that configures the repository with CMake, builds the target homodyne_cpp
and copies the extension it makes (build-pip/python/homodyne_cpp/_core.*.so) where setuptools
packs it. The pure-Python part (python/homodyne_cpp/) is packed as it is.

Environment: CMAKE_ARGS, extra arguments to the configure step (e.g. -DHOMODYNE_CUDA=OFF
-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); CMAKE_BUILD_PARALLEL_LEVEL, the build's jobs (default 2);
HOMODYNE_PIP_BUILD_DIR, the CMake build folder (default build-pip/ in the repository: beside
build/, so that ccache with base_dir finds what a build/ compiled).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = Path(__file__).resolve().parent


def project_version():
    """The version of CMakeLists.txt's project(), the one source of it."""
    text = (SOURCE / "CMakeLists.txt").read_text()
    return re.search(r"project\(homodyne_cpp VERSION ([0-9.]+)", text).group(1)


class CMakeExtension(Extension):
    """An extension that the CMake target `target` builds."""

    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(os.environ.get("HOMODYNE_PIP_BUILD_DIR", SOURCE / "build-pip")).resolve()
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = ["cmake", "-S", str(SOURCE), "-B", str(build_dir),
                     "-DCMAKE_BUILD_TYPE=Release", "-DHOMODYNE_PYTHON=ON",
                     "-DHOMODYNE_BUILD_TESTS=OFF", "-DHOMODYNE_BUILD_BENCHMARKS=OFF",
                     f"-DPython_EXECUTABLE={sys.executable}"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(self.parallel or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", ext.target, "-j", jobs],
                       check=True)
        built = sorted((build_dir / "python" / "homodyne_cpp").glob("_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _core*.so in {build_dir}/python/homodyne_cpp, "
                               f"found {[path.name for path in built]}")
        destination = Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], destination)


setup(
    name="homodyne_cpp",
    version=project_version(),
    description="Fits of the homodyne XPCS model (C++ engine, Python API)",
    python_requires=">=3.9",
    install_requires=["numpy"],
    packages=["homodyne_cpp"],
    package_dir={"homodyne_cpp": "python/homodyne_cpp"},
    package_data={"homodyne_cpp": ["__init__.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("homodyne_cpp._core", target="homodyne_cpp")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip/setuptools"}},
    zip_safe=False,
)
