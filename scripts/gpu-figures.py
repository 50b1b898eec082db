"""The Python side of gpu-summary.txt (scripts/gpu-run.sh runs it with the
machine's python3): what this machine's PyTorch says for the same work as
tests/gpu.rs, as `GPU-FIGURE k=v ...` lines. Without CUDA: `GPU-SKIP`."""

import time

import torch

print(f"GPU-FIGURE python_torch={torch.__version__} torch_cuda={torch.version.cuda}")
if not torch.cuda.is_available():
    print("GPU-SKIP python_figures: no CUDA device")
    raise SystemExit(0)

dev = torch.device("cuda:0")
props = torch.cuda.get_device_properties(0)
name = props.name.replace(" ", "_")
print(f"GPU-FIGURE device={name} memory_bytes={props.total_memory} sms={props.multi_processor_count}")

# The same ten 8192^2 float32 matmuls as the `timed` test, timed by PyTorch.
a = torch.randn(8192, 8192, device=dev)
for _ in range(10):
    a @ a
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    a @ a
launched = time.perf_counter() - t0
torch.cuda.synchronize()
total = time.perf_counter() - t0
print(f"GPU-FIGURE python_matmuls=10x8192^2_f32 python_sync_ms={total * 1e3:.3f} python_launch_ms={launched * 1e3:.3f}")
del a
torch.cuda.synchronize()
torch.cuda.empty_cache()

# memory_allocated for the `gpu_memory_scope` test's 64 Mi float tensor.
before = torch.cuda.memory_allocated(0)
t = torch.ones(64 * 1024 * 1024, device=dev)
torch.cuda.synchronize()
print(f"GPU-FIGURE python_ones64Mi_f32_memory_allocated_bytes={torch.cuda.memory_allocated(0) - before}")
