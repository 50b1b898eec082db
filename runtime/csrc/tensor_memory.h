// C ABI of the `tensor_memory` scope (tensor_memory.cpp): bytes of tensor
// storage allocated and freed on this thread while the scope is open, on
// every device, as libtorch's allocators report them to the profiler.
// Included by shim.h; every call returns a status (0 = ok).
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// What one scope saw, in bytes. `net` starts at 0 at entry and moves with
// every allocation (+) and free (-) reported while the scope was open.
typedef struct {
  int64_t net;         // allocated - freed
  int64_t peak;        // highest `net` (>= 0)
  int64_t lowest;      // lowest `net` (<= 0: frees of older tensors)
  uint64_t allocated;  // sum of the allocations
  uint64_t freed;      // sum of the frees
  uint64_t devices;    // bit 0: cpu; bit 1 + i: cuda:i (i < 62); bit 63: other
  int64_t level;       // the thread's level after the scope (see `_enter`)
} tch_scope_tensor_memory_counts;

// Opens a scope on this thread; `*id` names it for the exit, `*level` is the
// thread's level at entry: the net bytes its tensor_memory scopes have
// counted since its first (the trace's counter track). Fails when a
// libtorch profiler other than tch-scope's own `profile` holds this
// thread's memory reports (see tensor_memory.cpp).
tch_scope_status tch_scope_tensor_memory_enter(uint64_t* id, int64_t* level);
// Closes the scope `id` of this thread (any order) and writes its counts.
tch_scope_status tch_scope_tensor_memory_exit(uint64_t id, tch_scope_tensor_memory_counts* out);

#ifdef __cplusplus
}  // extern "C"
// Mirrored by `Counts` in runtime/src/memory/tensor.rs, which checks the same.
static_assert(sizeof(tch_scope_tensor_memory_counts) == 56 &&
              alignof(tch_scope_tensor_memory_counts) == 8);
static_assert(offsetof(tch_scope_tensor_memory_counts, net) == 0 &&
              offsetof(tch_scope_tensor_memory_counts, peak) == 8 &&
              offsetof(tch_scope_tensor_memory_counts, lowest) == 16 &&
              offsetof(tch_scope_tensor_memory_counts, allocated) == 24 &&
              offsetof(tch_scope_tensor_memory_counts, freed) == 32 &&
              offsetof(tch_scope_tensor_memory_counts, devices) == 40 &&
              offsetof(tch_scope_tensor_memory_counts, level) == 48);

#include <c10/core/Device.h>

// For profile.cpp: libtorch's profiler and the scopes' reporter share one
// slot, PROFILER_STATE, and the profiler must own it while it runs.
namespace tch_scope::tensor_memory {
// Takes this thread's reporter out of the slot before a profiler starts;
// true when scopes are open (the profiler must then record memory).
bool lift();
// Puts the reporter back (the profiler did not start, or stopped), first
// counting `events` (size, device), in order, into the open scopes.
struct Event {
  int64_t size;
  c10::Device device;
};
void unlift(const Event* events, size_t n);
}  // namespace tch_scope::tensor_memory
#endif
