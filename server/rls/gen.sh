#!/usr/bin/env bash
# gen.sh -- regenerate server/rls/gen/*.pb-c.[ch] from the trimmed protos in
# server/rls/proto and protobuf's own duration.proto, wrappers.proto and
# struct.proto.
# Needs protoc-c (Debian: protobuf-c-compiler) and the well-known protos
# (Debian: libprotobuf-dev or protobuf-compiler ship them in
# /usr/include).  The output is committed: the build does not run this.
#   server/rls/gen.sh            regenerate server/rls/gen
#   server/rls/gen.sh --check    regenerate into a temporary directory and
#                                compare with server/rls/gen (exit 1 when
#                                they differ: the ctest rls_gen)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
wk=${PROTO_INCLUDE:-/usr/include}
if ! command -v protoc-c >/dev/null; then
    echo "gen.sh: protoc-c not found (apt-get install protobuf-c-compiler)" >&2
    [ "${1:-}" = --check ] && exit 77
    exit 2
fi
if [ ! -f "$wk/google/protobuf/duration.proto" ]; then
    echo "gen.sh: no $wk/google/protobuf/duration.proto (set PROTO_INCLUDE)" >&2
    exit 2
fi
check=0
[ "${1:-}" = --check ] && check=1
if [ $check -eq 1 ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
else
    out=$here/gen
    rm -rf "$out"
    mkdir -p "$out"
fi
cd "$here/proto"
protoc-c -I. -I"$wk" --c_out="$out" \
    envoy/config/core/v3/base.proto \
    envoy/extensions/common/ratelimit/v3/ratelimit.proto \
    envoy/service/ratelimit/v3/rls.proto \
    grpc/health/v1/health.proto
cd "$wk"
protoc-c -I. --c_out="$out" google/protobuf/duration.proto google/protobuf/wrappers.proto \
    google/protobuf/struct.proto
if [ $check -eq 1 ]; then
    if diff -r "$out" "$here/gen" >/dev/null; then
        echo "gen.sh: server/rls/gen is what protoc-c makes of server/rls/proto"
        exit 0
    fi
    diff -r "$out" "$here/gen" | head -n 40
    echo "gen.sh: server/rls/gen differs from protoc-c's output: run server/rls/gen.sh" >&2
    exit 1
fi
echo "gen.sh: wrote $(find "$out" -name '*.pb-c.[ch]' | wc -l) files under $out"
