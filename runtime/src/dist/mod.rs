//! Data-parallel groups on PyTorch's own c10d: the `distributed(..)` scope,
//! like `torch.distributed.init_process_group` … `destroy_process_group`.
//!
//! The scope creates the TCP store and a Gloo process group through
//! libtorch (the very `ProcessGroupGloo` PyTorch uses, with the same store
//! prefixes), so a Rust process can be a rank of a group whose other ranks
//! are Python, and a Rust binary runs under `torchrun` with
//! `distributed(from_env)`. Inside the scope, [`current`] is this thread's
//! group; the free functions here act on it, like `torch.distributed`'s.
//! Collectives return `Result<_, DistError>`: a dead peer or the scope's
//! timeout is an error on every other rank, never a hang.
//!
//! ```
//! use tch::Tensor;
//! use tch_scope::{dist, scoped};
//!
//! // A world of one: rank 0 serves the store on a free port.
//! let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
//! # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
//! let master = format!("127.0.0.1:{port}");
//! let total = scoped!(distributed(backend = gloo, rank = 0, world_size = 1, master = master) => {
//!     let mut t = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
//!     dist::all_reduce(&mut t, dist::ReduceOp::Sum).unwrap();
//!     dist::barrier().unwrap();
//!     t.sum(tch::Kind::Float).double_value(&[])
//! });
//! assert_eq!(total, 6.0);
//! ```
//!
//! As an attribute, on a worker's entry point (`from_env` reads torchrun's
//! `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`):
//!
//! ```no_run
//! use tch_scope::{ScopeError, dist};
//!
//! #[derive(Debug)]
//! enum Error { Scope(ScopeError), Dist(dist::DistError) }
//! impl From<ScopeError> for Error { fn from(e: ScopeError) -> Self { Error::Scope(e) } }
//! impl From<dist::DistError> for Error { fn from(e: dist::DistError) -> Self { Error::Dist(e) } }
//!
//! #[tch_scope::distributed(from_env, timeout = std::time::Duration::from_secs(60))]
//! fn worker() -> Result<(), Error> {
//!     let group = dist::current()?;
//!     println!("rank {} of {}", group.rank(), group.world_size());
//!     group.barrier()?;
//!     Ok(())
//! }
//! ```

mod error;
mod ffi;
mod grads;
mod group;
mod scope;

pub use error::DistError;
pub use grads::DEFAULT_BUCKET_BYTES;
pub use group::{Group, ReduceOp};
pub use scope::{Backend, DEFAULT_TIMEOUT, DistGuard, Distributed};

use tch::{Tensor, nn::VarStore};

/// The group of the innermost `distributed` scope active on this thread.
///
/// # Errors
/// A [`DistError`] when no `distributed` scope is active here. (Threads
/// spawned inside a scope start without one; pass them the [`Group`].)
///
/// ```no_run
/// assert!(tch_scope::dist::current().is_err());
/// ```
pub fn current() -> Result<Group, DistError> {
    group::innermost()
        .map(|inner| Group::of(&inner))
        .ok_or_else(|| DistError::no_group("current"))
}

fn with_current<T>(
    op: &'static str,
    f: impl FnOnce(&Group) -> Result<T, DistError>,
) -> Result<T, DistError> {
    let inner = group::innermost().ok_or_else(|| DistError::no_group(op))?;
    f(&Group::of(&inner))
}

/// [`Group::all_reduce`] on the [`current`] group.
///
/// # Errors
/// See [`Group::all_reduce`]; also when no scope is active.
///
/// ```no_run
/// let mut t = tch::Tensor::from_slice(&[1.0f32]);
/// assert!(tch_scope::dist::all_reduce(&mut t, tch_scope::dist::ReduceOp::Sum).is_err());
/// ```
pub fn all_reduce(tensor: &mut Tensor, op: ReduceOp) -> Result<(), DistError> {
    with_current("all_reduce", |g| g.all_reduce(tensor, op))
}

/// [`Group::broadcast`] on the [`current`] group.
///
/// # Errors
/// See [`Group::broadcast`]; also when no scope is active.
///
/// ```no_run
/// let mut t = tch::Tensor::from_slice(&[1.0f32]);
/// assert!(tch_scope::dist::broadcast(&mut t, 0).is_err());
/// ```
pub fn broadcast(tensor: &mut Tensor, root: usize) -> Result<(), DistError> {
    with_current("broadcast", |g| g.broadcast(tensor, root))
}

/// [`Group::all_gather`] on the [`current`] group.
///
/// # Errors
/// See [`Group::all_gather`]; also when no scope is active.
///
/// ```no_run
/// assert!(tch_scope::dist::all_gather(&tch::Tensor::from_slice(&[1i64])).is_err());
/// ```
pub fn all_gather(tensor: &Tensor) -> Result<Vec<Tensor>, DistError> {
    with_current("all_gather", |g| g.all_gather(tensor))
}

/// [`Group::barrier`] on the [`current`] group.
///
/// # Errors
/// See [`Group::barrier`]; also when no scope is active.
///
/// ```no_run
/// assert!(tch_scope::dist::barrier().is_err());
/// ```
pub fn barrier() -> Result<(), DistError> {
    with_current("barrier", Group::barrier)
}

/// [`Group::average_gradients`] on the [`current`] group.
///
/// # Errors
/// See [`Group::average_gradients`]; also when no scope is active.
///
/// ```no_run
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// assert!(tch_scope::dist::average_gradients(&vs).is_err());
/// ```
pub fn average_gradients(vs: &VarStore) -> Result<(), DistError> {
    with_current("all_reduce", |g| g.average_gradients(vs))
}

#[cfg(test)]
mod tests {
    use tch::{Device, Tensor, nn::VarStore};

    use super::ReduceOp;

    /// `"127.0.0.1:PORT"` of a free port, for rank 0 of a world of one.
    pub(super) fn master() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    }

    /// Outside a `distributed` scope every free function is an error
    /// naming its collective, and nothing is sent.
    #[test]
    fn without_a_scope_every_collective_is_an_error() {
        fn op<T>(r: Result<T, super::DistError>) -> String {
            r.err().expect("an error without a scope").op().to_owned()
        }
        let mut t = Tensor::from_slice(&[1.0f32]);
        assert_eq!(op(super::current()), "current");
        assert_eq!(op(super::all_reduce(&mut t, ReduceOp::Sum)), "all_reduce");
        assert_eq!(op(super::broadcast(&mut t, 0)), "broadcast");
        assert_eq!(
            op(super::all_gather(&Tensor::from_slice(&[1i64]))),
            "all_gather"
        );
        assert_eq!(op(super::barrier()), "barrier");
        let vs = VarStore::new(Device::Cpu);
        assert_eq!(op(super::average_gradients(&vs)), "all_reduce");
        assert_eq!(Vec::<f32>::try_from(&t).unwrap(), [1.0]);
    }
}
