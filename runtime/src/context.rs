//! [`Context`]: a request's scopes, carried to the thread that does its
//! work (documented on the type, where the rustdoc shows it).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::Device;

use crate::scopes::deadline::{run_catching, tripped_since, trips};
use crate::scopes::device::{DeviceGuard, enter_captured};
use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_context_capture(ctx: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_context_free(ctx: *mut c_void);
    fn tch_scope_context_info(
        ctx: *const c_void,
        grad: *mut bool,
        inference: *mut bool,
        deadline_at: *mut i64,
        now: *mut i64,
    );
    fn tch_scope_context_enter(ctx: *const c_void, entered: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_context_exit(entered: *mut c_void) -> ffi::Status;
}

/// No deadline (the shim's `kNone`).
const NO_DEADLINE: i64 = i64::MAX;

/// This thread's grad mode, inference mode, autocast state, current device
/// and open deadline, to enter on another thread.
///
/// `Send + Sync + 'static` and cheap to clone (a reference count): capture
/// it where the request arrives, move it to the worker with the request,
/// and enter it there with `with(ctx)`, [`Scope::enter`] or
/// [`run`](Context::run). Any number of threads may enter clones of one
/// context at once.
///
/// ```
/// use std::sync::mpsc;
/// use std::time::{Duration, Instant};
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::{Context, is_grad_enabled, scoped};
///
/// let (tx, rx) = mpsc::channel::<(Context, Tensor)>();
/// let worker = std::thread::spawn(move || {
///     for (ctx, x) in rx {
///         let y = scoped!(with(ctx) => {
///             assert!(!is_grad_enabled()); // the request's no_grad
///             x.f_matmul(&x) // Err once the request's deadline has passed
///         });
///         assert!(y.is_ok());
///         assert!(is_grad_enabled()); // the worker's own state again
///     }
/// });
///
/// let arrival = Instant::now();
/// scoped!(no_grad, deadline(until = arrival + Duration::from_secs(60)) => {
///     let x = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
///     tx.send((Context::capture(), x)).unwrap();
/// });
/// drop(tx);
/// worker.join().unwrap();
/// ```
///
/// Serving code often receives a request on one thread (an async handler)
/// and runs the model on another (a worker fed by a channel, as
/// text-embeddings-inference and rust-bert's `batched_fn` do). Grad mode,
/// inference mode, autocast, the current device and a `deadline` are per
/// OS thread, so they stay behind. [`Context::capture`] takes them along
/// in a `Send + 'static` value; `with(ctx)` (or [`Scope::enter`]) makes
/// them the worker's for the scope, and the worker's own state comes back
/// when it ends, on every exit path, panics included.
///
/// libtorch's part is an `at::ThreadLocalState`, as `at::launch` and the
/// autograd engine carry it between threads: grad mode and the other
/// autograd flags, the TLS dispatch-key sets (which hold inference mode,
/// the autocast flags and an open deadline's check), the autocast dtypes,
/// debug info and the `RecordFunction` thread state. tch-scope adds
/// autocast's cast-cache flag, the open deadline itself and the current
/// device ([`current_device`](crate::current_device) and the current CUDA
/// device). Inside the scope the captured state is the whole state: the
/// worker's own grad mode, deadline or autocast do not apply there (enter
/// more scopes inside to add to it: a `deadline` entered inside still
/// counts, the earliest wins). Thread-local profiler callbacks travel too,
/// so a context captured inside [`profile`](crate::Profile) records the
/// worker's operators into that profile: enter it only while the profile
/// is open. Process-wide settings (`seed`, `threads`, `deterministic`, …)
/// need no carrying.
///
/// While the [trace](crate::trace) records, entering a context captured
/// during the recording writes a flow event from the capture to the entry,
/// so Perfetto draws an arrow from the request's span to the worker's.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Captured>,
}

/// The shim's captured state and the Rust side's part of it.
struct Captured {
    /// An `at::ThreadLocalState` plus the rest (see `csrc/context.cpp`),
    /// only read after capture.
    raw: NonNull<c_void>,
    device: Device,
    cuda: Option<usize>,
    /// The parts of the state [`Context::same_state`] compares, read on
    /// the capturing thread at capture (as the shim copied them).
    state: State,
    /// Where the trace's flow to the entering threads starts, if it recorded.
    flow: Option<crate::trace::FlowStart>,
}

/// Grad mode, inference mode and autocast as captured: what decides
/// whether two contexts compute alike ([`Context::same_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    grad: bool,
    inference: bool,
    /// `autocast_dtype` of the CPU and of CUDA (`None`: off there).
    autocast: [Option<tch::Kind>; 2],
    autocast_cache: bool,
}

impl State {
    /// This thread's.
    fn current() -> Self {
        use crate::AutocastDevice::{Cpu, Cuda};
        State {
            grad: crate::is_grad_enabled(),
            inference: crate::is_inference_mode_enabled(),
            autocast: [crate::autocast_dtype(Cpu), crate::autocast_dtype(Cuda)],
            autocast_cache: crate::autocast_cache_enabled(),
        }
    }
}

// SAFETY: the shim's object is read only after capture (entering copies
// from it) and holds nothing tied to the capturing thread: libtorch moves
// an `at::ThreadLocalState` to other threads itself (`at::launch`), and
// copying its shared pointers from several threads at once is sound.
unsafe impl Send for Captured {}
// SAFETY: as above; every use through `&Captured` only reads.
unsafe impl Sync for Captured {}

impl Drop for Captured {
    fn drop(&mut self) {
        // SAFETY: made by tch_scope_context_capture, freed once (the last
        // `Arc`); a guard borrows nothing from it once entered.
        unsafe { tch_scope_context_free(self.raw.as_ptr()) }
    }
}

impl Context {
    /// Captures this thread's grad mode, inference mode, autocast state,
    /// current device and open deadline.
    ///
    /// # Panics
    /// If libtorch cannot copy its thread state (out of memory).
    ///
    /// ```no_run
    /// use tch_scope::{Context, scoped};
    /// let ctx = scoped!(no_grad => Context::capture());
    /// assert!(!ctx.is_grad_enabled());
    /// assert!(Context::capture().is_grad_enabled());
    /// ```
    pub fn capture() -> Context {
        let mut raw = std::ptr::null_mut();
        // SAFETY: a writable out-param; the shim catches C++ exceptions.
        let status = unsafe { tch_scope_context_capture(&mut raw) };
        if let Err(e) = ffi::check(status) {
            panic!("tch-scope: cannot capture this thread's libtorch state: {e}");
        }
        let raw = NonNull::new(raw).expect("the shim returned a context");
        Context {
            inner: Arc::new(Captured {
                raw,
                device: crate::current_device(),
                cuda: crate::current_cuda_device(),
                state: State::current(),
                flow: crate::trace::flow_start(),
            }),
        }
    }

    /// Grad mode as captured.
    ///
    /// ```no_run
    /// let ctx = tch_scope::scoped!(no_grad => tch_scope::Context::capture());
    /// assert!(!ctx.is_grad_enabled());
    /// ```
    pub fn is_grad_enabled(&self) -> bool {
        self.info().0
    }

    /// Inference mode as captured.
    ///
    /// ```no_run
    /// let ctx = tch_scope::scoped!(inference_mode => tch_scope::Context::capture());
    /// assert!(ctx.is_inference_mode_enabled());
    /// ```
    pub fn is_inference_mode_enabled(&self) -> bool {
        self.info().1
    }

    /// The current device as captured ([`current_device`](crate::current_device)).
    ///
    /// ```no_run
    /// let ctx = tch_scope::scoped!(device(cpu) => tch_scope::Context::capture());
    /// assert_eq!(ctx.device(), tch::Device::Cpu);
    /// ```
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Whether `self` and `other` computed alike: the same grad mode,
    /// inference mode, autocast (enabled and its dtype, for the CPU and
    /// for CUDA; the cast-cache flag), current device and current CUDA
    /// device. The deadline is not compared (it decides when, not what),
    /// nor debug info or the profiler's thread-local callbacks.
    ///
    /// This is what decides which requests may share a batch (the
    /// `tch_scope::batch` module). Two clones of one context are always
    /// the same; the comparison reads no libtorch state.
    ///
    /// ```no_run
    /// use tch_scope::{Context, scoped};
    /// let a = scoped!(no_grad => Context::capture());
    /// let b = scoped!(no_grad => Context::capture());
    /// let c = scoped!(inference_mode => Context::capture());
    /// let d = scoped!(no_grad, autocast(cpu, bf16) => Context::capture());
    /// assert!(a.same_state(&b) && a.same_state(&a.clone()));
    /// assert!(!a.same_state(&c) && !a.same_state(&d));
    /// assert!(!a.same_state(&Context::capture())); // grad mode on there
    /// ```
    pub fn same_state(&self, other: &Context) -> bool {
        let (a, b) = (&*self.inner, &*other.inner);
        Arc::ptr_eq(&self.inner, &other.inner)
            || (a.state == b.state && a.device == b.device && a.cuda == b.cuda)
    }

    /// The captured deadline as an instant (the earliest one open at
    /// capture), or `None` if none was open: a worker can drop a request
    /// whose time is up before starting on it.
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use tch_scope::{Context, scoped};
    /// let t = Instant::now() + Duration::from_secs(60);
    /// let ctx = scoped!(deadline(until = t) => Context::capture());
    /// let d = ctx.deadline().unwrap();
    /// assert!(d.max(t) - d.min(t) < Duration::from_millis(1));
    /// assert_eq!(Context::capture().deadline(), None);
    /// ```
    pub fn deadline(&self) -> Option<Instant> {
        let (_, _, at, now) = self.info();
        if at == NO_DEADLINE {
            return None;
        }
        let then = Instant::now();
        let ns = |d: i64| Duration::from_nanos(d.unsigned_abs());
        if at >= now {
            then.checked_add(ns(at - now))
        } else {
            then.checked_sub(ns(now.saturating_sub(at)))
        }
    }

    /// Runs `f` inside the captured state, as `with(ctx)` does, and, when
    /// a deadline was captured, as [`Deadline::run`](crate::Deadline::run)
    /// does: the deadline's error if it refused an operator while `f` ran
    /// (whether `f` panicked on it, returned an `Err` or went on), else
    /// `f`'s value. Other panics are resumed untouched.
    ///
    /// # Errors
    /// The deadline's [`ScopeError`], or the error of entering.
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use tch::{Device, Kind, Tensor};
    /// use tch_scope::{Context, scoped};
    /// let ctx = scoped!(deadline(until = Instant::now()) => Context::capture());
    /// let e = std::thread::spawn(move || {
    ///     let a = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
    ///     ctx.run(|| a.mm(&a)).unwrap_err()
    /// })
    /// .join()
    /// .unwrap();
    /// assert!(e.to_string().starts_with("deadline passed "), "{e}");
    /// ```
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T, ScopeError> {
        let guard = self.enter_ref()?;
        if guard.deadline_at == NO_DEADLINE {
            return Ok(f());
        }
        run_catching(f, || {
            tripped_since(guard.trips, guard.deadline_at, || "with(context)".into())
        })
    }

    fn info(&self) -> (bool, bool, i64, i64) {
        let (mut grad, mut inference, mut at, mut now) = (false, false, 0, 0);
        // SAFETY: a live captured state (read only); writable out-params.
        unsafe {
            tch_scope_context_info(
                self.inner.raw.as_ptr(),
                &mut grad,
                &mut inference,
                &mut at,
                &mut now,
            );
        }
        (grad, inference, at, now)
    }

    fn enter_ref(&self) -> Result<ContextGuard, ScopeError> {
        let (_, _, deadline_at, _) = self.info();
        let trips = trips();
        let mut entered = std::ptr::null_mut();
        // SAFETY: a live captured state (read only); a writable out-param;
        // the shim catches C++ exceptions.
        let status = unsafe { tch_scope_context_enter(self.inner.raw.as_ptr(), &mut entered) };
        ffi::check(status).map_err(|e| ScopeError::new("with(context)", None, e))?;
        let mut guard = ContextGuard {
            entered: NonNull::new(entered).expect("the shim returned its saved state"),
            device: None,
            trips,
            deadline_at,
            _not_send: crate::PhantomNotSend::NEW,
        };
        // On failure `guard` drops here and libtorch's part is put back.
        guard.device = Some(enter_captured(self.inner.device, self.inner.cuda)?);
        if let Some(from) = self.inner.flow {
            crate::trace::flow_end(from);
        }
        Ok(guard)
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (grad, inference, _, _) = self.info();
        f.debug_struct("Context")
            .field("grad", &grad)
            .field("inference_mode", &inference)
            .field("device", &self.inner.device)
            .field("cuda_device", &self.inner.cuda)
            .field("deadline", &self.deadline())
            .finish_non_exhaustive()
    }
}

/// Puts back the thread's own state that a [`Context`] replaced. `!Send`:
/// it restores the thread that entered it.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct ContextGuard {
    /// The shim's saved state of this thread (an `at::ThreadLocalStateGuard`).
    entered: NonNull<c_void>,
    /// Entered after libtorch's part, so left before it.
    device: Option<DeviceGuard>,
    /// The thread's deadline trips at entry, and the captured deadline.
    trips: u64,
    deadline_at: i64,
    _not_send: crate::PhantomNotSend,
}

impl std::fmt::Debug for ContextGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextGuard").finish_non_exhaustive()
    }
}

impl Scope for Context {
    type Guard = ContextGuard;
    type Error = ScopeError;

    /// # Errors
    /// The captured CUDA device cannot be made current, or libtorch failed
    /// to copy its state.
    fn enter(&mut self) -> Result<ContextGuard, ScopeError> {
        self.enter_ref()
    }
}

/// `with(&ctx)`: enters without moving the context.
impl Scope for &Context {
    type Guard = ContextGuard;
    type Error = ScopeError;

    /// # Errors
    /// As for [`Context`].
    fn enter(&mut self) -> Result<ContextGuard, ScopeError> {
        self.enter_ref()
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        drop(self.device.take());
        // SAFETY: the shim's saved state, put back and freed once, on the
        // thread that entered it (the guard is !Send).
        let status = unsafe { tch_scope_context_exit(self.entered.as_ptr()) };
        if let Err(e) = ffi::check(status) {
            // The state is back; only clearing autocast's cache failed.
            crate::exit::report("with(context)", e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_send_sync_static_and_its_guard_is_not_send() {
        fn send_sync_static<T: Send + Sync + 'static>() {}
        send_sync_static::<Context>();
        // The guard carries the named marker (its `!Send` is checked by
        // PhantomNotSend's compile_fail doctest).
        let g = Context::capture().enter_ref().unwrap();
        let _: &crate::PhantomNotSend = &g._not_send;
    }

    #[test]
    fn same_state_compares_modes_and_autocast_but_not_the_deadline() {
        use crate::{Autocast, Deadline, InferenceMode, NoGrad, Scope};
        let plain = Context::capture();
        assert!(plain.same_state(&Context::capture()));
        assert!(plain.same_state(&plain.clone()));

        let g = NoGrad.enter().unwrap();
        let no_grad = Context::capture();
        let d = Deadline::new(Duration::from_secs(60)).enter().unwrap();
        let no_grad_deadline = Context::capture();
        drop(d);
        drop(g);
        assert!(no_grad.same_state(&no_grad_deadline));
        assert!(!no_grad.same_state(&plain));

        let g = InferenceMode.enter().unwrap();
        let inference = Context::capture();
        drop(g);
        assert!(!inference.same_state(&no_grad) && !inference.same_state(&plain));

        let g = Autocast::cpu(tch::Kind::BFloat16).enter().unwrap();
        let bf16 = Context::capture();
        drop(g);
        let g = Autocast::cpu(tch::Kind::BFloat16)
            .cache(false)
            .enter()
            .unwrap();
        let bf16_uncached = Context::capture();
        drop(g);
        assert!(!bf16.same_state(&plain));
        assert!(!bf16.same_state(&bf16_uncached));
        let g = NoGrad.enter().unwrap();
        let a = Autocast::cpu(tch::Kind::BFloat16).enter().unwrap();
        let no_grad_bf16 = Context::capture();
        drop(a);
        drop(g);
        assert!(!no_grad.same_state(&no_grad_bf16));
        assert!(plain.same_state(&Context::capture())); // all put back
    }

    #[test]
    fn capture_reads_the_modes_the_device_and_the_deadline() {
        use crate::{Deadline, InferenceMode, NoGrad, OnDevice, Scope};
        let plain = Context::capture();
        assert!(plain.is_grad_enabled() && !plain.is_inference_mode_enabled());
        assert_eq!(plain.deadline(), None);

        let g = NoGrad.enter().unwrap();
        assert!(!Context::capture().is_grad_enabled());
        drop(g);
        let g = InferenceMode.enter().unwrap();
        assert!(Context::capture().is_inference_mode_enabled());
        drop(g);
        let g = OnDevice::new("cpu").enter().unwrap();
        assert_eq!(Context::capture().device(), Device::Cpu);
        drop(g);

        let t = Instant::now() + Duration::from_secs(60);
        let g = Deadline::until(t).enter().unwrap();
        let d = Context::capture().deadline().unwrap();
        drop(g);
        assert!(
            d.max(t) - d.min(t) < Duration::from_millis(1),
            "{d:?} vs {t:?}"
        );
    }
}
