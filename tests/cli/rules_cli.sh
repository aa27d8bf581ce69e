#!/usr/bin/env bash
# rules_cli.sh -- `sluice check FILE` and `sluice replay --rules FILE`.
#
#   tests/cli/rules_cli.sh PATH/TO/sluice
#
#  - sluice check: exit 0 and "FILE: ok, N rules, M overrides" for a good
#    file; exit 2 for each bad one, the message naming the line ("line N")
#    and the offending token (quoted); exit 2 for a missing file or bad
#    usage.
#  - sluice replay --rules: a small trace whose decisions are computed by
#    hand below (every row exact), the per-rule counters of --stats, the
#    metrics (promtool check metrics, when promtool is installed); bad
#    trace lines (unknown rule, empty list, a rule twice) exit 2 naming the
#    line; --rules with --limit exits 2.
# One line is printed per check, then `N passed, M failed`.
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 SLUICE_BINARY" >&2
    exit 2
fi
bin=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-rules.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; [ -s "$tmp/err" ] && sed 's/^/     stderr: /' "$tmp/err" | head -3; }

# ---- sluice check -------------------------------------------------------------

cat >"$tmp/good.conf" <<'CONF'
# name       scope   spec                            options
rule per-client key  "token-bucket 10/s burst=20"    max_keys=100000 policy=refuse
rule global  global  "sliding-wheel 100000/1m"
rule per-route key   "fixed-window 500/1s"           max_keys=1000 shadow
CONF
"$bin" check "$tmp/good.conf" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && grep -qF "good.conf: ok, 3 rules, 0 overrides" "$tmp/out"; then ok "check: a good file"; else ko "check: a good file (rc=$rc)"; fi

# bad FILE-TEXT LINE TOKEN: check exits 2 naming "line LINE" and "TOKEN"
bad() {
    printf '%b' "$1" >"$tmp/bad.conf"
    "$bin" check "$tmp/bad.conf" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -qF "line $2:" "$tmp/err" &&
        grep -qF -- "\"$3\"" "$tmp/err" && grep -qF "bad.conf" "$tmp/err"; then
        ok "check: $3 on line $2"
    else
        ko "check: $3 on line $2 (rc=$rc)"
    fi
}
bad 'rul x key "fixed-window 1/s"\n' 1 rul
bad '# ok\nrule x key "fixed-window 1/s" burts=5\n' 2 burts=5
bad 'rule x key "token-bucket 10/s burts=5"\n' 1 burts=5
bad 'rule x key fixed-window 1/s\n' 1 fixed-window
bad 'rule x zone "fixed-window 1/s"\n' 1 zone
bad 'rule x global "fixed-window 1/s" max_keys=5\n' 1 max_keys=5
bad 'rule x key "fixed-window 1/s" policy=drop\n' 1 policy=drop
bad 'rule x key "fixed-window 1/s"\n\nrule x key "fixed-window 2/s"\n' 3 x
bad 'override y k "fixed-window 1/s"\n' 1 y
bad 'rule x key "fixed-window 1/s" max_keys=0\n' 1 max_keys=0
bad 'rule x key "fixed-window 1/s\n' 1 '"fixed-window 1/s'

# what the load refuses, check refuses (one validation): an override whose
# state does not fit the rule's 16-byte entries, a max_keys no table gets
bad 'rule a key "sliding-approx 10/s"\noverride a big "sliding-approx 10000000000/s"\n' 2 big
bad 'rule a key "token-bucket 10/s"\noverride a big "token-bucket 999999999999/s burst=100000000000"\n' 2 big
bad 'rule a key "token-bucket 10/s" max_keys=4294967296\n' 1 max_keys=4294967296
# a quoted word is named in one pair of quotes
bad 'rule "k" global "fixed-window 1/s"\n' 1 k
if ! grep -qF '""k""' "$tmp/err"; then ok "check: \"k\" quoted once"; else ko "check: \"k\" quoted once"; fi
printf 'rule a key "sliding-approx 10/s"\noverride a big "sliding-approx 10000000000/s"\n' >"$tmp/big.conf"
printf '1,a:x\n' | "$bin" replay --rules "$tmp/big.conf" >"$tmp/out" 2>"$tmp/err2"
rc=$?
if [ $rc -eq 2 ] && grep -qF "line 2: bad override" "$tmp/err2"; then ok "replay --rules refuses it too"; else ko "replay --rules refuses it too (rc=$rc)"; fi
# a concurrency rule: check accepts it; replay cannot release, so refuses it
printf 'rule r global "fixed-window 5/s"\nrule c key "concurrency 3 lease=30s"\n' >"$tmp/conc.conf"
if "$bin" check "$tmp/conc.conf" >"$tmp/out" 2>"$tmp/err2"; then ok "check accepts a concurrency rule"; else ko "check accepts a concurrency rule: $(cat "$tmp/err2")"; fi
printf '1,c:x\n' | "$bin" replay --rules "$tmp/conc.conf" >"$tmp/out" 2>"$tmp/err2"
rc=$?
if [ $rc -eq 2 ] && grep -qF 'line 2: rule "c" is a concurrency limit' "$tmp/err2"; then ok "replay --rules refuses a concurrency rule"; else ko "replay --rules refuses a concurrency rule (rc=$rc): $(cat "$tmp/err2")"; fi

# an empty file: refused unless --allow-empty, which says what it does
for text in '' '# nothing\n\n'; do
    printf '%b' "$text" >"$tmp/empty.conf"
    "$bin" check "$tmp/empty.conf" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 2 ] && grep -qF "empty.conf: no rules in the text" "$tmp/err"; then ok "check: no rules refused"; else ko "check: no rules refused (rc=$rc)"; fi
    "$bin" check --allow-empty "$tmp/empty.conf" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ] && grep -qF "empty.conf: ok, 0 rules, 0 overrides (an empty set: it limits nothing" "$tmp/out"; then
        ok "check --allow-empty"; else ko "check --allow-empty (rc=$rc)"; fi
done
# a directory, an endless device: a clear reason, no reading without end
"$bin" check "$tmp" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF "is a directory" "$tmp/err"; then ok "check: a directory"; else ko "check: a directory (rc=$rc)"; fi
"$bin" check /dev/zero >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF '"/dev/zero" is larger than 16 MiB' "$tmp/err"; then ok "check: /dev/zero capped"; else ko "check: /dev/zero capped (rc=$rc)"; fi

# --against OLD: what a reload would do to each rule's state
cat >"$tmp/old.conf" <<'CONF'
rule a key "sliding-approx 10/s" max_keys=1000
rule b global "token-bucket 5/s"
rule c key "fixed-window 5/s"
rule d key "fixed-window 5/s"
CONF
cat >"$tmp/new.conf" <<'CONF'
rule a key "sliding-approx 20/s" max_keys=1000
rule b global "token-bucket 5/s"
rule c key "fixed-window 5/s" max_keys=50 policy=evict-lru
rule e key "fixed-window 5/s"
CONF
"$bin" check --against "$tmp/old.conf" "$tmp/new.conf" >"$tmp/out" 2>"$tmp/err"
rc=$?
printf '%s\n' "new.conf: ok, 4 rules, 0 overrides" "reload from $tmp/old.conf:" \
    "  a: carried (the spec changes, the state is kept)" "  b: kept" \
    "  c: fresh (max_keys 100000 -> 50): every key's state resets" "  e: added" "  d: removed" >"$tmp/want"
if [ $rc -eq 0 ] && diff <(sed "s|^$tmp/||" "$tmp/out") "$tmp/want" >/dev/null; then ok "check --against"; else ko "check --against (rc=$rc)"; cat "$tmp/out"; fi
"$bin" check --against "$tmp/none.conf" "$tmp/new.conf" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF "none.conf" "$tmp/err"; then ok "check --against a missing file"; else ko "check --against a missing file (rc=$rc)"; fi

"$bin" check "$tmp/none.conf" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF "none.conf" "$tmp/err"; then ok "check: a missing file"; else ko "check: a missing file (rc=$rc)"; fi
"$bin" check >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ]; then ok "check: no FILE"; else ko "check: no FILE (rc=$rc)"; fi
"$bin" --help >"$tmp/out" 2>"$tmp/err"
if grep -q "check FILE" "$tmp/out"; then ok "sluice --help lists check"; else ko "sluice --help lists check"; fi

# ---- sluice replay --rules ----------------------------------------------------

cat >"$tmp/r.conf" <<'CONF'
rule per-client key    "token-bucket 2/s burst=2"  max_keys=100
rule global     global "fixed-window 3/s"
rule per-route  key    "fixed-window 1/s"          shadow
CONF
printf '%s\n' 'time_ns,rules,permits' \
    '0,per-client=a;global;per-route=/x' \
    '1,per-client=a;global;per-route=/x' \
    '2,per-client=a;global;per-route=/y' \
    '3,per-client=b;global' \
    '4,per-client=b;global,2' \
    '1000000000,per-route=/x' \
    '1000000000,global=ignored;per-client=a,0' >"$tmp/trace"
# By hand.  per-client: a bucket of 2 refilled at one token per 500 ms;
# global: 3 per aligned second; per-route (shadow): 1 per second, decided
# only for requests the others admit, never refusing.
#  t=0  a has 2 -> 1 left; global 2 left: allowed, remaining min(1,2) = 1;
#       per-route /x takes its 1.
#  t=1  a: 1 + 2e-9 -> 0 left; global 1 left: remaining 0; /x would refuse
#       (denied_shadow), the request goes through.
#  t=2  a: 4e-9 tokens, needs 1: refused, retry (1 - 4e-9) s/2 = 499999998 ns;
#       global would allow (1 left); /y not decided.
#  t=3  b: fresh, 1 left; global: 0 left: remaining 0.
#  t=4  b asks 2 with 1 + 2e-9: retry (1 - 2e-9) * 500 ms = 499999999 ns;
#       global: full, retry to the next second 999999996 ns: the largest.
#  t=1s per-route alone (shadow): allowed, no enforcing rule: remaining
#       2^64-1.
#  t=1s a probe of global (its key ignored) and a: global 3 left in the new
#       second, a has 0.000000004 + 1 s * 2/s, capped at 2: remaining 2.
cat >"$tmp/want" <<'CSV'
time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns
0,per-client=a;global;per-route=/x,1,1,0,1,0
1,per-client=a;global;per-route=/x,1,1,0,0,0
2,per-client=a;global;per-route=/y,1,0,0,0,499999998
3,per-client=b;global,1,1,0,0,0
4,per-client=b;global,2,0,0,0,999999996
1000000000,per-route=/x,1,1,0,18446744073709551615,0
1000000000,global=ignored;per-client=a,0,1,0,2,0
CSV
"$bin" replay --rules "$tmp/r.conf" --stats --metrics "$tmp/m.prom" <"$tmp/trace" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && cmp -s "$tmp/out" "$tmp/want"; then ok "replay --rules: every row as computed by hand"; else
    ko "replay --rules: rows (rc=$rc)"; diff "$tmp/want" "$tmp/out" | head -10; fi
want_stats='rule=per-client shadow=0 allowed=4 denied=2 denied_shadow=0 denied_elsewhere=0
rule=global shadow=0 allowed=4 denied=1 denied_shadow=0 denied_elsewhere=1
rule=per-route shadow=1 allowed=2 denied=0 denied_shadow=1 denied_elsewhere=1'
if [ "$(cat "$tmp/err")" = "$want_stats" ]; then ok "replay --rules --stats: counters per rule"; else ko "replay --rules --stats"; fi
if grep -qxF 'sluice_rule_requests_total{ruleset="'"$tmp"'/r.conf",rule="per-route",decision="denied_shadow"} 1' "$tmp/m.prom"; then
    ok "replay --rules --metrics: denied_shadow series"; else ko "replay --rules --metrics: denied_shadow series"; fi
if command -v promtool >/dev/null 2>&1; then
    if promtool check metrics <"$tmp/m.prom" >"$tmp/pt" 2>&1; then ok "promtool check metrics"; else ko "promtool check metrics"; cat "$tmp/pt"; fi
else
    echo "skip promtool check metrics (promtool not installed)"
fi

# the exposition parsed back: every rule's four counters equal --stats
py=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import prometheus_client.parser' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -n "$py" ]; then
    if "$py" - "$tmp/m.prom" "$tmp/err" <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
got = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in fam.samples:
        if s.name == "sluice_rule_requests_total":
            got[(s.labels["rule"], s.labels["decision"])] = int(s.value)
want = {}
for line in open(sys.argv[2]):
    kv = dict(f.split("=", 1) for f in line.split())
    for d in ("allowed", "denied", "denied_shadow", "denied_elsewhere"):
        want[(kv["rule"], d)] = int(kv[d])
sys.exit(0 if got == want else 1)
PY
    then ok "metrics parsed back: the counters of --stats"; else ko "metrics parsed back"; fi
else
    echo "skip the parse round trip (python3-prometheus-client not installed)"
fi

# badtrace TRACE LINE TOKEN
badtrace() {
    printf '%b' "$1" >"$tmp/t2"
    "$bin" replay --rules "$tmp/r.conf" <"$tmp/t2" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -qF "line $2:" "$tmp/err" &&
        { [ -z "$3" ] || grep -qF -- "\"$3\"" "$tmp/err"; }; then
        ok "replay --rules: bad line $2 ${3:+\"$3\"}"
    else
        ko "replay --rules: bad line $2 $3 (rc=$rc)"
    fi
}
badtrace '0,global\n1,per-clent=a\n' 2 per-clent
badtrace '0,global\n\n1\n' 3 ''
badtrace '0,global;;per-client=a\n' 1 'global;;per-client=a'
badtrace '0,global;global=x\n' 1 'global=x'
badtrace '0,per-client=a;per-client=a\n' 1 'per-client=a'
badtrace '0,global,x\n' 1 x
printf '0,global\n' >"$tmp/t2"
"$bin" replay --rules "$tmp/r.conf" --limit 'fixed-window 1/s' <"$tmp/t2" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && [ ! -s "$tmp/out" ]; then ok "replay: --rules with --limit"; else ko "replay: --rules with --limit (rc=$rc)"; fi
printf 'rule x key "fixed-window 1/s" burts=5\n' >"$tmp/bad.conf"
"$bin" replay --rules "$tmp/bad.conf" <"$tmp/t2" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF 'line 1:' "$tmp/err" && grep -qF '"burts=5"' "$tmp/err"; then ok "replay: a bad --rules file"; else ko "replay: a bad --rules file (rc=$rc)"; fi
# --top with --rules: each key rule's keys refused most, after --stats, and
# its table's series in --metrics; "table full" refusals counted apart
cat >"$tmp/top.conf" <<'CONF'
rule pc key "token-bucket 2/s burst=2" max_keys=2
rule g global "fixed-window 100/s"
CONF
# a: 2 allowed then 3 refused by its bucket; b allowed; c twice refused:
# the table is full (a and b hold its two places)
printf '1,pc=a;g\n2,pc=a;g\n3,pc=a;g\n4,pc=a;g\n5,pc=a;g\n6,pc=b\n7,pc=c\n8,pc=c\n' >"$tmp/ttrace"
"$bin" replay --rules "$tmp/top.conf" --top 5 --metrics "$tmp/tm.prom" <"$tmp/ttrace" >"$tmp/out" 2>"$tmp/err"
rc=$?
printf '%s\n' "rule=pc top=1 count=3 error=0 key=a" "rule=pc top=2 count=2 error=0 key=c" >"$tmp/want"
if [ $rc -eq 0 ] && cmp -s "$tmp/err" "$tmp/want"; then ok "replay --rules --top"; else ko "replay --rules --top (rc=$rc)"; cat "$tmp/err"; fi
for line in 'sluice_table_keys{ruleset="'"$tmp"'/top.conf",rule="pc"} 2' \
    'sluice_table_keys_refused_total{ruleset="'"$tmp"'/top.conf",rule="pc"} 2' \
    'sluice_table_refused_key_requests{ruleset="'"$tmp"'/top.conf",rule="pc",key="a"} 3'; do
    if grep -qxF "$line" "$tmp/tm.prom"; then ok "replay --rules --metrics: ${line%% *}"; else ko "replay --rules --metrics: $line"; fi
done
if command -v promtool >/dev/null 2>&1; then
    if promtool check metrics <"$tmp/tm.prom" >"$tmp/pt" 2>&1; then ok "promtool check metrics (rule tables)"; else ko "promtool check metrics (rule tables)"; cat "$tmp/pt"; fi
fi
"$bin" replay --rules "$tmp/top.conf" --top 0 <"$tmp/ttrace" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 2 ] && grep -qF -- "--top" "$tmp/err"; then ok "replay --rules --top 0: exit 2"; else ko "replay --rules --top 0 (rc=$rc)"; fi

# the --limit replay is unchanged
printf '0,a\n0,a\n' | "$bin" replay --limit 'fixed-window 1/s' >"$tmp/out" 2>"$tmp/err"
if [ "$(sed -n 3p "$tmp/out")" = "0,a,1,0,0,0,1000000000" ]; then ok "replay --limit unchanged"; else ko "replay --limit unchanged"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
