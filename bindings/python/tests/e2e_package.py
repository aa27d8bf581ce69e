"""pip install ./bindings/python, and a wheel of it (issue 22, item 1).

On a copy of the repository (as a fresh clone: no build tree, nothing
built), with no package index:

1. `pip install --no-build-isolation --no-index COPY/bindings/python` into a
   fresh `venv --system-site-packages`: setup.py builds libsluice.so with
   CMake (the library target only, -j2) and bundles it;
2. `python -m build --no-isolation --wheel` of the same directory, then
   that wheel into a second venv;
3. `python -m build --no-isolation --sdist` (the C sources ride along in
   csrc/), then `pip install` of that tarball into a third venv: a build
   that sees neither the checkout nor its build tree.

Each venv then imports sluice from another directory (the copy is not on
sys.path), with SLUICE_LIBRARY pointing at nothing: the package must load
its bundled library, and decide as the contract says (a token bucket
worked by hand).  Registered in CTest as python_package (two builds of
the library, 1-2 minutes each on a loaded machine; the CTest timeout
allows for more).
"""

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
PY = os.environ.get("SLUICE_TEST_PYTHON", sys.executable)
BUILD_TIMEOUT = 1500  # seconds, for one pip install or wheel build

# Run inside each venv, from another directory.  token-bucket 10/s burst=5:
# five at t=0, the sixth refused with 100 ms to wait.
PROBE = r"""
import os, sys
import sluice
site = sys.argv[1]
assert sluice.__file__.startswith(site), (sluice.__file__, site)
assert sluice.library_path() == os.path.join(site, "sluice", "libsluice.so"), sluice.library_path()
lim = sluice.Limiter("token-bucket 10/s burst=5")
got = [lim.try_acquire(1, 0) for _ in range(6)]
assert got == [True] * 5 + [False], got
assert lim.decide(1, 0).retry_after_ns == 100_000_000
with sluice.Table("fixed-window 2/s", 10) as t:
    assert [t.try_acquire("k", 1, 0) for _ in range(3)] == [True, True, False]
print("ok", sluice.version(), sluice.library_path())
"""


def _copy_repo(dest):
    """The repository's files as a clone has them: no build trees, no
    .git, nothing generated."""
    def ignore(d, names):
        drop = {n for n in names if n in ("__pycache__", ".git", "dist") or n.endswith(".egg-info")}
        if os.path.samefile(d, REPO):
            drop |= {n for n in names if n.startswith("build")}
        if os.path.basename(d) == "python" and os.path.isfile(os.path.join(d, "setup.py")):
            drop |= {"build"}
        if os.path.basename(d) == "sluice":
            drop |= {n for n in names if n.startswith("libsluice.so")}
        return drop
    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)


def _run(cmd, cwd, env=None, timeout=BUILD_TIMEOUT):
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, text=True)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-6000:]}")
    return p.stdout


def _venv(path):
    _run([PY, "-m", "venv", "--system-site-packages", path], cwd=os.path.dirname(path), timeout=300)
    vpy = os.path.join(path, "bin", "python")
    site = _run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=os.path.dirname(path), timeout=60).strip()
    return vpy, site


def _missing():
    if not shutil.which("cmake"):
        return "cmake"
    for mod in ("venv", "setuptools", "pip", "build"):
        if subprocess.run([PY, "-c", f"import {mod}"], capture_output=True).returncode != 0:
            return f"{PY}: module {mod} (Debian: python3-{mod}; tests/run.sh installs it)"
    return None


class Package(unittest.TestCase):
    def setUp(self):
        miss = _missing()
        if miss:
            self.skipTest(f"not installed: {miss}")
        self.tmp = tempfile.mkdtemp(prefix="sluice-pkg-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.src = os.path.join(self.tmp, "src")
        _copy_repo(self.src)
        self.elsewhere = os.path.join(self.tmp, "elsewhere")
        os.mkdir(self.elsewhere)
        # No index; the bundled library must win over SLUICE_LIBRARY.
        self.env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                        SLUICE_LIBRARY=os.path.join(self.tmp, "no-such-libsluice.so"),
                        SLUICE_BUILD_JOBS="2")
        self.env.pop("PYTHONPATH", None)

    def probe(self, vpy, site):
        out = _run([vpy, "-c", PROBE, site], cwd=self.elsewhere, env=self.env, timeout=120)
        self.assertIn("ok ", out)

    def test_pip_install_then_wheel(self):
        pkg = os.path.join(self.src, "bindings", "python")

        # 1. pip install of the directory
        vpy, site = _venv(os.path.join(self.tmp, "v1"))
        _run([vpy, "-m", "pip", "install", "--no-build-isolation", "--no-index", pkg],
             cwd=self.elsewhere, env=self.env)
        self.probe(vpy, site)

        # 2. a wheel, into a second venv
        dist = os.path.join(self.tmp, "dist")
        _run([vpy, "-m", "build", "--no-isolation", "--wheel", "--outdir", dist, pkg],
             cwd=self.elsewhere, env=self.env)
        wheels = [f for f in os.listdir(dist) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        whl = os.path.join(dist, wheels[0])
        self.assertRegex(wheels[0], r"^sluice-\d+\.\d+\.\d+-py3-none-linux_[a-z0-9_]+\.whl$")
        with zipfile.ZipFile(whl) as z:
            names = z.namelist()
            self.assertIn("sluice/libsluice.so", names)
            self.assertIn("sluice/__init__.py", names)
            self.assertIn("sluice/py.typed", names)
            self.assertFalse([n for n in names if "tests" in n.split("/")], names)
        vpy2, site2 = _venv(os.path.join(self.tmp, "v2"))
        _run([vpy2, "-m", "pip", "install", "--no-index", whl], cwd=self.elsewhere, env=self.env,
             timeout=300)
        self.probe(vpy2, site2)

        # 3. an sdist (the C sources in csrc/), built into a third venv
        # where neither the checkout nor its build tree can be seen
        _run([vpy, "-m", "build", "--no-isolation", "--sdist", "--outdir", dist, pkg],
             cwd=self.elsewhere, env=self.env, timeout=300)
        sdists = [f for f in os.listdir(dist) if f.endswith(".tar.gz")]
        self.assertEqual(len(sdists), 1, sdists)
        sd = os.path.join(dist, sdists[0])
        with tarfile.open(sd) as tf:
            names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        for want in ("setup.py", "pyproject.toml", "sluice/__init__.py", "csrc/CMakeLists.txt",
                     "csrc/include/sluice.h"):
            self.assertIn(want, names)
        self.assertFalse([n for n in names if n.startswith(("csrc/bindings", "csrc/build"))])
        vpy3, site3 = _venv(os.path.join(self.tmp, "v3"))
        _run([vpy3, "-m", "pip", "install", "--no-build-isolation", "--no-index", sd],
             cwd=self.elsewhere, env=self.env)
        self.probe(vpy3, site3)


if __name__ == "__main__":
    unittest.main()
