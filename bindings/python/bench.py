"""bench.py -- the binding's per-call cost, in microseconds (not a test).

    python3 bindings/python/bench.py [--rounds N] [--number N] [PACKAGE_DIR ...]

Each PACKAGE_DIR is a copy of the ``sluice`` package (default: the one
beside this file); all are loaded into this one process under distinct
names, over the same libsluice.so (SLUICE_LIBRARY, or the build tree), and
measured in alternation, round by round, so that a noisy machine weighs on
each alike.  Printed: the median and the lowest round per call.  To compare
with an older revision:

    mkdir -p build/bench/old
    git show REV:bindings/python/sluice/__init__.py > build/bench/old/__init__.py
    SLUICE_LIBRARY=build/libsluice.so python3 bindings/python/bench.py \\
        build/bench/old bindings/python/sluice

(docs/python.md, "Cost per call", has the figures.)
"""

import argparse
import importlib.util
import os
import statistics
import sys
import timeit

CASES = [
    ("Limiter.try_acquire(1, t)", "lim.try_acquire(1, t)"),
    ("Limiter.try_acquire()", "lim.try_acquire()"),
    ("Limiter.decide(1, t)", "lim.decide(1, t)"),
    ("Table.try_acquire(b'k', 1, t)", "tab.try_acquire(b'client-42', 1, t)"),
    ("Table.try_acquire('k')", "tab.try_acquire('client-42')"),
    ("Table.decide(b'k', 1, t)", "tab.decide(b'client-42', 1, t)"),
]


def load(pkg_dir: str, name: str):
    init = os.path.join(pkg_dir, "__init__.py")
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[pkg_dir])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("dirs", nargs="*")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = a.dirs or [os.path.join(here, "sluice")]
    mods = [load(d, f"sluice_bench_{i}") for i, d in enumerate(dirs)]
    spec = "token-bucket 1000000000/s burst=1000000000"
    envs = []
    for m in mods:
        envs.append({"lim": m.Limiter(spec), "tab": m.Table(spec, max_keys=1024),
                     "t": m.now_ns()})
    times = {(i, c): [] for i in range(len(mods)) for c, _ in CASES}
    for _ in range(a.rounds):
        for c, stmt in CASES:
            for i, env in enumerate(envs):
                s = timeit.timeit(stmt, number=a.number, globals=env)
                times[(i, c)].append(s / a.number * 1e6)
    print(f"python {sys.version.split()[0]}, library {mods[0].library_path()}, "
          f"{a.rounds} rounds x {a.number} calls; us per call, median (lowest)")
    for c, _ in CASES:
        cells = [f"{statistics.median(times[(i, c)]):6.2f} ({min(times[(i, c)]):5.2f})"
                 for i in range(len(mods))]
        print(f"  {c:32s} " + "   ".join(cells))
    print("  columns: " + "   ".join(dirs))


if __name__ == "__main__":
    main()
