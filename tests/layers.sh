#!/bin/bash
# layers.sh -- the library's layers depend one way (docs/architecture.md).
#
#   base <- alg <- timer <- {limiter, table} <- composite <- rules <- export
#
# A source file under src/LAYER/ may include a header, and call a function,
# only from its own layer or one below it; limiter/ and table/ are siblings
# and use neither the other.  Includes are read from the sources; calls are
# read from the compiled objects (nm: what each object leaves undefined,
# against what each object defines), so a call through a declaration copied
# by hand is caught too.
#
# Usage: tests/layers.sh SOURCE_DIR OBJECT_DIR
#   OBJECT_DIR: the sluice_obj objects (BUILD/CMakeFiles/sluice_obj.dir).
set -u
src=${1:?source dir}/src
obj=${2:?object dir}
declare -A rank=([base]=0 [alg]=1 [timer]=2 [limiter]=3 [table]=3
                 [composite]=4 [rules]=5 [export]=6)
bad=0
fail() {   # fail "what" "why"
    echo "layers.sh: $1 ($2)"; bad=1
}
# may FROM use TO?
allowed() {
    local from=$1 to=$2
    [ "$from" = "$to" ] && return 0
    [ -z "${rank[$to]:-}" ] && return 0       # not a layer (a public header)
    [ "${rank[$to]}" -lt "${rank[$from]}" ]
}
# 1. includes
n_inc=0
for dir in "${!rank[@]}"; do
    [ -d "$src/$dir" ] || { echo "layers.sh: no src/$dir" >&2; bad=1; continue; }
    for f in "$src/$dir"/*.[ch]; do
        [ -e "$f" ] || continue
        while IFS= read -r line; do
            to=$(sed -E 's|^#include "([a-z_]+)/.*|\1|' <<<"$line")
            n_inc=$((n_inc + 1))
            if ! allowed "$dir" "$to"; then
                fail "src/$dir/${f##*/} includes $line" "layer $to is not below $dir"
            fi
        done < <(grep -E '^#include "[a-z_]+/' "$f")
        # a bare "x.h" include of a library header hides its layer
        if grep -nE '^#include "[a-z_]+\.h"' "$f" | grep -v '"sluice' >/dev/null; then
            echo "layers.sh: src/$dir/${f##*/} includes a header without its layer:" \
                 "$(grep -E '^#include "[a-z_]+\.h"' "$f" | grep -v '"sluice' | head -1)"
            bad=1
        fi
    done
done
# 2. calls: which object defines each symbol, and which objects use it
declare -A def
n_obj=0
for dir in "${!rank[@]}"; do
    for o in "$obj/src/$dir"/*.o; do
        [ -e "$o" ] || continue
        n_obj=$((n_obj + 1))
        while read -r sym; do def[$sym]=$dir; done \
            < <(nm --defined-only "$o" | awk '$2 ~ /^[TDBR]$/ {print $3}')
    done
done
if [ "$n_obj" -lt 20 ]; then
    echo "layers.sh: found $n_obj objects under $obj/src: not the library's" >&2
    exit 1
fi
n_call=0
for dir in "${!rank[@]}"; do
    for o in "$obj/src/$dir"/*.o; do
        [ -e "$o" ] || continue
        while read -r sym; do
            to=${def[$sym]:-}
            [ -n "$to" ] || continue
            n_call=$((n_call + 1))
            if ! allowed "$dir" "$to"; then
                f=${o##*/}
                fail "src/$dir/${f%.o} calls $sym" "defined in src/$to"
            fi
        done < <(nm --undefined-only "$o" | awk '{print $2}')
    done
done
echo "layers.sh: $n_obj objects, $n_inc includes, $n_call calls between objects checked"
exit $bad
