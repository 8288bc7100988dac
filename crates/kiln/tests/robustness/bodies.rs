//! Request bodies in flight against the real binary: together with the
//! data of COPYs in progress they hold at most `--body-memory-limit`, a
//! request that cannot reserve its share in time is refused (503; a COPY
//! 53200) rather than read, and a body that does not
//! arrive within `--body-read-timeout` is cut off (408) and gives its
//! share back.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{self, Server};

const LIMIT: usize = 1 << 20;

/// Sends a write's head declaring a body of [`LIMIT`] bytes and only its
/// first 100; the socket answers once the server gives up on the rest.
fn slow_write(http: &str) -> TcpStream {
    let mut sock = TcpStream::connect(http).unwrap();
    let head = format!(
        "POST /v1/write/ev HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/x-ndjson\r\nContent-Length: {LIMIT}\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).unwrap();
    sock.write_all(&[b' '; 100]).unwrap();
    sock
}

/// The status and JSON body of the answer on `sock` (the connection may
/// stay open: read up to its `Content-Length`).
fn answer(mut sock: TcpStream) -> (u16, Value) {
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut text = Vec::new();
    let mut buf = [0; 4096];
    loop {
        if let Some(end) = text.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&text[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no length: {head}"));
            if text.len() >= end + 4 + length {
                let status = head[9..12].parse().unwrap();
                let body = &text[end + 4..end + 4 + length];
                return (status, serde_json::from_slice(body).unwrap_or(Value::Null));
            }
        }
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => panic!("no answer: {}", String::from_utf8_lossy(&text)),
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
}

/// `COPY ev FROM STDIN` of one row through `psql`.
fn copy_one_row(mut psql: Command) -> Output {
    let mut child = psql
        .args(["-v", "VERBOSITY=verbose", "-c", "COPY ev FROM STDIN"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"2026-01-01 00:00:00\t2\n").unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bodies_in_flight_share_one_budget_and_a_slow_one_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "--body-memory-limit",
            "1MiB",
            "--max-body-bytes",
            "1MiB",
            "--body-read-timeout",
            "10s",
        ],
    );
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, n BIGINT)");
    assert_eq!(s.metric("kiln_body_memory_limit_bytes"), LIMIT as f64);
    // A holds all of the budget while it sends slowly; B waits for it,
    // first in line; C, behind B, cannot have it within its wait. That
    // holds while C comes within A's timeout: 10s leaves a loaded machine
    // room to spawn the clients.
    let started = Instant::now();
    let a = slow_write(&s.http);
    wait_for("A's reservation", || {
        s.metric("kiln_body_memory_bytes") == LIMIT as f64
    });
    let b = slow_write(&s.http);
    wait_for("B to wait", || {
        s.metric("kiln_body_memory_waits_total") >= 1.0
    });
    let row = br#"{"ts": "2026-01-01T00:00:00Z", "n": 1}"#;
    let ndjson = [("Content-Type", "application/x-ndjson")];
    // A COPY's data waits behind B too, beside C.
    let copy = std::thread::spawn({
        let psql = s.psql_command();
        move || copy_one_row(psql)
    });
    let c_sent = started.elapsed();
    let (st, v) = s.write("ev", &ndjson, row);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("body_memory_full")),
        "{v} (C sent {c_sent:?} after A)"
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("of --body-memory-limit (1048576)"), "{msg}");
    let out = copy.join().unwrap();
    assert_eq!(common::sqlstate_of(&out), "53200");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("of --body-memory-limit (1048576)"), "{err}");

    // A is cut off after its timeout; B then reads (and is cut off too).
    let (st, v) = answer(a);
    assert!(started.elapsed() >= Duration::from_secs(10));
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (408, Some("body_timeout")),
        "{v}"
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.ends_with("(10s); 100 bytes came"), "{msg}");
    let (st, v) = answer(b);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (408, Some("body_timeout")),
        "{v}"
    );
    assert!(started.elapsed() >= Duration::from_secs(20));

    // All of it is given back; nothing of A, B or C was written.
    assert_eq!(s.metric("kiln_body_memory_bytes"), 0.0);
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[0]]));
    let (st, v) = s.write("ev", &ndjson, row);
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[1]]));
    let out = copy_one_row(s.psql_command());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[2]]));
    // A body with no length reserves the largest one, and still answers.
    let mut chunked = TcpStream::connect(&s.http).unwrap();
    let head = "POST /v1/write/ev HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";
    let body = format!(
        "{:x}\r\n{}\r\n0\r\n\r\n",
        row.len(),
        std::str::from_utf8(row).unwrap()
    );
    chunked
        .write_all(format!("{head}{body}").as_bytes())
        .unwrap();
    let (st, v) = answer(chunked);
    assert_eq!((st, v["rows"].as_i64()), (200, Some(1)), "{v}");
    assert_eq!(s.metric("kiln_body_memory_bytes"), 0.0);
}
