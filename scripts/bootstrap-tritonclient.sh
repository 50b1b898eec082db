#!/usr/bin/env bash
# Installs Triton's Python client, `tritonclient[http]` (pure Python, with
# numpy), into a venv of its own, cached per machine in
# ${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/venv-tritonclient-VERSION. The
# Open Inference Protocol tests use its request and response builders as the
# oracle of the codec (tests/oip.rs), without a server. Pinned; a no-op when
# the venv is there and imports. Prints the venv's python on stdout.
set -euo pipefail

TRITONCLIENT=2.73.0
NUMPY=2.4.6

cache="${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope"
venv="$cache/venv-tritonclient-$TRITONCLIENT"
py="$venv/bin/python"

say() { echo "bootstrap-tritonclient: $*" >&2; }
die() { say "$*"; exit 1; }

ok() {
    "$py" - "$TRITONCLIENT" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
import numpy, tritonclient.http  # noqa: F401
sys.exit(0 if version("tritonclient") == sys.argv[1] else 1)
PYEOF
}

if [ -x "$py" ] && ok; then
    echo "$py"
    exit 0
fi

command -v python3 >/dev/null || die "python3 not found; install python3 (with venv and pip)"
say "installing tritonclient[http]==$TRITONCLIENT numpy==$NUMPY from PyPI into $venv (once per machine)"
rm -rf "$venv"
mkdir -p "$cache" || die "cannot create $cache; set XDG_CACHE_HOME to a writable folder"
python3 -m venv "$venv" >&2 || die "python3 -m venv failed; on Debian: apt-get install python3-venv"
"$py" -m pip install --quiet --disable-pip-version-check \
    "tritonclient[http]==$TRITONCLIENT" "numpy==$NUMPY" >&2 \
    || { rm -rf "$venv"; die "pip install tritonclient[http]==$TRITONCLIENT failed (see above); check network access to PyPI"; }
ok || { rm -rf "$venv"; die "tritonclient installed but does not import; rerun"; }
echo "$py"
