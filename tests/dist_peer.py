# A PyTorch rank for tests/distributed.rs: joins the group with PyTorch's
# own init_process_group("gloo", env://) and runs the same collectives, in
# the same order, as the Rust worker's "interop" scenario, printing results
# in the same format.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=30))
r, n = dist.get_rank(), dist.get_world_size()

t = torch.tensor([float(r + 1), 10.0 * (r + 1)], dtype=torch.float32)
dist.all_reduce(t)
print("SUM", t.tolist(), flush=True)

m = torch.tensor([float(r), -float(r)], dtype=torch.float64)
dist.all_reduce(m, op=dist.ReduceOp.MAX)
print("MAX", m.tolist(), flush=True)

b = torch.tensor([r * 100 + 7], dtype=torch.int64)
dist.broadcast(b, src=n - 1)
print("BCAST", b.tolist(), flush=True)

g = [torch.zeros(2, dtype=torch.float32) for _ in range(n)]
dist.all_gather(g, torch.tensor([float(r), float(r * r)], dtype=torch.float32))
print("GATHER", [x.tolist() for x in g], flush=True)

dist.barrier()
dist.destroy_process_group()
print("DONE", flush=True)
