//! The servers `load` starts: the tch-scope server (`examples/serve`, the
//! serving library with its own flags: `batched` and `unbatched`), the
//! plain-tch baseline (`serve-lab --plain`, the tests' own server), FastAPI
//! on uvicorn (`scripts/serve_fastapi.py`) and MLServer
//! (`scripts/mlserver_runtime.py`), each a process group on loopback,
//! killed when dropped; and the protocol each is driven over.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::requests::{BODY_LIMIT, Pool, Protocol};
use crate::{Args, ServerKind, client};

/// The bootstrap's libtorch: its venv's `site-packages/torch`.
const LIBTORCH_LINK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch");
const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
/// MLServer's version, as scripts/bootstrap-mlserver.sh pins it.
const MLSERVER: &str = "1.7.1";
/// How long a server may take to say where it listens, or to be ready.
const START_LIMIT: Duration = Duration::from_secs(120);

/// A server process (and its worker processes: one process group),
/// killed when dropped, with the folder it was set up in.
pub struct Server {
    child: Child,
    pub addr: String,
    folder: Option<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The group's id is the leader's pid (`process_group(0)`).
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(f) = &self.folder {
            let _ = std::fs::remove_dir_all(f);
        }
    }
}

impl Server {
    /// The CPU time (user + system) of every process of the server's
    /// group so far, read from /proc (Linux; `None` elsewhere).
    pub fn cpu(&self) -> Option<Duration> {
        let pgid = self.child.id().to_string();
        let mut ticks = 0u64;
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // After the command's `)`: state ppid pgrp … utime(14) stime(15).
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() > 12 && f[2] == pgid {
                ticks += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            }
        }
        // /proc counts in USER_HZ, 100 a second on Linux.
        Some(Duration::from_millis(ticks * 10))
    }
}

/// The bootstrap venv's python: `bin/python` four levels above its
/// `site-packages/torch` (the link resolved first: python finds its venv
/// from the path it is started by).
fn bootstrap_python() -> Result<PathBuf, String> {
    let torch = std::fs::canonicalize(LIBTORCH_LINK)
        .map_err(|e| format!("{LIBTORCH_LINK}: {e} (run `make libtorch`, or give --python)"))?;
    let venv = torch
        .ancestors()
        .nth(4)
        .ok_or_else(|| format!("{} is not inside a venv", torch.display()))?;
    Ok(venv.join("bin/python"))
}

/// The model's name in the Open Inference Protocol's paths: its file's
/// stem (the tch-scope server's default `--name`; MLServer is told it).
pub fn model_name(model: &Path) -> String {
    model
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

/// The `serve` binary (default: beside this one).
fn serve_bin(args: &Args) -> Result<PathBuf, String> {
    match &args.server {
        Some(p) => Ok(p.clone()),
        None => Ok(std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("serve")),
    }
}

/// The tests' server `serve-lab` (the `plain` kind): the tests package's
/// binary, in `target/<profile>/`, above this one's `examples/` folder.
fn serve_lab_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("serve-lab"))
        .ok_or_else(|| format!("{} has no target/<profile> folder", exe.display()))
}

pub fn start(args: &Args, pool: &Pool, kind: ServerKind) -> Result<Server, String> {
    if kind == ServerKind::Mlserver {
        return start_mlserver(args, pool);
    }
    let (mut cmd, built_by) = if kind == ServerKind::Fastapi {
        let python = match &args.python {
            Some(p) => p.clone(),
            None => bootstrap_python()?,
        };
        let mut cmd = Command::new(python);
        cmd.args(["-W", "ignore", crate::FASTAPI_SCRIPT, "--workers"])
            .arg(args.workers.unwrap_or(2).to_string());
        (cmd, "bash scripts/bootstrap-fastapi.sh")
    } else if kind == ServerKind::Plain {
        // The plain-tch baseline lives in the tests' server; `--debug` for
        // its `/debug/workers`, which `load` checks after each run.
        let mut cmd = Command::new(serve_lab_bin()?);
        cmd.args(["--plain", "--debug", "--queue"])
            .arg(args.queue.to_string())
            .arg("--warmup-shape")
            .arg(format!("1,{}", pool.features));
        if let Some(w) = args.workers {
            cmd.arg("--workers").arg(w.to_string());
        }
        (
            cmd,
            "cargo build --release -p tch-scope-tests --bin serve-lab",
        )
    } else {
        // examples/serve: the library and its own flags, nothing else.
        let mut cmd = Command::new(serve_bin(args)?);
        cmd.arg("--queue").arg(args.queue.to_string());
        // A TorchScript file declares no input; a `.pt2` declares its own.
        if !crate::requests::is_package(&args.model) {
            cmd.arg(format!("--input-shape=-1,{}", pool.features));
        }
        if let Some(w) = args.workers {
            cmd.arg("--workers").arg(w.to_string());
        }
        if kind == ServerKind::Unbatched {
            cmd.args(["--max-batch", "1"]);
        } else {
            cmd.arg("--max-batch").arg(args.max_batch.to_string());
            if let Some(ms) = args.max_delay_ms {
                cmd.arg("--max-delay-ms").arg(ms.to_string());
            }
        }
        (cmd, "cargo build --release -p examples --example serve")
    };
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.args(["--addr", "127.0.0.1:0", "--body-limit"])
        .arg(BODY_LIMIT.to_string())
        .arg("--model")
        .arg(&args.model)
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "cannot start {:?}: {e} (set it up: {built_by})",
            cmd.get_program()
        )
    })?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        // Keep reading so the server never blocks on a full pipe.
        for _ in lines {}
    });
    let mut server = Server {
        child,
        addr: String::new(),
        folder: None,
    };
    let line = rx.recv_timeout(START_LIMIT).map_err(|_| {
        format!(
            "the {} server did not say where it listens within {} s",
            kind.name(),
            START_LIMIT.as_secs()
        )
    })?;
    server.addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .ok_or_else(|| format!("unexpected first line: {line}"))?
        .to_string();
    Ok(server)
}

/// The protocol a run drives `kind` at `addr` over when `--protocol` sets
/// none: MLServer's JSON tensors (its REST API has no binary
/// extension: 1.7.1 answers a binary request 422), FastAPI's `/predict`,
/// and for the tch-scope server the binary protocol when it answers
/// `GET /v2/health/ready` with 200, else its own JSON.
pub async fn protocol(kind: Option<ServerKind>, addr: &str) -> Protocol {
    match kind {
        Some(ServerKind::Mlserver) => Protocol::V2Json,
        Some(ServerKind::Fastapi) => Protocol::Predict,
        _ => match client::get(addr, "/v2/health/ready").await {
            Ok((200, _)) => Protocol::V2Binary,
            _ => Protocol::Predict,
        },
    }
}

/// A free port on loopback (bound, read, let go: MLServer takes a number).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// The venv's `mlserver` (scripts/bootstrap-mlserver.sh).
fn mlserver_bin(args: &Args) -> PathBuf {
    if let Some(p) = &args.mlserver {
        return p.clone();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
        PathBuf::from,
    );
    cache.join(format!("tch-scope/venv-mlserver-{MLSERVER}/bin/mlserver"))
}

/// MLServer serving `args.model` with scripts/mlserver_runtime.py:
/// adaptive batching (`--max-batch`, `max_batch_time` 2 ms),
/// `parallel_workers` (`--workers`, default 2), access logs off (its
/// `debug` default logs each request), set up in a temporary folder and
/// waited for with `GET /v2/health/ready`.
fn start_mlserver(args: &Args, pool: &Pool) -> Result<Server, String> {
    let name = model_name(&args.model);
    let model =
        std::fs::canonicalize(&args.model).map_err(|e| format!("{}: {e}", args.model.display()))?;
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    let folder = std::env::temp_dir().join(format!(
        "tch-scope-load-mlserver-{}-{}",
        std::process::id(),
        STARTS.fetch_add(1, Ordering::Relaxed)
    ));
    let port = free_port()?;
    let settings = serde_json::json!({
        "host": "127.0.0.1", "http_port": port, "grpc_port": free_port()?,
        "metrics_port": free_port()?, "parallel_workers": args.workers.unwrap_or(2),
        "debug": false,
    });
    let model_settings = serde_json::json!({
        "name": name,
        "implementation": "mlserver_runtime.TorchScriptRuntime",
        "parameters": {"uri": model},
        "max_batch_size": args.max_batch,
        "max_batch_time": args.max_delay_ms.unwrap_or(2) as f64 / 1e3,
        "inputs": [{"name": crate::oip::INPUT, "datatype": "FP32", "shape": [-1, pool.features]}],
        "outputs": [{"name": crate::oip::OUTPUT, "datatype": "FP32", "shape": [-1, pool.outputs]}],
    });
    let write = |path: PathBuf, v: &serde_json::Value| {
        std::fs::write(&path, v.to_string()).map_err(|e| format!("{}: {e}", path.display()))
    };
    std::fs::create_dir_all(folder.join(&name))
        .map_err(|e| format!("{}: {e}", folder.display()))?;
    write(folder.join("settings.json"), &settings)?;
    write(
        folder.join(&name).join("model-settings.json"),
        &model_settings,
    )?;
    let log = folder.join("mlserver.log");
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let bin = mlserver_bin(args);
    let mut cmd = Command::new(&bin);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.arg("start")
        .arg(&folder)
        .current_dir(&folder)
        .env("PYTHONPATH", SCRIPTS)
        .stdout(out)
        .stderr(err);
    let child = cmd.spawn().map_err(|e| {
        format!(
            "cannot start {}: {e} (set it up: bash scripts/bootstrap-mlserver.sh)",
            bin.display()
        )
    })?;
    let mut server = Server {
        child,
        addr: format!("127.0.0.1:{port}"),
        folder: Some(folder),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let ready = format!("/v2/models/{name}/ready");
    let start = Instant::now();
    loop {
        let up = rt.block_on(async {
            matches!(
                client::get(&server.addr, "/v2/health/ready").await,
                Ok((200, _))
            ) && matches!(client::get(&server.addr, &ready).await, Ok((200, _)))
        });
        if up {
            return Ok(server);
        }
        let exited = server.child.try_wait().ok().flatten();
        if exited.is_some() || start.elapsed() > START_LIMIT {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "MLServer was not ready ({}): its log:\n{}",
                exited.map_or_else(
                    || format!("not within {} s", START_LIMIT.as_secs()),
                    |s| s.to_string()
                ),
                tail.join("\n")
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
