//! End-to-end tests of `kiln serve` on the real binary: HTTP writes in every
//! body format, SQL over HTTP and over the PostgreSQL wire (psql), errors
//! that leave nothing half-written, and SIGTERM then restart on the same data.
//!
//! The HTTP client is a few lines over `TcpStream` (one request per
//! connection), so the tests need no HTTP client crate.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Server {
    child: Child,
    http: String,
    pg_port: u16,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args([
                "serve",
                "--http-addr",
                "127.0.0.1:0",
                "--pg-addr",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .env("KILN_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kiln serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("kiln listening ") {
                    let _ = tx.send(rest.to_string());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no 'kiln listening' line; log:\n{}", log.lock().unwrap()));
        let mut http = String::new();
        let mut pg_port = 0;
        for part in line.split_whitespace() {
            if let Some(a) = part.strip_prefix("http=") {
                http = a.to_string();
            } else if let Some(a) = part.strip_prefix("pg=") {
                pg_port = a.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
        Server {
            child,
            http,
            pg_port,
            log,
        }
    }

    /// One request; returns status and body.
    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        let mut s = TcpStream::connect(&self.http).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.http,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        // The server may answer (413) before reading everything: ignore write errors.
        let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(body));
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        let split = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("bad response: {}", String::from_utf8_lossy(&resp)));
        let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
        let status = head[9..12].parse().unwrap();
        let mut body = resp[split + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        (status, body)
    }

    fn sql(&self, q: &str) -> Value {
        let (status, body) = self.request(
            "POST",
            "/v1/sql",
            &[("Content-Type", "text/plain")],
            q.as_bytes(),
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 200, "{q}: {v}");
        v
    }

    fn rows(&self, q: &str) -> Value {
        self.sql(q)["rows"].clone()
    }

    fn write(&self, table: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
        let (status, body) = self.request("POST", &format!("/v1/write/{table}"), headers, body);
        let v = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
        (status, v)
    }

    fn psql(&self, q: &str) -> String {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.pg_port.to_string(),
                "-U",
                "postgres",
                "-At",
                "-c",
                q,
            ])
            .env("PGCONNECT_TIMEOUT", "10")
            .env("PGSSLMODE", "disable")
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {q}: {}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log.lock().unwrap()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// SIGTERM, then the exit status.
    fn terminate(mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "kiln did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 4 + n..];
    }
}

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
    let mut w = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    w.into_inner().unwrap()
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
        (200, serde_json::json!({"rows": 2}))
    );
    let csv = b"user_id,ts,url,amount\n3,2026-05-01T12:00:00,/c,3\n";
    assert_eq!(
        s.write("ev", &[("Content-Type", "text/csv")], csv),
        (200, serde_json::json!({"rows": 1}))
    );
    let gz = gzip(b"{\"ts\":\"2026-05-01T13:00:00\",\"user_id\":4,\"url\":\"/gz\"}\n{\"ts\":\"2026-05-01T14:00:00\",\"user_id\":5}\n");
    let (st, v) = s.write("ev", &[NDJSON, ("Content-Encoding", "gzip")], &gz);
    assert_eq!((st, v), (200, serde_json::json!({"rows": 2})));
    let (st, v) = s.write(
        "ev",
        &[("Content-Type", "application/vnd.apache.arrow.stream")],
        &arrow_ipc(),
    );
    assert_eq!((st, v), (200, serde_json::json!({"rows": 2})));

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
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
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

    // Still serving, and only the first write is there.
    assert_eq!(s.request("GET", "/health", &[], b"").0, 200);
    assert_eq!(s.rows("SELECT user_id FROM ev"), serde_json::json!([[1]]));
}

#[test]
fn psql_shares_the_database_with_http() {
    if Command::new("psql").arg("--version").output().is_err() {
        eprintln!("psql not installed; skipping");
        return;
    }
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

    // Errors carry Kiln's SQLSTATEs.
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.pg_port.to_string(),
            "-U",
            "postgres",
            "-At",
        ])
        .args(["-v", "VERBOSITY=verbose", "-c", "SELECT * FROM nope"])
        .output()
        .unwrap();
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
