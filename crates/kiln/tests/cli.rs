//! End-to-end tests of the embedded CLI (`kiln sql`, `kiln import`) on the real binary.

use std::path::Path;
use std::process::{Command, Output};

fn kiln(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env("KILN_LOG", "error")
        .output()
        .expect("run kiln")
}

fn sql(dir: &Path, format: &str, q: &str) -> String {
    let out = kiln(dir, &["sql", "--format", format, q]);
    assert!(
        out.status.success(),
        "{q}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn import_err(dir: &Path, file: &Path) -> String {
    let out = kiln(dir, &["import", "--table", "ev", file.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "import of {} should fail",
        file.display()
    );
    String::from_utf8_lossy(&out.stderr).to_string()
}

const DDL: &str =
    "CREATE TABLE ev (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, url VARCHAR, amount DOUBLE)";

#[test]
fn sql_formats_and_import_of_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    sql(&dir, "table", DDL);

    let csv = tmp.path().join("a.csv");
    std::fs::write(
        &csv,
        "user_id,ts,url,amount\n1,2026-05-01T10:00:00,/item/1,2.5\n2,2026-05-02T11:00:00,,\n",
    )
    .unwrap();
    let out = kiln(&dir, &["import", "--table", "ev", csv.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let nd = tmp.path().join("b.ndjson");
    std::fs::write(&nd, "{\"ts\":\"2026-05-03T00:00:00\",\"user_id\":3,\"url\":\"/cart\"}\n\n{\"ts\":\"2026-05-03T01:00:00\",\"user_id\":4,\"amount\":1.25}\n").unwrap();
    let out = kiln(&dir, &["import", "--table", "ev", nd.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Parquet written by Kiln itself (COPY TO, allowed by
    // --sql-file-access: refused without it), read back by import.
    let pq = tmp.path().join("c.parquet");
    let copy = format!(
        "COPY (SELECT ts + INTERVAL '10 day' AS ts, user_id + 100 AS user_id, url, amount FROM ev) TO '{}' STORED AS PARQUET",
        pq.display()
    );
    let out = kiln(&dir, &["sql", &copy]);
    assert!(!out.status.success() && !pq.exists());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--sql-file-access"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = tmp.path().to_str().unwrap();
    let out = kiln(&dir, &["sql", "--sql-file-access", root, &copy]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kiln(&dir, &["import", "--table", "ev", pq.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let csv_out = sql(
        &dir,
        "csv",
        "SELECT user_id, url, amount FROM ev ORDER BY user_id",
    );
    assert_eq!(
        csv_out,
        "user_id,url,amount\n1,/item/1,2.5\n2,,\n3,/cart,\n4,,1.25\n101,/item/1,2.5\n102,,\n103,/cart,\n104,,1.25\n"
    );
    let json = sql(
        &dir,
        "json",
        "SELECT count(*) AS n, sum(amount) AS s FROM ev",
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v, serde_json::json!([{"n": 8, "s": 7.5}]));
    let table = sql(&dir, "table", "SELECT count(*) AS n FROM ev");
    assert!(
        table.contains("| 8 |") && table.contains("(1 row)"),
        "{table}"
    );
}

#[test]
fn bad_files_name_the_line_and_column_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    sql(&dir, "table", DDL);
    let cases: Vec<(&str, &[u8], &[&str])> = vec![
        ("type.csv", b"ts,user_id\n2026-05-01T00:00:00,1\n2026-05-01T00:00:00,abc\n", &["type.csv", "line 3", "user_id"]),
        ("cols.csv", b"ts,user_id\n2026-05-01T00:00:00,1\n2026-05-01T00:00:00,2,3\n", &["cols.csv", "line 3"]),
        ("unknown.csv", b"ts,user_id,colour\n2026-05-01T00:00:00,1,red\n", &["line 1", "colour"]),
        ("notime.csv", b"ts,user_id\n2026-05-01T00:00:00,1\n,2\n", &["line 3", "missing time value", "'ts'"]),
        ("utf8.csv", b"ts,user_id,url\n2026-05-01T00:00:00,1,a\n2026-05-01T00:00:00,2,\xff\n", &["line 3", "'url'", "UTF-8"]),
        ("utf8.ndjson", b"{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":1}\n{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":2,\"url\":\"\xff\xfe\"}\n", &["line 2", "UTF-8"]),
        ("bad.ndjson", b"{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":1}\n{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":\"x\"}\n", &["line 2", "user_id"]),
        ("trunc.ndjson", b"{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":1}\n{\"ts\":\"2026-05-01T00:\n", &["line 2"]),
        ("nouser.ndjson", b"{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":1}\n\n{\"ts\":\"2026-05-01T00:00:00\"}\n", &["line 3", "user_id"]),
        ("extra.ndjson", b"{\"ts\":\"2026-05-01T00:00:00\",\"user_id\":1,\"colour\":1}\n", &["line 1", "colour"]),
    ];
    for (name, body, needles) in cases {
        let path = tmp.path().join(name);
        std::fs::write(&path, body).unwrap();
        let err = import_err(&dir, &path);
        for n in needles {
            assert!(
                err.contains(n),
                "{name}: error {err:?} should mention {n:?}"
            );
        }
    }
    assert_eq!(sql(&dir, "csv", "SELECT count(*) AS n FROM ev"), "n\n0\n");
    let err = import_err(&dir, Path::new("/nonexistent/x.csv"));
    assert!(err.contains("/nonexistent/x.csv"), "{err}");
}

#[test]
fn sql_errors_exit_nonzero_with_a_message() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let out = kiln(&dir, &["sql", "SELECT * FROM missing"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
    let out = kiln(&dir, &["sql", "SELEC 1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("syntax error"));
}

#[test]
fn corrupt_wal_record_stops_recovery_unless_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    // Rows stay in the WAL: no flush on close, no background flush.
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "bench",
            "write-embedded",
            "--writers",
            "2",
            "--duration",
            "1s",
            "--data-dir",
        ])
        .arg(&dir)
        .env("KILN_FLUSH_ON_CLOSE", "false")
        .env("KILN_FLUSH_AGE", "1h")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wal = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 4096, "WAL too small: {}", bytes.len());
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&wal, &bytes).unwrap();

    let count = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["sql", "--format", "csv", "--flush-on-close", "false"])
            .args(extra)
            .arg("--data-dir")
            .arg(&dir)
            .arg("SELECT count(*) FROM crash")
            .output()
            .unwrap()
    };
    let out = count(&[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let name = wal.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name) && err.contains("offset"), "{err}");
    let out = count(&["--wal-skip-corrupt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 0);
}
