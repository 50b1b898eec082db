//! Scoped execution for libtorch: PyTorch's context managers as Rust scopes.
//!
//! `torch.no_grad()`, `torch.inference_mode()`, `torch.cuda.device(n)` and
//! friends become RAII guards, function attributes and a block macro. Every
//! exit — end of block, `return`, `?`, `break`, panic — restores the state
//! exactly; nested scopes unwind in reverse order; async code re-enters its
//! per-thread scopes on every poll and holds the others (a timer, a seed, a
//! checkpoint — the `VarStore` saved on exit, not `torch.utils.checkpoint`'s
//! activation recomputation) for the whole future.
//!
//! ```
//! use tch::{Device, Kind, Tensor};
//! use tch_scope::{no_grad, scoped, is_grad_enabled};
//!
//! #[no_grad]
//! fn predict(w: &Tensor, x: &Tensor) -> Tensor {
//!     assert!(!is_grad_enabled());
//!     x.matmul(w)
//! }
//!
//! let w = Tensor::ones([3, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
//! let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
//! assert!(!predict(&w, &x).requires_grad());
//!
//! let y = scoped!(no_grad, device(cpu) => { x.matmul(&w) });
//! assert!(!y.requires_grad());
//! assert!(is_grad_enabled()); // restored
//! ```
//!
//! # Scope words
//! One grammar serves [`scoped!`], [`try_scoped!`] and the attributes: a
//! comma-separated list of words, each `name`, `name(args)`, optionally
//! followed by `if cond` (entered only when `cond` holds). The first word is
//! the outermost scope.
//!
//! | word | PyTorch | guard |
//! |---|---|---|
//! | `no_grad` | `torch.no_grad()` | [`NoGrad`] |
//! | `enable_grad` | `torch.enable_grad()` | [`EnableGrad`] |
//! | `grad(flag)` | `torch.set_grad_enabled(flag)` | [`Grad`] |
//! | `inference_mode`, `inference_mode(false)` | `torch.inference_mode(mode)` | [`InferenceMode`], [`SetInferenceMode`] |
//! | `device(0)`, `device(cpu)`, `device("cuda:1")`, `device(expr)` | `torch.cuda.device(n)` | [`OnDevice`] |
//! | `eval(model)` | `was = model.training; model.eval()` … `model.train(was)` | [`Mode`] |
//! | `train(model)` | `was = model.training; model.train()` … `model.train(was)` | [`Mode`] |
//! | `with(expr)` | `with expr:` | any [`Scope`] |
//! | `seed(n)`, `seed(n, devices = [0])` | `fork_rng(devices=[0])` + `torch.manual_seed(n)` | [`Seed`], [`ForkDevices`] |
//! | `fork_rng`, `fork_rng(devices = [0, 1])` | `torch.random.fork_rng(devices=[0, 1])` | [`ForkRng`], [`ForkDevices`] |
//! | `threads(n)` | `torch.set_num_threads(n)` … restore | [`Threads`] |
//! | `autocast(cpu, bf16)`, `autocast(cuda, f16, enabled = b, cache = b)` | `torch.autocast("cuda", torch.float16, enabled=b, cache_enabled=b)` | [`Autocast`] |
//! | `profile("trace.json")` | `torch.profiler.profile()` + `export_chrome_trace` | [`Profile`] |
//! | `record("name")` | `torch.profiler.record_function("name")` | [`Record`] |
//! | `checkpoint(vs, "model.ot", resume)` | save on exit (try/finally); not `torch.utils.checkpoint` (no activation recomputation) | [`Checkpoint`] |
//! | `detect_anomaly`, `detect_anomaly(check_nan = false)` | `torch.autograd.detect_anomaly()` | [`DetectAnomaly`] |
//! | `deterministic`, `deterministic(warn_only)` | `torch.use_deterministic_algorithms(True)` | [`Deterministic`] |
//! | `matmul_precision("high")` | `torch.set_float32_matmul_precision("high")` … restore | [`MatmulPrecision`] |
//! | `tf32(flag)` | `torch.backends.cuda.matmul.allow_tf32 = flag` … restore | [`Tf32`] |
//! | `cudnn(benchmark = true, ..)` | `torch.backends.cudnn.flags(benchmark=True, ..)` | [`Cudnn`] |
//! | `sdpa(math, flash)` | `torch.nn.attention.sdpa_kernel([SDPBackend.MATH, ..])` | [`Sdpa`] |
//! | `stream(s)` | `torch.cuda.stream(s)` | [`cuda::Stream`] |
//! | `timed`, `timed("name")`, `timed(name = "…", sync)` | a `time.perf_counter()` timer | [`Timed`] |
//! | `memory_scope`, `memory_scope("name")` | a resident-memory reporter | [`HostMemory`] |
//! | `tensor_memory`, `tensor_memory("name")` | `torch.profiler.profile(profile_memory=True)`'s allocations, summed: bytes of tensors this thread allocated and freed, net and peak | [`TensorMemory`] |
//! | `gpu_memory_scope(device = 0)`, `gpu_memory_scope(device = 0, empty_cache = false)` (default `true`: the cache emptied before and after, so `reserved` shows the scope's own) | `torch.cuda.memory_allocated()` / `max_memory_allocated()` reporter | [`GpuMemory`] |
//! | `distributed(rank = r, world_size = n, master = "host:port")`, `distributed(from_env)` (feature `distributed`) | `init_process_group("gloo")` … `destroy_process_group()` | [`dist::Distributed`] |
//! | `deadline(Duration::from_millis(100))`, `deadline(until = t)` | a `SIGALRM` handler raising `TimeoutError` | [`Deadline`] |
//!
//! `seed`, `fork_rng`, `threads`, `detect_anomaly`, `deterministic`,
//! `matmul_precision`, `tf32`, `cudnn` and `sdpa` change process-wide
//! libtorch state (every thread sees it; see
//! [process-wide words](#process-wide-words)); [`ScopeStack`] enters
//! scopes chosen at run time, like `contextlib.ExitStack`. Measurements of
//! `timed` and the memory scopes go to [`report()`](report::report), to a
//! callback ([`report::set_callback`]) and, with the `tracing` feature, to
//! `tracing` events.
//!
//! `deadline(d)` refuses the next libtorch operator once `d` has passed
//! (on any thread, checked in the dispatcher) and ends the scope with a
//! [`ScopeError`] such as "deadline of 100 ms exceeded after 103 ms at
//! aten::mm"; see [`Deadline`]. A scope learns how its body ended — like
//! Python's `__exit__(exc_type, exc, tb)` — through [`Scope::exit`], which
//! hears an [`Outcome`]; [`ScopeStack::push_exit`] does the same for a
//! callback.
//!
//! While a `checkpoint` is open, SIGINT, SIGTERM and SIGUSR1 request a
//! stop instead of killing the process: a [`steps`] loop ends at its next
//! step boundary, a loop of your own checks [`stop_requested`], other code
//! has its next libtorch operator refused; every open checkpoint saves,
//! then the process ends killed by the signal (130 for Ctrl-C, 143 for
//! SIGTERM); a second signal ends it at once (see [`stop_requested`]).
//!
//! `eval(model)` and `train(model)` take any [`Trainable`] model — a
//! [`tch::CModule`], a `tch::nn` module wrapped in [`WithMode`], or your own
//! type — and borrow it (shared) for the scope, so the body can still call
//! it. When the last scope open on the model ends, every submodule's own
//! mode is put back. Scopes on one model from several threads share its
//! mode, and the other mode from another thread is refused; but a model's
//! mode is flags in the model, so a scope on a model that other threads run
//! outside any scope changes their forward passes too. For a model served
//! by many threads, use [`Inference`]: eval mode once, each call under
//! `inference_mode`, no flag written per call. `eval` does not turn
//! autograd off; write `no_grad, eval(model)`.
//!
//! # Attributes
//! Each word is also an attribute taking the same arguments (`#[no_grad]`,
//! `#[device(0)]`, `#[grad(training)]`); [`macro@scope`] takes a whole list.
//! (`#[scope(…)]` is not spelled `#[scoped(…)]` because Rust keeps one macro
//! namespace per crate: an attribute and the `scoped!` block macro cannot
//! share a name.) Whether a scope can fail is
//! part of its type ([`Scope::Error`] is `Infallible` or [`ScopeError`], see
//! [`EntryError`]), so an attribute of a word that never fails (`no_grad`,
//! `timed`, …) puts no bound on the return type: `#[no_grad] fn f() ->
//! std::io::Result<T>` compiles as written. A word that can fail, on a
//! function returning `Result<_, E>`, returns `Err(E::from(e))` where
//! `E: From<ScopeError>`, and panics with the [`ScopeError`] message
//! otherwise (so does a generic `E` not bounded by `From<ScopeError>`, and a
//! return type with `impl Trait` in it). A renamed dependency
//! (`ts = { package = "tch-scope" }`) is named with `crate = "ts"` on every
//! attribute: `#[ts::no_grad(crate = "ts")]`.
//!
//! # Threads
//! Grad mode, inference mode and the current device are per OS thread, as in
//! libtorch, so their guards are `!Send` ([`PhantomNotSend`]). A thread
//! spawned inside `no_grad` starts with grad mode on, as in PyTorch. To run a
//! request's work on another thread inside the request's scopes,
//! [`Context::capture`] them where it arrives and enter them with `with(ctx)`
//! on the worker; a deadline of `deadline(until = arrival + budget)` counts
//! the time spent in between.
//!
//! # Process-wide words
//! `seed`, `fork_rng`, `threads`, `deterministic`, `detect_anomaly`,
//! `matmul_precision`, `tf32`, `cudnn` and `sdpa` set state of the whole
//! process, which every thread sees. Their scopes may overlap across
//! threads and end in any order: once every overlapping scope of a setting
//! has ended, the setting is what it was before the first of them entered.
//! While scopes of different threads overlap they share one value; a scope
//! asking for a *different* value while another thread holds one is
//! refused at entry with a [`ScopeError`] such as
//! `matmul_precision("medium") conflicts with matmul_precision("high") held
//! by thread worker-2`. `seed` and `fork_rng` are refused while another
//! thread holds either (the default generators are one per device: the
//! draws would interleave). Within one thread, scopes nest as always: an
//! inner scope may set another value until it ends.
//!
//! In async code the holder is the task, not the thread: a future holding
//! a process-wide word for its whole life (the macros' async code) keeps
//! holding it while it moves between worker threads, and two tasks
//! interleaved on one thread are two holders. A guard entered by hand is
//! its thread's hold, and is not `Send`: moved to another thread, it would
//! still count as the first thread's, whose next scope would nest in a
//! scope it no longer holds. Write the words in an attribute or in
//! `scoped!` for async code that moves between threads.
//!
//! The same holds for `eval(model)` / `train(model)`, a model's mode
//! (see [`Mode`]), and a model an [`Inference`] serves stays in eval mode:
//! a `train(model)` scope on it is refused.
//!
//! `threads(n)` is process-wide only in part: see [`Threads`].

// The table above links `dist::Distributed`, there only with the feature
// (docs.rs builds with it).
#![cfg_attr(not(feature = "distributed"), allow(rustdoc::broken_intra_doc_links))]
#![warn(missing_docs)]

pub mod aoti;
pub mod autograd;
pub mod batch;
mod clock;
mod context;
pub mod cuda;
mod durable;
mod error;
mod exit;
mod ffi;
mod future;
mod lease;
mod memory;
mod not_send;
pub mod optim;
mod outcome;
mod process_wide;
pub mod report;
mod scope;
mod scopes;
mod stack;
mod stop;
mod sync;
mod thread_state;
pub mod trace;
mod tracing_span;

#[cfg(feature = "distributed")]
pub mod dist;
#[cfg(feature = "serve")]
pub mod serve;

#[doc(hidden)]
#[path = "private/mod.rs"]
pub mod __private;

pub use context::{Context, ContextGuard};
pub use cuda::{built_with_cuda, cuda_device_count, current_cuda_device};
pub use error::{EntryError, ScopeError, Stage};
pub use exit::{ExitError, exit_errors_reported, reset_exit_hook, set_exit_hook};
pub use future::{ScopeFutureExt, ScopeIterExt, Scoped, ScopedIter, Spanned, SpannedError};
pub use memory::{
    GpuMemory, GpuMemoryGuard, HostMemory, HostMemoryGuard, TensorMemory, TensorMemoryGuard,
    last_memory_report,
};
pub use not_send::PhantomNotSend;
pub use report::MemoryReport;
pub use report::report;
pub use scope::{Chain, ChainGuard, End, Scope, When};
pub use scopes::cmodule::ModuleModes;
pub use scopes::device::{DeviceGuard, IntoScopeDevice, OnDevice, current_device};
pub use scopes::grad::{
    EnableGrad, Grad, GradGuard, InferenceMode, InferenceModeGuard, NoGrad, SetInferenceMode,
    is_grad_enabled, is_inference_mode_enabled,
};
pub use scopes::inference::{Inference, ReplicaGuard, Replicas, Servable};
pub use scopes::timer::{SyncMode, Timed, TimedGuard};
pub use scopes::train::{Mode, ModeGuard, Trainable};
pub use scopes::with_mode::WithMode;

pub use scopes::anomaly::{AnomalyGuard, DetectAnomaly, anomaly_mode};
pub use scopes::autocast::{
    Autocast, AutocastDevice, AutocastGuard, autocast_cache_enabled, autocast_dtype,
};
pub use scopes::checkpoint::{
    Checkpoint, CheckpointGuard, Metrics, RunState, SavedRun, Steps, log_metric, metrics, steps,
    suspend_progress,
};
pub use scopes::deterministic::{Deterministic, DeterministicGuard, deterministic_mode};
pub use scopes::profile::{Profile, ProfileGuard, Record, RecordGuard};
pub use scopes::rng::{ForkDevices, ForkRng, IntoSeed, RngGuard, Seed};
pub use scopes::threads::{Threads, ThreadsGuard};

pub use scopes::cudnn::{Cudnn, CudnnFlags, CudnnGuard, cudnn_flags};
pub use scopes::precision::{
    MatmulPrecision, MatmulPrecisionGuard, Tf32, allow_tf32, matmul_precision,
};
pub use scopes::sdpa::{Sdpa, SdpaBackend, SdpaGuard, sdpa_backends};
pub use stack::ScopeStack;
pub use stop::{set_stop_signals, stop_requested, stop_signal, stop_signals};

pub use outcome::Outcome;
pub use scopes::deadline::{Deadline, DeadlineGuard};

pub use tch_scope_macros::distributed;
pub use tch_scope_macros::scope;
pub use tch_scope_macros::{
    autocast, checkpoint, detect_anomaly, deterministic, fork_rng, profile, record, seed, threads,
};
pub use tch_scope_macros::{cudnn, matmul_precision, sdpa, stream, tf32};
pub use tch_scope_macros::{device, enable_grad, eval, grad, inference_mode, no_grad, train, with};
pub use tch_scope_macros::{gpu_memory_scope, memory_scope, tensor_memory, timed};

pub use tch_scope_macros::deadline;
pub use tch_scope_macros::recompute;

/// Runs a block inside a list of scopes: `scoped!(SCOPES => BODY)`.
///
/// The body is a block or an expression, not a closure: `?`, `return`,
/// `break` and `continue` act on the enclosing function or loop. If a scope
/// cannot be entered, `scoped!` panics with the [`ScopeError`] message; use
/// [`try_scoped!`] to get it as a value. A body that `.await`s runs as its
/// own future: per-thread scopes (grad and inference mode, `device`,
/// `autocast`, `record`, `with`) and model modes (`eval`, `train`) are
/// entered around every poll, the others (`timed`, memory scopes, `seed`,
/// `checkpoint`, …) once for the whole future (see [`Spanned`]); there `?`,
/// `return`, `break` and `continue` out of the body are compile errors
/// (`?` in a closure or an async block of the body is its own:
/// `scoped!(no_grad => async { ..?; Ok(v) }.await)?`). `return`, `break`
/// and `continue` are errors in a body whose list has `deadline` too,
/// which runs as a closure under `catch_unwind` so that the deadline can
/// end it with its error (see [`Deadline`]); `?` there acts on the body.
///
/// `scoped!` sees `.await`, `join!`, `try_join!`, `select!` and
/// `select_biased!`, not an `.await` hidden in another macro: write one
/// visible `.await` (`async { my_macro!(..) }.await`). Debug builds
/// report a per-thread scope held across such a hidden await when the
/// thread next polls a scoped future, with the `scoped!`'s file and line
/// (see `docs/words.md`); release builds pay nothing for the check.
///
/// ```
/// use tch_scope::{scoped, is_grad_enabled};
/// for training in [true, false] {
///     let grad = scoped!(no_grad if !training => is_grad_enabled());
///     assert_eq!(grad, training);
/// }
/// ```
#[macro_export]
macro_rules! scoped {
    ($($tt:tt)*) => { $crate::__private::scoped_impl!{ $crate ; $($tt)* } };
}

/// Like [`scoped!`], but evaluates to `Result<T, ScopeError>` instead of
/// panicking when a scope cannot be entered or a `deadline` ends the body.
///
/// ```
/// use tch_scope::try_scoped;
/// let r = try_scoped!(device("cuda:7") => 1 + 1);
/// if tch_scope::cuda_device_count() < 8 {
///     let e = r.unwrap_err();
///     assert_eq!(e.device(), Some(tch::Device::Cuda(7)));
/// }
/// ```
#[macro_export]
macro_rules! try_scoped {
    ($($tt:tt)*) => { $crate::__private::try_scoped_impl!{ $crate ; $($tt)* } };
}
