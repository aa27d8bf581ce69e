#!/usr/bin/env bash
# coverage.sh -- line and branch coverage of src/ by the test suite.
#
#   bash scripts/coverage.sh
#
# Builds with gcc --coverage (Debug, -O0, counters updated atomically for
# the threaded tests) in build-cov/, runs the whole ctest suite there (the threaded stress tests at SLUICE_STRESS_SCALE=0.1;
# the Redis tier's tests when hiredis and redis-server are installed), then
# writes with gcovr:
#   build-cov/coverage/index.html     line and branch report, per file
#   build-cov/coverage/summary.txt    lines and branches per file, totals
#   build-cov/coverage/branches.txt   branches per file, with the lines of
#                                     the ones not taken
# and prints the totals.  Only src/ is reported (not tests/, cli/, bench/).
# docs/coverage.md lists the uncovered branches and why.  Exits non-zero
# when the build or a test fails (the report is still written).
# Installs gcovr (Debian package) when it is missing.
# Environment: JOBS (default 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${JOBS:-2}
build=$root/build-cov
out=$build/coverage

case ${1:-} in
-h | --help)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

bash scripts/deps.sh gcovr gcc

printf '\n=== build %s\n' "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS="--coverage -O0 -fprofile-update=atomic -DSLUICE_COVERAGE=1" -DCMAKE_EXE_LINKER_FLAGS=--coverage \
    -DCMAKE_SHARED_LINKER_FLAGS=--coverage -DSLUICE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$jobs"

# counts from this run only
find "$build" -name '*.gcda' -delete

printf '\n=== tests\n'
rc=0
SLUICE_STRESS_SCALE=${SLUICE_STRESS_SCALE:-0.1} \
    ctest --test-dir "$build" --output-on-failure -j"$jobs" || rc=1

printf '\n=== report %s\n' "$out"
rm -rf "$out"
mkdir -p "$out"
# gcov reads the objects of the build; --filter keeps the library's sources
# (and not CMake's compiler probe)
common=(--root "$root" --object-directory "$build" --filter "$root/src/"
    --exclude-unreachable-branches --exclude-directories '.*/CMakeFiles/[0-9][0-9.]*')
gcovr "${common[@]}" --json "$out/coverage.json" >/dev/null
gcovr --add-tracefile "$out/coverage.json" --root "$root" \
    --html-details "$out/index.html" --html-title "sluice: coverage of src/" >/dev/null
gcovr --add-tracefile "$out/coverage.json" --root "$root" --txt "$out/summary.txt" >/dev/null
gcovr --add-tracefile "$out/coverage.json" --root "$root" --branches --txt "$out/branches.txt" >/dev/null
gcovr --add-tracefile "$out/coverage.json" --root "$root" --print-summary --txt /dev/null

echo "report: $out/index.html, $out/summary.txt, $out/branches.txt"
exit $rc
