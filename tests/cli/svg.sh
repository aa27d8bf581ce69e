#!/usr/bin/env bash
# svg.sh -- `sluice demo --svg FILE`: a well-formed SVG that shows what the
# demo computed, and the picture in docs/ is the one the demo draws now.
#
#   tests/cli/svg.sh PATH/TO/sluice
#
# Checks:
#  - the demo exits 0 and FILE is well-formed XML (`xmllint --noout`) whose
#    root is an <svg> element in the SVG namespace;
#  - one lane per algorithm of the demo plus the requests offered, each
#    labelled with its spec, and the dashed limit line in each;
#  - the numbers drawn are the demo's: for each spec, the peak written at the
#    right of its lane equals the "max/1s" column of the demo's table, and
#    the fixed window's lane says 2.00x the limit;
#  - docs/demo.svg is byte for byte what the demo writes (regenerate it with
#    `build/sluice demo --svg docs/demo.svg`);
#  - `--svg` without FILE, and a FILE that cannot be opened: exit status 2,
#    a message on stderr, nothing on stdout.
#
# xmllint (Debian `libxml2-utils`) is installed with scripts/deps.sh when
# missing; if that fails the test is skipped (exit status 77, declared as
# SKIP_RETURN_CODE in tests/CMakeLists.txt).
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 SLUICE_BINARY" >&2
    exit 2
fi
bin=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-svg.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

if ! command -v xmllint >/dev/null 2>&1; then
    echo "svg.sh: installing libxml2-utils (xmllint)" >&2
    bash "$root/scripts/deps.sh" libxml2-utils >&2 || true
fi
if ! command -v xmllint >/dev/null 2>&1; then
    echo "SKIP: cannot install xmllint (Debian package libxml2-utils)" >&2
    exit 77
fi

pass=0
fail=0
check() { # check NAME COMMAND...
    local name=$1
    shift
    if "$@"; then
        echo "ok   $name"
        pass=$((pass + 1))
    else
        echo "FAIL $name"
        fail=$((fail + 1))
    fi
}

svg=$tmp/demo.svg
"$bin" demo --svg "$svg" >"$tmp/table" 2>"$tmp/err"
check "demo --svg exits 0" test $? -eq 0
check "nothing on stderr" test ! -s "$tmp/err"
check "xmllint --noout" xmllint --noout "$svg"

xp() { xmllint --xpath "$1" "$svg" 2>/dev/null; }
check "root is svg in the SVG namespace" \
    test "$(xp 'namespace-uri(/*)')" = "http://www.w3.org/2000/svg" -a "$(xp 'local-name(/*)')" = svg

# the specs, from the demo's own table (rows between the header and the blank line)
mapfile -t rows < <(awk '/^spec /{on=1; next} on && NF==0 {exit} on' "$tmp/table")
check "the table has 7 algorithms" test ${#rows[@]} -eq 7
lanes=$(xp 'count(//*[local-name()="text" and @text-anchor="end" and @font-size="14"])')
check "one lane per algorithm and one for the requests (8 labels)" test "$lanes" = 8
dashed=$(xp 'count(//*[local-name()="line" and @stroke-dasharray])')
check "a limit line in each lane" test "$dashed" = 8

for row in "${rows[@]}"; do
    # the spec is everything before the admitted column (N/1700)
    spec=$(sed -E 's| +[0-9]+/1700 .*||' <<<"$row")
    max=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\/200$/) {print $(i + 1); exit}}' <<<"$row")
    # the bold label of the lane, then the first bold number at the right (x > 800)
    peak=$(xp "string(//*[local-name()='text' and @font-size='14' and text()='$spec']/following-sibling::*[local-name()='text' and @font-size='14' and number(@x) > 800][1])")
    check "lane \"$spec\" drawn with peak $max" test -n "$max" -a "$peak" = "$max"
done
check "fixed window: 2.00x the limit" grep -q '>2.00× the limit<' "$svg"
check "fixed window's note: 200 within 20 ms" grep -q '>200 through within 20 ms at the window edge' "$svg"

check "docs/demo.svg is what the demo draws" cmp -s "$svg" "$root/docs/demo.svg"

# bad usage
"$bin" demo --svg >"$tmp/out" 2>"$tmp/err"
check "--svg without FILE: exit 2" test $? -eq 2
check "--svg without FILE: message, no output" test -s "$tmp/err" -a ! -s "$tmp/out"
"$bin" demo --svg "$tmp/no/such/dir/x.svg" >"$tmp/out" 2>"$tmp/err"
check "unwritable FILE: exit 2" test $? -eq 2
check "unwritable FILE: named on stderr, no output" \
    grep -q "no/such/dir/x.svg" "$tmp/err" && test ! -s "$tmp/out"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
