#!/usr/bin/env bash
# calendar.sh -- `sluice replay` with calendar quotas (fixed-window with
# tz=ZONE, docs/spec.md "Calendar quotas").  The expected rows were worked
# out by hand; the comments show the working.
#
#   tests/cli/calendar.sh PATH/TO/sluice
set -u
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 SLUICE_BINARY" >&2
    exit 2
fi
bin=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cal.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
HEADER='time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns'

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

expect_fail() {
    local name=$1 pat=$2
    shift 2
    printf '0,a\n' | "$bin" replay "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$pat" "$tmp/err" && ! grep -q . "$tmp/out"; then
        echo "ok   $name"
        pass=$((pass + 1))
    else
        echo "FAIL $name (exit $rc, want 2 and \"$pat\")"
        cat "$tmp/err"
        fail=$((fail + 1))
    fi
}

# Paris, 2024-03-31: CET -> CEST at 01:00 UTC, a 23-hour day from
# 2024-03-30 23:00 UTC (1711839600 s) to 2024-03-31 22:00 UTC (1711922400 s).
# Key a: two admitted at 00:00 local, the third refused until 22:00 UTC
# (82800 s = 23 h later); key b has its own window.
D0=1711839600000000000
check "Paris, a 23-hour day" \
"$D0,a
$((D0 + 1)),a
$((D0 + 2)),a
$((D0 + 2)),b
1711922399999999999,a
1711922400000000000,a
" \
"$D0,a,1,1,0,1,0
$((D0 + 1)),a,1,1,0,0,0
$((D0 + 2)),a,1,0,0,0,82799999999998
$((D0 + 2)),b,1,1,0,1,0
1711922399999999999,a,1,0,0,0,1
1711922400000000000,a,1,1,0,1,0
" --limit 'fixed-window 2/d tz=Europe/Paris'

# A month from day 31 in UTC: 2024-01-31 (1706659200 s) to 2024-02-29
# (1709164800 s), then to 2024-03-31 (1711843200 s).
check "a month from the 31st, in February of a leap year" \
"1709164799000000000,k,3
1709164799000000000,k
1709164800000000000,k,3
1711843199999999999,k
" \
"1709164799000000000,k,3,1,0,0,0
1709164799000000000,k,1,0,0,0,1000000000
1709164800000000000,k,3,1,0,0,0
1711843199999999999,k,1,0,0,0,1
" --limit 'fixed-window 3/month tz=UTC anchor=31'

# A calendar quota beside a spec without tz=: one trace, one axis (the
# epoch's), so the composite decides both.  The day ends at 2024-02-29
# 00:00 UTC (1709164800 s): the third request, refused by the day quota
# (the bucket of 10 still has 8), may retry in 0.8 s.
check "a day quota and a token bucket, one axis" \
"1709164799000000000,k
1709164799100000000,k
1709164799200000000,k
" \
"1709164799000000000,k,1,1,0,1,0
1709164799100000000,k,1,1,0,0,0
1709164799200000000,k,1,0,0,0,800000000
" --limit 'fixed-window 2/d tz=UTC' --limit 'token-bucket 10/s'

expect_fail "an unknown zone" 'unknown zone "Mars/Base"' --limit 'fixed-window 2/d tz=Mars/Base'
expect_fail "anchor=32" 'anchor=32' --limit 'fixed-window 2/month tz=UTC anchor=32'
expect_fail "tz= on token-bucket" 'fixed-window only' --limit 'token-bucket 2/d tz=UTC'

# `sluice hammer` decides a calendar quota at the table's own clock (the
# epoch's; a smoke check: the count alone cannot tell the axes apart, and
# it stays 3 per key unless the run crosses a UTC midnight).
out=$("$bin" hammer --limit 'fixed-window 3/d tz=UTC' --duration 100ms --keys 2 2>&1 | tail -1)
case "$out" in
allowed=6\ * | allowed=[7-9]\ * | allowed=1[0-2]\ *) echo "ok   hammer on a calendar quota: ${out%% elapsed*}"; pass=$((pass + 1)) ;;
*) echo "FAIL hammer on a calendar quota: $out"; fail=$((fail + 1)) ;;
esac

echo "calendar.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
