#!/usr/bin/env bash
# GPU checks, one command, on a machine with a CUDA device (CI has none):
#   bash scripts/gpu-check.sh
# Builds the project against the bootstrap's CUDA libtorch and runs
#  - the linkage check (libtorch_cuda stays loaded in every binary),
#  - tests/gpu.rs: CUDA available, device(0) scopes, `timed` with and
#    without sync around large matmuls, gpu_memory_scope against
#    torch.cuda.memory_allocated() from the same PyTorch, and
#    distributed(backend = nccl) collectives on CUDA tensors,
#  - the CUDA branches of the other suites (seed on CUDA generators, the
#    device and memory errors), which also run on CPU-only machines.
# About 5 minutes after the first build on one GPU. For a GPU machine
# without network or Rust see `make gpu-bundle` and scripts/gpu-run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash scripts/bootstrap-libtorch.sh >/dev/null
bash scripts/bootstrap-gloo.sh
bash scripts/bootstrap-cuda-headers.sh
venv=$(cd .libtorch/../../../.. && pwd)
export TCH_SCOPE_PYTHON="${TCH_SCOPE_PYTHON:-$venv/bin/python}"

"$TCH_SCOPE_PYTHON" -c 'import torch; assert torch.cuda.is_available(), "PyTorch sees no CUDA device"; print("python: torch", torch.__version__, torch.cuda.get_device_name(0))'
# PyTorch sees the GPU: a CUDA test that finds none fails instead of
# skipping (tests/bundle.rs).
export TCH_SCOPE_EXPECT_CUDA=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

cargo build --workspace --all-targets
bash scripts/check-linkage.sh
cargo test -p tch-scope-tests --test gpu -- --ignored --test-threads 1 --nocapture
cargo test -p tch-scope-tests --test integration device
cargo test -p tch-scope-tests --test integration distributed
cargo test -p tch-scope-tests --test memory
cargo test -p tch-scope-tests --test process_wide seed

echo "gpu-check: all passed in $(( $(date +%s) - start )) s"
