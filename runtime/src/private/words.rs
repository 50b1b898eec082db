//! Each word's constructor, `__private::<word>(args..)` as the word's row
//! in the macros builds it. Not a public API.

#![allow(missing_docs, reason = "hidden: reached only through `__private`")]

use std::path::Path;

use tch::Kind;

use super::task::{Task, TaskGuard};

pub use crate::SdpaBackend;
pub use crate::SyncMode;
#[cfg(feature = "distributed")]
pub use crate::dist::{Backend as DistBackend, Distributed};
pub use crate::report::Site;
use crate::{
    Autocast, Checkpoint, DetectAnomaly, Deterministic, EnableGrad, ForkRng, Grad, InferenceMode,
    IntoScopeDevice, Mode, ModeGuard, NoGrad, OnDevice, Profile, Record, Scope, ScopeError, Seed,
    Trainable,
};

#[inline(always)]
pub fn no_grad() -> NoGrad {
    NoGrad
}

#[inline(always)]
pub fn enable_grad() -> EnableGrad {
    EnableGrad
}

#[inline(always)]
pub fn grad(enabled: bool) -> Grad {
    Grad(enabled)
}

#[inline(always)]
pub fn inference_mode() -> InferenceMode {
    InferenceMode
}

#[inline(always)]
pub fn inference_mode_set(enabled: bool) -> crate::SetInferenceMode {
    crate::SetInferenceMode(enabled)
}

#[inline]
pub fn device(d: impl IntoScopeDevice) -> OnDevice {
    OnDevice::new(d)
}

#[inline]
pub fn device_cpu() -> OnDevice {
    OnDevice::new(tch::Device::Cpu)
}

#[inline]
pub fn device_mps() -> OnDevice {
    OnDevice::new(tch::Device::Mps)
}

#[inline]
pub fn device_cuda(index: usize) -> OnDevice {
    OnDevice::new(tch::Device::Cuda(index))
}

/// Identity, so that a non-scope gets `Scope`'s `on_unimplemented` message
/// at the user's expression — once: the opaque return type satisfies the
/// later `Scope` bounds, so no follow-on errors.
#[inline(always)]
pub fn with<S: Scope>(scope: S) -> impl Scope<Guard = S::Guard, Error = S::Error> {
    scope
}

/// `eval(model)`: the macros pass `&(model)`, so the scope borrows the
/// model rather than moving it. The opaque return type keeps a
/// non-`Trainable` model to one error, at the user's expression.
#[inline(always)]
pub fn eval<T: Trainable + ?Sized>(
    model: &T,
) -> impl Scope<Error = ScopeError, Guard = TaskGuard<ModeGuard<'_, T>>>
where
    T::Modes: Send + 'static,
{
    Task(Mode::eval(model))
}

/// `train(model)`; see [`eval`].
#[inline(always)]
pub fn train<T: Trainable + ?Sized>(
    model: &T,
) -> impl Scope<Error = ScopeError, Guard = TaskGuard<ModeGuard<'_, T>>>
where
    T::Modes: Send + 'static,
{
    Task(Mode::train(model))
}

#[inline(always)]
pub fn timed(site: &'static Site, sync: SyncMode) -> crate::Timed {
    crate::Timed::at(site).sync(sync)
}

#[inline(always)]
pub fn events_flag(on: bool) -> SyncMode {
    if on { SyncMode::Events } else { SyncMode::Auto }
}

#[inline(always)]
pub fn sync_flag(on: bool) -> SyncMode {
    if on {
        SyncMode::Always
    } else {
        SyncMode::Never
    }
}

#[inline(always)]
pub fn memory_scope(name: &'static str) -> crate::HostMemory {
    crate::HostMemory::new(name)
}

#[inline(always)]
pub fn tensor_memory(name: &'static str) -> crate::TensorMemory {
    crate::TensorMemory::new(name)
}

#[inline(always)]
pub fn gpu_memory_scope(name: &'static str, device: usize, empty_cache: bool) -> crate::GpuMemory {
    crate::GpuMemory::new(name, device).empty_cache(empty_cache)
}

#[inline(always)]
pub fn seed(n: impl crate::IntoSeed) -> Task<Seed> {
    Task(Seed::new(n))
}

#[inline(always)]
pub fn fork_rng() -> Task<ForkRng> {
    Task(ForkRng)
}

#[inline]
pub fn fork_rng_devices(devices: impl IntoIterator<Item = usize>) -> Task<crate::ForkDevices> {
    Task(ForkRng::devices(devices))
}

#[inline]
pub fn seed_devices(
    n: impl crate::IntoSeed,
    devices: impl IntoIterator<Item = usize>,
) -> Task<crate::ForkDevices> {
    Task(Seed::new(n).devices(devices))
}

#[inline(always)]
pub fn threads(n: usize) -> Task<crate::Threads> {
    Task(crate::Threads(n))
}

#[inline(always)]
pub fn autocast_cpu_bf16() -> Autocast {
    Autocast::cpu(Kind::BFloat16)
}

#[inline(always)]
pub fn autocast_cpu_f16() -> Autocast {
    Autocast::cpu(Kind::Half)
}

#[inline(always)]
pub fn autocast_cuda_f16() -> Autocast {
    Autocast::cuda(Kind::Half)
}

#[inline(always)]
pub fn autocast_cuda_bf16() -> Autocast {
    Autocast::cuda(Kind::BFloat16)
}

#[inline]
pub fn profile(path: impl AsRef<Path>) -> Profile {
    Profile::new(path)
}

#[inline]
pub fn record(name: impl AsRef<str>) -> Record {
    Record::new(name)
}

/// `checkpoint(vs, path, resume, save_on_failure = b)`: the macros pass
/// `&(vs)`, so the scope borrows the VarStore. A `Task`, so that a future
/// holding it moves between threads (its guard steps off the thread at
/// each suspension).
#[inline]
pub fn checkpoint<'a>(
    vs: &'a tch::nn::VarStore,
    path: impl AsRef<Path>,
    resume: bool,
    save_on_failure: bool,
) -> Task<Checkpoint<'a>> {
    Task(
        Checkpoint::new(vs, path)
            .resume(resume)
            .save_on_failure(save_on_failure),
    )
}

/// `optimizer = opt`, `every = k`, `state = s` of `checkpoint(..)`: the
/// macros chain them on the scope, each borrowed like the VarStore.
impl<'a> Task<Checkpoint<'a>> {
    #[inline]
    pub fn optimizer(self, optimizer: &'a dyn crate::optim::Optimizer) -> Self {
        Task(self.0.optimizer_dyn(optimizer))
    }

    #[inline]
    pub fn every(self, k: i64) -> Self {
        Task(self.0.every(k))
    }

    #[inline]
    pub fn state<T>(self, state: &'a crate::RunState<T>) -> Self
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
    {
        Task(self.0.state(state))
    }
}

/// `optimizer = opt` of `checkpoint(..)`: the macros call this method on
/// `opt`, so autoderef takes an optimizer and a reference to one alike (a
/// function's `opt: &Adam` parameter under `#[checkpoint(..)]`).
pub trait CheckpointOptimizer {
    fn tch_scope_checkpoint_optimizer(&self) -> &dyn crate::optim::Optimizer;
}

impl<O: crate::optim::Optimizer> CheckpointOptimizer for O {
    #[inline]
    fn tch_scope_checkpoint_optimizer(&self) -> &dyn crate::optim::Optimizer {
        self
    }
}

#[inline(always)]
pub fn detect_anomaly(check_nan: bool) -> Task<DetectAnomaly> {
    Task(DetectAnomaly::new().check_nan(check_nan))
}

#[inline(always)]
pub fn deterministic(warn_only: bool) -> Task<Deterministic> {
    Task(Deterministic::new().warn_only(warn_only))
}

#[inline]
pub fn matmul_precision(name: impl AsRef<str>) -> Task<crate::MatmulPrecision> {
    Task(crate::MatmulPrecision::new(name))
}

#[inline(always)]
pub fn tf32(allow: bool) -> Task<crate::Tf32> {
    Task(crate::Tf32(allow))
}

/// `cudnn(..)`: each flag written, in the row's order.
#[inline(always)]
pub fn cudnn(
    enabled: Option<bool>,
    benchmark: Option<bool>,
    deterministic: Option<bool>,
    allow_tf32: Option<bool>,
) -> Task<crate::Cudnn> {
    let mut c = crate::Cudnn::new();
    for (v, set) in [
        (enabled, crate::Cudnn::enabled as fn(_, _) -> _),
        (benchmark, crate::Cudnn::benchmark),
        (deterministic, crate::Cudnn::deterministic),
        (allow_tf32, crate::Cudnn::allow_tf32),
    ] {
        if let Some(v) = v {
            c = set(c, v);
        }
    }
    Task(c)
}

#[inline(always)]
pub fn sdpa<const N: usize>(backends: [SdpaBackend; N]) -> Task<crate::Sdpa> {
    Task(crate::Sdpa::only(backends))
}

/// `stream(s)`: a `Stream` or a reference to one.
#[inline(always)]
pub fn stream(s: impl std::borrow::Borrow<crate::cuda::Stream>) -> crate::cuda::Stream {
    *s.borrow()
}

#[inline]
pub fn deadline(budget: std::time::Duration) -> crate::Deadline {
    crate::Deadline::new(budget)
}

/// `deadline(until = t)`.
#[inline]
pub fn deadline_until(t: std::time::Instant) -> crate::Deadline {
    crate::Deadline::until(t)
}
