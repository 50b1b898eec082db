#!/usr/bin/env bash
# Usage: bootstrap-libtorch.sh [VERSION [LINK]]
#
# Finds or installs libtorch VERSION (default 2.13.0, what Cargo.lock's tch
# 0.26 needs) and links it at LINK (default <repo>/.libtorch, which
# .cargo/config.toml hands to torch-sys as LIBTORCH). `make test-oldest`
# asks for 2.11.0 (tch 0.24).
#
# Order of preference:
#   1. $LIBTORCH, if the user set it (must be VERSION).
#   2. An earlier bootstrap in ${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/venv-torch-VERSION.
#   3. A fresh install of the PyPI wheel torch==VERSION into a venv there.
# Prints the libtorch directory it settled on as its last line.
set -euo pipefail

want=${1:-2.13.0}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope"
venv="$cache/venv-torch-$want"
link=${2:-$repo/.libtorch}
case "$want" in
  2.11.*) tch=0.24 ;;
  2.12.*) tch=0.25 ;;
  2.13.*) tch=0.26 ;;
  *) tch="a tch release for libtorch $want" ;;
esac

say() { printf 'tch-scope bootstrap: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Reads the version of a libtorch tree: build-version (libtorch zip) or
# version.py (the Python wheel's torch/ folder).
libtorch_version() {
  local dir=$1
  if [ -f "$dir/build-version" ]; then
    sed -e 's/+.*//' "$dir/build-version" | head -n1
  elif [ -f "$dir/version.py" ]; then
    sed -n "s/^__version__ = '\([^'+]*\).*/\1/p" "$dir/version.py" | head -n1
  fi
}

check_tree() {
  local dir=$1 what=$2
  [ -d "$dir/lib" ] && [ -d "$dir/include" ] \
    || die "$what=$dir has no lib/ and include/; point it at a libtorch folder (the one holding lib/libtorch_cpu.so)"
  local v
  v=$(libtorch_version "$dir")
  [ -n "$v" ] || die "$what=$dir: cannot tell its version (no build-version or version.py)"
  [ "$v" = "$want" ] || die "$what=$dir is libtorch $v, but tch $tch needs $want exactly. Unset LIBTORCH to let this script install $want into $cache, or point LIBTORCH at a $want build."
}

link_to() {
  local dir=$1
  if [ "$(readlink "$link" 2>/dev/null || true)" != "$dir" ]; then
    mkdir -p "$(dirname "$link")"
    ln -sfn "$dir" "$link"
    say "linked $link -> $dir"
  fi
  echo "$dir"
}

# 1. The user's own libtorch. (.cargo/config.toml does not force LIBTORCH,
#    so a LIBTORCH in the environment also reaches torch-sys directly.)
if [ -n "${LIBTORCH:-}" ] && [ "$LIBTORCH" != "$link" ]; then
  check_tree "$LIBTORCH" LIBTORCH
  say "using LIBTORCH=$LIBTORCH"
  link_to "$(cd "$LIBTORCH" && pwd)"
  exit 0
fi

py() { "$venv/bin/python" "$@"; }
torch_dir() { py -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null; }

# 2. An earlier bootstrap.
if [ -x "$venv/bin/python" ] && dir=$(torch_dir) && [ -n "$dir" ]; then
  check_tree "$dir" "cached torch"
  link_to "$dir"
  exit 0
fi

# 3. Install the wheel.
command -v python3 >/dev/null || die "python3 not found; install python3 (with venv and pip) or set LIBTORCH to a libtorch $want folder"
mkdir -p "$cache"
say "installing torch==$want from PyPI into $venv (about 4.7 GB with its CUDA wheels; once per machine)"
python3 -m venv "$venv" >&2 || die "python3 -m venv failed; on Debian: apt-get install python3-venv"
# pip's progress goes to stderr: stdout carries only the final path.
"$venv/bin/python" -m pip install --progress-bar on "torch==$want" >&2 \
  || { rm -rf "$venv"; die "pip install torch==$want failed (see above); check network access to PyPI and free disk space in $cache, then rerun"; }
dir=$(torch_dir) || die "torch installed but does not import; remove $venv and rerun"
check_tree "$dir" "installed torch"
say "done"
link_to "$dir"
