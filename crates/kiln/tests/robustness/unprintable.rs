//! Dates and times past the years that can be shown, against the real
//! binary: a query's value fails with 22008 on every door, naming its
//! column and row, and a DATE past them is refused at write, naming its
//! line.

use serde_json::json;

use crate::common::{self, Server};
use crate::post_sql;

#[test]
fn dates_and_times_that_cannot_be_shown_fail_with_22008_on_every_door() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let far = "SELECT x, CASE WHEN x = 3 THEN to_timestamp_seconds(9223372036854775807) END AS t FROM generate_series(1, 3) g(x)";
    let (status, body) = post_sql(&s, far);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("datetime_out_of_range")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("timestamp out of range in column \"t\", row 3"),
        "{message}"
    );
    // CSV: an error, not a response cut off.
    let (status, body) = s.request(
        "POST",
        "/v1/sql?format=csv",
        &[("Content-Type", "text/plain")],
        far.as_bytes(),
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("datetime_out_of_range"), "{body}");
    // psql: a query, and a COPY of one.
    let date = "SELECT arrow_cast(2147483647, 'Date32') AS d";
    assert_eq!(common::psql_sqlstate(&s, date), "22008");
    let copy = format!("COPY ({date}) TO STDOUT");
    assert_eq!(common::psql_sqlstate(&s, &copy), "22008");
    // Inside a list or a struct, naming the row holding it.
    let nested = "SELECT x, CASE WHEN x = 2 THEN make_array(arrow_cast(0, 'Date32'), arrow_cast(2147483647, 'Date32')) END AS l, named_struct('d', arrow_cast(x, 'Date32')) AS s FROM generate_series(1, 3) g(x)";
    assert_eq!(common::psql_sqlstate(&s, nested), "22008");
    let (status, body) = post_sql(&s, nested);
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("date out of range in column \"l\", row 2"),
        "{message}"
    );
    // A timestamp moved past its years is out of range, as PostgreSQL
    // says (22008), on every door.
    let moved = "SELECT TIMESTAMP '2262-01-01' + INTERVAL '1 year'";
    assert_eq!(common::psql_sqlstate(&s, moved), "22008");
    let (status, body) = post_sql(&s, moved);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("datetime_out_of_range")),
        "{body}"
    );
    // A DATE sent as a number of days past them is refused, naming its
    // line and column; nothing of the write is kept.
    s.sql("CREATE TABLE dd (ts TIMESTAMP NOT NULL, d DATE)");
    let ndjson = [("Content-Type", "application/x-ndjson")];
    let line = |d: i64| format!("{{\"ts\":\"2026-11-01T00:00:00Z\",\"d\":{d}}}\n");
    let body = format!("{}{}", line(1), line(2_147_483_647));
    let (status, v) = s.write("dd", &ndjson, body.as_bytes());
    assert_eq!(status, 400, "{v}");
    assert!(
        v.to_string()
            .contains("line 2: column 'd': date 2147483647 days from 1970-01-01 is out of range"),
        "{v}"
    );
    let (status, v) = s.write("dd", &ndjson, line(20_000).as_bytes());
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        s.rows("SELECT CAST(d AS VARCHAR) FROM dd"),
        json!([["2024-10-04"]])
    );
}
