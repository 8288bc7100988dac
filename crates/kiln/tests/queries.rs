//! End-to-end tests of the query path of `kiln serve`: HTTP parameters and
//! result formats (Arrow IPC, streamed CSV), admission control (503 when
//! the queue is full), query timeouts (504), `system.queries`, and the
//! PostgreSQL wire with psycopg: prepared statements and CancelRequest.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::{Value, json};

/// Runs long enough to be cancelled or timed out (minutes, not seconds).
const LONG: &str = "SELECT count(*) FROM generate_series(1, 1000000000000)";

fn post_json(s: &Server, path: &str, body: &Value) -> (u16, Vec<u8>) {
    s.request(
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

#[test]
fn http_params_and_result_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    s.sql("CREATE TABLE p (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, name VARCHAR)");
    s.sql(
        "INSERT INTO p VALUES ('2026-05-01 00:00:00', 1, 'a'), ('2026-05-02 00:00:00', 2, 'b'), \
         ('2026-05-03 00:00:00', 3, NULL)",
    );

    // Positional parameters, cast to the types the query needs.
    let (st, body) = post_json(
        &s,
        "/v1/sql",
        &json!({"sql": "SELECT id, name FROM p WHERE id >= $1 AND ts < $2 ORDER BY id",
                "params": [2, "2026-05-03 00:00:00"]}),
    );
    let v = json_of(&body);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["rows"], json!([[2, "b"]]));
    assert_eq!(v["row_count"], json!(1));
    assert_eq!(v["columns"][0]["name"], json!("id"));

    // A missing parameter and a value of the wrong type are named.
    let (st, body) = post_json(
        &s,
        "/v1/sql",
        &json!({"sql": "SELECT id FROM p WHERE id = $1 AND ts < $2", "params": [1]}),
    );
    assert_eq!(st, 400);
    assert!(
        json_of(&body)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("$2")
    );
    let (st, body) = post_json(
        &s,
        "/v1/sql",
        &json!({"sql": "SELECT id FROM p WHERE ts < $1", "params": ["not a time"]}),
    );
    assert_eq!(st, 400, "{}", String::from_utf8_lossy(&body));
    assert!(
        json_of(&body)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("$1")
    );
    let (st, _) = post_json(&s, "/v1/sql", &json!({"sql": "SELECT $1", "params": [[1]]}));
    assert_eq!(st, 400);

    // Arrow IPC stream: typed columns, nulls kept.
    let (st, body) = s.request(
        "POST",
        "/v1/sql?format=arrow",
        &[],
        b"SELECT id, name FROM p ORDER BY id",
    );
    assert_eq!(st, 200);
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).unwrap();
    let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&[batch])
        .unwrap()
        .to_string();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("| "))
            .collect::<Vec<_>>(),
        [
            "| id | name |",
            "| 1  | a    |",
            "| 2  | b    |",
            "| 3  |      |"
        ]
    );

    // A large result streams (chunked) and arrives whole.
    let (st, body) = s.request(
        "POST",
        "/v1/sql?format=csv",
        &[],
        b"SELECT value FROM generate_series(1, 300000)",
    );
    assert_eq!(st, 200);
    let text = String::from_utf8(body).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 300_001);
    assert_eq!(
        (lines[0], lines[1], lines[300_000]),
        ("value", "1", "300000")
    );

    let (st, _) = s.request("POST", "/v1/sql?format=xml", &[], b"SELECT 1");
    assert_eq!(st, 400);
}

#[test]
fn timeout_overload_and_system_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(
        &tmp.path().join("data"),
        &[
            "--query-timeout",
            "3s",
            "--max-concurrent-queries",
            "1",
            "--max-queued-queries",
            "0",
            "--query-slot-time",
            "0s",
        ],
    );
    let http = s.http.clone();
    let started = Instant::now();
    let long =
        std::thread::spawn(move || common::request(&http, "POST", "/v1/sql", &[], LONG.as_bytes()));
    std::thread::sleep(Duration::from_millis(300));

    // While the long query holds the only slot, another query is refused at
    // once (one that reads a table: `SELECT 1` alone is light and has its
    // own lane).
    let probe = "SELECT count(*) FROM generate_series(1, 10)";
    let mut refused = None;
    while refused.is_none() && started.elapsed() < Duration::from_secs(3) {
        let (st, body) = s.request("POST", "/v1/sql", &[], probe.as_bytes());
        if st == 503 {
            refused = Some(json_of(&body));
        }
    }
    let refused = refused.expect("a query was refused while the slot was taken");
    assert_eq!(refused["error"]["code"], json!("overloaded"), "{refused}");

    // The long query hits --query-timeout: 504.
    let (st, body) = long.join().unwrap();
    let v = json_of(&body);
    assert_eq!((st, &v["error"]["code"]), (504, &json!("timeout")), "{v}");
    assert!(started.elapsed() < Duration::from_secs(30));

    // system.queries records both, and itself as running.
    let rows = s.rows(
        "SELECT query, status, protocol FROM system.queries \
         WHERE query IN ('SELECT count(*) FROM generate_series(1, 10)', 'SELECT count(*) FROM generate_series(1, 1000000000000)') \
         AND status <> 'ok' ORDER BY query",
    );
    let rows = rows.as_array().unwrap();
    assert!(rows.contains(&json!([LONG, "timeout", "http"])), "{rows:?}");
    assert!(
        rows.contains(&json!([probe, "overloaded", "http"])),
        "{rows:?}"
    );
    let me = s.rows("SELECT status FROM system.queries WHERE query LIKE '%me_myself%'");
    assert_eq!(me, json!([["running"]]));

    let (_, body) = s.request("GET", "/metrics", &[], b"");
    let text = String::from_utf8(body).unwrap();
    for outcome in ["timeout", "overloaded"] {
        let line = format!("kiln_queries_total{{outcome=\"{outcome}\",protocol=\"http\"}}");
        let n: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("{line} missing"))
            .trim()
            .parse()
            .unwrap();
        assert!(n >= 1, "{line} {n}");
    }
    assert!(text.contains("kiln_open_connections{protocol=\"http\"}"));
}

#[test]
fn psycopg_prepared_statements_and_cancel() {
    psycopg_check(&[]);
}

/// The same with every prepared statement that can be kept run by a
/// generic plan (kept physical plan, parameters bound per execution).
#[test]
fn psycopg_prepared_statements_with_generic_plans() {
    psycopg_check(&["--plan-cache-mode", "force-generic"]);
}

fn psycopg_check(args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), args);
    common::client_check(&s, "psycopg_check.py");
}
