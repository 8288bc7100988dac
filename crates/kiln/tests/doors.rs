//! One door: the same statements sent through every entry point (HTTP, the
//! PostgreSQL simple protocol with psql, the extended protocol with
//! psycopg, COPY, the embedded CLI) are registered in `system.queries` and
//! answered under the same rules: Kiln's DDL, INSERT checks, unknown tables
//! and the query timeout give the same error on each door.

mod common;

use std::process::Command;

use common::Server;
use serde_json::Value;

const DDL: &str = "CREATE TABLE d (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, name VARCHAR)";

/// A statement that runs until the query timeout stops it.
const LONG: &str = "SELECT count(*) FROM generate_series(1, 1000000000000)";

/// Probes whose outcome must not depend on the door: (statement, HTTP
/// status, SQLSTATE; "" when it succeeds).
const PROBES: [(&str, u16, &str); 5] = [
    ("SELECT count(*) FROM d", 200, ""),
    ("SELECT count(*) FROM no_such_table", 404, "42P01"),
    (
        "INSERT INTO d VALUES ('2026-05-01 00:00:00', NULL, 'x')",
        400,
        "23502",
    ),
    ("CREATE TABLE c AS SELECT * FROM d", 400, "0A000"),
    (LONG, 504, "57014"),
];

/// (protocol, status) of each recorded query whose text is `sql`.
fn recorded(s: &Server, sql: &str) -> Vec<(String, String)> {
    let q = format!(
        "SELECT protocol, status FROM system.queries WHERE query = '{}' ORDER BY protocol",
        sql.replace('\'', "''")
    );
    s.rows(&q)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect()
}

#[test]
fn every_door_registers_its_queries_and_applies_the_same_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &["--query-timeout", "2s"]);
    s.sql(DDL);

    let statements: Vec<&str> = PROBES.iter().map(|p| p.0).collect();
    let ext = common::pg_extended(&s, &statements);
    for ((sql, http_status, sqlstate), ext) in PROBES.iter().zip(&ext) {
        let (status, body) = s.request(
            "POST",
            "/v1/sql",
            &[("Content-Type", "text/plain")],
            sql.as_bytes(),
        );
        assert_eq!(
            status,
            *http_status,
            "HTTP {sql}: {}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(
            common::psql_sqlstate(&s, sql),
            *sqlstate,
            "psql (simple protocol): {sql}"
        );
        let ext_state = ext.get("sqlstate").and_then(Value::as_str).unwrap_or("");
        assert_eq!(ext_state, *sqlstate, "psycopg (extended protocol): {ext}");
    }

    // Each door registered each probe: planning errors and timeouts
    // included, with the same final status.
    for (sql, _, sqlstate) in PROBES {
        let seen = recorded(&s, sql);
        let protocols: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(protocols, ["http", "pg", "pg"], "{sql}: {seen:?}");
        let want = match sqlstate {
            "" => "ok",
            "57014" => "timeout",
            _ => "error",
        };
        assert!(seen.iter().all(|(_, st)| st == want), "{sql}: {seen:?}");
    }

    // COPY FROM STDIN is a query at the same door.
    let csv = tmp.path().join("rows.csv");
    std::fs::write(
        &csv,
        "ts,id,name\n2026-05-01 00:00:00,1,a\n2026-05-02 00:00:00,2,b\n",
    )
    .unwrap();
    let copy = format!("\\copy d from '{}' csv header", csv.display());
    assert_eq!(s.psql(&copy).trim(), "COPY 2");
    let copies =
        s.rows("SELECT protocol, status, rows FROM system.queries WHERE query LIKE 'COPY d%'");
    assert_eq!(copies, serde_json::json!([["pg", "ok", 2]]), "{copies}");
    assert_eq!(s.rows("SELECT count(*) FROM d"), serde_json::json!([[2]]));
    s.terminate();

    // The embedded CLI goes through the same door, with the same checks.
    let kiln = |sql: &str| {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["sql", "--format", "csv", "--data-dir"])
            .arg(tmp.path().join("data"))
            .arg(sql)
            .output()
            .unwrap()
    };
    let out = kiln("SELECT count(*) FROM d; SELECT protocol, status FROM system.queries");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("embedded,running"), "{text}");
    let refused = kiln("CREATE TABLE c AS SELECT * FROM d");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("INSERT INTO it ... SELECT"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// A query like one already planned, differing only in its values, runs
/// unparsed through the shape its text learned, on both doors that take
/// values written in; each answer is the one the text parsed gives (a
/// block comment keeps a text from any template), with PostgreSQL's
/// column labels.
#[test]
fn texts_like_one_already_planned_run_unparsed_with_their_own_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    s.sql(DDL);
    s.sql(
        "INSERT INTO d VALUES ('2026-05-01 00:00:00', 1, 'a'), ('2026-05-01 00:00:00', 2, 'b'), \
         ('2026-05-02 00:00:00', 3, 'c'), ('2026-05-03 00:00:00', 4, 'it''s')",
    );
    let text = |id: i64, name: &str| {
        format!(
            "SELECT count(*), min(name), 'k' AS k FROM d WHERE id >= {id} AND name <> '{}'",
            name.replace('\'', "''")
        )
    };
    let parsed = |sql: &str| format!("{sql} /* parsed */");
    let values = [
        (1, "a"),
        (2, "zz"),
        (0, "it's"),
        (3, "c"),
        (5, "a"),
        (4, "b"),
    ];
    let unparsed = || s.metric("kiln_plan_cache_unparsed_runs_total");

    let before = unparsed();
    for (id, name) in values {
        let sql = text(id, name);
        assert_eq!(s.rows(&sql), s.rows(&parsed(&sql)), "HTTP {sql}");
    }
    // The shape is planned at the second text and learned then; the
    // texts of the same template after it ran unparsed.
    let http = unparsed() - before;
    assert_eq!(http, (values.len() - 2) as f64);

    let psql = |sql: &str| {
        let out = s.psql_output(&["-P", "tuples_only=off", "-c", sql]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for (id, name) in values {
        let sql = text(id, name);
        let answer = psql(&sql);
        assert!(answer.starts_with("count|min|k\n"), "{answer}");
        assert_eq!(answer, psql(&parsed(&sql)), "psql {sql}");
    }
    // Its shape was kept by then (the same statement as over HTTP), so
    // the first text learned it.
    assert_eq!(unparsed() - before - http, (values.len() - 1) as f64);

    // Rows written since are counted; a value that would not compare as
    // written (1.5 is no BIGINT) is parsed and planned as written.
    s.sql("INSERT INTO d VALUES ('2026-05-04 00:00:00', 9, 'z')");
    let runs = unparsed();
    for sql in [text(9, "a"), text(1, "a").replace(">= 1", ">= 1.5")] {
        assert_eq!(s.rows(&sql), s.rows(&parsed(&sql)), "HTTP {sql}");
        assert_eq!(psql(&sql), psql(&parsed(&sql)), "psql {sql}");
    }
    assert_eq!(unparsed() - runs, 2.0);
    assert_eq!(s.rows(&text(9, "a")), serde_json::json!([[1, "z", "k"]]));

    // Time bounds written as typed strings (`TIMESTAMP '...'`, `DATE
    // '...'`), as Tableau and Looker write them, parsed by a template, as
    // Superset writes them, or shifted by an interval with the end written
    // twice, as dashboards write a range relative to its end, run unparsed
    // too.
    let forms: [fn(u32, u32) -> String; 3] = [
        |from, to| {
            format!(
                "SELECT count(*), min(name) FROM d WHERE ts >= TIMESTAMP '2026-05-0{from} 00:00:00' \
                 AND ts < DATE '2026-05-0{to}'"
            )
        },
        |from, to| {
            format!(
                "SELECT count(*), min(name) FROM d WHERE ts >= \
                 TO_TIMESTAMP('2026-05-0{from} 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') \
                 AND ts < TO_DATE('2026-05-0{to}', 'YYYY-MM-DD')"
            )
        },
        |from, to| {
            format!(
                "SELECT count(*), min(name) FROM d WHERE ts >= '2026-05-0{from}' \
                 AND ts < CAST('2026-05-0{to}' AS TIMESTAMP) - INTERVAL '0 days' \
                 AND ts - INTERVAL '1 day' < '2026-05-0{to}'"
            )
        },
    ];
    let ranges = [(1, 2), (1, 5), (2, 4), (3, 5), (4, 5), (2, 3)];
    for form in forms {
        let runs = unparsed();
        for (from, to) in ranges {
            let sql = form(from, to);
            assert_eq!(s.rows(&sql), s.rows(&parsed(&sql)), "HTTP {sql}");
        }
        let http = unparsed() - runs;
        assert_eq!(http, (ranges.len() - 2) as f64, "{}", form(1, 2));
        for (from, to) in ranges {
            let sql = form(from, to);
            assert_eq!(psql(&sql), psql(&parsed(&sql)), "psql {sql}");
        }
        assert_eq!(unparsed() - runs - http, (ranges.len() - 1) as f64);
        assert_eq!(s.rows(&form(1, 5)), serde_json::json!([[5, "a"]]));
    }

    // The same text sent with its values apart (HTTP params) runs
    // unparsed from its third request on (kept at the second), each with
    // its own values; a request with a value missing is parsed and names it.
    let with_params = |params: Value| {
        let body = serde_json::json!({
            "sql": "SELECT count(*), min(name) FROM d WHERE id >= $1 AND name <> $2",
            "params": params,
        });
        let (status, body) = s.request(
            "POST",
            "/v1/sql",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        (status, serde_json::from_slice::<Value>(&body).unwrap())
    };
    let runs = unparsed();
    for (id, name) in values {
        let (status, answer) = with_params(serde_json::json!([id, name]));
        assert_eq!(status, 200, "{answer}");
        let sql = format!(
            "SELECT count(*), min(name) FROM d WHERE id >= {id} AND name <> '{}'",
            name.replace('\'', "''")
        );
        assert_eq!(answer["rows"], s.rows(&parsed(&sql)), "{sql}");
    }
    assert_eq!(unparsed() - runs, (values.len() - 2) as f64);
    let (status, answer) = with_params(serde_json::json!([1]));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("$2"), "{answer}");
}

/// PostgreSQL's `EXPLAIN` options over psql and HTTP: a format named as PostgreSQL
/// names it is the one answered (DataFusion's planner ignored the options
/// list and failed on `FORMAT JSON` with XX000); options DataFusion lacks
/// are refused by name.
#[test]
fn postgresql_explain_options_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql(DDL);
    for sql in [
        "EXPLAIN (FORMAT JSON) SELECT count(*) FROM d",
        "EXPLAIN FORMAT JSON SELECT count(*) FROM d",
    ] {
        let out = s.psql(sql);
        assert!(out.contains("\"Node Type\": \"Aggregate\""), "{sql}: {out}");
    }
    // HTTP reads them alike (DataFusion's parser takes its own names only).
    for sql in [
        "EXPLAIN (FORMAT JSON) SELECT count(*) FROM d",
        "EXPLAIN FORMAT JSON SELECT count(*) FROM d",
    ] {
        let rows = s.rows(sql).to_string();
        assert!(rows.contains("Node Type"), "{sql}: {rows}");
    }
    let out = s.psql("EXPLAIN (ANALYZE, FORMAT TEXT) SELECT count(*) FROM d");
    assert!(out.contains("Plan with Metrics"), "{out}");
    let out = s.psql("EXPLAIN (FORMAT TREE) SELECT count(*) FROM d");
    assert!(out.contains('┌'), "{out}");
    assert_eq!(
        common::psql_sqlstate(&s, "EXPLAIN (FORMAT YAML) SELECT 1"),
        "42601"
    );
    assert_eq!(
        common::psql_sqlstate(&s, "EXPLAIN (BUFFERS) SELECT 1"),
        "0A000"
    );
}
