#!/usr/bin/env bash
# downstream/run.sh [SOURCE_DIR] -- build and use sluice as its users do.
#
#  1. A packager's build: the libraries and the CLI only, configured for
#     prefix /usr with a multiarch libdir (lib/<triplet>, as on Debian), then
#     installed with DESTDIR into a temporary directory.  The installed tree
#     is checked: headers (sluice/redis.h only with the Redis tier), both
#     libraries, the CMake package and the pkg-config files, whose prefix
#     must resolve to where they were installed.  A second build without
#     the Redis tier must install none of its files.
#  2. examples/hello.c is built and run four ways: find_package(sluice)
#     (shared and static targets), pkg-config shared, pkg-config static
#     (--static, the archives only) and add_subdirectory() of the source tree
#     (tests/downstream/subproject checks that a subproject builds only the
#     libraries and takes no target name a user would want).  With the Redis
#     tier, tests/downstream/redis_link.c is built the same ways.
#
# Each program must print what it should; a shared build must need
# libsluice.so.SOVERSION, a static one must not need libsluice.so.  Every
# step is bounded by `timeout`; the temporary directory is removed on exit.
# Environment: CC (default cc), JOBS (default 2), KEEP=1 keeps the directory.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "${1:-$here/../..}" && pwd)
cc=${CC:-cc}
export CC=$cc
jobs=${JOBS:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-downstream.XXXXXX")
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi; }
trap cleanup EXIT

fail() {
    echo "downstream: FAIL: $*" >&2
    exit 1
}
step() { printf -- '--- %s\n' "$*"; }
# run LOG CMD...: run a bounded command, its output to LOG, shown on failure.
run() {
    local log=$1
    shift
    if ! timeout 600 "$@" >"$log" 2>&1; then
        cat "$log" >&2
        fail "$*"
    fi
}
for tool in cmake pkg-config readelf timeout; do
    command -v $tool >/dev/null 2>&1 || fail "$tool not found"
done

# The version the sources declare.
version=$(sed -n 's/^#define SLUICE_VERSION_STRING "\(.*\)"$/\1/p' "$src/include/sluice.h")
[ -n "$version" ] || fail "no SLUICE_VERSION_STRING in include/sluice.h"
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" = 0 ]; then soversion=0.$minor; else soversion=$major; fi
soname=libsluice.so.$soversion

triplet=$($cc -print-multiarch 2>/dev/null || true)
libdir=lib/${triplet:-multiarch}

# ------------------------------------------------------------ 1. install --

step "packager build: prefix /usr, libdir $libdir"
run "$tmp/configure.log" cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_INSTALL_LIBDIR="$libdir" \
    -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_EXAMPLES=OFF
run "$tmp/build.log" cmake --build "$tmp/build" -j"$jobs"
root=$tmp/root
run "$tmp/install.log" env DESTDIR="$root" cmake --install "$tmp/build"
usr=$root/usr
lib=$usr/$libdir

with_redis=0
[ -e "$tmp/build/libsluice-redis.a" ] && with_redis=1
step "installed tree (Redis tier: $([ $with_redis = 1 ] && echo yes || echo no))"
for f in include/sluice.h include/sluice/wheel.h bin/sluice "$libdir/libsluice.a" \
    "$libdir/libsluice.so" "$libdir/$soname" "$libdir/pkgconfig/sluice.pc" \
    "$libdir/cmake/sluice/sluiceConfig.cmake" "$libdir/cmake/sluice/sluiceConfigVersion.cmake" \
    "$libdir/cmake/sluice/sluiceTargets.cmake"; do
    [ -e "$usr/$f" ] || fail "not installed: /usr/$f"
done
redis_files="include/sluice/redis.h $libdir/libsluice-redis.a $libdir/libsluice-redis.so
    $libdir/libsluice-redis.so.$soversion $libdir/pkgconfig/sluice-redis.pc
    $libdir/cmake/sluice/sluiceRedisTargets.cmake"
for f in $redis_files; do
    if [ $with_redis = 1 ]; then
        [ -e "$usr/$f" ] || fail "not installed: /usr/$f"
    else
        [ ! -e "$usr/$f" ] || fail "installed without the Redis tier: /usr/$f"
    fi
done
step "without the Redis tier (-DSLUICE_REDIS=OFF): no sluice/redis.h, no sluice-redis.pc"
run "$tmp/noredis-configure.log" cmake -S "$src" -B "$tmp/noredis" -DCMAKE_BUILD_TYPE=Debug \
    -DSLUICE_REDIS=OFF -DSLUICE_BUILD_CLI=OFF -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF \
    -DSLUICE_BUILD_EXAMPLES=OFF
run "$tmp/noredis-build.log" cmake --build "$tmp/noredis" -j"$jobs"
run "$tmp/noredis-install.log" cmake --install "$tmp/noredis" --prefix "$tmp/noredis-root"
[ -e "$tmp/noredis-root/include/sluice.h" ] || fail "-DSLUICE_REDIS=OFF: sluice.h not installed"
for f in $(cd "$tmp/noredis-root" && find . -name 'redis.h' -o -name '*sluice-redis*' -o -name 'sluiceRedis*'); do
    fail "-DSLUICE_REDIS=OFF installed $f"
done

readelf -dW "$lib/libsluice.so" | grep -q "Library soname: \[$soname\]" ||
    fail "libsluice.so's SONAME is not $soname"

export PKG_CONFIG_PATH=$lib/pkgconfig
pcprefix=$(cd "$(pkg-config --variable=prefix sluice)" && pwd)
[ "$pcprefix" = "$(cd "$usr" && pwd)" ] || fail "sluice.pc: prefix $pcprefix, want $usr"
for pc in sluice $([ $with_redis = 1 ] && echo sluice-redis); do
    d=$(pkg-config --variable=libdir $pc)
    [ -e "$d/libsluice.so" ] || fail "$pc.pc: libdir $d has no libsluice.so"
    d=$(pkg-config --variable=includedir $pc)
    [ -e "$d/sluice.h" ] || fail "$pc.pc: includedir $d has no sluice.h"
    [ "$(pkg-config --modversion $pc)" = "$version" ] || fail "$pc.pc: version is not $version"
done

# check NAME WANT: run ./NAME, whose output must contain WANT.
check() {
    local out
    out=$(timeout 60 "$1") || fail "$1 exited with $?"
    case $out in *"$2"*) ;; *) fail "$1 printed '$out', want '$2'" ;; esac
}
# linkage FILE shared|static: whether FILE needs libsluice.so.
linkage() {
    local needed
    needed=$(readelf -dW "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    if [ "$2" = shared ]; then
        echo "$needed" | grep -qx "$soname" || fail "$1 does not need $soname: $needed"
        if [ "$3" = redis ]; then
            echo "$needed" | grep -qx "libsluice-redis.so.$soversion" ||
                fail "$1 does not need libsluice-redis.so.$soversion: $needed"
        fi
    else
        ! echo "$needed" | grep -q '^libsluice' || fail "$1 is not static: it needs $needed"
    fi
}
hello=$src/examples/hello.c
redis_link=$here/redis_link.c

# ------------------------------------------------------- 2. find_package --

step "find_package(sluice $version)"
run "$tmp/fp-configure.log" cmake -S "$here/find_package" -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$usr" \
    -DHELLO="$hello" -DREDIS_LINK="$redis_link" -DSLUICE_EXPECT_VERSION="$version" \
    -DWANT_REDIS=$([ $with_redis = 1 ] && echo ON || echo OFF)
run "$tmp/fp-build.log" cmake --build "$tmp/fp" -j"$jobs"
check "$tmp/fp/hello_shared" go && linkage "$tmp/fp/hello_shared" shared core
check "$tmp/fp/hello_static" go && linkage "$tmp/fp/hello_static" static
if [ $with_redis = 1 ]; then
    check "$tmp/fp/redis_shared" "redis ok" && linkage "$tmp/fp/redis_shared" shared redis
    check "$tmp/fp/redis_static" "redis ok" && linkage "$tmp/fp/redis_static" static
fi

# ---------------------------------------------------- 3. pkg-config shared --

step "pkg-config, shared"
mkdir -p "$tmp/pc"
# shellcheck disable=SC2046
run "$tmp/pc-shared.log" "$cc" -std=c11 -o "$tmp/pc/hello_shared" "$hello" \
    $(pkg-config --cflags --libs sluice) -Wl,-rpath,"$(pkg-config --variable=libdir sluice)"
check "$tmp/pc/hello_shared" go && linkage "$tmp/pc/hello_shared" shared core
if [ $with_redis = 1 ]; then
    # shellcheck disable=SC2046
    run "$tmp/pc-redis-shared.log" "$cc" -std=c11 -o "$tmp/pc/redis_shared" "$redis_link" \
        $(pkg-config --cflags --libs sluice-redis) -Wl,-rpath,"$(pkg-config --variable=libdir sluice-redis)"
    check "$tmp/pc/redis_shared" "redis ok" && linkage "$tmp/pc/redis_shared" shared redis
fi

# ---------------------------------------------------- 4. pkg-config static --

step "pkg-config, static"
# `pkg-config --static` lists every library a static link needs; sluice's
# own are taken from their archives (-l:libX.a) beside the shared ones.
static_libs() {
    pkg-config --static --libs "$1" | sed -e 's/-lsluice-redis\b/-l:libsluice-redis.a/' \
        -e 's/-lsluice\( \|$\)/-l:libsluice.a\1/'
}
# shellcheck disable=SC2046
run "$tmp/pc-static.log" "$cc" -std=c11 -o "$tmp/pc/hello_static" "$hello" \
    $(pkg-config --cflags sluice) $(static_libs sluice)
check "$tmp/pc/hello_static" go && linkage "$tmp/pc/hello_static" static
if [ $with_redis = 1 ]; then
    # shellcheck disable=SC2046
    run "$tmp/pc-redis-static.log" "$cc" -std=c11 -o "$tmp/pc/redis_static" "$redis_link" \
        $(pkg-config --cflags sluice-redis) $(static_libs sluice-redis)
    check "$tmp/pc/redis_static" "redis ok" && linkage "$tmp/pc/redis_static" static
fi

# ---------------------------------------------------- 5. add_subdirectory --

step "add_subdirectory(sluice)"
run "$tmp/sub-configure.log" cmake -S "$here/subproject" -B "$tmp/sub" \
    -DSLUICE_SOURCE_DIR="$src" -DHELLO="$hello" -DREDIS_LINK="$redis_link"
run "$tmp/sub-build.log" cmake --build "$tmp/sub" -j"$jobs"
check "$tmp/sub/sluice" go && linkage "$tmp/sub/sluice" static
check "$tmp/sub/hello_shared" go && linkage "$tmp/sub/hello_shared" shared core
if [ $with_redis = 1 ]; then
    check "$tmp/sub/redis_static" "redis ok" && linkage "$tmp/sub/redis_static" static
fi
for f in "$tmp/sub/sluice-build/sluice" "$tmp/sub/sluice-build/tests" "$tmp/sub/sluice-build/bench" \
    "$tmp/sub/sluice-build/examples"; do
    [ ! -e "$f" ] || fail "the subproject built $f"
done

step "downstream: all four ways pass"
