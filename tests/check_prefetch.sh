#!/bin/sh
# check_prefetch.sh LIBSLUICE_SO -- the table's lookups must keep their
# prefetches in the library as built.  A prefetch is no side effect to the
# compiler: gcc counted src/table/table.c's prefetch_run "pure" and deleted every
# call of it that it had not inlined first -- at -O2, the default build's
# level, bursts decided at 195 ns instead of 55 with nothing to show it but
# the time.  So: disassemble the decision functions and count their
# prefetch instructions (x86-64 prefetcht0/prefetchw, arm64 prfm): a single
# call asks for five lines, a burst for five at each of its two sites.
set -eu
lib=$1
objdump=${OBJDUMP:-objdump}
command -v "$objdump" >/dev/null 2>&1 || { echo "check_prefetch.sh: $objdump not found (binutils)" >&2; exit 1; }
fail=0
check() { # function, least number of prefetches
    body=$("$objdump" -d --no-show-raw-insn "$lib" | awk -v f="<$1>:" '
        index($0, f) { on = 1; next }
        on && /^$/ { exit }
        on { print }')
    if [ -z "$body" ]; then
        echo "check_prefetch.sh: $1 not found in $lib: nothing was checked" >&2
        fail=1
        return
    fi
    n=$(printf '%s\n' "$body" | grep -cE '[[:space:]](prefetch[a-z0-9]*|prfm)[[:space:]]' || true)
    if [ "$n" -lt "$2" ]; then
        echo "check_prefetch.sh: $1 has $n prefetch instructions, at least $2 expected" >&2
        fail=1
    else
        echo "check_prefetch.sh: $1: $n prefetch instructions (at least $2)"
    fi
}
check sluice_table_try_acquire_at 5
check sluice_table_try_acquire_burst_at 10
exit $fail
