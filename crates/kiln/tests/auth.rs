//! Authentication and privileges (the security issue's item 2) against
//! the real binary: SCRAM-SHA-256 logins with psql and psycopg, HTTP Basic
//! and bearer tokens, a read-only user's refusals on every door, tokens
//! that expire or are revoked, and `--auth` turning itself on off loopback.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use common::Server;
use serde_json::Value;

const ADMIN_PW: &str = "admin pw 1";

/// A server with authentication on; the admin password in a file.
fn start(dir: &Path) -> Server {
    start_with(dir, &[])
}

fn start_with(dir: &Path, extra: &[&str]) -> Server {
    let pw = dir.join("admin-password");
    std::fs::write(&pw, format!("{ADMIN_PW}\n")).unwrap();
    let mut args = vec![
        "--auth",
        "on",
        "--admin-password-file",
        pw.to_str().unwrap(),
    ];
    args.extend(extra);
    Server::start(&dir.join("data"), &args)
}

/// psql as `user` with `password`, verbose errors, `-c sql`.
fn psql(s: &Server, user: &str, password: &str, sql: &str, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={} user={user} dbname=kiln sslmode=disable",
            s.pg_port
        ))
        .args([
            "-At",
            "-v",
            "VERBOSITY=verbose",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn basic(user: &str, password: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {b64}")
}

/// `POST /v1/sql` with `authorization` (if any): status and JSON body.
fn http(s: &Server, authorization: Option<&str>, sql: &str) -> (u16, Value) {
    let mut headers = vec![("Content-Type", "application/sql")];
    if let Some(a) = authorization {
        headers.push(("Authorization", a));
    }
    let (status, body) = s.request("POST", "/v1/sql", &headers, sql.as_bytes());
    let v = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    (status, v)
}

/// A labelled counter of `/metrics`.
fn metric(s: &Server, line_prefix: &str) -> f64 {
    let (_, body) = s.request("GET", "/metrics", &[], b"");
    let text = String::from_utf8(body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix))
        .unwrap_or_else(|| panic!("no {line_prefix} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn logins_are_checked_on_both_protocols() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(tmp.path());

    for (user, pw) in [("admin", "wrong"), ("nobody", ADMIN_PW)] {
        let out = psql(&s, user, pw, "SELECT 1", "");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "password authentication failed for user \"{user}\""
            )),
            "{err}"
        );
    }
    assert_eq!(
        ok(psql(&s, "admin", ADMIN_PW, "SELECT 41 + 1", "")).trim(),
        "42"
    );

    let (status, v) = http(&s, None, "SELECT 1");
    assert_eq!(status, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthenticated");
    let (head_status, head) = common::request_head(
        &s.http,
        "POST",
        "/v1/sql",
        &[("Content-Type", "application/json")],
    );
    assert_eq!(head_status, 401);
    assert!(head.contains("www-authenticate: basic"), "{head}");
    assert_eq!(http(&s, Some(&basic("admin", "wrong")), "SELECT 1").0, 401);
    assert_eq!(http(&s, Some("Bearer kiln_not_a_token"), "SELECT 1").0, 401);
    let (status, v) = http(&s, Some(&basic("admin", ADMIN_PW)), "SELECT 7 AS x");
    assert_eq!((status, v["rows"][0][0].as_i64()), (200, Some(7)), "{v}");
    // Probes and the metrics scraper need no credentials.
    assert_eq!(s.request("GET", "/ready", &[], b"").0, 200);
    assert_eq!(metric(&s, "kiln_auth_failures_total{protocol=\"pg\"}"), 2.0);
    assert_eq!(
        metric(&s, "kiln_auth_failures_total{protocol=\"http\"}"),
        4.0
    );
    // Refusals are logged without the password.
    let log = s.log.lock().unwrap().clone();
    assert!(log.contains("login refused"), "{log}");
    assert!(!log.contains(ADMIN_PW), "{log}");

    // psycopg: SCRAM, account statements and privileges over the extended protocol.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/auth_check.py");
    let out = Command::new("python3")
        .args([script, &s.pg_port.to_string(), "0", ADMIN_PW])
        .output()
        .expect("python3 with psycopg");
    common::assert_ok(&s, "auth_check.py", &out);
}

#[test]
fn a_read_only_user_reads_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    // Server files allowed: COPY TO a file is refused for want of a
    // privilege, not because SQL may use no file.
    let files = tmp.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let s = start_with(tmp.path(), &["--sql-file-access", files.to_str().unwrap()]);
    let admin = |sql: &str| ok(psql(&s, "admin", ADMIN_PW, sql, ""));
    admin("CREATE TABLE ev (ts TIMESTAMP NOT NULL, v BIGINT)");
    admin("INSERT INTO ev VALUES ('2026-01-01T00:00:00', 1)");
    admin("CREATE USER reader PASSWORD 'reader-secret'");
    admin("GRANT SELECT ON ev TO reader");
    let reader = |sql: &str, stdin: &str| psql(&s, "reader", "reader-secret", sql, stdin);

    assert_eq!(ok(reader("SELECT count(*) FROM ev", "")).trim(), "1");
    assert_eq!(
        common::sqlstate_of(&reader("INSERT INTO ev VALUES (now(), 2)", "")),
        "42501"
    );
    assert_eq!(
        common::sqlstate_of(&reader("CREATE TABLE t2 (ts TIMESTAMP NOT NULL)", "")),
        "42501"
    );
    assert_eq!(common::sqlstate_of(&reader("DROP TABLE ev", "")), "42501");
    assert_eq!(
        common::sqlstate_of(&reader(
            "COPY ev FROM STDIN WITH (FORMAT csv)",
            "2026-01-01,3\n"
        )),
        "42501"
    );
    assert_eq!(
        common::sqlstate_of(&reader("CREATE USER x PASSWORD 'y'", "")),
        "42501"
    );
    assert_eq!(
        common::sqlstate_of(&reader("SELECT pg_cancel_backend(1)", "")),
        "42501"
    );
    let out = files.join("out.csv");
    let copy_to = format!("COPY ev TO '{}'", out.display());
    assert_eq!(common::sqlstate_of(&reader(&copy_to, "")), "42501");
    assert!(!out.exists());
    admin(&copy_to);
    assert!(out.exists(), "an admin may");
    assert_eq!(ok(reader("SELECT count(*) FROM ev", "")).trim(), "1");
    assert_eq!(
        ok(reader("SELECT current_user, session_user", "")).trim(),
        "reader|reader"
    );
    assert_eq!(admin("SELECT current_user").trim(), "admin");

    // HTTP, with the same user: reads yes, writes no until granted.
    let auth = basic("reader", "reader-secret");
    let (status, v) = http(&s, Some(&auth), "SELECT count(*) FROM ev");
    assert_eq!((status, v["rows"][0][0].as_i64()), (200, Some(1)), "{v}");
    let (_, v) = http(&s, Some(&auth), "SELECT current_user");
    assert_eq!(v["rows"][0][0], "reader", "{v}");
    let row = br#"{"ts":"2026-01-01T00:00:00Z","v":5}"#;
    let write = |auth: &str| {
        s.write(
            "ev",
            &[
                ("Content-Type", "application/x-ndjson"),
                ("Authorization", auth),
            ],
            row,
        )
    };
    let (status, v) = write(&auth);
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("INSERT"),
        "{v}"
    );
    assert_eq!(http(&s, Some(&auth), "DROP TABLE ev").0, 403);
    admin("GRANT INSERT ON ev TO reader");
    assert_eq!(write(&auth).0, 200);
    assert_eq!(ok(reader("SELECT count(*) FROM ev", "")).trim(), "2");
    let denied = metric(&s, "kiln_permission_denied_total");
    assert_eq!(denied, 9.0);

    // The password is in no log and no system table.
    let texts = admin("SELECT query FROM system.queries");
    assert!(
        texts.contains("CREATE USER reader PASSWORD '***'"),
        "{texts}"
    );
    assert!(!texts.contains("reader-secret"), "{texts}");
    assert!(!s.log.lock().unwrap().contains("reader-secret"));
    let file = std::fs::read_to_string(tmp.path().join("data/users.json")).unwrap();
    assert!(!file.contains("reader-secret"), "{file}");
}

#[test]
fn tokens_expire_and_are_revoked() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(tmp.path());
    let admin = |sql: &str| ok(psql(&s, "admin", ADMIN_PW, sql, ""));
    admin("CREATE USER bot PASSWORD 'bot-pw'");
    admin("GRANT SELECT ON ALL TABLES TO bot");
    let token = |name: &str, expiry: &str| {
        let row = admin(&format!("CREATE TOKEN {name} FOR bot {expiry}"));
        format!("Bearer {}", row.trim().split('|').nth(2).unwrap())
    };
    let short = token("short", "EXPIRES IN '2s'");
    let long = token("long", "");
    assert_eq!(http(&s, Some(&short), "SELECT 1").0, 200);
    assert_eq!(http(&s, Some(&long), "SELECT 1").0, 200);
    std::thread::sleep(Duration::from_millis(2500));
    let (status, v) = http(&s, Some(&short), "SELECT 1");
    assert_eq!(status, 401, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("expired"),
        "{v}"
    );
    assert_eq!(http(&s, Some(&long), "SELECT 1").0, 200);
    // A token logs in as its user.
    let (_, v) = http(&s, Some(&long), "SELECT current_user");
    assert_eq!(v["rows"][0][0], "bot", "{v}");
    let shown = admin("SHOW TOKENS");
    assert!(
        shown.contains("short|bot|") && shown.contains("|t\n"),
        "{shown}"
    );
    assert!(
        !shown.contains("kiln_"),
        "SHOW TOKENS shows no token: {shown}"
    );
    admin("DROP TOKEN long");
    let (status, v) = http(&s, Some(&long), "SELECT 1");
    assert_eq!(status, 401, "{v}");
    // A token is a login, not a privilege: the user's grants still apply.
    let ddl = token("ddl", "");
    assert_eq!(
        http(&s, Some(&ddl), "CREATE TABLE z (ts TIMESTAMP NOT NULL)").0,
        403
    );
    // Users and tokens survive a restart.
    assert!(s.terminate().success());
    let s = start(tmp.path());
    assert_eq!(http(&s, Some(&ddl), "SELECT 1").0, 200);
    assert_eq!(http(&s, Some(&long), "SELECT 1").0, 401);
}

#[test]
fn auth_turns_on_off_loopback_and_needs_an_admin_password() {
    let tmp = tempfile::tempdir().unwrap();
    let serve = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.args([
            "serve",
            "--http-addr",
            "0.0.0.0:0",
            "--pg-addr",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(tmp.path().join("data"));
        c
    };
    let out = serve().env_remove("KILN_ADMIN_PASSWORD").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin-password"), "{err}");
    assert!(err.contains("not on loopback"), "{err}");

    // With the password from the environment it starts, and asks for logins.
    let pw = "env pw";
    let child = serve()
        .env("KILN_ADMIN_PASSWORD", pw)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let s = Server::adopt(child);
    let port = s.http.rsplit(':').next().unwrap();
    let local = format!("127.0.0.1:{port}");
    let (status, _) = common::request(
        &local,
        "POST",
        "/v1/sql",
        &[("Content-Type", "application/sql")],
        b"SELECT 1",
    );
    assert_eq!(status, 401);
    let auth = basic("admin", pw);
    let (status, _) = common::request(
        &local,
        "POST",
        "/v1/sql",
        &[
            ("Content-Type", "application/sql"),
            ("Authorization", &auth),
        ],
        b"SELECT 1",
    );
    assert_eq!(status, 200);
}
