//! Cubes against the real binary: created and answered over HTTP, the
//! PostgreSQL simple and extended protocols; a written row is counted by
//! the next cube-answered query; `?cubes=off` and `SET kiln.cubes = off`
//! turn the rewrite off; EXPLAIN says why a cube did not answer; and after
//! a SIGKILL during flushes and during a cube's build, every segment has
//! its part or is read raw, and answers stay equal.

mod common;

use std::time::{Duration, Instant};

use common::{Server, pg_extended, serve_command};
use serde_json::{Value, json};

const TABLE: &str = "CREATE TABLE ev (ts TIMESTAMP NOT NULL, region VARCHAR NOT NULL, \
                     action VARCHAR NOT NULL, amount DOUBLE)";
const CUBE: &str = "CREATE CUBE by_hour ON ev DIMENSIONS (date_trunc('hour', ts) AS h, region, action) \
                    MEASURES (count(*) AS n, sum(amount) AS total)";
const QUERY: &str = "SELECT date_trunc('day', ts) AS d, region, count(*) AS n, \
                     count(*) FILTER (WHERE action = 'buy') AS buys, sum(amount) AS total \
                     FROM ev WHERE ts >= '2026-03-01 06:00:00' AND ts < '2026-03-03 18:30:00' \
                     GROUP BY 1, 2 ORDER BY 1, 2";

/// `n` rows over three days from `seed`, as one INSERT.
fn insert(seed: u64, n: usize) -> String {
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let rows: Vec<String> = (0..n)
        .map(|_| {
            let secs = next() % (3 * 86_400);
            let region = ["eu", "us", "apac"][next() % 3];
            let action = ["view", "buy"][next() % 2];
            let amount = match next() % 4 {
                0 => "NULL".to_string(),
                k => format!("{}", k * 10 + next() % 7),
            };
            format!(
                "(TIMESTAMP '2026-03-01 00:00:00' + INTERVAL '{secs} seconds', '{region}', '{action}', {amount})"
            )
        })
        .collect();
    format!("INSERT INTO ev VALUES {}", rows.join(", "))
}

fn post(s: &Server, path: &str, sql: &str) -> Value {
    let (st, body) = s.request(
        "POST",
        path,
        &[("Content-Type", "text/plain")],
        sql.as_bytes(),
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(st, 200, "{sql}: {v}");
    v
}

fn explain(s: &Server, path: &str, sql: &str) -> String {
    post(s, path, &format!("EXPLAIN {sql}"))["rows"].to_string()
}

/// The text of `EXPLAIN ANALYZE sql`.
fn analyze(s: &Server, sql: &str) -> String {
    post(s, "/v1/sql", &format!("EXPLAIN ANALYZE {sql}"))["rows"].to_string()
}

/// The metric `name` of the cube scan in an `EXPLAIN ANALYZE` text.
fn scan_metric(analyzed: &str, name: &str) -> i64 {
    analyzed
        .split("CubeScanExec")
        .nth(1)
        .and_then(|scan| {
            let prefix = format!("{name}=");
            scan.split(['[', ' '])
                .find_map(|t| t.strip_prefix(prefix.as_str()))
        })
        .and_then(|n| {
            let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {name} in {analyzed}"))
}

/// The segments the (one) cube's table has.
fn segments(s: &Server) -> i64 {
    s.rows("SELECT segments FROM system.cubes")[0][0]
        .as_i64()
        .unwrap()
}

/// Waits until every cube covers every segment and there is at least one.
fn wait_ready(s: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = s.rows("SELECT segments, segments_covered, state FROM system.cubes");
        let ready = rows
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r[0].as_i64() > Some(0) && r[0] == r[1] && r[2] == json!("ready"));
        if ready {
            return;
        }
        assert!(Instant::now() < deadline, "cubes not ready: {rows}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn cubes_answer_over_every_door_and_count_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &["--flush-age", "300ms"]);
    s.sql(TABLE);
    post(&s, "/v1/sql", CUBE);
    s.sql(&insert(1, 2_000));
    wait_ready(&s);
    s.sql(&insert(2, 500));

    // Answered from the cube, equal to the raw answer, on every door.
    assert!(explain(&s, "/v1/sql", QUERY).contains("CubeScan: cube=by_hour"));
    let raw = post(&s, "/v1/sql?cubes=off", QUERY)["rows"].clone();
    assert!(!explain(&s, "/v1/sql?cubes=off", QUERY).contains("CubeScan"));
    assert_eq!(post(&s, "/v1/sql", QUERY)["rows"], raw);
    assert!(raw.as_array().unwrap().len() >= 6, "{raw}");
    let psql = s.psql(QUERY);
    let off = s.psql_output(&["-c", "SET kiln.cubes = off", "-c", QUERY]);
    assert_eq!(String::from_utf8_lossy(&off.stdout), format!("SET\n{psql}"));
    let total = "SELECT count(*) FROM ev WHERE ts >= '2026-03-01 00:00:00'";
    let ext = pg_extended(&s, &[total, total]);
    let n: i64 = ext[0]["ok"].as_str().unwrap().parse().unwrap();
    assert_eq!(n, 2_500);
    let plain = s.psql("SET kiln.cubes = off");
    assert_eq!(plain.trim(), "SET");

    // Freshness: the next cube-answered query counts a row just written.
    s.sql("INSERT INTO ev VALUES ('2026-03-02 12:00:00', 'eu', 'buy', 5)");
    assert_eq!(s.psql(total).trim(), "2501");
    let answered = s.rows("SELECT queries_answered FROM system.cubes")[0][0]
        .as_i64()
        .unwrap();
    assert!(answered >= 4, "{answered}");

    // EXPLAIN ANALYZE counts the parts the cube scan read, none raw, and
    // the time it waited for their states.
    let analyzed = analyze(&s, total);
    let before = segments(&s);
    let parts = scan_metric(&analyzed, "parts");
    assert!(
        (1..=before).contains(&parts),
        "{parts} of {before}: {analyzed}"
    );
    assert_eq!(scan_metric(&analyzed, "raw_segments"), 0, "{analyzed}");
    assert!(analyzed.contains("parts_time="), "{analyzed}");

    // A new part is decoded and merged to the dimensions queries read
    // before its commit: the first query after the flush makes nothing.
    let by_region = "SELECT region, count(*) FROM ev GROUP BY region";
    analyze(&s, by_region);
    s.sql(&insert(3, 300));
    let deadline = Instant::now() + Duration::from_secs(60);
    while segments(&s) <= before {
        assert!(Instant::now() < deadline, "no flush");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_ready(&s);
    let analyzed = analyze(&s, by_region);
    // (A compaction may have merged some since: its part is made so too.)
    assert!(scan_metric(&analyzed, "parts") > 0, "{analyzed}");
    assert_eq!(scan_metric(&analyzed, "parts_made"), 0, "{analyzed}");

    // EXPLAIN says why the cube could not answer.
    let why = explain(
        &s,
        "/v1/sql",
        "SELECT amount, count(*) FROM ev GROUP BY amount",
    );
    assert!(why.contains("cube_rewrite"), "{why}");
    assert!(
        why.contains("cube by_hour: group key amount is not derived"),
        "{why}"
    );
}

#[test]
fn killed_during_flush_and_build_every_segment_is_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = Server::start(&dir, &["--flush-age", "200ms", "--compaction", "false"]);
    s.sql(TABLE);
    for i in 0..6 {
        s.sql(&insert(10 + i, 400));
        std::thread::sleep(Duration::from_millis(250));
    }
    let want = post(&s, "/v1/sql?cubes=off", QUERY)["rows"].clone();
    // The cube over existing segments: killed while its parts are built.
    post(&s, "/v1/sql", CUBE);
    s.sql(&insert(20, 400));
    let mut s = s;
    s.child.kill().expect("SIGKILL");
    s.child.wait().unwrap();
    drop(s);

    let s = Server::adopt(
        serve_command(&dir)
            .args(["--flush-age", "200ms", "--compaction", "false"])
            .env("KILN_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Before and after every part is built, the answer is the raw one.
    let raw = post(&s, "/v1/sql?cubes=off", QUERY)["rows"].clone();
    assert_eq!(post(&s, "/v1/sql", QUERY)["rows"], raw);
    wait_ready(&s);
    assert_eq!(post(&s, "/v1/sql", QUERY)["rows"], raw);
    assert!(explain(&s, "/v1/sql", QUERY).contains("CubeScan"));
    // The row written before the kill was acknowledged: it is there.
    let n = |rows: &Value| -> i64 {
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r[2].as_i64().unwrap())
            .sum()
    };
    assert!(n(&raw) > n(&want), "{raw} vs {want}");
}
