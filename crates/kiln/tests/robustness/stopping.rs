//! Stopping queries, against the real binary: by a timeout, by KILL QUERY,
//! by `pg_cancel_backend` and by their client leaving; a thousand stopped
//! queries leave no thread, file or memory behind.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{self, Server};
use crate::{DDL, LONG, wait_for};

#[test]
fn every_query_can_be_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);

    // statement_timeout (psql) and ?timeout= (HTTP).
    let started = Instant::now();
    let out = s.psql_output(&[
        "-v",
        "VERBOSITY=verbose",
        "-c",
        "SET statement_timeout = 300",
        "-c",
        LONG,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("57014"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // The same given at startup (libpq's PGOPTIONS; node-postgres sends a
    // parameter of its own), and shown by SHOW.
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.pg_port.to_string(),
            "-U",
            "kiln",
            "-At",
        ])
        .args([
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "SHOW statement_timeout",
            "-c",
            LONG,
        ])
        .env("PGOPTIONS", "-c statement_timeout=300ms")
        .env("PGSSLMODE", "disable")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("57014"), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("300"),
        "{out:?}"
    );
    let (status, body) = s.request(
        "POST",
        "/v1/sql?timeout=300ms",
        &[("Content-Type", "text/plain")],
        LONG.as_bytes(),
    );
    assert_eq!(status, 504, "{}", String::from_utf8_lossy(&body));

    // A PostgreSQL client that dies mid-query: its query is cancelled.
    let marker = "SELECT count(*) FROM generate_series(1, 1000000000007)";
    let mut client = Command::new("python3")
        .args([
            "-c",
            &format!(
                "import psycopg; c = psycopg.connect(host='127.0.0.1', port={}, user='kiln', autocommit=True); c.execute('{marker}')",
                s.pg_port
            ),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status_of = |sql: &str| {
        let q = format!(
            "SELECT status, query_id FROM system.queries WHERE query = '{}'",
            sql.replace('\'', "''")
        );
        s.rows(&q).as_array().unwrap().first().cloned()
    };
    wait_for(|| status_of(marker).is_some_and(|r| r[0] == "running"));
    client.kill().unwrap();
    client.wait().unwrap();
    let killed = Instant::now();
    wait_for(|| status_of(marker).is_some_and(|r| r[0] == "cancelled"));
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );

    // KILL QUERY stops another client's query.
    let long_http = "SELECT count(*) FROM generate_series(1, 1000000000009)";
    let http = s.http.clone();
    let waiter = std::thread::spawn(move || {
        common::request(
            &http,
            "POST",
            "/v1/sql",
            &[("Content-Type", "text/plain")],
            long_http.as_bytes(),
        )
        .0
    });
    wait_for(|| status_of(long_http).is_some_and(|r| r[0] == "running"));
    let id = status_of(long_http).unwrap()[1].as_i64().unwrap();
    assert_eq!(
        s.sql(&format!("KILL QUERY {id}"))["rows_affected"],
        json!(1)
    );
    assert_eq!(waiter.join().unwrap(), 503);
    assert_eq!(status_of(long_http).unwrap()[0], "cancelled");
    assert_eq!(s.rows("SELECT 1")[0][0], json!(1));
}

/// Threads and open files of process `pid`.
fn process_counts(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (threads, fds)
}

#[test]
fn cancelled_queries_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql(DDL);
    s.sql("INSERT INTO t (ts, x) VALUES ('2026-11-01T00:00:00', 1)");
    let _ = s.rows("SELECT count(*) FROM t");
    let pid = s.child.id();
    let (threads, fds) = process_counts(pid);
    // 1,000 queries stopped midway: 4 clients, each query past its timeout.
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let http = s.http.clone();
            std::thread::spawn(move || {
                for i in 0..250 {
                    let sql = format!(
                        "SELECT count(*) FROM generate_series(1, {}) a, t",
                        1_000_000_000 + w * 1000 + i
                    );
                    let (status, _) = common::request(
                        &http,
                        "POST",
                        "/v1/sql?timeout=5ms",
                        &[("Content-Type", "text/plain")],
                        sql.as_bytes(),
                    );
                    assert_eq!(status, 504);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    wait_for(|| {
        s.metric("kiln_queries_running") == 0.0
            && s.metric("kiln_queries_queued") == 0.0
            && s.metric("kiln_query_memory_bytes") == 0.0
    });
    let stopped = s.rows("SELECT count(*) FROM system.queries WHERE status = 'timeout'");
    assert!(stopped[0][0].as_i64().unwrap() >= 990, "{stopped}");
    let (threads_after, fds_after) = process_counts(pid);
    assert!(
        threads_after <= threads + 4,
        "threads {threads} -> {threads_after}"
    );
    assert!(fds_after <= fds + 8, "open files {fds} -> {fds_after}");
    assert_eq!(s.rows("SELECT count(*) FROM t")[0][0], json!(1));
}

#[test]
fn pg_cancel_backend_stops_another_sessions_query() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let script = format!(
        r#"
import threading, time, psycopg
victim = psycopg.connect(host="127.0.0.1", port={port}, user="kiln", autocommit=True)
admin = psycopg.connect(host="127.0.0.1", port={port}, user="kiln", autocommit=True)
pid = victim.info.backend_pid
assert admin.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()[0] is False
out = {{}}
def run():
    try:
        victim.execute("SELECT count(*) FROM generate_series(1, 1000000000011)")
        out["error"] = None
    except psycopg.Error as e:
        out["error"] = e.sqlstate
t = threading.Thread(target=run); t.start()
time.sleep(1.0)
assert admin.execute(f"SELECT pg_cancel_backend({{pid}})").fetchone()[0] is True
t.join(20)
assert not t.is_alive(), "still running"
assert out["error"] == "57014", out
assert victim.execute("SELECT 1").fetchone()[0] == 1
print("ok")
"#,
        port = s.pg_port
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
