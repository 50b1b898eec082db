//! SIGTERM to examples/serve: the requests in flight answered, then the
//! exit, not held by idle or silent connections; after it no connection
//! is accepted, a second SIGTERM exits at once (status 143), and
//! `--shutdown-timeout-s` bounds a shutdown whose request does not end
//! (status 1). The worker is held by the failing model's slow row
//! (serve/failing.rs), whose forward its deadline ends.

use super::connections::{closed_within, keep_alive_get};
use super::failing::{answer_of, faulty, hold};
use super::*;

/// The worker held (a forward its 3 s deadline ends: 504), a request
/// queued behind it, an idle keep-alive connection and a silent one:
/// SIGTERM; the queued request is answered 200, the held one 504, and the
/// process exits 0 well before the idle and header timeouts (60 s, 30 s)
/// would close those connections.
#[test]
fn sigterm_answers_the_requests_in_flight_and_exits_despite_idle_connections() {
    let Some(m) = faulty() else { return };
    let mut s = m.start(&[
        "--workers",
        "1",
        "--idle-timeout-s",
        "60",
        "--header-timeout-s",
        "30",
    ]);
    let a = s.addr.clone();
    let held = hold(&a, 3000);
    let queued = {
        let (a, body) = (a.clone(), body_of(&m.xs[0..1]));
        std::thread::spawn(move || predict(&a, Some("60000"), &body))
    };
    wait_queued(&a, 1);
    let (mut idle, status) = keep_alive_get(&a, "/healthz");
    assert!(status.contains(" 200 "), "{status}");
    let mut silent = TcpStream::connect(&a).unwrap();
    let t = Instant::now();
    s.sigterm();
    let (status, v) = queued.join().unwrap();
    assert_eq!(status, 200, "the request queued at SIGTERM: {v}");
    assert_rows_close(&v, &m.ys[0..1], "the request queued at SIGTERM");
    let (status, v) = answer_of(held);
    assert_eq!(status, 504, "the held request: {v}");
    let exit = s.exit_within(Duration::from_secs(20));
    assert!(
        exit.is_some_and(|e| e.success()),
        "exit {exit:?} {:?} after SIGTERM",
        t.elapsed()
    );
    assert!(closed_within(&mut idle, Duration::from_secs(1)));
    assert!(closed_within(&mut silent, Duration::from_secs(1)));
}

/// After SIGTERM the listener is closed while the held request runs; a
/// second SIGTERM exits at once (status 128 + 15).
#[test]
fn after_sigterm_new_connections_are_refused_and_a_second_sigterm_exits_at_once() {
    let Some(m) = faulty() else { return };
    let mut s = m.start(&["--workers", "1"]);
    let a = s.addr.clone();
    let _held = hold(&a, 30_000);
    s.sigterm();
    // The listener goes first: connections are refused from then on.
    let t = Instant::now();
    while TcpStream::connect(&a).is_ok() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "connections still accepted 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        s.exit_within(Duration::ZERO).is_none(),
        "the server exited with a request in flight"
    );
    let t = Instant::now();
    s.sigterm();
    let exit = s.exit_within(Duration::from_secs(5));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(143),
        "after a second SIGTERM: {exit:?} in {:?}",
        t.elapsed()
    );
}

/// A request that outlasts `--shutdown-timeout-s`: the process exits
/// within the bound (status 1: it cut work off), not when the forward
/// ends (its deadline is 30 s away).
#[test]
fn shutdown_is_bounded_by_its_flag() {
    let Some(m) = faulty() else { return };
    let mut s = m.start(&["--workers", "1", "--shutdown-timeout-s", "1"]);
    let a = s.addr.clone();
    let _held = hold(&a, 30_000);
    let (_idle, _) = keep_alive_get(&a, "/healthz");
    let t = Instant::now();
    s.sigterm();
    // The bound (1 s), then up to 1 s to close what is busy, then the exit:
    // well under the 30 s the request would take, with room for a loaded
    // machine.
    let exit = s.exit_within(Duration::from_secs(15));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(1),
        "{exit:?} {:?} after SIGTERM",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(12), "{:?}", t.elapsed());
}
