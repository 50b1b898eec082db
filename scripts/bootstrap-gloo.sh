#!/usr/bin/env bash
# Finds or fetches gloo's C++ headers and links them at <repo>/.gloo, which
# .cargo/config.toml hands to runtime/build.rs as TCH_SCOPE_GLOO_INCLUDE.
#
# Why: the torch wheel's libtorch_cpu.so contains c10d's ProcessGroupGloo,
# but the wheel ships no gloo headers, and ProcessGroupGloo.hpp includes
# them. Debian's libgloo-dev headers are enough to compile against it;
# nothing of Debian's gloo is linked (the symbols come from libtorch).
#
# Order of preference:
#   1. $TCH_SCOPE_GLOO_INCLUDE, if set (a folder holding gloo/config.h).
#   2. A system-wide /usr/include/gloo or /usr/local/include/gloo
#      (`apt-get install libgloo-dev`): runtime/build/distributed.rs looks
#      there by itself, so nothing is linked.
#   3. An earlier fetch in ${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/gloo/.
#   4. `apt-get download libgloo-dev` (no root needed once apt's package
#      lists exist; as root it runs `apt-get update` when they don't), then
#      `dpkg-deb -x` into that cache.
# Never fails itself: without headers it says so, and the workspace's build
# (whose tests and examples turn tch-scope's `distributed` feature on) then
# fails saying what to install.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/gloo"
link="$repo/.gloo"

say() { printf 'tch-scope bootstrap (gloo): %s\n' "$*" >&2; }

link_to() {
  if [ "$(readlink "$link" 2>/dev/null || true)" != "$1" ]; then
    ln -sfn "$1" "$link"
    say "linked $link -> $1"
  fi
  exit 0
}

has_headers() { [ -f "$1/gloo/config.h" ] && [ -f "$1/gloo/rendezvous/store.h" ]; }

if [ -n "${TCH_SCOPE_GLOO_INCLUDE:-}" ] && [ "$TCH_SCOPE_GLOO_INCLUDE" != "$link" ]; then
  has_headers "$TCH_SCOPE_GLOO_INCLUDE" \
    || { say "TCH_SCOPE_GLOO_INCLUDE=$TCH_SCOPE_GLOO_INCLUDE has no gloo/config.h; ignoring it"; }
  has_headers "$TCH_SCOPE_GLOO_INCLUDE" && link_to "$(cd "$TCH_SCOPE_GLOO_INCLUDE" && pwd)"
fi

for dir in /usr/include /usr/local/include; do
  if has_headers "$dir"; then
    rm -f "$link"
    exit 0
  fi
done

has_headers "$cache/usr/include" && link_to "$cache/usr/include"

fetch() {
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || return 1
  if ! apt-cache show libgloo-dev >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { say "apt has no package lists (run 'sudo apt-get update' once)"; return 1; }
    say "apt-get update (package lists are missing)"
    apt-get update -qq >&2 || return 1
  fi
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  (cd "$tmp" && apt-get download -qq libgloo-dev >&2 2>/dev/null) || return 1
  mkdir -p "$cache"
  dpkg-deb -x "$tmp"/libgloo-dev_*.deb "$cache" || return 1
  has_headers "$cache/usr/include"
}

say "fetching gloo headers (Debian's libgloo-dev, about 50 kB) into $cache"
if fetch; then
  link_to "$cache/usr/include"
fi

say "no gloo headers found: the build will fail (tch-scope's \`distributed\` feature is on"
say "in the workspace). Install them with \`apt-get install libgloo-dev\`, or set"
say "TCH_SCOPE_GLOO_INCLUDE to a folder containing gloo/, and rerun make."
rm -f "$link"
