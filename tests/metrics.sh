#!/usr/bin/env bash
# metrics.sh -- `sluice replay --metrics FILE`: valid Prometheus text, and
# counters equal to the decisions the replay printed.
#
#   tests/metrics.sh PATH/TO/sluice
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
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
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
rows = list(csv.DictReader(open(sys.argv[2], newline="")))
allowed = sum(r["allowed"] == "1" for r in rows)
for canon in ("fixed-window 20/s", "token-bucket 5/s burst=3"):
    ok = v[("sluice_requests_total", (("decision", "allowed"), ("limit", canon)))]
    no = v[("sluice_requests_total", (("decision", "denied"), ("limit", canon)))]
    if ok + no != len(rows):
        sys.exit("%s decided %d requests, the trace has %d" % (canon, ok + no, len(rows)))
    if ok != allowed:
        sys.exit("%s allowed %d, the composite %d" % (canon, ok, allowed))
print("rows=%d allowed=%d" % (len(rows), allowed))
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

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
