//! PostgreSQL connections open at once are bounded
//! (`--pg-max-connections`): one more is refused at startup with
//! PostgreSQL's FATAL 53300, and a slot given back is taken again.

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
    // HTTP is a door of its own.
    assert_eq!(s.rows("SELECT 1")[0][0], 1);
    // Once one leaves, its slot is taken again.
    drop(first);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = s.psql_output(&["-c", "SELECT 41 + 1"]);
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("too many clients"), "{err}");
        assert!(Instant::now() < until, "the slot was not given back");
        std::thread::sleep(Duration::from_millis(100));
    }
}
