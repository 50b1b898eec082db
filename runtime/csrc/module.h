// C ABI of TorchScript module modes (module.cpp). Included by shim.h.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// `module` is a torch::jit::Module* (tch's CModule pointer, torch-sys's
// `module` typedef). The modes are one flag per module, in modules() order:
// the module itself, then its submodules depth-first. A `saved` handle
// holds each module (a strong reference) with its flag.
// Saves every module's own flag into `*saved`; changes nothing.
tch_scope_status tch_scope_module_save(void* module, void** saved);
// Saves like tch_scope_module_save, then sets every module to `on`, walking
// the modules once. On failure nothing changed and `*saved` is untouched.
tch_scope_status tch_scope_module_enter(void* module, bool on, void** saved);
// Module::train(on): the module and every submodule.
tch_scope_status tch_scope_module_set_training(void* module, bool on);
// Puts each saved flag back on its own module. Does not free `saved`.
tch_scope_status tch_scope_module_leave(const void* saved);
// Copies min(n, cap) saved flags (1 = training) to `out`; returns n.
size_t tch_scope_module_saved_modes(const void* saved, uint8_t* out, size_t cap);
// Frees a handle (once).
void tch_scope_module_saved_free(void* saved);

#ifdef __cplusplus
}  // extern "C"
#endif
