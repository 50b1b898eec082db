//! The `distributed(..)` scope: joins a process group on entry, leaves and
//! destroys it on exit.

use std::borrow::Cow;
use std::ffi::CString;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use super::ffi;
use super::group::{self, Group, Inner};
use crate::ffi::check;
use crate::{Scope, ScopeError};

/// How long joining the group and each collective may take before every
/// rank gets an error, unless `timeout = …` says otherwise. PyTorch's own
/// default is 30 minutes; a dead rank should surface sooner than that.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A c10d communication backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Gloo: CPU tensors, any machine. PyTorch's `"gloo"`.
    Gloo,
    /// NCCL: CUDA tensors, each rank's on its own device (`cuda:LOCAL_RANK`
    /// under torchrun). Built only with a CUDA libtorch and the CUDA
    /// headers (`scripts/bootstrap-cuda-headers.sh`, run by `make`);
    /// entering it without them, or on a machine without a CUDA device, is
    /// a [`ScopeError`] that says so.
    Nccl,
}

impl Backend {
    /// The name PyTorch uses: `"gloo"`, `"nccl"`.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::dist::Backend::Gloo.name(), "gloo");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }

    /// Whether this build can create groups with this backend.
    ///
    /// ```no_run
    /// use tch_scope::dist::Backend;
    /// if !tch_scope::built_with_cuda() {
    ///     assert!(!Backend::Nccl.is_available());
    /// }
    /// ```
    pub fn is_available(self) -> bool {
        let code = match self {
            Backend::Gloo => 0,
            Backend::Nccl => 1,
        };
        // SAFETY: no pointers; cannot fail.
        unsafe { ffi::tch_scope_dist_has_backend(code) != 0 }
    }
}

/// Where the rank, world size and rendezvous come from.
#[derive(Debug, Clone)]
enum Source {
    Explicit {
        rank: usize,
        world_size: usize,
        master: String,
    },
    /// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
    FromEnv,
}

/// The `distributed(..)` scope, like `torch.distributed.init_process_group`
/// … `destroy_process_group()`: on entry it starts (rank 0) or joins the
/// TCP store at `master` and creates the process group, exactly as PyTorch
/// does, so Rust and Python processes can be ranks of one group; on exit
/// (also by `?`, `return` or panic) it destroys both.
///
/// Inside, [`current`](super::current) (or the guard, which derefs to a
/// [`Group`]) gives the collectives. Joining waits for every rank, at most
/// the timeout ([`DEFAULT_TIMEOUT`] unless set); a rank that never comes is
/// a [`ScopeError`].
///
/// In the macros: `distributed(rank = r, world_size = n, master =
/// "host:port")`, with optional `backend = gloo` and `timeout = duration`;
/// or `distributed(from_env)` under `torchrun`.
///
/// ```
/// use std::time::Duration;
/// use tch_scope::{Scope, dist::Distributed};
///
/// let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
/// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
/// let mut scope = Distributed::gloo(0, 1, format!("127.0.0.1:{port}"))
///     .timeout(Duration::from_secs(10));
/// let group = scope.enter().unwrap();
/// assert_eq!(group.world_size(), 1);
/// group.barrier().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Distributed {
    backend: Backend,
    source: Source,
    timeout: Duration,
    /// The group after the first entry, so an async body (entered on every
    /// poll) joins once; dropped with the scope value.
    joined: Option<Arc<Inner>>,
}

impl Distributed {
    /// A Gloo group: this process is `rank` of `world_size`; rank 0 serves
    /// the rendezvous store on `master` (`"host:port"`), the others connect
    /// to it.
    ///
    /// ```no_run
    /// let d = tch_scope::dist::Distributed::gloo(1, 4, "127.0.0.1:29500");
    /// # let _ = d;
    /// ```
    pub fn gloo(rank: usize, world_size: usize, master: impl Into<String>) -> Self {
        Self::new(Backend::Gloo, rank, world_size, master)
    }

    /// A group with the given backend; see [`gloo`](Self::gloo).
    ///
    /// ```no_run
    /// use tch_scope::dist::{Backend, Distributed};
    /// let d = Distributed::new(Backend::Gloo, 0, 2, "127.0.0.1:29500");
    /// # let _ = d;
    /// ```
    pub fn new(
        backend: Backend,
        rank: usize,
        world_size: usize,
        master: impl Into<String>,
    ) -> Self {
        Self {
            backend,
            source: Source::Explicit {
                rank,
                world_size,
                master: master.into(),
            },
            timeout: DEFAULT_TIMEOUT,
            joined: None,
        }
    }

    /// A Gloo group described by the environment, as `torchrun` sets it:
    /// `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and optionally
    /// `LOCAL_RANK` (PyTorch's `init_method="env://"`). Under torchrun's
    /// agent store (`TORCHELASTIC_USE_AGENT_STORE=True`) every rank is a
    /// store client, as in PyTorch; a group that torchrun restarted
    /// (`TORCHELASTIC_RESTART_COUNT` ≥ 1) keys its entries under
    /// `attempt_<n>/`, so it never reads the addresses of the attempt
    /// before (every rank of a restarted group must be a tch-scope rank).
    ///
    /// ```no_run
    /// use tch_scope::Scope;
    /// // Outside torchrun the variables are missing: a clear ScopeError.
    /// # if std::env::var_os("RANK").is_none() {
    /// let e = tch_scope::dist::Distributed::from_env().enter().unwrap_err();
    /// assert!(e.reason().contains("RANK"));
    /// # }
    /// ```
    pub fn from_env() -> Self {
        Self {
            backend: Backend::Gloo,
            source: Source::FromEnv,
            timeout: DEFAULT_TIMEOUT,
            joined: None,
        }
    }

    /// Uses `backend` instead of Gloo.
    ///
    /// ```no_run
    /// use tch_scope::dist::{Backend, Distributed};
    /// let d = Distributed::from_env().backend(Backend::Gloo);
    /// # let _ = d;
    /// ```
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Bounds joining and every collective by `timeout` (default
    /// [`DEFAULT_TIMEOUT`]).
    ///
    /// ```no_run
    /// let d = tch_scope::dist::Distributed::from_env().timeout(std::time::Duration::from_secs(5));
    /// # let _ = d;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn name(&self) -> Cow<'static, str> {
        let backend = self.backend.name();
        match &self.source {
            Source::Explicit {
                rank,
                world_size,
                master,
            } => format!(
                "distributed(backend = {backend}, rank = {rank}, world_size = {world_size}, master = {master:?})"
            )
            .into(),
            Source::FromEnv => format!("distributed(backend = {backend}, from_env)").into(),
        }
    }

    fn join(&self) -> Result<Arc<Inner>, ScopeError> {
        let err = |reason: String| ScopeError::new(self.name(), None, reason);
        let setup = Setup::read(&self.source).map_err(err)?;
        if self.backend == Backend::Nccl && !Backend::Nccl.is_available() {
            return Err(err(
                "the nccl backend is not built into tch-scope: it needs a CUDA libtorch and \
                 the CUDA and NCCL headers (run scripts/bootstrap-cuda-headers.sh, or set \
                 TCH_SCOPE_CUDA_INCLUDE, and rebuild); use `backend = gloo` for CPU tensors"
                    .into(),
            ));
        }
        if self.backend == Backend::Nccl && crate::cuda_device_count() == 0 {
            return Err(err(
                "the nccl backend needs a CUDA device, and libtorch sees none on this \
                 machine; use `backend = gloo` for CPU tensors"
                    .into(),
            ));
        }
        if group::innermost().is_some() {
            return Err(err(
                "a `distributed` scope is already active on this thread; PyTorch allows one \
                 default group per process"
                    .into(),
            ));
        }
        let host = CString::new(setup.host.as_str()).map_err(|_| err("NUL in host".into()))?;
        let prefix =
            CString::new(setup.prefix.as_str()).map_err(|_| err("NUL in prefix".into()))?;
        let timeout_ms = i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX);
        let mut raw = std::ptr::null_mut();
        // SAFETY: `host` outlives the call; `raw` receives a group we own.
        check(unsafe {
            ffi::tch_scope_dist_init(
                match self.backend {
                    Backend::Gloo => 0,
                    Backend::Nccl => 1,
                },
                host.as_ptr(),
                setup.port,
                setup.rank as i32,
                setup.world_size as i32,
                setup.store_server,
                prefix.as_ptr(),
                timeout_ms,
                &mut raw,
            )
        })
        .map_err(err)?;
        Ok(Arc::new(Inner::new(
            raw,
            setup.rank,
            setup.world_size,
            setup.local_rank,
        )))
    }
}

impl Scope for Distributed {
    type Guard = DistGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<DistGuard, ScopeError> {
        let inner = match &self.joined {
            Some(inner) => inner.clone(),
            None => {
                let inner = self.join()?;
                self.joined = Some(inner.clone());
                inner
            }
        };
        group::push(&inner);
        Ok(DistGuard {
            group: Group::of(&inner),
            _inner: inner,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

/// The guard of a [`Distributed`] scope: the group's handle (it derefs to
/// [`Group`]). Dropping it leaves the scope and, unless an async scope
/// value still holds the group for its next poll, destroys the group.
/// `!Send`: it is this thread's current group.
#[must_use = "the group is destroyed when the guard drops; bind it with `let group = …`"]
pub struct DistGuard {
    group: Group,
    _inner: Arc<Inner>,
    _not_send: crate::PhantomNotSend,
}

impl Deref for DistGuard {
    type Target = Group;

    fn deref(&self) -> &Group {
        &self.group
    }
}

impl std::fmt::Debug for DistGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DistGuard").field(&self.group).finish()
    }
}

impl Drop for DistGuard {
    fn drop(&mut self) {
        group::pop();
    }
}

/// Everything `tch_scope_dist_init` needs, checked.
struct Setup {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    host: String,
    port: u16,
    store_server: bool,
    /// Before PyTorch's own store prefixes: empty, or a restarted torchrun
    /// group's attempt (see [`attempt_prefix`]).
    prefix: String,
}

impl Setup {
    fn read(source: &Source) -> Result<Setup, String> {
        let (rank, world_size, local_rank, host, port, agent_store, prefix) = match source {
            Source::Explicit {
                rank,
                world_size,
                master,
            } => {
                let (host, port) = split_master(master)?;
                (*rank, *world_size, *rank, host, port, false, String::new())
            }
            Source::FromEnv => {
                let rank = env_number("RANK")?;
                let local_rank = match std::env::var("LOCAL_RANK") {
                    Ok(_) => env_number("LOCAL_RANK")?,
                    Err(_) => rank,
                };
                (
                    rank,
                    env_number("WORLD_SIZE")?,
                    local_rank,
                    env("MASTER_ADDR")?,
                    u16::try_from(env_number("MASTER_PORT")?)
                        .map_err(|_| "MASTER_PORT is not a port number (0..=65535)".to_owned())?,
                    // As torch.distributed.rendezvous._torchelastic_use_agent_store.
                    std::env::var("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Ok("True"),
                    attempt_prefix()?,
                )
            }
        };
        if world_size == 0 || world_size > i32::MAX as usize {
            return Err(format!("world_size must be at least 1, not {world_size}"));
        }
        if rank >= world_size {
            return Err(format!("rank {rank} is not below world_size {world_size}"));
        }
        Ok(Setup {
            rank,
            world_size,
            local_rank,
            host,
            port,
            store_server: rank == 0 && !agent_store,
            prefix,
        })
    }
}

/// Under torchrun's agent store, the store prefix of a group that torchrun
/// restarted: `"attempt_<n>/"` for `TORCHELASTIC_RESTART_COUNT` = n ≥ 1,
/// else empty (the first attempt keys its group exactly as PyTorch does).
///
/// The agent's store outlives the worker groups it restarts, so without
/// it the ranks of a restarted group read the Gloo addresses the dead
/// attempt left and fail to connect ("connectFullMesh failed … Connection
/// refused") — as PyTorch 2.13's own `init_process_group("gloo")` does
/// under torchrun unless `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` gives each
/// attempt a store of its own (then there is no agent store, and no prefix
/// here). So every rank of a restarted group must be a tch-scope rank.
fn attempt_prefix() -> Result<String, String> {
    if std::env::var("TORCHELASTIC_USE_AGENT_STORE").as_deref() != Ok("True") {
        return Ok(String::new());
    }
    match std::env::var("TORCHELASTIC_RESTART_COUNT") {
        Ok(_) => match env_number("TORCHELASTIC_RESTART_COUNT")? {
            0 => Ok(String::new()),
            n => Ok(format!("attempt_{n}/")),
        },
        Err(_) => Ok(String::new()),
    }
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| {
        format!(
            "{name} is not set; `from_env` reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT \
             (run under torchrun, or set them)"
        )
    })
}

fn env_number(name: &str) -> Result<usize, String> {
    let value = env(name)?;
    value
        .trim()
        .parse()
        .map_err(|_| format!("{name}={value:?} is not a non-negative integer"))
}

/// `"host:port"` or `"[v6]:port"`.
pub(crate) fn split_master(master: &str) -> Result<(String, u16), String> {
    let bad = || format!("master {master:?} is not \"host:port\" (e.g. \"127.0.0.1:29500\")");
    let (host, port) = master.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad());
    }
    let port = port.parse::<u16>().map_err(|_| bad())?;
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::{Backend, Distributed, split_master};
    use crate::Scope;

    #[test]
    fn backends() {
        assert_eq!(
            (Backend::Gloo.name(), Backend::Nccl.name()),
            ("gloo", "nccl")
        );
        if !crate::built_with_cuda() {
            assert!(!Backend::Nccl.is_available());
        }
    }

    #[test]
    fn from_env_outside_torchrun_names_the_missing_variable() {
        if std::env::var_os("RANK").is_some() {
            return; // under torchrun
        }
        let e = Distributed::from_env().enter().unwrap_err();
        assert!(e.reason().contains("RANK"), "{e}");
    }

    #[test]
    fn masters() {
        assert_eq!(
            split_master("127.0.0.1:29500"),
            Ok(("127.0.0.1".into(), 29500))
        );
        assert_eq!(split_master("[::1]:80"), Ok(("::1".into(), 80)));
        assert!(split_master("host").is_err());
        assert!(split_master(":80").is_err());
        assert!(split_master("h:99999").is_err());
    }
}
