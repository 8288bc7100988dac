//! Security of the SQL doors (issue 26, items 3 to 5): SQL uses no server
//! file unless `--sql-file-access` allows it (and never the data
//! directory), `/v1/sql` cannot be reached by a cross-site request, and
//! one session's `SET` is not another's.

mod common;

use std::path::Path;

use common::Server;
use serde_json::Value;

/// HTTP status and JSON body of `sql` sent as a request that passes the
/// cross-site check.
fn http(s: &Server, sql: &str) -> (u16, Value) {
    let (status, body) = s.request(
        "POST",
        "/v1/sql",
        &[("Content-Type", "application/sql"), ("X-Kiln-Request", "1")],
        sql.as_bytes(),
    );
    let v = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    (status, v)
}

fn copy_to(path: &Path) -> String {
    format!("COPY (SELECT 1 AS a) TO '{}'", path.display())
}

#[test]
fn sql_uses_no_server_file_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let target = tmp.path().join("x.csv");
    let copy = copy_to(&target);

    let (status, v) = http(&s, &copy);
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "permission_denied", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--sql-file-access"),
        "{v}"
    );
    // EXPLAIN ANALYZE would run it.
    assert_eq!(http(&s, &format!("EXPLAIN ANALYZE {copy}")).0, 403);
    let ext = tmp.path().join("ext.csv");
    std::fs::write(&ext, "a\n1\n").unwrap();
    let create = format!(
        "CREATE EXTERNAL TABLE e (a INT) STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
        ext.display()
    );
    assert_eq!(http(&s, &create).0, 403);
    let from = format!("COPY t FROM '{}'", ext.display());
    assert_eq!(http(&s, &from).0, 403);
    // The data directory's catalog, the attack of the issue.
    let catalog = tmp.path().join("data/catalog.json");
    assert_eq!(http(&s, &copy_to(&catalog)).0, 403);

    // psql (simple protocol) and psycopg (extended protocol).
    assert_eq!(common::psql_sqlstate(&s, &copy), "42501");
    assert_eq!(common::psql_sqlstate(&s, &from), "42501");
    // PostgreSQL's grammar has no CREATE EXTERNAL TABLE: refused as syntax.
    assert_ne!(common::psql_sqlstate(&s, &create), "");
    let ext_answers = common::pg_extended(&s, &[&copy, &from, &create]);
    assert_eq!(ext_answers[0]["sqlstate"], "42501", "{}", ext_answers[0]);
    assert_eq!(ext_answers[1]["sqlstate"], "42501", "{}", ext_answers[1]);
    assert!(ext_answers[2]["sqlstate"].is_string(), "{}", ext_answers[2]);
    assert_eq!(http(&s, "SELECT * FROM e").0, 404);
    assert!(!target.exists(), "COPY wrote {}", target.display());
    // The server still starts: nothing overwrote its catalog.
    assert!(s.terminate().success());
    let s = Server::start(&tmp.path().join("data"), &[]);
    assert_eq!(s.rows("SELECT 1")[0][0], 1);
}

#[test]
fn file_access_is_confined_to_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    // The data directory inside the allowed one: still refused.
    let data = files.join("data");
    let s = Server::start(&data, &["--sql-file-access", files.to_str().unwrap()]);

    let inside = files.join("out.csv");
    let (status, v) = http(&s, &copy_to(&inside));
    assert_eq!(status, 200, "{v}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap().trim(), "a\n1");
    // Over psql too.
    let inside2 = files.join("out2.csv");
    assert_eq!(common::psql_sqlstate(&s, &copy_to(&inside2)), "");
    assert!(inside2.exists());

    let outside = tmp.path().join("outside.csv");
    let dotdot = files.join("../outside.csv");
    let link = files.join("link");
    std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
    for p in [
        outside.clone(),
        dotdot,
        link.join("outside.csv"),
        data.join("catalog.json"),
        data.join("x.csv"),
    ] {
        let (status, v) = http(&s, &copy_to(&p));
        assert_eq!(status, 403, "{}: {v}", p.display());
        assert_eq!(common::psql_sqlstate(&s, &copy_to(&p)), "42501");
    }
    assert!(!outside.exists());
    assert!(!data.join("x.csv").exists());

    // External tables: one over a file outside is refused before
    // anything else (Kiln's schema registers no external table anyway).
    let create = format!(
        "CREATE EXTERNAL TABLE e2 (a INT) STORED AS CSV LOCATION '{}'",
        outside.display()
    );
    assert_eq!(http(&s, &create).0, 403);
}

/// `curl`-like requests a web page can make cross-site without a
/// preflight: refused, the error says what to send.
#[test]
fn cross_site_requests_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    s.sql("CREATE TABLE t (ts TIMESTAMP NOT NULL, v BIGINT)");
    let raw = |headers: &[(&str, &str)], path: &str, body: &[u8]| {
        let (status, body) = common::request_raw(&s.http, "POST", path, headers, body);
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (status, v)
    };
    let drop = b"DROP TABLE t";
    for ct in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, v) = raw(&[("Content-Type", ct)], "/v1/sql", drop);
        assert_eq!(status, 415, "{ct}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("X-Kiln-Request"), "{msg}");
        let (status, _) = raw(&[("Content-Type", ct)], "/v1/write/t", b"{}");
        assert_eq!(status, 415, "{ct}");
    }
    // No Content-Type at all.
    assert_eq!(raw(&[], "/v1/sql", drop).0, 415);
    assert_eq!(
        s.rows("SELECT count(*) FROM t")[0][0],
        0,
        "table still there"
    );

    // What clients send: JSON, a non-simple type, or the custom header.
    let (status, v) = raw(
        &[("Content-Type", "application/json")],
        "/v1/sql",
        br#"{"sql": "SELECT 1"}"#,
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = raw(
        &[("Content-Type", "application/sql")],
        "/v1/sql",
        b"SELECT 1",
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = raw(
        &[("Content-Type", "text/plain"), ("X-Kiln-Request", "1")],
        "/v1/sql",
        b"SELECT 1",
    );
    assert_eq!(status, 200, "{v}");

    // A foreign Origin, even with an acceptable request.
    let (status, v) = raw(
        &[
            ("Content-Type", "application/json"),
            ("Origin", "https://evil.example"),
        ],
        "/v1/sql",
        br#"{"sql": "SELECT 1"}"#,
    );
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "origin_not_allowed", "{v}");

    // Headers are bounded.
    let big = "x".repeat(100 * 1024);
    let (status, _) = raw(
        &[("Content-Type", "application/json"), ("X-Big", &big)],
        "/v1/sql",
        br#"{"sql": "SELECT 1"}"#,
    );
    assert_eq!(status, 431);
}

#[test]
fn allowed_origins_get_cors_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(
        &tmp.path().join("data"),
        &["--http-allowed-origins", "https://app.example"],
    );
    let (status, head) = common::request_head(
        &s.http,
        "OPTIONS",
        "/v1/sql",
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
    );
    assert_eq!(status, 204, "{head}");
    assert!(
        head.contains("access-control-allow-origin: https://app.example"),
        "{head}"
    );
    let (status, head) = common::request_head(
        &s.http,
        "OPTIONS",
        "/v1/sql",
        &[
            ("Origin", "https://evil.example"),
            ("Access-Control-Request-Method", "POST"),
        ],
    );
    assert_eq!(status, 403, "{head}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let (status, _) = common::request_raw(
        &s.http,
        "POST",
        "/v1/sql",
        &[
            ("Content-Type", "application/json"),
            ("Origin", "https://app.example"),
        ],
        br#"{"sql": "SELECT 1"}"#,
    );
    assert_eq!(status, 200);
}

#[test]
fn cors_is_off_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let (status, head) = common::request_head(
        &s.http,
        "OPTIONS",
        "/v1/sql",
        &[
            ("Origin", "http://localhost:3000"),
            ("Access-Control-Request-Method", "POST"),
        ],
    );
    assert_eq!(status, 403, "{head}");
    assert!(!head.contains("access-control-allow"), "{head}");
}

#[test]
fn one_sessions_set_is_not_anothers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    common::client_check(&s, "session_check.py");

    // Over HTTP, a SET lasts for its request.
    let (status, v) = http(
        &s,
        "SET datafusion.execution.batch_size = 77; SHOW datafusion.execution.batch_size",
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["rows"][0][1], "77", "{v}");
    let (status, v) = http(&s, "SHOW datafusion.execution.batch_size");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["rows"][0][1], "8192", "{v}");
    // psql in another session still sees the default.
    assert_eq!(
        s.psql("SHOW datafusion.execution.batch_size").trim(),
        "8192"
    );
    let (status, v) = http(&s, "SET datafusion.runtime.memory_limit = '1G'");
    assert_eq!(status, 403, "{v}");
}
