#!/usr/bin/env bash
# Completes the CUDA headers of the bootstrap's torch wheel so that c10d's
# ProcessGroupNCCL.hpp compiles (the `distributed(backend = nccl)` scope).
#
# Why: the wheel pulls nvidia-cuda-runtime (cuda_runtime.h) and nvidia-nccl
# (nccl.h), but cuda_runtime.h includes crt/host_config.h and cuda_fp16.h
# includes <nv/target>; those ship in NVIDIA's nvidia-cuda-crt (≈130 kB)
# and nvidia-cuda-cccl (≈3 MB) wheels. This installs them, --no-deps, into
# the same venv, at the CUDA version of its nvidia-cuda-runtime. Headers
# only: nothing new is linked (ProcessGroupNCCL lives in libtorch_cuda.so).
#
# Does nothing when the libtorch found has no CUDA, or is not the
# bootstrap's venv (set TCH_SCOPE_CUDA_INCLUDE for a libtorch of your own;
# see runtime/build/distributed.rs). Never fails the build.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'tch-scope bootstrap (cuda headers): %s\n' "$*" >&2; }

torch=$(cd "$repo/.libtorch" 2>/dev/null && pwd -P) || exit 0
[ -e "$torch/lib/libtorch_cuda.so" ] || exit 0
nvidia="$torch/../nvidia"
pip="$torch/../../../../bin/pip"
[ -x "$pip" ] && [ -f "$nvidia/nccl/include/nccl.h" ] || exit 0
include=$(ls -d "$nvidia"/cu*/include 2>/dev/null | head -n1) || exit 0
[ -n "$include" ] && [ -f "$include/cuda_runtime.h" ] || exit 0
if [ -f "$include/crt/host_config.h" ] && [ -f "$include/nv/target" ]; then
  exit 0
fi

version=$("$pip" show nvidia-cuda-runtime 2>/dev/null | sed -n 's/^Version: \([0-9]*\.[0-9]*\).*/\1/p')
if [ -z "$version" ]; then
  say "no nvidia-cuda-runtime in the venv; building without the nccl backend"
  exit 0
fi
say "installing nvidia-cuda-crt and nvidia-cuda-cccl $version.* (CUDA headers, about 3 MB) for the nccl backend"
if ! "$pip" install --quiet --no-deps --disable-pip-version-check \
  "nvidia-cuda-crt==$version.*" "nvidia-cuda-cccl==$version.*" >&2; then
  say "could not install them; building without the nccl backend (gloo is unaffected)"
fi
exit 0
