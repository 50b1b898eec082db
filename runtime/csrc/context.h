// C ABI of the shim's process-wide and thread-local context scopes: RNG
// state (rng.cpp), autocast (autocast.cpp), the profiler and named ranges
// (profile.cpp), anomaly detection and deterministic algorithms
// (global_modes.cpp), deadlines (deadline.cpp). Included by shim.h; calls returning a status catch
// every C++ exception (0 = ok, message in tch_scope_last_error()).
#pragma once
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- RNG (rng.cpp) -------------------------------------------------------
// Copies the state of the default CPU generator and of the default
// generator of the `n` CUDA devices in `devices` (every CUDA device when
// `n` < 0 and CUDA is the accelerator; a device not present is an error)
// into a heap object; `*state` gets it. Restore with tch_scope_rng_restore,
// free with tch_scope_rng_free.
int32_t tch_scope_rng_save(const int32_t* devices, int32_t n, void** state);
int32_t tch_scope_rng_restore(const void* state);
void tch_scope_rng_free(void* state);
// torch.manual_seed(seed) on the CPU generator and those of the CUDA
// devices chosen as for tch_scope_rng_save.
int32_t tch_scope_rng_seed(uint64_t seed, const int32_t* devices, int32_t n);

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
int32_t tch_scope_autocast_enter(int8_t device_type, int8_t dtype, bool enabled, int8_t cache,
                                 tch_scope_autocast_saved* saved);
// torch.autocast.__exit__: clears the cast cache when leaving the outermost
// autocast, then puts back what enter saved.
int32_t tch_scope_autocast_exit(int8_t device_type, const tch_scope_autocast_saved* saved);
int32_t tch_scope_autocast_get(int8_t device_type, bool* enabled, int8_t* dtype);
// torch.is_autocast_cache_enabled() (a thread-local flag; cannot fail).
bool tch_scope_autocast_cache_enabled(void);

// ---- profiler (profile.cpp), per thread ---------------------------------
// Kineto profiler on for this thread (CPU activities, plus CUDA if `cuda`).
int32_t tch_scope_profile_start(bool cuda);
// Stops it and writes a Chrome trace (JSON) to `path`.
int32_t tch_scope_profile_stop(const char* path);
// A user-scope at::RecordFunction named `name` (plus an NVTX range when
// libtorch_cuda is loaded); `*range` gets it, end it with
// tch_scope_record_end on the same thread.
int32_t tch_scope_record_begin(const char* name, void** range);
void tch_scope_record_end(void* range);

// ---- process-wide modes (global_modes.cpp) ------------------------------
void tch_scope_anomaly_get(bool* enabled, bool* check_nan);
void tch_scope_anomaly_set(bool enabled, bool check_nan);
void tch_scope_deterministic_get(bool* enabled, bool* warn_only);
int32_t tch_scope_deterministic_set(bool enabled, bool warn_only);

// ---- deadline (deadline.cpp), per thread ---------------------------------
typedef struct {
  int64_t at;
  int64_t budget;
  int64_t start;
  uint64_t trips;
  int64_t effective_at;
  bool included;
} tch_scope_deadline_saved;
// Opens a deadline `budget_ns` after `*start_ns` (steady clock; 0 = now,
// written back so that a future's later polls keep the same deadline).
// The earliest open deadline of the thread applies: from then on, every
// operator the thread calls throws "deadline of .. exceeded after .. at op".
int32_t tch_scope_deadline_enter(int64_t budget_ns, int64_t* start_ns,
                                 tch_scope_deadline_saved* saved);
void tch_scope_deadline_exit(const tch_scope_deadline_saved* saved);
// How many operators have failed on a deadline on this thread; `*trip_at`
// gets the deadline the last one passed.
uint64_t tch_scope_deadline_trips(int64_t* trip_at);
// The message of the last one ("" if none); valid until the next.
const char* tch_scope_deadline_trip_message(void);

#ifdef __cplusplus
}
#endif
