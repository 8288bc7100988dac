//! Arguments outside a function's domain, against the real binary: each
//! is refused with PostgreSQL's SQLSTATE over psql and its code over HTTP,
//! where DataFusion's functions answered `NaN`, an infinity or NULL.

use crate::common::{self, Server};
use crate::post_sql;

#[test]
fn arguments_outside_a_functions_domain_get_postgresql_s_sqlstates_on_every_door() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    for (sql, sqlstate, code) in [
        (
            "SELECT sqrt(x) FROM (VALUES (4.0), (-1.0)) t(x)",
            "2201F",
            "invalid_argument_for_power_function",
        ),
        ("SELECT ln(0)", "2201E", "invalid_argument_for_logarithm"),
        (
            "SELECT power(x, -1) FROM (VALUES (0.0)) t(x)",
            "2201F",
            "invalid_argument_for_power_function",
        ),
        (
            "SELECT acos(x) FROM (VALUES (2.0)) t(x)",
            "22003",
            "numeric_out_of_range",
        ),
        (
            "SELECT nth_value(x, 0) OVER (ORDER BY x) FROM generate_series(1, 3) g(x)",
            "22016",
            "invalid_argument_for_nth_value_function",
        ),
        (
            "SELECT abs(x) FROM (VALUES (-9223372036854775807 - 1)) t(x)",
            "22003",
            "numeric_out_of_range",
        ),
        (
            "SELECT regexp_count(s, 'b', 0) FROM (VALUES ('abc')) t(s)",
            "22023",
            "invalid_parameter_value",
        ),
    ] {
        assert_eq!(common::psql_sqlstate(&s, sql), sqlstate, "{sql}");
        let (status, body) = post_sql(&s, sql);
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some(code)),
            "{sql}: {body}"
        );
    }
    // Inside their domains, answers are DataFusion's.
    let (status, body) = post_sql(
        &s,
        "SELECT sqrt(4.0), ln(1.0), power(-2.0, 3.0), nth_value(x, 2) OVER (ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM generate_series(1, 2) g(x) ORDER BY x LIMIT 1",
    );
    assert_eq!(status, 200, "{body}");
    let row: Vec<f64> = body["rows"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(row, vec![2.0, 0.0, -8.0, 2.0], "{body}");
}
