#!/bin/bash
# bench_ab.sh -- bench/ab.sh reads every row of the five benchmarks it
# compares, and its verdicts follow the rule at its head.
#
# ab.sh parses the text the benchmarks print; a change of their format would
# make it drop rows silently, and a comparison would then pass for want of
# rows.  So this runs each of the five benchmarks of this build once, on tiny
# settings, and checks with `ab.sh --table`:
#   1. each benchmark yields at least the rows it prints today (by name);
#   2. A against itself, 3 rounds: every row within the spread ("="), exit 0;
#      and B 5% above A's median but within A's range: "=" too;
#   3. B = A with every figure x1.5 (A varying by +-1% over its rounds):
#      every row "slower", exit 1; and the other way round every row "faster";
#   4. a run that exited non-zero is reported, exit 1.
#
# Usage: tests/bench_ab.sh SOURCE_DIR BENCH_DIR   (BENCH_DIR: build/bench)
set -u
ab=${1:?source dir}/bench/ab.sh
bin=${2:?bench dir}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bad=0
fail() { echo "bench_ab.sh: $*"; bad=1; }

# The tiny settings: each run takes well under a second of CPU.
run() { # NAME BINARY ARGS...
    local name=$1 b=$2
    shift 2
    timeout 300 "$bin/$b" "$@" >"$tmp/$name.out" 2>&1
    local rc=$?
    [[ $rc == 0 ]] || fail "$b $* exited $rc: $(tail -3 "$tmp/$name.out")"
}
run decide bench_decide --runs 1 --iters 2000
run overload bench_table --overload --runs 1 --iters 2000 --flood-keys 2000
run burst bench_table --burst --runs 1 --iters 2000 --burst-keys 2000
run composite bench_composite --runs 1 --iters 4000
run region bench_region --runs 1 --decisions 2000 --keys 1000

# scale FILE FACTOR: every figure with a decimal point, v, becomes
# (v + 1) x FACTOR (the rows' ns; counts and key numbers are integers and
# stay): + 1 so that a figure printed as 0.0 on these tiny runs scales too.
scale() {
    awk -v k="$2" '{
        out = ""; s = $0
        while (match(s, /[0-9]+\.[0-9]+/)) {
            out = out substr(s, 1, RSTART - 1) sprintf("%.4f", (substr(s, RSTART, RLENGTH) + 1) * k)
            s = substr(s, RSTART + RLENGTH)
        }
        print out s
    }' "$1"
}
fill() { # DIR FACTOR_A1 FACTOR_A2 FACTOR_A3 FACTOR_B
    local d=$1 r f n
    mkdir -p "$d"
    for n in decide overload burst composite region; do
        r=0
        for f in "$2" "$3" "$4"; do
            r=$((r + 1))
            scale "$tmp/$n.out" "$f" >"$d/$n.A.$r.txt"
            scale "$tmp/$n.out" "$5" >"$d/$n.B.$r.txt"
            echo 0 >"$d/$n.A.$r.rc"
            echo 0 >"$d/$n.B.$r.rc"
        done
    done
}

# 2. against itself
fill "$tmp/same" 0.99 1 1.01 1
"$ab" --table "$tmp/same" >"$tmp/same.md"
rc=$?
[[ $rc == 0 ]] || fail "A against itself: exit $rc, expected 0"
grep -q '^| .* | = |$' "$tmp/same.md" || fail "A against itself: no row"
if grep '^| [a-z]*: ' "$tmp/same.md" | grep -v ' = |$'; then
    fail "A against itself: the rows above are not \"=\""
fi

# B's median 5% above A's, but within A's range: still "="
fill "$tmp/overlap" 0.9 1 1.1 1.05
"$ab" --table "$tmp/overlap" >"$tmp/overlap.md"
rc=$?
[[ $rc == 0 ]] || fail "B x1.05 within A's x0.9-x1.1: exit $rc, expected 0"
if grep '^| [a-z]*: ' "$tmp/overlap.md" | grep -v ' = |$'; then
    fail "B x1.05 within A's x0.9-x1.1: the rows above are not \"=\""
fi

# 1. the rows each benchmark prints today (a few named, and a count)
need=(
    "decide: floor clock+CAS" "decide: token-bucket _at allowed"
    "decide: leaky-bucket nodelay live denied"
    "decide: 2t refusing token-bucket each of 2" "decide: 2t allowed fixed-window one limiter"
    "overload: hot-key refusal 1 thread" "overload: hot-key refusal 2 threads (cpu)"
    "overload: normal decision (held key, uniform, admitted)"
    "overload: flood key (unique, refused as full) (cpu)"
    "burst: single calls (sluice_table_try_acquire_at)" "burst: bursts of 32 (..._try_acquire_burst_at) (cpu)"
    "composite: token-bucket x3 allowed composite" "composite: table keys tb x3 refused&r single"
    "region: 1000 keys region (cpu)"
)
for row in "${need[@]}"; do
    grep -qF "| $row |" "$tmp/same.md" || fail "no row \"$row\" in ab.sh's table"
done
declare -A least=([decide]=80 [overload]=8 [burst]=12 [composite]=36 [region]=4)
for n in "${!least[@]}"; do
    got=$(grep -c "^| $n: " "$tmp/same.md")
    ((got >= least[$n])) || fail "$n: $got rows parsed, expected at least ${least[$n]}"
done

# 3. slower and faster
fill "$tmp/slower" 0.99 1 1.01 1.5
"$ab" --table "$tmp/slower" >"$tmp/slower.md"
rc=$?
[[ $rc == 1 ]] || fail "B x1.5: exit $rc, expected 1"
if grep '^| [a-z]*: ' "$tmp/slower.md" | grep -v ' \*\*slower\*\* |$'; then
    fail "B x1.5: the rows above are not \"slower\""
fi
# --brief: a line per benchmark, every row of it slower, then those rows
"$ab" --table "$tmp/slower" --brief >"$tmp/brief.md"
for n in decide overload burst composite region; do
    rows=$(grep -c "^| $n: " "$tmp/slower.md")
    grep -q "^| $n | $rows | $rows | 0 | 1\.50[0-9]-1\.50[0-9] |" "$tmp/brief.md" ||
        fail "--brief: no line \"| $n | $rows | $rows | 0 | 1.5... |\""
done
[[ $(grep -c '^| [a-z]*: ' "$tmp/brief.md") == $(grep -c '^| [a-z]*: ' "$tmp/slower.md") ]] ||
    fail "--brief: not every slower row is listed"
fill "$tmp/faster" 0.99 1 1.01 0.5
"$ab" --table "$tmp/faster" >"$tmp/faster.md"
rc=$?
[[ $rc == 0 ]] || fail "B x0.5: exit $rc, expected 0"
if grep '^| [a-z]*: ' "$tmp/faster.md" | grep -v ' faster |$'; then
    fail "B x0.5: the rows above are not \"faster\""
fi

# 4. a failed run
echo 1 >"$tmp/same/region.B.2.rc"
"$ab" --table "$tmp/same" >"$tmp/failed.md"
rc=$?
[[ $rc == 1 ]] || fail "a run that exited 1: exit $rc, expected 1"
grep -q "^exit status 1: region.B.2: ." "$tmp/failed.md" || fail "a run that exited 1 is not reported"

# bad usage is refused with a message naming the token
for args in "--rounds 0 x" "--only nosuch x" "--tolerance abc x" "--table /nonexistent/dir"; do
    # shellcheck disable=SC2086
    msg=$("$ab" $args 2>&1 >/dev/null)
    rc=$?
    [[ $rc == 2 ]] || fail "ab.sh $args: exit $rc, expected 2"
    tok=${args#* }; tok=${tok%% *}
    [[ $args == --table* ]] && tok=/nonexistent/dir
    [[ $msg == *"$tok"* ]] || fail "ab.sh $args: the message \"$msg\" does not name \"$tok\""
done

if ((bad)); then
    echo "bench_ab.sh: FAILED (tables in $tmp kept)"
    trap - EXIT
    exit 1
fi
echo "bench_ab.sh: ok"
