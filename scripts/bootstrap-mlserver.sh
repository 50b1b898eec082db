#!/usr/bin/env bash
# Installs MLServer (Seldon's inference server, the Open Inference Protocol,
# adaptive batching) into a venv of its own, cached per machine in
# ${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/venv-mlserver-VERSION, for the
# comparison `make load` runs (scripts/mlserver_runtime.py, docs/serving.md).
# Only `make load` calls it; `make test` never installs MLServer.
#
# Pinned: mlserver 1.7.1 with uvloop<0.21 (with a newer uvloop its parallel
# workers die at start). `pip install mlserver==1.7.1` brings no torch; the
# runtime takes the bootstrap's PyTorch (the oracle's own 2.13.0, the same
# build the other servers' answers are checked against) through a .pth file
# that appends the bootstrap venv's site-packages after this venv's own, so
# MLServer's pinned dependencies win and no second 4.7 GB torch is
# downloaded. A no-op when the venv is there and imports. Prints the venv's
# `mlserver` binary on stdout.
set -euo pipefail

MLSERVER=1.7.1
UVLOOP="uvloop<0.21"

here="$(cd "$(dirname "$0")" && pwd)"
torch_py="${TCH_SCOPE_PYTHON:-$(readlink -f "$here/../.libtorch")/../../../../bin/python}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope"
venv="$cache/venv-mlserver-$MLSERVER"
py="$venv/bin/python"

say() { echo "bootstrap-mlserver: $*" >&2; }
die() { say "$*"; exit 1; }

ok() {
    "$py" - "$MLSERVER" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
import mlserver, mlserver.codecs, torch, uvloop  # noqa: F401
sys.exit(0 if version("mlserver") == sys.argv[1] and version("uvloop") < "0.21" else 1)
PYEOF
}

if [ -x "$py" ] && [ -x "$venv/bin/mlserver" ] && ok; then
    echo "$venv/bin/mlserver"
    exit 0
fi

command -v python3 >/dev/null || die "python3 not found; install python3 (with venv and pip)"
[ -x "$torch_py" ] || die "no bootstrap PyTorch at $torch_py; run 'make libtorch' first"
torch_site="$("$torch_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    || die "cannot ask $torch_py for its site-packages"
say "installing mlserver==$MLSERVER '$UVLOOP' from PyPI into $venv (once per machine)"
rm -rf "$venv"
mkdir -p "$cache" || die "cannot create $cache; set XDG_CACHE_HOME to a writable folder"
python3 -m venv "$venv" >&2 || die "python3 -m venv failed; on Debian: apt-get install python3-venv"
"$py" -m pip install --quiet --disable-pip-version-check \
    "mlserver==$MLSERVER" "$UVLOOP" >&2 \
    || { rm -rf "$venv"; die "pip install mlserver==$MLSERVER failed (see above); check network access to PyPI"; }
own_site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$torch_site" >"$own_site/zz-tch-scope-torch.pth"
ok || { rm -rf "$venv"; die "mlserver installed but it, or torch from $torch_site, does not import; rerun"; }
echo "$venv/bin/mlserver"
