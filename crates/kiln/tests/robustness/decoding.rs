//! Write bodies that decode into far more than they are, against the real
//! binary: each is refused before its rows are built, and the server's
//! memory stays within the bound one write may take.

use serde_json::json;

use crate::common::{self, Server};
use crate::peak_rss_kib;

#[test]
fn a_write_whose_rows_decode_past_what_one_write_holds_is_refused_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, url VARCHAR, amount DOUBLE)");
    let arrow = [("Content-Type", "application/vnd.apache.arrow.stream")];
    let parquet = [("Content-Type", "application/vnd.apache.parquet")];
    // A dictionary's one 100,000-byte value that 12,000 rows refer to
    // (1.2 GB once cast, from a body of 150 KB), as an Arrow stream and as
    // a Parquet file that does not say to read it as a dictionary; and a
    // column of no values of 2^28 rows (8 GiB once the table's four
    // columns are filled).
    for (headers, body, bytes) in [
        (
            &arrow,
            common::dictionary_ipc("x".repeat(100_000), 12_000),
            1_200_000_000,
        ),
        (
            &parquet,
            common::dictionary_parquet("x".repeat(100_000), 12_000),
            1 << 30,
        ),
        (&arrow, common::null_ipc(1 << 28), (4 * 8) << 28),
    ] {
        assert!(body.len() < 1 << 20, "{}", body.len());
        let (st, v) = s.write("ev", headers, &body);
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (413, Some("body_too_large")),
            "{v}"
        );
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.ends_with("bytes one write may hold"), "{msg}");
        let took: u64 = msg.split(' ').nth(7).unwrap().parse().unwrap();
        assert!(took >= bytes, "{msg}");
    }
    let hwm = peak_rss_kib(s.child.id());
    assert!(hwm < 1024 * 1024, "peak RSS {hwm} KiB");
    // Nothing written; a dictionary that fits is.
    let (st, v) = s.write("ev", &arrow, &common::dictionary_ipc("/d".into(), 3));
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[3]]));
}

#[test]
fn a_parquet_page_that_inflates_past_its_declared_size_is_refused_before_it_is_inflated() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, amount DOUBLE)");
    // A page that declares 3.5 MB and inflates to 3.2 GB.
    let body = common::gzip_bomb_parquet(3 << 30);
    assert!(body.len() < 4 << 20, "{}", body.len());
    let (st, v) = s.write(
        "ev",
        &[("Content-Type", "application/vnd.apache.parquet")],
        &body,
    );
    let hwm = peak_rss_kib(s.child.id());
    assert!(hwm < 1024 * 1024, "peak RSS {hwm} KiB");
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("invalid_data")),
        "{v}"
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("column 'amount' in row group 0: a GZIP page inflates past the")
            && msg.ends_with("bytes its header declares"),
        "{msg}"
    );
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[0]]));
}

/// The server's peak RSS after four writes at once of a 100 KB value for
/// 2,000 rows (200 MB each once cast, held several times over while it is
/// written), under `--write-memory-limit limit`.
fn peak_of_four_writes(limit: &str) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--write-memory-limit", limit]);
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, url VARCHAR, amount DOUBLE)");
    let body = common::dictionary_ipc("x".repeat(100_000), 2_000);
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (http, body) = (s.http.clone(), body.clone());
            std::thread::spawn(move || {
                let arrow = [("Content-Type", "application/vnd.apache.arrow.stream")];
                common::request(&http, "POST", "/v1/write/ev", &arrow, &body).0
            })
        })
        .collect();
    for w in writers {
        assert_eq!(w.join().unwrap(), 200);
    }
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[8_000]]));
    // All of the budget is given back; its limit is the one set.
    let (_, metrics) = s.request("GET", "/metrics", &[], b"");
    let metrics = String::from_utf8(metrics).unwrap();
    let value = |name: &str| -> f64 {
        let line = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")));
        line.unwrap_or_else(|| panic!("{name} missing"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("kiln_write_memory_bytes"), 0.0);
    let limit: kiln_storage::ByteSize = limit.parse().unwrap();
    assert_eq!(
        value("kiln_write_memory_limit_bytes"),
        limit.as_usize() as f64
    );
    peak_rss_kib(s.child.id())
}

#[test]
fn writes_in_flight_share_one_memory_budget() {
    // A budget of two writes' rows: they are written one after another
    // (each needs more than the budget, so it runs alone), and all are.
    let budgeted = peak_of_four_writes("400MiB");
    let unbounded = peak_of_four_writes("1TiB");
    assert!(
        budgeted < unbounded * 2 / 3,
        "peak RSS {budgeted} KiB within the budget, {unbounded} KiB without"
    );
}
