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
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
c0=$(cpu)
rps=()
[ -n "$rate" ] && rps=(--rps=$((rate / 4)))
taskset -c 1 h2load -n "$n" -c 4 -m 50 "${rps[@]}" --log-file="$tmp/log" -d "$tmp/req.bin" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://127.0.0.1:$port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" |
    grep -E "finished in|requests:|status codes|time for request|req/s"
c1=$(cpu)
# The log: start (us since the epoch), status, duration (us).
sort -n -k3,3 "$tmp/log" | awk '{ d[NR] = $3 } END {
    printf "latency: p50 %d us, p99 %d us, p99.9 %d us, max %d us (%d calls)\n",
        d[int(NR * 0.5)], d[int(NR * 0.99)], d[int(NR * 0.999)], d[NR], NR }'
hz=$(getconf CLK_TCK)
awk -v n="$n" -v t=$((c1 - c0)) -v hz="$hz" \
    'BEGIN { printf "server CPU: %.2f s for %d calls = %.0f calls per CPU-second\n", t / hz, n, n * hz / (t ? t : 1) }'
