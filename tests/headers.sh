#!/usr/bin/env bash
# headers.sh -- every public header compiles alone, as C and as C++.
#
#   tests/headers.sh INCLUDE_DIR CC [CXX]
#
# For each header H under INCLUDE_DIR (sluice.h and every sluice/*.h) and each
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

# Every header, each with the first function it declares (a line that
# starts a declaration: type words, then sluice_NAME( ).
headers=""
for path in "$inc"/sluice.h "$inc"/sluice/*.h; do
    [ -f "$path" ] || continue
    h=${path#"$inc"/}
    fn=$(grep -E '^[a-z][a-z0-9_ *]*[ *]sluice_[a-z0-9_]+\(' "$path" | head -n 1 |
         grep -oE 'sluice_[a-z0-9_]+\(' | head -n 1 | tr -d '(')
    if [ -z "$fn" ]; then
        echo "FAIL $h: declares no sluice_ function to probe"
        exit 1
    fi
    headers="$headers $h:$fn"
done

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
    one c "$cc" "$h" "$fn" -std=c11 -Wall -Wextra -Wpedantic -Wstrict-prototypes -Werror
    if [ -n "$cxx" ]; then
        one c++ "$cxx" "$h" "$fn" -std=c++11 -Wall -Wextra -Wpedantic -Werror
    fi
done
[ -n "$cxx" ] || echo "(no C++ compiler given: C++ not checked)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
