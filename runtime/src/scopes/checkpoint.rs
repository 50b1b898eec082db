//! `checkpoint(vs, "path")`: save a `tch::nn::VarStore` when the scope ends
//! — normally, through `?`/`return`, or by a panic — crash-safely.
//!
//! It is a *training checkpoint* (weights saved on exit, `resume` to load
//! them), **not** `torch.utils.checkpoint`'s activation checkpointing: it
//! does not drop activations in the forward pass or recompute them in the
//! backward one, and does not change memory use or autograd in any way.
//!
//! The file is written to a temporary file in the same folder, every write
//! and the final flush checked, fsynced, renamed over `path`, and the folder
//! fsynced: a process killed at any moment, a full disk or a file-size limit
//! leaves the previous checkpoint or the new one, never a torn file; a save
//! that fails is reported (see [`CheckpointGuard`]), never an abort.
//! With `resume`, entering loads `path` into the VarStore when it exists.
//!
//! # Exits
//! The save runs with every deadline excluded: a `deadline` that has passed
//! (perhaps the reason the body ended) refuses no operator of the save (the
//! metric tensors, a CUDA VarStore's copy to the CPU), so
//! `scoped!(deadline(d), checkpoint(vs, p) => …)` writes the checkpoint and
//! then ends with the deadline's error. The save calls only tch's fallible
//! functions: it never panics.
//!
//! Two checkpoints of one path in one process (two threads, or nested):
//! the file keeps the save of the checkpoint left last — the order of the
//! exits decides, not which write happens to finish last.
//!
//! # What a failed exit saves
//! A `deadline` stops the body at the next operator, wherever that is: in
//! the middle of an optimizer step (some parameters updated, others not),
//! or of a backward pass (a `.grad` partly accumulated). By default the
//! checkpoint saves on every exit, as a Python `finally` does — that
//! half-done state too. With
//! [`save_on_failure(false)`](Checkpoint::save_on_failure)
//! (`checkpoint(vs, p, save_on_failure = false)` in the macros) no failed exit
//! saves, and the last good file stays: see that method for what counts as
//! failed.
//!
//! # Metrics
//! The body appends metrics with [`log_metric`]`("loss", v)`: they go to the
//! innermost open checkpoint of the thread (like [`current_device`]
//! (crate::current_device) names the innermost device), so no handle has to
//! be threaded through the body or through functions it calls — and
//! `#[checkpoint(..)]` on a function works the same. The log is saved in
//! the *same* file as the weights, as f64 tensors named
//! `__tch_scope_metric__.<name>`, so weights and metrics are replaced
//! together, atomically; `resume` restores both, and [`metrics`] reads the
//! log (e.g. to find the step to resume from). The file stays a plain
//! VarStore file: `VarStore::load` reads it and ignores the metric tensors.
//! The format follows the extension like `VarStore::save`: `.safetensors`
//! or libtorch's own.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{MutexGuard, PoisonError};

use tch::nn::{VarStore, Variables};
use tch::{Device, Kind, TchError, Tensor};

use crate::durable::{self, Turn};
use crate::error::DeviceName;
use crate::scopes::deadline::{self, DeadlineExcluded};
use crate::{NoGrad, Outcome, Scope, ScopeError};

const PREFIX: &str = "__tch_scope_metric__.";

/// A checkpoint's metric log: every value appended under each name, in
/// order.
///
/// ```
/// use tch_scope::{log_metric, metrics, scoped};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let path = std::env::temp_dir().join(format!("doc-metrics-{}.ot", std::process::id()));
/// let log = scoped!(checkpoint(vs, &path) => {
///     log_metric("loss", 0.5);
///     log_metric("loss", 0.25);
///     metrics().unwrap()
/// });
/// assert_eq!(log.get("loss"), [0.5, 0.25]);
/// assert_eq!(log.names().collect::<Vec<_>>(), ["loss"]);
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(BTreeMap<String, Vec<f64>>);

impl Metrics {
    /// The values logged under `name` (empty if none).
    ///
    /// ```
    /// assert!(tch_scope::Metrics::default().get("loss").is_empty());
    /// ```
    pub fn get(&self, name: &str) -> &[f64] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// The names logged, sorted.
    ///
    /// ```
    /// assert_eq!(tch_scope::Metrics::default().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

thread_local! {
    /// The metric logs of this thread's open checkpoints, innermost last.
    static OPEN: RefCell<Vec<Rc<RefCell<Metrics>>>> = const { RefCell::new(Vec::new()) };
}

/// Appends `value` under `name` to the innermost open checkpoint of this
/// thread; returns `false` (and logs nothing) when none is open.
///
/// ```
/// assert!(!tch_scope::log_metric("loss", 1.0)); // no checkpoint open
/// ```
pub fn log_metric(name: &str, value: f64) -> bool {
    OPEN.with_borrow(|open| match open.last() {
        Some(log) => {
            let mut log = log.borrow_mut();
            log.0.entry(name.to_owned()).or_default().push(value);
            true
        }
        None => false,
    })
}

/// A copy of the innermost open checkpoint's metric log on this thread
/// (after `resume`, what the file held plus what was logged since).
///
/// ```
/// assert_eq!(tch_scope::metrics(), None);
/// ```
pub fn metrics() -> Option<Metrics> {
    OPEN.with_borrow(|open| open.last().map(|log| log.borrow().clone()))
}

/// Saves `vs` (and the metric log) to `path` when the scope ends: a
/// training checkpoint, not `torch.utils.checkpoint`'s activation
/// recomputation (see the [module docs](self)).
///
/// ```
/// use tch::{Device, nn};
/// use tch_scope::{Checkpoint, Scope};
/// let path = std::env::temp_dir().join(format!("doc-ckpt-{}.safetensors", std::process::id()));
/// let vs = nn::VarStore::new(Device::Cpu);
/// let _lin = nn::linear(vs.root(), 2, 1, Default::default());
/// drop(Checkpoint::new(&vs, &path).enter().unwrap());
///
/// let mut again = nn::VarStore::new(Device::Cpu);
/// let _lin = nn::linear(again.root(), 2, 1, Default::default());
/// again.load(&path).unwrap(); // a plain VarStore file
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug)]
pub struct Checkpoint<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    resume: bool,
    save_on_failure: bool,
}

impl<'a> Checkpoint<'a> {
    /// Saves `vs` to `path` on exit.
    pub fn new(vs: &'a VarStore, path: impl AsRef<Path>) -> Self {
        Self {
            vs,
            path: path.as_ref().to_path_buf(),
            resume: false,
            save_on_failure: true,
        }
    }

    /// With `false`, a scope that fails saves nothing: the last good file
    /// stays (the weights of a run that blew up may be NaN, those of a step
    /// a deadline cut short half updated). The default, `true`, saves on
    /// every exit, as a Python `finally` does.
    ///
    /// Failed is every exit but a completed one: a panic; an `Err` that the
    /// expansion saw (an attributed function returning `Result`,
    /// [`ScopeStack::close`](crate::ScopeStack::close)`(Outcome::Failed)`);
    /// a scope of the same list that ended the body (a passed `deadline`,
    /// a later scope that could not be entered); and, wherever the outcome
    /// is not heard (a guard dropped by hand, async code), any operator a
    /// deadline refused on this thread while the checkpoint was open.
    ///
    /// ```
    /// use tch::{Device, nn};
    /// use tch_scope::{Checkpoint, Outcome, ScopeStack};
    /// let path = std::env::temp_dir().join(format!("doc-ckpt-fail-{}.ot", std::process::id()));
    /// let vs = nn::VarStore::new(Device::Cpu);
    /// let _lin = nn::linear(vs.root(), 2, 1, Default::default());
    /// let mut stack = ScopeStack::new();
    /// stack.enter(Checkpoint::new(&vs, &path).save_on_failure(false)).unwrap();
    /// stack.close(Outcome::Failed);
    /// assert!(!path.exists()); // nothing saved
    /// ```
    pub fn save_on_failure(mut self, save: bool) -> Self {
        self.save_on_failure = save;
        self
    }

    /// The former name of [`save_on_failure`](Self::save_on_failure),
    /// which it calls: it covers every failed exit, not only a panic.
    #[deprecated(note = "renamed `save_on_failure`: it covers every failed exit, not only a panic")]
    pub fn save_on_panic(self, save: bool) -> Self {
        self.save_on_failure(save)
    }

    /// With `true`, entering loads `path` (weights and metrics) when it
    /// exists; a file that exists but can't be loaded is a [`ScopeError`].
    pub fn resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    fn error(&self, reason: impl Into<String>) -> ScopeError {
        ScopeError::new(
            format!("checkpoint({:?})", self.path),
            Some(self.vs.device()),
            reason,
        )
    }
}

/// Saves on drop. A save that fails leaves the previous checkpoint in
/// place, and reaches the caller: on the success path of
/// [`try_scoped!`](crate::try_scoped) as its `Err`, of
/// [`scoped!`](crate::scoped) as a panic; on a failed path (a panic, an
/// `Err`, a passed deadline: the caller gets that error) or a plain drop,
/// the exit hook ([`set_exit_hook`](crate::set_exit_hook)) hears it.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct CheckpointGuard<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    /// `path` as the order of the saves knows it (see `durable::Turn`).
    destination: PathBuf,
    log: Rc<RefCell<Metrics>>,
    save_on_failure: bool,
    /// How the body ended, when `Scope::exit` told it.
    outcome: Option<Outcome>,
    /// The thread's count of operators refused by deadlines, at entry.
    trips: u64,
    _not_send: crate::PhantomNotSend,
}

impl<'a> Scope for Checkpoint<'a> {
    type Guard = CheckpointGuard<'a>;
    type Error = ScopeError;

    /// # Errors
    /// The path can't be written (its folder is missing or not writable,
    /// or it is a folder), or with `resume`, the file exists but can't be
    /// loaded.
    fn enter(&mut self) -> Result<CheckpointGuard<'a>, ScopeError> {
        durable::check_writable(&self.path)
            .map_err(|e| self.error(format!("{} can't be written: {e}", self.path.display())))?;
        let mut log = Metrics::default();
        if self.resume && self.path.exists() {
            log = load(self.vs, &self.path).map_err(|e| self.error(e))?;
        }
        let log = Rc::new(RefCell::new(log));
        OPEN.with_borrow_mut(|open| open.push(Rc::clone(&log)));
        Ok(CheckpointGuard {
            vs: self.vs,
            path: self.path.clone(),
            destination: durable::destination(&self.path),
            log,
            save_on_failure: self.save_on_failure,
            outcome: None,
            trips: deadline::trips(),
            _not_send: crate::PhantomNotSend::NEW,
        })
    }

    /// Keeps the outcome for the save (`save_on_failure`).
    fn exit(guard: &mut CheckpointGuard<'a>, outcome: Outcome) {
        guard.outcome = Some(outcome);
    }
}

impl CheckpointGuard<'_> {
    /// Whether the scope is being left by a failure (see
    /// [`Checkpoint::save_on_failure`]).
    fn failed(&self) -> bool {
        let outcome = self
            .outcome
            .unwrap_or_else(|| Outcome::at_exit_or(Outcome::Completed));
        outcome != Outcome::Completed || deadline::trips() != self.trips
    }
}

impl Drop for CheckpointGuard<'_> {
    fn drop(&mut self) {
        // Usually the last entry; searched so that out-of-order drops of
        // hand-held guards stay correct.
        OPEN.with_borrow_mut(|open| {
            if let Some(i) = open.iter().rposition(|l| Rc::ptr_eq(l, &self.log)) {
                open.remove(i);
            }
        });
        if !self.save_on_failure && self.failed() {
            return;
        }
        // The exits decide the order of the saves to one path: the turn is
        // taken before anything of the save runs.
        let turn = Turn::take(std::mem::take(&mut self.destination));
        // The save's operators must run even past a deadline: a refused
        // one would lose the checkpoint (and in tch's panicking calls,
        // abort the process while a panic unwinds).
        let _unchecked = DeadlineExcluded::new();
        let log = self.log.borrow();
        if let Err(e) = save(self.vs, &self.path, &turn, &log) {
            crate::exit::report(
                "checkpoint",
                format_args!(
                    "could not save the checkpoint {}: {e} (a VarStore on {})",
                    self.path.display(),
                    DeviceName(self.vs.device())
                ),
            );
        }
    }
}

fn is_safetensors(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// A tch error as one line.
fn clean(e: &TchError) -> String {
    durable::without_backtrace(&e.to_string()).to_owned()
}

/// The VarStore's variables; a lock poisoned by a panic elsewhere still
/// holds them (tch's `variables()` would panic).
fn variables(vs: &VarStore) -> MutexGuard<'_, Variables> {
    vs.variables_.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes the variables and the metric log to `path`, crash-safely, in
/// `turn`. Only tch's fallible calls: it runs in `Drop`.
fn save(vs: &VarStore, path: &Path, turn: &Turn, log: &Metrics) -> Result<(), String> {
    let metrics = log
        .0
        .iter()
        .map(|(name, values)| match Tensor::f_from_slice(values) {
            Ok(t) => Ok((format!("{PREFIX}{name}"), t)),
            Err(e) => Err(format!("metric {name}: {}", clean(&e))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let vars = variables(vs);
    let named: Vec<(&str, &Tensor)> = vars
        .named_variables
        .iter()
        .map(|(name, t)| (name.as_str(), t))
        .chain(metrics.iter().map(|(name, t)| (name.as_str(), t)))
        .collect();
    let safetensors = is_safetensors(path);
    durable::replace_in_turn(path, turn, |tmp| {
        // Through a writer whose every write is checked: libtorch's own
        // file writer throws out of its archive writer on a full disk
        // (an abort) and never checks its final `close()`.
        let out = durable::Output::create(tmp)?;
        let written = if safetensors {
            write_safetensors(&named, &mut out.writer())
        } else {
            Tensor::save_multi_to_stream(&named, out.writer()).map_err(|e| clean(&e))
        };
        // A failed write first: libtorch's error after it is its echo.
        out.finish()?;
        written
    })
    .map(|_| ())
}

/// The shape of `t`. Through torch-sys: tch's `size()` unwraps.
fn shape(t: &Tensor) -> Result<Vec<i64>, String> {
    let ptr = t.as_ptr().cast_mut();
    // SAFETY: a live tensor; `at_shape` writes `at_dim` values; both catch
    // C++ exceptions into torch-sys's last error, read (and freed) at once.
    unsafe {
        let dim = torch_sys::at_dim(ptr);
        torch_error()?;
        let mut shape = vec![0i64; dim];
        torch_sys::at_shape(ptr, shape.as_mut_ptr());
        torch_error()?;
        Ok(shape)
    }
}

/// torch-sys's last error on this thread, cleared.
///
/// # Safety
/// Only after a torch-sys call on this thread.
unsafe fn torch_error() -> Result<(), String> {
    // SAFETY: a string from `strdup`, or null; freed once, here.
    unsafe {
        let err = torch_sys::get_and_reset_last_err();
        if err.is_null() {
            return Ok(());
        }
        let msg = CStr::from_ptr(err).to_string_lossy().into_owned();
        libc::free(err.cast());
        Err(durable::without_backtrace(&msg).to_owned())
    }
}

/// The safetensors name of a kind (as tch's `write_safetensors` has it).
fn safetensors_dtype(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Bool => "BOOL",
        Kind::Uint8 => "U8",
        Kind::Int8 => "I8",
        Kind::Int16 => "I16",
        Kind::Int => "I32",
        Kind::Int64 => "I64",
        Kind::BFloat16 => "BF16",
        Kind::Half => "F16",
        Kind::Float => "F32",
        Kind::Double => "F64",
        _ => return None,
    })
}

/// `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes `named` in the safetensors format, as `Tensor::write_safetensors`
/// does, through `w` and with tch's fallible calls only (its writer copies
/// each tensor's bytes with an `unwrap`, and opens its own file).
fn write_safetensors(named: &[(&str, &Tensor)], w: &mut impl Write) -> Result<(), String> {
    struct Entry<'t> {
        name: &'t str,
        tensor: &'t Tensor,
        dtype: &'static str,
        shape: Vec<i64>,
        numel: usize,
        bytes: usize,
    }
    let mut entries = Vec::with_capacity(named.len());
    for &(name, tensor) in named {
        let what = |e: String| format!("variable {name}: {e}");
        let kind = tensor.f_kind().map_err(|e| what(clean(&e)))?;
        let dtype = safetensors_dtype(kind)
            .ok_or_else(|| what(format!("{kind:?} has no safetensors dtype")))?;
        let shape = shape(tensor).map_err(what)?;
        let numel = shape.iter().try_fold(1usize, |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        });
        let (numel, bytes) = numel
            .and_then(|n| Some((n, n.checked_mul(kind.elt_size_in_bytes())?)))
            .ok_or_else(|| what(format!("shape {shape:?} is too large")))?;
        entries.push(Entry {
            name,
            tensor,
            dtype,
            shape,
            numel,
            bytes,
        });
    }
    // Sorted, so that one VarStore always makes the same file.
    entries.sort_by(|a, b| a.name.cmp(b.name));
    let mut header = String::from("{");
    let mut offset = 0usize;
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        json_string(&mut header, e.name);
        let dims: Vec<String> = e.shape.iter().map(i64::to_string).collect();
        let _ = write!(
            header,
            r#":{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}}"#,
            e.dtype,
            dims.join(","),
            offset,
            offset + e.bytes
        );
        offset += e.bytes;
    }
    header.push('}');
    // Padded with spaces to a multiple of 8, as safetensors does.
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let io = |e: std::io::Error| e.to_string();
    w.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(header.as_bytes()).map_err(io)?;
    let mut buf = Vec::new();
    for e in &entries {
        let what = |err: TchError| format!("variable {}: {}", e.name, clean(&err));
        let cpu = e
            .tensor
            .f_to(Device::Cpu)
            .and_then(|t| t.f_contiguous())
            .map_err(what)?;
        buf.clear();
        buf.resize(e.bytes, 0u8);
        cpu.f_copy_data_u8(&mut buf, e.numel).map_err(what)?;
        w.write_all(&buf).map_err(io)?;
    }
    Ok(())
}

/// Copies the file's tensors into `vs` (every variable must be there, with
/// its shape) and returns the metric log stored with them. Nothing is
/// copied unless every variable can be: the VarStore is loaded in full or
/// left as it was.
fn load(vs: &VarStore, path: &Path) -> Result<Metrics, String> {
    let named = if is_safetensors(path) {
        Tensor::read_safetensors(path)
    } else {
        Tensor::load_multi_with_device(path, vs.device())
    }
    .map_err(|e| clean(&e))?;
    let mut log = Metrics::default();
    let mut tensors = HashMap::new();
    for (name, t) in named {
        match name.strip_prefix(PREFIX) {
            Some(metric) => {
                let values = t
                    .f_to_kind(Kind::Double)
                    .and_then(|t| t.f_to(Device::Cpu))
                    .and_then(|t| Vec::<f64>::try_from(&t))
                    .map_err(|e| format!("metric {metric}: {}", clean(&e)))?;
                log.0.insert(metric.to_owned(), values);
            }
            None => {
                tensors.insert(name, t);
            }
        }
    }
    let mut vars = variables(vs);
    for (name, var) in &vars.named_variables {
        let src = tensors
            .get(name)
            .ok_or_else(|| format!("{} has no variable {name}", path.display()))?;
        let (have, want) = (shape(src)?, shape(var)?);
        if have != want {
            return Err(format!(
                "variable {name} has shape {have:?} in {}, {want:?} in the VarStore",
                path.display(),
            ));
        }
    }
    let _no_grad = NoGrad.enter().map_err(|e| e.to_string())?;
    // All or nothing: a deadline around the entry (it has refused the
    // reading already if it passed) must not stop the copy halfway.
    let _unchecked = DeadlineExcluded::new();
    for (name, var) in &mut vars.named_variables {
        if let Some(src) = tensors.get(name) {
            var.f_copy_(src)
                .map_err(|e| format!("variable {name}: {}", clean(&e)))?;
        }
    }
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tch-scope-ckpt-{}-{name}", std::process::id()))
    }

    #[test]
    fn safetensors_are_written_as_tch_writes_them() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).view([2, 3]);
        let b = Tensor::from_slice(&[7.0f32]);
        let s = Tensor::from_slice(&[0.5f32]).view([0i64; 0]);
        let named = [("w\"ei\\rd", &a), ("b", &b), ("s", &s)];
        let mut mine = vec![];
        write_safetensors(&named, &mut mine).unwrap();
        let path = temp("same.safetensors");
        Tensor::write_safetensors(&named, &path).unwrap();
        assert_eq!(mine, std::fs::read(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn safetensors_of_mixed_kinds_and_strided_tensors_read_back() {
        let t = Tensor::arange(6, (Kind::Float, Device::Cpu))
            .view([2, 3])
            .tr();
        let d = Tensor::from_slice(&[0.25f64, 0.5]);
        let i = Tensor::from_slice(&[3i64, -4, 5]);
        let e = Tensor::from_slice::<f64>(&[]);
        let named = [("t", &t), ("d", &d), ("i", &i), ("e", &e)];
        let mut bytes = vec![];
        write_safetensors(&named, &mut bytes).unwrap();
        let path = temp("mixed.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let back: HashMap<String, Tensor> = Tensor::read_safetensors(&path)
            .unwrap()
            .into_iter()
            .collect();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(back.len(), 4);
        for (name, want) in named {
            let got = &back[name];
            assert_eq!(got.kind(), want.kind(), "{name}");
            assert_eq!(got.size(), want.size(), "{name}");
            assert!(got.equal(want), "{name}");
        }
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, r#""a\"b\\c\u000ad\u0001é""#);
    }

    #[test]
    fn shapes_come_without_panicking_calls() {
        let t = Tensor::zeros([2, 0, 3], (Kind::Float, Device::Cpu));
        assert_eq!(shape(&t), Ok(vec![2, 0, 3]));
        assert_eq!(shape(&Tensor::from(1.5f64)), Ok(vec![]));
    }
}
