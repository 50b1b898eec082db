#!/usr/bin/env bash
# Installs ccache when it is missing and we are root (Debian's package), so
# that the C and C++ compiled by cc-rs (torch-sys's bindings, tch-scope's
# shim, zstd-sys and bzip2-sys) is compiled once per machine: `make test`
# builds it in four places (the workspace, clippy, trybuild's own target
# dir, the downstream crate's), and every one after the first is a cache
# hit. scripts/cxx and scripts/cc use ccache when it is there and the plain
# compiler when it is not: this is a speed-up, never a requirement, so this
# script never fails.
set -uo pipefail

say() { printf 'tch-scope bootstrap (ccache): %s\n' "$*" >&2; }

command -v ccache >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "not installed; C++ is compiled without a cache (apt-get install ccache to speed up rebuilds)"
  exit 0
fi
if ! apt-cache show ccache >/dev/null 2>&1; then
  say "apt-get update (package lists are missing)"
  apt-get update -qq >&2 || true
fi
say "installing Debian's ccache"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ccache >/dev/null 2>&1 \
  || say "could not install it; C++ is compiled without a cache"
exit 0
