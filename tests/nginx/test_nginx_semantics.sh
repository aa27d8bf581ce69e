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

echo "$fails failed"
[ "$fails" -eq 0 ]
