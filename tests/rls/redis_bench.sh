#!/usr/bin/env bash
# redis_bench.sh -- sluice-rls's Redis backend on one hot key, in one run:
# one Redis round trip per call (SLUICE_RLS_REDIS_LEASE_MAX=0) against the
# two-tier mode (leases), on the same redis-server, with h2load.
#
#   tests/rls/redis_bench.sh BUILD/sluice-rls [N] [LIMIT] [LEASE_MAX] [WORKERS]
#
# A redis-server on a free loopback port; for each mode a sluice-rls with
# WORKERS workers (default 1) pinned to CPU 0 (taskset), h2load on CPU 1
# (-c 4 -m 50, N calls, default 200000) on one descriptor value, whose
# limit is LIMIT a year (default 100000, so that the limit is reached and
# the calls past it are refused).  Prints per mode the calls per second,
# the server's CPU time, the admitted count (the server's
# sluice_rls_rule_decisions_total{decision="allowed"}) against LIMIT, and
# the Redis round trips (INFO commandstats).  Then the floor, in the same
# run: the same server and load with no Redis at all (the in-process table,
# "local"), which no mode that asks Redis can pass -- leases at their best
# decide as it does.  Not a ctest: a measurement (docs/rls.md, "Redis").
set -euo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
n=${2:-200000}
limit=${3:-100000}
lease=${4:-1000}
workers=${5:-1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
proto=$here/../../server/rls/proto
tmp=$(mktemp -d)
pid=
rpid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [ -n "$rpid" ] && kill -TERM "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
taskset -c 1 redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
    > "$tmp/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 100); do
    redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
done
mkdir -p "$tmp/rt/ratelimit/config" "$tmp/py"
cat > "$tmp/rt/ratelimit/config/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: a
    rate_limit: {unit: year, requests_per_unit: $limit}
EOF
(cd "$proto" && protoc -I. --python_out="$tmp/py" envoy/service/ratelimit/v3/rls.proto \
    envoy/extensions/common/ratelimit/v3/ratelimit.proto envoy/config/core/v3/base.proto)
/usr/bin/python3 - "$tmp/py" "$tmp/req.bin" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from envoy.service.ratelimit.v3 import rls_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2 as r
req = rls_pb2.RateLimitRequest(domain="bench", descriptors=[
    r.RateLimitDescriptor(entries=[r.RateLimitDescriptor.Entry(key="a", value="hot")])])
m = req.SerializeToString()
open(sys.argv[2], "wb").write(b"\0" + len(m).to_bytes(4, "big") + m)
EOF
hz=$(getconf CLK_TCK)
for mode in roundtrip lease local; do
    lm=0
    [ "$mode" = lease ] && lm=$lease
    redis=(REDIS_URL=127.0.0.1:$rport SLUICE_RLS_REDIS_LEASE_MAX=$lm SLUICE_RLS_REDIS_TIMEOUT_MS=1000)
    [ "$mode" = local ] && redis=()
    redis-cli -p "$rport" flushall > /dev/null
    redis-cli -p "$rport" config resetstat > /dev/null
    env RUNTIME_ROOT=$tmp/rt GRPC_HOST=127.0.0.1 GRPC_PORT=0 HOST=127.0.0.1 PORT=0 SLUICE_RLS_WORKERS=$workers \
        SLUICE_RLS_HEADERS=off "${redis[@]}" taskset -c 0 "$bin" > "$tmp/out" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        grep -q "listening on" "$tmp/out" && break
        sleep 0.1
    done
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\) .*/\1/p' "$tmp/out")
    hport=$(sed -n 's/.*, http \([0-9]*\)$/\1/p' "$tmp/out")
    [ -n "$port" ] || { cat "$tmp/out"; exit 1; }
    c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    what="SLUICE_RLS_REDIS_LEASE_MAX=$lm"
    [ "$mode" = local ] && what="no Redis: the floor"
    echo "== $mode ($what): $n calls, limit $limit a year, $workers worker(s) on CPU 0"
    taskset -c 1 h2load -n "$n" -c 4 -m 50 -d "$tmp/req.bin" -H 'content-type: application/grpc' \
        -H 'te: trailers' "http://127.0.0.1:$port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" |
        grep -E "finished in|requests:|status codes"
    c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    allowed=$(curl -s "127.0.0.1:$hport/metrics" |
        sed -n 's/^sluice_rls_rule_decisions_total{.*decision="allowed"} \([0-9]*\)$/\1/p')
    denied=$(curl -s "127.0.0.1:$hport/metrics" |
        sed -n 's/^sluice_rls_rule_decisions_total{.*decision="denied"} \([0-9]*\)$/\1/p')
    trips=$(redis-cli -p "$rport" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
    awk -v t=$((c1 - c0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "server CPU: %.2f s = %.0f calls per CPU-second\n", t / hz, n * hz / (t ? t : 1) }'
    echo "admitted $allowed, refused $denied, limit $limit; Redis EVALSHA calls: ${trips:-0}"
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
done
