//! End-to-end tests of the client-side tools against a real `kiln serve`:
//! `kiln gen abtest --load` (HTTP bulk load with idempotency keys),
//! `kiln bench query` over the PostgreSQL wire and over HTTP running the
//! whole dashboard workload, `kiln bench write`, `kiln sql --url`, and a
//! TOML settings file.

mod common;

use std::process::{Command, Output};

use common::Server;
use serde_json::Value;

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("KILN_LOG", "warn")
        .output()
        .expect("run kiln")
}

fn ok_stdout(args: &[&str]) -> String {
    let out = kiln(args);
    assert!(
        out.status.success(),
        "kiln {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn count(s: &Server, table: &str) -> u64 {
    s.rows(&format!("SELECT count(*) FROM {table}"))[0][0]
        .as_u64()
        .unwrap()
}

#[test]
fn gen_load_then_bench_query_and_write() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let http = format!("http://{}", s.http);

    // 3 batches of 65,536 rows and a short one, streamed in parallel.
    ok_stdout(&[
        "gen",
        "abtest",
        "--rows",
        "200000",
        "--load",
        &http,
        "--parallel",
        "3",
    ]);
    assert_eq!(count(&s, "abtest"), 200_000);
    // The same data again: every batch's idempotency key is known, nothing doubles.
    ok_stdout(&["gen", "abtest", "--rows", "200000", "--load", &http]);
    assert_eq!(count(&s, "abtest"), 200_000);

    // The dashboard workload over both protocols: every query runs, none fails.
    for (protocol, url) in [
        ("pg", format!("postgres://127.0.0.1:{}", s.pg_port)),
        ("http", http.clone()),
    ] {
        let out = ok_stdout(&[
            "bench",
            "query",
            "--url",
            &url,
            "--protocol",
            protocol,
            "--clients",
            "1,3",
            "--duration",
            "3s",
            "--json",
        ]);
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let levels = v["levels"].as_array().unwrap();
        assert_eq!(levels.len(), 2, "{v}");
        for (l, clients) in levels.iter().zip([1, 3]) {
            assert_eq!(l["clients"], clients, "{v}");
            assert_eq!(l["errors"], 0, "{protocol}: {v}");
            assert!(l["queries"].as_u64().unwrap() > 0, "{protocol}: {v}");
            assert!(l["p99_ms"].as_f64().unwrap() >= l["p50_ms"].as_f64().unwrap());
            // Each second of the 3 s level, holding its calls between them.
            let seconds = l["per_second"].as_array().unwrap();
            assert_eq!(seconds.len(), 3, "{protocol}: {v}");
            let calls: u64 = seconds.iter().map(|s| s["queries"].as_u64().unwrap()).sum();
            let all = l["queries"].as_u64().unwrap();
            assert!(
                calls <= all && calls * 2 >= all,
                "{protocol}: {calls} of {all}"
            );
        }
        // Every one of the 15 queries ran (system.queries keeps the most
        // recent 1,000 queries, so this is checked before the next run).
        // This check runs over HTTP, and its own text matches the pattern.
        let distinct = s.rows(&format!(
            "SELECT count(DISTINCT query) FROM system.queries \
             WHERE query LIKE '%experiment_id = $1%' AND status = 'ok' \
             AND protocol = '{protocol}' AND query NOT LIKE '%system.queries%'"
        ));
        assert_eq!(distinct, serde_json::json!([[15]]), "{protocol}");
    }

    // The table form prints the per-level columns (clients, handled queries, q/s, mean, p50, p95, p99, p99.9, errors).
    let table = ok_stdout(&[
        "bench",
        "query",
        "--url",
        &format!("postgres://127.0.0.1:{}", s.pg_port),
        "--clients",
        "2",
        "--duration",
        "1s",
    ]);
    assert!(
        table.contains("| clients | handled queries | q/s |"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("| 2 | ")), "{table}");

    // Writes: every acknowledged row is in the table afterwards.
    for ack in ["durable", "memory"] {
        let before = count(&s, "abtest");
        let out = ok_stdout(&[
            "bench",
            "write",
            "--url",
            &http,
            "--clients",
            "4",
            "--batch",
            "10",
            "--duration",
            "2s",
            "--ack",
            ack,
            "--json",
        ]);
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let writes = v["total"]["queries"].as_u64().unwrap();
        assert!(writes > 0 && v["total"]["errors"] == 0, "{v}");
        assert!(!v["per_second"].as_array().unwrap().is_empty(), "{v}");
        // ack=memory rows are visible within one group commit.
        let want = before + writes * 10;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while count(&s, "abtest") != want && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(count(&s, "abtest"), want, "ack={ack}");
    }
    // A steady stream: at most --rate rows a second, over all writers.
    let out = ok_stdout(&[
        "bench",
        "write",
        "--url",
        &http,
        "--clients",
        "2",
        "--batch",
        "10",
        "--duration",
        "2s",
        "--rate",
        "500",
        "--json",
    ]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let rows = v["total"]["queries"].as_u64().unwrap() * 10;
    // Two seconds at 500 rows/s, and each writer's first request.
    assert!(rows > 0 && rows <= 2 * 500 + 2 * 10, "{v}");

    // A server that is not there is an error, not a hang or a zero table.
    let out = kiln(&[
        "bench",
        "query",
        "--url",
        "postgres://127.0.0.1:1",
        "--clients",
        "1",
        "--duration",
        "1s",
    ]);
    assert!(!out.status.success());
}

/// The dashboard's prepared statements, run with generic plans over held
/// segments, keep each segment's partial aggregates and find them again
/// (`kiln_query::partials`), with no errors.
#[test]
fn dashboard_keeps_partial_aggregates_of_held_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(
        &tmp.path().join("data"),
        &["--flush-bytes", "1", "--plan-cache-mode", "force-generic"],
    );
    let http = format!("http://{}", s.http);
    ok_stdout(&["gen", "abtest", "--rows", "50000", "--load", &http]);
    // Flushed into day segments, and each read once so it is decoded.
    let flushed = || {
        s.rows("SELECT coalesce(sum(rows), 0), count(*) FILTER (WHERE cached_bytes > 0), count(*) FROM system.segments")
    };
    for _ in 0..400 {
        let v = flushed();
        if v[0][0] == 50_000 && v[0][1] == v[0][2] {
            break;
        }
        s.rows("SELECT count(*) FROM abtest WHERE amount > 0");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let v = flushed();
    assert!(v[0][0] == 50_000 && v[0][1] == v[0][2], "all held: {v}");
    // Twice with one seed: the second run asks what the first asked.
    let url = format!("postgres://127.0.0.1:{}", s.pg_port);
    for _ in 0..2 {
        let out = ok_stdout(&[
            "bench",
            "query",
            "--url",
            &url,
            "--clients",
            "2",
            "--duration",
            "2s",
            "--seed",
            "5",
            "--json",
        ]);
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let level = &v["levels"][0];
        assert_eq!(level["errors"], 0, "{v}");
        assert!(level["queries"].as_u64().unwrap() >= 15, "{v}");
    }
    assert!(s.metric("kiln_partial_cache_misses_total") >= 1.0);
    assert!(s.metric("kiln_partial_cache_hits_total") >= 1.0);
    assert!(s.metric("kiln_partial_cache_bytes") > 0.0);
    // Every chart ran an instance of its generic plan (force-generic),
    // instances given back and run again rather than planned per query.
    let runs = s.metric("kiln_plan_cache_generic_runs_total");
    let planned = s.metric("kiln_plan_cache_instances_planned_total");
    assert_eq!(s.metric("kiln_plan_cache_custom_runs_total"), 0.0);
    assert!(
        planned >= 1.0 && runs > 4.0 * planned,
        "{runs} runs, {planned} planned"
    );
    // Runs started where they were read (in one partition: how many
    // depends on the cores), and those of them that moved, are exported.
    let short = s.metric("kiln_plan_cache_short_runs_total");
    let moved = s.metric("kiln_plan_cache_short_moved_total");
    assert!(
        short <= runs && moved <= short,
        "{short} short, {moved} moved"
    );
}

#[test]
fn sql_over_http_matches_embedded_output() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let url = format!("http://{}", s.http);
    let out = ok_stdout(&[
        "sql",
        "--url",
        &url,
        "CREATE TABLE r (ts TIMESTAMP NOT NULL, k VARCHAR, v DOUBLE); \
         INSERT INTO r VALUES ('2026-01-01 00:00:00', 'a', 1.5), ('2026-01-02 00:00:00', NULL, 2.5); \
         SELECT k, v FROM r ORDER BY v",
    ]);
    assert!(out.contains("INSERT 0 2"), "{out}");
    assert!(
        out.contains("| a    | 1.5 |") && out.contains("| NULL | 2.5 |"),
        "{out}"
    );
    let csv = ok_stdout(&[
        "sql",
        "--url",
        &url,
        "--format",
        "csv",
        "SELECT k, v FROM r ORDER BY v",
    ]);
    assert_eq!(csv, "k,v\na,1.5\n,2.5\n");

    // The server's error message, and a failing exit status.
    let out = kiln(&["sql", "--url", &url, "SELECT * FROM nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope") && err.contains("HTTP 404"), "{err}");
}

#[test]
fn settings_file_sets_flags_below_env_and_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let from_file = tmp.path().join("from-file");
    let cfg = tmp.path().join("kiln.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = {:?}\nformat = \"csv\"\n",
            from_file.to_str().unwrap()
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    ok_stdout(&[
        "sql",
        "--config",
        cfg,
        "CREATE TABLE f (ts TIMESTAMP NOT NULL)",
    ]);
    assert!(
        from_file.join("catalog.json").exists(),
        "data_dir from the file"
    );
    // A flag beats the file.
    let out = ok_stdout(&[
        "sql",
        "--config",
        cfg,
        "--format",
        "json",
        "SELECT 1 AS one",
    ]);
    assert_eq!(out.trim(), "[{\"one\":1}]");
    let out = ok_stdout(&["sql", "--config", cfg, "SELECT 1 AS one"]);
    assert_eq!(out, "one\n1\n");

    std::fs::write(tmp.path().join("bad.toml"), "http_adr = \"x\"\n").unwrap();
    let out = kiln(&[
        "serve",
        "--config",
        tmp.path().join("bad.toml").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("unknown setting 'http_adr'"),
        "{err}"
    );
}
