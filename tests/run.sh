#!/usr/bin/env bash
# run.sh -- build sluice and run every test: the one test command.
#
#   bash tests/run.sh              build/ (RelWithDebInfo), then ctest
#   bash tests/run.sh --sanitize   ... and build-asan/ (address,undefined,
#                                  Debug, no benchmarks), then ctest there
#   bash tests/run.sh --tsan       ... and build-tsan/ (thread), then the
#                                  tests labelled `concurrency` (if any)
#
# Installs what the tests need when it is missing (cmake, make, gcc,
# libcmocka-dev, with apt-get; `apt-get update` only if a first install
# fails; through sudo when not root).  Exits non-zero on any failure.
# Environment: JOBS (default 2) for the build and ctest parallelism.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
jobs=${JOBS:-2}

sanitize=0
tsan=0
for arg in "$@"; do
    case $arg in
    --sanitize) sanitize=1 ;;
    --tsan) tsan=1 ;;
    -h | --help)
        sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument '$arg' (want --sanitize, --tsan)" >&2
        exit 2
        ;;
    esac
done

step() { printf '\n=== %s\n' "$*"; }

# ---------------------------------------------------------------- tools --

step "dependencies (scripts/deps.sh)"
bash scripts/deps.sh libhiredis-dev redis-server prometheus python3-prometheus-client libxml2-utils

# ------------------------------------------------------------- sanitizers --

# Sanitizer reports abort the test that hit them, with a stack trace; leaks
# are reported when a test exits.  (UBSan is also built with
# -fno-sanitize-recover=all by CMakeLists.txt.)
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

# Every stage runs even when an earlier one failed, so one run reports
# everything; the exit status is 1 if any stage failed.
failed=()

# build DIR CMAKE_ARGS...: configure and build one tree.
build() {
    local dir=$1
    shift
    step "configure $dir $*"
    cmake -S "$root" -B "$root/$dir" "$@" || return 1
    step "build $dir"
    cmake --build "$root/$dir" -j"$jobs"
}

# ---------------------------------------------------------------- release --

if build build; then
    step "test build"
    ctest --test-dir "$root/build" --output-on-failure -j"$jobs" || failed+=("tests in build/")
else
    failed+=("build/")
fi

# -------------------------------------------------------------- ASan+UBSan --

if [ $sanitize -eq 1 ]; then
    if build build-asan -DSLUICE_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug \
        -DSLUICE_BUILD_BENCH=OFF; then
        step "test build-asan (address, undefined)"
        ctest --test-dir "$root/build-asan" --output-on-failure -j"$jobs" ||
            failed+=("tests in build-asan/")
    else
        failed+=("build-asan/")
    fi
fi

# ------------------------------------------------------------------- TSan --

if [ $tsan -eq 1 ]; then
    if build build-tsan -DSLUICE_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug \
        -DSLUICE_BUILD_BENCH=OFF; then
        n=$(ctest --test-dir "$root/build-tsan" -N -L concurrency | sed -n "s/^Total Tests: *//p" || true)
        if [ "${n:-0}" -gt 0 ]; then
            step "test build-tsan (thread): $n tests labelled concurrency"
            SLUICE_STRESS_SCALE=${SLUICE_STRESS_SCALE:-0.1} \
                ctest --test-dir "$root/build-tsan" --output-on-failure -j"$jobs" -L concurrency ||
                failed+=("concurrency tests in build-tsan/")
        else
            step "build-tsan: no test is labelled concurrency; nothing to run"
        fi
    else
        failed+=("build-tsan/")
    fi
fi

if [ ${#failed[@]} -gt 0 ]; then
    step "FAILED: ${failed[*]}"
    exit 1
fi
step "all tests passed"
