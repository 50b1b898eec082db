//! What the macros expand to for `seed`, `fork_rng`, `autocast`, `profile`,
//! `record`, `checkpoint`, `detect_anomaly` and `deterministic`. Re-exported
//! by `__private`; not a public API.

#![allow(missing_docs, reason = "hidden: reached only through `__private`")]

use std::path::Path;

use tch::Kind;

use crate::{Autocast, Checkpoint, DetectAnomaly, Deterministic, ForkRng, Profile, Record, Seed};

#[inline(always)]
pub fn seed(n: u64) -> Seed {
    Seed(n)
}

#[inline(always)]
pub fn fork_rng() -> ForkRng {
    ForkRng
}

#[inline(always)]
pub fn threads(n: usize) -> crate::Threads {
    crate::Threads(n)
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
pub fn record(name: impl Into<String>) -> Record {
    Record::new(name)
}

/// `checkpoint(vs, path, resume)`: the macros pass `&(vs)`, so the scope
/// borrows the VarStore.
#[inline]
pub fn checkpoint<'a>(
    vs: &'a tch::nn::VarStore,
    path: impl AsRef<Path>,
    resume: bool,
) -> Checkpoint<'a> {
    Checkpoint::new(vs, path).resume(resume)
}

#[inline(always)]
pub fn detect_anomaly(check_nan: bool) -> DetectAnomaly {
    DetectAnomaly::new().check_nan(check_nan)
}

#[inline(always)]
pub fn deterministic(warn_only: bool) -> Deterministic {
    Deterministic::new().warn_only(warn_only)
}
