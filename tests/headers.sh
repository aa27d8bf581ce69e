#!/usr/bin/env bash
# headers.sh -- every public header compiles alone, as C and as C++.
#
#   tests/headers.sh INCLUDE_DIR CC [CXX]
#
# For each header H under INCLUDE_DIR (sluice.h and sluice/*.h) and each
# language, a translation unit of nothing but `#include <H>`, a pointer to
# one function H declares and an error code (SLUICE_EINVAL, which every
# header must define) is compiled with all warnings as errors
# (C11, and C++11 when CXX is given and works).  The C++ object must refer
# to that function by its plain C name, unmangled: the header's own
# extern "C".  Each header is also included twice (its guard).  The last
# line is `N passed, M failed`; the exit status is 0 only when nothing
# failed.
set -u

if [ $# -lt 2 ]; then
    echo "usage: $0 INCLUDE_DIR CC [CXX]" >&2
    exit 2
fi
inc=$1
cc=$2
cxx=${3:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-headers.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# header : a function it declares
headers="sluice.h:sluice_limiter_new sluice/errors.h:sluice_strerror
sluice/wheel.h:sluice_wheel_new sluice/redis.h:sluice_redis_new"

pass=0
fail=0
one() { # LANG COMPILER FLAGS... -- header function
    local lang=$1 comp=$2 h=$3 fn=$4
    shift 4
    local ext=c
    [ "$lang" = c++ ] && ext=cc
    local src="$tmp/probe.$ext" obj="$tmp/probe.o"
    printf '#include <%s>\n#include <%s>\n%s\n%s\n' "$h" "$h" \
        "void (*sluice_header_probe)(void) = (void (*)(void))&$fn;" \
        "int sluice_header_code = SLUICE_EINVAL;" >"$src"
    if ! "$comp" "$@" -I"$inc" -c "$src" -o "$obj" 2>"$tmp/err"; then
        echo "FAIL $h as $lang:"
        sed 's/^/    /' "$tmp/err"
        fail=$((fail + 1))
        return
    fi
    if ! nm "$obj" | grep -Eq "^ +U $fn\$"; then
        echo "FAIL $h as $lang: no plain reference to $fn (name mangled?)"
        nm "$obj" | sed 's/^/    /'
        fail=$((fail + 1))
        return
    fi
    echo "ok   $h as $lang"
    pass=$((pass + 1))
}

for entry in $headers; do
    h=${entry%%:*}
    fn=${entry#*:}
    if [ ! -f "$inc/$h" ]; then
        echo "FAIL $h: not found under $inc"
        fail=$((fail + 1))
        continue
    fi
    one c "$cc" "$h" "$fn" -std=c11 -Wall -Wextra -Wpedantic -Wstrict-prototypes -Werror
    if [ -n "$cxx" ]; then
        one c++ "$cxx" "$h" "$fn" -std=c++11 -Wall -Wextra -Wpedantic -Werror
    fi
done
[ -n "$cxx" ] || echo "(no C++ compiler given: C++ not checked)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
