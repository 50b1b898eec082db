#!/usr/bin/env bash
# Finds or fetches `promtool` (Debian's `prometheus` package) for the
# /metrics check of tests/serve.rs, and prints its path.
#
# 1. `promtool` on PATH;
# 2. one extracted earlier under ${XDG_CACHE_HOME:-~/.cache}/tch-scope/promtool;
# 3. otherwise, without root: `apt-get download prometheus` (only the .deb,
#    into a temporary folder) and `dpkg-deb -x` into that cache. Needs apt's
#    package lists; as root, refreshes them once if the download fails.
#
# Exits 1 with the reason when none of these works; tests/serve.rs then
# skips its promtool check and prints that reason.
set -euo pipefail

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/promtool"
BIN="$CACHE/usr/bin/promtool"

if command -v promtool >/dev/null 2>&1; then
    command -v promtool
    exit 0
fi
if [ -x "$BIN" ]; then
    echo "$BIN"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "bootstrap-promtool: no $tool (not a Debian system): install promtool and put it on PATH" >&2
        exit 1
    fi
done

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
download() { (cd "$TMP" && apt-get download -qq prometheus >/dev/null 2>&1); }
if ! download; then
    if [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && download; then
        :
    else
        echo "bootstrap-promtool: apt-get download prometheus failed (no package lists or no network?)" >&2
        exit 1
    fi
fi
mkdir -p "$CACHE"
dpkg-deb -x "$TMP"/prometheus_*.deb "$TMP/x"
install -D -m 0755 "$TMP/x/usr/bin/promtool" "$BIN"
echo "bootstrap-promtool: extracted promtool into $CACHE" >&2
echo "$BIN"
