#!/usr/bin/env bash
# test_nginx_calendar.sh -- calendar quotas (tz=) in ngx_http_sluice_module,
# in Debian's real nginx: the module decides them on their own time axis
# (sluice_table_now_ns: CLOCK_REALTIME, the Unix epoch), not on the
# monotonic clock.
#
#   tests/nginx/test_nginx_calendar.sh PATH/TO/ngx_http_sluice_module.so
#
# Checks (each request's expected reset is computed here from the wall
# clock, independently of the library, with one second of slack):
#   utc       spec="fixed-window 3/d tz=UTC": 3 admitted, the 4th refused;
#             RateLimit's t= and Retry-After are the seconds to the next
#             UTC midnight.
#   offset    tz=Pacific/Kiritimati (UTC+14, no DST): the seconds to the
#             next midnight there, 14 hours off UTC's.
#   shadow    a shadow calendar zone beside an enforced one: admitted.
#   reload    3/d -> 5/d on the kept zone: the day's count is kept (2 more),
#             the reset is still the next midnight.
#   mixed     a place with a calendar quota and a monotonic spec is refused
#             by nginx -t, naming both zones and "different clocks".
# Exit 77 (skipped) when nginx or python3 cannot be found.
set -u

so=${1:?usage: test_nginx_calendar.sh MODULE.so}
# shellcheck source=tests/nginx/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# seconds to the next midnight of a zone OFFSET seconds east of UTC, now
to_midnight() { echo $((86400 - (($(date +%s) + $1) % 86400))); }

# Not within 3 s of either midnight: the 4 requests stay in one window
# (a bounded wait of at most 4 s, once).
for off in 0 50400; do
    left=$(to_midnight "$off")
    if [ "$left" -le 3 ] || [ "$left" -ge 86397 ]; then sleep 4; fi
done

conf_http 2 <<CONF
  sluice_zone utc key=\$http_x_key spec="fixed-window 3/d tz=UTC" max_keys=100;
  sluice_zone kiri key=\$http_x_key spec="fixed-window 3/d tz=Pacific/Kiritimati" max_keys=100;
  sluice_zone kiri2 key=\$http_x_key spec="fixed-window 1/d tz=Pacific/Kiritimati" max_keys=100;
  server {
    listen 127.0.0.1:$port;
    root $dir/html;
    sluice_headers on;
    location /utc/ { alias $dir/html/; sluice utc; }
    location /kiri/ { alias $dir/html/; sluice kiri; }
    location /both/ { alias $dir/html/; sluice utc; sluice kiri2 shadow; }
    location = /metrics { sluice_metrics; }
  }
CONF

# check NAME PATH OFFSET: 3 admitted, the 4th refused with the reset of a
# zone OFFSET seconds east of UTC
check() {
    local name=$1 path=$2 off=$3 c h lo hi t ra
    c=$(codes 3 -H "X-Key: $name" "$base$path")
    lo=$(to_midnight "$off")
    h=$(curl -s -D - -o /dev/null -H "X-Key: $name" "$base$path" | tr -d '\r')
    hi=$(to_midnight "$off")
    t=$(sed -n 's/^RateLimit: .*;t=\([0-9]*\).*/\1/p' <<<"$h")
    ra=$(sed -n 's/^Retry-After: \([0-9]*\)/\1/p' <<<"$h")
    if [ "$c" != "200 200 200" ] || ! grep -q '^HTTP/1.1 429' <<<"$h"; then
        fail "$name: want 200 x3 then 429, got $c then $(head -1 <<<"$h")"
    elif [ -z "$t" ] || [ "$t" -lt $((hi - 1)) ] || [ "$t" -gt $((lo + 1)) ]; then
        fail "$name: RateLimit t=$t, want the seconds to the next midnight, $hi .. $lo (headers: $(grep -i ratelimit <<<"$h" | tr '\n' ' '))"
    elif [ -z "$ra" ] || [ "$ra" -lt $((hi - 1)) ] || [ "$ra" -gt $((lo + 1)) ]; then
        fail "$name: Retry-After $ra, want $hi .. $lo"
    else
        last_t=$t
        pass "$name: 3 admitted, the 4th refused; reset t=$t s and Retry-After $ra s = to the next midnight ($hi .. $lo)"
    fi
}

last_t=0
# check_reset NAME PATH OFFSET: a refused request's reset is that midnight's
check_reset() {
    local lo hi h t
    lo=$(to_midnight "$3")
    h=$(curl -s -D - -o /dev/null -H "X-Key: $1" "$base$2" | tr -d '\r')
    hi=$(to_midnight "$3")
    t=$(sed -n 's/^RateLimit: .*;t=\([0-9]*\).*/\1/p' <<<"$h")
    if grep -q '^HTTP/1.1 429' <<<"$h" && [ -n "$t" ] && [ "$t" -ge $((hi - 1)) ] && [ "$t" -le $((lo + 1)) ]; then
        pass "$1: after the reload, reset t=$t s = to the next midnight"
    else
        fail "$1: after the reload: $(head -1 <<<"$h"), t=$t, want $hi .. $lo"
    fi
}

if start; then
    check utc /utc/index.html 0
    tu=$last_t
    check kiri /kiri/index.html 50400
    # the module's two resets are 14 h apart (mod a day)
    d=$(( (tu - last_t + 86400) % 86400 ))
    [ "$d" -ge 50399 ] && [ "$d" -le 50401 ] && pass "offset: the module's resets (UTC $tu s, Kiritimati $last_t s) differ by 14 h" ||
        fail "offset: the resets differ by $d s, want 50400"
    c=$(codes 3 -H "X-Key: sh" "$base/both/index.html")
    [ "$c" = "200 200 200" ] && pass "shadow calendar zone beside an enforced one: $c" ||
        fail "shadow: want 200 x3, got $c"
    grep -q 'would refuse the request (shadow)' "$dir/logs/error.log" &&
        pass "shadow: the calendar zone's 2nd request of the day logged as a refusal" ||
        fail "shadow: no refusal logged by kiri2"
    # reload: 3/d -> 5/d on the kept zone, applied by the new workers at
    # the zone's clock: the key that used its 3 gets 2 more, same reset
    sed -i 's|spec="fixed-window 3/d tz=UTC"|spec="fixed-window 5/d tz=UTC"|' "$dir/nginx.conf"
    if reload_wait; then
        c=$(codes 3 -H "X-Key: utc" "$base/utc/index.html")
        [ "$c" = "200 200 429" ] && pass "reload 3/d -> 5/d: the day's count kept, 2 more: $c" ||
            fail "reload 3/d -> 5/d: want 200 200 429, got $c ($(grep -a sluice "$dir/logs/error.log" | tail -2))"
        check_reset utc /utc/index.html 0
    else
        fail "reload: $(tail -3 "$dir/logs/reload.log" "$dir/logs/error.log")"
    fi
else
    fail "nginx did not start: $(tail -3 "$dir/logs/error.log")"
fi
stop

conf_http 1 <<CONF
  sluice_zone cal key=\$http_x_key spec="fixed-window 3/d tz=UTC" max_keys=10;
  sluice_zone mono key=\$http_x_key spec="token-bucket 10/s" max_keys=10;
  server {
    listen 127.0.0.1:$port;
    location / { sluice cal; sluice mono shadow; }
  }
CONF
out=$(ngx -t 2>&1)
if grep -q 'sluice "cal" and "mono" in .*nginx.conf:[0-9]*: limits on different clocks' <<<"$out"; then
    pass "mixed: nginx -t refuses a calendar quota beside a monotonic spec"
else
    fail "mixed: nginx -t said: $out"
fi

echo "$fails failed"
[ "$fails" -eq 0 ]
