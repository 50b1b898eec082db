// C ABI of the distributed part of the shim (distributed.cpp): a c10d
// process group over a TCPStore, set up exactly as PyTorch's
// init_process_group does, so Rust and Python ranks can share one group.
// Every call that can fail returns a status (see common.h).
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tch_scope_dist_group tch_scope_dist_group;

// Which backends this build of the shim has (1 = yes): 0 = gloo, 1 = nccl.
int32_t tch_scope_dist_has_backend(int32_t backend);

// Joins a group: the TCPStore on host:port (served by this process when
// `store_server`), PrefixStore("default_pg") -> "0/" -> "cpu/", then
// ProcessGroupGloo (backend 0), or "cuda/" and ProcessGroupNCCL (backend 1,
// when built with it). Blocks until every rank has joined or `timeout_ms`
// passes; the same timeout bounds every later collective. A non-empty
// `prefix` goes before "default_pg" (a restarted torchrun group's attempt).
tch_scope_status tch_scope_dist_init(int32_t backend, const char* host, uint16_t port,
                                     int32_t rank, int32_t world_size, bool store_server,
                                     const char* prefix, int64_t timeout_ms,
                                     tch_scope_dist_group** out);
// Destroys the group, then the store. Cannot fail; null is a no-op.
void tch_scope_dist_free(tch_scope_dist_group* group);

// Tensors are tch's `C_tensor` (an at::Tensor*). Non-contiguous tensors are
// reduced through a contiguous copy that is copied back.
// op: 0 = sum, 1 = max, 2 = min, 3 = product.
tch_scope_status tch_scope_dist_all_reduce(tch_scope_dist_group* group, void* tensor, int32_t op);
tch_scope_status tch_scope_dist_broadcast(tch_scope_dist_group* group, void* tensor, int32_t root);
// `outputs` holds `n` (= world size) tensors shaped like `input`.
tch_scope_status tch_scope_dist_all_gather(tch_scope_dist_group* group, void* input,
                                           void* const* outputs, size_t n);
tch_scope_status tch_scope_dist_barrier(tch_scope_dist_group* group);

#ifdef __cplusplus
}
#endif
