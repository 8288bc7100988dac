//! Connections open at once are bounded on both doors. PostgreSQL
//! (`--pg-max-connections`): one more is refused at startup with
//! PostgreSQL's FATAL 53300, and a slot given back is taken again; sockets
//! that never start are bounded at twice the limit, one more refused with
//! the same FATAL 53300 as it is accepted. HTTP
//! (`--http-max-connections`): one more waits unaccepted until an open one
//! closes, and an idle one is closed after `--http-idle-timeout`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::Server;

/// The messages the server sends after a startup message on a new
/// connection, up to ReadyForQuery or an ErrorResponse: (type, body).
fn start(port: u16) -> (TcpStream, Vec<(u8, Vec<u8>)>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let params = b"user\0kiln\0database\0kiln\0\0";
    let mut startup = ((8 + params.len()) as i32).to_be_bytes().to_vec();
    startup.extend_from_slice(&196_608_i32.to_be_bytes());
    startup.extend_from_slice(params);
    s.write_all(&startup).unwrap();
    let mut messages = Vec::new();
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).unwrap();
        let len = i32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
        let mut body = vec![0; len - 4];
        s.read_exact(&mut body).unwrap();
        messages.push((head[0], body));
        if matches!(head[0], b'Z' | b'E') {
            return (s, messages);
        }
    }
}

/// The SQLSTATE and message of an ErrorResponse body.
fn error_fields(body: &[u8]) -> (String, String) {
    let field = |code: u8| {
        body.split(|&b| b == 0)
            .find(|f| f.first() == Some(&code))
            .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
            .unwrap_or_default()
    };
    (field(b'C'), field(b'M'))
}

/// Waits until psql connects and runs a statement again, refused only
/// with "too many clients" meanwhile; `why` if it does not within 20 s.
fn connects_again(s: &Server, why: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = s.psql_output(&["-c", "SELECT 41 + 1"]);
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("too many clients"), "{err}");
        assert!(Instant::now() < until, "{why}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn connections_past_the_limit_are_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--pg-max-connections", "2"]);
    let (first, m) = start(s.pg_port);
    assert_eq!(m.last().unwrap().0, b'Z');
    let (_second, m) = start(s.pg_port);
    assert_eq!(m.last().unwrap().0, b'Z');
    let (_, m) = start(s.pg_port);
    let (kind, body) = m.last().unwrap();
    assert_eq!(*kind, b'E');
    let (code, message) = error_fields(body);
    assert_eq!(
        (code.as_str(), message.as_str()),
        (
            "53300",
            "sorry, too many clients already (--pg-max-connections is 2)"
        )
    );
    assert!(String::from_utf8_lossy(body).contains("FATAL"));
    assert_eq!(
        s.metric("kiln_pg_connections_refused_total{at=\"startup\"}"),
        1.0
    );
    // HTTP is a door of its own.
    assert_eq!(s.rows("SELECT 1")[0][0], 1);
    // Once one leaves, its slot is taken again.
    drop(first);
    connects_again(&s, "the slot was not given back");
    // The limit is PostgreSQL's `max_connections`, fixed while it runs.
    assert_eq!(s.psql("SHOW max_connections").trim(), "2");
    let shown = "SELECT current_setting('max_connections'), setting \
                 FROM pg_settings WHERE name = 'max_connections'";
    assert_eq!(s.psql(shown).trim(), "2|2");
    let out = s.psql_output(&["-c", "SET max_connections = 5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("parameter \"max_connections\" cannot be changed without restarting"),
        "{err}"
    );
}

/// The next message on `s`, read within 10 s: (type, body).
fn next_message(s: &mut TcpStream) -> (u8, Vec<u8>) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 5];
    s.read_exact(&mut head)
        .expect("no message from the server within 10 s");
    let len = i32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0; len - 4];
    s.read_exact(&mut body).unwrap();
    (head[0], body)
}

#[test]
fn sockets_that_never_start_are_bounded_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--pg-max-connections", "2"]);
    let open = "kiln_open_connections{protocol=\"pg\"}";
    // Twice the limit may be open while they start: these send nothing.
    let silent: Vec<_> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", s.pg_port)).unwrap())
        .collect();
    let until = Instant::now() + Duration::from_secs(20);
    while s.metric(open) < 4.0 {
        assert!(
            Instant::now() < until,
            "the silent sockets were not accepted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One more is refused as it is accepted, before it sends a byte.
    let mut extra = TcpStream::connect(("127.0.0.1", s.pg_port)).unwrap();
    let (kind, body) = next_message(&mut extra);
    assert_eq!(kind, b'E');
    assert_eq!(
        error_fields(&body),
        (
            "53300".to_string(),
            "sorry, too many clients already (--pg-max-connections is 2)".to_string()
        )
    );
    assert_eq!(
        s.metric("kiln_pg_connections_refused_total{at=\"accept\"}"),
        1.0
    );
    assert_eq!(s.metric(open), 4.0, "the refused socket was served");
    // Their sockets given back, a client connects again.
    drop(silent);
    connects_again(&s, "the sockets were not given back");
}

/// Sends `GET /health` on `s`, keeping the connection open.
fn ask_health(s: &mut TcpStream) {
    s.write_all(b"GET /health HTTP/1.1\r\nHost: kiln\r\n\r\n")
        .unwrap();
}

/// Reads one `/health` answer (its body is `ok`, so it ends with it).
fn health_answer(s: &mut TcpStream) -> std::io::Result<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\nok") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

#[test]
fn http_connections_past_the_limit_wait_until_an_idle_one_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &["--http-max-connections", "2", "--http-idle-timeout", "3s"],
    );
    let connect = || {
        let c = TcpStream::connect(&s.http).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c
    };
    // Two keep-alive connections, answered, then idle.
    let (mut a, mut b) = (connect(), connect());
    for c in [&mut a, &mut b] {
        ask_health(c);
        assert!(health_answer(c).unwrap().starts_with("HTTP/1.1 200"));
    }
    let idle_since = Instant::now();
    // A third is not accepted while both are open.
    let mut third = connect();
    ask_health(&mut third);
    third
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let early = health_answer(&mut third);
    assert!(
        early.as_ref().is_err_and(|e| matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "a third connection was answered past the limit: {early:?}"
    );
    // The idle ones are closed after the idle timeout, and the third is
    // answered then.
    third
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert!(
        health_answer(&mut third)
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    let waited = idle_since.elapsed();
    assert!(
        waited >= Duration::from_millis(2500),
        "answered after {waited:?}"
    );
    let mut rest = Vec::new();
    assert_eq!(
        a.read_to_end(&mut rest).unwrap(),
        0,
        "the idle connection is closed"
    );
    // PostgreSQL is a door of its own.
    assert_eq!(s.psql("SELECT 41 + 1").trim(), "42");
}
