#!/usr/bin/env bash
# cli_errors.sh -- bad input to `sluice replay` is refused the contract's way.
#
#   tests/cli/cli_errors.sh PATH/TO/sluice
#
# docs/decisions.md sections 2 and 4: a bad --limit spec or a malformed trace line
# makes `sluice replay` print a message on stderr and exit with status 2; the
# message names the offending token (spec) or the line number (trace).  The
# checks match the token, not the whole wording: a token counts as named when
# it appears quoted ("tok", 'tok' or `tok`).  A few checks match a substring
# or a regular expression instead (`sub:` and `re:` below), e.g. `line 3`.
#
# Good input is checked too: blank lines, `#` comments, a header on the first
# line, absent key and permits fields, keys with spaces, the time extremes.
#
# CRLF line endings are accepted: a trailing CR is stripped from each line
# before it is parsed (a key can never contain a CR, so the CR can only be
# part of the line ending).  A CR anywhere else in a line is malformed.
#
# One line is printed per check, then `N passed, M failed`; the exit status
# is non-zero if any check failed.
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 SLUICE_BINARY" >&2
    exit 2
fi
bin=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cli.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

HEADER='time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns'
SPEC='fixed-window 10/s'
pass=0
fail=0
input=''   # the trace fed to the next run
rc=0

# run ARGS...: run the CLI on $input; sets rc, fills $tmp/out and $tmp/err.
run() {
    printf '%s' "$input" >"$tmp/in"
    if command -v timeout >/dev/null 2>&1; then
        timeout 20 "$bin" "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"
    else
        "$bin" "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"
    fi
    rc=$?
}

# names ALT: does stderr name ALT?  `sub:TEXT` a substring, `re:ERE` a
# regular expression, anything else a token in quotes.
names() {
    local alt=$1
    case $alt in
    sub:*) grep -qiF -- "${alt#sub:}" "$tmp/err" ;;
    re:*) grep -qE -- "${alt#re:}" "$tmp/err" ;;
    *) grep -qF -e "\"$alt\"" -e "'$alt'" -e "\`$alt\`" -- "$tmp/err" ;;
    esac
}

ok() {
    echo "ok   $1"
    pass=$((pass + 1))
}

bad() {
    echo "FAIL $1: $2"
    if [ -s "$tmp/err" ]; then
        head -n 5 "$tmp/err" | sed 's/^/       stderr: /'
    else
        echo "       stderr: (empty)"
    fi
    fail=$((fail + 1))
}

# expect_fail DESC ALT... -- ARGS...: exit status 2, and stderr names one of
# the ALTs.
expect_fail() {
    local desc=$1
    shift
    local alts=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        alts+=("$1")
        shift
    done
    shift
    run "$@"
    if [ $rc -ne 2 ]; then
        bad "$desc" "exit status $rc, want 2"
        return
    fi
    if [ ! -s "$tmp/err" ]; then
        bad "$desc" "nothing on stderr"
        return
    fi
    local a
    for a in "${alts[@]}"; do
        if names "$a"; then
            ok "$desc"
            return
        fi
    done
    bad "$desc" "stderr names none of: ${alts[*]}"
}

# spec_error DESC SPEC TOKEN...: the spec is refused, naming a token.
spec_error() {
    local desc=$1 spec=$2
    shift 2
    input=''
    expect_fail "bad spec, $desc: '$spec'" "$@" -- replay --limit "$spec"
}

# trace_error DESC LINE TRACE: with a good spec, the trace is refused and
# stderr names line LINE.
trace_error() {
    input=$3
    expect_fail "bad trace, $1 (line $2)" "re:line $2([^0-9]|\$)" -- replay --limit "$SPEC"
}

# expect_ok DESC TRACE ROW...: exit 0, empty stderr, and the first seven
# columns of stdout are the header then exactly the ROWs.
expect_ok() {
    local desc="good trace, $1"
    input=$2
    shift 2
    run replay --limit "$SPEC"
    if [ $rc -ne 0 ]; then
        bad "$desc" "exit status $rc, want 0"
        return
    fi
    if [ -s "$tmp/err" ]; then
        bad "$desc" "unexpected output on stderr"
        return
    fi
    { echo "$HEADER"; [ $# -gt 0 ] && printf '%s\n' "$@"; } >"$tmp/want"
    cut -d, -f1-7 <"$tmp/out" >"$tmp/got"
    if cmp -s "$tmp/want" "$tmp/got"; then
        ok "$desc"
    else
        bad "$desc" "output differs"
        diff -u --label want --label got "$tmp/want" "$tmp/got" | sed 's/^/       /'
    fi
}

# ---------------------------------------------------------------- spec --

spec_error "unknown algorithm" 'foo 10/s' foo
spec_error "unknown algorithm (a near miss)" 'token_bucket 10/s' token_bucket
spec_error "unknown option" 'token-bucket 10/s burts=5' burts=5 burts
spec_error "unknown flag option" 'fixed-window 10/s fast' fast
spec_error "burst on leaky-bucket" 'leaky-bucket 10/s burst=5' burst=5 burst
spec_error "capacity on token-bucket" 'token-bucket 10/s capacity=5' capacity=5 capacity
spec_error "nodelay on token-bucket" 'token-bucket 10/s nodelay' nodelay
spec_error "slots on fixed-window" 'fixed-window 10/s slots=10' slots=10 slots
spec_error "burst on sliding-log" 'sliding-log 10/s burst=5' burst=5 burst
spec_error "nodelay on sliding-wheel" 'sliding-wheel 10/s nodelay' nodelay
spec_error "slots on sliding-approx" 'sliding-approx 10/s slots=10' slots=10 slots
spec_error "a value on the nodelay flag" 'leaky-bucket 10/s nodelay=1' nodelay=1 nodelay

spec_error "LIMIT 0" 'fixed-window 0/s' 0 0/s
spec_error "LIMIT negative" 'fixed-window -5/s' -5 -5/s
spec_error "LIMIT not an integer" 'fixed-window 1e3/s' 1e3 1e3/s
spec_error "LIMIT 10^12+1" 'fixed-window 1000000000001/d' 1000000000001 1000000000001/d
spec_error "LIMIT beyond 2^64" 'fixed-window 99999999999999999999999/s' \
    99999999999999999999999 99999999999999999999999/s
spec_error "LIMIT empty" 'fixed-window /s' /s ''
spec_error "PERIOD 0s" 'fixed-window 10/0s' 0s 10/0s
spec_error "PERIOD 0ms" 'fixed-window 10/0ms' 0ms 10/0ms
spec_error "PERIOD negative" 'fixed-window 10/-1s' -1s 10/-1s
spec_error "PERIOD malformed" 'fixed-window 10/x' x 10/x
spec_error "PERIOD fractional" 'fixed-window 10/1.5s' 1.5s 10/1.5s
spec_error "PERIOD unit upper case" 'fixed-window 10/S' S 10/S
spec_error "PERIOD unknown unit" 'fixed-window 10/5w' 5w 10/5w
spec_error "PERIOD empty" 'fixed-window 10/' 10/ '' 'sub:missing'
spec_error "PERIOD over 36500 d" 'fixed-window 1/36501d' 36501d 1/36501d
spec_error "missing period" 'fixed-window 10' 10 'sub:missing'
spec_error "missing LIMIT/PERIOD" 'fixed-window' fixed-window 'sub:missing'
spec_error "trailing junk after the unit" 'fixed-window 10/sx' sx 10/sx
spec_error "trailing comma" 'fixed-window 10/s,' s, 10/s, ,

spec_error "burst=0" 'token-bucket 10/s burst=0' burst=0 0
spec_error "burst= (empty)" 'token-bucket 10/s burst=' burst= ''
spec_error "burst=abc" 'token-bucket 10/s burst=abc' burst=abc abc
spec_error "burst=-1" 'token-bucket 10/s burst=-1' burst=-1 -1
spec_error "burst=5x" 'token-bucket 10/s burst=5x' burst=5x 5x
spec_error "burst filling in more than 2^63-1 ns" 'token-bucket 1/d burst=106752' \
    burst=106752 106752 sub:burst=106752
spec_error "capacity=0" 'leaky-bucket 10/s capacity=0' capacity=0 0
spec_error "capacity=abc" 'leaky-bucket 10/s capacity=abc' capacity=abc abc
spec_error "slots=0" 'sliding-wheel 10/s slots=0' slots=0 0
spec_error "slots=3 on 10/s (1e9/3 ns not whole)" 'sliding-wheel 10/s slots=3' slots=3 3
spec_error "slots finer than 1 ns" 'sliding-wheel 1/ms slots=2000000' slots=2000000 2000000
spec_error "slots=abc" 'sliding-wheel 10/s slots=abc' slots=abc abc

spec_error "duplicated option" 'token-bucket 10/s burst=5 burst=6' burst=6 burst=5 burst
spec_error "duplicated flag" 'leaky-bucket 10/s nodelay nodelay' nodelay
spec_error "duplicated slots" 'sliding-wheel 10/s slots=10 slots=10' slots=10 slots
spec_error "empty spec" '' '' 'sub:empty' 'sub:missing'
spec_error "blank spec" '   ' '   ' '' 'sub:empty' 'sub:missing'

input=''
input=''
expect_fail "concurrency in a replay (a trace cannot release)" 'sub:cannot express' -- replay --limit 'concurrency 5'
expect_fail "concurrency 0 (sluice spec)" 'sub:"0"' -- spec 'concurrency 0'
expect_fail "concurrency lease=0 (sluice spec)" 'sub:lease=0' -- spec 'concurrency 5 lease=0'
expect_fail "clock=coarse in a replay (no clock is read)" 'sub:clock=coarse' -- replay --limit 'token-bucket 1/s clock=coarse'
expect_fail "usage, missing --limit" 'sub:--limit' -- replay
expect_fail "usage, --limit without a value" 'sub:--limit' -- replay --limit
expect_fail "usage, unknown flag" 'sub:--bogus' -- replay --limit "$SPEC" --bogus
expect_fail "usage, --max-keys abc" abc 'sub:abc' -- replay --limit "$SPEC" --max-keys abc
expect_fail "usage, --max-keys 0" 0 're:max-keys[^0-9]*0' -- replay --limit "$SPEC" --max-keys 0
expect_fail "usage, --max-keys -1" -1 'sub:-1' -- replay --limit "$SPEC" --max-keys -1

# --------------------------------------------------------------- trace --

trace_error "non-numeric time" 2 $'1,a,1\n1x,a,1\n'
trace_error "a header-like line that is not the first line" 3 $'1,a,1\n2,a,1\nabc\n'
trace_error "a second header line" 2 $'time_ns,key,permits\nkey,a,1\n'
trace_error "empty time" 2 $'1,a,1\n,a,1\n'
trace_error "negative time" 1 $'-1,a,1\n'
trace_error "fractional time" 2 $'1,a,1\n1.5,a,1\n'
trace_error "hexadecimal time" 2 $'1,a,1\n0x10,a,1\n'
trace_error "time 2^64 (beyond 2^64-1)" 2 $'1,a,1\n18446744073709551616,a,1\n'
trace_error "time far beyond 2^64" 2 $'1,a,1\n99999999999999999999999,a,1\n'
trace_error "permits -1" 2 $'1,a,1\n2,a,-1\n'
trace_error "permits x" 2 $'1,a,1\n2,a,x\n'
trace_error "permits 1.5" 2 $'1,a,1\n2,a,1.5\n'
trace_error "permits 2^64" 2 $'1,a,1\n2,a,18446744073709551616\n'
trace_error "permits far beyond 2^64" 2 $'1,a,1\n2,a,99999999999999999999999\n'
trace_error "too many fields" 1 $'1,a,1,2\n'
trace_error "too many fields (trailing comma)" 2 $'1,a,1\n2,a,1,\n'
trace_error "a CR inside a key" 1 $'1,a\rb,1\n'
trace_error "line numbers count comments and blank lines" 4 $'# c\n\n5,a,1\n1x,a,1\n'
trace_error "line numbers count a skipped header" 3 $'time_ns,key,permits\n1,a,1\n2,a,y\n'
# (NUL bytes inside a line are not checked.)

expect_ok "empty trace" ''
expect_ok "blank lines and comments" $'# comment\n\n1,a,1\n\n# another\n2,a,2\n' \
    '1,a,1,1,0,9,0' '2,a,2,1,0,7,0'
expect_ok "a header on the first line" $'time_ns,key,permits\n1,a,1\n' '1,a,1,1,0,9,0'
expect_ok "CRLF line endings (the CR is stripped)" \
    $'time_ns,key,permits\r\n# c\r\n\r\n1,a,1\r\n2,a\r\n3\r\n' \
    '1,a,1,1,0,9,0' '2,a,1,1,0,8,0' '3,,1,1,0,9,0'
expect_ok "absent key and permits" $'5\n6,k\n7,,3\n' \
    '5,,1,1,0,9,0' '6,k,1,1,0,9,0' '7,,3,1,0,6,0'
expect_ok "keys with spaces and other bytes" \
    $'1,hello world,1\n2, lead and trail ,1\n3,#x,1\n4,\xc3\xa9t\xc3\xa9,1\n5,hello world,1\n' \
    '1,hello world,1,1,0,9,0' '2, lead and trail ,1,1,0,9,0' '3,#x,1,1,0,9,0' \
    $'4,\xc3\xa9t\xc3\xa9,1,1,0,9,0' '5,hello world,1,1,0,8,0'
expect_ok "no newline after the last line" $'1,a,1\n2,a,1' '1,a,1,1,0,9,0' '2,a,1,1,0,8,0'
expect_ok "time 0 and 2^63-1" $'0,a,1\n9223372036854775807,b,1\n9223372036854775807,a,1\n' \
    '0,a,1,1,0,9,0' '9223372036854775807,b,1,1,0,9,0' '9223372036854775807,a,1,1,0,9,0'
expect_ok "keys out of time order (a key is not dropped by another key's later time)" \
    $'0,a,10\n5000000000,b,1\n500000000,a,1\n' \
    '0,a,10,1,0,0,0' '5000000000,b,1,1,0,9,0' '500000000,a,1,0,0,0,500000000'
expect_ok "a probe (permits 0)" $'1,a,0\n' '1,a,0,1,0,10,0'
expect_ok "permits beyond the limit, 2^64-1" $'1,a,11\n2,a,18446744073709551615\n' \
    '1,a,11,0,0,10,-1' '2,a,18446744073709551615,0,0,10,-1'

# Times 2^63 .. 2^64-1 are beyond what the contract requires: either accepted
# or refused the contract's way, never a crash.
input=$'9223372036854775808,a,1\n18446744073709551615,a,1\n'
run replay --limit "$SPEC"
desc="time 2^63 .. 2^64-1: accepted or refused cleanly"
if [ $rc -eq 0 ]; then
    ok "$desc (accepted)"
elif [ $rc -eq 2 ] && names 're:line [12]([^0-9]|$)'; then
    ok "$desc (refused)"
else
    bad "$desc" "exit status $rc"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
