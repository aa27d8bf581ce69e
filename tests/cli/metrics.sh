#!/usr/bin/env bash
# metrics.sh -- `sluice replay --metrics FILE`: valid Prometheus text, and
# counters equal to the decisions the replay printed.
#
#   tests/cli/metrics.sh PATH/TO/sluice
#
# For traces on every algorithm (several keys, probes, requests beyond any
# capacity, a table small enough to fill, with and without --evict-lru):
#  - `promtool check metrics` accepts FILE (no error, no lint problem);
#  - python3-prometheus-client's parser reads FILE back, and for the
#    `limit` label (the canonical form of the spec) the values equal what
#    the decisions CSV says: requests allowed (probes included) and denied,
#    permits allowed and denied, probes; the table's keys, reclaimed,
#    evicted and refused equal what --stats prints;
#  - with two --limit flags (when the CLI takes several), one series set
#    per limit, each counting every request of the trace once;
#  - --top N: keys that need escaping (double quote, backslash, a byte
#    that is not UTF-8, a tab, UTF-8, a key longer than the sketch keeps)
#    pass promtool; each key label is the key as docs/metrics.md says
#    (backslash doubled, \xNN for bytes that are not printable UTF-8, \...
#    after a truncated key), rebuilt here from the rule; every exposed count
#    is within its error of the refusals in the decisions CSV; the top N
#    lines on stderr are exact (fewer keys than counters); stdout is the
#    same CSV as without --top; --top 0, x or 1001: exit status 2;
#  - a FILE that cannot be opened: exit status 2, the file named on stderr,
#    nothing on stdout; --metrics without FILE: exit status 2.
#
# promtool (Debian `prometheus`) and the parser (Debian
# `python3-prometheus-client`) are installed with scripts/deps.sh when
# missing; if that fails the test is skipped (exit status 77, which
# tests/CMakeLists.txt declares as SKIP_RETURN_CODE) with a message saying
# what is missing.  One line is printed per check, then `N passed, M failed`.
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 SLUICE_BINARY" >&2
    exit 2
fi
bin=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-metrics.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# ---- tools ------------------------------------------------------------------

# a python3 that has prometheus_client (Debian's lives in /usr/bin/python3)
find_python() {
    local p
    for p in /usr/bin/python3 python3; do
        if command -v "$p" >/dev/null 2>&1 &&
            "$p" -c 'import prometheus_client.parser' >/dev/null 2>&1; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

if ! command -v promtool >/dev/null 2>&1 || ! find_python >/dev/null; then
    echo "metrics.sh: installing prometheus (promtool) and python3-prometheus-client" >&2
    bash "$root/scripts/deps.sh" prometheus python3-prometheus-client >&2 || true
fi
missing=""
command -v promtool >/dev/null 2>&1 || missing="$missing promtool (Debian package prometheus)"
py=$(find_python) || missing="$missing python3-prometheus-client"
if [ -n "$missing" ]; then
    echo "SKIP: cannot install:$missing" >&2
    exit 77
fi

pass=0
fail=0
ok() {
    echo "ok   $1"
    pass=$((pass + 1))
}
bad() {
    echo "FAIL $1: $2"
    fail=$((fail + 1))
}

# ---- traces -------------------------------------------------------------------

# trace SEED N: N requests over about 3 s on 12 keys; permits 0 (probe) to
# 3, and now and then 10^6 (beyond every capacity)
trace() {
    awk -v seed="$1" -v n="$2" 'BEGIN {
        srand(seed); t = 0; print "time_ns,key,permits"
        for (i = 0; i < n; i++) {
            t += int(rand() * 6000000)
            p = int(rand() * 4); if (rand() < 0.02) p = 1000000
            printf "%d,k%d,%d\n", t, int(rand() * 12), p
        }
    }'
}

# check_run NAME SPEC CANON ARGS...: replay a trace with --metrics and
# check FILE against the decisions
check_run() {
    local name=$1 spec=$2 canon=$3
    shift 3
    trace "$((pass + fail + 7))" 3000 >"$tmp/trace"
    if ! "$bin" replay --limit "$spec" --stats --metrics "$tmp/m.prom" "$@" \
        <"$tmp/trace" >"$tmp/out" 2>"$tmp/err"; then
        bad "$name" "replay failed: $(head -c 300 "$tmp/err")"
        return
    fi
    if ! promtool check metrics <"$tmp/m.prom" >"$tmp/lint" 2>&1 || [ -s "$tmp/lint" ]; then
        bad "$name: promtool check metrics" "$(head -c 600 "$tmp/lint")"
    else
        ok "$name: promtool check metrics"
    fi
    if "$py" - "$tmp/m.prom" "$tmp/out" "$tmp/err" "$canon" >"$tmp/py" 2>&1 <<'EOF'; then
import csv, sys
from prometheus_client.parser import text_string_to_metric_families

prom, decisions, stats, canon = sys.argv[1:5]
values = {}
for fam in text_string_to_metric_families(open(prom, encoding="utf-8").read()):
    for s in fam.samples:
        values[(s.name, tuple(sorted(s.labels.items())))] = s.value

def get(name, **labels):
    key = (name, tuple(sorted(labels.items())))
    if key not in values:
        sys.exit("no sample %s %s" % (name, labels))
    return values[key]

want = {"req_ok": 0, "req_no": 0, "perm_ok": 0, "perm_no": 0, "probes": 0}
rows = 0
with open(decisions, newline="") as f:
    for r in csv.DictReader(f):
        rows += 1
        p = int(r["permits"])
        if r["allowed"] == "1":
            want["req_ok"] += 1
            want["perm_ok"] += p
            want["probes"] += p == 0
        else:
            want["req_no"] += 1
            want["perm_no"] += p
got = {
    "req_ok": get("sluice_requests_total", limit=canon, decision="allowed"),
    "req_no": get("sluice_requests_total", limit=canon, decision="denied"),
    "perm_ok": get("sluice_permits_total", limit=canon, decision="allowed"),
    "perm_no": get("sluice_permits_total", limit=canon, decision="denied"),
    "probes": get("sluice_probes_total", limit=canon),
}
for k in want:
    if got[k] != want[k]:
        sys.exit("%s: metrics say %d, the decisions %d" % (k, got[k], want[k]))
if want["req_ok"] == 0 or want["req_no"] == 0 or want["probes"] == 0:
    sys.exit("a weak trace: %s" % want)
st = dict(kv.split("=") for kv in open(stats).read().split())
for series, field in (("sluice_table_keys", "keys"),
                      ("sluice_table_keys_reclaimed_total", "reclaimed"),
                      ("sluice_table_keys_evicted_total", "evicted"),
                      ("sluice_table_keys_refused_total", "refused")):
    if get(series, limit=canon) != int(st[field]):
        sys.exit("%s = %d, --stats says %s" % (series, get(series, limit=canon), st[field]))
print("rows=%d %s refused=%s evicted=%s" % (rows, want, st["refused"], st["evicted"]))
EOF
        ok "$name: values ($(cat "$tmp/py"))"
    else
        bad "$name: values" "$(tail -n 3 "$tmp/py")"
    fi
}

check_run "fixed-window" "fixed-window 100/s" "fixed-window 100/s"
check_run "sliding-log" "sliding-log 50/500ms" "sliding-log 50/500ms"
check_run "sliding-wheel" "sliding-wheel 60/s slots=20" "sliding-wheel 60/s slots=20"
check_run "sliding-approx" "sliding-approx 1000/10s" "sliding-approx 1000/10s"
check_run "token-bucket" "token-bucket 100/s burst=20" "token-bucket 100/s burst=20"
check_run "leaky-bucket shaper" "leaky-bucket 100/s capacity=10" "leaky-bucket 100/s capacity=10"
check_run "leaky-bucket meter" "leaky-bucket 100/s nodelay" "leaky-bucket 100/s nodelay"
check_run "table full (refused)" "token-bucket 1/min" "token-bucket 1/min" --max-keys 4
check_run "table full (evict-lru)" "token-bucket 1/min" "token-bucket 1/min" --max-keys 4 --evict-lru

# the refusing and evicting runs did refuse and evict
for what in refused evicted; do
    if [ "$what" = refused ]; then args=(--max-keys 4); else args=(--max-keys 4 --evict-lru); fi
    trace 3 500 | "$bin" replay --limit "token-bucket 1/min" --metrics "$tmp/m2.prom" "${args[@]}" >/dev/null
    v=$(sed -n "s/^sluice_table_keys_${what}_total{limit=\"token-bucket 1\/min\"} //p" "$tmp/m2.prom")
    if [ "${v:-0}" -gt 0 ]; then ok "${args[*]}: $what $v"; else bad "$what" "none ($v)"; fi
done

# ---- several limits -----------------------------------------------------------

trace 11 2000 >"$tmp/trace"
if "$bin" replay --limit "fixed-window 20/s" --limit "token-bucket 5/s burst=3" \
    --metrics "$tmp/m.prom" <"$tmp/trace" >"$tmp/out" 2>"$tmp/err"; then
    if grep -q 'limit="fixed-window 20/s"' "$tmp/m.prom" &&
        grep -q 'limit="token-bucket 5/s burst=3"' "$tmp/m.prom"; then
        if ! promtool check metrics <"$tmp/m.prom" >"$tmp/lint" 2>&1 || [ -s "$tmp/lint" ]; then
            bad "two limits: promtool" "$(head -c 600 "$tmp/lint")"
        elif "$py" - "$tmp/m.prom" "$tmp/out" >"$tmp/py" 2>&1 <<'EOF'; then
import csv, sys
from prometheus_client.parser import text_string_to_metric_families
v = {}
for fam in text_string_to_metric_families(open(sys.argv[1], encoding="utf-8").read()):
    for s in fam.samples:
        v[(s.name, tuple(sorted(s.labels.items())))] = s.value
from fractions import Fraction
rows = list(csv.DictReader(open(sys.argv[2], newline="")))
allowed = sum(r["allowed"] == "1" for r in rows)
# which limit refused, from the limits' own rules (exact fractions), per
# key: fixed-window 20/s counts the window's permits; token-bucket 5/s
# burst=3 is full at a key's first request and refills 5 per 1e9 ns; a
# request is charged to both only when both allow (all or nothing)
fw, tb, want = {}, {}, {}
for r in rows:
    t, k, p = int(r["time_ns"]), r["key"], int(r["permits"])
    if p == 0:
        continue
    win = fw.setdefault(k, [-1, 0])
    if win[0] != t // 10**9:
        win[:] = [t // 10**9, 0]
    tok, last = tb.setdefault(k, [Fraction(3), t])
    tok = min(Fraction(3), tok + Fraction(5 * (t - last), 10**9)) if t > last else tok
    a_ok, b_ok = win[1] + p <= 20, tok >= p
    if a_ok and b_ok:
        win[1] += p
        tb[k] = [tok - p, max(t, last)]
    elif a_ok or b_ok:
        x = "fixed-window 20/s" if a_ok else "token-bucket 5/s burst=3"
        want[x] = want.get(x, 0) + 1
    if (a_ok and b_ok) != (r["allowed"] == "1"):
        sys.exit("row %r: the model says %s" % (r, a_ok and b_ok))
for canon in ("fixed-window 20/s", "token-bucket 5/s burst=3"):
    ok = v[("sluice_requests_total", (("decision", "allowed"), ("limit", canon)))]
    no = v[("sluice_requests_total", (("decision", "denied"), ("limit", canon)))]
    el = v[("sluice_requests_total", (("decision", "denied_elsewhere"), ("limit", canon)))]
    if ok + no + el != len(rows):
        sys.exit("%s decided %d requests, the trace has %d" % (canon, ok + no + el, len(rows)))
    if ok != allowed:
        sys.exit("%s allowed %d, the composite %d" % (canon, ok, allowed))
    if el != want.get(canon, 0):
        sys.exit("%s denied_elsewhere %d, the model %d" % (canon, el, want.get(canon, 0)))
print("rows=%d allowed=%d denied_elsewhere=%s" % (len(rows), allowed, sorted(want.values())))
EOF
            ok "two limits: one series set each ($(cat "$tmp/py"))"
        else
            bad "two limits: values" "$(tail -n 3 "$tmp/py")"
        fi
    else
        echo "note: this CLI keeps one --limit (the last); the two-limit check is skipped"
    fi
else
    bad "two limits" "replay failed: $(head -c 300 "$tmp/err")"
fi

# ---- the keys refused most ------------------------------------------------------

# keys: plain, a double quote, a backslash, byte 0xff, a tab, UTF-8, the C1
# controls U+0085 and U+009B (C2 85, C2 9B: written \xc2\x85), and 200
# bytes (kept to 128); rates so every one is refused some
awk 'BEGIN {
    srand(17); print "time_ns,key,permits"
    long = ""; for (i = 0; i < 200; i++) long = long "L"
    k[0] = "hot"; k[1] = "q\"uote"; k[2] = "back\\slash"; k[3] = "bad\377byte"
    k[4] = "tab\there"; k[5] = "\303\251t\303\251"; k[6] = long; k[7] = "cold"
    k[8] = "nel\302\205line"; k[9] = "csi\302\2330m"
    t = 0
    for (i = 0; i < 4000; i++) {
        t += 250000; r = rand()
        j = r < 0.3 ? 0 : r < 0.42 ? 1 : r < 0.5 ? 2 : r < 0.58 ? 3 : r < 0.66 ? 4 : r < 0.74 ? 5 : r < 0.82 ? 6 : r < 0.88 ? 8 : r < 0.94 ? 9 : 7
        printf "%d,%s,1\n", t, k[j]
    }
}' >"$tmp/ktrace"
if "$bin" replay --limit "token-bucket 20/s burst=4" --top 5 --metrics "$tmp/k.prom" \
    <"$tmp/ktrace" >"$tmp/kout" 2>"$tmp/kerr" &&
    "$bin" replay --limit "token-bucket 20/s burst=4" <"$tmp/ktrace" >"$tmp/kout0" 2>/dev/null; then
    if ! promtool check metrics <"$tmp/k.prom" >"$tmp/lint" 2>&1 || [ -s "$tmp/lint" ]; then
        bad "--top: promtool check metrics" "$(head -c 600 "$tmp/lint")"
    else
        ok "--top: promtool check metrics (keys that need escaping)"
    fi
    if cmp -s "$tmp/kout" "$tmp/kout0"; then
        ok "--top: stdout the same CSV"
    else
        bad "--top: stdout" "differs from a run without --top"
    fi
    if "$py" - "$tmp/k.prom" "$tmp/kout" "$tmp/kerr" >"$tmp/py" 2>&1 <<'EOF'; then
import sys
from prometheus_client.parser import text_string_to_metric_families

def label_of(key, keep=128):
    """the key label docs/metrics.md defines, written here from the rule"""
    out, b, i = [], key[:keep], 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
        try:
            ch = b[i:i + n].decode("utf-8") if n else None
        except UnicodeDecodeError:
            ch = None
        if ch is None or c < 0x20 or c == 0x7F:
            out.append("\\x%02x" % c)
            i += 1
        elif 0x80 <= ord(ch) <= 0x9F:  # C1 controls: both bytes as \xNN
            out.append("\\x%02x\\x%02x" % (b[i], b[i + 1]))
            i += 2
        elif ch == "\\":
            out.append("\\\\")
            i += 1
        else:
            out.append(ch)
            i += n
    return "".join(out) + ("\\..." if len(key) > keep else "")

def cli_of(key, keep=128):
    s = "".join("\\\\" if c == 0x5C else chr(c) if 0x20 <= c < 0x7F else "\\x%02x" % c
                for c in key[:keep])
    return s + ("\\..." if len(key) > keep else "")

prom, decisions, err = sys.argv[1:4]
refused = {}
with open(decisions, "rb") as f:
    next(f)
    for line in f:
        t, key, p, allowed = line.rstrip(b"\n").split(b",")[:4]
        if allowed == b"0":
            refused[key] = refused.get(key, 0) + 1
want = {label_of(k): v for k, v in refused.items()}
got, errs = {}, {}
for fam in text_string_to_metric_families(open(prom, encoding="utf-8").read()):
    for s in fam.samples:
        if s.name == "sluice_table_refused_key_requests":
            got[s.labels["key"]] = s.value
        elif s.name == "sluice_table_refused_key_error":
            errs[s.labels["key"]] = s.value
if len(want) != 10 or len(got) != 10:
    sys.exit("keys refused: %d in the CSV, %d exposed" % (len(want), len(got)))
for k, v in want.items():
    if k not in got:
        sys.exit("key label %r not exposed (have %r)" % (k, sorted(got)))
    if not (got[k] - errs[k] <= v <= got[k]):
        sys.exit("%r: exposed %d (error %d), refused %d" % (k, got[k], errs[k], v))
top = sorted(refused.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
lines = open(err, "rb").read().decode("ascii").splitlines()
exp = ["top=%d count=%d error=0 key=%s" % (i + 1, v, cli_of(k)) for i, (k, v) in enumerate(top)]
if lines != exp:
    sys.exit("stderr:\n%s\nexpected:\n%s" % ("\n".join(lines), "\n".join(exp)))
print("%d keys, top %s" % (len(want), [v for k, v in top]))
EOF
        ok "--top: key labels and counts ($(cat "$tmp/py"))"
    else
        bad "--top: values" "$(tail -n 4 "$tmp/py")"
    fi
else
    bad "--top" "replay failed: $(head -c 300 "$tmp/kerr")"
fi
for v in 0 x 1001; do
    "$bin" replay --limit "fixed-window 1/s" --top "$v" <"$tmp/ktrace" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "--top" "$tmp/err" && [ ! -s "$tmp/out" ]; then
        ok "--top $v: exit 2"
    else
        bad "--top $v" "exit $rc, stderr: $(head -c 200 "$tmp/err")"
    fi
done

# ---- errors -------------------------------------------------------------------

trace 5 10 >"$tmp/trace"
"$bin" replay --limit "fixed-window 1/s" --metrics "$tmp/no/such/dir/m.prom" \
    <"$tmp/trace" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF "\"$tmp/no/such/dir/m.prom\"" "$tmp/err" && [ ! -s "$tmp/out" ]; then
    ok "unwritable FILE: exit 2, named, no output"
else
    bad "unwritable FILE" "exit $rc, stderr: $(head -c 200 "$tmp/err"), stdout $(wc -c <"$tmp/out") bytes"
fi
"$bin" replay --limit "fixed-window 1/s" --metrics <"$tmp/trace" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF -- "--metrics" "$tmp/err"; then
    ok "--metrics without FILE: exit 2"
else
    bad "--metrics without FILE" "exit $rc, stderr: $(head -c 200 "$tmp/err")"
fi
if "$bin" replay --help | grep -qF -- "--metrics FILE"; then
    ok "replay --help documents --metrics"
else
    bad "replay --help" "no --metrics FILE"
fi
if "$bin" replay --help | grep -qF -- "--top N"; then
    ok "replay --help documents --top"
else
    bad "replay --help" "no --top N"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
