#!/usr/bin/env bash
# composite.sh -- `sluice replay` with several --limit flags: every request
# is decided by all the limits at once (docs/composite.md, "Several limits on one
# request").  The expected rows below were computed by hand from the
# decision rules; the comments show the working.
#
#   tests/cli/composite.sh PATH/TO/sluice
set -u
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 SLUICE_BINARY" >&2
    exit 2
fi
bin=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-comp.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
HEADER='time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns'

# check NAME TRACE EXPECTED ARGS...: the decisions must be exactly EXPECTED
check() {
    local name=$1 trace=$2 want=$3
    shift 3
    printf '%s' "$trace" | "$bin" replay "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    printf '%s\n%s' "$HEADER" "$want" >"$tmp/want"
    if [ $rc -eq 0 ] && diff -u "$tmp/want" "$tmp/out" >"$tmp/diff"; then
        echo "ok   $name"
        pass=$((pass + 1))
    else
        echo "FAIL $name (exit $rc)"
        cat "$tmp/diff" "$tmp/err"
        fail=$((fail + 1))
    fi
}

# expect_fail NAME PATTERN ARGS...: exit 2, stderr matching PATTERN, no rows
expect_fail() {
    local name=$1 pat=$2
    shift 2
    printf '0,a\n' | "$bin" replay "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q -- "$pat" "$tmp/err"; then
        echo "ok   $name"
        pass=$((pass + 1))
    else
        echo "FAIL $name (exit $rc)"
        cat "$tmp/err"
        fail=$((fail + 1))
    fi
}

# fixed-window 3/s AND token-bucket 1/s burst=2 (r = 1e-9 permit/ns)
#  0      fw: 0 used -> ok, 2 left        tb: 2 tokens -> ok, 1 left     => 1
#  1      fw: ok, 1 left                  tb: 1+1e-9 -> ok, 0 left       => 0
#  2      fw: would allow (1 left w/o p)  tb: 2e-9 tokens: refuses,
#                                         retry ceil((1-2e-9)/1e-9)
#  3 p=2  fw: 2 used, refuses until 1e9   tb: 3e-9 tokens, needs 2:
#                                         retry 2e9-3 (the largest wins)
#  0.5s   fw: would allow (1 left)        tb: 0.5 tokens, retry 0.5e9
#         (nothing was charged at 2 and 3: the bucket kept its tokens)
#  1s     fw: new window, ok, 2 left      tb: 1.0 token -> ok, 0 left
#  1s+1 probe: allowed, remaining min(2, 0)
check "fixed-window AND token-bucket" \
'0,a
1,a
2,a
3,a,2
500000000,a
1000000000,a
1000000001,a,0
' \
'0,a,1,1,0,1,0
1,a,1,1,0,0,0
2,a,1,0,0,0,999999998
3,a,2,0,0,0,1999999997
500000000,a,1,0,0,0,500000000
1000000000,a,1,1,0,0,0
1000000001,a,0,1,0,0,0
' --limit 'fixed-window 3/s' --limit 'token-bucket 1/s burst=2'

# leaky-bucket 2/s capacity=3 (shaper) AND sliding-log 2/s
#  b@0    lb: water 0 -> ok, wait 0, 2 left   sl: ok, 1 left         => 1
#  b@0    lb: water 1 -> ok, wait 1/r = 0.5s  sl: ok, 0 left         => wait 0.5s
#  b@0    lb: would allow (water 2, 1 left)   sl: 2 in window, refuses
#                                             until both leave at 1s
#  b@0 p=4 lb: 4 > capacity: -1               sl: 4 > 2: -1
#  b@1s   lb: water drained to 0 -> ok        sl: t=0 is out of (0, 1s] => 1
#  c@5 p=3 lb: would allow (3 left w/o p)     sl: 3 > 2: -1          => rem 2
#  c@6 p=2 lb: nothing was charged at 5: water 0, ok, 1 left; sl ok, 0 left
check "leaky-bucket AND sliding-log, two keys" \
'0,b
0,b
0,b
0,b,4
1000000000,b
5,c,3
6,c,2
' \
'0,b,1,1,0,1,0
0,b,1,1,500000000,0,0
0,b,1,0,0,0,1000000000
0,b,4,0,0,0,-1
1000000000,b,1,1,0,1,0
5,c,3,0,0,2,-1
6,c,2,1,0,0,0
' --limit 'leaky-bucket 2/s capacity=3' --limit 'sliding-log 2/s'

# one key's limits never touch another's; the same spec twice is two limits
#  a@0..1: fixed-window 2/s twice: each keeps its own count -> 1, 0 left
#  a@2: both refuse until 1s; x@3 is a fresh key
check "the same spec twice, and keys apart" \
'0,a
1,a
2,a
3,x
' \
'0,a,1,1,0,1,0
1,a,1,1,0,0,0
2,a,1,0,0,0,999999998
3,x,1,1,0,1,0
' --limit 'fixed-window 2/s' --limit 'fixed-window 2/s'

# sliding-approx 4/s AND sliding-wheel 2/s slots=2 (500 ms slots)
#  0, 1   sa: est 0 then 1 -> ok, 3 then 2 left; sw: ok, 1 then 0 left
#  0.5s   sa: est 2, would allow (2 left w/o p); sw: slots 0 and 1 count,
#         both entries (slot 0) leave at slot 2 = 1s: retry 0.5s
#  1.25s  sa: window 1, f = 1/4, est = 2*3/4 = 1.5, ok, remaining
#         floor(4 - 1.5 - 1) = 1; sw: slot 2, window slots 1..2, empty: ok, 1 left
check "sliding-approx AND sliding-wheel" \
'0,k
1,k
500000000,k
1250000000,k
' \
'0,k,1,1,0,1,0
1,k,1,1,0,0,0
500000000,k,1,0,0,0,500000000
1250000000,k,1,1,0,1,0
' --limit 'sliding-approx 4/s' --limit 'sliding-wheel 2/s slots=2'

expect_fail "a bad second spec is named" '"bogus' --limit 'fixed-window 1/s' --limit 'bogus 1/s'
expect_fail "a bad option in a later spec is named" '"burts=2"' --limit 'fixed-window 1/s' --limit 'token-bucket 1/s burts=2'
args=()
for i in $(seq 17); do args+=(--limit 'fixed-window 1/s'); done
expect_fail "more than 16 limits" 'at most 16' "${args[@]}"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
