// C ABI of the shim's process-wide and thread-local context scopes: RNG
// state (rng.cpp), autocast (autocast.cpp), the profiler and named ranges
// (profile.cpp), anomaly detection and deterministic algorithms
// (global_modes.cpp), deadlines (deadline.cpp), and a thread's whole
// state carried to another thread (context.cpp). Included by shim.h; calls returning a status catch
// every C++ exception (0 = ok, message in tch_scope_last_error()).
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- RNG (rng.cpp) -------------------------------------------------------
// Copies the state of the default CPU generator and of the default
// generator of the `n` CUDA devices in `devices` (every CUDA device when
// `n` < 0 and CUDA is the accelerator; a device not present is an error)
// into a heap object; `*state` gets it. Restore with tch_scope_rng_restore,
// free with tch_scope_rng_free.
tch_scope_status tch_scope_rng_save(const int32_t* devices, int32_t n, void** state);
tch_scope_status tch_scope_rng_restore(const void* state);
void tch_scope_rng_free(void* state);
// torch.manual_seed(seed) on the CPU generator and those of the CUDA
// devices chosen as for tch_scope_rng_save.
tch_scope_status tch_scope_rng_seed(uint64_t seed, const int32_t* devices, int32_t n);

// ---- autocast (autocast.cpp), per thread --------------------------------
// `device_type` is a c10::DeviceType (0 = CPU, 1 = CUDA), `dtype` a
// c10::ScalarType (5 = Half, 15 = BFloat16).
typedef struct {
  bool enabled;
  int8_t dtype;
  bool cache_enabled;
} tch_scope_autocast_saved;
// torch.autocast.__enter__: saves the previous flag, dtype and cache flag.
// `cache`: 1 or 0 sets the cast cache, -1 keeps the thread's setting.
tch_scope_status tch_scope_autocast_enter(int8_t device_type, int8_t dtype, bool enabled, int8_t cache,
                                          tch_scope_autocast_saved* saved);
// torch.autocast.__exit__: clears the cast cache when leaving the outermost
// autocast, then puts back what enter saved.
tch_scope_status tch_scope_autocast_exit(int8_t device_type, const tch_scope_autocast_saved* saved);
tch_scope_status tch_scope_autocast_get(int8_t device_type, bool* enabled, int8_t* dtype);
// torch.is_autocast_cache_enabled() (a thread-local flag; cannot fail).
bool tch_scope_autocast_cache_enabled(void);

// ---- profiler (profile.cpp), per thread ---------------------------------
// Kineto profiler on for this thread (CPU activities, plus CUDA if `cuda`),
// recording tensor allocations and frees if `memory` or a tensor_memory
// scope is open on the thread (profile_memory=True).
tch_scope_status tch_scope_profile_start(bool cuda, bool memory);
// Stops it and writes a Chrome trace (JSON) to `path`.
tch_scope_status tch_scope_profile_stop(const char* path);
// A user-scope at::RecordFunction named `name` (plus an NVTX range when
// libtorch_cuda is loaded); `*range` gets it, end it with
// tch_scope_record_end on the same thread.
tch_scope_status tch_scope_record_begin(const char* name, void** range);
void tch_scope_record_end(void* range);

// ---- process-wide modes (global_modes.cpp) ------------------------------
void tch_scope_anomaly_get(bool* enabled, bool* check_nan);
void tch_scope_anomaly_set(bool enabled, bool check_nan);
// Sets the mode; returns the one it found as bits (1 enabled, 2 check_nan).
uint32_t tch_scope_anomaly_swap(bool enabled, bool check_nan);
void tch_scope_deterministic_get(bool* enabled, bool* warn_only);
tch_scope_status tch_scope_deterministic_set(bool enabled, bool warn_only);
// Sets the flags; `*was` gets those found as bits (1 enabled, 2 warn_only).
tch_scope_status tch_scope_deterministic_swap(bool enabled, bool warn_only, uint32_t* was);

// ---- deadline (deadline.cpp), per thread ---------------------------------
typedef struct {
  int64_t at;
  int64_t budget;
  int64_t start;
  uint64_t trips;
  int64_t effective_at;
  bool included;
  bool instant;
} tch_scope_deadline_saved;
// Opens a deadline `budget_ns` after `*start_ns` (steady clock; 0 = now,
// written back so that a future's later polls keep the same deadline).
// The earliest open deadline of the thread applies: from then on, every
// operator the thread calls throws "deadline of .. exceeded after .. at op".
tch_scope_status tch_scope_deadline_enter(int64_t budget_ns, int64_t* start_ns,
                                          tch_scope_deadline_saved* saved);
// Opens a deadline at an instant: at the first entry (`*start_ns` == 0) it
// is `from_now_ns` from now (negative: already passed, so the next
// operator fails), written to `*at_ns`, and `*start_ns` gets the entry
// time; later entries reuse `*at_ns`. A refused operator throws "deadline
// passed .. ago at op".
tch_scope_status tch_scope_deadline_enter_until(int64_t from_now_ns, int64_t* at_ns, int64_t* start_ns,
                                                tch_scope_deadline_saved* saved);
// Puts back what enter saved, passed field by field: in registers (read
// through a pointer, the guard's words, which Rust had just moved in 16-byte
// stores, stalled the wide load the copy compiled to).
void tch_scope_deadline_exit(int64_t at, int64_t budget, int64_t start, bool instant,
                             bool included);
// How many operators have failed on a deadline on this thread; `*trip_at`
// gets the deadline the last one passed.
uint64_t tch_scope_deadline_trips(int64_t* trip_at);
// The message of the last one ("" if none); valid until the next.
const char* tch_scope_deadline_trip_message(void);

// ---- a thread's state for another thread (context.cpp) -------------------
// Copies the calling thread's at::ThreadLocalState (grad mode and the other
// autograd flags, the TLS dispatch-key sets, which hold inference mode, the
// autocast flags and an open deadline's key, the autocast dtypes, debug
// info and RecordFunction TLS), its autocast cast-cache flag and its open
// deadline into a heap object, `*ctx`. Read only from then on: any number
// of threads may enter it at once. Free it with tch_scope_context_free, on
// any thread, once no thread is inside it.
tch_scope_status tch_scope_context_capture(void** ctx);
void tch_scope_context_free(void* ctx);
// What a captured state says, for its accessors: `*deadline_at` gets its
// deadline (steady-clock ns; INT64_MAX: none) and `*now` the clock now.
void tch_scope_context_info(const void* ctx, bool* grad, bool* inference, int64_t* deadline_at,
                            int64_t* now);
// Makes the captured state the calling thread's (at::ThreadLocalStateGuard)
// and `*entered` what puts this thread's own back: pass it to
// tch_scope_context_exit on this thread, last in, first out with every
// other scope entered inside.
tch_scope_status tch_scope_context_enter(const void* ctx, void** entered);
// Puts back the thread's own state and frees `entered`, whatever the
// status; a failure (clearing autocast's cast cache) is only reported.
tch_scope_status tch_scope_context_exit(void* entered);

#ifdef __cplusplus
}  // extern "C"
// Mirrored by `Saved` in runtime/src/scopes/autocast.rs and
// runtime/src/scopes/deadline.rs, which check the same.
static_assert(sizeof(tch_scope_autocast_saved) == 3 && alignof(tch_scope_autocast_saved) == 1);
static_assert(offsetof(tch_scope_autocast_saved, enabled) == 0 &&
              offsetof(tch_scope_autocast_saved, dtype) == 1 &&
              offsetof(tch_scope_autocast_saved, cache_enabled) == 2);
static_assert(sizeof(tch_scope_deadline_saved) == 48 && alignof(tch_scope_deadline_saved) == 8);
static_assert(offsetof(tch_scope_deadline_saved, at) == 0 &&
              offsetof(tch_scope_deadline_saved, budget) == 8 &&
              offsetof(tch_scope_deadline_saved, start) == 16 &&
              offsetof(tch_scope_deadline_saved, trips) == 24 &&
              offsetof(tch_scope_deadline_saved, effective_at) == 32 &&
              offsetof(tch_scope_deadline_saved, included) == 40 &&
              offsetof(tch_scope_deadline_saved, instant) == 41);
#endif
