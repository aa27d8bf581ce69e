#!/bin/sh
# tls_model.sh LIBSLUICE_SO -- the shared library must use a dynamic TLS
# model: no STATIC_TLS flag and no initial-exec TLS relocation (TPOFF).
# A library marked so cannot be dlopen()ed once the static TLS block is used
# up ("cannot allocate memory in static TLS block"), which happens under
# Python ctypes, LuaJIT's ffi.load and nginx dynamic modules.  The check
# also requires a TLS segment, so that it cannot pass vacuously.
set -eu
lib=$1
readelf=${READELF:-readelf}
command -v "$readelf" >/dev/null 2>&1 || { echo "tls_model.sh: $readelf not found (binutils)" >&2; exit 1; }
fail=0
if ! "$readelf" -lW "$lib" | grep -q '^ *TLS '; then
    echo "tls_model.sh: $lib has no TLS segment: nothing was checked" >&2
    fail=1
fi
if "$readelf" -dW "$lib" | grep -E 'FLAGS' | grep -q 'STATIC_TLS'; then
    echo "tls_model.sh: $lib is marked STATIC_TLS (initial-exec TLS):" >&2
    "$readelf" -dW "$lib" | grep FLAGS >&2
    fail=1
fi
if "$readelf" -rW "$lib" | grep -q 'TPOFF'; then
    echo "tls_model.sh: $lib has initial-exec TLS relocations:" >&2
    "$readelf" -rW "$lib" | grep 'TPOFF' >&2
    fail=1
fi
[ $fail -eq 0 ] && echo "tls_model.sh: $lib uses a dynamic TLS model"
exit $fail
