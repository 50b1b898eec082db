//! [`Server`]: the builder, the warm-up that makes the model's metadata,
//! the accept loop under the connection cap, and the graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tch::Tensor;
use tokio::sync::{Semaphore, watch};

use super::connections::{Limits, serve_counted};
use super::engine::{Engine, datatype_of};
use super::metrics::Counters;
use super::oip::{Datatype, ModelMetadata};
use super::routes::{App, oip_router, router};
use super::shutdown::{self, Cut};
use crate::{Context, ScopeError};

/// An HTTP server for one model, over the Open Inference Protocol
/// (`/v2/…`) and a plain JSON route (`POST /predict`), with `/metrics`,
/// `/healthz` and `/readyz` (see the [module docs](super)).
///
/// ```no_run
/// # async fn f() -> Result<(), tch_scope::ScopeError> {
/// use tch_scope::batch::BatchOptions;
/// use tch_scope::serve::{Engine, Server, oip::Datatype};
///
/// let engine = Engine::load("mlp.pt", BatchOptions::new().max_batch(32))?;
/// Server::new("mlp", engine)
///     .input(Datatype::Fp32, &[-1, 64])
///     .max_connections(256)
///     .run("127.0.0.1:8000".parse().unwrap())
///     .await
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a server does nothing until bound and served"]
pub struct Server {
    name: String,
    engine: Engine,
    inputs: Vec<(Datatype, Vec<i64>)>,
    limits: Limits,
    max_connections: u32,
    body_limit: usize,
    body_timeout: Duration,
    default_deadline: Duration,
    shutdown_timeout: Duration,
}

impl Server {
    /// A server for `engine`'s model, named `name` in the routes
    /// (`/v2/models/{name}`). Defaults: 1,024 connections, header timeout
    /// 10 s, idle timeout 60 s, write timeout 30 s, bodies up to 64 MiB
    /// arriving within 30 s, a request's deadline 10 s from its arrival,
    /// 30 s to shut down.
    pub fn new(name: impl Into<String>, engine: Engine) -> Self {
        Self {
            name: name.into(),
            engine,
            inputs: Vec::new(),
            limits: Limits {
                header: Duration::from_secs(10),
                idle: Duration::from_secs(60),
                write: Duration::from_secs(30),
            },
            max_connections: 1024,
            body_limit: 64 << 20,
            body_timeout: Duration::from_secs(30),
            default_deadline: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(30),
        }
    }

    /// Declares the model's next input (`input__0` first): its datatype and
    /// shape, `-1` for a dynamic dim (the batch). Declared inputs replace
    /// the ones the engine reads from the model; a TorchScript model needs
    /// them. The warm-up runs the model once on zeros of these shapes (each
    /// `-1` as 1), and its outputs give the outputs' metadata.
    pub fn input(mut self, datatype: Datatype, shape: &[i64]) -> Self {
        self.inputs.push((datatype, shape.to_vec()));
        self
    }

    /// At most `n` connections at once (at least 1); the rest wait in the
    /// kernel's backlog, costing the process nothing.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// A request head must arrive within `d` of its first byte.
    pub fn header_timeout(mut self, d: Duration) -> Self {
        self.limits.header = d;
        self
    }

    /// A connection with no request for `d` is closed.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.limits.idle = d;
        self
    }

    /// A connection whose answer makes no write progress for `d` (a client
    /// that does not read it) is closed.
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.limits.write = d;
        self
    }

    /// The largest request body, in bytes (a larger one: 400).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// A request's body must arrive within `d` of its head (else 408): a
    /// client that stops sending holds no connection for longer.
    pub fn body_timeout(mut self, d: Duration) -> Self {
        self.body_timeout = d;
        self
    }

    /// A request's budget from its arrival when it gives none (neither the
    /// protocol's `timeout` parameter nor an `x-deadline-ms` header).
    pub fn default_deadline(mut self, d: Duration) -> Self {
        self.default_deadline = d;
        self
    }

    /// How long a shutdown waits for the requests in flight before it
    /// closes their connections.
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }

    /// Warms the model up (which makes its metadata) and listens on `addr`
    /// (port 0: any free port, [`Listening::local_addr`] names it).
    ///
    /// # Errors
    /// A [`ScopeError`] (scope `serve`) when the model declares no inputs
    /// and none were given, when the warm-up fails, or when `addr` cannot
    /// be bound.
    pub async fn bind(self, addr: SocketAddr) -> Result<Listening, ScopeError> {
        let error = |reason: String| ScopeError::new("serve", None, reason);
        let (limits, max_connections, shutdown_timeout) =
            (self.limits, self.max_connections, self.shutdown_timeout);
        let app = Arc::new(self.app().await?);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| error(format!("cannot listen on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| error(format!("cannot read the address bound: {e}")))?;
        Ok(Listening {
            listener,
            local,
            app,
            limits,
            max_connections,
            shutdown_timeout,
        })
    }

    /// The Open Inference Protocol's routes alone (`/v2/…`, no fallback),
    /// for an application that serves its own routes and connections: merge
    /// them into its axum (0.8) router. The model is warmed up first, as by
    /// [`bind`](Self::bind); the connection settings are the
    /// application's own, the body limit and timeout and the default
    /// deadline this server's.
    ///
    /// # Errors
    /// As [`bind`](Self::bind)'s, without the listening.
    pub async fn oip_routes(self) -> Result<axum::Router, ScopeError> {
        let app = self.app().await?;
        Ok(oip_router(Arc::new(app)))
    }

    /// The model's metadata (after its warm-up) and the state of the
    /// routes.
    async fn app(self) -> Result<App, ScopeError> {
        let error = |reason: String| ScopeError::new("serve", None, reason);
        let inputs = if self.inputs.is_empty() {
            self.engine.inputs().map(<[_]>::to_vec).ok_or_else(|| {
                error(format!(
                    "model {:?} declares no inputs: give each with Server::input(datatype, shape)",
                    self.name
                ))
            })?
        } else {
            self.inputs
        };
        let outputs = warm_up(&self.engine, &inputs).await.map_err(error)?;
        let meta = ModelMetadata::new(self.name, self.engine.platform(), inputs, outputs);
        Ok(App::new(
            meta,
            self.engine,
            Arc::new(Counters::default()),
            self.body_limit,
            self.body_timeout,
            self.default_deadline,
        ))
    }

    /// [`bind`](Self::bind), then [`Listening::serve`]: serves until
    /// SIGINT or SIGTERM, then shuts down gracefully.
    ///
    /// # Errors
    /// As theirs.
    pub async fn run(self, addr: SocketAddr) -> Result<(), ScopeError> {
        self.bind(addr).await?.serve().await
    }
}

/// Runs the model once on zeros of each input's shape (`-1` as 1); the
/// outputs' datatypes and shapes, the first dim `-1` when the first input's
/// is.
async fn warm_up(
    engine: &Engine,
    inputs: &[(Datatype, Vec<i64>)],
) -> Result<Vec<(Datatype, Vec<i64>)>, String> {
    let xs: Vec<Tensor> = inputs
        .iter()
        .map(|(dt, shape)| {
            let concrete: Vec<i64> = shape.iter().map(|&d| if d < 0 { 1 } else { d }).collect();
            Tensor::zeros(&concrete, (dt.kind(), tch::Device::Cpu))
        })
        .collect();
    let ys = engine
        .submit(Context::capture(), xs, None)
        .await
        .map_err(|e| format!("the warm-up run failed: {e}"))?;
    let batched = inputs.first().is_some_and(|(_, s)| s.first() == Some(&-1));
    ys.iter()
        .map(|y| {
            let dt =
                datatype_of(y).map_err(|e| format!("the warm-up's output: {}", e.message()))?;
            let mut shape = y.size();
            if batched && !shape.is_empty() {
                shape[0] = -1;
            }
            Ok((dt, shape))
        })
        .collect()
}

/// A bound server, its model warmed up: [`serve`](Self::serve) it.
#[derive(Debug)]
pub struct Listening {
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    app: Arc<App>,
    limits: Limits,
    max_connections: u32,
    shutdown_timeout: Duration,
}

impl Listening {
    /// The address bound.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The model's metadata, as `GET /v2/models/{name}` answers it.
    #[must_use]
    pub fn metadata(&self) -> &ModelMetadata {
        &self.app.meta
    }

    /// Serves until SIGINT or SIGTERM (or Ctrl-C), then shuts down as
    /// [`serve_until`](Self::serve_until). This is for a program whose
    /// life is the server: a second signal while it shuts down ends the
    /// process at once, with status 128 + the signal's number (130 for
    /// SIGINT, 143 for SIGTERM), as the shell reports a process the signal
    /// killed (the operator's way out of a shutdown that waits for slow
    /// requests); and a shutdown that cut requests off while a worker is
    /// still in a forward ends the process with status 1, its error on
    /// stderr. Both without the static destructors a normal exit runs,
    /// which would crash the worker still in libtorch.
    ///
    /// # Errors
    /// As [`serve_until`](Self::serve_until) (when no worker is left
    /// computing), or a [`ScopeError`] when the signal handlers cannot be
    /// installed.
    pub async fn serve(self) -> Result<(), ScopeError> {
        let stop = shutdown::signals()?;
        match self.serve_inner(stop).await {
            Ok(()) => Ok(()),
            Err(Cut { error, busy: true }) => {
                eprintln!("serve: {error} (a forward was still running: exiting now)");
                shutdown::exit_now(1)
            }
            Err(Cut { error, .. }) => Err(error),
        }
    }

    /// Serves until `stop` completes; then accepts no more connections,
    /// answers the requests in flight (closing each connection after its
    /// answer, idle ones at once) within the shutdown timeout, closes the
    /// connections still open after it, and lets the batcher compute what
    /// is queued and end its workers (waited for when every request was
    /// answered; after a cut-off, for a second at most: a worker still in a
    /// forward then ends on a thread of its own, and the program must not
    /// end the process before it has, see [`serve`](Self::serve)).
    ///
    /// # Errors
    /// A [`ScopeError`] when requests were cut off at the shutdown timeout.
    pub async fn serve_until(
        self,
        stop: impl Future<Output = ()> + Send,
    ) -> Result<(), ScopeError> {
        self.serve_inner(stop).await.map_err(|c| c.error)
    }

    /// [`serve_until`](Self::serve_until), saying after a cut-off whether
    /// a worker was still computing.
    async fn serve_inner(self, stop: impl Future<Output = ()> + Send) -> Result<(), Cut> {
        let Self {
            listener,
            local: _,
            app,
            limits,
            max_connections,
            shutdown_timeout,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (abort_tx, abort_rx) = watch::channel(false);
        let connections = Arc::new(Semaphore::new(max_connections as usize));
        let routes = router(Arc::clone(&app));
        let mut stop = std::pin::pin!(stop);
        loop {
            // Accepts while under the cap: past it, connections wait in the
            // kernel's backlog.
            let permit = tokio::select! {
                biased;
                () = &mut stop => break,
                p = Arc::clone(&connections).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let accepted = tokio::select! {
                biased;
                () = &mut stop => break,
                r = listener.accept() => r,
            };
            let Ok((tcp, _)) = accepted else {
                // Out of file descriptors, or a connection reset before it
                // was accepted: wait a little, go on.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(serve_counted(
                tcp,
                routes.clone(),
                limits,
                Arc::clone(&app.counters),
                stop_rx.clone(),
                abort_rx.clone(),
                permit,
            ));
        }
        drop(listener);
        app.stopping.store(true, Ordering::SeqCst);
        let _ = stop_tx.send(true);
        let until = Instant::now() + shutdown_timeout;
        let drained =
            tokio::time::timeout_at(until.into(), connections.acquire_many(max_connections))
                .await
                .is_ok();
        if !drained {
            let _ = abort_tx.send(true);
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                connections.acquire_many(max_connections),
            )
            .await;
        }
        drop(routes);
        let busy = shutdown::end_workers(app, drained).await;
        if drained {
            Ok(())
        } else {
            let error = ScopeError::run(
                "serve",
                None,
                format!(
                    "requests were cut off at the shutdown timeout ({} s)",
                    shutdown_timeout.as_secs_f64()
                ),
            );
            Err(Cut { error, busy })
        }
    }
}
