//! Limits that hold under a hostile client: `--queue` is exact when many
//! requests arrive together (serve-lab, its workers held by
//! `/debug/pause`), and a client that never reads its answer is closed at
//! `--write-timeout-s`, giving back its `--max-connections` place
//! (examples/serve).

use super::*;

/// Connections that have each sent all of a `/predict` but its last byte.
fn almost_sent(addr: &str, n: usize, body: &str) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(
                c,
                "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 x-deadline-ms: 60000\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                body.len(),
                &body[..body.len() - 1]
            )
            .unwrap();
            c
        })
        .collect()
}

/// Reads each connection's answer on a thread of its own: (status, body)
/// on the channel as they come.
fn answers(conns: Vec<TcpStream>) -> std::sync::mpsc::Receiver<(u16, String)> {
    let (tx, rx) = std::sync::mpsc::channel();
    for mut c in conns {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut raw = Vec::new();
            let _ = c.read_to_end(&mut raw);
            let text = String::from_utf8_lossy(&raw).into_owned();
            let status = text
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let _ = tx.send((status, text));
        });
    }
    rx
}

/// `--queue 2` with the one worker held: rounds of 24 requests whose last
/// bytes are sent together, so that their handlers reach the queue at
/// the same moment on every runtime thread. Each round, at most 2 are
/// accepted (the rest answered 503 "the queue is full" at once), the
/// queue never holds more than 2, and once the worker goes on every
/// accepted request is answered 200.
fn queue_cap_is_exact(plain: bool, extra: &[&str]) {
    const CAP: usize = 1;
    const N: usize = 24;
    let mut flags = vec!["--workers", "1", "--queue", "1"];
    flags.extend_from_slice(extra);
    let s = start(plain, &flags);
    let a = s.addr.as_str();
    let what = format!("plain {plain}, {extra:?}");
    let body = input(256, 32);
    for round in 0..5 {
        let (status, text) = http(a, "POST", "/debug/pause", &[], b"");
        assert_eq!(status, 200, "{what}: {text}");
        let mut conns = almost_sent(a, N, &body);
        for c in &mut conns {
            c.write_all(&body.as_bytes()[body.len() - 1..]).unwrap();
        }
        let rx = answers(conns);
        // Every request decided: refused (answered), or queued.
        let (mut refused, t) = (0, Instant::now());
        let queued = loop {
            while let Ok((status, text)) = rx.try_recv() {
                assert_eq!(status, 503, "{what}, round {round}: {text}");
                assert!(text.contains("the queue is full"), "{what}: {text}");
                refused += 1;
            }
            let depth = sample(&metrics_text(a), "serve_queue_depth").unwrap_or(0.0) as usize;
            assert!(
                depth <= CAP,
                "{what}, round {round}: {depth} requests queued past --queue {CAP}"
            );
            if refused + depth == N {
                break depth;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{what}, round {round}: {refused} refused, {depth} queued of {N}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            N - refused <= CAP,
            "{what}, round {round}: {} accepted past --queue {CAP}",
            N - refused
        );
        assert_eq!(
            queued, CAP,
            "{what}, round {round}: the queue was not filled"
        );
        let (status, text) = http(a, "POST", "/debug/resume", &[], b"");
        assert_eq!(status, 200, "{what}: {text}");
        for _ in 0..queued {
            let (status, text) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
            assert_eq!(
                status, 200,
                "{what}, round {round}: an accepted request: {text}"
            );
        }
    }
}

#[test]
fn the_queue_cap_is_exact_for_concurrent_requests_on_the_batched_server() {
    queue_cap_is_exact(false, &[]);
}

#[test]
fn the_queue_cap_is_exact_for_concurrent_requests_on_the_worker_pool() {
    queue_cap_is_exact(false, &["--max-batch", "1"]);
}

#[test]
fn the_queue_cap_is_exact_for_concurrent_requests_on_the_plain_server() {
    queue_cap_is_exact(true, &[]);
}

/// A client that sends a request whose answer (≈ 5 MB of JSON) is far
/// larger than the sockets' buffers, and never reads it: with
/// `--write-timeout-s 1 --max-connections 1`, the server closes that
/// connection once its answer has made no progress for a second (it is
/// the only connection it serves, so until then `/healthz` would wait in
/// the backlog), and then answers `/healthz` on a new connection.
#[test]
fn a_client_that_never_reads_its_answer_is_closed_at_the_write_timeout() {
    let s = start_example(&mlp_flags(&[
        "--workers",
        "1",
        "--max-connections",
        "1",
        "--write-timeout-s",
        "1",
        "--idle-timeout-s",
        "1",
        "--body-limit",
        "16000000",
    ]));
    let a = s.addr.as_str();
    let base = s.sockets();
    let rows = 60_000;
    let body = format!(
        "{{\"shape\": [{rows}, 32], \"data\": [{}]}}",
        vec!["0.25"; rows * 32].join(",")
    );
    let mut reader = TcpStream::connect(a).unwrap();
    write!(
        reader,
        "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-deadline-ms: 60000\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    reader.write_all(body.as_bytes()).unwrap();
    // Accepted, then closed by the server (never read from here).
    let t = Instant::now();
    while s.sockets() == base {
        assert!(t.elapsed() < Duration::from_secs(20), "never accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    while s.sockets() > base {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the connection whose client does not read is still open after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = http(a, "GET", "/healthz", &[], b"");
    assert_eq!(status, 200, "{body}");
    // What reached this client is a part of the answer, then the end.
    let mut got = Vec::new();
    reader
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let end = reader.read_to_end(&mut got);
    assert!(
        end.is_ok()
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "{end:?}"
    );
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200 "),
        "{}",
        &text[..text.len().min(200)]
    );
    let length: usize = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")?
                .trim()
                .parse()
                .ok()
        })
        .expect("a content-length");
    let (_, sent) = text.split_once("\r\n\r\n").expect("the answer's head");
    assert!(
        sent.len() < length,
        "the whole answer came ({length} bytes)"
    );
    let metrics = metrics_text(a);
    assert!(
        metrics.contains("serve_connections_closed_total{reason=\"write_timeout\"} 1"),
        "{metrics}"
    );
}
