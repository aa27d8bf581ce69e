#!/usr/bin/env bash
# ab.sh -- two revisions' benchmarks, run alternately in one sitting, compared
# row by row.
#
#   bench/ab.sh [options] BASE_REV [HEAD_REV]        (HEAD_REV: default HEAD)
#   bench/ab.sh --table DIR                           (the table again, from --out DIR)
#
# 1. Builds A = BASE_REV and B = HEAD_REV, each in its own detached worktree
#    under a temporary directory (git worktree add --detach; removed at the
#    end, whatever happens), Release (-O3 -DNDEBUG), only the benchmark
#    targets, under nice.  The working tree you run it from is not touched.
# 2. Runs the five benchmarks of issue 23's check, each built from A and from
#    B, one after the other, for --rounds rounds:
#        decide     bench_decide
#        overload   bench_table --overload
#        burst      bench_table --burst
#        composite  bench_composite
#        region     bench_region
#    Round 1 runs A then B, round 2 B then A, and so on (a slow spell that
#    grows or fades over a pair of runs then weighs on both sides alike), and
#    within a round each benchmark's two runs are back to back.
# 3. Parses each benchmark's printed rows (every figure in ns; the ratios and
#    targets they print are left out, as they follow from the ns), and prints
#    one markdown table: per row A's and B's median over the rounds, their
#    spread (min-max over the rounds), B/A of the medians, B/A of the best
#    rounds (the minima: on a busy machine, where a slow spell only ever
#    adds time, often the steadier figure) and a verdict.
#
# The figures are parsed from the text the benchmarks print, not from a
# machine-readable option: BASE_REV is an older commit, and a --tsv added
# today would not be there.  The parsers follow the formats of bench/*.c as
# of a5ca32d (bench_table --overload's also at 9bdce36, the oldest tried); a
# row that only one side prints shows as "A only"/"B only".
#
# Verdict of a row (A: its values over the rounds, B the same):
#   slower   min(B) > max(A) -- B's best run is worse than A's worst -- and
#            median(B) > median(A) x (1 + tolerance)  (--tolerance, 1%)
#   faster   the same the other way round
#   =        otherwise: the difference is within the run-to-run spread
# For a row that did not change, B's range falls wholly above A's by chance
# with probability 1 / C(2R, R) over R rounds (R = 5: 1/252; 7: 1/3432); the
# summary line says how many rows that makes expected, so read a single
# "slower" among a hundred rows at 5 rounds against it.
#
# Options:
#   --rounds N        rounds (default 5)
#   --quick           the benchmarks' short settings: bench_table --quick;
#                     bench_decide, bench_composite --runs 3 --iters 200000;
#                     bench_region --runs 3
#   --only LIST       comma-separated subset of decide,overload,burst,composite,region
#   --args NAME=ARGS  extra arguments for one benchmark (word-split; once per
#                     benchmark, the last one given counts),
#                     e.g. --args 'overload=--flood-keys 2000'
#   --rows REGEX      only the rows whose name matches (awk extended regex)
#   --tolerance PCT   the least median difference that counts (default 1)
#   --brief           one line per benchmark (rows, verdicts, range of B/A,
#                     widest spread), then only the rows that are not "="
#   --out DIR         keep every run's output there (DIR/NAME.SIDE.ROUND.txt
#                     and .rc, its exit status; those of an earlier run are
#                     removed first)
#   --jobs N          build jobs (default 2)
# Exit status: 0; 1 if a row is slower or a benchmark exited non-zero;
# 2 on bad usage or a failed build.
set -euo pipefail

prog=ab.sh
die() { echo "$prog: $*" >&2; exit 2; }

all_benches=(decide overload burst composite region)
declare -A extra=()
rounds=5 quick=0 brief=0 only="" rows="" tol=1 out="" jobs=2 table_dir=""
pos=()
while (($#)); do
    case $1 in
    --rounds | --only | --args | --rows | --tolerance | --out | --jobs | --table)
        (($# >= 2)) || die "$1 needs a value"
        v=$2
        case $1 in
        --rounds) if ! [[ $v =~ ^[0-9]+$ ]] || ((v < 1 || v > 1000)); then
                      die "--rounds \"$v\": a count from 1 to 1000"
                  fi
                  rounds=$v ;;
        --only) only=$v ;;
        --args) [[ $v == *=* ]] || die "--args \"$v\": NAME=ARGS"
                extra[${v%%=*}]=${v#*=} ;;
        --rows) rows=$v ;;
        --tolerance) [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--tolerance \"$v\": a percentage, e.g. 1 or 0.5"
                     tol=$v ;;
        --out) out=$v ;;
        --jobs) [[ $v =~ ^[1-9][0-9]*$ ]] || die "--jobs \"$v\": a count from 1"
                jobs=$v ;;
        --table) table_dir=$v ;;
        esac
        shift 2 ;;
    --quick) quick=1; shift ;;
    --brief) brief=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; pos+=("$@"); break ;;
    -*) die "unknown option \"$1\" (try --help)" ;;
    *) pos+=("$1"); shift ;;
    esac
done

benches=("${all_benches[@]}")
if [[ -n $only ]]; then
    IFS=, read -r -a benches <<<"$only"
    ((${#benches[@]})) || die "--only \"$only\": names no benchmark"
fi
for b in "${benches[@]}"; do
    [[ " ${all_benches[*]} " == *" $b "* ]] || die "--only: unknown benchmark \"$b\" (one of: ${all_benches[*]})"
done
for b in "${!extra[@]}"; do
    [[ " ${all_benches[*]} " == *" $b "* ]] || die "--args: unknown benchmark \"$b\" (one of: ${all_benches[*]})"
done
if [[ -n $rows ]]; then
    # a bad regex must fail here, not silently select nothing later
    awk -v re="$rows" 'BEGIN { if ("" ~ re) {} }' </dev/null 2>/dev/null ||
        die "--rows \"$rows\": not a valid awk regular expression"
fi

# The binary and arguments of one benchmark.
bench_cmd() { # NAME -> words on stdout, one a line
    local q=()
    case $1 in
    decide) echo bench_decide; ((quick)) && q=(--runs 3 --iters 200000) ;;
    overload) echo bench_table; echo --overload; ((quick)) && q=(--quick) ;;
    burst) echo bench_table; echo --burst; ((quick)) && q=(--quick) ;;
    composite) echo bench_composite; ((quick)) && q=(--runs 3 --iters 200000) ;;
    region) echo bench_region; ((quick)) && q=(--runs 3) ;;
    esac
    local w
    for w in "${q[@]}" ${extra[$1]:-}; do echo "$w"; done
}

# The rows of one benchmark's output: "ROW<TAB>NS" lines.  Each parser knows
# its benchmark's sections; numbers in parentheses, ratios (1.2x), marks (!)
# and verdicts are dropped.
parse_rows() { # FILE... (each named NAME.SIDE.ROUND.txt) -> "SIDE<TAB>NAME: ROW<TAB>NS"
    awk '
    function isnum(s) { return s ~ /^[0-9]+(\.[0-9]+)?$/ }
    # Splits a cleaned line into a name (the words before the first number)
    # and the numbers after it: nm, nv, val[1..nv].
    function split_line(line,   f, n, i) {
        gsub(/\([^)]*\)/, " ", line); gsub(/!/, " ", line)
        gsub(/[0-9]ns( |$)/, "& ", line); gsub(/ns /, " ", line)
        n = split(line, f, " "); nm = ""; nv = 0
        for (i = 1; i <= n; i++) {
            if (isnum(f[i])) { val[++nv] = f[i]; continue }
            if (nv == 0) nm = nm (nm == "" ? "" : " ") f[i]
            else if (f[i] !~ /^[0-9.]+x$/) break
        }
    }
    function emit(row, v) { printf "%s\t%s: %s\t%s\n", side, bench, row, v }
    FNR == 1 {
        fname = FILENAME; sub(/.*\//, "", fname); split(fname, part, ".")
        bench = part[1]; side = part[2]; sec = ""
    }

    bench == "decide" {
        if ($0 ~ /^algorithm +allowed/) { sec = "1t"; next }
        if ($0 ~ /^2 threads refusing/) { sec = "2t refusing"; next }
        if ($0 ~ /^2 threads, live clock, allowed/) { sec = "2t allowed"; next }
        if ($0 ~ /^$/ && sec == "1t") { sec = "" ; next }
        if (sec == "" && $0 ~ /^(floor|ref) / && $NF == "ns") { emit($1 " " $2, $(NF-1)); next }
        if (sec == "1t") {
            split_line($0)
            split("_at allowed,_at denied,live allowed,live denied,coarse allowed,coarse denied", col, ",")
            for (i = 1; i <= nv && i <= 6; i++) emit(nm " " col[i], val[i])
            next
        }
        if (sec == "2t refusing" && $0 ~ / ns /) {
            split_line($0)
            if (nv >= 2) { emit("2t refusing " nm " 1 thread", val[1]); emit("2t refusing " nm " each of 2", val[2]) }
            next
        }
        if (sec == "2t allowed" && $0 ~ / ns/ && $1 != "algorithm") {
            split_line($0)
            if ($1 == "floor" && nv >= 1) emit("2t allowed " nm, val[1])
            else if (nv >= 3) { emit("2t allowed " nm " one limiter", val[2]); emit("2t allowed " nm " a limiter each", val[3]) }
            next
        }
        next
    }
    bench == "composite" {
        for (p = 2; p <= NF; p++) if ($p == "allowed" || $p == "refused" || $p == "refused&r") break
        if (p > NF || p + 3 > NF) next
        nm = $1; for (i = 2; i < p; i++) nm = nm " " $i
        split("single,sum of 3,composite", col, ",")
        for (i = 1; i <= 3; i++) { v = $(p + i); sub(/ns$/, "", v); if (isnum(v)) emit(nm " " $p " " col[i], v) }
        next
    }
    bench == "overload" {
        if ($1 == "refusal" && NF >= 5) {
            emit("hot-key refusal 1 thread", $2); emit("hot-key refusal 1 thread (cpu)", $3)
            emit("hot-key refusal 2 threads", $4); emit("hot-key refusal 2 threads (cpu)", $5)
            next
        }
        if (match($0, / [0-9.]+ ns \(cpu [0-9.]+\)/)) {
            nm = substr($0, 1, RSTART - 1); sub(/^ +/, "", nm); sub(/ +$/, "", nm)
            split(substr($0, RSTART, RLENGTH), f, /[ ()]+/)
            emit(nm, f[2]); emit(nm " (cpu)", f[5])
        }
        next
    }
    bench == "burst" {
        if (match($0, /  +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+x$/)) {
            nm = substr($0, 1, RSTART - 1); sub(/^ +/, "", nm)
            split(substr($0, RSTART, RLENGTH), f, " ")
            emit(nm, f[1]); emit(nm " (cpu)", f[2])
        }
        next
    }
    bench == "region" {
        if ($0 ~ /^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x/) {
            emit($1 " keys local", $2); emit($1 " keys local (cpu)", $3)
            emit($1 " keys region", $4); emit($1 " keys region (cpu)", $5)
        }
        next
    }' "$@"
}

# The table from a directory of outputs (NAME.SIDE.ROUND.txt, .rc beside).
# Exit status 1 if a row is slower or a run exited non-zero.
print_table() { # DIR
    local dir=$1 b s f status=0 files=()
    [[ -d $dir ]] || die "no directory \"$dir\""
    for b in "${all_benches[@]}"; do
        for s in A B; do
            for f in "$dir/$b.$s".*.txt; do
                [[ -e $f ]] && files+=("$f")
            done
        done
    done
    { ((${#files[@]} == 0)) || parse_rows "${files[@]}"; } | awk -F '\t' -v re="$rows" -v tol="$tol" -v brief="$brief" '
    function fmt(x) { return x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }
    function stats(k, s,   m, i, j, t, a) {
        m = cnt[k, s]
        for (i = 1; i <= m; i++) a[i] = v[k, s, i] + 0
        for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        lo = a[1]; hi = a[m]
        med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    re != "" && $2 !~ re { next }
    {
        k = $2
        if (!(k in seen)) { seen[k] = 1; order[++n] = k }
        cnt[k, $1]++; v[k, $1, cnt[k, $1]] = $3
        if (cnt[k, $1] > maxr) maxr = cnt[k, $1]
    }
    END {
        if (!brief) {
            print "| row | A median | A min-max | B median | B min-max | B/A | best B/A | verdict |"
            print "|---|---:|---:|---:|---:|---:|---:|---|"
        }
        for (i = 1; i <= n; i++) {
            k = order[i]
            b = k; sub(/:.*/, "", b)
            if (!(b in rowsof)) { border[++nb] = b; lo_r[b] = 1e300; hi_r[b] = 0; sp[b] = 0 }
            rowsof[b]++
            if (!cnt[k, "A"] || !cnt[k, "B"]) {
                line[i] = sprintf("| %s | | | | | | | %s only |", k, cnt[k, "A"] ? "A" : "B"); only++
                odd[i] = 1; bonly[b]++
                continue
            }
            stats(k, "A"); ma = med; la = lo; ha = hi
            stats(k, "B"); mb = med; lb = lo; hb = hi
            r = ma > 0 ? mb / ma : 0
            rb = la > 0 ? lb / la : 0
            verdict = "="
            if (lb > ha && mb > ma * (1 + tol / 100)) { verdict = "**slower**"; slower++; bslow[b]++; odd[i] = 1 }
            else if (hb < la && mb < ma * (1 - tol / 100)) { verdict = "faster"; faster++; bfast[b]++; odd[i] = 1 }
            else same++
            if (r < lo_r[b]) lo_r[b] = r
            if (r > hi_r[b]) hi_r[b] = r
            if (!(b in lo_b) || rb < lo_b[b]) lo_b[b] = rb
            if (rb > hi_b[b]) hi_b[b] = rb
            if (ma > 0 && (ha - la) / ma > sp[b]) sp[b] = (ha - la) / ma
            if (mb > 0 && (hb - lb) / mb > sp[b]) sp[b] = (hb - lb) / mb
            note = (cnt[k, "A"] < maxr || cnt[k, "B"] < maxr) ? sprintf(" (%d/%d runs)", cnt[k, "A"], cnt[k, "B"]) : ""
            line[i] = sprintf("| %s | %s | %s-%s | %s | %s-%s | %.3f | %.3f | %s%s |", k, fmt(ma), fmt(la), fmt(ha),
                              fmt(mb), fmt(lb), fmt(hb), r, rb, verdict, note)
        }
        if (brief) {
            print "| benchmark | rows | slower | faster | B/A of the medians | B/A of the best | widest spread (max-min)/median |"
            print "|---|---:|---:|---:|---:|---:|---:|"
            for (j = 1; j <= nb; j++) {
                b = border[j]
                printf "| %s | %d%s | %d | %d | %.3f-%.3f | %.3f-%.3f | %.0f%% |\n", b, rowsof[b],
                       (bonly[b] ? sprintf(" (%d on one side)", bonly[b]) : ""), bslow[b], bfast[b],
                       (hi_r[b] > 0 ? lo_r[b] : 0), hi_r[b], lo_b[b] + 0, hi_b[b] + 0, 100 * sp[b]
            }
            if (slower + faster + only) {
                print ""
                print "| row | A median | A min-max | B median | B min-max | B/A | best B/A | verdict |"
                print "|---|---:|---:|---:|---:|---:|---:|---|"
            }
        }
        for (i = 1; i <= n; i++) if (!brief || odd[i]) print line[i]
        if (n == 0) { print "\nno rows (see the exit statuses below)"; exit 1 }
        c = 1; for (i = 1; i <= maxr; i++) c = c * (maxr + i) / i   # C(2R, R)
        printf "\n%d rows: %d slower beyond the spread, %d faster, %d within it%s.\n",
               n, slower, faster, same, only ? sprintf(", %d on one side only", only) : ""
        printf "A row that did not change is \"slower\" by chance with probability 1/%.0f at %d rounds: %.2f such rows expected here.\n",
               c, maxr, (slower + faster + same) / c
        exit slower > 0
    }' || status=1
    for f in "$dir"/*.rc; do
        [[ -e $f ]] || continue
        if [[ $(<"$f") != 0 ]]; then
            echo "exit status $(<"$f"): $(basename "${f%.rc}"): $(grep . "${f%.rc}.txt" 2>/dev/null | tail -1)"
            status=1
        fi
    done
    return $status
}

if [[ -n $table_dir ]]; then
    ((${#pos[@]} == 0)) || die "--table takes no revisions"
    print_table "$table_dir"
    exit $?
fi

((${#pos[@]} >= 1 && ${#pos[@]} <= 2)) || die "usage: bench/ab.sh [options] BASE_REV [HEAD_REV] (try --help)"
# the repository: the script's own, else the current directory's (a copy of
# the script run from elsewhere)
root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel 2>/dev/null ||
       git rev-parse --show-toplevel 2>/dev/null) || die "neither the script nor the current directory is in a git checkout"
declare -A rev=()
rev[A]=$(git -C "$root" rev-parse --verify --quiet "${pos[0]}^{commit}") || die "BASE_REV \"${pos[0]}\": no such commit"
rev[B]=$(git -C "$root" rev-parse --verify --quiet "${pos[1]:-HEAD}^{commit}") || die "HEAD_REV \"${pos[1]:-HEAD}\": no such commit"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ab.XXXXXX")
# shellcheck disable=SC2317  # (run by the trap)
cleanup() {
    local s
    for s in A B; do
        if [[ -d $tmp/$s ]] && ! git -C "$root" worktree remove --force "$tmp/$s" 2>/dev/null; then
            rm -rf "${tmp:?}/$s"
            git -C "$root" worktree prune 2>/dev/null || true
        fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ -n $out ]] || out=$tmp/out
mkdir -p "$out" || die "--out \"$out\": cannot create it"
rm -f "$out"/*.txt "$out"/*.rc

targets=()
for b in "${benches[@]}"; do
    t=$(bench_cmd "$b" | head -1)
    [[ " ${targets[*]-} " == *" $t "* ]] || targets+=("$t")
done

for s in A B; do
    echo "$prog: building $s = $(git -C "$root" log -1 --format='%h %s' "${rev[$s]}" | cut -c1-72)" >&2
    git -C "$root" worktree add --detach --quiet "$tmp/$s" "${rev[$s]}" ||
        die "git worktree add of ${rev[$s]} failed"
    if ! { nice cmake -S "$tmp/$s" -B "$tmp/$s/build" -DCMAKE_BUILD_TYPE=Release \
               -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_EXAMPLES=OFF -DSLUICE_BUILD_CLI=OFF \
               -DSLUICE_INSTALL=OFF -DSLUICE_BUILD_BENCH=ON &&
           nice cmake --build "$tmp/$s/build" -j "$jobs" --target "${targets[@]}"; } \
           >"$tmp/build-$s.log" 2>&1; then
        tail -20 "$tmp/build-$s.log" >&2
        die "the build of $s (${rev[$s]}) failed"
    fi
done

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime; }
start=$(date -u '+%Y-%m-%d %H:%M UTC') t0=$SECONDS load0=$(load)
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(A B); else order=(B A); fi
    for b in "${benches[@]}"; do
        mapfile -t cmd < <(bench_cmd "$b")
        for s in "${order[@]}"; do
            echo "$prog: round $r/$rounds, $b, $s (load $(load))" >&2
            rc=0
            "$tmp/$s/build/bench/${cmd[0]}" "${cmd[@]:1}" >"$out/$b.$s.$r.txt" 2>&1 || rc=$?
            echo "$rc" >"$out/$b.$s.$r.rc"
            if ((rc == 2)); then # the benchmark refused its arguments: no round will do better
                tail -3 "$out/$b.$s.$r.txt" >&2
                die "$b ($s): ${cmd[*]} exited 2 (bad usage)"
            fi
        done
    done
done
load1=$(load)

desc() { git -C "$root" log -1 --format='%h (%s)' "${rev[$1]}" | cut -c1-90; }
echo "A = $(desc A)"
echo "B = $(desc B)"
echo "$start, $rounds rounds (A B, B A, ...), $((SECONDS - t0)) s;" \
     "load average $load0 at the start, $load1 at the end; $(nproc) CPUs;" \
     "Release, $(cc --version | head -1)"
for b in "${benches[@]}"; do
    mapfile -t cmd < <(bench_cmd "$b")
    echo "  $b: ${cmd[*]}"
done
echo
status=0
print_table "$out" || status=$?
exit $status
