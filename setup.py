"""Builds tensord's native Python module (tensord._tensord) with CMake for pip.

`pip install --no-build-isolation .` and `pip wheel --no-build-isolation .` come here through
pyproject.toml. The module is CMake's target `tensord_python`:
- when build/ was configured by scripts/build.sh for the same Python ABI, it is (re)built there
  (nothing to do when it is current);
- else a Release build of only what the module needs is configured in build-pip-<ABI>/ (ccache
  makes a rebuild cheap). TENSORD_PIP_BUILD_DIR names another folder; TENSORD_CMAKE_ARGS adds
  CMake arguments.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(tensord VERSION ([0-9.]+)", f.read())
    return m.group(1) if m else "0.0.0"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        build = os.environ.get("TENSORD_PIP_BUILD_DIR")
        if not build:
            default = os.path.join(ROOT, "build")
            built = os.path.join(default, "python", "tensord")
            same_abi = not os.path.isdir(built) or any(
                n.startswith("_tensord") and n.endswith(suffix) for n in os.listdir(built))
            if os.path.isfile(os.path.join(default, "build.ninja")) and same_abi:
                build = default
            else:
                build = os.path.join(ROOT, "build-pip-" + suffix.strip(".").replace(".so", ""))
        if not os.path.isfile(os.path.join(build, "build.ninja")) and not os.path.isfile(
                os.path.join(build, "Makefile")):
            args = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    "-DPython3_EXECUTABLE=" + sys.executable, "-DTENSORD_BUILD_TESTS=OFF",
                    "-DTENSORD_BUILD_BENCH=OFF"]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += shlex.split(os.environ.get("TENSORD_CMAKE_ARGS", ""))
            subprocess.run(args, check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build, "--target", "tensord_python", "-j", jobs],
                       check=True)
        built = os.path.join(build, "python", "tensord")
        modules = [n for n in os.listdir(built) if n.startswith("_tensord") and n.endswith(suffix)]
        if not modules:
            raise RuntimeError(f"tensord: no _tensord*{suffix} in {built} after the build "
                               f"(was {build} configured for another Python?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(built, modules[0]), dest)


EGG_BASE = os.path.join(ROOT, "build-setuptools")
os.makedirs(EGG_BASE, exist_ok=True)

setup(
    version=version(),
    ext_modules=[Extension("tensord._tensord", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": EGG_BASE}, "egg_info": {"egg_base": EGG_BASE}},
)
