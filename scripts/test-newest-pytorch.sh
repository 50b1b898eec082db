#!/usr/bin/env bash
# `make test-newest-pytorch` (not in CI, not in `make test`): models from
# the newest PyTorch on PyPI, served by tch-scope on the project's libtorch.
#
# tch 0.26 stops at libtorch 2.13; PyTorch users export with newer
# releases. This:
#   1. finds the newest torch on PyPI (`pip index versions torch`; or
#      TCH_SCOPE_NEWEST_TORCH=2.15.0 to name one);
#   2. installs it once into ${XDG_CACHE_HOME:-~/.cache}/tch-scope/venv-torch-VERSION
#      (scripts/bootstrap-libtorch.sh, the same cached venv it would make
#      for that version: the PyPI wheel, about 4.7 GB with its CUDA wheels);
#   3. exports two models with it (scripts/export_newest.py: a `.pt2` with
#      the dynamic-batch recipe, a TorchScript file, the inputs and that
#      PyTorch's outputs) into target/newest-pytorch/VERSION-HASH/, kept
#      while the script and the torch are the same;
#   4. runs examples/newest_pytorch.rs, built against .libtorch (2.13), on
#      them: every answer bitwise that PyTorch's, or it fails.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
CARGO=${CARGO:-cargo}
say() { printf 'test-newest-pytorch: %s\n' "$*" >&2; }

# The project's own libtorch (for the Rust side) and its venv's pip (to ask
# PyPI).
bash scripts/bootstrap-libtorch.sh >/dev/null
project_python="$(realpath .libtorch)/../../../../bin/python"
project_torch=$(sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" .libtorch/version.py)

version=${TCH_SCOPE_NEWEST_TORCH:-}
if [ -z "$version" ]; then
  # "torch (2.15.0)" is its first line. Prereleases are not listed
  # without --pre.
  version=$("$project_python" -m pip index versions torch 2>/dev/null \
    | sed -n 's/^torch (\([^)]*\))$/\1/p' | head -n1)
  [ -n "$version" ] || { say "error: cannot ask PyPI for torch's versions (pip index versions torch)"; exit 1; }
fi
say "newest torch on PyPI: $version; the project's libtorch: $project_torch"

# Its own venv, keyed by the version; linked under target/ so that
# bootstrap-libtorch.sh leaves .libtorch alone. A LIBTORCH in the
# environment is the user's 2.13, not this one.
link=target/newest-pytorch/torch-$version
torch_dir=$(env -u LIBTORCH bash scripts/bootstrap-libtorch.sh "$version" "$repo/$link" | tail -n1)
python="$torch_dir/../../../../bin/python"

hash=$( (cat scripts/export_newest.py scripts/export_pt2.py; echo "$torch_dir") | cksum | cut -d' ' -f1)
out=target/newest-pytorch/$version-$hash
if [ ! -f "$out/cases.json" ]; then
  say "exporting with torch $version into $out (a C++ compile a model, about a minute each)"
  # torch.jit is deprecated from 2.15 (FutureWarning); numpy is not installed.
  "$python" -W ignore::FutureWarning -W ignore::UserWarning scripts/export_newest.py "$out"
fi

$CARGO build -p examples --example newest_pytorch
"${CARGO_TARGET_DIR:-target}/debug/examples/newest_pytorch" "$out"
say "ok: torch $version's .pt2 and TorchScript files answer in tch-scope on libtorch $project_torch as in torch $version"
