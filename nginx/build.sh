#!/usr/bin/env bash
# build.sh -- build ngx_http_sluice_module.so against Debian's nginx.
#
#   nginx/build.sh OUT_DIR INCLUDE_DIR LIBSLUICE_A
#
# Debian's nginx-dev ships the nginx source tree its nginx was built from
# (/usr/share/nginx/src) and the configure flags it used (conf_flags, with
# --with-compat): a module configured with the same flags loads into
# Debian's nginx with load_module.  The tree is copied under OUT_DIR (it is
# not writable, and configure writes into it), configured with this
# directory as a dynamic module, and only the modules are made.  The .so
# lands in OUT_DIR/ngx_http_sluice_module.so.
set -euo pipefail
out=$1 inc=$2 lib=$3
src=/usr/share/nginx/src
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$src/configure" ] || [ ! -f "$src/conf_flags" ]; then
    echo "build.sh: $src/configure or conf_flags missing: install nginx-dev" >&2
    exit 1
fi
mkdir -p "$out"
rm -rf "$out/nginx-src" "$out/objs"
cp -r "$src" "$out/nginx-src"
cd "$out/nginx-src"
# shellcheck disable=SC1091
. ./conf_flags
SLUICE_INCLUDE=$inc SLUICE_LIBRARY=$lib \
    ./configure "${NGX_CONF_FLAGS[@]}" --add-dynamic-module="$here" \
    --builddir="$out/objs" >"$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log" >&2; exit 1; }
make -f "$out/objs/Makefile" modules >"$out/make.log" 2>&1 ||
    { grep -E "error|warning" "$out/make.log" | head -40 >&2; exit 1; }
cp "$out/objs/ngx_http_sluice_module.so" "$out/ngx_http_sluice_module.so"
