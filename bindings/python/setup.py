"""setup.py -- build libsluice.so with CMake and bundle it in the package.

pyproject.toml holds the metadata; this file adds the one step setuptools
cannot express there: before the package's files are collected, configure
the repository's CMake project (only the library: no tests, benchmarks,
examples, CLI or install rules), build the `sluice_shared` target, and copy
the resulting libsluice.so into the package, where sluice/__init__.py looks
first.  The wheel is then platform-specific (it holds a shared library).

Where the C sources are: SLUICE_SOURCE_DIR, else csrc/ beside this file (an
sdist: its sdist command copies the repository there), else two directories
up (this file is bindings/python/setup.py of a checkout).  Knobs, from the
environment: SLUICE_BUILD_JOBS (parallel compile jobs, default 2),
SLUICE_CMAKE_ARGS (extra arguments for the configure step, split on
spaces), CMAKE (the cmake program).  Build type: Release.
"""

import hashlib
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def _source_dir() -> str:
    d = os.environ.get("SLUICE_SOURCE_DIR")
    if not d:
        # an sdist carries the sources in csrc/; a checkout has them above
        csrc = os.path.join(HERE, "csrc")
        d = csrc if os.path.isdir(csrc) else os.path.join(HERE, "..", "..")
    d = os.path.abspath(d)
    if not os.path.isfile(os.path.join(d, "include", "sluice.h")) or \
            not os.path.isfile(os.path.join(d, "CMakeLists.txt")):
        raise SystemExit(f"sluice setup.py: no sluice sources at {d} (include/sluice.h, "
                         "CMakeLists.txt); set SLUICE_SOURCE_DIR to the repository")
    return d


def _version() -> str:
    with open(os.path.join(_source_dir(), "include", "sluice.h"), encoding="utf-8") as f:
        m = re.search(r'#define SLUICE_VERSION_STRING "([0-9]+\.[0-9]+\.[0-9]+)"', f.read())
    if not m:
        raise SystemExit("sluice setup.py: no SLUICE_VERSION_STRING in include/sluice.h")
    return m.group(1)


class BuildPyWithLibrary(build_py):
    """build_py, then the library into build_lib/sluice/libsluice.so."""

    def run(self) -> None:
        super().run()
        src = _source_dir()
        temp = self.get_finalized_command("build").build_temp
        # One CMake tree per source directory: a cache made for another
        # checkout is never reused.
        tag = hashlib.sha256(src.encode()).hexdigest()[:12]
        bdir = os.path.abspath(os.path.join(temp, f"cmake-{tag}"))
        cmake = os.environ.get("CMAKE", "cmake")
        jobs = os.environ.get("SLUICE_BUILD_JOBS", "2")
        configure = [cmake, "-S", src, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DSLUICE_BUILD_TESTS=OFF", "-DSLUICE_BUILD_BENCH=OFF",
                     "-DSLUICE_BUILD_EXAMPLES=OFF", "-DSLUICE_BUILD_CLI=OFF",
                     "-DSLUICE_INSTALL=OFF"]
        configure += os.environ.get("SLUICE_CMAKE_ARGS", "").split()
        self.announce("sluice: " + " ".join(configure), level=2)
        subprocess.check_call(configure)
        subprocess.check_call([cmake, "--build", bdir, "--target", "sluice_shared",
                               "-j", jobs])
        lib = os.path.realpath(os.path.join(bdir, "libsluice.so"))
        dest = os.path.join(self.build_lib, "sluice", "libsluice.so")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(lib, dest)  # the file itself, not the symlink chain
        os.chmod(dest, 0o755)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [
            os.path.join(self.build_lib, "sluice", "libsluice.so")]


class SdistWithSources(sdist):
    """An sdist that builds anywhere: the repository's files (less build
    trees, .git and the bindings) in csrc/, where _source_dir() looks."""

    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        src = _source_dir()

        def ignore(d, names):
            drop = {n for n in names if n in (".git", "__pycache__") or n.endswith(".egg-info")}
            if os.path.samefile(d, src):
                drop |= {n for n in names if n.startswith("build") or n in ("bindings", "csrc", "dist")}
            return drop

        shutil.copytree(src, os.path.join(base_dir, "csrc"), ignore=ignore, symlinks=True)


class BinaryDistribution(Distribution):
    """The package holds a compiled library: a platform wheel, not a pure
    one."""

    def has_ext_modules(self) -> bool:
        return True


cmdclass = {"build_py": BuildPyWithLibrary, "sdist": SdistWithSources}
try:
    from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        """Tag py3-none-PLATFORM: the package is ctypes, not an extension
        module, so any Python 3 on the platform can load it."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:  # no wheel package: pip's own tag (cpXY-cpXY-PLATFORM)
    pass

# The package list is here, not in pyproject.toml's [tool.setuptools] (a
# "beta" warning in Debian's setuptools 66).
setup(version=_version(), packages=["sluice"], package_data={"sluice": ["py.typed"]},
      cmdclass=cmdclass, distclass=BinaryDistribution)
