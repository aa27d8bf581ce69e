#!/usr/bin/env bash
# bench_replay.sh -- throughput of `sluice replay`, per algorithm.
#
# Generates a 1,000,000-line single-key trace (times 1 us apart from 1 s,
# permits 1) into a temporary file, then runs
#     sluice replay --limit 'ALG RATE' < trace > /dev/null
# 5 times per algorithm and prints the median wall time and lines/s.
# Uses hyperfine when it is installed, else a plain loop timed with
# `date +%s%N`.
#
# usage: bench/bench_replay.sh [PATH-TO-SLUICE]     (default: build/sluice)
# environment: LINES_N (default 1000000), RUNS (default 5),
#              RATE (LIMIT/PERIOD of every spec, default 100/s)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sluice=${1:-$root/build/sluice}
lines=${LINES_N:-1000000}
runs=${RUNS:-5}
rate=${RATE:-100/s}

if [[ ! -x $sluice ]]; then
    echo "bench_replay: no sluice binary at $sluice (build first, or pass its path)" >&2
    exit 2
fi

specs=(
    "fixed-window $rate"
    "sliding-log $rate"
    "sliding-wheel $rate"
    "sliding-approx $rate"
    "token-bucket $rate"
    "leaky-bucket $rate"
    "leaky-bucket $rate nodelay"
)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trace=$tmp/trace.csv
awk -v n="$lines" 'BEGIN {
    print "time_ns,key,permits"
    for (i = 0; i < n; i++) printf "%.0f,user1,1\n", 1000000000 + i * 1000
}' > "$trace"

# Check every spec once (and fail loudly) before timing anything.
for spec in "${specs[@]}"; do
    if ! "$sluice" replay --limit "$spec" < "$trace" > /dev/null 2> "$tmp/err"; then
        echo "bench_replay: sluice replay --limit '$spec' failed:" >&2
        cat "$tmp/err" >&2
        exit 1
    fi
done

# median of the numbers on stdin
median() { sort -n | awk '{ v[NR] = $1 } END {
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if command -v hyperfine > /dev/null 2>&1; then
    method="hyperfine, $runs runs after 1 warm-up"
else
    method="date +%s%N loop, $runs runs after 1 warm-up"
fi

printf 'sluice replay: %d lines, 1 key, 1 us apart, 1 permit each; %s\n' "$lines" "$method"
printf 'binary: %s\n\n' "$sluice"
printf '%-32s %12s %14s\n' "spec" "median (s)" "lines/s"

for spec in "${specs[@]}"; do
    if command -v hyperfine > /dev/null 2>&1; then
        # The command runs in hyperfine's shell, redirections included (works
        # with hyperfine versions that predate --input/--output).
        hyperfine --style none --warmup 1 --runs "$runs" \
            --export-json "$tmp/h.json" \
            "$(printf '%q replay --limit %q < %q > /dev/null' "$sluice" "$spec" "$trace")" > /dev/null
        med=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"])' "$tmp/h.json" 2>/dev/null ||
              grep -o '"median": *[0-9.e+-]*' "$tmp/h.json" | head -1 | sed 's/.*: *//')
    else
        "$sluice" replay --limit "$spec" < "$trace" > /dev/null   # warm-up
        : > "$tmp/times"
        for ((r = 0; r < runs; r++)); do
            t0=$(date +%s%N)
            "$sluice" replay --limit "$spec" < "$trace" > /dev/null
            t1=$(date +%s%N)
            echo $((t1 - t0)) >> "$tmp/times"
        done
        med=$(median < "$tmp/times" | awk '{ printf "%.6f", $1 / 1e9 }')
    fi
    awk -v s="$spec" -v m="$med" -v n="$lines" \
        'BEGIN { printf "%-32s %12.3f %14.0f\n", s, m, n / m }'
done
