//! `serve-lab`: the tests' own HTTP inference server, a binary of the
//! tests package that tests/serve.rs runs as a process. It is a test
//! fixture, not a server to copy: `examples/serve.rs` is that, on
//! `tch_scope::serve`. It has what the serving library leaves out on
//! purpose:
//!
//! - Fault injection (`--debug`), for the tests of what a failing worker
//!   does: the request header `x-debug-fault` (`panic:MESSAGE`,
//!   `sleep:MS`, `die`), `x-debug-grad: on` (the request's context
//!   captured with grad mode on and inference mode off: another scope
//!   state), `GET /debug/workers` (each worker's grad mode, inference
//!   mode and the model's modes, at its start and now), and
//!   `POST /debug/pause` and `POST /debug/resume` (every worker held, so
//!   that tests can fill the queue). The batched server's 200 answers
//!   then say what the forward ran in (`x-debug-batch`,
//!   `x-debug-grad-mode`, `x-debug-inference-mode`), for the tests of
//!   mixed scope states.
//! - The plain-tch baseline (`--plain`) that `make load` measures the
//!   scopes against: the same server with `tch::no_grad`, the model put in
//!   eval once, the time taken by hand, the deadline checked by hand
//!   between steps, and no batching. A `.pt2` package (tch has no loader
//!   for one, tch-rs #979) is loaded with `tch_scope::aoti::Package` and
//!   run under `tch::no_grad` with none of the scopes.
//!
//! ```text
//! cargo run -p tch-scope-tests --bin serve-lab -- --addr 127.0.0.1:0 \
//!     [--model PATH] [--workers N] [--queue N] [--max-batch N] [--max-delay-ms MS] \
//!     [--plain] [--debug]
//! ```
//!
//! The model is one float tensor in, one out: a TorchScript file, or an
//! AOTInductor package when its path ends in `.pt2` (`model.rs`). Three
//! servers run it:
//!
//! - batched, the default: the `/predict` handler is an attributed
//!   `async fn` (`inference_mode`, `timed`, `deadline(until = arrival +
//!   budget)`) that submits its captured `Context` with the input to a
//!   `Batcher` (`--max-batch`, default 32; `--max-delay-ms`, default 2),
//!   whose threads are the model's workers (`batched.rs`, `controls.rs`);
//!   with `--input-shape`, or for a `.pt2`, the Open Inference Protocol's
//!   `/v2` routes too, over the same batcher (`oip.rs`);
//! - `--max-batch 1`: the same handler over a worker pool fed by a bounded
//!   queue, one request a forward (`pool.rs`);
//! - `--plain`: that worker pool, with plain tch.
//!
//! Routes (`routes.rs`): `POST /predict` (`requests.rs`; docs/serving.md
//! has the status table), `GET /metrics` (`prometheus.rs`), `GET /healthz`
//! and `GET /readyz` (`health.rs`), and with `--debug` the `/debug` ones
//! (`debug_routes.rs`). Connections are served by
//! `tch_scope::serve::connections` under the limits the flags give
//! (`listen.rs`); SIGTERM or SIGINT drains them (`shutdown.rs`).
//! `--help` lists every flag (`flags.rs`).

#[path = "../../examples/common/floats.rs"]
mod floats;

// The data flows one way: flags, answers, debug_headers, requests,
// workers, model, controls, batched, pool, app, then the routes (health,
// prometheus, debug_routes, routes), oip, shutdown and listen; each uses
// only modules before it in this list.
mod answers;
mod app;
mod batched;
mod controls;
mod debug_headers;
mod debug_routes;
mod flags;
mod health;
mod listen;
mod model;
mod oip;
mod pool;
mod prometheus;
mod requests;
mod routes;
mod shutdown;
mod workers;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use tch::CModule;
use tch_scope::aoti::Package;
use tch_scope::{Inference, ScopeError};
use tokio::sync::Semaphore;

use app::App;
use batched::{BatchEngine, Batched};
use flags::Args;
use pool::Engine;
use shutdown::Closing;
use workers::Workers;

fn main() {
    // A usage error: clap's message and exit status 2; --help: exit 0.
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("serve: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    // One intra-op thread per worker: the workers are the parallelism
    // (worker threads copy this process value at their first parallel op).
    tch::set_num_threads(args.intra_op_threads);
    // Before the batcher's warm-up, whose batches it counts.
    let metrics = prometheus::install()?;
    let pool = Arc::new(Workers::new(args.workers));
    let (engine, batched) = load(&args, &pool)?;
    debug_assert!(engine.as_ref().is_none_or(|e| e.plain() == args.plain));
    let engine = engine.map(Arc::new);
    // What shutdown closes once every handler is gone.
    let closing = batched.as_ref().map(|b: &Batched| Closing {
        engine: Arc::clone(&b.engine),
        controls: Arc::clone(&b.controls),
    });
    let pool::Started {
        jobs,
        depth,
        threads: mut workers,
    } = pool::start(&args, engine.as_ref(), &pool)?;

    let app = Arc::new(App {
        batched,
        jobs,
        depth,
        workers: pool,
        queue: args.queue,
        plain: args.plain,
        debug: args.debug,
        body_limit: args.body_limit,
        body_timeout: args.body_timeout,
        default_deadline: args.default_deadline,
        stuck_after: args.stuck_after,
        metrics,
        paused: Mutex::new(None),
        debug_turn: tokio::sync::Mutex::new(()),
        stopping: AtomicBool::new(false),
        requests: AtomicU64::new(0),
        connections: Arc::new(Semaphore::new(args.max_connections as usize)),
        max_connections: args.max_connections,
    });
    let router = routes::router(&app, args.debug);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("serve-io")
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    let drained = rt.block_on(listen::serve(&args, app, router, closing, &mut workers))?;
    rt.shutdown_timeout(Duration::from_millis(100));
    shutdown::finish(workers, engine, drained)
}

/// The model loaded, and what runs it: the worker pool's [`Engine`], or
/// (the tch-scope server unless `--max-batch 1`) the batcher.
fn load(args: &Args, pool: &Arc<Workers>) -> Result<(Option<Engine>, Option<Batched>), String> {
    let batching = args.batching();
    let served = |e: ScopeError| e.to_string();
    if args.model_is_package() {
        // As many runners as workers: one runner would serialize them.
        let model = Package::options()
            .runners(args.workers)
            .load(&args.model)
            .map_err(|e| format!("cannot load {}: {e}", args.model.display()))?;
        if args.plain {
            Ok((Some(Engine::PlainPackage(model)), None))
        } else if batching {
            let served = Inference::new(model).map_err(served)?;
            let b = Batched::start(served, args, Arc::clone(pool), |b| {
                BatchEngine::Package(Arc::new(b))
            })?;
            Ok((None, Some(b)))
        } else {
            let served = Inference::new(model).map_err(served)?;
            Ok((Some(Engine::ScopedPackage(served)), None))
        }
    } else {
        let model = CModule::load(&args.model)
            .map_err(|e| format!("cannot load {}: {e}", args.model.display()))?;
        if args.plain {
            let mut model = model;
            model.set_eval();
            Ok((Some(Engine::Plain(model)), None))
        } else if batching {
            let served = Inference::new(model).map_err(served)?;
            let b = Batched::start(served, args, Arc::clone(pool), |b| {
                BatchEngine::Module(Arc::new(b))
            })?;
            Ok((None, Some(b)))
        } else {
            let served = Inference::new(model).map_err(served)?;
            Ok((Some(Engine::Scoped(served)), None))
        }
    }
}
