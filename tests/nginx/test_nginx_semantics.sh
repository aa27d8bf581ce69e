#!/usr/bin/env bash
# test_nginx_semantics.sh -- ngx_http_sluice_module's semantics in Debian's
# real nginx, beside limit_req's (issue 22): each check is a regression test
# for one of the issue's items.
#
#   tests/nginx/test_nginx_semantics.sh PATH/TO/ngx_http_sluice_module.so
#
# Starts nginx (tests/nginx/lib.sh: a temporary prefix, a free loopback
# port) for each check and stops it.  Every wait is bounded.  Checks:
#   redirect  a request that goes through `index`, a `try_files` front
#             controller or `error_page 404 = /uri` is decided once.
#   loglevel  sluice_log_level sets a refusal's level, a delay's is one
#             lower; under a flood, `sluice_log_level info` with an
#             error_log at notice writes nothing per refusal.
#   longkey   a key of any length is limited, never "not limited": 65,
#             255, 4096 and 70000 bytes, JWT-sized Authorization headers,
#             and every byte value (1 .. 255 in a decoded $uri).
#   full      a full zone evicts by default (new clients get in), and
#             policy=refuse refuses new keys.
#   status    $sluice_status: PASSED, DELAYED, REJECTED, REJECTED_DRY_RUN.
#   config    `sluice NAME` before its sluice_zone; an unknown zone, a
#             repeated parameter, a max_keys beyond memory are refused by
#             nginx -t with the zone's name.
#   reload    a reload that changes max_key_bytes, max_keys or policy is
#             applied (a new zone), and the next reload works; a reload
#             that nginx fails changes no running zone's spec.
#   bigzone   nginx -t on a zone of 10M keys: little CPU time and memory.
#   path      a zone with path= keeps its keys across nginx -s stop and
#             start, an application process (the Python binding) shares
#             its limit, a reload changes its spec, and one that changes
#             max_keys is refused naming the zone.
# Exit 77 (skipped) when nginx or python3 cannot be found.
set -u

so=${1:?usage: test_nginx_semantics.sh MODULE.so}
# shellcheck source=tests/nginx/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- redirect: decided once, whatever internal redirects follow -------------
# burst 4 of a bucket that refills once an hour: 6 requests, 4 admitted
# (limit_req admits 4 too); a second decision per request would admit 2.
conf_http 2 <<CONF
  sluice_zone redir key=\$http_x_key spec="token-bucket 1/h burst=4" max_keys=100;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location /idx/ { alias $dir/html/; sluice redir; }
    location /fc/ { sluice redir; try_files \$uri /index.html?\$args; }
    location /e404/ { sluice redir; error_page 404 = /index.html; }
    location / { sluice redir; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    for t in "index:/idx/" "try_files:/fc/x?a=1" "error_page:/e404/missing" "plain:/index.html"; do
        c=$(codes 6 -H "X-Key: ${t%%:*}" "$base${t#*:}")
        [ "$c" = "200 200 200 200 429 429" ] && pass "redirect ($t): decided once: $c" ||
            fail "redirect ($t): want 200 x4 then 429 x2, got $c"
    done
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- loglevel: the level of a refusal, of a delay; library errors are 500s --
conf_http 1 <<CONF
  sluice_zone lvl key=\$http_x_key spec="token-bucket 1/h burst=1" max_keys=100;
  sluice_zone shp key=\$http_x_key spec="leaky-bucket 10/s capacity=5" max_keys=100;
  sluice_zone fl key=\$binary_remote_addr spec="token-bucket 1/h burst=1" max_keys=100;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location /warn/ { alias $dir/html/; sluice lvl; sluice_log_level warn; }
    location /quiet/ { alias $dir/html/; sluice fl; sluice_log_level info;
                       error_log $dir/logs/flood.log notice; }
    location /shape/ { alias $dir/html/; sluice shp; sluice_log_level warn; }
    location / { sluice lvl; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    : >"$dir/logs/error.log"
    c=$(codes 2 -H "X-Key: w" "$base/warn/index.html")
    [ "$c" = "200 429" ] && grep -q '\[warn\] .*sluice: limiting requests by zone "lvl"' "$dir/logs/error.log" &&
        ! grep -q '\[error\] .*limiting requests' "$dir/logs/error.log" &&
        pass "sluice_log_level warn: the refusal is logged at warn" ||
        fail "log level warn: $c; $(grep limiting "$dir/logs/error.log")"
    # a flood of one refused key (2 s, 8 connections): nothing logged
    out=$(python3 "$here/load.py" "$base/quiet/index.html" 8 2)
    n429=$(jget 'd["counts"].get("429",0)' <<<"$out")
    bytes=$(stat -c %s "$dir/logs/flood.log" 2>/dev/null || echo 0)
    [ "$n429" -ge 50 ] && [ "$bytes" -eq 0 ] &&
        pass "a flood of $n429 refusals at sluice_log_level info: $bytes bytes of log at notice" ||
        fail "flood: $n429 refusals, $bytes bytes of log (want >= 50 and 0); $out"
    c=$(codes 2 -H "X-Key: e" "$base/index.html")
    [ "$c" = "200 429" ] && grep -q '\[error\] .*sluice: limiting requests by zone "lvl"' "$dir/logs/error.log" &&
        pass "the default level of a refusal is error" || fail "default level: $c"
    # three in a row on one connection: each waits for the one before
    c=$(curl -s -H "X-Key: d" -w '%{http_code} ' -o /dev/null "$base/shape/index.html" \
        -o /dev/null "$base/shape/index.html" -o /dev/null "$base/shape/index.html")
    [ "$c" = "200 200 200 " ] && grep -q '\[notice\] .*sluice: delaying request' "$dir/logs/error.log" &&
        pass "a delay is logged one level lower (notice)" ||
        fail "delay level: $c; $(grep delaying "$dir/logs/error.log")"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- full: a zone full of keys in use -----------------------------------------
# 64 keys of 1/h (each at rest only after an hour); 200 distinct clients.
conf_http 1 <<CONF
  sluice_zone lru key=\$http_x_key spec="token-bucket 1/h burst=1" max_keys=64;
  sluice_zone ref key=\$http_x_key spec="token-bucket 1/h burst=1" max_keys=64 policy=refuse;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location /lru/ { alias $dir/html/; sluice lru; }
    location /ref/ { alias $dir/html/; sluice ref; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    lru=$(for i in $(seq 200); do code -H "X-Key: client-$i" "$base/lru/index.html"; echo; done | sort | uniq -c | tr -s ' \n' ' ')
    ref=$(for i in $(seq 200); do code -H "X-Key: client-$i" "$base/ref/index.html"; echo; done | sort | uniq -c | tr -s ' \n' ' ')
    [ "$lru" = " 200 200 " ] && pass "a full zone evicts by default: every new client admitted ($lru)" ||
        fail "default policy: want 200 x200, got $lru"
    n429=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "429") print $i}' <<<"$ref")
    [ "${n429:-0}" -ge 136 ] && pass "policy=refuse refuses new keys when full ($ref)" ||
        fail "policy=refuse: want at least 136 refusals, got $ref"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- status: $sluice_status ---------------------------------------------------
conf_http 1 <<CONF
  sluice_zone st key=\$http_x_key spec="token-bucket 1/h burst=1" max_keys=100;
  sluice_zone stshape key=\$http_x_key spec="leaky-bucket 10/s capacity=5" max_keys=100;
  map \$sluice_status \$st_mapped { default "[\$sluice_status]"; }
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    add_header X-Sluice \$st_mapped always;
    location /st/ { alias $dir/html/; sluice st; }
    location /dry/ { alias $dir/html/; sluice st shadow; }
    location /shape/ { alias $dir/html/; sluice stshape; }
    location /none/ { alias $dir/html/; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    st() { curl -s -o /dev/null -D - "$@" | tr -d '\r' | awk -F': ' 'tolower($1) == "x-sluice" {print $2}'; }
    got="$(st -H 'X-Key: a' "$base/st/index.html") $(st -H 'X-Key: a' "$base/st/index.html")"
    got="$got $(st -H 'X-Key: b' "$base/dry/index.html") $(st -H 'X-Key: b' "$base/dry/index.html")"
    # three in a row on one connection: each waits for the one before
    got="$got $(st -H 'X-Key: c' "$base/shape/index.html" -o /dev/null "$base/shape/index.html" \
        -o /dev/null "$base/shape/index.html" | tr '\n' ' ' | cut -d' ' -f1,3)"
    got="$got $(st "$base/none/index.html") $(st "$base/st/index.html")"
    want="[PASSED] [REJECTED] [PASSED] [REJECTED_DRY_RUN] [PASSED] [DELAYED] [] []"
    [ "$got" = "$want" ] && pass "\$sluice_status in map and add_header: $got" ||
        fail "\$sluice_status: want $want, got $got"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- config: forward references, duplicates, sizes ------------------------------
conf_http 1 <<CONF
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location / { sluice later; }
    location = /metrics { sluice_metrics; }
  }
  sluice_zone later key=\$http_x_key spec="token-bucket 1/h burst=1" max_keys=100;
CONF
if start; then
    c=$(codes 2 -H "X-Key: f" "$base/index.html")
    [ "$c" = "200 429" ] && pass "sluice NAME before its sluice_zone: $c" || fail "forward zone: $c"
else
    fail "sluice NAME before its sluice_zone: nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop
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
        fail "nginx -t on '$1': want failure naming '$3', got: $out"
    fi
}
check_t 'sluice_zone a key=$uri spec="fixed-window 1/s" max_keys=10;' 'sluice b;' 'unknown sluice_zone "b"'
check_t 'sluice_zone a key=$uri spec="fixed-window 1/s" max_keys=10 max_keys=20;' 'sluice a;' \
    'duplicate parameter "max_keys=20"'
check_t 'sluice_zone a key=$uri spec="fixed-window 1/s" key=$host max_keys=10;' 'sluice a;' \
    'duplicate parameter "key=$host"'
check_t 'sluice_zone a key=$uri spec="fixed-window 1/s" max_keys=10 policy=refuse policy=evict-lru;' \
    'sluice a;' 'duplicate parameter "policy=evict-lru"'
check_t 'sluice_zone a key=$uri spec="fixed-window 1/s" max_keys=4294967296;' 'sluice a;' \
    'sluice_zone "a": max_keys=4294967296 needs'
check_t 'sluice_zone a key=$uri spec="fixed-window 1/s" max_keys=10; sluice_zone a key=$uri spec="fixed-window 1/s" max_keys=10;' \
    'sluice a;' 'duplicate sluice_zone "a"'

# ---- reload: max_key_bytes, max_keys, policy -----------------------------------
# rz_conf MAX_KEY_BYTES MAX_KEYS POLICY [ALG_OF_ZONE_other]
rz_conf() {
    conf_http 2 <<CONF
  sluice_zone p4 key=\$http_x_key spec="token-bucket 1/h burst=${5:-3}" max_keys=100;
  sluice_zone rz key=\$http_x_key spec="token-bucket 1/h burst=1" max_keys=$2 max_key_bytes=$1 policy=$3;
  sluice_zone other key=\$http_x_key spec="${4:-fixed-window 1/s}" max_keys=10;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    sluice_headers on;
    location /rz/ { alias $dir/html/; sluice rz; }
    location /p4/ { alias $dir/html/; sluice p4; }
    location = /metrics { sluice_metrics; }
  }
CONF
}
# fill PREFIX N: N new keys, one request each; prints the statuses, counted
fill() { for i in $(seq "$2"); do code -H "X-Key: $1-$i" "$base/rz/index.html"; echo; done | sort | uniq -c | tr -s ' \n' ' '; }
k64=$(printf 'k%.0s' $(seq 64))
rz_conf 60 8 refuse
if start; then
    # a reload that completes and logs no emerg (the logs emptied first)
    reload_ok() {
        : >"$dir/logs/error.log"
        : >"$dir/logs/reload.log"
        reload_wait && [ -z "$(grep -ah emerg "$dir/logs/reload.log" "$dir/logs/error.log")" ]
    }
    rz_conf 64 8 refuse
    if reload_ok; then
        c=$(codes 2 -H "X-Key: $k64" "$base/rz/index.html")
        [ "$c" = "200 429" ] && pass "reload max_key_bytes 60 -> 64: a 64-byte key is limited: $c" ||
            fail "reload max_key_bytes 60 -> 64: a 64-byte key got $c"
    else
        fail "reload max_key_bytes 60 -> 64 failed: $(grep -ah emerg "$dir/logs/"*.log | tail -1)"
    fi
    f=$(fill a 8) # the 64-byte key is the 8th
    [ "$f" = " 7 200 1 429 " ] || fail "max_keys=8 policy=refuse: 8 new keys beside one got $f"
    rz_conf 64 9 refuse
    if reload_ok; then
        f=$(fill b 10)
        [ "$f" = " 9 200 1 429 " ] && pass "reload max_keys 8 -> 9: 9 keys held, the 10th refused ($f)" ||
            fail "reload max_keys 8 -> 9: 10 new keys got $f"
    else
        fail "reload max_keys 8 -> 9 failed: $(grep -ah emerg "$dir/logs/"*.log | tail -1)"
    fi
    rz_conf 64 9 refuse
    reload_ok && [ "$(code -H "X-Key: b-1" "$base/rz/index.html")" = 429 ] &&
        pass "the next reload (same configuration) keeps the zone" ||
        fail "the reload after max_keys 8 -> 9: $(grep -ah emerg "$dir/logs/"*.log | tail -1)"
    rz_conf 64 9 evict-lru
    if reload_ok; then
        f=$(fill c 20)
        [ "$f" = " 20 200 " ] && pass "reload policy refuse -> evict-lru: 20 new keys admitted" ||
            fail "reload policy refuse -> evict-lru: 20 new keys got $f"
    else
        fail "reload policy change failed: $(grep -ah emerg "$dir/logs/"*.log | tail -1)"
    fi
    # A reload nginx refuses (zone "other" changes its algorithm) must leave
    # p4's spec alone, although p4 comes first (its zone is set up before
    # other's fails): burst 3, not 5.
    rz_conf 64 9 evict-lru "token-bucket 1/s" 5
    : >"$dir/logs/error.log"
    ngx -s reload 2>/dev/null
    for _ in $(seq 100); do grep -aq 'sluice_zone "other"' "$dir/logs/error.log" && break; sleep 0.05; done
    sleep 0.5
    c=$(codes 4 -H "X-Key: fresh" "$base/p4/index.html")
    h=$(curl -s -D - -o /dev/null -H "X-Key: fresh" "$base/p4/index.html" | tr -d '\r')
    [ "$c" = "200 200 200 429" ] && grep -q 'sluice-burst=3' <<<"$h" &&
        pass "a failed reload leaves the running spec: burst 3 ($c)" ||
        fail "a failed reload: want 200 200 200 429 and sluice-burst=3, got $c; $(grep -i '^ratelimit-policy' <<<"$h")"
    rz_conf 64 9 evict-lru "fixed-window 1/s" 5
    if reload_ok; then
        c=$(codes 6 -H "X-Key: fresh2" "$base/p4/index.html")
        h=$(curl -s -D - -o /dev/null -H "X-Key: fresh2" "$base/p4/index.html" | tr -d '\r')
        [ "$c" = "200 200 200 200 200 429" ] && grep -q 'sluice-burst=5' <<<"$h" &&
            pass "then a committed reload applies burst 5 ($c)" || fail "committed reload: $c; $h"
    else
        fail "reload to burst 5 failed: $(grep -ah emerg "$dir/logs/"*.log | tail -1)"
    fi
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- bigzone: nginx -t on 10M keys -----------------------------------------------
# The zone's memory is a fresh mapping, zero already: nginx -t must not
# write it.  CPU time (user + sys) and peak RSS of `nginx -t`, as the kernel
# counts them for the child (a loaded machine stretches wall time, not these).
conf_http 1 <<CONF
  sluice_zone big key=\$binary_remote_addr spec="token-bucket 10/s burst=20" max_keys=10000000;
  server { listen 127.0.0.1:$port; location / { sluice big; } }
CONF
read -r cpu rss rc < <(python3 - "$nginx_bin" "$dir" <<'PY'
import os, sys
n, d = sys.argv[1], sys.argv[2]
pid = os.posix_spawn(n, [n, "-t", "-q", "-p", d, "-c", d + "/nginx.conf", "-e", d + "/logs/error.log"],
                     os.environ)
_, status, ru = os.wait4(pid, 0)
print(f"{ru.ru_utime + ru.ru_stime:.3f} {ru.ru_maxrss // 1024} {os.waitstatus_to_exitcode(status)}")
PY
)
python3 -c "import sys; sys.exit(0 if $rc == 0 and $cpu < 0.1 and $rss < 20 else 1)" &&
    pass "nginx -t on 10M keys: ${cpu}s CPU, ${rss} MB peak RSS" ||
    fail "nginx -t on 10M keys: rc $rc, ${cpu}s CPU, ${rss} MB peak RSS (want < 0.1 s, < 20 MB)"

# ---- path: a named table outlives nginx and is shared ---------------------------
shm="/sluice-nginx-test-$$"
trap 'stop; rm -rf "$dir"; rm -f "/dev/shm${shm}"' EXIT
conf_http 2 <<CONF
  sluice_zone pz key=\$http_x_key spec="token-bucket 1/h burst=2" max_keys=100 path=$shm;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location / { sluice pz; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    c=$(codes 3 -H "X-Key: a" "$base/index.html")
    stop
    if start; then
        c="$c / $(codes 1 -H "X-Key: a" "$base/index.html")"
        [ "$c" = "200 200 429 / 429" ] && pass "path=: a key's state survives nginx -s stop and start ($c)" ||
            fail "path= across a restart: want 200 200 429 / 429, got $c"
        # an application process opens the same table and takes key b's burst
        lib=$(dirname "$so")/../libsluice.so
        if [ -f "$lib" ]; then
            py=$(SLUICE_LIBRARY=$lib PYTHONPATH=$here/../../bindings/python python3 -c "
import sluice
t = sluice.SharedTable('$shm', 'token-bucket 1/h burst=2', 100, evict_lru=True)
print(t.try_acquire(b'b'), t.try_acquire(b'b'), t.try_acquire(b'b'))" 2>&1)
            c=$(codes 1 -H "X-Key: b" "$base/index.html")
            [ "$py" = "True True False" ] && [ "$c" = 429 ] &&
                pass "path=: an application process shares the zone's limit (python: $py; nginx: $c)" ||
                fail "path= shared with python: python $py, nginx $c"
        else
            echo "skip path= with an application process: $lib not built"
        fi
        # a reload that changes the spec applies it to the named table; one
        # that changes max_keys is refused, naming the zone
        sed -i 's/burst=2" max_keys=100/burst=3" max_keys=100/' "$dir/nginx.conf"
        : >"$dir/logs/error.log"
        if reload_wait; then
            c=$(codes 4 -H "X-Key: c" "$base/index.html")
            [ "$c" = "200 200 200 429" ] && pass "path=: a reload changes the spec to burst=3 ($c)" ||
                fail "path= reload burst 2 -> 3: key c got $c"
        else
            fail "path= reload burst 2 -> 3 did not complete: $(grep -a emerg "$dir/logs/error.log")"
        fi
        sed -i 's/max_keys=100 path=/max_keys=200 path=/' "$dir/nginx.conf"
        : >"$dir/logs/error.log"
        ngx -s reload 2>/dev/null
        for _ in $(seq 100); do grep -aq 'sluice_zone "pz"' "$dir/logs/error.log" && break; sleep 0.05; done
        c=$(codes 1 -H "X-Key: c" "$base/index.html")
        grep -aq 'emerg.*sluice_zone "pz": path' "$dir/logs/error.log" && [ "$c" = 429 ] &&
            pass "path=: a reload changing max_keys is refused, naming the zone; the zone goes on" ||
            fail "path= reload max_keys: $c; $(grep -a 'sluice_zone' "$dir/logs/error.log" | tail -1)"
    else
        fail "path=: nginx did not start again: $(tail -3 "$dir/logs/error.log")"
    fi
else
    fail "path=: nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

# ---- longkey: no key escapes its limit by its length -----------------------------
conf_http 1 <<CONF
  sluice_zone lk key=\$http_x_key spec="token-bucket 1/h burst=2" max_keys=1000;
  sluice_zone jwt key=\$http_authorization spec="token-bucket 1/h burst=2" max_keys=1000;
  sluice_zone bytes key=\$uri spec="token-bucket 1/h burst=2" max_keys=1000;
  large_client_header_buffers 4 128k;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    location /jwt/ { alias $dir/html/; sluice jwt; }
    location /b/ { sluice bytes; try_files /index.html =404; }
    location / { sluice lk; }
    location = /metrics { sluice_metrics; }
  }
CONF
if start; then
    : >"$dir/logs/error.log"
    for n in 64 65 255 4096 70000; do
        k=$(head -c "$n" /dev/zero | tr '\0' L)
        c=$(codes 3 -H "X-Key: $k" "$base/index.html")
        [ "$c" = "200 200 429" ] && pass "a key of $n bytes is limited: $c" ||
            fail "a key of $n bytes: want 200 200 429, got $c"
    done
    # two long keys that differ in their last byte only are two keys
    k=$(head -c 4095 /dev/zero | tr '\0' M)
    c="$(codes 3 -H "X-Key: ${k}1" "$base/index.html") / $(codes 3 -H "X-Key: ${k}2" "$base/index.html")"
    [ "$c" = "200 200 429 / 200 200 429" ] && pass "4096-byte keys differing in the last byte are two keys" ||
        fail "4096-byte keys differing in the last byte: $c"
    # JWT-sized bearer tokens (1 and 2 KB), three clients each
    for n in 1024 2048; do
        for cl in 1 2 3; do
            tok=$(python3 -c "import base64,os; print(base64.urlsafe_b64encode(os.urandom($n*3//4)).decode())")
            c=$(codes 3 -H "Authorization: Bearer $tok" "$base/jwt/index.html")
            [ "$c" = "200 200 429" ] || break
        done
        [ "$c" = "200 200 429" ] && pass "JWT-sized keys ($n bytes of token): each limited" ||
            fail "JWT-sized keys ($n bytes): $c"
    done
    # every byte value: /b/%XX + 70 bytes, decoded into $uri (a key of 75
    # bytes); three requests each on one connection.
    out=$(python3 - "$port" <<'PY'
import http.client, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
bad = []
for b in range(1, 256):
    got = []
    for _ in range(3):
        conn.request("GET", "/b/%%%02X%s" % (b, "z" * 70))
        r = conn.getresponse()
        r.read()
        got.append(r.status)
        if r.getheader("connection", "").lower() == "close":
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
    if got != [200, 200, 429]:
        bad.append("%02X:%s" % (b, got))
print(" ".join(bad) if bad else "all")
PY
)
    # 2F is "/" (merged with the one before: /b/zzz..., a key of its own)
    [ "$out" = "all" ] && pass "every byte value 01..FF in a key: limited" || fail "byte values: $out"
    grep -aq 'not limited' "$dir/logs/error.log" && fail "a key was logged as not limited"
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

echo "$fails failed"
[ "$fails" -eq 0 ]
