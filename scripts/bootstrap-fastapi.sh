#!/usr/bin/env bash
# Installs FastAPI and uvicorn (with its standard extras: uvloop, httptools,
# as `pip install "uvicorn[standard]"` deploys it) into the bootstrap's
# PyTorch venv, for the Python server `make load` runs beside ours
# (scripts/serve_fastapi.py, docs/serving.md). Pinned; a no-op when they are
# there. Prints the venv's python.
set -euo pipefail

PY="${TCH_SCOPE_PYTHON:-$(readlink -f "$(dirname "$0")/../.libtorch")/../../../../bin/python}"
FASTAPI=0.165.0
UVICORN=0.55.0

if ! "$PY" - "$FASTAPI" "$UVICORN" <<'PYEOF' 2>/dev/null; then
import sys
from importlib.metadata import version
import uvloop, httptools  # noqa: F401  (the standard extras)
sys.exit(0 if (version("fastapi"), version("uvicorn")) == tuple(sys.argv[1:3]) else 1)
PYEOF
    echo "bootstrap-fastapi: installing fastapi==$FASTAPI uvicorn[standard]==$UVICORN into $(dirname "$PY")/.." >&2
    "$PY" -m pip install --quiet --disable-pip-version-check \
        "fastapi==$FASTAPI" "uvicorn[standard]==$UVICORN" >&2
fi
echo "$PY"
