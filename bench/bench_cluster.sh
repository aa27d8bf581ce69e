#!/usr/bin/env bash
# bench_cluster.sh -- the Redis tiers on Redis Cluster, and the module
# against the Lua scripts: the figures of docs/redis.md ("Benchmarks
# on Redis Cluster"), as markdown tables with the commands that
# made them.
#
#   bench/bench_cluster.sh [--build DIR] [--seconds S] [--procs P] [-n N]
#
# Self-contained: it starts and stops every server itself, on free
# loopback ports (tests/redis/cluster_harness.sh, the cluster tests' own
# harness), with sluice.so loaded on each node.
#   1. the module against the Lua script on one server, 1 and 50
#      connections: build/bench/bench_redis_module -n N (redis-benchmark);
#   2. cluster throughput at 1 master (a one-node cluster owning every
#      slot) and at 3 masters (no replicas): P `sluice hammer --tier
#      global` processes (2 threads each, 10^4 keys, exact: one round trip
#      per decision) pointed at one node; and `redis-benchmark --cluster`
#      sending SLUICE.ACQUIRE on random keys (50 connections);
#   3. the two-tier mode (`--tier both`, leases) against the 3-master
#      cluster, on 1 key and on 100 keys, beside the exact mode.
# Each row gives decisions per second summed over the processes, and the
# ratios (3 masters / 1 master; two tiers / exact) are printed under the
# tables.  Defaults are short (S = 3 s, P = 4, N = 50000) for a shared
# machine: the figures are then preliminary, to be rerun on a quiet one.
set -uo pipefail

build=build
secs=3
procs=4
n=50000
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    *) echo "usage: bench_cluster.sh [--build DIR] [--seconds S] [--procs P] [-n N]" >&2; exit 2 ;;
    esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd) || exit 1
sluice=$build/sluice
module=$build/sluice.so
redis_server=${SLUICE_REDIS_SERVER:-redis-server}
redis_cli=${SLUICE_REDIS_CLI:-redis-cli}
redis_benchmark=${SLUICE_REDIS_BENCHMARK:-redis-benchmark}
for f in "$sluice" "$module" "$build/bench/bench_redis_module"; do
    [ -e "$f" ] || { echo "bench_cluster: $f not built (cmake --build $build)" >&2; exit 1; }
done
for b in "$redis_server" "$redis_cli" "$redis_benchmark"; do
    command -v "$b" >/dev/null 2>&1 || { echo "bench_cluster: $b not found" >&2; exit 1; }
done
node_args=(--loadmodule "$module")
# shellcheck source=tests/redis/cluster_harness.sh
. "$root/tests/redis/cluster_harness.sh"

field() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }
echo "# bench_cluster.sh: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$redis_server" --version | cut -d' ' -f3), --seconds $secs --procs $procs -n $n"
echo

# ---- 1. module vs Lua, one server -----------------------------------------------------
echo "## 1. The module against the Lua script, one server"
echo
echo "    $build/bench/bench_redis_module -n $n --module $module"
echo
"$build/bench/bench_redis_module" -n "$n" --module "$module"
echo

# ---- 2 and 3: hammers against a cluster -------------------------------------------------
# hammer NAME ARGS..: $procs processes at once; sets dps (sum of
# decisions/s), allowed, errs, rts (round trips), p50, p99 (the worst
# process's)
hammer() {
    local name=$1 i line
    shift
    local -a hp
    for i in $(seq 1 "$procs"); do
        "$sluice" hammer "$@" >"$tmp/$name.$i" 2>&1 &
        hp[i]=$!
    done
    dps=0 allowed=0 errs=0 rts=0 p50=0 p99=0
    for i in $(seq 1 "$procs"); do
        wait "${hp[i]}"
        line=$(tail -n 1 "$tmp/$name.$i")
        dps=$(awk -v a="$dps" -v b="$(field decisions_per_sec "$line")" 'BEGIN { printf "%.0f", a + b }')
        allowed=$((allowed + $(field allowed "$line")))
        errs=$((errs + $(field errors "$line")))
        rts=$((rts + $(field round_trips "$line")))
        local a b
        a=$(field p50_ns "$line") b=$(field p99_ns "$line")
        [ "${a:-0}" -gt "$p50" ] && p50=$a
        [ "${b:-0}" -gt "$p99" ] && p99=$b
    done
}
row() { printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$@"; }
# rb PORT MASTERS: redis-benchmark, SLUICE.ACQUIRE on random keys; requests/s.
# --cluster (which routes by the {tag} it fills in) needs 3 or more masters;
# a one-node cluster owns every slot, so plain redis-benchmark is the same
# client there.
rb() {
    local -a mode=(--cluster)
    local key='k:{tag}:__rand_int__'
    [ "$2" -eq 1 ] && mode=() key='k:__rand_int__'
    "$redis_benchmark" -h 127.0.0.1 -p "$1" ${mode[@]+"${mode[@]}"} -n "$n" -c 50 -r 100000 --csv \
        SLUICE.ACQUIRE "$key" 'token-bucket 1000000000/s' 2>/dev/null |
        awk -F'"' '/^"SLUICE/ { print $4 }'
}
# calls: "CALLS FAILED" of SLUICE.ACQUIRE summed over the live nodes (INFO
# commandstats; failed = failed_calls + rejected_calls)
calls() {
    local i
    for i in "${!ports[@]}"; do cli "${ports[i]}" info commandstats; done | tr ',=:' '   ' |
        awk '$1 == "cmdstat_sluice.acquire" { c += $3; f += $9 + $11 } END { print c + 0, f + 0 }'
}

exact=(--limit 'token-bucket 1000000000/s' --tier global --threads 2 --keys 10000
    --duration "${secs}s" --timeout 1000 --prefix bench:)
declare -A res=()
echo "## 2. Cluster throughput: 1 and 3 masters"
echo
echo "    sluice hammer --redis redis://127.0.0.1:PORT ${exact[*]}     # x $procs processes"
echo "    redis-benchmark -p PORT [--cluster] -n $n -c 50 -r 100000 SLUICE.ACQUIRE 'k:{tag}:__rand_int__' 'token-bucket 1000000000/s'   # 1 master: no --cluster, k:__rand_int__"
echo
row "masters" "client" "processes x threads" "keys" "decisions/s" "p50 us (worst)" "p99 us (worst)" "errors"
row "---:" "---" "---:" "---:" "---:" "---:" "---:" "---:"
for m in 1 3; do
    cluster_start "$m" 0
    seed=${ports[0]}
    hammer exact$m --redis "redis://127.0.0.1:$seed" "${exact[@]}"
    res[exact$m]=$dps
    row "$m" "sluice hammer --tier global" "$procs x 2" 10000 "$dps" "$((p50 / 1000))" "$((p99 / 1000))" "$errs"
    for i in "${!ports[@]}"; do cli "${ports[i]}" config resetstat >/dev/null; done
    r=$(rb "$seed" "$m")
    res[rb$m]=${r:-0}
    read -r nc nf <<<"$(calls)"
    row "$m" "redis-benchmark$([ "$m" -gt 1 ] && echo " --cluster"), SLUICE.ACQUIRE ($nc calls)" "1 x 50 conns" 100000 "${r:-failed}" "" "" "$nf"
    if [ "$m" -eq 3 ]; then
        # ---- 3. two tiers on the 3-master cluster ----
        both1=(--limit 'token-bucket 100000/s burst=1000' --tier both --threads 2 --keys 1
            --processes "$procs" --duration "${secs}s" --timeout 1000 --prefix two1:)
        bothk=(--limit 'token-bucket 100000/s burst=1000' --tier both --threads 2 --keys 100
            --processes "$procs" --duration "${secs}s" --timeout 1000 --prefix twok:)
        glob1=(--limit 'token-bucket 100000/s burst=1000' --tier global --threads 2 --keys 1
            --duration "${secs}s" --timeout 1000 --prefix glob1:)
        globk=(--limit 'token-bucket 100000/s burst=1000' --tier global --threads 2 --keys 100
            --duration "${secs}s" --timeout 1000 --prefix globk:)
        hammer glob1 --redis "redis://127.0.0.1:$seed" "${glob1[@]}"
        g1=$dps g1a=$allowed g1r=$rts g1e=$errs
        hammer both1 --redis "redis://127.0.0.1:$seed" "${both1[@]}"
        b1=$dps b1a=$allowed b1r=$rts b1e=$errs
        hammer globk --redis "redis://127.0.0.1:$seed" "${globk[@]}"
        gk=$dps gka=$allowed gkr=$rts gke=$errs
        hammer bothk --redis "redis://127.0.0.1:$seed" "${bothk[@]}"
        bk=$dps bka=$allowed bkr=$rts bke=$errs
    fi
    cluster_stop
done
echo
awk -v a="${res[exact1]}" -v b="${res[exact3]}" -v c="${res[rb1]}" -v d="${res[rb3]}" 'BEGIN {
    printf "3 masters / 1 master: sluice hammer %.2fx, redis-benchmark %.2fx\n", (a > 0 ? b / a : 0), (c > 0 ? d / c : 0) }'
echo
echo "## 3. Two tiers (leases) against the 3-master cluster"
echo
echo "    sluice hammer --redis redis://127.0.0.1:PORT ${glob1[*]}     # x $procs"
echo "    sluice hammer --redis redis://127.0.0.1:PORT ${both1[*]}     # x $procs"
echo "    sluice hammer --redis redis://127.0.0.1:PORT ${globk[*]}     # x $procs"
echo "    sluice hammer --redis redis://127.0.0.1:PORT ${bothk[*]}     # x $procs"
echo
row "mode" "limit" "keys" "decisions/s" "allowed" "round trips" "errors" "allowed per round trip"
row "---" "---" "---:" "---:" "---:" "---:" "---:" "---:"
per() { awk -v a="$1" -v r="$2" 'BEGIN { printf "%.1f", (r > 0 ? a / r : 0) }'; }
row "global (exact)" "token-bucket 100000/s burst=1000" 1 "$g1" "$g1a" "$g1r" "$g1e" "$(per "$g1a" "$g1r")"
row "both (leases)" "token-bucket 100000/s burst=1000" 1 "$b1" "$b1a" "$b1r" "$b1e" "$(per "$b1a" "$b1r")"
row "global (exact)" "token-bucket 100000/s burst=1000" 100 "$gk" "$gka" "$gkr" "$gke" "$(per "$gka" "$gkr")"
row "both (leases)" "token-bucket 100000/s burst=1000" 100 "$bk" "$bka" "$bkr" "$bke" "$(per "$bka" "$bkr")"
echo
limit1=$(awk -v s="$secs" 'BEGIN { printf "%.0f", 1000 + 100000 * (s + 1) }')
awk -v b="$b1" -v g="$g1" -v k="$bk" -v e="$gk" 'BEGIN {
    printf "two tiers / exact on the cluster: %.1fx (1 key), %.1fx (100 keys)\n", (g > 0 ? b / g : 0), (e > 0 ? k / e : 0) }'
echo "one key, two tiers: allowed $b1a of at most $limit1 (burst + rate x (seconds + 1)) plus the documented lease bound"
