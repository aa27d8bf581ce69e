#!/usr/bin/env bash
# nginx_compare.sh -- ngx_http_sluice_module beside nginx's limit_req, in
# Debian's nginx on loopback, load from wrk (Debian package wrk).
#
#   bench/nginx_compare.sh build/nginx/ngx_http_sluice_module.so [SECONDS]
#
# Prints two markdown tables (docs/nginx.md keeps them):
#  1. Requests per second, wrk -t2 -c50 for SECONDS (default 5) against a
#     3-byte static file, 2 workers, the median of 3 runs: no limit;
#     limit_req; sluice (a token bucket, a sliding window), each with a
#     limit never reached (every request decided and admitted), then with
#     10/s (nearly every request refused).
#  2. Exactness over 30 s at 3/s, 10/s and 1000/s, one key, wrk hammering
#     with 2 threads and 50 connections: the 200s counted against the
#     most the limit allows in that time -- burst + rate x 30 s for
#     limit_req (burst=5 nodelay) and the token bucket (burst=5); for the
#     sliding window (sliding-log L/s), L per second of the run plus the
#     first second's L.
# The machine is shared: read the figures as ratios within one run.
set -euo pipefail
so=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
secs=${2:-5}
command -v wrk >/dev/null || { echo "nginx_compare: needs wrk (apt-get install wrk)" >&2; exit 1; }
dir=$(mktemp -d /tmp/sluice-ngxbench.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/html" "$dir/logs"
echo ok >"$dir/html/index.html"
chmod -R a+rX "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ngx() { nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" "$@"; }
stop() { ngx -s stop 2>/dev/null || true; sleep 0.5; }
trap 'stop; rm -rf "$dir"' EXIT

# conf HTTP_LINE LOCATION_LINE
conf() {
    cat >"$dir/nginx.conf" <<EOF
load_module $so;
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log crit;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/b; proxy_temp_path $dir/p; fastcgi_temp_path $dir/f;
  uwsgi_temp_path $dir/u; scgi_temp_path $dir/s;
  limit_req_log_level info;
  $1
  server { listen 127.0.0.1:$port; root $dir/html; location / { $2 } }
}
EOF
}

# median3 SECONDS -> the median requests/s of three runs
median3() {
    local a b c
    read -r a _ < <(run "$1")
    read -r b _ < <(run "$1")
    read -r c _ < <(run "$1")
    printf '%s\n' "$a" "$b" "$c" | sort -g | sed -n 2p
}

# run SECONDS -> "requests_per_s ok_count duration_s"
run() {
    ngx
    sleep 0.3
    local out total non
    out=$(wrk -t2 -c50 -d"$1"s "http://127.0.0.1:$port/index.html")
    stop
    total=$(awk '/requests in/ {print $1}' <<<"$out")
    non=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    echo "$(awk '/Requests\/sec/ {print $2}' <<<"$out") $((total - ${non:-0})) $(awk '/requests in/ {sub(/s,?$/, "", $4); print $4}' <<<"$out")"
}

# cell OK BOUND: "OK (+over)" when OK exceeds the bound, else OK
cell() { if [ "$1" -gt "$2" ]; then echo "$1 (+$(($1 - $2)))"; else echo "$1"; fi; }

echo "| configuration | requests/s, limit never reached | requests/s, 10/s (refusing) |"
echo "|---|---:|---:|"
conf "" ""
run 2 >/dev/null # warm up
none=$(median3 "$secs")
echo "| no limit | $none | - |"
conf 'limit_req_zone $binary_remote_addr zone=z:10m rate=100000000r/s;' 'limit_req zone=z burst=5 nodelay;'
a=$(median3 "$secs")
conf 'limit_req_zone $binary_remote_addr zone=z:10m rate=10r/s;' 'limit_req zone=z burst=5 nodelay;'
b=$(median3 "$secs")
echo "| limit_req | $a | $b |"
conf 'sluice_zone z key=$binary_remote_addr spec="token-bucket 1000000000/s burst=5" max_keys=100000;' 'sluice z;'
a=$(median3 "$secs")
conf 'sluice_zone z key=$binary_remote_addr spec="token-bucket 10/s burst=5" max_keys=100000;' 'sluice z;'
b=$(median3 "$secs")
echo "| sluice token-bucket | $a | $b |"
conf 'sluice_zone z key=$binary_remote_addr spec="sliding-wheel 1000000000/s slots=100" max_keys=1000;' 'sluice z;'
a=$(median3 "$secs")
conf 'sluice_zone z key=$binary_remote_addr spec="sliding-wheel 10/s slots=100" max_keys=1000;' 'sluice z;'
b=$(median3 "$secs")
echo "| sluice sliding-wheel (slots=100) | $a | $b |"
echo
echo "| limit, one key, wrk for 30 s | limit_req (burst=5 nodelay) | sluice token-bucket (burst=5) | sluice sliding-log | most the limit allows in wrk's duration: bucket / window |"
echo "|---|---:|---:|---:|---:|"
for r in 3 10 1000; do
    conf "limit_req_zone \$binary_remote_addr zone=z:10m rate=${r}r/s;" 'limit_req zone=z burst=5 nodelay;'
    read -r _ lr dl < <(run 30)
    conf "sluice_zone z key=\$binary_remote_addr spec=\"token-bucket $r/s burst=5\" max_keys=1000;" 'sluice z;'
    read -r _ tb dt < <(run 30)
    conf "sluice_zone z key=\$binary_remote_addr spec=\"sliding-log $r/s\" max_keys=100;" 'sluice z;'
    read -r _ sl ds < <(run 30)
    # a bucket: burst + rate x duration; a window of 1 s: L per started second
    bl=$(python3 -c "import math; print(5 + math.floor($r * $dl) + 1)")
    bt=$(python3 -c "import math; print(5 + math.floor($r * $dt) + 1)")
    bs=$(python3 -c "import math; print($r * math.ceil($ds))")
    echo "| $r/s | $(cell "$lr" "$bl") | $(cell "$tb" "$bt") | $(cell "$sl" "$bs") | $bl / $bs |"
done
echo
lib=$(dirname "$so")/../libsluice.so
echo "| bytes per key, 10^5 keys | limit_req | sluice token-bucket | sluice sliding-log 10/s |"
echo "|---|---:|---:|---:|"
python3 - "$lib" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
f = lib.sluice_table_region_size
f.restype = ctypes.c_size_t
f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
n = 100000
tb = f(b"token-bucket 10/s burst=5", n, 16, None, 0) / n
sl = f(b"sliding-log 10/s", n, 16, None, 0) / n
# limit_req: 64-byte states for a 4-byte $binary_remote_addr key on x86-64
# (nginx's documentation of limit_req_zone), in its slab.
print(f"| 16-byte keys | 64 (documented) | {tb:.0f} | {sl:.0f} |")
PY
