//! Client conformance: the libraries BI tools and services use, driven
//! against the real binary (scripts in `tests/clients/`, installed by
//! `scripts/test.sh`). Each script asserts results, not only the absence
//! of errors.

mod common;

use common::Server;

fn check(script: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    common::client_check(&s, script);
}

#[test]
fn transactions_commit_roll_back_and_abort_as_postgresql_does() {
    check("transactions_check.py");
}

#[test]
fn sqlalchemy_connects_pools_and_commits() {
    check("sqlalchemy_check.py");
}

#[test]
fn errors_have_postgresql_sqlstates_on_every_door() {
    check("errors_check.py");
}

#[test]
fn server_side_cursors_describe_and_fetch_in_chunks() {
    check("cursors_check.py");
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[test]
fn a_slow_reader_over_the_extended_protocol_holds_memory_bounded() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let baseline = rss(s.child.id());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/slow_reader.py");
    let mut reader = std::process::Command::new("python3")
        .args([script, &s.pg_port.to_string(), "6"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(reader.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "waiting");
    // 20M rows are about 700 MB on the wire; unread, the server must stop
    // computing them once the socket is full.
    let mut peak = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        peak = peak.max(rss(s.child.id()));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        peak < baseline + (150 << 20),
        "RSS grew from {baseline} to {peak} with a client reading nothing"
    );
    reader.wait().unwrap();
    // The client left: its query stops and is recorded as cancelled.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = s.rows(
            "SELECT status FROM system.queries WHERE query LIKE '%row number%' AND query NOT LIKE '%system.queries%'",
        );
        if status == serde_json::json!([["cancelled"]]) {
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// pgjdbc (Metabase, Tableau, DBeaver): `tests/clients/jdbc/JdbcCheck.java`
/// run against the server as a single-source program (`java File.java`),
/// so there is no build step.
#[test]
fn pgjdbc_metadata_batches_transactions_and_streaming() {
    java_check("JdbcCheck.java");
}

/// Metabase's driver replayed through pgjdbc: its pool's checkout, a
/// sync's catalog queries (0.48 to later releases), fingerprints and
/// field values, and time-series questions over relative date ranges
/// (`tests/clients/jdbc/MetabaseCheck.java`).
#[test]
fn metabase_sync_fingerprints_and_questions() {
    java_check("MetabaseCheck.java");
}

/// Runs the single-source Java program `file` of `tests/clients/jdbc`
/// against a fresh server.
fn java_check(file: &str) {
    use std::process::Command;
    let (dir, classpath) = common::jdbc_classpath();
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let out = Command::new("java")
        .args(["-cp", classpath.trim(), &format!("src/main/java/{file}")])
        .arg(s.pg_port.to_string())
        .current_dir(dir)
        .output()
        .expect("java (scripts/test.sh installs a JDK)");
    common::assert_ok(&s, file, &out);
}

/// Runs `program` with `args` in `dir`, failing with its output if it
/// cannot start.
fn run_in(dir: &str, program: &str, args: &[&str], hint: &str) -> std::process::Output {
    std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} ({hint})"))
}

/// pgx v5 (Go services, Grafana's data source): `tests/clients/go/main.go`.
/// Built once into the check's `target/` (ignored by git; Go fetches the
/// module and caches the build), then run against the server. Checks listed
/// in its `knownGaps` must fail; any other failure fails the test.
#[test]
fn pgx_parameters_transactions_batches_cancel_and_streaming() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/go");
    let hint = "Go 1.25+ (scripts/test.sh expects it installed)";
    let build = run_in(dir, "go", &["build", "-o", "target/pgx-check", "."], hint);
    assert!(
        build.status.success(),
        "go build failed:\n{}\n{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let out = run_in(dir, "target/pgx-check", &[&s.pg_port.to_string()], hint);
    common::assert_ok(&s, "go/main.go (pgx)", &out);
}

/// node-postgres (`pg`, `pg-cursor`; Node services, Knex, Sequelize,
/// TypeORM): `tests/clients/node/check.js`. `npm ci` installs the locked
/// packages into its `node_modules/` (ignored by git) when missing. Checks
/// listed in its `KNOWN_GAPS` must fail; any other failure fails the test.
#[test]
fn node_postgres_parameters_types_cursors_timeouts_and_pool() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/node");
    let hint = "node and npm (scripts/test.sh installs them)";
    if !std::path::Path::new(&format!("{dir}/node_modules")).exists() {
        let ci = run_in(dir, "npm", &["ci", "--no-audit", "--no-fund"], hint);
        assert!(
            ci.status.success(),
            "npm ci failed:\n{}\n{}",
            String::from_utf8_lossy(&ci.stdout),
            String::from_utf8_lossy(&ci.stderr)
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let out = run_in(dir, "node", &["check.js", &s.pg_port.to_string()], hint);
    common::assert_ok(&s, "node/check.js (node-postgres)", &out);
}

/// SQLAlchemy 2's inspector (Superset, Alembic, schema browsers) and pandas
/// reading through an engine; checks listed in the script's `KNOWN_GAPS`
/// must fail.
#[test]
fn sqlalchemy_inspector_and_pandas_reflect_and_read() {
    check("inspect_check.py");
}

/// What Grafana's PostgreSQL data source sends: health check, query editor
/// metadata and panel queries with macros expanded; checks listed in the
/// script's `KNOWN_GAPS` must fail.
#[test]
fn grafana_queries_health_metadata_and_panels() {
    check("grafana_check.py");
}

#[test]
fn pg_stat_activity_lists_each_connection_and_what_it_runs() {
    use std::io::Write;
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    // A session that named itself, opened a transaction block, ran one
    // statement in it and waits for more.
    let mut watcher = s
        .psql_command()
        .env("PGAPPNAME", "starting")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = watcher.stdin.take().unwrap();
    input
        .write_all(b"SET application_name = 'watcher';\nBEGIN;\nSELECT 7 + 1;\n")
        .unwrap();
    input.flush().unwrap();
    let listed = "SELECT application_name, state, query, usename, datname, client_addr, \
                  backend_type, backend_start <= now(), query_start <= now(), pid > 0, \
                  xact_start BETWEEN backend_start AND now() \
                  FROM pg_stat_activity ORDER BY application_name";
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let rows = loop {
        let rows = s.psql(listed);
        if rows.contains("watcher|idle in transaction|SELECT 7 + 1") {
            break rows;
        }
        assert!(std::time::Instant::now() < until, "{rows}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Listed again: the listing that first saw the statement may have
    // taken its `now()` before the statement started (it is the listing's
    // start, as in PostgreSQL); this one started after it ended.
    let again = s.psql(listed);
    assert!(
        again.contains("watcher|idle in transaction|SELECT 7 + 1"),
        "{rows}
{again}"
    );
    let rows: Vec<&str> = again.lines().collect();
    assert_eq!(
        rows,
        [
            format!("psql|active|{listed}|postgres|kiln|127.0.0.1|client backend|t|t|t|t").as_str(),
            "watcher|idle in transaction|SELECT 7 + 1;|postgres|kiln|127.0.0.1|client backend|t|t|t|t",
        ]
    );
    // What pgAdmin's dashboard asks of each session: whom it waits for (no
    // one: Kiln takes no locks a query waits on) and for how long it has run.
    let admin = "SELECT array_to_string(pg_catalog.pg_blocking_pids(pid), ', '), \
                 cardinality(pg_blocking_pids(pid)), \
                 age(now(), backend_start) BETWEEN INTERVAL '0' AND INTERVAL '1 hour' \
                 FROM pg_stat_activity WHERE application_name = 'watcher'";
    assert_eq!(s.psql(admin).trim(), "|0|t");
    // The block ended, the session is idle again, outside a transaction.
    input.write_all(b"COMMIT;\n").unwrap();
    input.flush().unwrap();
    let ended = "SELECT state, xact_start IS NULL FROM pg_stat_activity \
                 WHERE application_name = 'watcher'";
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let row = s.psql(ended);
        if row.trim() == "idle|t" {
            break;
        }
        assert!(std::time::Instant::now() < until, "{row}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Qualified, and over HTTP: the same table.
    let n = s.rows(
        "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = 'watcher'",
    );
    assert_eq!(n[0][0], 1);
    // Over the extended protocol a session's state is published at Sync.
    let extended = extended_begin(s.pg_port);
    let state = "SELECT state FROM pg_stat_activity WHERE application_name = 'extended'";
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let row = s.psql(state);
        if row.trim() == "idle in transaction" {
            break;
        }
        assert!(std::time::Instant::now() < until, "{row}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(extended);
    // A connection that closes leaves it.
    drop(input);
    watcher.wait().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let count = "SELECT count(*) FROM pg_stat_activity";
    while s.rows(count)[0][0] != 0 {
        assert!(
            std::time::Instant::now() < until,
            "the closed session is still listed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A connection named `extended` that ran `BEGIN` over the extended
/// protocol (Parse, Bind, Execute, Sync) and was told it is in a
/// transaction block; open until dropped.
fn extended_begin(port: u16) -> std::net::TcpStream {
    use common::pg_message;
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let params = b"user\0kiln\0database\0kiln\0application_name\0extended\0\0";
    let mut frame = ((8 + params.len()) as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&196_608_i32.to_be_bytes());
    frame.extend_from_slice(params);
    frame.extend(pg_message(b'P', b"\0BEGIN\0\0\0"));
    frame.extend(pg_message(b'B', b"\0\0\0\0\0\0\0\0"));
    frame.extend(pg_message(b'E', b"\0\0\0\0\0"));
    frame.extend(pg_message(b'S', b""));
    c.write_all(&frame).unwrap();
    // ReadyForQuery in a transaction block: 'Z', length 5, 'T'.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(6).any(|w| w == b"Z\0\0\0\x05T") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "{answer:?}");
        answer.extend_from_slice(&buf[..n]);
    }
    c
}

#[test]
fn admin_tools_read_database_and_table_sizes_and_the_start_time() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &["--flush-bytes", "1KiB"]);
    let before = std::time::SystemTime::now();
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, n BIGINT)");
    let rows: String = (0..2_000)
        .map(|i| format!("{{\"ts\": \"2026-01-01T00:00:00Z\", \"n\": {i}}}\n"))
        .collect();
    let (st, v) = s.write(
        "ev",
        &[("Content-Type", "application/x-ndjson")],
        rows.as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    let segments = "SELECT coalesce(sum(segment_bytes), 0) FROM system.tables";
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while s.rows(segments)[0][0].as_i64() == Some(0) {
        assert!(std::time::Instant::now() < until, "no flush");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The bytes of every table's segments, by name and by pg_database's oid.
    let bytes = s.rows(segments)[0][0].as_i64().unwrap();
    let got = s.psql(
        "SELECT pg_database_size(current_database()), pg_size_pretty(pg_database_size('kiln')), \
         (SELECT pg_database_size(oid) FROM pg_database LIMIT 1), pg_size_pretty(1000000::bigint)",
    );
    let pretty = if bytes < 10_240 {
        format!("{bytes} bytes")
    } else {
        format!("{} kB", (bytes / 512 + 1) / 2)
    };
    assert_eq!(got.trim(), format!("{bytes}|{pretty}|{bytes}|977 kB"));
    // A table's own segments, by the oid pg_class gives it (pgAdmin's and
    // DBeaver's table lists, psql's `\dt+`) and by its name; an oid no
    // table has is NULL, a table with no segments 0.
    s.sql("CREATE TABLE empty (ts TIMESTAMP NOT NULL)");
    let own = "(SELECT segment_bytes FROM system.tables WHERE table_name = c.relname)";
    let got = s.psql(&format!(
        "SELECT c.relname, pg_relation_size(c.oid) = {own}, pg_total_relation_size(c.oid), \
         pg_table_size(c.oid) = pg_relation_size(c.oid, 'main') \
         FROM pg_class c WHERE c.relname IN ('ev', 'empty') ORDER BY 1"
    ));
    let ev_bytes = s.rows("SELECT segment_bytes FROM system.tables WHERE table_name = 'ev'")[0][0]
        .as_i64()
        .unwrap();
    assert!(ev_bytes > 0);
    assert_eq!(got.trim(), format!("empty|t|0|t\nev|t|{ev_bytes}|t"));
    let got = s.psql(
        "SELECT pg_total_relation_size('ev'::regclass) = pg_relation_size('public.ev'), \
         pg_relation_size('ev') > 0, pg_relation_size(2147483000) IS NULL",
    );
    assert_eq!(got.trim(), "t|t|t");
    let out = s.psql_output(&["-c", "SELECT pg_relation_size('nosuch')"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("relation \"nosuch\" does not exist"),
        "{err}"
    );
    let out = s.psql_output(&["-c", "SELECT pg_database_size('other')"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("database \"other\" does not exist"),
        "{err}"
    );
    // Started before this test's first statement, not after its last.
    let started = s.psql("SELECT extract(epoch FROM pg_postmaster_start_time())");
    let started: f64 = started.trim().parse().unwrap();
    let epoch = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    assert!(
        started <= epoch(before) && started > epoch(before) - 60.0,
        "{started}"
    );
    // The same functions over HTTP.
    let v = s.rows("SELECT pg_size_pretty(10485248), pg_database_size('kiln')");
    assert_eq!(v, serde_json::json!([["10 MB", bytes]]));
}
