//! The model behind the server: a [`Batcher`] of any servable model,
//! type-erased, with the inputs it declares (if it declares any).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tch::Tensor;

use super::oip::{Datatype, OipError};
use crate::aoti::{InputDim, Package};
use crate::batch::{self, BatchOptions, BatchStats, Batcher, Ticket};
use crate::{Context, Inference, ScopeError, Servable};

/// A batcher shared with the program (`Engine::shared`).
impl<S: Submit + ?Sized> Submit for Arc<S> {
    fn submit_in(&self, ctx: Context, inputs: Vec<Tensor>, deadline: Option<Instant>) -> Ticket {
        (**self).submit_in(ctx, inputs, deadline)
    }
    fn stats(&self) -> BatchStats {
        (**self).stats()
    }
    fn queued(&self) -> usize {
        (**self).queued()
    }
    fn live_workers(&self) -> usize {
        (**self).live_workers()
    }
}

/// Triton's platform name for a TorchScript model, as the metadata says it.
pub use super::oip::PLATFORM_TORCHSCRIPT;

/// The metadata's platform for an AOTInductor package (Triton has none).
pub const PLATFORM_AOTI: &str = "pytorch_aoti";

/// The metadata's platform for a model given as a [`Batcher`].
pub const PLATFORM_TCH_SCOPE: &str = "tch_scope";

/// A batcher with its model's type erased.
trait Submit: Send + Sync {
    fn submit_in(&self, ctx: Context, inputs: Vec<Tensor>, deadline: Option<Instant>) -> Ticket;
    fn stats(&self) -> BatchStats;
    fn queued(&self) -> usize;
    fn live_workers(&self) -> usize;
}

impl<M: Servable + Send + Sync + 'static> Submit for Batcher<M> {
    fn submit_in(&self, ctx: Context, inputs: Vec<Tensor>, deadline: Option<Instant>) -> Ticket {
        Batcher::submit_in(self, ctx, inputs, deadline)
    }
    fn stats(&self) -> BatchStats {
        Batcher::stats(self)
    }
    fn queued(&self) -> usize {
        Batcher::queued(self)
    }
    fn live_workers(&self) -> usize {
        Batcher::live_workers(self)
    }
}

/// The model a [`Server`](super::Server) serves: a [`Batcher`] over an
/// [`Inference`] (requests computed together, each in inference mode, by
/// its deadline; see [`batch`](crate::batch)), with the platform and the
/// inputs its metadata reports.
///
/// Made from a TorchScript file ([`torchscript`](Self::torchscript)), an
/// AOTInductor package ([`package`](Self::package)), either by its
/// extension ([`load`](Self::load)), or any batcher ([`new`](Self::new)):
/// a model trained in Rust in [`Replicas`](crate::Replicas), for one.
pub struct Engine {
    batcher: Box<dyn Submit>,
    platform: &'static str,
    inputs: Option<Vec<(Datatype, Vec<i64>)>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("platform", &self.platform)
            .field("inputs", &self.inputs)
            .field("stats", &self.batcher.stats())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Serves `batcher`'s model; it declares no inputs (give them with
    /// [`Server::input`](super::Server::input)).
    #[must_use]
    pub fn new<M: Servable + Send + Sync + 'static>(batcher: Batcher<M>) -> Self {
        Self {
            batcher: Box::new(batcher),
            platform: PLATFORM_TCH_SCOPE,
            inputs: None,
        }
    }

    /// Serves a batcher that other code shares: an application's own
    /// routes submitting to it beside the protocol's (see
    /// [`Server::oip_routes`](super::Server::oip_routes)). The platform is
    /// `platform` ([`PLATFORM_TORCHSCRIPT`], [`PLATFORM_AOTI`], …); it
    /// declares no inputs (give them with
    /// [`Server::input`](super::Server::input)).
    #[must_use]
    pub fn shared<M: Servable + Send + Sync + 'static>(
        batcher: Arc<Batcher<M>>,
        platform: &'static str,
    ) -> Self {
        Self {
            batcher: Box::new(batcher),
            platform,
            inputs: None,
        }
    }

    /// Loads the TorchScript file at `path` and batches it with `options`
    /// ([`batch::cmodule_forward`]). A TorchScript file declares no input
    /// shapes: give them with [`Server::input`](super::Server::input).
    ///
    /// # Errors
    /// A [`ScopeError`] saying the file cannot be loaded, or the batcher
    /// cannot start.
    pub fn torchscript(path: impl AsRef<Path>, options: BatchOptions) -> Result<Self, ScopeError> {
        let path = path.as_ref();
        let model = tch::CModule::load(path)
            .map_err(|e| ScopeError::load(path.display().to_string(), None, e.to_string()))?;
        let served = Arc::new(Inference::new(model)?);
        let batcher = Batcher::new(served, options, batch::cmodule_forward)?;
        Ok(Self {
            platform: PLATFORM_TORCHSCRIPT,
            ..Self::new(batcher)
        })
    }

    /// Loads the AOTInductor package at `path` (one runner per core, so
    /// that no batcher worker waits for another's run) and batches it with `options` ([`batch::package_forward`]).
    /// Its inputs are the ones the package declares
    /// ([`Package::input_specs`]): a dynamic dim is `-1`.
    ///
    /// # Errors
    /// A [`ScopeError`] saying the package cannot be loaded, or the batcher
    /// cannot start.
    pub fn package(path: impl AsRef<Path>, options: BatchOptions) -> Result<Self, ScopeError> {
        let path = path.as_ref();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let model = Package::options().runners(cores).load(path)?;
        let inputs = model.input_specs().and_then(|specs| {
            specs
                .iter()
                .map(|s| {
                    let datatype = Datatype::from_kind(s.kind()?).ok()?;
                    let shape = s
                        .dims()
                        .iter()
                        .map(|d| match d {
                            InputDim::Fixed(n) => *n,
                            InputDim::Range { .. } => -1,
                        })
                        .collect();
                    Some((datatype, shape))
                })
                .collect::<Option<Vec<_>>>()
        });
        let served = Arc::new(Inference::new(model)?);
        let batcher = Batcher::new(served, options, batch::package_forward)?;
        Ok(Self {
            platform: PLATFORM_AOTI,
            inputs,
            ..Self::new(batcher)
        })
    }

    /// [`package`](Self::package) for a path ending in `.pt2` (any case),
    /// [`torchscript`](Self::torchscript) for any other.
    ///
    /// # Errors
    /// As theirs.
    pub fn load(path: impl AsRef<Path>, options: BatchOptions) -> Result<Self, ScopeError> {
        let path = path.as_ref();
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pt2"))
        {
            Self::package(path, options)
        } else {
            Self::torchscript(path, options)
        }
    }

    /// The metadata's platform: [`PLATFORM_TORCHSCRIPT`], [`PLATFORM_AOTI`]
    /// or [`PLATFORM_TCH_SCOPE`].
    #[must_use]
    pub fn platform(&self) -> &'static str {
        self.platform
    }

    /// The inputs the model declares, as (datatype, shape with `-1` for a
    /// dynamic dim); `None` when it declares none.
    #[must_use]
    pub fn inputs(&self) -> Option<&[(Datatype, Vec<i64>)]> {
        self.inputs.as_deref()
    }

    /// The counts of the batcher so far.
    #[must_use]
    pub fn stats(&self) -> BatchStats {
        self.batcher.stats()
    }

    /// Requests waiting for a worker.
    #[must_use]
    pub fn queued(&self) -> usize {
        self.batcher.queued()
    }

    /// The batcher's worker threads still running (0: it answers nothing).
    #[must_use]
    pub fn live_workers(&self) -> usize {
        self.batcher.live_workers()
    }

    /// Submits `inputs`, computed in `ctx` (and inference mode) by
    /// `deadline`.
    pub(crate) fn submit(
        &self,
        ctx: Context,
        inputs: Vec<Tensor>,
        deadline: Option<Instant>,
    ) -> Ticket {
        self.batcher.submit_in(ctx, inputs, deadline)
    }
}

/// A [`batch::BatchError`] as an answer's status: 504 for a request whose
/// deadline passed (in the queue, or during its forward: the deadline
/// scope ended it), 503 for a full queue or no worker, 422 for an input
/// the model refused (its forward failed on it, computed alone), 500
/// otherwise (a panic, a context that could not be entered, the model out
/// of memory).
pub(crate) fn batch_status(e: &batch::BatchError) -> u16 {
    match e {
        batch::BatchError::Expired { .. } => 504,
        batch::BatchError::Failed(s) if s.is_ended() => 504,
        batch::BatchError::Failed(s) if refused(s) => 422,
        batch::BatchError::QueueFull { .. } | batch::BatchError::Closed => 503,
        _ => 500,
    }
}

/// Whether the model's own forward failed on the input (not for want of
/// memory): the client's input, not the server, is at fault.
fn refused(e: &ScopeError) -> bool {
    let lower = e.reason().to_ascii_lowercase();
    e.stage() == crate::Stage::Run
        && !lower.contains("out of memory")
        && !lower.contains("can't allocate memory")
}

/// A [`batch::BatchError`] as the message for a client: for an input the
/// model refused, "the model refused the input: " and the last line of
/// its error (a TorchScript error ends with the `…Error: …` line, after
/// the traceback of the model's code); otherwise the error itself.
pub(crate) fn batch_message(e: &batch::BatchError) -> String {
    match e {
        batch::BatchError::Failed(s) if !s.is_ended() && refused(s) => {
            let line = s
                .reason()
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("");
            format!("the model refused the input: {line}")
        }
        _ => e.to_string(),
    }
}

/// A model's output datatype, for its metadata.
pub(crate) fn datatype_of(t: &Tensor) -> Result<Datatype, OipError> {
    let kind = t
        .f_kind()
        .map_err(|e| OipError::internal(format!("an output has no dtype: {e}")))?;
    Datatype::from_kind(kind)
}
