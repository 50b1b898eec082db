//! A joined process group and its collectives.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::{Arc, Weak};

use tch::Tensor;

use super::DistError;
use super::ffi::{self, RawGroup};
use crate::ffi::check;

/// The C++ store + process group; freed when the last owner drops it.
/// Owners are the scope's guard (and, for async bodies, the scope value
/// that re-enters it on every poll); handles hold only a `Weak`, so the
/// group never outlives its scope.
#[derive(Debug)]
pub(crate) struct Inner {
    raw: *mut RawGroup,
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) local_rank: usize,
}

// SAFETY: c10d process groups may be used from any thread (gloo queues work
// under a mutex); `raw` is freed only in `drop`, once no `Arc` is left.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

impl Inner {
    pub(crate) fn new(
        raw: *mut RawGroup,
        rank: usize,
        world_size: usize,
        local_rank: usize,
    ) -> Self {
        Self {
            raw,
            rank,
            world_size,
            local_rank,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from tch_scope_dist_init and is freed once.
        unsafe { ffi::tch_scope_dist_free(self.raw) }
    }
}

thread_local! {
    /// The groups of the `distributed` scopes active on this thread,
    /// innermost last.
    static CURRENT: RefCell<Vec<Weak<Inner>>> = const { RefCell::new(Vec::new()) };
}

pub(crate) fn push(group: &Arc<Inner>) {
    CURRENT.with(|c| c.borrow_mut().push(Arc::downgrade(group)));
}

pub(crate) fn pop() {
    CURRENT.with(|c| c.borrow_mut().pop());
}

/// The innermost active group on this thread, if any.
pub(crate) fn innermost() -> Option<Arc<Inner>> {
    CURRENT.with(|c| c.borrow().last().and_then(Weak::upgrade))
}

/// How [`Group::all_reduce`] combines the ranks' tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum (`torch.distributed.ReduceOp.SUM`).
    Sum,
    /// Element-wise mean: the sum divided by the world size (Gloo has no
    /// `AVG`, so this is what DDP does); floating-point tensors only.
    Mean,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
    /// Element-wise product.
    Product,
}

/// A handle on the process group of a `distributed` scope: rank, world size
/// and the collectives. Get it with [`current`](super::current) inside the
/// scope (or from the guard, which derefs to it). Cheap to clone; it does
/// not keep the group alive: after the scope exits, every call returns a
/// [`DistError`].
///
/// Collectives must be called in the same order on every rank, as in
/// PyTorch. Each blocks until done, and fails (never hangs) if a peer dies
/// or the scope's timeout passes.
///
/// ```
/// use tch::Tensor;
/// use tch_scope::{dist, scoped};
///
/// let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
/// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
/// let master = format!("127.0.0.1:{port}");
/// scoped!(distributed(rank = 0, world_size = 1, master = master) => {
///     let group = dist::current().unwrap();
///     assert_eq!((group.rank(), group.world_size()), (0, 1));
///     let mut t = Tensor::from_slice(&[1.0f32, 2.0]);
///     group.all_reduce(&mut t, dist::ReduceOp::Sum).unwrap();
///     assert_eq!(Vec::<f32>::try_from(&t).unwrap(), [1.0, 2.0]);
/// });
/// assert!(dist::current().is_err()); // the group is gone with its scope
/// ```
#[derive(Clone)]
pub struct Group {
    inner: Weak<Inner>,
    rank: usize,
    world_size: usize,
    local_rank: usize,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("open", &(self.inner.strong_count() > 0))
            .finish()
    }
}

impl Group {
    pub(crate) fn of(inner: &Arc<Inner>) -> Self {
        Self {
            inner: Arc::downgrade(inner),
            rank: inner.rank,
            world_size: inner.world_size,
            local_rank: inner.local_rank,
        }
    }

    /// This process's rank, `0..world_size`.
    ///
    /// ```no_run
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// let r = tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) =>
    ///     tch_scope::dist::current().unwrap().rank());
    /// assert_eq!(r, 0);
    /// ```
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the group.
    ///
    /// ```no_run
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// let n = tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) =>
    ///     tch_scope::dist::current().unwrap().world_size());
    /// assert_eq!(n, 1);
    /// ```
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The rank on this machine: torchrun's `LOCAL_RANK` under
    /// `distributed(from_env)` (which picks the GPU, by convention), else
    /// the rank.
    ///
    /// ```no_run
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// let l = tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) =>
    ///     tch_scope::dist::current().unwrap().local_rank());
    /// assert_eq!(l, 0);
    /// ```
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Whether the group's scope is still active (the group still exists).
    ///
    /// ```no_run
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// let g = tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     let g = tch_scope::dist::current().unwrap();
    ///     assert!(g.is_open());
    ///     g
    /// });
    /// assert!(!g.is_open());
    /// ```
    pub fn is_open(&self) -> bool {
        self.inner.strong_count() > 0
    }

    fn raw(&self, op: &'static str) -> Result<Arc<Inner>, DistError> {
        self.inner.upgrade().ok_or_else(|| {
            DistError::new(
                op,
                self.rank,
                "the `distributed` scope of this group has exited",
            )
        })
    }

    fn fail(&self, op: &'static str) -> impl Fn(String) -> DistError + '_ {
        move |reason| DistError::new(op, self.rank, reason)
    }

    /// Combines `tensor` across ranks in place: afterwards every rank holds
    /// the sum (mean, max, …) of all ranks' values, as
    /// `torch.distributed.all_reduce`.
    ///
    /// # Errors
    /// A [`DistError`] if a peer died, the timeout passed, the tensors don't
    /// match across ranks, or (for `Mean`) the tensor isn't floating-point.
    ///
    /// ```no_run
    /// # use tch::Tensor;
    /// # use tch_scope::dist::ReduceOp;
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     let mut t = Tensor::from_slice(&[4.0f64]);
    ///     tch_scope::dist::current().unwrap().all_reduce(&mut t, ReduceOp::Mean).unwrap();
    ///     assert_eq!(t.double_value(&[0]), 4.0);
    /// });
    /// ```
    pub fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<(), DistError> {
        const OP: &str = "all_reduce";
        if op == ReduceOp::Mean && !tensor.is_floating_point() {
            return Err(DistError::new(
                OP,
                self.rank,
                format!(
                    "ReduceOp::Mean needs a floating-point tensor, not {:?}",
                    tensor.kind()
                ),
            ));
        }
        let code = match op {
            ReduceOp::Sum | ReduceOp::Mean => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
            ReduceOp::Product => 3,
        };
        let inner = self.raw(OP)?;
        // SAFETY: `inner` keeps the group alive; the tensor pointer is
        // tch's at::Tensor*, valid for the call.
        check(unsafe {
            ffi::tch_scope_dist_all_reduce(inner.raw, tensor.as_mut_ptr().cast::<c_void>(), code)
        })
        .map_err(self.fail(OP))?;
        if op == ReduceOp::Mean {
            let _no_grad = tch::no_grad_guard();
            tensor
                .f_div_scalar_(self.world_size as f64)
                .map(drop)
                .map_err(|e| DistError::new(OP, self.rank, e.to_string()))?;
        }
        Ok(())
    }

    /// Overwrites `tensor` on every rank with its value on `root`, as
    /// `torch.distributed.broadcast(tensor, src=root)`.
    ///
    /// # Errors
    /// A [`DistError`] if `root` is not a rank, a peer died, the timeout
    /// passed, or the tensors don't match across ranks.
    ///
    /// ```no_run
    /// # use tch::Tensor;
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     let mut t = Tensor::from_slice(&[7i64]);
    ///     tch_scope::dist::current().unwrap().broadcast(&mut t, 0).unwrap();
    ///     assert_eq!(t.int64_value(&[0]), 7);
    /// });
    /// ```
    pub fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<(), DistError> {
        const OP: &str = "broadcast";
        if root >= self.world_size {
            return Err(DistError::new(
                OP,
                self.rank,
                format!(
                    "root {root} is not a rank of this group of {}",
                    self.world_size
                ),
            ));
        }
        let inner = self.raw(OP)?;
        // SAFETY: as in `all_reduce`.
        check(unsafe {
            ffi::tch_scope_dist_broadcast(
                inner.raw,
                tensor.as_mut_ptr().cast::<c_void>(),
                root as i32,
            )
        })
        .map_err(self.fail(OP))
    }

    /// Every rank's `tensor`, in rank order, as
    /// `torch.distributed.all_gather`. The tensors must have the same shape
    /// and kind on every rank.
    ///
    /// # Errors
    /// A [`DistError`] if a peer died, the timeout passed, or the tensors
    /// don't match across ranks.
    ///
    /// ```no_run
    /// # use tch::Tensor;
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     let all = tch_scope::dist::current().unwrap().all_gather(&Tensor::from_slice(&[3i32])).unwrap();
    ///     assert_eq!(all.len(), 1);
    ///     assert_eq!(all[0].int64_value(&[0]), 3);
    /// });
    /// ```
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>, DistError> {
        const OP: &str = "all_gather";
        let inner = self.raw(OP)?;
        let mut outs: Vec<Tensor> = (0..self.world_size).map(|_| tensor.empty_like()).collect();
        let ptrs: Vec<*mut c_void> = outs
            .iter_mut()
            .map(|t| t.as_mut_ptr().cast::<c_void>())
            .collect();
        // The input is only read; the shim takes a mutable pointer for
        // symmetry with the in-place collectives.
        let input = tensor.as_ptr().cast_mut().cast::<c_void>();
        // SAFETY: as in `all_reduce`; `ptrs` holds world_size live tensors.
        check(unsafe {
            ffi::tch_scope_dist_all_gather(inner.raw, input, ptrs.as_ptr(), ptrs.len())
        })
        .map_err(self.fail(OP))?;
        Ok(outs)
    }

    /// Waits until every rank has reached the barrier, as
    /// `torch.distributed.barrier()`.
    ///
    /// # Errors
    /// A [`DistError`] if a peer died or the timeout passed.
    ///
    /// ```no_run
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     tch_scope::dist::current().unwrap().barrier().unwrap();
    /// });
    /// ```
    pub fn barrier(&self) -> Result<(), DistError> {
        const OP: &str = "barrier";
        let inner = self.raw(OP)?;
        // SAFETY: `inner` keeps the group alive.
        check(unsafe { ffi::tch_scope_dist_barrier(inner.raw) }).map_err(self.fail(OP))
    }
}

#[cfg(test)]
mod tests {
    use tch::Tensor;

    use super::ReduceOp;
    use crate::Scope;
    use crate::dist::{Backend, Distributed, current, tests::master};

    /// Every collective in a world of one (tests/distributed.rs runs them
    /// across processes).
    #[test]
    fn a_world_of_one() {
        if !Backend::Gloo.is_available() {
            return; // built without gloo
        }
        let guard = Distributed::gloo(0, 1, master()).enter().unwrap();
        let g = current().unwrap();
        assert_eq!((g.rank(), g.world_size(), g.local_rank()), (0, 1, 0));
        assert!(g.is_open());
        let mut t = Tensor::from_slice(&[4.0f64]);
        g.all_reduce(&mut t, ReduceOp::Mean).unwrap();
        assert_eq!(t.double_value(&[0]), 4.0);
        let mut t = Tensor::from_slice(&[7i64]);
        g.broadcast(&mut t, 0).unwrap();
        assert_eq!(t.int64_value(&[0]), 7);
        let all = g.all_gather(&Tensor::from_slice(&[3i32])).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].int64_value(&[0]), 3);
        g.barrier().unwrap();
        drop(guard);
        assert!(!g.is_open());
        assert!(current().is_err());
    }
}
