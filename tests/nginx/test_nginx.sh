#!/usr/bin/env bash
# test_nginx.sh -- ngx_http_sluice_module in Debian's real nginx.
#
#   tests/nginx/test_nginx.sh PATH/TO/ngx_http_sluice_module.so
#
# Starts nginx (`nginx -p DIR -c CONF -e LOG`, unprivileged paths under a
# temporary DIR) on a free loopback port, runs each check, and stops it.
# The load comes from tests/nginx/load.py (stdlib Python, keep-alive
# connections).  Every wait is bounded.  Checks:
#   1. `nginx -t` refuses a bad spec and names the token; also a missing
#      parameter, an unknown zone, a bad policy.
#   2. With 2 and with 4 workers, clients hammering one key of
#      `token-bucket 10/s burst=5` get 5 + 10 per second of 200s across all
#      the workers together (within one token at each end of the run: the
#      run's span as the client sees it bounds the server's).
#   3. A refusal is a 429 with RateLimit-Policy, RateLimit and Retry-After;
#      an empty key is not limited; `shadow` never refuses; a composite of
#      two zones charges neither when one refuses.
#   4. /metrics passes `promtool check metrics`, and its counts are the
#      decisions the clients saw, summed over the workers.
#   5. `nginx -s reload` keeps a zone's state; a reload that changes the
#      spec (same algorithm) carries the state over; one that changes the
#      algorithm is refused and the old configuration goes on.
#   6. A worker killed with SIGKILL under load is replaced by the master,
#      the limit still holds, and no request hangs.
# Exit 77 (skipped) when nginx or python3 cannot be found.
set -u

so=${1:?usage: test_nginx.sh MODULE.so}
# shellcheck source=tests/nginx/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# conf WORKERS ZONE_LINES... : write nginx.conf with the zones given.
conf() {
    local workers=$1
    shift
    {
        for z in "$@"; do echo "  $z"; done
        cat <<EOF
  map \$http_x_key \$hkey { default \$http_x_key; }
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    sluice_headers on;
    location / { sluice one; }
    location /two/ { alias $dir/html/; sluice one; sluice two; }
    location /shadow/ { alias $dir/html/; sluice slow shadow; }
    location /hdr/ { alias $dir/html/; sluice byhdr; }
    location /shape/ { alias $dir/html/; sluice shape; }
    location = /metrics { sluice_metrics; }
  }
EOF
    } | conf_http "$workers"
}

zones_std=(
    'sluice_zone one key=$binary_remote_addr spec="token-bucket 10/s burst=5" max_keys=1000;'
    'sluice_zone two key=$binary_remote_addr spec="fixed-window 2/1h" max_keys=1000;'
    'sluice_zone byhdr key=$hkey spec="token-bucket 1/h burst=1" max_keys=100 policy=evict-lru;'
    'sluice_zone slow key=$binary_remote_addr spec="token-bucket 1/h burst=1" max_keys=100;'
    'sluice_zone shape key=$binary_remote_addr spec="leaky-bucket 10/s capacity=5" max_keys=100;'
)

# ---- 1. nginx -t ---------------------------------------------------------
check_t() { # SPEC_LINE EXPECTED_TEXT
    conf 1 "$1" 'sluice_zone two key=$uri spec="fixed-window 1/s" max_keys=10;' \
        'sluice_zone byhdr key=$uri spec="fixed-window 1/s" max_keys=10;' \
        'sluice_zone slow key=$uri spec="fixed-window 1/s" max_keys=10;' \
        'sluice_zone shape key=$uri spec="fixed-window 1/s" max_keys=10;'
    local out
    out=$(ngx -t 2>&1)
    if [ $? -ne 0 ] && grep -qF -- "$2" <<<"$out"; then
        pass "nginx -t refuses: $2"
    else
        fail "nginx -t on '$1': want failure naming '$2', got: $out"
    fi
}
check_t 'sluice_zone one key=$uri spec="token-bucket 10/s burts=5" max_keys=10;' 'burts=5'
check_t 'sluice_zone one key=$uri spec="token-buckit 10/s" max_keys=10;' 'token-buckit'
check_t 'sluice_zone one key=$uri spec="token-bucket 10/s" max_keys=0;' 'max_keys=0'
check_t 'sluice_zone one key=$uri max_keys=10;' 'needs key=, spec= and max_keys='
check_t 'sluice_zone one key=$uri spec="token-bucket 10/s" max_keys=10 policy=lru;' 'policy=lru'
check_t 'sluice_zone one key=$uri spec="token-bucket 10/s max_keys=10;' 'unterminated quote'
conf 1 "${zones_std[@]}"
if ngx -t >/dev/null 2>&1; then pass "nginx -t accepts the test configuration"; else
    fail "nginx -t on the test configuration: $(ngx -t 2>&1)"; fi

# ---- 2. exact across workers ----------------------------------------------
for w in 2 4; do
    conf "$w" "${zones_std[@]}"
    if ! start; then fail "nginx with $w workers did not start: $(tail -5 "$dir/logs/error.log")"; continue; fi
    n=$(workers | wc -l)
    [ "$n" -eq "$w" ] || fail "$w workers wanted, $n running"
    out=$(load 16 2.5)
    ok=$(jget 'd["counts"].get("200",0)' <<<"$out")
    span=$(jget 'd["last"]-d["first"]' <<<"$out")
    errs=$(jget 'd["counts"].get("error",0)' <<<"$out")
    # The server's decisions all fall within the client's span; with the
    # clients always asking, the bucket is never left to fill: 5 + 10/s.
    lo=$(python3 -c "import math; print(5 + max(0, math.floor(10*($span - 0.25))))")
    hi=$(python3 -c "import math; print(5 + math.floor(10*$span) + 1)")
    if [ "$ok" -ge "$lo" ] && [ "$ok" -le "$hi" ] && [ "$errs" -eq 0 ]; then
        pass "$w workers: $ok admitted in ${span}s (want $lo..$hi), $(jget 'd["counts"]' <<<"$out")"
    else
        fail "$w workers: $ok admitted in ${span}s, want $lo..$hi; $out"
    fi
    # ---- 4. metrics, summed over the workers
    m=$(curl -s "$base/metrics")
    allowed=$(awk '/^sluice_requests_total\{limit="one",decision="allowed"\}/ {print $2}' <<<"$m")
    denied=$(awk '/^sluice_requests_total\{limit="one",decision="denied"\}/ {print $2}' <<<"$m")
    if [ "$allowed" = "$ok" ] && [ "$denied" = "$(jget 'd["counts"].get("429",0)' <<<"$out")" ]; then
        pass "$w workers: /metrics counts what the clients saw ($allowed allowed, $denied denied)"
    else
        fail "$w workers: /metrics says $allowed allowed, $denied denied; clients saw $out"
    fi
    if [ -n "$promtool" ]; then
        if perr=$("$promtool" check metrics <<<"$m" 2>&1); then pass "promtool check metrics"; else
            fail "promtool check metrics: $perr"; fi
    fi
    stop
done

# ---- 3. headers, empty key, shadow, composite -------------------------------
conf 2 "${zones_std[@]}"
start || fail "nginx did not start"
# zone one refills 10/s: ask until a refusal comes (bounded), eight
# requests at a time on one connection (a loaded machine may take longer
# than a token's 100 ms to start curl); look at the last answer's headers
u="$base/index.html"
for _ in $(seq 40); do
    h=$(curl -s -D - -o /dev/null "$u" "$u" "$u" "$u" "$u" "$u" "$u" "$u" | tr -d '\r' |
        awk '/^HTTP\// {h = ""} {h = h $0 "\n"} END {printf "%s", h}')
    grep -q '^HTTP/1.1 429' <<<"$h" && break
done
if grep -q '^HTTP/1.1 429' <<<"$h" && grep -q '^RateLimit-Policy: "one";q=10;w=1;sluice-burst=5' <<<"$h" &&
    grep -q '^RateLimit: "one";r=0;t=1' <<<"$h" && grep -q '^Retry-After: 1' <<<"$h"; then
    pass "429 with RateLimit-Policy, RateLimit and Retry-After"
else
    fail "refusal headers: $h"
fi
# an empty key is not limited: no X-Key header -> $hkey is empty
c=""; for _ in $(seq 5); do c="$c$(code "$base/hdr/index.html")"; done
[ "$c" = "200200200200200" ] && pass "an empty key is not limited" || fail "empty key: $c"
c="$(code -H 'X-Key: a' "$base/hdr/index.html")$(code -H 'X-Key: a' "$base/hdr/index.html")"
[ "$c" = "200429" ] && pass "a header key is limited" || fail "header key: $c"
# shadow: zone slow admits one an hour, yet /shadow/ is served every time
c="$(code "$base/shadow/index.html")$(code "$base/shadow/index.html")"
[ "$c" = "200200" ] && grep -q 'would refuse the request (shadow)' "$dir/logs/error.log" &&
    pass "shadow never refuses, and logs what it would do" || fail "shadow: $c"
# a leaky-bucket shaper holds requests for their turn: 4 in a row, one
# every 100 ms, take at least 300 ms, all served; 12 at once overflow its
# capacity of 5 (about 100 ms drains one), so some are refused.
t0=$(date +%s%N)
c=""; for _ in $(seq 4); do c="$c$(code "$base/shape/index.html")"; done
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$c" = "200200200200" ] && [ "$ms" -ge 290 ] && [ "$ms" -lt 5000 ] &&
    pass "the shaper delays: 4 requests in ${ms} ms" || fail "shaper: $c in ${ms} ms"
sleep 1
out=$(python3 "$here/load.py" "$base/shape/index.html" 12 5 12)
s200=$(jget 'd["counts"].get("200",0)' <<<"$out")
s429=$(jget 'd["counts"].get("429",0)' <<<"$out")
[ "$s429" -ge 1 ] && [ "$s200" -ge 5 ] && [ $((s200 + s429)) -eq 12 ] &&
    pass "the shaper refuses past its capacity: $s200 served, $s429 refused" ||
    fail "shaper burst: $out"
stop
# composite: `two` allows 2 an hour; `one` refuses once its burst is gone,
# and then `two` must not be charged.
conf 1 "${zones_std[@]}"
start || fail "nginx did not start"
c=""; for _ in $(seq 8); do c="$c $(code "$base/two/index.html")"; done
m=$(curl -s "$base/metrics")
two_ok=$(awk '/^sluice_requests_total\{limit="two",decision="allowed"\}/ {print $2}' <<<"$m")
# 2 admitted by both; then `two` refuses (one still had tokens): nothing
# taken from `one` either, so `one` admitted exactly 2 as well.
one_ok=$(awk '/^sluice_requests_total\{limit="one",decision="allowed"\}/ {print $2}' <<<"$m")
[ "$c" = " 200 200 429 429 429 429 429 429" ] && [ "$two_ok" = 2 ] && [ "$one_ok" = 2 ] &&
    pass "composite: all or nothing across two zones" || fail "composite: codes$c, one=$one_ok two=$two_ok"
stop

# ---- 5. reload -----------------------------------------------------------
zr=('sluice_zone one key=$binary_remote_addr spec="token-bucket 1/h burst=3" max_keys=1000;'
    'sluice_zone two key=$uri spec="fixed-window 1/s" max_keys=10;'
    'sluice_zone byhdr key=$uri spec="fixed-window 1/s" max_keys=10;'
    'sluice_zone slow key=$uri spec="fixed-window 1/s" max_keys=10;'
    'sluice_zone shape key=$uri spec="fixed-window 1/s" max_keys=10;')
conf 2 "${zr[@]}"
start || fail "nginx did not start"
c=""; for _ in $(seq 4); do c="$c$(code "$base/index.html")"; done
[ "$c" = "200200200429" ] || fail "before reload: $c"
reload_wait || fail "reload (same spec) did not complete"
c=$(code "$base/index.html")
[ "$c" = "429" ] && pass "a reload keeps the zone's state" || fail "after reload: $c (state lost?)"
# change the spec: 1/h burst=3 -> 1/h burst=5; the bucket is empty and
# stays so (tokens carried over, capped at the new burst): still 429.
zr[0]='sluice_zone one key=$binary_remote_addr spec="token-bucket 1/h burst=5" max_keys=1000;'
conf 2 "${zr[@]}"
reload_wait || fail "reload (changed spec) did not complete"
c=$(code "$base/index.html")
h=$(curl -s -D - -o /dev/null "$base/index.html")
[ "$c" = "429" ] && grep -q 'sluice-burst=5' <<<"$h" &&
    pass "a reload with a changed spec carries the state over" || fail "changed spec: $c $h"
# another algorithm: the reload is refused, the running one goes on
zr[0]='sluice_zone one key=$binary_remote_addr spec="fixed-window 100/s" max_keys=1000;'
conf 2 "${zr[@]}"
ngx -s reload 2>/dev/null
sleep 1
c=$(code "$base/index.html")
[ "$c" = "429" ] && grep -q 'sluice_zone "one"' "$dir/logs/error.log" &&
    pass "a reload changing the algorithm is refused; the old zone goes on" ||
    fail "algorithm change: $c; $(grep sluice_zone "$dir/logs/error.log" | tail -2)"
stop

# ---- 6. a worker killed under load ------------------------------------------
conf 2 "${zones_std[@]}"
start || fail "nginx did not start"
load 16 3 >"$dir/kill.json" &
lp=$!
sleep 1
victim=$(workers | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait "$lp"
out=$(cat "$dir/kill.json")
ok=$(jget 'd["counts"].get("200",0)' <<<"$out")
span=$(jget 'd["last"]-d["first"]' <<<"$out")
slow=$(jget 'd["slowest"]' <<<"$out")
hi=$(python3 -c "import math; print(5 + math.floor(10*$span) + 2)")
sleep 0.5
n=$(workers | wc -l)
if [ "$n" -eq 2 ] && ! workers | grep -qx "$victim" && [ "$ok" -le "$hi" ] &&
    python3 -c "import sys; sys.exit(0 if $slow < 5 else 1)"; then
    pass "a killed worker is replaced; $ok admitted in ${span}s (at most $hi); slowest request ${slow}s"
else
    fail "kill: $n workers (victim $victim), $ok admitted (at most $hi), slowest ${slow}s; $out"
fi
stop

echo "$fails failed"
[ "$fails" -eq 0 ]
