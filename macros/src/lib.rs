//! Procedural macros of [tch-scope]: the scope attributes and the engine of
//! `scoped!` / `try_scoped!`.
//!
//! Use them through `tch_scope`, which re-exports them with the full user
//! documentation and runnable examples; the generated code calls into
//! `tch_scope::__private`.
//!
//! Every attribute and `scoped!` share one grammar, a comma-separated list of
//! scope words, each optionally with arguments and an `if` condition; the
//! first word listed is the outermost scope. The words — `no_grad`,
//! `enable_grad`, `grad`, `inference_mode`, `device`, `eval`, `train`,
//! `with`, `timed`, `memory_scope`, `tensor_memory`, `gpu_memory_scope`,
//! `distributed`,
//! `seed`, `fork_rng`, `threads`, `autocast`, `profile`, `record`,
//! `checkpoint`, `detect_anomaly`, `deterministic`, `matmul_precision`,
//! `tf32`, `cudnn`, `sdpa`, `stream`, `deadline` — are the rows of the
//! table in `words/`; a test checks this list, the attributes below and the
//! READMEs against it. Every attribute also takes `crate = "path"`, the
//! runtime's path when the dependency is renamed.
//!
//! [tch-scope]: https://docs.rs/tch-scope

mod ast;
mod attr;
mod bang;
mod body;
mod errors;
mod expand;
mod recompute;
mod valid;
mod word;
mod words;

#[cfg(test)]
mod tests;

use attr::Attr;
use expand::Flavor;
use proc_macro::TokenStream;

/// Runs the function with autograd off, like `torch.no_grad()`.
///
/// `#[no_grad] fn f(..) { .. }` enters the scope at the start of every call
/// and leaves it when the call returns; on an `async fn` the scope is
/// re-entered on every poll. Runnable examples are in `tch_scope`'s docs.
#[proc_macro_attribute]
pub fn no_grad(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("no_grad"), args.into(), item.into()).into()
}

/// Runs the function with autograd on, like `torch.enable_grad()`.
#[proc_macro_attribute]
pub fn enable_grad(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("enable_grad"), args.into(), item.into()).into()
}

/// Runs the function with autograd on or off as a `bool` expression says,
/// like `torch.set_grad_enabled(enabled)`: `#[grad(training)]`.
#[proc_macro_attribute]
pub fn grad(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("grad"), args.into(), item.into()).into()
}

/// Runs the function in inference mode, like `torch.inference_mode()`;
/// `#[inference_mode(false)]` leaves an outer one, like
/// `torch.inference_mode(False)`.
#[proc_macro_attribute]
pub fn inference_mode(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("inference_mode"), args.into(), item.into()).into()
}

/// Runs the function with a default device: `#[device(0)]` (CUDA device 0),
/// `#[device(cpu)]`, `#[device("cuda:1")]`, `#[device("mps")]`, or any
/// expression of a device type. Literals are checked at compile time.
#[proc_macro_attribute]
pub fn device(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("device"), args.into(), item.into()).into()
}

/// Runs the function with a model in eval mode, putting back its previous
/// modes (every submodule's) when the call returns: `#[eval(model)]` names a
/// parameter (or any expression) whose type implements
/// `tch_scope::Trainable`. The scope borrows the model (shared) for the call.
/// Does not turn autograd off: add `#[no_grad]`, or `#[scope(no_grad,
/// eval(model))]`.
#[proc_macro_attribute]
pub fn eval(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("eval"), args.into(), item.into()).into()
}

/// Runs the function with a model in training mode, putting back its
/// previous modes when the call returns: `#[train(model)]`.
#[proc_macro_attribute]
pub fn train(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("train"), args.into(), item.into()).into()
}

/// Runs the function inside any value implementing `tch_scope::Scope`:
/// `#[with(my_scope())]`.
#[proc_macro_attribute]
pub fn with(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("with"), args.into(), item.into()).into()
}

/// Times every call and records it under the function's path (or the
/// given name): `#[timed]`, `#[timed("fwd")]`, `#[timed(name = "fwd", sync)]`.
/// On a function returning `Result`, an `Err` is recorded as a failed run;
/// a panic as a panicked one. An `async fn` is timed from its first poll
/// to its completion, once per call.
#[proc_macro_attribute]
pub fn timed(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("timed"), args.into(), item.into()).into()
}

/// Reports the process's resident memory across every call:
/// `#[memory_scope]`, `#[memory_scope("load")]`.
#[proc_macro_attribute]
pub fn memory_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("memory_scope"), args.into(), item.into()).into()
}

/// Reports the bytes of tensors the calling thread allocates and frees
/// across every call, net and peak: `#[tensor_memory]`,
/// `#[tensor_memory("forward")]`.
#[proc_macro_attribute]
pub fn tensor_memory(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("tensor_memory"), args.into(), item.into()).into()
}

/// Reports the CUDA caching allocator's statistics across every call:
/// `#[gpu_memory_scope(device = 0)]`, with `empty_cache = false` to keep the
/// cache.
#[proc_macro_attribute]
pub fn gpu_memory_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("gpu_memory_scope"), args.into(), item.into()).into()
}

/// Runs the function as a rank of a `torch.distributed` process group,
/// joined on entry and destroyed on exit:
/// `#[distributed(rank = r, world_size = n, master = "host:port")]` or
/// `#[distributed(from_env)]` (torchrun), with optional `backend = gloo`
/// and `timeout = duration`. Inside, `tch_scope::dist::current()` is the
/// group.
#[proc_macro_attribute]
pub fn distributed(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("distributed"), args.into(), item.into()).into()
}

/// Runs every call with all default generators seeded with `n`, and puts
/// their states back when the call returns: `#[seed(42)]`. `n` is any
/// integer of at most 64 bits, seeded as `torch.manual_seed(n)` seeds it.
#[proc_macro_attribute]
pub fn seed(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("seed"), args.into(), item.into()).into()
}

/// Runs every call with libtorch's intra-op thread count set to `n`
/// (process-wide), and puts the old count back when it returns:
/// `#[threads(1)]`, like `torch.set_num_threads(1)` … restore.
#[proc_macro_attribute]
pub fn threads(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("threads"), args.into(), item.into()).into()
}

/// Saves the default generators' states before every call and puts them
/// back when it returns, like `torch.random.fork_rng()`: `#[fork_rng]`.
#[proc_macro_attribute]
pub fn fork_rng(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("fork_rng"), args.into(), item.into()).into()
}

/// Runs the function in mixed precision, like `torch.autocast`:
/// `#[autocast(cpu, bf16)]`, `#[autocast(cuda, f16)]`, `#[autocast(cuda, bf16)]`.
#[proc_macro_attribute]
pub fn autocast(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("autocast"), args.into(), item.into()).into()
}

/// Profiles every call and writes a Chrome/Perfetto trace when it returns:
/// `#[profile("trace.json")]`.
#[proc_macro_attribute]
pub fn profile(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("profile"), args.into(), item.into()).into()
}

/// Marks every call as a named profiler range, like
/// `torch.profiler.record_function`: `#[record("forward")]`.
#[proc_macro_attribute]
pub fn record(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("record"), args.into(), item.into()).into()
}

/// Saves a `tch::nn::VarStore` crash-safely when every call returns (or
/// panics): `#[checkpoint(vs, "model.ot")]`, with `resume` to load it first.
/// A training checkpoint, not `torch.utils.checkpoint`: it does not
/// recompute activations in the backward pass.
#[proc_macro_attribute]
pub fn checkpoint(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("checkpoint"), args.into(), item.into()).into()
}

/// Runs the function with autograd anomaly detection on (process-wide):
/// `#[detect_anomaly]`, `#[detect_anomaly(check_nan = false)]`.
#[proc_macro_attribute]
pub fn detect_anomaly(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("detect_anomaly"), args.into(), item.into()).into()
}

/// Runs the function with deterministic algorithms (process-wide):
/// `#[deterministic]`, `#[deterministic(warn_only)]`.
#[proc_macro_attribute]
pub fn deterministic(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("deterministic"), args.into(), item.into()).into()
}

/// Gives every call a time budget: once it has passed, the next libtorch
/// operator the thread calls fails, and the call ends with the deadline's
/// `ScopeError` ("deadline of 100 ms exceeded after 103 ms at aten::mm"):
/// returned as `Err(E::from(e))` by a function returning `Result<_, E>`
/// with `E: From<ScopeError>`, a panic with that message otherwise.
/// `#[deadline(Duration::from_millis(100))]`, or an instant:
/// `#[deadline(until = t)]` with `t: std::time::Instant` ("deadline passed
/// 3 ms ago at aten::mm"; an instant already past refuses the first
/// operator).
#[proc_macro_attribute]
pub fn deadline(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("deadline"), args.into(), item.into()).into()
}

/// Runs the function inside a list of scopes, outermost first:
/// `#[scope(device(0), no_grad)]`; a word may carry a condition,
/// `#[scope(no_grad if !training)]`.
///
/// Named `scope`, not `scoped`: Rust has one macro namespace per crate, and
/// `tch_scope::scoped!` is the block macro.
#[proc_macro_attribute]
pub fn scope(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::List, args.into(), item.into()).into()
}

/// The engine of `tch_scope::scoped!`, which passes its own path first:
/// `scoped_impl!{ $crate ; LIST => BODY }`.
#[doc(hidden)]
#[proc_macro]
pub fn scoped_impl(input: TokenStream) -> TokenStream {
    bang::scoped_macro(Flavor::Scoped, input.into()).into()
}

/// The engine of `tch_scope::try_scoped!`: like `scoped_impl!`, but the
/// value is a `Result` whose `Err` is a scope that could not be entered.
#[doc(hidden)]
#[proc_macro]
pub fn try_scoped_impl(input: TokenStream) -> TokenStream {
    bang::scoped_macro(Flavor::TryScoped, input.into()).into()
}

/// Runs every call with float32 matmuls at the given precision
/// (process-wide), like `torch.set_float32_matmul_precision("high")` …
/// restore: `#[matmul_precision("high")]`.
#[proc_macro_attribute]
pub fn matmul_precision(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("matmul_precision"), args.into(), item.into()).into()
}

/// Runs every call with cuBLAS's TF32 for float32 matmuls allowed or not
/// (process-wide), like `torch.backends.cuda.matmul.allow_tf32 = flag` …
/// restore: `#[tf32(true)]`.
#[proc_macro_attribute]
pub fn tf32(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("tf32"), args.into(), item.into()).into()
}

/// Runs every call with the cuDNN flags written (process-wide), like
/// `torch.backends.cudnn.flags(...)`: `#[cudnn(benchmark = true)]`.
#[proc_macro_attribute]
pub fn cudnn(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("cudnn"), args.into(), item.into()).into()
}

/// Runs every call with only the listed scaled-dot-product-attention
/// backends enabled (process-wide), like
/// `torch.nn.attention.sdpa_kernel([SDPBackend.MATH])`: `#[sdpa(math)]`.
#[proc_macro_attribute]
pub fn sdpa(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("sdpa"), args.into(), item.into()).into()
}

/// Runs every call on a CUDA stream (`tch_scope::cuda::Stream`), like
/// `with torch.cuda.stream(s):`: `#[stream(side)]` where `side` is in
/// scope at the function (a static, or an argument).
#[proc_macro_attribute]
pub fn stream(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("stream"), args.into(), item.into()).into()
}

/// Activation recomputation (`torch.utils.checkpoint`, random state kept):
/// the function's `&Tensor` parameters are the inputs, the others are
/// captured; it returns a `Tensor` or a tuple of them. See
/// `tch_scope::autograd::recompute`.
#[proc_macro_attribute]
pub fn recompute(args: TokenStream, item: TokenStream) -> TokenStream {
    recompute::attribute(args.into(), item.into()).into()
}
