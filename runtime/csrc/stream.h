// CUDA streams and events (stream.cpp), through c10's device-generic
// Stream, Event and guard interface: no CUDA header is needed, and every
// call fails cleanly (status 1) where libtorch_cuda is absent.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// c10::Stream::pack3 of a CUDA stream.
typedef struct {
  int64_t id;
  int8_t device;
} tch_scope_stream;

// A stream of `device`: from the pool (round-robin, as
// torch.cuda.Stream()), the thread's current one, or the default one.
tch_scope_status tch_scope_stream_pool(int8_t device, bool high_priority, tch_scope_stream* out);
tch_scope_status tch_scope_stream_current(int8_t device, tch_scope_stream* out);
tch_scope_status tch_scope_stream_default(int8_t device, tch_scope_stream* out);
// CUDAStreamGuard: makes the stream's device current and the stream
// current on it; `previous_*` get what leave puts back.
tch_scope_status tch_scope_stream_enter(tch_scope_stream s, int8_t* previous_device,
                                        tch_scope_stream* previous_stream);
tch_scope_status tch_scope_stream_leave(int8_t previous_device, tch_scope_stream previous_stream);
tch_scope_status tch_scope_stream_synchronize(tch_scope_stream s);
tch_scope_status tch_scope_stream_query(tch_scope_stream s, bool* done);
// torch.cuda.Stream.wait_stream: work queued on `waiter` from now on waits
// for the work queued on `other` so far.
tch_scope_status tch_scope_stream_wait(tch_scope_stream waiter, tch_scope_stream other);

// A CUDA event with timing (torch.cuda.Event(enable_timing=True)).
tch_scope_status tch_scope_event_new(void** event);
void tch_scope_event_free(void* event);
tch_scope_status tch_scope_event_record(void* event, int64_t id, int8_t device);
tch_scope_status tch_scope_event_synchronize(const void* event);
tch_scope_status tch_scope_event_query(const void* event, bool* done);
// Milliseconds from `start` to `end`, both recorded; waits for `end`.
tch_scope_status tch_scope_event_elapsed(const void* start, const void* end, double* ms);

#ifdef __cplusplus
}  // extern "C"
// Mirrored by `Raw` in runtime/src/cuda/stream.rs, which checks the same.
static_assert(sizeof(tch_scope_stream) == 16 && alignof(tch_scope_stream) == 8);
static_assert(offsetof(tch_scope_stream, id) == 0 && offsetof(tch_scope_stream, device) == 8);
#endif
