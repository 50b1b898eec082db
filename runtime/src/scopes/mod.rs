//! One module per guard: the scopes over libtorch state.
//!
//! Per-thread state, re-entered on every poll in async code: [`grad`]
//! (`no_grad`, `enable_grad`, `grad`, `inference_mode`), [`device`],
//! [`autocast`], [`profile`] (`record`; `profile` spans a future). A
//! model's mode: [`train`] (`eval`, `train`), over [`cmodule`] (TorchScript)
//! and [`with_mode`] (`tch::nn`). Spanning the whole scope: [`timer`]
//! (`timed`), [`rng`] (`seed`, `fork_rng`), [`checkpoint`], and the
//! process-wide [`anomaly`], [`deterministic`], [`threads`], [`precision`]
//! (`matmul_precision`, `tf32`), [`cudnn`] and [`sdpa`]. The memory scopes,
//! reports and process groups have folders of their own beside this one.

pub(crate) mod anomaly;
pub(crate) mod autocast;
pub(crate) mod checkpoint;
pub(crate) mod cmodule;
pub(crate) mod cudnn;
pub(crate) mod deterministic;
pub(crate) mod device;
pub(crate) mod grad;
pub(crate) mod inference;
pub(crate) mod precision;
pub(crate) mod profile;
pub(crate) mod rng;
pub(crate) mod sdpa;
pub(crate) mod threads;
pub(crate) mod timer;
pub(crate) mod train;
pub(crate) mod with_mode;

pub(crate) mod deadline;
