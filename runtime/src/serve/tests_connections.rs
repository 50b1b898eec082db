//! The connection layer on loopback: idle connections closed, a client
//! that does not read its answer cut off by the write timeout, and
//! connections past the cap left waiting until a place is free. Every
//! wait is bounded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::Server;
use super::oip::Datatype;
use super::tests::double_engine;

/// A server of the doubling model on its own runtime, stopped when dropped.
struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    /// Runs the server until dropped.
    _rt: tokio::runtime::Runtime,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn start(server: impl FnOnce(Server) -> Server) -> Running {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listening = rt
        .block_on(
            server(Server::new("double", double_engine()).input(Datatype::Fp32, &[-1, 3]))
                .bind("127.0.0.1:0".parse().unwrap()),
        )
        .unwrap();
    let addr = listening.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    rt.spawn(listening.serve_until(async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        stop: Some(stop),
        _rt: rt,
    }
}

/// Whether the server closes `s` within `limit` (a read of 0 bytes or an
/// error), reading and dropping whatever comes before.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 65536];
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// `GET path` with keep-alive; the answer's status line, the stream kept.
fn get(addr: SocketAddr, path: &str) -> (String, TcpStream) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    (text.lines().next().unwrap_or_default().to_owned(), s)
}

fn metrics(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let server = start(|s| s.idle_timeout(Duration::from_millis(200)));
    let (status, mut s) = get(server.addr, "/v2/health/live");
    assert!(status.contains("200"), "{status}");
    assert!(closed_within(&mut s, Duration::from_secs(10)), "still open");
    let text = metrics(server.addr);
    assert!(
        text.contains("serve_connections_closed_total{reason=\"idle\"} 1"),
        "{text}"
    );
}

#[test]
fn a_client_that_does_not_read_its_answer_is_cut_off_by_the_write_timeout() {
    let server = start(|s| s.write_timeout(Duration::from_millis(200)));
    // 4 Mi floats out, in binary: far more than the sockets' buffers hold.
    let rows = 1 << 20;
    let header = format!(
        r#"{{"inputs":[{{"name":"input__0","datatype":"FP32","shape":[{rows},3],"parameters":{{"binary_data_size":{}}}}}],"parameters":{{"binary_data_output":true}}}}"#,
        rows * 12
    );
    let mut s = TcpStream::connect(server.addr).unwrap();
    write!(
        s,
        "POST /v2/models/double/infer HTTP/1.1\r\nhost: x\r\ninference-header-content-length: {}\r\ncontent-length: {}\r\n\r\n{header}",
        header.len(),
        header.len() + rows * 12
    )
    .unwrap();
    s.write_all(&vec![0u8; rows * 12]).unwrap();
    // Not read: the server's write stalls, then it gives up.
    let start = Instant::now();
    loop {
        let text = metrics(server.addr);
        if text.contains("serve_connections_closed_total{reason=\"write_timeout\"} 1") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not cut off: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(s);
}

#[test]
fn a_connection_past_the_cap_waits_for_a_place() {
    let server = start(|s| s.max_connections(1));
    let (status, first) = get(server.addr, "/v2/health/live");
    assert!(status.contains("200"), "{status}");
    // The second is in the kernel's backlog: its request waits.
    let mut second = TcpStream::connect(server.addr).unwrap();
    write!(
        second,
        "GET /v2/health/ready HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    second
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 4096];
    assert!(second.read(&mut buf).is_err(), "answered past the cap");
    drop(first);
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut text = String::new();
    second.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn a_body_that_stops_coming_is_answered_408() {
    let server = start(|s| s.body_timeout(Duration::from_millis(200)));
    let mut s = TcpStream::connect(server.addr).unwrap();
    write!(
        s,
        "POST /v2/models/double/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{{\"inputs\""
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        text.starts_with("HTTP/1.1 408") && text.contains("did not arrive"),
        "{text}"
    );
}

/// Set when [`Slow`] starts on a request of 2 rows (the warm-up has 1).
static SLOW_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A model that takes its time: a request is still in flight when the
/// server is told to stop.
#[derive(Debug)]
struct Slow;

impl tch::nn::Module for Slow {
    fn forward(&self, x: &tch::Tensor) -> tch::Tensor {
        if x.size()[0] == 2 {
            SLOW_STARTED.store(true, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
        }
        x + 1
    }
}

#[test]
fn stopping_answers_the_request_in_flight_then_refuses_connections() {
    use std::sync::Arc;

    use crate::batch::{BatchOptions, Batcher};
    use crate::{Inference, WithMode};

    let served = Arc::new(Inference::new(WithMode::new(Slow)).unwrap());
    let batcher = Batcher::new(served, BatchOptions::new(), |m, xs| {
        Ok(vec![m.forward(&xs[0])])
    })
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listening = rt
        .block_on(
            Server::new("slow", super::Engine::new(batcher))
                .input(Datatype::Fp32, &[-1, 1])
                .bind("127.0.0.1:0".parse().unwrap()),
        )
        .unwrap();
    let addr = listening.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = rt.spawn(listening.serve_until(async {
        let _ = stopped.await;
    }));
    let body = r#"{"inputs":[{"name":"input__0","datatype":"FP32","shape":[2,1],"data":[1,2]}]}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v2/models/slow/infer HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The request is being computed when the stop comes.
    let start = Instant::now();
    while !SLOW_STARTED.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(start.elapsed() < Duration::from_secs(10), "never computed");
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.send(()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains("[2.0,3.0]"),
        "{text}"
    );
    rt.block_on(server).unwrap().unwrap();
    assert!(TcpStream::connect(addr).is_err(), "still accepting");
}
