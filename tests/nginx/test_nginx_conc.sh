#!/usr/bin/env bash
# test_nginx_conc.sh -- concurrency zones (spec="concurrency N") in Debian's
# real nginx: requests in flight, held by a slow upstream the test starts.
#
#   tests/nginx/test_nginx_conc.sh PATH/TO/ngx_http_sluice_module.so
#
# tests/nginx/hold_upstream.py holds every proxied request until the test
# releases it, and says how many it holds, so "N in flight" is a fact the
# test waits for (bounded), not a guess.  Checks:
#   inflight  N held -> the N+1th refused (503, or sluice_status), another
#             key admitted; released -> admitted again, exactly N.
#   once      a request through try_files to a named location, error_page,
#             an SSI include or auth_request (subrequests) takes one
#             permit, not two and not none, and gives it back once.
#   ends      a client that gives up, an upstream timeout (504): the
#             permit comes back when the request ends.
#   kill      a worker SIGKILLed with requests in flight: once the master
#             has respawned it, the first request frees the dead worker's
#             permits (the region's dead-holder sweep, docs/nginx.md's
#             bound), and exactly those.
#   reload    nginx -s reload with permits held: the new workers count the
#             old workers' requests, and those give their permits back as
#             they end: none lost, none doubled.  A reload that changes N,
#             or turns the zone into a rate zone, makes a new zone.
#   lease     lease=1s: a permit held past its lease comes back then, not
#             before, and its late release gives nothing back twice.
#   full      a zone whose every key holds a permit: a new key refused
#             (503, logged as a full zone), nobody waits; released, new
#             keys admitted again.
#   config    nginx -t refuses N=0, a bad lease, a rate option, a rate
#             zone's parameter, N over a region's 65536, a shadow.
#   metrics   sluice_metrics with requests held: every scrape (whichever
#             worker answers) gives each concurrency zone's held permits,
#             N, keys, waiters and recovered permits, exactly, and
#             promtool accepts it; after a kill -9, the recovered counter
#             is the dead worker's permits.  sluice_headers on: no
#             RateLimit field for a concurrency zone.
# Exit 77 (skipped) when nginx or python3 cannot be found.
set -u

so=${1:?usage: test_nginx_conc.sh MODULE.so}
# shellcheck source=tests/nginx/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- the slow upstream ----------------------------------------------------------
python3 "$here/hold_upstream.py" "$dir/up.port" &
up_pid=$!
trap 'stop; kill "$up_pid" 2>/dev/null; wait "$up_pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do [ -s "$dir/up.port" ] && break; sleep 0.05; done
[ -s "$dir/up.port" ] || { echo "FAIL the upstream did not start"; exit 1; }
upport=$(cat "$dir/up.port")
up="http://127.0.0.1:$upport"

held() { curl -s --max-time 5 "$up/_count"; }
release() { curl -s -o /dev/null --max-time 5 "$up/_release"; }
# wait_held N: until the upstream holds N requests (10 s at most)
wait_held() {
    for _ in $(seq 200); do [ "$(held)" = "$1" ] && return 0; sleep 0.05; done
    return 1
}
# bg NAME CURL_ARGS...: a request in the background (30 s at most), its
# status into $dir/c.NAME when it ends
pids=()
bg() {
    local n=$1
    shift
    rm -f "$dir/c.$n"
    (curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$@" >"$dir/c.$n.tmp" 2>/dev/null
     mv "$dir/c.$n.tmp" "$dir/c.$n") &
    pids+=($!)
}
# ended NAME: the status of a background request, or nothing while it runs
ended() { cat "$dir/c.$1" 2>/dev/null; }
# wait_ended NAME: until it has ended (10 s at most); prints its status
wait_ended() {
    for _ in $(seq 200); do [ -f "$dir/c.$1" ] && { cat "$dir/c.$1"; return 0; }; sleep 0.05; done
    echo timeout
}
# settle: release everything held, wait for the background requests
settle() {
    release
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
    wait_held 0
}

echo '<!--# include virtual="/slow/ssi" -->' >"$dir/html/page.html"
chmod a+r "$dir/html/page.html"

conc_conf() { # WORKERS
    conf_http "$1" <<CONF
  sluice_zone c key=\$http_x_key spec="concurrency 3" max_keys=100;
  sluice_zone two key=\$http_x_key spec="concurrency 2" max_keys=100;
  sluice_zone full key=\$http_x_key spec="concurrency 1" max_keys=8;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    proxy_read_timeout 60s;
    location /slow/ { sluice c; proxy_pass $up; }
    location /full/slow/ { sluice full; proxy_pass $up; }
    location /full/fast/ { alias $dir/html/; sluice full; }
    location /fast/ { alias $dir/html/; sluice c; }
    location /fast429/ { alias $dir/html/; sluice c; sluice_status 429; }
    location /short/ { sluice c; proxy_pass $up; proxy_read_timeout 1s; }
    location /2/slow/ { sluice two; proxy_pass $up; }
    location /2/fast/ { alias $dir/html/; sluice two; }
    location /2/tf/ { sluice two; try_files /nonexistent @two; }
    location @two { sluice two; proxy_pass $up; }
    location /2/ep/ { sluice two; error_page 404 = /2/slow/ep; }
    location /2/ssi/ { alias $dir/html/; sluice two; ssi on; }
    location /slow/ssi { sluice two; proxy_pass $up; }
    location /2/auth/ { alias $dir/html/; sluice two; auth_request /2/slow/auth; }
    location = /metrics { sluice_metrics; }
  }
CONF
}

# ---- inflight: N held, the N+1th refused ---------------------------------------
conc_conf 2
if start; then
    for i in 1 2 3; do bg "a$i" -H "X-Key: a" "$base/slow/$i"; done
    if wait_held 3; then
        c="$(code -H "X-Key: a" "$base/fast/index.html") $(code -H "X-Key: a" "$base/fast429/index.html")"
        c="$c $(code -H "X-Key: b" "$base/fast/index.html")"
        [ "$c" = "503 429 200" ] &&
            pass "3 in flight: the 4th refused (503; 429 with sluice_status 429), another key admitted" ||
            fail "3 in flight: want 503 429 200, got $c"
        grep -q 'sluice: limiting requests in flight by zone "c"' "$dir/logs/error.log" &&
            pass "the refusal is logged, naming the zone" || fail "no refusal line in the error log"
    else
        fail "3 requests not held: the upstream holds $(held)"
    fi
    settle
    c="$(ended a1) $(ended a2) $(ended a3)"
    [ "$c" = "200 200 200" ] && pass "the held requests end with 200" || fail "held requests: $c"
    # exactly N again: the permits came back, each once
    for i in 1 2 3; do bg "b$i" -H "X-Key: a" "$base/slow/again$i"; done
    wait_held 3 && c=$(code -H "X-Key: a" "$base/fast/index.html") || c="not held: $(held)"
    [ "$c" = 503 ] && pass "released: exactly 3 admitted again, the 4th refused" ||
        fail "after the release: want 3 held and 503, got $c"
    settle

    # ---- once: redirects and subrequests take one permit and give it back ------
    # zone "two" (N = 2): the request under test is held upstream; one plain
    # request beside it is admitted (it took no more than one) and a third
    # is refused (it took one).  Released: two are held again, a third refused.
    for t in "try_files+named:/2/tf/x" "error_page:/2/ep/missing" "ssi:/2/ssi/page.html" \
        "auth_request:/2/auth/index.html"; do
        name=${t%%:*} path=${t#*:} k="once-${t%%:*}"
        bg "o1" -H "X-Key: $k" "$base$path"
        if wait_held 1; then
            bg "o2" -H "X-Key: $k" "$base/2/slow/beside"
            wait_held 2 && c=$(code -H "X-Key: $k" "$base/2/fast/index.html") ||
                c="the one beside got $(wait_ended o2)"
        else
            c="not held: $(held)"
        fi
        settle
        c="$c $(ended o1) $(ended o2)"
        bg "o3" -H "X-Key: $k" "$base/2/slow/after1"
        bg "o4" -H "X-Key: $k" "$base/2/slow/after2"
        wait_held 2 && c="$c $(code -H "X-Key: $k" "$base/2/fast/index.html")" || c="$c after: $(held)"
        settle
        [ "$c" = "503 200 200 503" ] &&
            pass "$name: one permit, not two, given back once ($c)" ||
            fail "$name: want 503 200 200 503 (refused beside it, both served, then 2 again), got $c"
    done

    # ---- ends: a client abort, an upstream timeout ------------------------------
    bg "g1" -H "X-Key: e" "$base/slow/g1"
    bg "g2" -H "X-Key: e" "$base/slow/g2"
    wait_held 2
    rm -f "$dir/c.g3"
    (curl -s -o /dev/null -w '%{http_code}' --max-time 1 -H "X-Key: e" "$base/slow/gone" \
        >"$dir/c.g3.tmp" 2>/dev/null; mv "$dir/c.g3.tmp" "$dir/c.g3") &
    pids+=($!)
    wait_held 3 && c=$(code -H "X-Key: e" "$base/fast/index.html") || c="not held: $(held)"
    c="$c $(wait_ended g3)"
    for _ in $(seq 100); do
        r=$(code -H "X-Key: e" "$base/fast/index.html")
        [ "$r" = 200 ] && break
        sleep 0.05
    done
    c="$c $r"
    bg "g4" -H "X-Key: e" "$base/short/g4"
    wait_held 4 # the aborted one may still be held by the upstream: 2 + it + g4, or 3
    c="$c $(code -H "X-Key: e" "$base/fast/index.html") $(wait_ended g4)"
    c="$c $(code -H "X-Key: e" "$base/fast/index.html")"
    settle
    [ "$c" = "503 000 200 503 504 200" ] &&
        pass "a client that gives up (curl --max-time 1) and an upstream timeout (504) give the permit back ($c)" ||
        fail "ends: want 503 000 200 503 504 200, got $c"

    # ---- a flood of new keys: each released, none left holding a slot ------------
    # zone c has max_keys=100: 400 requests, each with a key of its own (of
    # every printable byte, up to 200 bytes long), each ending at
    # once, are all admitted -- a key that holds nothing leaves room -- and
    # the zone still counts per key afterwards (3 held, the 4th refused).
    bad=0
    for i in $(seq 400); do
        printf -v ch "\\$(printf '%03o' $((33 + i % 94)))"
        printf -v pad '%*s' $((i % 200)) ''
        k="flood-$i-${pad// /"$ch"}"
        r=$(code -H "X-Key: $k" "$base/fast/index.html")
        [ "$r" = 200 ] || bad=$((bad + 1))
    done
    for i in 1 2 3; do bg "f$i" -H "X-Key: after-flood" "$base/slow/f$i"; done
    wait_held 3 && c=$(code -H "X-Key: after-flood" "$base/fast/index.html") || c="not held: $(held)"
    settle
    [ $bad -eq 0 ] && [ "$c" = 503 ] &&
        pass "a flood of 400 new keys, each released, all admitted in a zone of 100 keys; then 3 held, the 4th refused" ||
        fail "flood: $bad of 400 not admitted, then $c (want 0 and 503)"
    # ---- a zone full of keys in use: new keys refused, held keys counted ------
    # zone full has max_keys=8 (one shard: every slot is the zone's): 8
    # keys each holding their one permit fill it; a 9th key is refused at
    # once (503, logged "zone full of keys in use"), a held key is refused
    # by its own limit, nobody waits; once they are released, new keys
    # are admitted again and the zone counts each key (1 held, the 2nd
    # request of that key refused).
    for i in $(seq 8); do bg "full$i" -H "X-Key: full-$i" "$base/full/slow/full$i"; done
    if wait_held 8; then
        c="$(code -H "X-Key: full-new" "$base/full/fast/index.html") $(code -H "X-Key: full-3" "$base/full/fast/index.html")"
        c="$c $(code -H "X-Key: full-other$RANDOM" "$base/full/fast/index.html")"
        [ "$c" = "503 503 503" ] &&
            pass "a zone of 8 keys, each holding its permit: a new key refused (503), a held key refused" ||
            fail "full zone: want 503 503 503, got $c"
        grep -q 'sluice: limiting requests in flight by zone "full" (zone full of keys in use)' "$dir/logs/error.log" &&
            pass "the full zone's refusal is logged as such" || fail "no 'zone full of keys in use' line for zone full"
    else
        fail "8 requests not held on zone full: the upstream holds $(held)"
    fi
    settle
    c="$(ended full1) $(ended full8)"
    bad=0
    for i in $(seq 16); do
        r=$(code -H "X-Key: full-after-$i" "$base/full/fast/index.html")
        [ "$r" = 200 ] || bad=$((bad + 1))
    done
    bg "fa" -H "X-Key: full-after" "$base/full/slow/fa"
    wait_held 1 && c="$c $bad $(code -H "X-Key: full-after" "$base/full/fast/index.html")" || c="$c $bad not held: $(held)"
    settle
    [ "$c" = "200 200 0 503" ] &&
        pass "released: the held requests end with 200, 16 new keys admitted, the zone counts per key again" ||
        fail "after the full zone: want '200 200 0 503', got '$c'"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- metrics: the concurrency zones in sluice_metrics; no RateLimit fields --------
# Two workers; 4 requests held on zone c (3 of key m, 1 of key n) and 1 on
# zone two: every scrape says held 4 and 1, N 3 and 2, keys 2 and 1, no
# waiter, nothing recovered -- the numbers of the requests the upstream
# holds, not of the module's counters -- and promtool accepts the text;
# released: held 0, the keys stay.  sluice_headers on: a place with a
# concurrency zone only sends no RateLimit field, neither admitted nor
# refused (no Retry-After), and one beside a rate zone names the rate zone
# alone (docs/nginx.md, "Concurrency zones").
conf_http 2 <<CONF
  sluice_zone c key=\$http_x_key spec="concurrency 3" max_keys=100;
  sluice_zone two key=\$http_x_key spec="concurrency 2" max_keys=100;
  sluice_zone r key=\$http_x_key spec="token-bucket 100/s" max_keys=100;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    proxy_read_timeout 60s;
    location /slow/ { sluice c; proxy_pass $up; }
    location /2/slow/ { sluice two; proxy_pass $up; }
    location /hdr/ { alias $dir/html/; sluice c; sluice_headers on; }
    location /hdrmix/ { alias $dir/html/; sluice c; sluice r; sluice_headers on; }
    location = /metrics { sluice_metrics; }
  }
CONF
# series NAME ZONE FILE: the value of NAME{limit="ZONE"} in FILE
series() { sed -n "s/^$1{limit=\"$2\"} //p" "$3"; }
if start; then
    for i in 1 2 3; do bg "m$i" -H "X-Key: m" "$base/slow/m$i"; done
    bg "m4" -H "X-Key: n" "$base/slow/m4"
    bg "m5" -H "X-Key: m" "$base/2/slow/m5"
    if wait_held 5; then
        got="" want=""
        for i in 1 2 3 4; do # several scrapes: either worker may answer
            curl -s --max-time 5 "$base/metrics" >"$dir/m$i.prom"
            got="$got|$(series sluice_concurrency_held c "$dir/m$i.prom") $(series sluice_concurrency_held two "$dir/m$i.prom")"
            got="$got $(series sluice_concurrency_limit c "$dir/m$i.prom") $(series sluice_concurrency_limit two "$dir/m$i.prom")"
            got="$got $(series sluice_table_keys c "$dir/m$i.prom") $(series sluice_table_keys two "$dir/m$i.prom")"
            got="$got $(series sluice_concurrency_waiting c "$dir/m$i.prom")"
            got="$got $(series sluice_concurrency_recovered_permits_total c "$dir/m$i.prom")"
            want="$want|4 1 3 2 2 1 0 0"
        done
        [ "$got" = "$want" ] &&
            pass "5 requests held: every scrape says held 4 and 1, N 3 and 2, keys 2 and 1, 0 waiting, 0 recovered" ||
            fail "metrics with 5 held: want '$want', got '$got': $(grep -v '^#' "$dir/m4.prom" | grep concurrency)"
        if [ -n "$promtool" ]; then
            if perr=$("$promtool" check metrics <"$dir/m1.prom" 2>&1); then pass "promtool check metrics (concurrency zones)"; else
                fail "promtool check metrics: $perr"; fi
        else
            echo "skip promtool check metrics (promtool not installed)"
        fi
        # key m holds 3 of c's 3: refused, and no field names c
        curl -s -D "$dir/h1" -o /dev/null -H "X-Key: m" "$base/hdr/index.html"
        curl -s -D "$dir/h2" -o /dev/null -H "X-Key: h" "$base/hdr/index.html"
        curl -s -D "$dir/h3" -o /dev/null -H "X-Key: h" "$base/hdrmix/index.html"
        c="$(head -1 "$dir/h1" | cut -d' ' -f2) $(grep -ci '^\(RateLimit\|Retry-After\)' "$dir/h1")"
        c="$c $(head -1 "$dir/h2" | cut -d' ' -f2) $(grep -ci '^RateLimit' "$dir/h2")"
        c="$c $(head -1 "$dir/h3" | cut -d' ' -f2) $(grep -i '^RateLimit-Policy:' "$dir/h3" | grep -c '"r"') $(grep -i '^RateLimit' "$dir/h3" | grep -c '"c"')"
        [ "$c" = "503 0 200 0 200 1 0" ] &&
            pass "sluice_headers on: no RateLimit field for a concurrency zone, refused or admitted; beside a rate zone, the rate zone's only ($c)" ||
            fail "headers: want 503 0 200 0 200 1 0, got $c: $(tr -d '\r' <"$dir/h3" | grep -i ratelimit)"
    else
        fail "5 requests not held: the upstream holds $(held)"
    fi
    settle
    for _ in $(seq 100); do # a request's permit goes back as nginx frees it, after its response
        curl -s --max-time 5 "$base/metrics" >"$dir/m5.prom"
        c="$(series sluice_concurrency_held c "$dir/m5.prom") $(series sluice_concurrency_held two "$dir/m5.prom")"
        c="$c $(series sluice_table_keys c "$dir/m5.prom")"
        [ "$c" = "0 0 3" ] && break
        sleep 0.05
    done
    [ "$c" = "0 0 3" ] && pass "released: held 0 and 0, c's keys stay (m, n and the header checks' h)" ||
        fail "metrics after the release: want 0 0 3, got $c"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- kill: a worker SIGKILLed with requests in flight -------------------------
# Two workers, three requests held on one key, a probe refused; then a worker
# is killed (the first, or both, until one that held a request is gone).
# The requests it served end at once (curl: 000; counted once the count
# has stayed the same for a second); their permits are the
# dead worker's, and the region's sweep gives them back at the first
# acquire that finds the key full 1 ms or more after the death
# (docs/nginx.md, "Workers killed"): the master respawns the worker, and
# then exactly that many requests are admitted, and one more is refused.
conc_conf 2
if start; then
    for i in 1 2 3; do bg "k$i" -H "X-Key: k" "$base/slow/k$i"; done
    wait_held 3
    c=$(code -H "X-Key: k" "$base/fast/index.html")
    [ "$c" = 503 ] || fail "kill: 3 in flight, want the 4th refused, got $c"
    dead=0 tries=0
    before=$(workers)
    t0=$(date +%s%N)
    for w in $before; do
        kill -9 "$w"
        tries=$((tries + 1))
        for _ in $(seq 100); do
            n=0
            for i in 1 2 3; do [ "$(ended "k$i")" = 000 ] && n=$((n + 1)); done
            [ "$n" -gt "$dead" ] && break
            sleep 0.05
        done
        dead=$n
        [ "$dead" -gt 0 ] && break
    done
    # every request of the dead worker, not the first to end: the others
    # stay held by the upstream, so the count only grows while the dead
    # worker's curls report; recount until it is the same for 1 s (10 s
    # at most)
    same=0
    for _ in $(seq 50); do
        sleep 0.2
        n=0
        for i in 1 2 3; do [ "$(ended "k$i")" = 000 ] && n=$((n + 1)); done
        if [ "$n" -eq "$dead" ]; then same=$((same + 1)); else same=0 dead=$n; fi
        [ "$same" -ge 5 ] && break
    done
    # the master respawns: as many workers as before, none of the killed
    for _ in $(seq 200); do
        now=$(workers)
        [ "$(wc -l <<<"$now")" = 2 ] && [ -z "$(comm -12 <(echo "$before" | head -n "$tries") <(echo "$now"))" ] && break
        sleep 0.05
    done
    t1=$(date +%s%N)
    c=$(code -H "X-Key: k" "$base/fast/index.html")
    t2=$(date +%s%N)
    got="$c"
    # the dead worker's permits, all back: dead - 1 more fit beside the
    # probe's (which ended), then a refusal
    for i in $(seq $((dead))); do bg "kk$i" -H "X-Key: k" "$base/slow/kk$i"; done
    wait_held $((3 + dead)) # the upstream still holds the dead worker's, until released
    got="$got $(code -H "X-Key: k" "$base/fast/index.html")"
    rec=$(curl -s --max-time 5 "$base/metrics" |
        sed -n 's/^sluice_concurrency_recovered_permits_total{limit="c"} //p')
    settle
    echo "     kill: $tries worker(s) killed, $dead request(s) lost; respawned after $(((t1 - t0) / 1000000)) ms;" \
        "the first request after it took $(((t2 - t1) / 1000000)) ms"
    [ "$dead" -ge 1 ] && [ "$got" = "200 503" ] &&
        pass "kill -9 of a worker holding $dead permit(s): the first request after the respawn is admitted, exactly $dead came back ($got)" ||
        fail "kill: $dead request(s) lost; want the first request admitted and, $dead held again, a refusal: got $got"
    [ "$dead" -ge 1 ] && [ "$rec" = "$dead" ] &&
        pass "metrics: sluice_concurrency_recovered_permits_total{limit=\"c\"} is the dead worker's $dead" ||
        fail "metrics: recovered permits '$rec', want the dead worker's $dead"
    [ $(((t2 - t1) / 1000000)) -lt 5000 ] && pass "the first request after the respawn answered within 5 s" ||
        fail "the first request after the respawn took $(((t2 - t1) / 1000000)) ms"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- reload: permits held across nginx -s reload ----------------------------------
conc_conf 1
if start; then
    bg "r1" -H "X-Key: r" "$base/slow/r1"
    bg "r2" -H "X-Key: r" "$base/slow/r2"
    wait_held 2
    old=$(workers)
    conc_conf 1
    ngx -s reload
    # the new worker serves while the old one waits for its two requests
    for _ in $(seq 200); do
        new=$(comm -13 <(echo "$old") <(workers))
        [ -n "$new" ] && break
        sleep 0.05
    done
    sleep 0.2 # the old worker stops accepting when the master tells it to
    bg "r3" -H "X-Key: r" "$base/slow/r3"
    wait_held 3 && c=$(code -H "X-Key: r" "$base/fast/index.html") || c="not held: $(held)"
    still=$(comm -12 <(echo "$old") <(workers))
    settle
    c="$c $(ended r1) $(ended r2) $(ended r3)"
    # the old worker is gone once its requests end; then exactly 3 again
    for _ in $(seq 200); do [ -z "$(comm -12 <(echo "$old") <(workers))" ] && break; sleep 0.05; done
    for i in 1 2 3; do bg "rr$i" -H "X-Key: r" "$base/slow/rr$i"; done
    wait_held 3 && c="$c $(code -H "X-Key: r" "$base/fast/index.html")" || c="$c after: $(held)"
    settle
    [ -n "$still" ] && [ "$c" = "503 200 200 200 503" ] &&
        pass "reload with 2 held: the new worker admits 1 more then refuses; after the old worker's requests end, exactly 3 again ($c)" ||
        fail "reload: want the old worker alive and 503 200 200 200 503, got '$still' $c"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- reload that changes a spec: a new zone -------------------------------------
# concurrency 3 -> 4 with 2 held by the old worker: a new zone, logged; the
# new worker's key starts with nothing held, so 4 more are admitted.  Zone
# "two" turns into a rate zone of the same name: a new zone too.
conc_conf 1
if start; then
    bg "s1" -H "X-Key: s" "$base/slow/s1"
    bg "s2" -H "X-Key: s" "$base/slow/s2"
    wait_held 2
    old=$(workers)
    conc_conf 1
    sed -i -e 's/spec="concurrency 3"/spec="concurrency 4"/' \
        -e 's/spec="concurrency 2"/spec="token-bucket 1\/h burst=1"/' "$dir/nginx.conf"
    : >"$dir/logs/error.log"
    ngx -s reload
    for _ in $(seq 200); do
        [ -n "$(comm -13 <(echo "$old") <(workers))" ] && break
        sleep 0.05
    done
    sleep 0.2 # the old worker stops accepting when the master tells it to
    for i in 3 4 5 6; do bg "s$i" -H "X-Key: s" "$base/slow/s$i"; done
    wait_held 6 && c=$(code -H "X-Key: s" "$base/fast/index.html") || c="not held: $(held)"
    c="$c $(codes 2 -H "X-Key: t" "$base/2/fast/index.html")"
    settle
    for i in 1 2 3 4 5 6; do c="$c $(ended "s$i")"; done
    grep -q 'sluice_zone "c": spec or max_keys changed: a new zone' "$dir/logs/error.log" &&
        grep -q 'sluice_zone "two": the kind of limit (rate or concurrency) changed' "$dir/logs/error.log" &&
        [ "$c" = "503 200 429 200 200 200 200 200 200" ] &&
        pass "reload concurrency 3 -> 4 and concurrency -> token-bucket: new zones, logged ($c)" ||
        fail "reload with changed specs: want 503 200 429 and 200 x6 and two notices, got $c; $(grep -a notice "$dir/logs/error.log" | tail -2)"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- lease: a permit held past its lease comes back by itself --------------------
# concurrency 2 lease=1s, two requests held: refused until the leases end,
# 1 s after the admissions (never before: the test's clock is read before
# the requests are sent), then admitted; the late releases give nothing
# back twice (2 held again, a third refused).
conf_http 1 <<CONF
  sluice_zone l key=\$http_x_key spec="concurrency 2 lease=1s" max_keys=10;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location /slow/ { sluice l; proxy_pass $up; }
    location /fast/ { alias $dir/html/; sluice l; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    t0=$(date +%s%N)
    bg "l1" -H "X-Key: l" "$base/slow/l1"
    bg "l2" -H "X-Key: l" "$base/slow/l2"
    wait_held 2 && c=$(code -H "X-Key: l" "$base/fast/index.html") || c="not held: $(held)"
    r=""
    for _ in $(seq 200); do
        r=$(code -H "X-Key: l" "$base/fast/index.html")
        [ "$r" = 200 ] && break
        sleep 0.05
    done
    ms=$((($(date +%s%N) - t0) / 1000000))
    settle
    c="$c $r $(ended l1) $(ended l2)"
    bg "l3" -H "X-Key: l" "$base/slow/l3"
    bg "l4" -H "X-Key: l" "$base/slow/l4"
    wait_held 2 && c="$c $(code -H "X-Key: l" "$base/fast/index.html")" || c="$c after: $(held)"
    settle
    [ "$c" = "503 200 200 200 503" ] && [ "$ms" -ge 1000 ] && [ "$ms" -lt 10000 ] &&
        pass "lease=1s: admitted again $ms ms after the admissions (>= 1000), late releases change nothing ($c)" ||
        fail "lease=1s: want 503 200 200 200 503 after 1000 .. 10000 ms, got $c after $ms ms"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- config: nginx -t ---------------------------------------------------------
check_t() { # ZONE_LINE LOCATION_LINE EXPECTED_TEXT
    conf_http 1 <<CONF
  $1
  server { listen 127.0.0.1:$port; location / { $2 } }
CONF
    local out
    out=$(ngx -t 2>&1)
    if [ $? -ne 0 ] && grep -qF -- "$3" <<<"$out"; then
        pass "nginx -t refuses: $3"
    else
        fail "nginx -t on '$1' '$2': want failure naming '$3', got: $out"
    fi
}
check_t 'sluice_zone c key=$uri spec="concurrency 0" max_keys=10;' 'sluice c;' \
    'sluice_zone "c": spec "concurrency 0": '
check_t 'sluice_zone c key=$uri spec="concurrency 3 lease=soon" max_keys=10;' 'sluice c;' 'lease=soon'
check_t 'sluice_zone c key=$uri spec="concurrency 3 burst=2" max_keys=10;' 'sluice c;' 'burst=2'
check_t 'sluice_zone c key=$uri spec="concurrency 3" max_keys=10 policy=refuse;' 'sluice c;' \
    '"policy=refuse" is not a parameter of a concurrency zone'
check_t 'sluice_zone c key=$uri spec="concurrency 3" max_keys=10 max_key_bytes=8;' 'sluice c;' \
    '"max_key_bytes=8" is not a parameter of a concurrency zone'
check_t 'sluice_zone c key=$uri spec="concurrency 3" max_keys=10 path=/x;' 'sluice c;' \
    '"path=/x" is not a parameter of a concurrency zone'
check_t 'sluice_zone c key=$uri spec="concurrency 100000" max_keys=10;' 'sluice c;' 'sluice_zone "c": '
check_t 'sluice_zone c key=$uri spec="concurrency 3" max_keys=10;' 'sluice c shadow;' \
    'a concurrency zone cannot be a shadow'

[ "$fails" -eq 0 ] && echo "all nginx concurrency checks passed" || echo "$fails nginx concurrency check(s) failed"
[ "$fails" -eq 0 ]
