#!/usr/bin/env bash
# gen.sh -- regenerate server/rls/gen/*.pb-c.[ch] from the trimmed protos in
# server/rls/proto and protobuf's own duration.proto and wrappers.proto.
# Needs protoc-c (Debian: protobuf-c-compiler) and the well-known protos
# (Debian: libprotobuf-dev or protobuf-compiler ship them in
# /usr/include).  The output is committed: the build does not run this.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
wk=${PROTO_INCLUDE:-/usr/include}
if [ ! -f "$wk/google/protobuf/duration.proto" ]; then
    echo "gen.sh: no $wk/google/protobuf/duration.proto (set PROTO_INCLUDE)" >&2
    exit 2
fi
out=$here/gen
rm -rf "$out"
mkdir -p "$out"
cd "$here/proto"
protoc-c -I. -I"$wk" --c_out="$out" \
    envoy/config/core/v3/base.proto \
    envoy/extensions/common/ratelimit/v3/ratelimit.proto \
    envoy/service/ratelimit/v3/rls.proto \
    grpc/health/v1/health.proto
cd "$wk"
protoc-c -I. --c_out="$out" google/protobuf/duration.proto google/protobuf/wrappers.proto
echo "gen.sh: wrote $(find "$out" -name '*.pb-c.[ch]' | wc -l) files under $out"
