# shellcheck shell=bash disable=SC2154  # redis_server, redis_cli, node_args: set by the caller
# cluster_harness.sh -- a Redis Cluster on loopback, for the scripts that
# source it (tests/redis/test_cluster.sh, bench/bench_cluster.sh): the one
# place that starts and stops cluster nodes.
#
# Set before sourcing: redis_server, redis_cli (the programs); optionally
# node_args (an array of extra redis-server arguments for every node, e.g.
# --loadmodule build/sluice.so).  It makes a temporary directory $tmp and
# removes it, with every node it started (SIGKILL), on exit (trap).
#
#   cluster_start MASTERS REPLICAS_PER_MASTER
#       MASTERS * (1 + REPLICAS) nodes, `redis-server --cluster-enabled yes`
#       on free loopback ports (each in its own directory under $tmp,
#       cluster-node-timeout 1000 ms, no persistence), joined by
#       `redis-cli --cluster create` (3 or more masters) or, for 1 master
#       and no replica, by CLUSTER ADDSLOTSRANGE 0 16383; then waits
#       (bounded) for cluster_state:ok and the replicas' links.  Fills
#       ports[] and pids[]; exits with a message on failure.
#   wait_ok TENTHS      every live node ok, every live replica linked
#   cluster_stop        kill every node (the trap does it too)
# and small helpers: cli PORT ARGS.., alive PID, any_live, pid_of_port,
# node_id, role_of, owner_of_slot SLOT PORT, masters_of PORT,
# master_with_replica PORT [EXCEPT].
# Every wait is bounded.

tmp=$(mktemp -d)
ports=()
pids=()
cluster_stop() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    ports=()
    pids=()
}
cluster_cleanup() {
    cluster_stop
    rm -rf "$tmp"
}
trap cluster_cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
cli() { local p=$1; shift; timeout 10 "$redis_cli" -h 127.0.0.1 -p "$p" ${REDISCLI_AUTH:+--no-auth-warning} "$@"; }
alive() { kill -0 "$1" 2>/dev/null; }

# A node's port P and its cluster bus port P+10000 must both be free.
start_node() {
    local port
    for _ in $(seq 1 20); do
        port=$((20000 + RANDOM % 30000))
        port_free "$port" && port_free $((port + 10000)) || continue
        mkdir -p "$tmp/n$port"
        (cd "$tmp/n$port" && exec "$redis_server" --port "$port" --bind 127.0.0.1 \
            --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
            --save "" --appendonly no --dir "$tmp/n$port" --daemonize no \
            --loglevel warning --logfile "$tmp/n$port/log" ${node_args[@]+"${node_args[@]}"}) &
        local pid=$!
        for _ in $(seq 1 100); do # at most 10 s
            if [ "$(cli "$port" ping 2>/dev/null)" = PONG ]; then
                ports+=("$port")
                pids+=("$pid")
                return 0
            fi
            alive "$pid" || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    echo "cluster_harness: could not start $redis_server ${node_args[*]+${node_args[*]}}" >&2
    cat "$tmp/n$port/log" >&2 2>/dev/null
    exit 1
}

# every live node says cluster_state:ok and every live replica's link is up
# (at most $1 tenths of a second)
wait_ok() {
    local tries=$1
    for _ in $(seq 1 "$tries"); do
        local good=1
        for i in "${!ports[@]}"; do
            alive "${pids[i]}" || continue
            cli "${ports[i]}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || { good=0; break; }
            local rep
            rep=$(cli "${ports[i]}" info replication 2>/dev/null)
            if grep -q '^role:slave' <<<"$rep"; then
                grep -q '^master_link_status:up' <<<"$rep" || { good=0; break; }
            fi
        done
        [ $good -eq 1 ] && return 0
        sleep 0.1
    done
    return 1
}

cluster_start() {
    local nm=$1 nr=$2 n i
    n=$((nm * (1 + nr)))
    for i in $(seq 1 "$n"); do start_node; done
    if [ "$nm" -eq 1 ] && [ "$nr" -eq 0 ]; then
        cli "${ports[0]}" cluster addslotsrange 0 16383 >"$tmp/create.log" 2>&1 ||
            { cat "$tmp/create.log"; echo "cluster_harness: ADDSLOTSRANGE failed" >&2; exit 1; }
    else
        local addrs=()
        for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
        if ! timeout 60 "$redis_cli" --cluster create "${addrs[@]}" --cluster-replicas "$nr" \
            --cluster-yes >"$tmp/create.log" 2>&1; then
            cat "$tmp/create.log"
            echo "cluster_harness: redis-cli --cluster create failed" >&2
            exit 1
        fi
    fi
    wait_ok 600 || { echo "cluster_harness: no cluster_state:ok within 60 s" >&2; exit 1; }
}

# the port of the master serving slot $1, asked of live node $2
owner_of_slot() {
    cli "$2" cluster slots | awk -v s="$1" '
        { a[NR] = $0 }
        END {
            # CLUSTER SLOTS, one value a line: lo, hi, master host, port, id, ...
            for (i = 1; i <= NR; i++)
                if (a[i] ~ /^[0-9]+$/ && a[i+1] ~ /^[0-9]+$/ && a[i+2] ~ /\./ && a[i] + 0 <= s && s <= a[i+1] + 0) {
                    print a[i+3]; exit
                }
        }'
}

# the ports of the masters serving slots, asked of live node $1
masters_of() {
    cli "$1" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8 { split($2, a, "[:@]"); print a[2] }'
}

# a live node's port
any_live() { for i in "${!ports[@]}"; do alive "${pids[i]}" && { echo "${ports[i]}"; return; }; done; }
pid_of_port() { for i in "${!ports[@]}"; do [ "${ports[i]}" = "$1" ] && echo "${pids[i]}"; done; }
node_id() { cli "$1" cluster myid; }
role_of() { cli "$1" role | head -n 1; }

# a master (asked of live node $1), other than $2, with a live replica:
# "MASTERPORT REPLICAPORT", or nothing
master_with_replica() {
    local m id r
    for m in $(masters_of "$1"); do
        [ "$m" = "${2:-}" ] && continue
        id=$(node_id "$m")
        r=$(cli "$1" cluster nodes | awk -v id="$id" '$4 == id && $3 ~ /slave/ && $3 !~ /fail/ { split($2, a, "[:@]"); print a[2]; exit }')
        [ -n "$r" ] && { echo "$m $r"; return; }
    done
}
