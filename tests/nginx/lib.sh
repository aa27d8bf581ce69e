# lib.sh -- what the nginx tests share (sourced by test_nginx.sh and
# test_nginx_semantics.sh): a temporary prefix, a free loopback port,
# nginx started and stopped with every wait bounded, and small helpers.
#
#   so=MODULE.so; . tests/nginx/lib.sh
#
# Sets dir (the prefix: nginx.conf, html/, logs/), port, base, fails; the
# EXIT trap stops nginx and removes dir.  Exits 77 (skipped) when nginx or
# python3 cannot be found.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || { echo "nginx test: no nginx binary (apt-get install nginx-light)"; exit 77; }
command -v python3 >/dev/null || { echo "nginx test: no python3"; exit 77; }
[ -f "$so" ] || { echo "nginx test: $so not built"; exit 1; }
so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so")
promtool=$(command -v promtool || true)

dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-nginx.XXXXXX")
chmod 755 "$dir"
mkdir -p "$dir/html" "$dir/logs"
echo ok >"$dir/html/index.html"
chmod -R a+rX "$dir"

fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"

# conf_head WORKERS: the lines before the http block's own, up to "http {".
conf_head() {
    echo "load_module $so;"
    echo "worker_processes $1;"
    echo "pid $dir/nginx.pid;"
    echo "error_log $dir/logs/error.log info;"
    echo "events { worker_connections 1024; }"
    echo "http {"
    echo "  access_log off;"
    for t in client_body proxy fastcgi uwsgi scgi; do echo "  ${t}_temp_path $dir/tmp_$t;"; done
}

# conf_http WORKERS < BODY: nginx.conf with BODY (zones, servers) in http.
conf_http() {
    { conf_head "$1"; cat; echo "}"; } >"$dir/nginx.conf"
}

ngx() { "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" "$@"; }

# the master's children, sorted; nothing when no master runs
workers() {
    local m
    m=$(cat "$dir/nginx.pid" 2>/dev/null) || return 0
    [ "${m:-0}" -gt 1 ] 2>/dev/null || return 0
    pgrep -P "$m" 2>/dev/null | sort
}

# start [URL]: start nginx and wait (bounded) until URL (default /metrics) answers
start() {
    rm -f "$dir/nginx.pid"
    ngx || return 1
    for _ in $(seq 100); do
        curl -s -o /dev/null "${1:-$base/metrics}" && return 0
        sleep 0.05
    done
    return 1
}

stop() {
    local pid
    pid=$(cat "$dir/nginx.pid" 2>/dev/null) || return 0
    ngx -s stop 2>/dev/null
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$dir/nginx.pid"; return 0; }
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null
    pkill -9 -P "$pid" 2>/dev/null
    rm -f "$dir/nginx.pid"
}
trap 'stop; rm -rf "$dir"' EXIT

# reload_wait: nginx -s reload, then wait (bounded) for the old workers to
# go and new ones to serve; fails when the reload fails.
reload_wait() {
    local old
    old=$(workers)
    ngx -s reload 2>>"$dir/logs/reload.log" || return 1
    for _ in $(seq 200); do
        if [ -z "$(comm -12 <(echo "$old") <(workers))" ]; then return 0; fi
        sleep 0.05
    done
    return 1
}

code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# codes N ARGS...: the statuses of N requests in a row, space separated
codes() {
    local n=$1 c=""
    shift
    for _ in $(seq "$n"); do c="$c $(code "$@")"; done
    echo "${c# }"
}

# load THREADS SECONDS [URL]: run load.py, print its JSON.
load() { python3 "$here/load.py" "${3:-$base/index.html}" "$1" "$2"; }
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
