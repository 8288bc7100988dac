//! End-to-end tests of `kiln serve` on the real binary: HTTP writes in every
//! body format, SQL over HTTP and over the PostgreSQL wire (psql), errors
//! that leave nothing half-written, and SIGTERM then restart on the same data.

mod common;

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::Server;
use serde_json::Value;

const DDL: &str =
    "CREATE TABLE ev (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, url VARCHAR, amount DOUBLE)";
const NDJSON: (&str, &str) = ("Content-Type", "application/x-ndjson");

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

fn arrow_ipc() -> Vec<u8> {
    use arrow::array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("user_id", DataType::Int64, false),
        Field::new("url", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
    ]));
    let day = 1_777_680_000_000_000i64; // 2026-05-02T00:00:00Z in µs
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampMicrosecondArray::from(vec![day, day + 1])),
            Arc::new(Int64Array::from(vec![6, 7])),
            Arc::new(StringArray::from(vec![Some("/arrow"), None])),
            Arc::new(Float64Array::from(vec![Some(6.5), Some(7.0)])),
        ],
    )
    .unwrap();
    common::ipc(&batch)
}

#[test]
fn http_writes_every_format_and_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    assert_eq!(s.request("GET", "/health", &[], b""), (200, b"ok".to_vec()));
    assert_eq!(s.request("GET", "/ready", &[], b"").0, 200);
    let created = s.sql(DDL);
    assert_eq!(created["command"], "CREATE TABLE");

    let nd = b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":1,\"url\":\"/a\",\"amount\":1.5}\n\n{\"ts\":\"2026-05-01T11:00:00\",\"user_id\":2}\n";
    assert_eq!(
        s.write("ev", &[NDJSON], nd),
        (200, serde_json::json!({"rows": 2, "ack": "durable"}))
    );
    let csv = b"user_id,ts,url,amount\n3,2026-05-01T12:00:00,/c,3\n";
    assert_eq!(
        s.write("ev", &[("Content-Type", "text/csv")], csv),
        (200, serde_json::json!({"rows": 1, "ack": "durable"}))
    );
    let gz = gzip(b"{\"ts\":\"2026-05-01T13:00:00\",\"user_id\":4,\"url\":\"/gz\"}\n{\"ts\":\"2026-05-01T14:00:00\",\"user_id\":5}\n");
    let (st, v) = s.write("ev", &[NDJSON, ("Content-Encoding", "gzip")], &gz);
    assert_eq!(
        (st, v),
        (200, serde_json::json!({"rows": 2, "ack": "durable"}))
    );
    let (st, v) = s.write(
        "ev",
        &[("Content-Type", "application/vnd.apache.arrow.stream")],
        &arrow_ipc(),
    );
    assert_eq!(
        (st, v),
        (200, serde_json::json!({"rows": 2, "ack": "durable"}))
    );

    let res = s.sql("SELECT user_id, url, amount FROM ev ORDER BY user_id");
    assert_eq!(
        res["columns"][0],
        serde_json::json!({"name": "user_id", "type": "Int64"})
    );
    assert_eq!(
        res["rows"],
        serde_json::json!([
            [1, "/a", 1.5],
            [2, null, null],
            [3, "/c", 3.0],
            [4, "/gz", null],
            [5, null, null],
            [6, "/arrow", 6.5],
            [7, null, 7.0]
        ])
    );
    assert!(res["elapsed_ms"].is_number());

    // JSON request body, CSV and NDJSON results; the last statement wins.
    let (st, body) = s.request(
        "POST",
        "/v1/sql?format=csv",
        &[("Content-Type", "application/json")],
        br#"{"sql": "SELECT 1; SELECT user_id, url FROM ev WHERE user_id <= 2 ORDER BY user_id"}"#,
    );
    assert_eq!(
        (st, String::from_utf8(body).unwrap().as_str()),
        (200, "user_id,url\n1,/a\n2,\n")
    );
    let (st, body) = s.request(
        "POST",
        "/v1/sql?format=ndjson",
        &[],
        b"SELECT count(*) AS n FROM ev",
    );
    assert_eq!(
        (st, String::from_utf8(body).unwrap().as_str()),
        (200, "{\"n\":7}\n")
    );

    let (st, body) = s.request("GET", "/metrics", &[], b"");
    let text = String::from_utf8(body).unwrap();
    assert_eq!(st, 200);
    for needle in [
        "kiln_queries_total{outcome=\"ok\",protocol=\"http\"}",
        "kiln_query_duration_seconds_bucket",
        "kiln_rows_written_total 7",
        "kiln_write_duration_seconds_bucket",
        "kiln_wal_fsyncs_total",
        "kiln_memstore_bytes{table=\"ev\"}",
        "kiln_segments{table=\"ev\"}",
        "kiln_flushes_total",
        "kiln_segment_bytes{table=\"ev\"}",
        "kiln_wal_fsync_duration_seconds_bucket{le=\"+Inf\"}",
        "kiln_flush_duration_seconds_count",
        // A table this small is never behind its flushes.
        "kiln_writes_paced_total 0\n",
        "kiln_write_pace_seconds_total 0\n",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    // Durable writes were fsynced, and each fsync was timed.
    let fsyncs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("kiln_wal_fsync_duration_seconds_count "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(fsyncs > 0, "{text}");
}

#[test]
fn http_errors_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &["--max-body-bytes", "64KiB"]);
    s.sql(DDL);
    let good = b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":1}\n";
    assert_eq!(s.write("ev", &[NDJSON], good).0, 200);

    // A bad value on line 3: nothing of lines 1-2 is written.
    let bad = b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":2}\n{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":3}\n{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":\"x\"}\n";
    let (st, v) = s.write("ev", &[NDJSON], bad);
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_data");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("line 3"), "{msg}");

    // NOT NULL violated on line 2 (found by the write, reported by line).
    let (st, v) = s.write(
        "ev",
        &[NDJSON],
        b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":4}\n{\"ts\":\"2026-05-01T10:00:00\"}\n",
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "not_null_violation");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 2"),
        "{v}"
    );

    let (st, v) = s.write("nope", &[NDJSON], good);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("table_not_found"))
    );
    let (st, v) = s.write("ev", &[("Content-Type", "text/html")], good);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (415, Some("unsupported_media_type"))
    );

    let (st, body) = s.request("POST", "/v1/sql", &[], b"SELEC nonsense");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("syntax_error")),
        "{v}"
    );
    let (st, body) = s.request("POST", "/v1/sql", &[], b"SELECT * FROM nope");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("table_not_found")),
        "{v}"
    );

    // Over --max-body-bytes: plain, and compressed small but large once inflated.
    let mut big = Vec::new();
    while big.len() <= 70 * 1024 {
        big.extend_from_slice(b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":9}\n");
    }
    let (st, _) = s.write("ev", &[NDJSON], &big);
    assert_eq!(st, 413);
    let (st, v) = s.write("ev", &[NDJSON, ("Content-Encoding", "gzip")], &gzip(&big));
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );

    // A dictionary is decoded to the table's type.
    let arrow = [("Content-Type", "application/vnd.apache.arrow.stream")];
    let (st, v) = s.write("ev", &arrow, &common::dictionary_ipc("/d".into(), 3));
    assert_eq!(st, 200, "{v}");

    // Still serving, and only the first write and the last are there.
    assert_eq!(s.request("GET", "/health", &[], b"").0, 200);
    assert_eq!(
        s.rows("SELECT user_id, url FROM ev ORDER BY user_id"),
        serde_json::json!([[1, null], [2, "/d"], [2, "/d"], [2, "/d"]])
    );
}

#[test]
fn psql_shares_the_database_with_http() {
    assert!(
        Command::new("psql").arg("--version").output().is_ok(),
        "psql is required (scripts/test.sh installs postgresql-client)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    s.sql(DDL);
    let nd = b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":1,\"url\":\"/a\"}\n{\"ts\":\"2026-05-01T11:00:00\",\"user_id\":2,\"url\":\"/b\"}\n";
    assert_eq!(s.write("ev", &[NDJSON], nd).0, 200);
    assert_eq!(
        s.psql("SELECT user_id, url FROM ev ORDER BY user_id"),
        "1|/a\n2|/b\n"
    );

    // Kiln's DDL and INSERT over the wire, read back over HTTP.
    assert_eq!(
        s.psql("CREATE TABLE t2 (ts TIMESTAMP NOT NULL, v BIGINT)"),
        "CREATE TABLE\n"
    );
    s.psql("INSERT INTO t2 VALUES ('2026-05-01T00:00:00', 42)");
    assert_eq!(s.rows("SELECT v FROM t2"), serde_json::json!([[42]]));
    // A Kiln table, not a DataFusion in-memory one: it is in the data directory's catalog.
    let catalog = std::fs::read_to_string(tmp.path().join("data/catalog.json")).unwrap();
    assert!(catalog.contains("t2"), "{catalog}");
    assert_eq!(s.psql("DROP TABLE t2"), "DROP TABLE\n");

    // psql's own catalog queries: \dt lists tables, \d describes one.
    let dt = s.psql("\\dt");
    assert!(dt.lines().any(|l| l.contains("|ev|")), "{dt}");
    assert!(!dt.contains("t2"), "{dt}");
    let d = s.psql("\\d ev");
    for col in ["ts", "user_id", "url", "amount"] {
        assert!(
            d.lines().any(|l| l.starts_with(&format!("{col}|"))),
            "{col}: {d}"
        );
    }

    // Garbage on the PostgreSQL port: that connection is dropped, the server serves on.
    for junk in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0xff; 64][..],
        &[0, 0, 0, 8, 1, 2, 3, 4][..],
    ] {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", s.pg_port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(junk);
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut c, &mut buf);
    }
    assert_eq!(s.psql("SELECT count(*) FROM ev"), "2\n");

    // Errors carry Kiln's SQLSTATEs.
    let out = s.psql_output(&["-v", "VERBOSITY=verbose", "-c", "SELECT * FROM nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("42P01"), "{err}");

    let (_, body) = s.request("GET", "/metrics", &[], b"");
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("kiln_queries_total{outcome=\"ok\",protocol=\"pg\"}"),
        "{text}"
    );
}

#[test]
fn sigterm_exits_cleanly_and_restart_keeps_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = Server::start(&dir, &["--flush-on-close", "false"]);
    s.sql(DDL);
    let nd = b"{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":1}\n{\"ts\":\"2026-05-02T10:00:00\",\"user_id\":2}\n";
    assert_eq!(s.write("ev", &[NDJSON], nd).0, 200);
    assert_eq!(
        s.write(
            "ev",
            &[("Content-Type", "text/csv")],
            b"ts,user_id\n2026-05-03T00:00:00,3\n"
        )
        .0,
        200
    );
    let status = s.terminate();
    assert!(status.success(), "exit status {status}");

    let s = Server::start(&dir, &[]);
    assert_eq!(
        s.rows("SELECT user_id FROM ev ORDER BY user_id"),
        serde_json::json!([[1], [2], [3]])
    );
    let status = s.terminate();
    assert!(status.success(), "exit status {status}");
}

/// Polls `q` (one integer) until it returns at least `want`, for up to 20 s.
fn wait_for(s: &Server, q: &str, want: i64) -> i64 {
    let mut got = 0;
    for _ in 0..400 {
        got = s.rows(q)[0][0].as_i64().unwrap_or(0);
        if got >= want {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    got
}

/// A flushed segment read by a query is decoded into the segment cache in
/// the background; later queries read it from there, with the same answer,
/// and /metrics counts the hits.
#[test]
fn flushed_segments_are_served_from_the_segment_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &["--flush-bytes", "1"]);
    s.sql(DDL);
    let body: String = (1..=5000)
        .map(|i| format!("{{\"ts\":\"2026-05-01T10:00:00\",\"user_id\":{i},\"amount\":{i}.5}}\n"))
        .collect();
    assert_eq!(s.write("ev", &[NDJSON], body.as_bytes()).0, 200);
    let flushed = wait_for(
        &s,
        "SELECT coalesce(sum(rows), 0) FROM system.segments",
        5000,
    );
    assert_eq!(flushed, 5000, "rows flushed to segments");
    let q = "SELECT count(*), sum(amount) FROM ev WHERE user_id > 1000";
    let want = serde_json::json!([[4000, 4000.0 * 3000.5 + 2000.0]]);
    assert_eq!(s.rows(q), want);
    let cached = wait_for(&s, "SELECT sum(cached_bytes) FROM system.segments", 1);
    assert!(cached > 0, "the segment was decoded into the cache");
    assert_eq!(s.rows(q), want);
    let value = |name: &str| s.metric(name);
    assert!(value("kiln_segment_cache_hits_total") >= 1.0);
    assert!(value("kiln_segment_cache_misses_total") >= 1.0);
    assert_eq!(value("kiln_segment_cache_bytes"), cached as f64);
    assert_eq!(value("kiln_segment_cache_segments"), 1.0);
}
