#!/usr/bin/env bash
# bench/peers/run.sh -- sluice side by side with its peers, in one table.
#
#   Guava      RateLimiter.tryAcquire()            (GuavaBench.java)
#   xrate      golang.org/x/time/rate Limiter.Allow()  (xrate/main.go)
#   redis-lua  a GCRA token bucket in Lua, EVALSHA on a local redis-server
#              (bucket.lua, driven by redis_bench.c over hiredis)
#   sluice     sluice_try_acquire() on a token bucket  (sluice_peer.c), and
#              the same with clock=coarse when this build accepts that option
#
# each with 1 and 2 threads on one limiter (Redis: 1 and 50 connections on
# one key), on the allowed path and on the denied path.  See docs/peers.md.
#
# Usage: bench/peers/run.sh [--build DIR] [--rounds N] [--reps N] [--ms MS]
#                           [--out FILE] [--no-install]
#
#   --build DIR   a sluice build directory holding libsluice.a (used as it
#                 is); without it, ./build is configured if needed and built
#   --rounds N    rounds (default 7): every harness runs once per round, so a
#                 slow spell of the machine hits every peer alike
#   --reps N      timed repetitions of every scenario per round (default 3)
#   --ms MS       length of one repetition (default 200)
#   --out FILE    also write the table there (default bench/peers/results.md)
#   --no-install  do not run apt-get; fail when something is missing
#
# The medians are over rounds x reps samples.  Installs what it needs from
# Debian with apt-get (as root, or through sudo).  Only loopback networking:
# redis-server binds 127.0.0.1 on a free port and is stopped at exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/bench/peers"
BUILD="$ROOT/build"
BUILD_GIVEN=0
ROUNDS=7
REPS=3
MS=200
OUT="$HERE/results.md"
INSTALL=1
GUAVA_WARMUP_MS=2000
CONNS=50
STEP_TIMEOUT=180 # seconds, a bound on any one harness run

say() { printf 'peers: %s\n' "$*" >&2; }
die() { printf 'peers: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '14,28p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
num() { if ! [[ "$2" =~ ^[0-9]+$ ]] || (( $2 < $3 || $2 > $4 )); then die "$1 wants a number in $3..$4"; fi; }

while (($#)); do
    case "$1" in
    --build) [[ $# -ge 2 ]] || usage; BUILD=$(cd "$2" 2>/dev/null && pwd) || die "no directory $2"; BUILD_GIVEN=1; shift ;;
    --rounds) [[ $# -ge 2 ]] || usage; num --rounds "$2" 1 21; ROUNDS=$2; shift ;;
    --reps) [[ $# -ge 2 ]] || usage; num --reps "$2" 1 21; REPS=$2; shift ;;
    --ms) [[ $# -ge 2 ]] || usage; num --ms "$2" 10 2000; MS=$2; shift ;;
    --out) [[ $# -ge 2 ]] || usage; OUT=$2; shift ;;
    --no-install) INSTALL=0 ;;
    -h | --help) usage 0 ;;
    *) say "unknown argument: $1"; usage ;;
    esac
    shift
done

# ---------------------------------------------------------------- cleanup
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-peers.XXXXXX")
REDIS_PID=""
cleanup() {
    if [[ -n "$REDIS_PID" ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill "$REDIS_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- install
java_major() { javac -version 2>&1 | sed -n 's/^javac \([0-9][0-9]*\).*/\1/p' | head -1; }
need=()
jmajor=$(java_major 2>/dev/null || true)
if ! command -v javac >/dev/null || ! command -v java >/dev/null || (( ${jmajor:-0} < 11 )); then
    need+=(default-jdk-headless)
fi
[[ -f /usr/share/java/guava.jar ]] || need+=(libguava-java)
command -v go >/dev/null || need+=(golang-go)
[[ -f /usr/share/gocode/src/golang.org/x/time/rate/rate.go ]] || need+=(golang-golang-x-time-dev)
command -v redis-server >/dev/null || need+=(redis-server)
{ command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null; } || need+=(redis-tools)
[[ -f /usr/include/hiredis/hiredis.h ]] || need+=(libhiredis-dev)
command -v cc >/dev/null || need+=(gcc)
if ((BUILD_GIVEN == 0)); then
    command -v cmake >/dev/null || need+=(cmake)
    command -v make >/dev/null || need+=(make)
fi
if ((${#need[@]})); then
    ((INSTALL)) || die "missing Debian packages: ${need[*]} (run without --no-install)"
    SUDO=()
    if [[ $(id -u) != 0 ]]; then
        command -v sudo >/dev/null || die "not root and no sudo: install ${need[*]}"
        SUDO=(sudo)
    fi
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${SUDO[@]}" apt-get install -y -q "${need[@]}" >"$TMP/apt.log" 2>&1; then
        say "apt-get install failed; running apt-get update and trying again"
        "${SUDO[@]}" apt-get update -q >>"$TMP/apt.log" 2>&1 || true
        "${SUDO[@]}" apt-get install -y -q "${need[@]}" >>"$TMP/apt.log" 2>&1 ||
            { tail -20 "$TMP/apt.log" >&2; die "apt-get install ${need[*]} failed"; }
    fi
fi

# ---------------------------------------------------------------- sluice
if ((BUILD_GIVEN == 0)); then
    say "building sluice in $BUILD"
    if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
        cmake -S "$ROOT" -B "$BUILD" >"$TMP/cmake.log" 2>&1 || { tail -20 "$TMP/cmake.log" >&2; die "cmake configure failed"; }
    fi
    cmake --build "$BUILD" -j2 --target sluice_static sluice >"$TMP/build.log" 2>&1 ||
        { tail -20 "$TMP/build.log" >&2; die "building sluice failed"; }
fi
[[ -f "$BUILD/libsluice.a" ]] || die "$BUILD/libsluice.a not found (build sluice first, or drop --build)"

# ---------------------------------------------------------------- compile the harnesses
say "compiling the harnesses"
cc -std=c11 -O2 -Wall -Wextra -I"$ROOT/include" "$HERE/sluice_peer.c" "$BUILD/libsluice.a" \
    -lpthread -lm -o "$TMP/sluice_peer"
cc -std=c11 -O2 -Wall -Wextra "$HERE/redis_bench.c" -lhiredis -o "$TMP/redis_bench"

mkdir -p "$TMP/java"
javac -nowarn -d "$TMP/java" -cp /usr/share/java/guava.jar "$HERE/GuavaBench.java"
GUAVA_CP="$TMP/java:/usr/share/java/guava.jar"

XTIME=/usr/share/gocode/src/golang.org/x/time
mkdir -p "$TMP/go/mod" "$TMP/go/home" "$TMP/go/cache" "$TMP/go/path"
cp "$HERE/xrate/main.go" "$TMP/go/mod/"
cat >"$TMP/go/mod/go.mod" <<EOF
module sluicepeers/xrate

go 1.18

require golang.org/x/time v0.0.0-00010101000000-000000000000

replace golang.org/x/time => $XTIME
EOF
(cd "$TMP/go/mod" && env HOME="$TMP/go/home" GOCACHE="$TMP/go/cache" GOPATH="$TMP/go/path" \
    GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local GO111MODULE=on GOSUMDB=off \
    go build -o "$TMP/xrate" . ) >"$TMP/go.log" 2>&1 || { cat "$TMP/go.log" >&2; die "go build failed"; }

# ---------------------------------------------------------------- clock=coarse?
COARSE=0
if [[ -x "$BUILD/sluice" ]]; then
    "$BUILD/sluice" spec 'token-bucket 100/s clock=coarse' >/dev/null 2>&1 && COARSE=1
else
    "$TMP/sluice_peer" --probe 'token-bucket 100/s clock=coarse' && COARSE=1
fi
if ((COARSE)); then say "clock=coarse is accepted: measuring it too"
else say "clock=coarse is not accepted by this build: its rows are n/a"; fi

# ---------------------------------------------------------------- redis-server
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
start_redis() {
    local try p
    for try in 1 2 3 4 5; do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        port_free "$p" || continue
        redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
        REDIS_PID=$!
        for _ in $(seq 1 100); do
            if [[ $(redis-cli -h 127.0.0.1 -p "$p" PING 2>/dev/null) == PONG ]]; then
                REDIS_PORT=$p
                return 0
            fi
            kill -0 "$REDIS_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
        REDIS_PID=""
        say "redis-server did not come up on port $p (try $try)"
    done
    cat "$TMP/redis.log" >&2
    die "could not start redis-server"
}
start_redis
SHA=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$HERE/bucket.lua")")
[[ "$SHA" =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD failed: $SHA"
say "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$REDIS_PORT, script $SHA"

# ---------------------------------------------------------------- measure
SAMPLES="$TMP/samples"
: >"$SAMPLES"
run_step() { # name, command...
    local name=$1; shift
    if ! timeout "$STEP_TIMEOUT" "$@" >"$TMP/step.out" 2>"$TMP/step.err"; then
        cat "$TMP/step.err" >&2
        die "$name failed or timed out"
    fi
    grep '^sample ' "$TMP/step.out" >>"$SAMPLES" || die "$name printed no samples"
}
coarse_arg=()
((COARSE)) && coarse_arg=(--coarse)
# How busy the machine was with other work while we measured: all busy CPU
# time (/proc/stat) less our own (this shell, its waited-for children and
# redis-server), in cores; and the hypervisor's steal time.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $9 }' /proc/stat; }
own_ticks() {
    local self redis=0
    self=$(sed 's/^.*) //' "/proc/$$/stat" | awk '{ print $12 + $13 + $14 + $15 }')
    [[ -r "/proc/$REDIS_PID/stat" ]] && redis=$(sed 's/^.*) //' "/proc/$REDIS_PID/stat" | awk '{ print $12 + $13 }')
    echo $((self + redis))
}
read -r busy0 steal0 < <(cpu_ticks)
own0=$(own_ticks)
ns0=$(date +%s%N)
load0=$(cut -d' ' -f1 /proc/loadavg)
t_start=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
    say "round $r/$ROUNDS"
    run_step sluice_peer "$TMP/sluice_peer" --reps "$REPS" --ms "$MS" "${coarse_arg[@]}"
    run_step GuavaBench java -Xms64m -Xmx256m -cp "$GUAVA_CP" GuavaBench \
        --reps "$REPS" --ms "$MS" --warmup-ms "$GUAVA_WARMUP_MS"
    run_step xrate env GOMAXPROCS=2 "$TMP/xrate" -reps "$REPS" -ms "$MS" -warmup-ms 100
    run_step redis_bench "$TMP/redis_bench" --port "$REDIS_PORT" --sha "$SHA" \
        --reps "$REPS" --ms "$MS" --conns "$CONNS"
done
read -r busy1 steal1 < <(cpu_ticks)
own1=$(own_ticks)
ns1=$(date +%s%N)
load1=$(cut -d' ' -f1 /proc/loadavg)
hz=$(getconf CLK_TCK)
OTHERS=$(awk -v b="$((busy1 - busy0))" -v o="$((own1 - own0))" -v ns="$((ns1 - ns0))" -v hz="$hz" \
    'BEGIN { x = (b - o) / hz / (ns / 1e9); if (x < 0) x = 0; printf "%.2f", x }')
STEAL=$(awk -v s="$((steal1 - steal0))" -v ns="$((ns1 - ns0))" -v hz="$hz" -v n="$(nproc)" \
    'BEGIN { printf "%.1f", 100 * s / hz / (ns / 1e9) / n }')

# redis-benchmark as a cross-check of the Redis client (allowed path).
rb_rps() { # connections, requests
    timeout 120 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$1" -n "$2" --csv \
        EVALSHA "$SHA" 1 "sluice-peers:rb:$1:$RANDOM" 1 1000000000 2>/dev/null |
        awk -F'"' 'NR == 2 { printf "%.0f", $4 }'
}
RB1=$(rb_rps 1 20000 || true)
RB50=$(rb_rps "$CONNS" 100000 || true)
t_end=$(date +%s)

# ---------------------------------------------------------------- the table
# medians: peer threads path median q1 q3 n wrong
sort -k2,2 -k3,3n -k4,4 -k5,5g "$SAMPLES" | awk '
function flush() {
    if (n == 0) return
    m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    q = int(n / 4) # the quartiles, as order statistics: v[q + 1] and v[n - q]
    printf "%s %s %s %.3f %.3f %.3f %d %d\n", key1, key2, key3, m, v[q + 1], v[n - q], n, wrong
    n = 0; wrong = 0
}
{
    k = $2 " " $3 " " $4
    if (k != cur) { flush(); cur = k; key1 = $2; key2 = $3; key3 = $4 }
    v[++n] = $5
    if ($4 == "allowed" && $8 > 0) wrong++
    if ($4 == "denied" && $7 > 0) wrong++
}
END { flush() }' >"$TMP/medians"

cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[^=]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
sanitize=$(sed -n 's/^SLUICE_SANITIZE:[^=]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
[[ -n "$sanitize" ]] && build_type="${build_type:-?}, SANITIZED with $sanitize: not a fair measurement"

awk -v coarse="$COARSE" -v conns="$CONNS" -v rb1="$RB1" -v rb50="$RB50" \
    -v nproc="$(nproc)" -v cpu="$cpu_model" -v rounds="$ROUNDS" -v reps="$REPS" -v ms="$MS" \
    -v when="$(date -u '+%Y-%m-%d %H:%M UTC')" -v secs="$((t_end - t_start))" \
    -v jver="$(java -version 2>&1 | head -1 | sed 's/"//g')" -v gver="$(go version | awk '{print $3}')" \
    -v guava="$(ver libguava-java)" -v xtime="$(ver golang-golang-x-time-dev)" \
    -v redis="$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')" -v hiredis="$(ver libhiredis-dev)" \
    -v btype="${build_type:-?}" -v kernel="$(uname -r)" \
    -v others="$OTHERS" -v steal="$STEAL" -v load0="$load0" -v load1="$load1" '
function key(p, t, a) { return p " " t " " a }
function fmt_ns(x) { return x >= 1000 ? sprintf("%.0f", x) : sprintf("%.1f", x) }
function fmt_rate(x) {
    if (x >= 1e6) return sprintf("%.2f M", x / 1e6)
    if (x >= 1e3) return sprintf("%.1f k", x / 1e3)
    return sprintf("%.0f", x)
}
function ratio(x) { return x >= 100 ? sprintf("%.0f×", x) : x >= 10 ? sprintf("%.1f×", x) : sprintf("%.2f×", x) }
# The sluice scenario a peer row is compared with: Redis connections map to
# sluice threads (1 -> 1, many -> 2, all this machine has).
function sl_threads(p, t) { return (p == "redis-lua" && t > 1) ? 2 : t }
function row(p, label, t, a,    k, s, c, x) {
    k = key(p, t, a)
    if (!(k in med)) {
        if (p == "sluice-coarse")
            printf "| %s | %s | %s | n/a | n/a | n/a | n/a | clock=coarse not accepted by this build |\n", label, t, a
        return
    }
    s = key("sluice", sl_threads(p, t), a)
    c = key("sluice-coarse", sl_threads(p, t), a)
    printf "| %s | %s | %s | %s | %s | %s | %s | %.0f%%, %d%s |\n", label, t, a,
        fmt_ns(med[k]), fmt_rate(1e9 / med[k]),
        (s in med) ? ratio(med[k] / med[s]) : "n/a",
        (c in med) ? ratio(med[k] / med[c]) : "n/a",
        100 * (hi[k] - lo[k]) / med[k], cnt[k], bad[k] ? sprintf(", %d WRONG PATH", bad[k]) : ""
}
# target: got = how many times sluice is better; want = the target factor.
function verdict(got, want) {
    if (got >= want) return sprintf("**met** (%.0f%% above)", 100 * (got / want - 1))
    return sprintf("**missed** (%.0f%% short: needs %.2f× more)", 100 * (1 - got / want), want / got)
}
function target(title, want, peer, pt, variant, st, a,    kp, ks, got) {
    kp = key(peer, pt, a); ks = key(variant, st, a)
    if (!(kp in med) || !(ks in med)) {
        printf "- %s, %s, %s: n/a\n", title, variant == "sluice" ? "sluice live clock" : "sluice clock=coarse", a
        return
    }
    got = med[kp] / med[ks]
    printf "- %s, %s, %s: %s (target ≥ %s×): %s\n", title, variant == "sluice" ? "sluice live clock" : "sluice clock=coarse",
        a, ratio(got), want, verdict(got, want)
}
{ k = key($1, $2, $3); med[k] = $4; lo[k] = $5; hi[k] = $6; cnt[k] = $7; bad[k] = $8 }
END {
    printf "## sluice and its peers: ns per decision, one limiter\n\n"
    printf "%s; %d cores (nproc), %s; Linux %s.\n", when, nproc, cpu, kernel
    printf "sluice (%s build), Guava %s on %s, x/time/rate %s on %s, redis-server %s + hiredis %s.\n",
        btype, guava, jver, xtime, gver, redis, hiredis
    printf "Median over %d rounds × %d repetitions of %d ms each (%d s of measuring). ", rounds, reps, ms, secs
    printf "Other work on the machine meanwhile: %s cores on average, hypervisor steal %s%%, load average %s → %s", others, steal, load0, load1
    printf "%s.\n\n", (others + 0 > 0.25) ? " (**not quiet**: the 2-thread rows are the least reliable)" : " (quiet)"
    printf "| peer | threads (Redis: connections) | path | ns/decision | decisions/s | ÷ sluice | ÷ sluice coarse | spread (IQR/median, samples) |\n"
    printf "|---|---:|---|---:|---:|---:|---:|---|\n"
    split("sluice sluice-coarse guava xrate redis-lua", P, " ")
    L["sluice"] = "sluice (live clock)"; L["sluice-coarse"] = "sluice clock=coarse"
    L["guava"] = "Guava tryAcquire()"; L["xrate"] = "x/time/rate Allow()"
    L["redis-lua"] = "Redis+Lua EVALSHA"
    for (i = 1; i <= 5; i++) {
        p = P[i]
        if (p == "redis-lua") { T[1] = 1; T[2] = conns } else { T[1] = 1; T[2] = 2 }
        for (j = 1; j <= 2; j++) {
            lab = L[p]
            if (p == "redis-lua") lab = lab (T[j] == 1 ? " (1 conn)" : " (" T[j] " conns)")
            row(p, lab, T[j], "allowed")
            row(p, lab, T[j], "denied")
        }
    }
    printf "\n÷ sluice = ns/decision of the row divided by ns/decision of sluice in the same scenario "
    printf "(same threads and path; Redis on 1 connection against sluice on 1 thread, on %d connections ", conns
    printf "against sluice on 2 threads); above 1×, sluice is faster by that factor.\n"
    if (rb1 != "" || rb50 != "")
        printf "Cross-check, redis-benchmark on the same script (allowed path): 1 conn %s req/s, %d conns %s req/s.\n",
            rb1 == "" ? "?" : rb1, conns, rb50 == "" ? "?" : rb50
    printf "\n### Targets\n\n"
    if (!coarse)
        printf "- sluice clock=coarse: n/a for every target (this build does not accept the option).\n"
    for (v = 1; v <= 2; v++) {
        var = v == 1 ? "sluice-coarse" : "sluice"
        if (var == "sluice-coarse" && !coarse) continue
        for (a = 1; a <= 2; a++)
            target("1 thread, ≥ 4× faster than Guava tryAcquire()", 4, "guava", 1, var, 1, a == 1 ? "allowed" : "denied")
        for (a = 1; a <= 2; a++) {
            target("2 threads, ≥ 2× the throughput of Guava", 2, "guava", 2, var, 2, a == 1 ? "allowed" : "denied")
            target("2 threads, ≥ 2× the throughput of x/time/rate", 2, "xrate", 2, var, 2, a == 1 ? "allowed" : "denied")
        }
        for (a = 1; a <= 2; a++)
            target("1 thread, ≥ 1000× the decisions/s of Redis+Lua on 1 connection", 1000, "redis-lua", 1, var, 1,
                a == 1 ? "allowed" : "denied")
    }
}' "$TMP/medians" >"$TMP/table.md"

cat "$TMP/table.md"
if [[ -n "$OUT" ]]; then
    cp "$TMP/table.md" "$OUT"
    say "table written to $OUT"
fi
if awk '$8 > 0 { bad = 1 } END { exit !bad }' "$TMP/medians"; then
    die "some decisions went against their path (see WRONG PATH above)"
fi
