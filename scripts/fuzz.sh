#!/usr/bin/env bash
# fuzz.sh -- build the libFuzzer targets of tests/fuzz/ and run them.
#
#   bash scripts/fuzz.sh                     every target, 60 s each
#   FUZZ_SECONDS=3600 bash scripts/fuzz.sh   the long run: an hour each
#   bash scripts/fuzz.sh fuzz_api            only the targets named
#
# Builds with clang, ASan and UBSan (-DSLUICE_FUZZ=ON
# -DSLUICE_SANITIZE=address,undefined, RelWithDebInfo) in build-fuzz/, then
# for each target: replays its corpus (tests/fuzz/corpus/NAME; for
# fuzz_module, the Redis module's reading of stored values, its own
# tests/redis_module/corpus/fuzz_module; for fuzz_rls_request, fuzz_rls_json and
# fuzz_rls_yaml, sluice-rls's, tests/rls/corpus/NAME; for fuzz_redis_reply,
# the Redis tier's, tests/redis/corpus/NAME: every input once, must
# pass), then fuzzes for FUZZ_SECONDS (-max_total_time) with its dictionary
# (none for fuzz_module and the rls targets).  New inputs go to the
# scratch corpus build-fuzz/corpus/NAME
# (kept between runs; the repository's corpus is only read), crashes to
# build-fuzz/crashes/NAME/.  Prints the executions and coverage of each
# target; exits 1 if any target failed (a crash, a failed check, a leak, a
# sanitizer report), 2 on a usage or build problem.
#
# Installs the libFuzzer runtime when clang cannot link with it (Debian:
# libclang-rt-N-dev for clang N, through scripts/deps.sh).
# Environment: FUZZ_SECONDS (default 60), JOBS (build, default 2),
# FUZZ_ARGS (extra libFuzzer flags, e.g. "-jobs=2 -workers=2").
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${FUZZ_SECONDS:-60}
jobs=${JOBS:-2}
all=(fuzz_spec fuzz_replay fuzz_api fuzz_rules fuzz_region fuzz_conc_region fuzz_tzif fuzz_module fuzz_rls_request fuzz_rls_yaml fuzz_rls_json fuzz_redis_reply)

case ${1:-} in
-h | --help)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
    case " ${all[*]} " in
    *" $t "*) ;;
    *)
        echo "fuzz.sh: unknown target '$t' (want: ${all[*]})" >&2
        exit 2
        ;;
    esac
done
case $seconds in
'' | *[!0-9]*)
    echo "fuzz.sh: FUZZ_SECONDS must be a whole number of seconds" >&2
    exit 2
    ;;
esac

step() { printf '\n=== %s\n' "$*"; }

# ------------------------------------------------------------- toolchain --

step "toolchain: clang with libFuzzer"
bash scripts/deps.sh clang
probe=$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz.XXXXXX")
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
links() { clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; }
if ! links; then
    major=$(clang -dumpversion | cut -d. -f1)
    echo "clang $major cannot link -fsanitize=fuzzer: installing libclang-rt-$major-dev" >&2
    bash scripts/deps.sh "libclang-rt-$major-dev" || true
    if ! links; then
        echo "fuzz.sh: clang cannot link libFuzzer (install libclang-rt-$major-dev or clang's compiler-rt)" >&2
        exit 2
    fi
fi
clang --version | head -1

# ----------------------------------------------------------------- build --

build=$root/build-fuzz
step "build $build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSLUICE_FUZZ=ON -DSLUICE_SANITIZE=address,undefined -DSLUICE_BUILD_BENCH=OFF >/dev/null ||
    exit 2
cmake --build "$build" -j"$jobs" --target "${targets[@]}" || exit 2

# ------------------------------------------------------------------- run --

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

failed=()
summary=()
for t in "${targets[@]}"; do
    bin=$build/tests/fuzz/$t
    seeds=$root/tests/fuzz/corpus/$t
    dict=(-dict="$root/tests/fuzz/$t.dict")
    if [ "$t" = fuzz_module ]; then
        seeds=$root/tests/redis_module/corpus/$t
        dict=()
    fi
    case $t in
    fuzz_redis_reply)
        # the Redis tier (src/redis/): built when hiredis is found
        bin=$build/tests/fuzz/$t
        seeds=$root/tests/redis/corpus/$t
        dict=()
        ;;
    fuzz_rls_*)
        # sluice-rls (server/rls/): built when its libraries are found
        bin=$build/tests/rls/$t
        seeds=$root/tests/rls/corpus/$t
        dict=()
        ;;
    esac
    scratch=$build/corpus/$t
    crashes=$build/crashes/$t
    mkdir -p "$scratch" "$crashes"
    log=$build/$t.log

    step "$t: replay $(find "$seeds" -type f | wc -l) inputs of ${seeds#"$root"/}"
    if ! "$bin" -runs=0 "$seeds" >"$log.replay" 2>&1; then
        tail -n 40 "$log.replay"
        failed+=("$t (corpus replay)")
        summary+=("$t: corpus replay FAILED (log: $log.replay)")
        continue
    fi

    step "$t: fuzz for ${seconds}s (new inputs: build-fuzz/corpus/$t)"
    # shellcheck disable=SC2086
    if "$bin" -max_total_time="$seconds" -timeout=20 -max_len=4096 -print_final_stats=1 \
        "${dict[@]}" -artifact_prefix="$crashes/" ${FUZZ_ARGS:-} \
        "$scratch" "$seeds" >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        grep -E 'FUZZ CHECK FAILED|ERROR: |SUMMARY: |runtime error|Test unit written' "$log" | head -n 20 || true
        failed+=("$t")
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)
    summary+=("$t: $status, ${execs:-?} executions in ${seconds}s, ${cov:-no coverage line} (log: $log)")
done

step "summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]} (crashing inputs in build-fuzz/crashes/)"
    exit 1
fi
