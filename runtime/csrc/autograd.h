// C ABI of custom autograd functions written in Rust (autograd.cpp):
// a node of libtorch's autograd graph (a `torch::autograd::CppNode`
// subclass) whose backward calls back into Rust, the engine call the Rust
// side needs (`torch::autograd::grad`), and recompute's graph surgery (its
// frontier and its cut inputs). Tensors
// cross as tch's handles (`at::Tensor*`); a handle this shim returns is a
// new heap object the caller owns (tch's `Tensor::from_ptr`). Calls
// returning a status catch every C++ exception (0 = ok, message in
// tch_scope_last_error()).
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// Rust's half of a node, called from the node's `apply` (the engine, on
// any thread): `state` is what tch_scope_autograd_finish got, `grads` the
// `n` gradients of the outputs (new handles the callee owns; undefined
// where a gradient is absent and materializing is off), `out` where the
// results go (tch_scope_autograd_out_push / _fail). Returns 0 on success,
// else the message given to tch_scope_autograd_out_fail becomes the
// c10::Error the engine hands to the caller of backward. Must not unwind.
typedef int32_t (*tch_scope_autograd_backward_fn)(const void* state, void* const* grads, size_t n,
                                                   void* out);
// Drops Rust's state when the node is freed (on any thread). Must not unwind.
typedef void (*tch_scope_autograd_drop_fn)(void* state);

// Starts applying a function named `name` to `n` inputs: makes its node,
// connects it to the inputs' graph when grad mode is on and an input
// requires grad (`*executable`), and returns it in `*node` (a reference
// the caller gives back with tch_scope_autograd_node_free). The caller
// runs the forward with grad mode off, using the node's context.
tch_scope_status tch_scope_autograd_begin(const char* name, void* const* inputs, size_t n, void** node,
                                          bool* executable);
// Ends the apply: the node takes `state` (freed through `drop` with the
// node, whatever happens), wraps the `n` outputs (each an output of the
// node where executable; marked non-differentiable or dirty inputs as the
// context says) and saves the tensors saved for backward. `wrapped` gets
// `n` new handles.
tch_scope_status tch_scope_autograd_finish(void* node, void* const* outputs, size_t n, void* state,
                                           tch_scope_autograd_backward_fn backward,
                                           tch_scope_autograd_drop_fn drop, void** wrapped);
// Gives back the reference tch_scope_autograd_begin returned.
void tch_scope_autograd_node_free(void* node);

// The context (AutogradContext) of a node, in forward.
tch_scope_status tch_scope_autograd_save_for_backward(void* node, void* const* tensors, size_t n);
tch_scope_status tch_scope_autograd_mark_dirty(void* node, void* const* tensors, size_t n);
tch_scope_status tch_scope_autograd_mark_non_differentiable(void* node, void* const* tensors, size_t n);
void tch_scope_autograd_set_materialize_grads(void* node, bool value);
// In forward and backward: whether input `i` needs a gradient.
tch_scope_status tch_scope_autograd_needs_input_grad(const void* node, size_t i, bool* out);
// The tensors saved for backward (checked against in-place changes):
// `*n` gets their count and, when at most `cap`, `out` new handles
// (undefined ones for undefined saved tensors).
tch_scope_status tch_scope_autograd_saved(const void* node, void** out, size_t cap, size_t* n);

// For the backward callback: appends a gradient (`tensor` NULL: none).
tch_scope_status tch_scope_autograd_out_push(void* out, const void* tensor);
// For the backward callback: the error message (`len` bytes, UTF-8).
void tch_scope_autograd_out_fail(void* out, const char* msg, size_t len);

// torch::autograd::grad(outputs, inputs, grad_outputs, retain_graph,
// create_graph, allow_unused = true): `out` gets `n_inputs` new handles
// (undefined where an input was not reached).
tch_scope_status tch_scope_autograd_grad(void* const* outputs, void* const* grad_outputs, size_t n_outputs,
                                         void* const* inputs, size_t n_inputs, bool retain_graph,
                                         bool create_graph, void** out);

// Recompute (autograd/recompute.rs).
// The autograd sequence number the next node made on this thread gets.
uint64_t tch_scope_autograd_sequence_peek(void);
// The edges by which a body's graph leaves it: from the `n_outputs` outputs'
// graph, walking the nodes whose sequence number is in [first, end) (those
// the body made on this thread), every edge to another node, except to the
// accumulators of the `n_inputs` inputs. Each becomes a tensor whose
// gradient edge it is (a captured leaf itself, else a stand-in with the
// metadata the node expects): `*list` gets them, `*n` their count, for
// tch_scope_tensor_list_take.
tch_scope_status tch_scope_recompute_frontier(void* const* outputs, size_t n_outputs, void* const* inputs,
                                              size_t n_inputs, uint64_t first, uint64_t end, void** list,
                                              size_t* n);
// Moves a list's tensors into `out` (as many new handles as its count) and
// frees it.
void tch_scope_tensor_list_take(void* list, void** out);
// The inputs of a recomputation: `out` gets `n` new handles, each input
// detached. Without `create_graph` those that require grad are leaves; with
// it, each has an identity node into the input's own graph as grad_fn,
// which passes no gradient on until tch_scope_recompute_open (so a backward
// through the recomputed body stops at the cut, and a double backward goes
// past it). `*cut` gets the list of those nodes.
tch_scope_status tch_scope_recompute_cut(void* const* inputs, size_t n, bool create_graph, void** out,
                                         void** cut);
// Opens the cut's nodes, and frees the list.
void tch_scope_recompute_open(void* cut);

#ifdef __cplusplus
}  // extern "C"
#endif
