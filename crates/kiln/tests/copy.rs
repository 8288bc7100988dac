//! End-to-end: `COPY ... FROM STDIN` and `COPY ... TO STDOUT` from psql (`\copy` and plain COPY) with
//! the real binary, in CSV and text formats; a bad value fails the whole
//! copy with its line named, and nothing of it is written.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Server, pg_message, raw_pg};

const DDL: &str =
    "CREATE TABLE ev (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, url VARCHAR, amount DOUBLE)";

/// Runs psql with `cmd`, feeding `stdin`; returns (success, stdout, stderr).
fn psql_with_stdin(s: &Server, cmd: &str, stdin: &str) -> (bool, String, String) {
    let mut child = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.pg_port.to_string(),
            "-U",
            "postgres",
            "-At",
        ])
        .args([
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            cmd,
        ])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGSSLMODE", "disable")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run psql (scripts/test.sh installs postgresql-client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn psql_copies_csv_and_text_atomically() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    s.sql(DDL);

    // psql's \copy: CSV with a header, a column subset, an empty field as NULL.
    let (ok, out, err) = psql_with_stdin(
        &s,
        "\\copy ev (ts, user_id, url) from stdin csv header",
        "ts,user_id,url\n2026-05-01 10:00:00,1,/a\n2026-05-01 11:00:00,2,\n",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "COPY 2\n");

    // Plain COPY in the text format: tabs, \N for NULL, backslash escapes.
    let (ok, out, err) = psql_with_stdin(
        &s,
        "COPY ev FROM STDIN",
        "2026-05-02 00:00:00\t3\t/tab\\there\t1.5\n2026-05-02 00:00:00\t4\t\\N\t\\N\n",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "COPY 2\n");

    let all = "SELECT user_id, url, amount FROM ev ORDER BY user_id";
    let want = serde_json::json!([
        [1, "/a", null],
        [2, null, null],
        [3, "/tab\there", 1.5],
        [4, null, null]
    ]);
    assert_eq!(s.rows(all), want);

    // A bad value on line 3 fails the whole copy, names the line and column,
    // and writes nothing (line 2 was fine).
    let (ok, _, err) = psql_with_stdin(
        &s,
        "COPY ev (ts, user_id) FROM STDIN WITH (FORMAT csv, HEADER true)",
        "ts,user_id\n2026-05-03 00:00:00,5\n2026-05-03 00:00:00,x\n",
    );
    assert!(!ok);
    assert!(err.contains("line 3") && err.contains("user_id"), "{err}");
    // A wrong number of fields, a missing time value: the same.
    let (ok, _, err) = psql_with_stdin(&s, "COPY ev FROM STDIN", "2026-05-03 00:00:00\t6\n");
    assert!(!ok);
    assert!(err.contains("line 1: expected 4 columns, got 2"), "{err}");
    let (ok, _, err) = psql_with_stdin(&s, "COPY ev (user_id) FROM STDIN", "7\n");
    assert!(!ok);
    assert!(err.contains("line 1") && err.contains("ts"), "{err}");
    assert_eq!(s.rows(all), want);

    // Unknown tables and columns, COPY TO and files are refused clearly.
    let (ok, _, err) = psql_with_stdin(&s, "COPY nope FROM STDIN", "");
    assert!(!ok && err.contains("42P01"), "{err}");
    let (ok, _, err) = psql_with_stdin(&s, "COPY ev (nope) FROM STDIN", "");
    assert!(!ok && err.contains("no column 'nope'"), "{err}");
    let (ok, _, err) = psql_with_stdin(&s, "COPY ev FROM '/etc/passwd'", "");
    assert!(!ok && err.contains("42501"), "{err}");

    // The server serves on, and the copied rows survive a restart.
    assert_eq!(s.psql("SELECT count(*) FROM ev"), "4\n");
    let status = s.terminate();
    assert!(status.success(), "exit status {status}");
    let s = Server::start(&tmp.path().join("data"), &[]);
    assert_eq!(s.rows(all), want);
}

#[test]
fn copy_to_stdout_writes_what_copy_from_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let ddl = "(ts TIMESTAMP NOT NULL, n BIGINT, s VARCHAR, b BOOLEAN)";
    s.sql(&format!("CREATE TABLE src {ddl}"));
    s.sql(&format!("CREATE TABLE dst {ddl}"));
    s.sql(
        "INSERT INTO src VALUES ('2026-01-01 00:00:00', 1, 'tab\there, back\\slash', true), \
         ('2026-01-02 00:00:00.250', NULL, '', false), ('2026-01-03 00:00:00', 3, NULL, NULL)",
    );
    // psql's \copy of a query, CSV with a header: quoting, empty vs NULL.
    let (ok, out, err) = psql_with_stdin(
        &s,
        "\\copy (SELECT n, s, b FROM src ORDER BY ts) to stdout csv header",
        "",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "n,s,b\n1,\"tab\there, back\\slash\",t\n,\"\",f\n3,,\n");
    // Text format out of one table and into another: the same rows.
    let (ok, text, err) = psql_with_stdin(&s, "COPY src TO STDOUT", "");
    assert!(ok, "{err}");
    assert!(text.contains("tab\\there, back\\\\slash"), "{text}");
    assert!(text.contains("2026-01-02 00:00:00.250\t\\N\t\tf"), "{text}");
    let (ok, out, err) = psql_with_stdin(&s, "COPY dst FROM STDIN", &text);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "COPY 3");
    let rows = |t: &str| s.rows(&format!("SELECT * FROM {t} ORDER BY ts"));
    assert_eq!(rows("src"), rows("dst"));
    // Files stay out of reach, and the statement's errors are typed.
    let (ok, _, err) = psql_with_stdin(&s, "COPY src TO '/tmp/kiln-copy-out'", "");
    assert!(!ok && err.contains("42501"), "{err}");
    assert!(!std::path::Path::new("/tmp/kiln-copy-out").exists());
    let (ok, _, err) = psql_with_stdin(&s, "COPY nope TO STDOUT", "");
    assert!(!ok && err.contains("42P01"), "{err}");
}

/// The types and bodies of the messages in `answer`, a server's bytes.
fn messages(answer: &[u8]) -> Vec<(u8, String)> {
    let mut out = vec![];
    let mut rest = answer;
    while rest.len() >= 5 {
        let len = i32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let body = &rest[5..(1 + len).min(rest.len())];
        out.push((rest[0], String::from_utf8_lossy(body).into_owned()));
        rest = &rest[(1 + len).min(rest.len())..];
    }
    out
}

#[test]
fn a_copy_that_fails_part_way_ends_with_its_error_and_the_session_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    // Rows are sent before the failing one: the copy has begun.
    let copy = "COPY (SELECT 10 / (x - 50000) FROM generate_series(1, 100000) t(x)) TO STDOUT";
    let (ok, out, err) = psql_with_stdin(&s, copy, "");
    assert!(!ok && err.contains("22012"), "{err}");
    assert!(!err.contains("unexpected"), "{err}");
    assert!(out.starts_with("0\n0\n"), "{}", &out[..out.len().min(100)]);
    // Raw messages, then a query on the same connection: the copy ends
    // with its error alone, never with CopyFail ('f'), which only a client
    // may send.
    let mut frames = pg_message(b'Q', format!("{copy}\0").as_bytes());
    frames.extend(pg_message(b'Q', b"SELECT 41 + 1\0"));
    frames.extend(pg_message(b'X', b""));
    let answer = messages(&raw_pg(s.pg_port, &frames));
    let kinds = copy_cut_by_division_by_zero(&answer);
    let tail = kinds.split_once("ZH").map(|(_, t)| t);
    assert_eq!(tail, Some("EZTDCZ"), "{kinds}");
    assert!(
        answer.iter().any(|(k, b)| *k == b'D' && b.ends_with("42")),
        "{kinds}"
    );
    // After another statement of the same query: that statement's rows,
    // then the copy, ending the same way.
    let mut frames = pg_message(b'Q', format!("SELECT 41 + 1; {copy}\0").as_bytes());
    frames.extend(pg_message(b'X', b""));
    let answer = messages(&raw_pg(s.pg_port, &frames));
    let kinds = copy_cut_by_division_by_zero(&answer);
    assert!(kinds.ends_with("ZTDCHEZ"), "{kinds}");
}

/// Checks that `answer` holds one error, a division by zero, after at
/// least 8,192 rows of copy data; the kinds of its other messages.
fn copy_cut_by_division_by_zero(answer: &[(u8, String)]) -> String {
    let errors: Vec<&String> = answer
        .iter()
        .filter(|(k, _)| *k == b'E')
        .map(|(_, b)| b)
        .collect();
    assert!(
        errors.len() == 1 && errors[0].contains("C22012"),
        "{errors:?}"
    );
    let rows = answer.iter().filter(|(k, _)| *k == b'd').count();
    assert!(rows >= 8192, "{rows} rows before the error");
    answer
        .iter()
        .filter(|(k, _)| *k != b'd')
        .map(|(k, _)| *k as char)
        .collect()
}

#[test]
fn copy_from_decodes_octal_and_hex_escapes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    s.sql(DDL);
    let (ok, _, err) = psql_with_stdin(
        &s,
        "COPY ev (ts, user_id, url) FROM STDIN",
        "2026-05-01 00:00:00\t1\t\\101\\x42C\n",
    );
    assert!(ok, "{err}");
    assert_eq!(s.psql("SELECT url FROM ev"), "ABC\n");
}
