#!/usr/bin/env bash
# run.sh -- build sluice and run every test: the one test command.
#
#   bash tests/run.sh              build/ (gcc, the default RelWithDebInfo),
#                                  then ctest there
#   bash tests/run.sh --release    ... and build-release/ (gcc Release, -O3),
#                                  then ctest there
#   bash tests/run.sh --clang      ... and build-clang/ (clang Release), then
#                                  ctest there
#   bash tests/run.sh --sanitize   ... and build-asan/ (address,undefined,
#                                  Debug, no benchmarks), then ctest there
#   bash tests/run.sh --tsan       ... and build-tsan/ (thread), then the
#                                  tests labelled `concurrency`
#   bash tests/run.sh --ci         all of the above, as CI runs it
#
# Every build uses -DSLUICE_WERROR=ON: a warning fails it.  The tests of a
# plain build include `downstream` (tests/downstream/run.sh: install, then
# find_package, pkg-config shared and static, add_subdirectory).
# Installs what the tests need when it is missing (cmake, make, gcc,
# pkg-config, libcmocka-dev, libhiredis-dev, redis-server, prometheus and
# python3-prometheus-client for the metrics test, libxml2-utils for the svg
# test, nginx-dev, libpcre2-dev, nginx-light and curl for the nginx module
# (built in build/ only: -DSLUICE_NGINX=ON) and its test, and clang for
# --clang, with apt-get; `apt-get update` only if a
# first install fails; through sudo when not root).  Exits non-zero on any
# failure.
# Environment: JOBS (default 2) for the build and ctest parallelism.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
jobs=${JOBS:-2}

release=0
clang=0
sanitize=0
tsan=0
for arg in "$@"; do
    case $arg in
    --release) release=1 ;;
    --clang) clang=1 ;;
    --sanitize) sanitize=1 ;;
    --tsan) tsan=1 ;;
    --ci) release=1 clang=1 sanitize=1 tsan=1 ;;
    -h | --help)
        sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument '$arg' (want --release, --clang, --sanitize, --tsan, --ci)" >&2
        exit 2
        ;;
    esac
done

step() { printf '\n=== %s\n' "$*"; }

# ---------------------------------------------------------------- tools --

step "dependencies (scripts/deps.sh)"
extra=(libhiredis-dev redis-server prometheus python3-prometheus-client libxml2-utils
    nginx-dev libpcre2-dev nginx-light curl)
# Calendar quotas (tz=): the zones, for the library and for Python's zoneinfo.
extra+=(tzdata)
# sluice-rls (server/rls/) and its tests.
extra+=(libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev python3-grpcio python3-protobuf
    protobuf-compiler nghttp2-client)
# sluice-rls's TLS (GRPC_SERVER_USE_TLS) and the certificate its test makes.
extra+=(libssl-dev openssl)
[ $clang -eq 1 ] && extra+=(clang)
# The Python binding's packaging and limits/Flask-Limiter tests (bindings/python/tests).
extra+=(python3-venv python3-pip python3-setuptools python3-build python3-wheel
    python3-limits python3-flask python3-flask-limiter gunicorn)
# The Node.js binding's tests (bindings/node/test/run.sh): node with its npm.
# Only nodejs is named: Debian's npm package conflicts with a nodejs that
# bundles npm (NodeSource's); without npm the test says so and is skipped.
extra+=(nodejs)
bash scripts/deps.sh "${extra[@]}"

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

# build DIR CMAKE_ARGS...: configure and build one tree, warnings as errors.
# CC in the environment picks the compiler of a new tree.
build() {
    local dir=$1
    shift
    step "configure $dir ${CC:+CC=$CC }$* -DSLUICE_WERROR=ON"
    cmake -S "$root" -B "$root/$dir" "$@" -DSLUICE_WERROR=ON || return 1
    step "build $dir"
    cmake --build "$root/$dir" -j"$jobs"
}

# build_and_test DIR CMAKE_ARGS...: that, then every test of the tree.
build_and_test() {
    local dir=$1
    if build "$@"; then
        step "test $dir"
        ctest --test-dir "$root/$dir" --output-on-failure -j"$jobs" || failed+=("tests in $dir/")
    else
        failed+=("$dir/")
    fi
}

# ---------------------------------------------------------------- default --

build_and_test build -DSLUICE_NGINX=ON

# ---------------------------------------------------- gcc Release, clang --

if [ $release -eq 1 ]; then
    CC=gcc build_and_test build-release -DCMAKE_BUILD_TYPE=Release
fi
if [ $clang -eq 1 ]; then
    CC=clang build_and_test build-clang -DCMAKE_BUILD_TYPE=Release
fi

# -------------------------------------------------------------- ASan+UBSan --

if [ $sanitize -eq 1 ]; then
    CC=gcc build_and_test build-asan -DSLUICE_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug \
        -DSLUICE_BUILD_BENCH=OFF
fi

# ------------------------------------------------------------------- TSan --

if [ $tsan -eq 1 ]; then
    if CC=gcc build build-tsan -DSLUICE_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug \
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
