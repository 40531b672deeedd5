"""Builds the attn Python package with CMake: the pybind11 module attn._C and the pure-Python files,
exactly as the CMake build lays them out in <build>/python/attn, which is copied into the wheel.

Needs cmake, a C++20 compiler, pybind11 (CMake config), NumPy and the C++ dependencies of attn
(OpenBLAS, cairo, nlohmann-json). See pyproject.toml and scripts/install_python.sh.
Environment: CMAKE (the cmake to run), CMAKE_BUILD_PARALLEL_LEVEL (compile jobs; default: all cores).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# setuptools' scratch space; not build/, which is the main CMake build of the repository.
BUILD_BASE = "build-pip"


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if self.inplace:
            raise RuntimeError("attn: in-place/editable builds are not supported; for development "
                               "use the CMake build: PYTHONPATH=build/python")
        cmake = os.environ.get("CMAKE", "cmake")
        build_dir = Path(self.build_temp).resolve() / "cmake"
        config = "Debug" if self.debug else "Release"
        subprocess.check_call([
            cmake, "-S", str(ROOT), "-B", str(build_dir),
            f"-DCMAKE_BUILD_TYPE={config}",
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DATTN_BUILD_PYTHON=ON",
            "-DATTN_BUILD_TESTS=OFF",
            "-DATTN_BUILD_EXAMPLES=OFF",
            "-DATTN_BUILD_BENCH=OFF",
            "-DATTN_INSTALL=OFF",
        ])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call([cmake, "--build", str(build_dir), "--target", "_C", "-j", jobs])

        built = build_dir / "python" / "attn"
        dest = Path(self.get_ext_fullpath(ext.name)).resolve().parent  # <build_lib>/attn
        if not any(built.glob("_C*.so")):
            raise RuntimeError(f"attn: the CMake build left no _C module in {built}")
        shutil.copytree(built, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


os.makedirs(BUILD_BASE, exist_ok=True)
setup(
    packages=find_packages("python"),
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("attn._C")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
    zip_safe=False,
)
