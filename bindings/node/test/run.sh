#!/bin/sh
# run.sh -- the Node binding's tests, as CTest's `node` runs them:
#
#   sh bindings/node/test/run.sh WORKDIR
#
# Checks the addon's C with the project's warnings as errors; makes a copy
# of the package in WORKDIR (a build tree's folder), with
# deps/sluice a link to this checkout, so the source tree stays clean and
# each build tree has its own addon; `npm ci` there installs the
# devDependencies from the registry (express, express-rate-limit,
# rate-limiter-flexible: package-lock.json) and builds the addon (the
# install script, node-gyp against the installed Node's headers); then
# `node --test` runs test/*.test.js.  Exits 77 (skipped) with the reason
# when node (18 or later) or npm is missing.
set -eu
work=${1:?usage: run.sh WORKDIR}
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(dirname "$here")
root=$(cd "$pkg/../.." && pwd)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "node: skipped: node and npm are needed (Node.js 18 or later, with npm)" >&2
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
    echo "node: skipped: Node.js $(node --version) is older than 18" >&2
    exit 77
fi

# The addon's C under the project's warnings, as errors (node-gyp's build
# does not stop on a warning), with the installed Node's headers.
nodeinc=$(node -p 'require("path").resolve(process.execPath, "../../include/node")')
if [ -f "$nodeinc/node_api.h" ]; then
    ${CC:-cc} -fsyntax-only -std=c11 -DNAPI_VERSION=8 -DSLUICE_BUILDING=1 -I"$nodeinc" \
        -I"$root/include" -I"$root/src" -Wall -Wextra -Wshadow -Wstrict-prototypes \
        -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wvla -Werror "$pkg/src/sluice_node.c"
fi

rm -rf "$work"
mkdir -p "$work/deps"
for f in package.json package-lock.json binding.gyp index.js index.d.ts src scripts test lib; do
    [ -e "$pkg/$f" ] && cp -R "$pkg/$f" "$work/"
done
rm -rf "$work/test/tmp"
ln -s "$root" "$work/deps/sluice"
cd "$work"
echo "node: npm ci in $work" >&2
SLUICE_BUILD_JOBS=${JOBS:-2} npm ci --no-audit --no-fund --loglevel=warn
node --test test/*.test.js
