#!/bin/sh
# Install what building and testing sluice needs, when it is missing:
# a C compiler, make, cmake, pkg-config and cmocka (Debian packages), plus the
# packages named as arguments (e.g. clang, libhiredis-dev).  Uses sudo when
# not root.  Does nothing when everything is already there.
set -eu
need=""
command -v cc >/dev/null 2>&1 || need="$need gcc"
command -v make >/dev/null 2>&1 || need="$need make"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
[ -f /usr/include/cmocka.h ] || need="$need libcmocka-dev"
for p in "$@"; do                      # extra packages asked for by a caller
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "scripts/deps.sh: installing$need" >&2
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
$sudo apt-get install -y -qq $need >/dev/null 2>&1 ||
    { $sudo apt-get update -qq >/dev/null && $sudo apt-get install -y -qq $need >/dev/null; }
