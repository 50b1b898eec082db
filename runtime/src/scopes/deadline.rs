//! `deadline(duration)`: once the deadline has passed, the next libtorch
//! operator the thread calls inside the scope fails, and the scope ends
//! with a [`ScopeError`] such as "deadline of 100 ms exceeded after 103 ms
//! at aten::mm".
//!
//! Python's `robust_inference(model, timeout=30)` raises `TimeoutError`
//! from a `SIGALRM` handler: main thread only, and it cannot stop a C++
//! kernel. Here the check runs in libtorch's dispatcher before every
//! operator of the thread (a boxed fallback on a dispatch key that is in
//! the thread's TLS set only while a deadline is open; see
//! `csrc/deadline.cpp` for why not a `RecordFunction` callback): any
//! thread, no signal, and libtorch stays fully usable — a kernel that has
//! started runs to its end, the next one is refused. The operators an
//! operator calls (a composite's parts: `linear` runs `addmm`) are not
//! checked again, so a composite op runs to its end too. It costs ≈ 90 ns
//! per operator called inside the scope and nothing outside it.
//!
//! How the failure surfaces: the refused operator throws, so tch's `f_`
//! methods return `Err(TchError)` and its other methods panic. The
//! `deadline` word runs its body so that it can see both — under
//! `catch_unwind`, as a closure — and ends the scope with the deadline's
//! `ScopeError` whenever the deadline passed during the body: a panic that
//! carries the deadline's message, an `Err`, even an `Ok` the body made
//! after the failure. Any other panic is resumed untouched. `try_scoped!`
//! and attributed `Result` functions return it, `scoped!` panics with its
//! message. Nested deadlines: the earliest wins, and every enclosing
//! `deadline` scope whose own (effective) deadline it was ends with it.
//!
//! What a deadline leaves half-done: it stops the body at the next
//! operator, wherever that is. A multi-op update it cuts short stays cut
//! short: an optimizer step that updated some parameters and not the
//! others, a backward pass that accumulated part of a `.grad`, a
//! `VarStore` copied in part. A `checkpoint` in the same list saves by
//! default on every exit, that half-done state too; with
//! `save_on_failure(false)` (`save_on_failure = false` in the macros) it
//! keeps the last good file instead.
//!
//! Scope exits are not refused: an exit that runs operators (a
//! `checkpoint`'s save) excludes the deadline for its duration, so a
//! deadline that has passed neither loses the save nor panics inside a
//! `Drop`.
//!
//! In async code the deadline is fixed at the first poll and checked
//! around every poll (per thread, like grad mode); the body's failure is
//! not turned into a `ScopeError` there (operators fail as above).
//!
//! A stop (SIGINT, SIGTERM or SIGUSR1 while a checkpoint is open; see
//! [`stop_requested`](crate::stop_requested)) refuses operators the same
//! way, with "stopped by SIGINT at aten::mm: …": a `deadline` scope whose
//! body it stopped ends with that message as its error, and the exclusion
//! above lifts it for an exit's save too.
//!
//! A deadline can also be an instant, `deadline(until = t)` /
//! [`Deadline::until`], so that a request's deadline counts from its
//! arrival rather than from the scope: operators fail from `t` on, with
//! "deadline passed 3 ms ago at aten::mm". An instant already past when
//! the scope is entered is no error at entry: the scope opens, and its
//! first operator is refused, like any operator after the instant. A
//! [`Context`](crate::Context) captured inside carries the open deadline
//! to another thread.

use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::{Duration, Instant};

use crate::{Scope, ScopeError, ffi};

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Saved {
    at: i64,
    budget: i64,
    start: i64,
    trips: u64,
    effective_at: i64,
    included: bool,
    instant: bool,
}

impl Saved {
    /// A copy read field by field. The shim wrote the fields one by one
    /// (the two flags as single bytes); a plain move of the struct reads
    /// 16-byte words, and a word loaded over several smaller fresh stores
    /// waits for them (a store-forwarding stall, about 5 ns each here).
    #[inline(always)]
    fn read(&self) -> Saved {
        // SAFETY: reads of fields of a live, initialised struct; volatile
        // only so that they are not merged into wide loads.
        unsafe {
            Saved {
                at: std::ptr::read_volatile(&self.at),
                budget: std::ptr::read_volatile(&self.budget),
                start: std::ptr::read_volatile(&self.start),
                trips: std::ptr::read_volatile(&self.trips),
                effective_at: std::ptr::read_volatile(&self.effective_at),
                included: std::ptr::read_volatile(&self.included),
                instant: std::ptr::read_volatile(&self.instant),
            }
        }
    }
}

// The shim's `tch_scope_deadline_saved`: `csrc/context.h` asserts the same.
const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<Saved>() == 48 && align_of::<Saved>() == 8);
    assert!(offset_of!(Saved, at) == 0 && offset_of!(Saved, budget) == 8);
    assert!(offset_of!(Saved, start) == 16 && offset_of!(Saved, trips) == 24);
    assert!(offset_of!(Saved, effective_at) == 32);
    assert!(offset_of!(Saved, included) == 40 && offset_of!(Saved, instant) == 41);
};

unsafe extern "C" {
    fn tch_scope_deadline_enter(
        budget_ns: i64,
        start_ns: *mut i64,
        saved: *mut Saved,
    ) -> ffi::Status;
    fn tch_scope_deadline_enter_until(
        from_now_ns: i64,
        at_ns: *mut i64,
        start_ns: *mut i64,
        saved: *mut Saved,
    ) -> ffi::Status;
    fn tch_scope_deadline_exit(at: i64, budget: i64, start: i64, instant: bool, included: bool);
    fn tch_scope_deadline_trips(trip_at: *mut i64) -> u64;
    fn tch_scope_deadline_trip_message() -> *const std::ffi::c_char;
    fn tch_scope_deadline_exclude() -> u8;
    fn tch_scope_deadline_unexclude(was: u8);
}

/// A time budget or an instant for the scope: once it has passed, the
/// next libtorch operator the thread calls fails, and the scope ends with
/// the deadline's [`ScopeError`] (see [`Deadline::run`]).
///
/// A budget's clock starts at the first [`enter`](Scope::enter); entering
/// the same value again (a future's later polls) keeps that deadline.
///
/// ```
/// use std::time::Duration;
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::Deadline;
/// let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
/// let r = Deadline::new(Duration::ZERO).run(|| a.mm(&a));
/// let e = r.unwrap_err();
/// assert!(e.to_string().starts_with("deadline of 0 us exceeded after"), "{e}");
/// assert!(e.to_string().ends_with(" at aten::mm"), "{e}");
/// let _ = a.mm(&a); // libtorch is fine afterwards
/// assert!(Deadline::new(Duration::from_secs(60)).run(|| a.mm(&a)).is_ok());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    limit: Limit,
    /// Steady-clock nanoseconds of the first entry; 0 before it.
    start: i64,
    /// Steady-clock nanoseconds of an instant, fixed at the first entry.
    at: i64,
}

#[derive(Debug, Clone, Copy)]
enum Limit {
    Budget(Duration),
    Until(Instant),
}

impl Deadline {
    /// A deadline `budget` after entry.
    ///
    /// ```
    /// let d = tch_scope::Deadline::new(std::time::Duration::from_millis(100));
    /// assert_eq!(d.budget(), Some(std::time::Duration::from_millis(100)));
    /// ```
    pub fn new(budget: Duration) -> Self {
        Self {
            limit: Limit::Budget(budget),
            start: 0,
            at: 0,
        }
    }

    /// A deadline at the instant `t` — say, a request's arrival plus its
    /// budget, so that time spent in a queue counts. Operators fail from
    /// `t` on with "deadline passed 3 ms ago at aten::mm"; a `t` already
    /// past at entry refuses the first operator (entering still succeeds).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tch::{Device, Kind, Tensor};
    /// use tch_scope::Deadline;
    /// let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
    /// let arrival = Instant::now();
    /// let ok = Deadline::until(arrival + Duration::from_secs(60)).run(|| a.mm(&a));
    /// assert!(ok.is_ok());
    /// let late = Deadline::until(arrival).run(|| a.mm(&a)).unwrap_err();
    /// assert!(late.to_string().starts_with("deadline passed "), "{late}");
    /// assert!(late.to_string().ends_with(" ago at aten::mm"), "{late}");
    /// ```
    pub fn until(t: Instant) -> Self {
        Self {
            limit: Limit::Until(t),
            start: 0,
            at: 0,
        }
    }

    /// The time budget of a [`new`](Self::new) deadline; `None` for an
    /// [`until`](Self::until) one.
    ///
    /// ```
    /// let d = tch_scope::Deadline::new(std::time::Duration::from_secs(1));
    /// assert_eq!(d.budget().map(|b| b.as_secs()), Some(1));
    /// assert_eq!(tch_scope::Deadline::until(std::time::Instant::now()).budget(), None);
    /// ```
    pub fn budget(&self) -> Option<Duration> {
        match self.limit {
            Limit::Budget(b) => Some(b),
            Limit::Until(_) => None,
        }
    }

    /// The instant of an [`until`](Self::until) deadline; `None` for a
    /// budget.
    ///
    /// ```
    /// let t = std::time::Instant::now();
    /// assert_eq!(tch_scope::Deadline::until(t).instant(), Some(t));
    /// ```
    pub fn instant(&self) -> Option<Instant> {
        match self.limit {
            Limit::Until(t) => Some(t),
            Limit::Budget(_) => None,
        }
    }

    /// Runs `f` inside the deadline, as the `deadline` word does: the
    /// deadline's error if it passed while `f` ran (whether `f` panicked
    /// on the failed operator, returned an `Err` or went on), else `f`'s
    /// value. Other panics are resumed untouched.
    ///
    /// # Errors
    /// The deadline's [`ScopeError`], or the error of entering it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = tch_scope::Deadline::new(Duration::from_secs(60)).run(|| 1 + 1);
    /// assert_eq!(r, Ok(2));
    /// ```
    pub fn run<T>(mut self, f: impl FnOnce() -> T) -> Result<T, ScopeError> {
        let guard = self.enter()?;
        guard.run(f)
    }
}

impl Limit {
    /// The scope as a user would write it, for its errors.
    fn name(self) -> String {
        match self {
            Limit::Budget(b) => format!("deadline({b:?})"),
            Limit::Until(t) => {
                let now = Instant::now();
                match t.checked_duration_since(now) {
                    Some(d) => format!("deadline(until = now + {d:?})"),
                    None => format!("deadline(until = now - {:?})", now - t),
                }
            }
        }
    }
}

/// Closes the deadline: the thread's enclosing one (if any) applies again.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct DeadlineGuard {
    saved: Saved,
    limit: Limit,
    _not_send: crate::PhantomNotSend,
}

impl Scope for Deadline {
    type Guard = DeadlineGuard;
    type Error = ScopeError;

    /// Leaving restores two thread-local words and reports nothing.
    const EXIT_CAN_FAIL: bool = false;

    /// # Errors
    /// Another library took the dispatch key the check needs (see
    /// `csrc/deadline.cpp`).
    #[inline]
    fn enter(&mut self) -> Result<DeadlineGuard, ScopeError> {
        let mut saved = Saved::default();
        let status = match self.limit {
            Limit::Budget(budget) => {
                let budget = i64::try_from(budget.as_nanos()).unwrap_or(i64::MAX);
                // SAFETY: writable out-params; exceptions caught by the shim.
                unsafe { tch_scope_deadline_enter(budget, &mut self.start, &mut saved) }
            }
            Limit::Until(t) => {
                let from_now = if self.start == 0 { from_now(t) } else { 0 };
                // SAFETY: writable out-params; exceptions caught by the shim.
                unsafe {
                    tch_scope_deadline_enter_until(
                        from_now,
                        &mut self.at,
                        &mut self.start,
                        &mut saved,
                    )
                }
            }
        };
        ffi::check(status).map_err(|e| ScopeError::new(self.limit.name(), None, e))?;
        Ok(DeadlineGuard {
            saved: saved.read(),
            limit: self.limit,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl DeadlineGuard {
    /// The deadline's error if this scope's deadline (the earliest open
    /// one when it was entered) has refused an operator since entry, or
    /// the stop's if a stop on a signal has.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tch_scope::{Deadline, Scope};
    /// let g = Deadline::new(Duration::ZERO).enter().unwrap();
    /// assert!(g.passed().is_none());
    /// assert!(tch::Tensor::f_zeros([2], (tch::Kind::Float, tch::Device::Cpu)).is_err());
    /// assert!(g.passed().is_some());
    /// ```
    pub fn passed(&self) -> Option<ScopeError> {
        tripped_since(self.saved.trips, self.saved.effective_at, || {
            self.limit.name()
        })
    }

    /// Runs `f` inside this open deadline: see [`Deadline::run`].
    ///
    /// # Errors
    /// The deadline's [`ScopeError`] if it passed while `f` ran.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tch_scope::{Deadline, Scope};
    /// let g = Deadline::new(Duration::from_secs(60)).enter().unwrap();
    /// assert_eq!(g.run(|| "done"), Ok("done"));
    /// ```
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T, ScopeError> {
        run_catching(f, || self.passed())
    }
}

/// While alive, no deadline refuses an operator of this thread: held by a
/// scope's exit that runs operators (a checkpoint's save), so that a
/// deadline that has passed (the reason the body ended, perhaps) does not
/// make the exit fail, or panic inside `Drop` while a panic unwinds. A
/// stop's refusal of operators (see `crate::stop`) is lifted with it. The
/// deadline's key is excluded, as `c10::impl::ExcludeDispatchKeyGuard`
/// does; a deadline entered inside stays off too, and leaving puts the
/// exclusion back as it was (so these nest).
#[must_use = "the deadline is excluded only while the guard lives"]
#[derive(Debug)]
pub(crate) struct DeadlineExcluded {
    /// Whether the deadline (bit 0) and a stop's refusal (bit 1) were
    /// excluded already.
    was: u8,
    _not_send: crate::PhantomNotSend,
}

impl DeadlineExcluded {
    /// Excludes the deadline on this thread until the guard drops.
    pub(crate) fn new() -> Self {
        // SAFETY: two thread-local words; never throws.
        let was = unsafe { tch_scope_deadline_exclude() };
        Self {
            was,
            _not_send: crate::PhantomNotSend::NEW,
        }
    }
}

impl Drop for DeadlineExcluded {
    fn drop(&mut self) {
        // SAFETY: what `new` found, on the same thread (the guard is !Send).
        unsafe { tch_scope_deadline_unexclude(self.was) };
    }
}

/// How many operators this thread has had refused on a deadline so far: a
/// mark for [`tripped_since`].
pub(crate) fn trips() -> u64 {
    let mut trip_at = 0;
    // SAFETY: a writable out-param.
    unsafe { tch_scope_deadline_trips(&mut trip_at) }
}

/// The deadline's error (of `scope`) if, since the thread's trip count was
/// `mark`, an operator was refused on the deadline at `at` (steady-clock
/// nanoseconds, the one the scope opened or carried).
pub(crate) fn tripped_since(
    mark: u64,
    at: i64,
    scope: impl FnOnce() -> String,
) -> Option<ScopeError> {
    let mut trip_at = 0;
    // SAFETY: a writable out-param.
    let trips = unsafe { tch_scope_deadline_trips(&mut trip_at) };
    // A stop's refusal is every open scope's: it ends them all.
    if trips == mark || (trip_at != at && trip_at != STOP_AT) {
        return None;
    }
    // SAFETY: a NUL-terminated thread-local string, copied at once.
    let msg = unsafe { CStr::from_ptr(tch_scope_deadline_trip_message()) };
    Some(ScopeError::ended(scope(), None, msg.to_string_lossy()))
}

/// The `trip_at` of an operator refused by a stop (`csrc/deadline.cpp`'s
/// `kStopAt`): no deadline's instant, which are never negative.
const STOP_AT: i64 = i64::MIN;

/// Runs `f` under `catch_unwind`, then asks `passed`: its error if the
/// deadline passed while `f` ran (a panic carrying that message, an `Err`,
/// or a value made after the failure), else `f`'s value; any other panic
/// is resumed untouched.
pub(crate) fn run_catching<T>(
    f: impl FnOnce() -> T,
    passed: impl FnOnce() -> Option<ScopeError>,
) -> Result<T, ScopeError> {
    // Sound to assert: on a caught panic the value is either resumed
    // or dropped for an error; nothing observes a broken invariant.
    let r = catch_unwind(AssertUnwindSafe(f));
    let Some(e) = passed() else {
        return r.map_err(|p| resume_unwind(p));
    };
    match r {
        Err(payload) if !mentions(&*payload, e.reason()) => resume_unwind(payload),
        _ => Err(e),
    }
}

/// Signed nanoseconds from now to `t` (negative once it has passed),
/// saturating: the shim turns it into a steady-clock instant, the clock
/// `Instant` reads on Linux.
fn from_now(t: Instant) -> i64 {
    let now = Instant::now();
    let sat = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match t.checked_duration_since(now) {
        Some(ahead) => sat(ahead),
        None => -sat(now - t),
    }
}

/// Whether a panic's message contains `msg` (tch's `unwrap` of the
/// refused operator's error, or an inner `scoped!`'s deadline panic).
fn mentions(payload: &(dyn std::any::Any + Send), msg: &str) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    text.is_some_and(|t| t.contains(msg))
}

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        let s = &self.saved;
        // SAFETY: what enter saved, on the same thread (the guard is !Send).
        unsafe { tch_scope_deadline_exit(s.at, s.budget, s.start, s.instant, s.included) };
    }
}
