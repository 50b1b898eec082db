//! [`Replicas`]: copies of a model that is `Send` but not `Sync` (a
//! `tch::nn` module), one per caller at a time, so that an
//! [`Inference`](crate::Inference) and a [`Batcher`](crate::batch::Batcher)
//! can serve it from many threads.

use std::cell::Cell;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use tch::TchError;

use super::serve::{Serve, Token};
use crate::ScopeError;

/// Copies of one model, each used by one thread at a time: how a model
/// that is `Send` but not `Sync` is served from many threads.
///
/// A model trained in Rust with `tch::nn` is a module built from a
/// `VarStore`'s root. Its tensors are `Send` but not `Sync` (tch lets a
/// `&Tensor` change the tensor), so one module can't be shared between
/// threads, and `Inference::new(WithMode::new(net))` can't go in an `Arc`
/// or a [`Batcher`](crate::batch::Batcher) (E0277). `Replicas` holds `n`
/// copies, made by a factory the user writes (the same module on a new
/// `VarStore`, the trained weights copied in with `VarStore::copy`, or
/// loaded from a file or from memory), each behind its own lock:
/// [`get`](Replicas::get) hands the calling thread a replica no other
/// thread is using. `Replicas<M>` is `Send + Sync` for any `Send` model,
/// so `Inference<Replicas<M>>` goes in an `Arc` and in a `Batcher`.
///
/// Why copies, and not one model shared: a forward of a `tch::nn` module
/// only reads its weights, but nothing in its type says so, and sharing
/// it would need an `unsafe` promise from the user. Why not one model
/// behind one lock: forwards would run one at a time. With as many
/// replicas as threads calling at once (a batcher's
/// [`workers`](crate::batch::BatchOptions::workers)), no call waits:
/// `get` costs one uncontended lock (a few nanoseconds), and each thread
/// keeps to the replica it had last. The price is memory: `n` copies of
/// the weights (a factory may share them between replicas with
/// `shallow_clone`, if no forward writes to them).
///
/// Served by an [`Inference`](crate::Inference), every replica is put in
/// eval mode and held there, as one model is; a panic in a forward leaves
/// its replica usable (a forward only reads).
///
/// ```
/// use std::sync::Arc;
/// use tch::nn::{self, Module, OptimizerConfig};
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::{Inference, WithMode};
///
/// fn mlp(p: &nn::Path) -> nn::Sequential {
///     nn::seq().add(nn::linear(p / "l1", 4, 8, Default::default())).add_fn(|x| x.relu())
/// }
///
/// // Trained in Rust.
/// let vs = nn::VarStore::new(Device::Cpu);
/// let net = mlp(&vs.root());
/// let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();
/// let x = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
/// opt.backward_step(&net.forward(&x).square().mean(Kind::Float));
///
/// // Served: one replica per thread, each a copy of the trained weights.
/// let served = Arc::new(
///     Inference::replicated(4, |_| {
///         let mut copy = nn::VarStore::new(Device::Cpu);
///         let replica = mlp(&copy.root());
///         copy.copy(&vs)?;
///         Ok::<_, tch::TchError>(WithMode::new(replica))
///     })
///     .unwrap(),
/// );
/// let want = tch::no_grad(|| net.forward(&x));
/// let threads: Vec<_> = (0..4)
///     .map(|_| {
///         let (served, x) = (Arc::clone(&served), x.shallow_clone());
///         std::thread::spawn(move || served.run(|r| r.get().forward(&x)))
///     })
///     .collect();
/// for t in threads {
///     assert!(t.join().unwrap().equal(&want));
/// }
/// ```
pub struct Replicas<M> {
    /// Never empty; its slots never move, so a replica's address (by
    /// which the modes registry knows it) is fixed.
    replicas: Box<[Mutex<M>]>,
}

/// A thread's replica, for as long as the guard lives
/// ([`Replicas::get`]); it derefs to the model.
#[must_use = "the replica is given back when the guard drops"]
pub struct ReplicaGuard<'a, M> {
    model: MutexGuard<'a, M>,
    index: usize,
}

/// Which replica a thread tries first: the one it had last, else one of
/// its own (threads are numbered as they first ask), so threads calling at
/// once spread over the replicas and each keeps to one.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static PREFERRED: Cell<usize> = Cell::new(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
}

impl<M> Replicas<M> {
    /// Makes `n` replicas, calling `factory(i)` for `i` in `0..n` on this
    /// thread (so the factory may borrow the trained model; only the
    /// replicas need be `Send`). `i` can pick a replica's device.
    ///
    /// # Errors
    /// A [`ScopeError`] of [`Stage::Load`](crate::Stage::Load) if `n` is
    /// 0, or the factory's error for the first replica it could not make
    /// ("cannot load \`Replicas\`: replica 2 of 4: …"); the replicas made
    /// so far are dropped.
    pub fn new<E: fmt::Display>(
        n: usize,
        mut factory: impl FnMut(usize) -> Result<M, E>,
    ) -> Result<Self, ScopeError> {
        if n == 0 {
            return Err(ScopeError::load(
                "Replicas",
                None,
                "no replica asked for: serving needs at least one replica",
            ));
        }
        let replicas = (0..n)
            .map(|i| {
                factory(i).map(Mutex::new).map_err(|e| {
                    ScopeError::load("Replicas", None, format!("replica {i} of {n}: {e}"))
                })
            })
            .collect::<Result<Box<[_]>, _>>()?;
        Ok(Self { replicas })
    }

    /// How many replicas there are (at least one).
    pub fn count(&self) -> usize {
        self.replicas.len()
    }

    /// A replica no other thread is using: the one this thread had last
    /// if it is free, else the first free one; when all are in use, waits
    /// for the one this thread had last. Drop the guard to give it back
    /// (before asking again: a thread that holds a replica and asks for
    /// another may wait for the one it holds).
    pub fn get(&self) -> ReplicaGuard<'_, M> {
        let n = self.replicas.len();
        let first = PREFERRED.with(Cell::get) % n;
        for k in 0..n {
            let index = (first + k) % n;
            let model = match self.replicas[index].try_lock() {
                Ok(m) => m,
                // A forward that panicked only read its replica.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            PREFERRED.with(|p| p.set(index));
            return ReplicaGuard { model, index };
        }
        let model = self.replicas[first]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ReplicaGuard {
            model,
            index: first,
        }
    }

    /// The replicas, in the order the factory made them.
    pub fn into_vec(self) -> Vec<M> {
        self.replicas
            .into_vec()
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
            .collect()
    }
}

impl<M> ReplicaGuard<'_, M> {
    /// Which replica this is: `i` of the factory's `factory(i)`.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<M> Deref for ReplicaGuard<'_, M> {
    type Target = M;

    fn deref(&self) -> &M {
        &self.model
    }
}

impl<M> fmt::Debug for Replicas<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicas")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

impl<M: fmt::Debug> fmt::Debug for ReplicaGuard<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaGuard")
            .field("index", &self.index)
            .field("model", &*self.model)
            .finish()
    }
}

/// Every replica served as the model alone would be; if one can't be,
/// those begun are ended and the error returned.
impl<M: Serve> Serve for Replicas<M> {
    fn begin_serving(&self, token: Token) -> Result<(), ScopeError> {
        for (i, m) in self.replicas.iter().enumerate() {
            let begun = m
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .begin_serving(token);
            if let Err(e) = begun {
                for m in &self.replicas[..i] {
                    // The replica's modes come back as far as they can;
                    // the error that matters is the one returned.
                    let _ = m
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .end_serving(token);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn end_serving(&self, token: Token) -> Result<(), TchError> {
        // Every replica ended; the first error reported.
        let mut ended = Ok(());
        for m in &self.replicas {
            let e = m
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .end_serving(token);
            ended = ended.and(e);
        }
        ended
    }
}
