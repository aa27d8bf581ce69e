#!/usr/bin/env bash
# redis_cluster.sh -- sluice-rls's Redis backend on a Redis Cluster: three
# masters on loopback, started and stopped by tests/redis/cluster_harness.sh
# (the one place that runs cluster nodes), then test_grpc.py's
# RedisClusterTest against them (two sluice-rls processes, REDIS_TYPE=cluster).
#
#   tests/rls/redis_cluster.sh BUILD/sluice-rls PROTO_DIR [PYTHON]
#
# Exit 77 when redis-server or redis-cli is missing.
set -uo pipefail
usage="usage: redis_cluster.sh SLUICE_RLS PROTO_DIR [PYTHON]"
bin=${1:?$usage}
proto=${2:?$usage}
python=${3:-python3}
redis_server=$(command -v redis-server) || { echo "redis-server not found: skipped"; exit 77; }
redis_cli=$(command -v redis-cli) || { echo "redis-cli not found: skipped"; exit 77; }
node_args=()
# shellcheck source=tests/redis/cluster_harness.sh
. "$(dirname "$0")/../redis/cluster_harness.sh"
cluster_start 3 0
SLUICE_RLS_TEST_REDIS=1 SLUICE_RLS_TEST_CLUSTER="${ports[*]}" \
    "$python" "$(dirname "$0")/test_grpc.py" "$bin" "$proto" RedisClusterTest
