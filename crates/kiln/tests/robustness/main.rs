//! Robustness at the edges, against the real binary: inputs that used to
//! crash it (deep and long expressions, deep JSON, lying Arrow bodies),
//! values that used to be stored changed, memory past the limits
//! (writes that decode past them: [`decoding`]; bodies in flight:
//! [`bodies`]; PostgreSQL connections: [`connections`]), a full disk,
//! PostgreSQL messages that lie about their length, handlers that panic,
//! results far larger as text than in memory; queries stopped
//! ([`stopping`]); statements that take long to plan ([`planning`]);
//! dates and times that cannot be shown ([`unprintable`]).
//! After each, the server must still answer correctly.

mod bodies;
#[path = "../common/mod.rs"]
mod common;
mod connections;
mod decoding;
mod domains;
mod planning;
mod stopping;
mod unprintable;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, pg_message, raw_pg};
use serde_json::{Value, json};

const DDL: &str = "CREATE TABLE t (ts TIMESTAMP NOT NULL, x BIGINT, n INT, d DOUBLE, s VARCHAR)";

/// A statement that runs until something stops it.
const LONG: &str = "SELECT count(*) FROM generate_series(1, 1000000000000)";

fn post_sql(s: &Server, sql: &str) -> (u16, Value) {
    let (status, body) = s.request(
        "POST",
        "/v1/sql",
        &[("Content-Type", "text/plain")],
        sql.as_bytes(),
    );
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn count(s: &Server) -> i64 {
    s.rows("SELECT count(*) FROM t")[0][0].as_i64().unwrap()
}

#[test]
fn deep_and_long_inputs_are_answered_on_every_door() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql(DDL);
    s.sql(
        "INSERT INTO t (ts, x) VALUES ('2026-11-01T00:00:00', 3), ('2026-11-01T00:00:00', 20000)",
    );

    let plus = format!("SELECT {}", vec!["1"; 1887].join("+"));
    let parens = format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000));
    let params = format!(
        "SELECT {}",
        (1..=10_000)
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join("+")
    );
    for deep in [&plus, &parens] {
        let (status, body) = post_sql(&s, deep);
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("statement_too_complex"))
        );
        assert_eq!(common::psql_sqlstate(&s, deep), "54001");
    }
    let got = common::pg_extended(&s, &[&plus, &params]);
    assert!(got.iter().all(|v| v["sqlstate"] == "54001"), "{got:?}");

    // Text past --max-statement-bytes is refused before it is parsed (a
    // 4 MB `1+1+...` used to kill the process on its way to the refusal).
    let huge = format!("SELECT {}", vec!["1"; 2_000_000].join("+"));
    let (status, body) = post_sql(&s, &huge);
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("statement_too_complex")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-statement-bytes")
    );

    // Long flat chains work, with the right answer, on every door.
    let terms = |op: &str, cmp: &str| {
        (0..10_000)
            .map(|i| format!("x{cmp}{i}"))
            .collect::<Vec<_>>()
            .join(&format!(" {op} "))
    };
    let or = format!("SELECT count(*) FROM t WHERE {}", terms("OR", "="));
    let and = format!("SELECT count(*) FROM t WHERE {}", terms("AND", "<>"));
    let list: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    let within = format!("SELECT count(*) FROM t WHERE x IN ({})", list.join(","));
    for (sql, want) in [(&or, 1), (&and, 1), (&within, 1)] {
        assert_eq!(s.rows(sql)[0][0], json!(want), "HTTP");
        // Through a file: one argument may not pass 128 KiB.
        let file = dir.path().join("long.sql");
        std::fs::write(&file, sql).unwrap();
        let out = s.psql_output(&["-f", file.to_str().unwrap()]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want.to_string(),
            "psql"
        );
        assert_eq!(
            common::pg_extended(&s, &[sql])[0]["ok"],
            json!(want.to_string()),
            "psycopg"
        );
    }

    // Deep JSON in a known column, and an Arrow IPC body that lies about
    // its size: clear 400s, nothing written.
    let deep_json = format!(
        "{{\"ts\":\"2026-11-01T00:00:00Z\",\"s\":{}1{}}}\n",
        "[".repeat(26_136),
        "]".repeat(26_136)
    );
    let (status, v) = s.write(
        "t",
        &[("Content-Type", "application/x-ndjson")],
        deep_json.as_bytes(),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nested deeper"),
        "{v}"
    );
    let mut lying = vec![0xff; 4];
    lying.extend_from_slice(&(2u32 << 30).to_le_bytes());
    lying.extend_from_slice(&[0; 4096]);
    let (status, v) = s.write(
        "t",
        &[("Content-Type", "application/vnd.apache.arrow.stream")],
        &lying,
    );
    assert_eq!(status, 400, "{v}");

    // A result too large for one value is refused before it is built.
    let (status, v) = post_sql(&s, "SELECT length(repeat('x', 2000000000))");
    assert_eq!(status, 400, "{v}");
    // So are one call's results over many rows each under that limit, an
    // array as long as its arguments say, and a step that may not move
    // (each of these took gigabytes, or ran on until the process died).
    for (sql, why) in [
        (
            "SELECT sum(cardinality(array_repeat(x, 30000000))) FROM generate_series(1, 30) t(x)",
            "limit on one call's results",
        ),
        (
            "SELECT cardinality(range(1, 2000000000))",
            "limit on one value",
        ),
        (
            "SELECT generate_series(DATE '2026-01-01', DATE '2026-02-01', INTERVAL '1 month -31 days')",
            "different signs",
        ),
    ] {
        let (status, v) = post_sql(&s, sql);
        assert_eq!(status, 400, "{sql}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{sql}: {v}");
    }
    // A large constant copied into every row is given to a batch's rows a
    // slice at a time (it took 2.3 GiB a batch, then panicked); sorted and
    // cut first, only the two rows kept get it.
    let rows = s.rows(
        "SELECT x, repeat('x', 300000) AS c FROM generate_series(1, 20000) t(x) ORDER BY x DESC LIMIT 2",
    );
    let rows = rows.as_array().unwrap();
    let x: Vec<_> = rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(x, [json!(20000), json!(19999)]);
    assert!(rows.iter().all(|r| r[1].as_str().unwrap().len() == 300_000));
    // A window function evaluates its arguments over all the rows it
    // holds: copying such a constant into 20,000 of them is stopped with an
    // error naming the function (it panicked, "offset overflow").
    let sql =
        "SELECT lag(repeat('x', 300000), 1) OVER (ORDER BY x) FROM generate_series(1, 20000) t(x)";
    let (status, v) = post_sql(&s, sql);
    assert_eq!(status, 413, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("window function lag("), "{v}");
    assert_eq!(common::psql_sqlstate(&s, sql), "54000");
    // A regular expression that does not compile is bad input, on both
    // protocols (it was an internal error): a literal, checked after
    // parsing, or one read from a column, checked as the query runs.
    for sql in [
        "SELECT count(*) FROM t WHERE s ~ 'a('",
        "SELECT count(*) FROM t WHERE 'x' ~ concat(s, '(')",
    ] {
        let (status, v) = post_sql(&s, sql);
        assert_eq!(status, 400, "{sql}: {v}");
        let code = &v["error"]["code"];
        assert_eq!(code, &json!("invalid_regular_expression"), "{sql}: {v}");
        assert_eq!(common::psql_sqlstate(&s, sql), "2201B", "{sql}");
    }
    assert_eq!(count(&s), 2);
    assert_eq!(s.rows("SELECT 1")[0][0], json!(1));
}

#[test]
fn nothing_is_silently_changed_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql(DDL);
    let ndjson = [("Content-Type", "application/x-ndjson")];
    let csv = [("Content-Type", "text/csv")];
    let ok = r#"{"ts":"2026-11-01T00:00:00Z","x":1}"#;
    for (body, headers, why) in [
        (
            format!("{ok}\n{{\"ts\":\"2026-11-01T00:00:00Z\",\"n\":1.5}}\n"),
            &ndjson,
            "line 2, column 'n': 1.5 is not an integer",
        ),
        (
            format!("{ok}\n{{\"ts\":\"2026-11-01T00:00:00Z\",\"d\":1e400}}\n"),
            &ndjson,
            "line 2, column 'd': 1e400 is out of range",
        ),
        (
            format!("{ok}\n{{\"ts\":1700000000}}\n"),
            &ndjson,
            "line 2, column 'ts': integer timestamp 1700000000 has no unit",
        ),
        (
            format!("{ok}\n{{\"ts\":\"2300-01-01T00:00:00\"}}\n"),
            &ndjson,
            "line 2, column 'ts'",
        ),
        (
            "ts,x\n2026-11-01T00:00:00Z,1\n2026-11-01T00:00:00Z,2.5\n".into(),
            &csv,
            "line 3, column 'x'",
        ),
        (
            "ts,s,s\n2026-11-01T00:00:00Z,a,b\n".into(),
            &csv,
            "column 's' appears twice",
        ),
        (
            "ts,s\n2026-11-01T00:00:00Z,\"a\n2026-11-01T00:00:00Z,b\n".into(),
            &csv,
            "line 2: a quoted field is never closed",
        ),
    ] {
        let (status, v) = s.write("t", headers, body.as_bytes());
        assert_eq!(status, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{body}: {msg}");
    }
    assert_eq!(count(&s), 0, "a refused body writes nothing");

    // Declared units, exact values and a byte-order mark are accepted.
    let (status, v) = s.request(
        "POST",
        "/v1/write/t?timestamp_unit=ms",
        &ndjson,
        b"{\"ts\":1700000000000,\"n\":2.0,\"d\":0.25}\n",
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&v));
    let (status, v) = s.write(
        "t",
        &csv,
        "\u{feff}ts,x\n2026-11-01T00:00:00Z,7\n".as_bytes(),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        s.rows("SELECT CAST(ts AS VARCHAR), n, d FROM t WHERE n IS NOT NULL"),
        json!([["2023-11-14T22:13:20", 2, 0.25]])
    );
    assert_eq!(s.rows("SELECT x FROM t WHERE x IS NOT NULL"), json!([[7]]));
}

#[test]
fn memory_is_bounded_by_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("spill");
    let s = Server::start(
        dir.path(),
        &[
            "--memory-limit",
            "256MiB",
            "--query-memory-limit",
            "128MiB",
            "--spill-dir",
            spill.to_str().unwrap(),
        ],
    );
    // string_agg over 1e8 rows keeps everything: refused at the limit.
    let (status, v) = post_sql(
        &s,
        "SELECT length(string_agg(CAST(v AS VARCHAR), ',')) FROM generate_series(1, 100000000) g(v)",
    );
    assert_eq!(
        (status, &v["error"]["code"]),
        (503, &json!("out_of_memory")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--query-memory-limit"),
        "{v}"
    );
    // A sort larger than its share spills and finishes.
    let sorted = s.rows(
        "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY v DESC) AS r FROM generate_series(1, 20000000) g(v))",
    );
    assert_eq!(sorted, json!([[20000000]]));
    let hwm = peak_rss_kib(s.child.id());
    assert!(hwm < 1024 * 1024, "peak RSS {hwm} KiB");
    assert_eq!(s.rows("SELECT 1")[0][0], json!(1));
}

#[test]
fn many_heavy_queries_at_once_stay_within_the_pool() {
    const LIMIT: u64 = 128 << 20;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &["--memory-limit", "128MiB", "--query-memory-limit", "32MiB"],
    );
    let baseline = peak_rss_kib(s.child.id()) * 1024;
    // A million groups each: about 110 MB of aggregation state unbounded.
    let sql = "SELECT count(*) FROM (SELECT v % 1000000 AS k, count(*) AS c, \
               max(CAST(v AS VARCHAR)) AS m FROM generate_series(1, 1000000) g(v) GROUP BY k)";
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let http = s.http.clone();
            std::thread::spawn(move || {
                let (status, body) = common::request(
                    &http,
                    "POST",
                    "/v1/sql",
                    &[("Content-Type", "text/plain")],
                    sql.as_bytes(),
                );
                (status, serde_json::from_slice::<Value>(&body).unwrap())
            })
        })
        .collect();
    let mut pool_peak = 0.0f64;
    while clients.iter().any(|c| !c.is_finished()) {
        pool_peak = pool_peak.max(s.metric("kiln_query_memory_bytes"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut answered = 0;
    for c in clients {
        match c.join().unwrap() {
            (200, v) => {
                assert_eq!(v["rows"], json!([[1000000]]), "{v}");
                answered += 1;
            }
            (503, v) => assert!(
                ["out_of_memory", "overloaded"].contains(&v["error"]["code"].as_str().unwrap()),
                "{v}"
            ),
            other => panic!("{other:?}"),
        }
    }
    // Under a limit this small, how many run to the end depends on the
    // machine's load; every answer is right or a clear refusal (above).
    assert!(answered > 0, "none of 200 answered");
    assert!(
        pool_peak > 0.0 && pool_peak <= LIMIT as f64,
        "pool peak {pool_peak}"
    );
    assert_eq!(s.metric("kiln_query_memory_bytes"), 0.0);
    // Memory DataFusion does not account (emitted result batches, generated
    // input) is held to the limit on the heap; on top come the allocator's
    // overhead, 200 connections' own state and the pages kept by the
    // blocking threads that read spills back: 210-310 MiB in runs on a
    // 2-core machine, more when another test runs beside it (docs/
    // reliability.md). This bounds growth, not the +20% target, which is
    // missed. Unbounded, the 200 queries would hold some 20 GiB.
    let rss = peak_rss_kib(s.child.id()) * 1024;
    assert!(
        rss < baseline + LIMIT + (512 << 20),
        "peak RSS {rss} from a baseline of {baseline}"
    );
    assert_eq!(s.rows("SELECT 1")[0][0], json!(1));
}

/// A result far larger as text than in memory (a long constant on every
/// row, which string views share) is encoded a slice at a time, over HTTP
/// in each text format and in COPY: the server's peak memory grows far
/// less than the result's size (encoded a batch at a time, 500 MB of
/// text took 500-620 MiB more; 8,192 rows of 100 MB would end the
/// process).
#[test]
fn a_large_result_is_sent_in_bounded_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql(DDL);
    s.sql("INSERT INTO t (ts, s) SELECT TIMESTAMP '2026-01-01 00:00:00' + x * INTERVAL '1 second', CAST(x AS VARCHAR) FROM generate_series(1, 100) t(x)");
    let query = "SELECT s, arrow_cast(repeat('a', 5000000), 'Utf8View') AS y FROM t";
    let pid = s.child.id();
    let before = peak_rss_kib(pid);
    for format in ["json", "csv", "ndjson"] {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download}",
            ])
            .args(["-H", "X-Kiln-Request: 1", "-H", "Content-Type: text/plain"])
            .args(["--data-binary", query])
            .arg(format!("http://{}/v1/sql?format={format}", s.http))
            .output()
            .unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        let (status, bytes) = out.split_once(' ').unwrap();
        assert_eq!(status, "200", "{format}");
        assert!(
            bytes.parse::<u64>().unwrap() > 500_000_000,
            "{format}: {out}"
        );
    }
    let copy = s
        .psql_command()
        .args(["-c", &format!("COPY ({query}) TO STDOUT")])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(copy.success());
    let grown = peak_rss_kib(pid).saturating_sub(before) / 1024;
    assert!(
        grown < 200,
        "peak memory grew {grown} MiB for 500 MB results"
    );
    assert_eq!(s.rows("SELECT 1")[0][0], json!(1));
}

pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

fn wait_for(mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Unmounts the tmpfs when the test ends, however it ends.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_refuses_writes_clearly_and_heals_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&small)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        // Mounting needs root (as in CI); say so rather than pass quietly.
        eprintln!("SKIPPED: cannot mount a tmpfs here (not root?)");
        return;
    }
    let _mount = Mount(small.clone());
    let data = small.join("data");
    let s = Server::start(&data, &[]);
    s.sql(DDL);
    let ndjson = [("Content-Type", "application/x-ndjson")];
    let rows = |n: usize, from: usize| -> Vec<u8> {
        (from..from + n)
            .map(|i| {
                format!(
                    "{{\"ts\":\"2026-11-01T00:00:00Z\",\"x\":{i},\"s\":\"{}\"}}\n",
                    "p".repeat(200)
                )
            })
            .collect::<String>()
            .into_bytes()
    };
    let mut acked = 0;
    let (status, v) = s.write("t", &ndjson, &rows(100, 0));
    assert_eq!(status, 200, "{v}");
    acked += 100;

    // Fill the disk.
    let filler = small.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        while f.write_all(&[0u8; 1 << 16]).is_ok() {}
    }
    let mut refused = None;
    for attempt in 0..50 {
        let (status, v) = s.write("t", &ndjson, &rows(200, acked));
        if status == 200 {
            acked += 200;
            continue;
        }
        refused = Some((attempt, status, v));
        break;
    }
    let (_, status, v) = refused.expect("a write fails once the disk is full");
    assert_eq!(status, 507, "{v}");
    assert_eq!(v["error"]["code"], json!("disk_full"), "{v}");
    let (status, body) = s.request("GET", "/ready", &[], b"");
    assert_eq!(status, 503);
    assert!(String::from_utf8_lossy(&body).contains("degraded"));
    // Reads keep working, and show exactly what was acknowledged.
    assert_eq!(count(&s), acked as i64);

    // Space returns: writing resumes by itself, within seconds.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    loop {
        let (status, v) = s.write("t", &ndjson, &rows(10, acked));
        if status == 200 {
            acked += 10;
            break;
        }
        assert!(
            freed.elapsed() < Duration::from_secs(10),
            "writes did not resume: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for(|| s.request("GET", "/ready", &[], b"").0 == 200);
    assert_eq!(count(&s), acked as i64);

    // Nothing acknowledged is lost across a restart.
    assert!(s.terminate().success());
    let s = Server::start(&data, &[]);
    assert_eq!(count(&s), acked as i64);
    drop(s);
}

#[test]
fn light_queries_answer_while_heavy_ones_queue() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "--max-concurrent-queries",
            "1",
            "--max-queued-queries",
            "2",
            "--query-slot-time",
            "0s",
        ],
    );
    let heavy = |i: usize| {
        format!(
            "SELECT count(*) FROM generate_series(1, {})",
            1_000_000_000_000u64 + i as u64
        )
    };
    let mut clients = vec![];
    for i in 0..3 {
        let (http, sql) = (s.http.clone(), heavy(i));
        clients.push(std::thread::spawn(move || {
            common::request(
                &http,
                "POST",
                "/v1/sql",
                &[("Content-Type", "text/plain")],
                sql.as_bytes(),
            )
            .0
        }));
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for(|| s.metric("kiln_queries_queued") == 2.0);

    // One more heavy query is refused at once, with a retry hint.
    let (status, body) = post_sql(&s, &heavy(9));
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("overloaded")),
        "{body}"
    );
    // Light queries do not wait behind them, on either protocol.
    for sql in [
        "SELECT 1",
        "SELECT count(*) FROM system.queries",
        "SELECT count(*) FROM information_schema.tables",
    ] {
        let started = Instant::now();
        let (status, body) = post_sql(&s, sql);
        assert_eq!(status, 200, "{sql}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{sql}: {:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    assert_eq!(s.psql("SELECT 1").trim(), "1");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "psql: {:?}",
        started.elapsed()
    );
    assert_eq!(common::psql_sqlstate(&s, &heavy(10)), "53300");

    // An operator stops them all.
    let ids = s.rows("SELECT query_id FROM system.queries WHERE status IN ('running', 'queued') AND query LIKE '%generate_series%'");
    for id in ids.as_array().unwrap() {
        s.sql(&format!("KILL QUERY {}", id[0]));
    }
    for c in clients {
        assert_eq!(c.join().unwrap(), 503);
    }
}

#[test]
fn malformed_pg_messages_get_08p01_and_the_server_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    // Messages whose declared length cannot hold their fields: the first
    // was found by the pg_message fuzz target (pgwire read past its end).
    for frame in [
        &b"E\x00\x00\x00\x00\x06"[..],
        &b"E\x00\x00\x00\x04"[..],
        &b"B\x00\x00\x00\x04"[..],
    ] {
        let answer = raw_pg(s.pg_port, frame);
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.contains("08P01") && text.contains("protocol violation"),
            "{frame:?}: {text}"
        );
    }
    let (status, body) = post_sql(&s, "SELECT 41 + 1 AS n");
    assert_eq!((status, &body["rows"]), (200, &json!([[42]])), "{body}");
    let psql = s.psql_output(&["-c", "SELECT 41 + 1"]);
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "42");
}

#[test]
fn a_handler_that_panics_fails_its_statement_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    // A binary INTERVAL parameter of 5 bytes (it takes 16): the parameter
    // decoder panics ("advance out of bounds"). Then a simple query on the
    // same connection, and Terminate.
    let mut frames = pg_message(b'P', b"\0SELECT $1\0\0\x01\0\0\x04\xa2");
    let mut bind = b"\0\0\0\x01\0\x01\0\x01\0\0\0\x05".to_vec();
    bind.extend_from_slice(&[0; 5]);
    bind.extend_from_slice(b"\0\0");
    frames.extend(pg_message(b'B', &bind));
    frames.extend(pg_message(b'E', b"\0\0\0\0\0"));
    frames.extend(pg_message(b'S', b""));
    frames.extend(pg_message(b'Q', b"SELECT 41 + 1\0"));
    frames.extend(pg_message(b'X', b""));
    let answer = raw_pg(s.pg_port, &frames);
    let text = String::from_utf8_lossy(&answer);
    let failed = text
        .find("CXX000\0Mthe statement failed unexpectedly: advance out of bounds")
        .unwrap_or_else(|| panic!("{text}"));
    let answered = text.find("\x0242C").unwrap_or_else(|| panic!("{text}"));
    assert!(failed < answered, "{text}");

    // Over HTTP, a function that panics while the statement is planned
    // (in builds with overflow checks, as the tests'): 500, not a dropped
    // connection.
    let (status, body) = post_sql(
        &s,
        "SELECT array_position([1, 2, 3], 2, -9223372036854775807 - 1)",
    );
    if status != 200 {
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (500, Some("internal")),
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("the request failed unexpectedly"),
            "{message}"
        );
    }
    let (status, body) = post_sql(&s, "SELECT 41 + 1 AS n");
    assert_eq!((status, &body["rows"]), (200, &json!([[42]])), "{body}");
}
