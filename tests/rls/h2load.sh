#!/usr/bin/env bash
# h2load.sh -- load sluice-rls with h2load (nghttp2-client): gRPC unary
# ShouldRateLimit calls, server pinned to one core with taskset.
#
#   tests/rls/h2load.sh BUILD/sluice-rls [DESCRIPTORS] [N] [RATE]
#
# DESCRIPTORS (1 or 3) per request, N calls (default 200000), 50 streams over
# 4 connections; the server on CPU 0 with one worker, h2load on CPU 1.  The
# limit is high (10^9 a year), so every call is a real admission.  Prints
# h2load's summary, and the latency percentiles from its per-request log.
# RATE: calls per second in all (h2load --rps, split over the 4
# connections); default as fast as it goes.  Not a ctest: a measurement
# (docs/rls.md).
#
# The floor, in the same run: when nghttpd (nghttp2-server) is installed,
# the same h2load command against nghttpd, nghttp2's own HTTP/2 server,
# pinned to CPU 0 the same way and answering every call with a 60-byte
# file -- a server that decides nothing.  Its rate and latencies are what
# this machine, the loopback and h2load give before any work of sluice-rls;
# SLUICE_H2LOAD_FLOOR=off skips it.
set -euo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ndesc=${2:-1}
n=${3:-200000}
rate=${4:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
proto=$here/../../server/rls/proto
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/rt/ratelimit/config" "$tmp/py"
cat > "$tmp/rt/ratelimit/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: a
    rate_limit: {unit: year, requests_per_unit: 1000000000}
  - key: b
    rate_limit: {unit: year, requests_per_unit: 1000000000}
  - key: c
    rate_limit: {unit: year, requests_per_unit: 1000000000}
EOF
(cd "$proto" && protoc -I. --python_out="$tmp/py" envoy/service/ratelimit/v3/rls.proto \
    envoy/extensions/common/ratelimit/v3/ratelimit.proto envoy/config/core/v3/base.proto)
/usr/bin/python3 - "$tmp/py" "$ndesc" "$tmp/req.bin" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from envoy.service.ratelimit.v3 import rls_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2 as r
E = r.RateLimitDescriptor.Entry
req = rls_pb2.RateLimitRequest(domain="bench", descriptors=[
    r.RateLimitDescriptor(entries=[E(key=k, value="client-42")]) for k in "abc"[: int(sys.argv[2])]])
m = req.SerializeToString()
open(sys.argv[3], "wb").write(b"\0" + len(m).to_bytes(4, "big") + m)
EOF
RUNTIME_ROOT=$tmp/rt GRPC_HOST=127.0.0.1 GRPC_PORT=0 PORT=off SLUICE_RLS_WORKERS=1 \
    taskset -c 0 "$bin" > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do
    grep -q "listening on" "$tmp/out" && break
    sleep 0.1
done
port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$tmp/out")
[ -n "$port" ] || { cat "$tmp/out"; exit 1; }
echo "sluice-rls on CPU 0, port $port; $ndesc descriptor(s), $n calls, h2load -c 4 -m 50 on CPU 1"
# The server's CPU time (utime + stime, in clock ticks) around the run: on a
# shared machine, calls per CPU-second of the server is the figure that
# other processes' load does not change much.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rps=()
[ -n "$rate" ] && rps=(--rps=$((rate / 4)))
# load PID URL LOG: h2load's summary, the latency percentiles from its
# per-request log (start in us since the epoch, status, duration in us),
# and PID's CPU time over the run.
load() {
    local c0 c1 hz
    c0=$(cpu "$1")
    taskset -c 1 h2load -n "$n" -c 4 -m 50 "${rps[@]}" --log-file="$3" -d "$tmp/req.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' "$2" |
        grep -E "finished in|requests:|status codes|time for request|req/s"
    c1=$(cpu "$1")
    sort -n -k3,3 "$3" | awk '{ d[NR] = $3 } END {
        printf "latency: p50 %d us, p99 %d us, p99.9 %d us, max %d us (%d calls)\n",
            d[int(NR * 0.5)], d[int(NR * 0.99)], d[int(NR * 0.999)], d[NR], NR }'
    hz=$(getconf CLK_TCK)
    awk -v n="$n" -v t=$((c1 - c0)) -v hz="$hz" \
        'BEGIN { printf "server CPU: %.2f s for %d calls = %.0f calls per CPU-second\n", t / hz, n, n * hz / (t ? t : 1) }'
}
load "$pid" "http://127.0.0.1:$port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" "$tmp/log"
kill -TERM "$pid" && wait "$pid" 2>/dev/null || true
pid=

if [ "${SLUICE_H2LOAD_FLOOR:-on}" != off ] && command -v nghttpd >/dev/null 2>&1; then
    mkdir -p "$tmp/www"
    head -c 60 /dev/zero | tr '\0' x > "$tmp/www/r"
    fport=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    taskset -c 0 nghttpd --no-tls -a 127.0.0.1 -d "$tmp/www" "$fport" > "$tmp/nghttpd.out" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$fport") 2>/dev/null && break
        sleep 0.1
    done
    echo "floor: nghttpd on CPU 0, port $fport, a 60-byte file per call; the same h2load on CPU 1"
    load "$pid" "http://127.0.0.1:$fport/r" "$tmp/floor.log"
elif [ "${SLUICE_H2LOAD_FLOOR:-on}" != off ]; then
    echo "floor: skipped (no nghttpd: apt-get install nghttp2-server)"
fi
