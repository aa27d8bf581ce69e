#!/usr/bin/env bash
# golden.sh -- replay the contract's worked examples through the CLI.
#
#   tests/cli/golden.sh PATH/TO/sluice PATH/TO/tests/golden
#
# Every NAME.trace in the golden directory names its spec on its first line,
# `# spec: SPEC`.  The trace is fed to `sluice replay --limit 'SPEC'` and the
# first seven CSV columns of the output (the contract's columns; the CLI may
# add more after them) must equal NAME.expected byte for byte, header line
# included.  Each mismatch is shown as a unified diff.  The last line printed
# is `N passed, M failed`; the exit status is 0 only when nothing failed and
# at least one trace was found.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 SLUICE_BINARY GOLDEN_DIR" >&2
    exit 2
fi
bin=$1
dir=$2
if [ ! -x "$bin" ]; then
    echo "golden: $bin is not an executable" >&2
    exit 2
fi
if [ ! -d "$dir" ]; then
    echo "golden: $dir is not a directory" >&2
    exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-golden.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

pass=0
fail=0
shopt -s nullglob
traces=("$dir"/*.trace)
if [ ${#traces[@]} -eq 0 ]; then
    echo "golden: no *.trace files in $dir" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

for trace in "${traces[@]}"; do
    name=$(basename "$trace" .trace)
    expected="$dir/$name.expected"
    first=$(head -n 1 "$trace")
    first=${first%$'\r'}
    case $first in
    "# spec: "*) spec=${first#"# spec: "} ;;
    *)
        echo "FAIL $name: first line is not '# spec: SPEC'"
        fail=$((fail + 1))
        continue
        ;;
    esac
    if [ ! -f "$expected" ]; then
        echo "FAIL $name: $expected is missing"
        fail=$((fail + 1))
        continue
    fi

    "$bin" replay --limit "$spec" <"$trace" >"$tmp/$name.out" 2>"$tmp/$name.err"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL $name: sluice replay --limit '$spec' exited $rc"
        sed 's/^/    stderr: /' "$tmp/$name.err"
        fail=$((fail + 1))
        continue
    fi

    # Keys never contain a comma (docs/decisions.md section 4), so cutting on
    # commas keeps exactly the contract's seven columns.
    cut -d, -f1-7 <"$tmp/$name.out" >"$tmp/$name.got"
    if diff -u --label "$name.expected" --label "$name.actual (columns 1-7)" \
        "$expected" "$tmp/$name.got" >"$tmp/$name.diff"; then
        echo "ok   $name ($spec)"
        pass=$((pass + 1))
    else
        echo "FAIL $name ($spec): output differs from $name.expected"
        cat "$tmp/$name.diff"
        fail=$((fail + 1))
    fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
