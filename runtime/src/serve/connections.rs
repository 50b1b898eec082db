//! Connections: their clocks (header, idle, write), the socket that
//! tells them what it reads and writes, and the loop that serves one.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::metrics::{Closed, Counters};

/// A connection's clocks: past any of them the server closes it.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From a request head's first byte to its last.
    pub header: Duration,
    /// With no request in flight, no answer being written and no byte of
    /// a new request.
    pub idle: Duration,
    /// An answer's write with no progress (no byte taken by the socket).
    pub write: Duration,
}

/// "No time yet" in [`ConnClock`]'s millisecond fields.
const UNSET: u64 = u64::MAX;

/// One connection's clocks, in milliseconds since its accept. hyper's own
/// `header_read_timeout` starts as soon as it waits for a head, between
/// keep-alive requests too, so it would also be the idle timeout; these
/// keep the two apart: the header clock starts at a head's first byte.
struct ConnClock {
    start: Instant,
    in_flight: AtomicUsize,
    /// When the last request ended (or the connection was accepted).
    idle_since: AtomicU64,
    /// The first byte of a request head not yet complete, or `UNSET`.
    head_since: AtomicU64,
    /// A write is waiting for the socket (an answer the client has not
    /// read yet): not idle, whatever the requests say.
    writing: AtomicBool,
}

/// What a connection's clocks say now.
enum Due {
    /// Look again in this long.
    Wait(Duration),
    /// No request and no byte for the idle timeout.
    Idle,
    /// A head begun and not finished within the header timeout.
    Header,
}

impl ConnClock {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(UNSET),
            writing: AtomicBool::new(false),
        }
    }

    fn ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(UNSET - 1)
    }

    /// Bytes came in: with no request in flight, a head has begun.
    fn on_read(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_since.load(Ordering::Relaxed) == UNSET
        {
            self.head_since.store(self.ms(), Ordering::Relaxed);
        }
    }

    /// hyper called the service: the head is complete.
    fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_since.store(UNSET, Ordering::Relaxed);
    }

    fn end(&self) {
        self.idle_since.store(self.ms(), Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// A write found the socket full.
    fn write_blocked(&self) {
        self.writing.store(true, Ordering::Relaxed);
    }

    /// A blocked write went on: the idle clock starts again from here.
    fn write_resumed(&self) {
        self.idle_since.store(self.ms(), Ordering::Relaxed);
        self.writing.store(false, Ordering::Relaxed);
    }

    fn due(&self, limits: Limits) -> Due {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(UNSET - 1);
        // An answer still being written is the write clock's (`Watched`).
        if self.in_flight.load(Ordering::Relaxed) > 0 || self.writing.load(Ordering::Relaxed) {
            return Due::Wait(limits.header.min(limits.idle));
        }
        let now = self.ms();
        let (since, limit, due) = match self.head_since.load(Ordering::Relaxed) {
            UNSET => (
                self.idle_since.load(Ordering::Relaxed),
                limits.idle,
                Due::Idle,
            ),
            head => (head, limits.header, Due::Header),
        };
        let at = since.saturating_add(ms(limit));
        if now >= at {
            due
        } else {
            // Nothing wakes the connection's loop when a head begins: a
            // look at least once per header timeout sees each head in
            // time to cut it off at its own deadline.
            Due::Wait(Duration::from_millis(at - now).min(limits.header))
        }
    }
}

/// Ends a request on its connection's clock when the service's future
/// ends, answered or dropped.
struct InFlight(Arc<ConnClock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The socket, telling its clock when bytes arrive and when a write
/// waits, and closing the connection when a write has made no progress
/// for the write timeout: hyper counts a request done when its handler
/// returns, before the answer is written, and its `graceful_shutdown`
/// waits for that write, so a client that never reads would hold its
/// connection (and its place under `--max-connections`) for ever.
struct Watched {
    tcp: TcpStream,
    clock: Arc<ConnClock>,
    counters: Arc<Counters>,
    /// The write timeout.
    write_timeout: Duration,
    /// The write clock: armed at a write that finds the socket full,
    /// disarmed by the next byte written. It stays allocated between
    /// stalls and is reset, not rebuilt.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
    /// The write clock ran out: every write from now on fails (counted
    /// once).
    timed_out: bool,
}

impl Watched {
    fn new(
        tcp: TcpStream,
        clock: Arc<ConnClock>,
        counters: Arc<Counters>,
        write_timeout: Duration,
    ) -> Self {
        Self {
            tcp,
            clock,
            counters,
            write_timeout,
            stall: None,
            armed: false,
            timed_out: false,
        }
    }

    /// What a write (or flush) of the socket returned, seen by the write
    /// clock: progress (`progress`: bytes written; a flush that is done
    /// writes none) disarms it; `Pending` arms it if it is not, and once
    /// it has run out the write fails (`TimedOut`), which makes hyper drop
    /// the connection.
    fn watch<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        r: Poll<io::Result<T>>,
        progress: impl FnOnce(&T) -> bool,
    ) -> Poll<io::Result<T>> {
        match &r {
            Poll::Ready(Ok(v)) if progress(v) => {
                if self.armed {
                    self.armed = false;
                    self.clock.write_resumed();
                }
                r
            }
            Poll::Pending => {
                let deadline = tokio::time::Instant::now() + self.write_timeout;
                let stall = self
                    .stall
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if !self.armed {
                    stall.as_mut().reset(deadline);
                    self.armed = true;
                    self.clock.write_blocked();
                }
                if !self.timed_out && stall.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                if !self.timed_out {
                    self.timed_out = true;
                    self.counters.closed(Closed::Write);
                }
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no write progress for {} s (the write timeout)",
                        self.write_timeout.as_secs_f64()
                    ),
                )))
            }
            Poll::Ready(_) => r,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.clock.on_read();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.watch(cx, r, |n| *n > 0)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_flush(cx);
        this.watch(cx, r, |()| false)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_shutdown(cx);
        this.watch(cx, r, |()| false)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.watch(cx, r, |n| *n > 0)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// Serves one accepted connection with `router` under `limits`, for a
/// program with an accept loop of its own ([`Server`](super::Server) has
/// one): until it ends, its clocks run out, or `stop` turns true (closed
/// once its request in flight is answered) or `abort` does (at once). The
/// permit is its place under the program's connection cap, given back when
/// it closes. Connections the clocks close are counted in the `metrics`
/// facade (crate feature `metrics`) as
/// `serve_connections_closed_total{reason="idle"|"header_timeout"|"write_timeout"}`.
pub async fn serve_connection(
    tcp: TcpStream,
    router: Router,
    limits: Limits,
    stop: watch::Receiver<bool>,
    abort: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let counters = Arc::new(Counters::default());
    serve_counted(tcp, router, limits, counters, stop, abort, permit).await;
}

/// [`serve_connection`], counted in the server's `counters`.
pub(crate) async fn serve_counted(
    tcp: TcpStream,
    router: Router,
    limits: Limits,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
    mut abort: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    counters.opened();
    let _open = Open(Arc::clone(&counters));
    let clock = Arc::new(ConnClock::new());
    let io = TokioIo::new(Watched::new(
        tcp,
        Arc::clone(&clock),
        Arc::clone(&counters),
        limits.write,
    ));
    let tower = TowerToHyperService::new(router);
    let tracked = Arc::clone(&clock);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        tracked.begin();
        let in_flight = InFlight(Arc::clone(&tracked));
        let fut = hyper::service::Service::call(&tower, req);
        async move {
            let r = fut.await;
            drop(in_flight);
            r
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        // The header clock is ours (see `ConnClock`).
        .header_read_timeout(None)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    loop {
        let wait = match clock.due(limits) {
            Due::Wait(d) => d,
            Due::Idle => {
                if !closing {
                    counters.closed(Closed::Idle);
                    // Closes at once when idle; else after the request
                    // whose first bytes just came.
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                limits.idle
            }
            Due::Header => {
                counters.closed(Closed::Header);
                return;
            }
        };
        tokio::select! {
            // Errors are the client's (a reset, a bad request hyper
            // answered itself): nothing to do but close.
            _ = conn.as_mut() => return,
            _ = stop.wait_for(|s| *s), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = abort.wait_for(|a| *a) => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Counts a connection open while it lives.
struct Open(Arc<Counters>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.ended();
    }
}
