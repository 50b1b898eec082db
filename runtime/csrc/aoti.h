// AOTInductor packages (`.pt2`): loaded with libtorch's
// torch::inductor::AOTIModelPackageLoader and run (aoti.cpp). Under the
// shim's status convention: no C++ exception crosses the ABI.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// A loaded package (the loader and what was read from it at load).
typedef struct tch_scope_aoti tch_scope_aoti;

// Loads the package at `path` (a `.pt2` file or an unpacked folder), model
// `model_name` ("model" by default in PyTorch), with `num_runners` model
// instances (>= 1: that many runs at once; more callers wait). Refuses a
// package compiled for a device this process has none of. Not safe to call
// from two threads at once: the Rust side holds a process-wide lock.
tch_scope_status tch_scope_aoti_load(const char* path, const char* model_name,
                                     size_t num_runners, tch_scope_aoti** out);

// Frees a package from tch_scope_aoti_load (null is fine). Same lock.
void tch_scope_aoti_free(tch_scope_aoti* pkg);

// The number of tensor inputs and outputs of one run.
size_t tch_scope_aoti_num_inputs(const tch_scope_aoti* pkg);
size_t tch_scope_aoti_num_outputs(const tch_scope_aoti* pkg);

// The package's metadata as "key=value" lines, sorted by key; the string
// lives as long as `pkg`.
const char* tch_scope_aoti_metadata(const tch_scope_aoti* pkg);

// The source of the package's generated input check (its check_input_<i>
// functions, read from the wrapper source it ships), or "" when none was
// found; the string lives as long as `pkg`.
const char* tch_scope_aoti_input_checks(const tch_scope_aoti* pkg);

// Runs the package on `n_inputs` tensors (`at::Tensor*`, tch's C_tensor;
// only read). `n_inputs` must be tch_scope_aoti_num_inputs(pkg). Writes
// tch_scope_aoti_num_outputs(pkg) new `at::Tensor*` into `outputs` (to be
// freed as tch frees its tensors). Safe from many threads at once. Enters
// the operator `tch_scope::aoti_run` first, so an open `deadline` that has
// passed refuses the run before it starts (a CPU package's own code calls
// no dispatched operator: nothing else inside the run is checked). What the
// package writes to std::cerr during the run does not reach stderr when
// the run fails: its error line becomes the status's message (without the
// C++ backtrace a c10::Error's text ends with); other writes are passed on
// after the run.
tch_scope_status tch_scope_aoti_run(tch_scope_aoti* pkg, void* const* inputs, size_t n_inputs,
                                    void** outputs);

#ifdef __cplusplus
}  // extern "C"
#endif
