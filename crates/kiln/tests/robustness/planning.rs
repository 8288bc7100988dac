//! Statements that take long to plan, against the real binary: a long one
//! is planned apart from the threads that serve connections, so other
//! sessions are answered meanwhile and its own timeout stops it, when it
//! is first planned and when a kept statement is planned again; lists
//! past PostgreSQL's limit are refused before planning (54011).

use std::time::{Duration, Instant};

use crate::common::{self, Server, pg_message, raw_pg_waiting};
use crate::post_sql;

/// The server's answer to `sql` over the extended protocol (Parse, Bind,
/// Execute, Sync, then Terminate), after `set` over the simple one if given.
fn extended(port: u16, set: Option<&str>, sql: &str) -> Vec<u8> {
    let mut frame = match set {
        Some(set) => pg_message(b'Q', format!("{set}\0").as_bytes()),
        None => Vec::new(),
    };
    frame.extend(pg_message(b'P', format!("\0{sql}\0\0\0").as_bytes()));
    frame.extend(pg_message(b'B', b"\0\0\0\0\0\0\0\0"));
    frame.extend(pg_message(b'E', b"\0\0\0\0\0"));
    frame.extend(pg_message(b'S', b""));
    frame.extend(pg_message(b'X', b""));
    raw_pg_waiting(port, &frame, Duration::from_secs(120))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `SELECT ... ORDER BY` with `terms` terms: DataFusion plans it in time
/// that grows with the square of `terms` (seconds for 1,600 in a debug
/// build).
fn long_sort(terms: usize) -> String {
    let terms: Vec<String> = (0..terms).map(|i| format!("a || '{i}'")).collect();
    format!("SELECT ts FROM lv ORDER BY {}", terms.join(", "))
}

#[test]
fn a_long_statement_is_planned_apart_and_stopped_by_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql("CREATE TABLE lv (ts TIMESTAMP NOT NULL, a VARCHAR)");
    let sort = long_sort(1_600);

    // How long planning it takes here, to size the checks below.
    let started = Instant::now();
    let (status, body) = post_sql(&s, &format!("EXPLAIN {sort}"));
    let planning = started.elapsed();
    assert_eq!(status, 200, "{body}");

    // Its own timeout stops it while it plans, on both doors.
    let timeout = Duration::from_millis(300);
    if planning > 4 * timeout {
        let started = Instant::now();
        let (status, body) = s.request(
            "POST",
            "/v1/sql?timeout=300ms",
            &[("Content-Type", "application/sql")],
            sort.as_bytes(),
        );
        let (status, body) = (status, String::from_utf8_lossy(&body));
        assert_eq!(status, 504, "{body}");
        assert!(started.elapsed() < planning / 2, "{:?}", started.elapsed());
        let started = Instant::now();
        let out = s
            .psql_command()
            .env("PGOPTIONS", "-c statement_timeout=300")
            .args(["-v", "VERBOSITY=verbose", "-c", &sort])
            .output()
            .unwrap();
        assert_eq!(common::sqlstate_of(&out), "57014");
        assert!(started.elapsed() < planning / 2, "{:?}", started.elapsed());
        // At Parse too, where no query is registered yet.
        let started = Instant::now();
        let answer = extended(s.pg_port, Some("SET statement_timeout = 300"), &sort);
        assert!(
            contains(&answer, b"C57014\0"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        assert!(started.elapsed() < planning / 2, "{:?}", started.elapsed());
    }

    // Two of them planning at once hold no thread that serves
    // connections: a light query is answered meanwhile, over the simple
    // protocol and over the extended one (planned at Parse).
    let planners: Vec<_> = (0..2)
        .map(|i| {
            let (http, sql) = (s.http.clone(), format!("{sort} LIMIT {i}"));
            std::thread::spawn(move || {
                common::request(
                    &http,
                    "POST",
                    "/v1/sql",
                    &[("Content-Type", "application/sql")],
                    sql.as_bytes(),
                )
                .0
            })
        })
        .collect();
    let parsed = {
        let (port, sql) = (s.pg_port, sort.clone());
        std::thread::spawn(move || contains(&extended(port, None, &sql), b"SELECT 0\0"))
    };
    std::thread::sleep(planning / 10);
    let started = Instant::now();
    assert_eq!(s.psql("SELECT 1").trim(), "1");
    let (status, _) = post_sql(&s, "SELECT 2");
    assert_eq!(status, 200);
    let light = started.elapsed();
    if planning > Duration::from_secs(1) {
        assert!(
            light < planning / 3,
            "light: {light:?}, planning: {planning:?}"
        );
    }
    for p in planners {
        assert_eq!(p.join().unwrap(), 200);
    }
    assert!(parsed.join().unwrap());
}

/// Reads `c`'s messages up to and including the next ReadyForQuery.
fn until_ready(c: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 5];
        c.read_exact(&mut head).unwrap();
        let len = i32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        c.read_exact(&mut body).unwrap();
        out.extend_from_slice(&head);
        out.extend_from_slice(&body);
        if head[0] == b'Z' {
            return out;
        }
    }
}

#[test]
fn a_long_prepared_statement_planned_again_at_execute_is_stopped_by_its_timeout() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    // Every Execute plans the statement with its values.
    let s = Server::start(dir.path(), &["--plan-cache-mode", "force-custom"]);
    s.sql("CREATE TABLE lv (ts TIMESTAMP NOT NULL, a VARCHAR)");
    let sort = long_sort(1_600);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.pg_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let params = b"user\0kiln\0database\0kiln\0\0";
    let mut startup = ((8 + params.len()) as i32).to_be_bytes().to_vec();
    startup.extend_from_slice(&196_608_i32.to_be_bytes());
    startup.extend_from_slice(params);
    c.write_all(&startup).unwrap();
    until_ready(&mut c);
    let mut parse = pg_message(b'P', format!("kept\0{sort}\0\0\0").as_bytes());
    parse.extend(pg_message(b'S', b""));
    c.write_all(&parse).unwrap();
    until_ready(&mut c);
    let mut run = pg_message(b'B', b"\0kept\0\0\0\0\0\0\0");
    run.extend(pg_message(b'E', b"\0\0\0\0\0"));
    run.extend(pg_message(b'S', b""));

    // How long an Execute plans it here, to size the check below.
    let started = Instant::now();
    c.write_all(&run).unwrap();
    let answer = until_ready(&mut c);
    let planning = started.elapsed();
    assert!(
        contains(&answer, b"SELECT 0\0"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    // Under a timeout the Execute stops at it, not when planning ends.
    c.write_all(&pg_message(b'Q', b"SET statement_timeout = 300\0"))
        .unwrap();
    until_ready(&mut c);
    if planning > Duration::from_millis(1_200) {
        let started = Instant::now();
        c.write_all(&run).unwrap();
        let answer = until_ready(&mut c);
        assert!(
            contains(&answer, b"C57014\0"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        assert!(
            started.elapsed() < planning / 2,
            "{:?} against {planning:?}",
            started.elapsed()
        );
    }
}

#[test]
fn lists_past_1664_entries_are_refused_with_54011_on_every_door() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let wide = |n: usize| {
        let items: Vec<String> = (0..n).map(|i| format!("{i} AS c{i}")).collect();
        format!("SELECT {}", items.join(", "))
    };
    let (status, body) = post_sql(&s, &wide(2_000));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "too_many_columns", "{body}");
    assert_eq!(
        body["error"]["message"],
        "target lists can have at most 1664 entries: this select list has 2000"
    );
    assert_eq!(common::psql_sqlstate(&s, &wide(2_000)), "54011");
    // Refused at Parse.
    let answer = extended(s.pg_port, None, &wide(1_665));
    assert!(
        contains(&answer, b"C54011\0"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // At the limit it is answered.
    let (status, body) = post_sql(&s, &wide(1_664));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["columns"].as_array().unwrap().len(), 1_664);
    // A table wider than PostgreSQL's 1,600 columns is refused, naming it.
    let columns: Vec<String> = (0..1_600).map(|i| format!("c{i} BIGINT")).collect();
    let ddl = format!(
        "CREATE TABLE w (ts TIMESTAMP NOT NULL, {})",
        columns.join(", ")
    );
    let (status, body) = post_sql(&s, &ddl);
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["message"],
        "invalid table definition: tables can have at most 1600 columns: table 'w' has 1601"
    );
}
