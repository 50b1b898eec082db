//! What examples/serve owes its clients under slow, silent and idle
//! connections: each closed on its own clock (header, idle, body), none
//! delaying a request on a fresh connection, and `--max-connections`
//! holding the rest in the kernel's backlog.

use super::*;

/// A request on a kept-alive connection: the status line and body of the
/// answer read by its content-length, the connection left open.
pub(crate) fn keep_alive_get(addr: &str, path: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (s, status)
}

/// Whether the server has closed `s`: EOF or a reset within `limit`.
pub(crate) fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit.max(Duration::from_millis(1))))
        .unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Whether `s` is still open now (nothing to read, no EOF).
pub(crate) fn open_now(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let open = matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

/// 500 silent connections, a client that sends its head a line at a time,
/// and an idle keep-alive connection: a request on a fresh connection is
/// answered at once, and the server closes each of them on its own clock
/// (the header clock starts at a head's first byte, the idle clock when a
/// connection has no request).
#[test]
fn silent_slow_and_idle_clients_are_closed_and_do_not_delay_a_request() {
    let s = start_example(&mlp_flags(&[
        "--workers",
        "1",
        "--header-timeout-s",
        "1",
        "--idle-timeout-s",
        "3",
    ]));
    let a = s.addr.clone();
    let base = s.sockets();
    let mut silent: Vec<TcpStream> = (0..500)
        .map(|i| TcpStream::connect(&a).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    // A slowloris: one header line every 200 ms, never the blank line.
    let slow = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(&a).unwrap();
            let t = Instant::now();
            let _ = c.write_all(b"POST /predict HTTP/1.1\r\n");
            while t.elapsed() < Duration::from_secs(8) {
                std::thread::sleep(Duration::from_millis(200));
                if c.write_all(b"x-slow: 1\r\n").is_err() {
                    return Some(t.elapsed());
                }
            }
            None
        })
    };
    let (mut idle, status) = keep_alive_get(&a, "/healthz");
    assert!(status.contains(" 200 "), "{status}");
    let idle_since = Instant::now();

    let t = Instant::now();
    let (status, v) = predict(&a, None, &input(1, 32));
    assert_eq!(status, 200, "{v}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "a request beside 500 silent connections took {:?}",
        t.elapsed()
    );

    let took = slow.join().unwrap();
    assert!(
        took.is_some_and(|d| d < Duration::from_secs(4)),
        "the slow head was not cut off at the 1 s header timeout: {took:?}"
    );
    // Past the header timeout, before the idle one: still open.
    std::thread::sleep(Duration::from_millis(1800).saturating_sub(idle_since.elapsed()));
    assert!(
        open_now(&mut idle),
        "an idle keep-alive connection closed {:?} after its request, before --idle-timeout-s",
        idle_since.elapsed()
    );
    let by = idle_since + Duration::from_secs(6);
    assert!(
        closed_within(&mut idle, by.saturating_duration_since(Instant::now())),
        "the idle keep-alive connection is still open after 6 s"
    );
    for (i, c) in silent.iter_mut().enumerate() {
        assert!(
            closed_within(c, by.saturating_duration_since(Instant::now())),
            "silent connection {i} is still open after 6 s"
        );
    }
    drop(silent);
    // And the server holds no socket for them any more.
    let t = Instant::now();
    while s.sockets() > base && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.sockets(), base, "sockets left open in the server");
    let (_, text) = http(&a, "GET", "/metrics", &[], b"");
    for needle in [
        "serve_connections_closed_total{reason=\"header_timeout\"} 1",
        "serve_connections_closed_total{reason=\"idle\"} 501",
    ] {
        assert!(text.contains(needle), "no {needle} in\n{text}");
    }
}

/// A body that stops coming: 408 after `--body-timeout-s`.
#[test]
fn a_body_that_stops_coming_gets_408() {
    let s = start_example(&mlp_flags(&["--workers", "1", "--body-timeout-s", "1"]));
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    write!(
        c,
        "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 1000\r\n\r\n{{\"shape\": [1, 32], "
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text:?}");
    assert!(text.contains("did not arrive within 1 s"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// `--max-connections 4`: 10 silent connections cost the server 4
/// sockets (the rest wait in the kernel's backlog), and a request behind
/// them is answered once the idle clock has closed those before it.
#[test]
fn connections_past_the_cap_wait_in_the_backlog() {
    let s = start_example(&mlp_flags(&[
        "--workers",
        "1",
        "--max-connections",
        "4",
        "--idle-timeout-s",
        "1",
    ]));
    let base = s.sockets();
    let silent: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let held = s.sockets() - base;
    assert!(held <= 4, "{held} connections accepted past a cap of 4");
    let t = Instant::now();
    let (status, v) = predict(&s.addr, None, &input(1, 32));
    assert_eq!(status, 200, "{v}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    drop(silent);
}
