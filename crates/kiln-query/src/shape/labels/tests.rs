use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::labels;

/// The wire names of `sql`'s result, given DataFusion's `names`.
fn relabeled(sql: &str, names: &[&str]) -> Vec<String> {
    let stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    if let Some(labels) = labels(&stmt) {
        labels.apply(&mut names);
    }
    names
}

#[test]
fn unnamed_terms_get_postgres_labels() {
    let got = relabeled(
        "SELECT count(*), 'x', now(), 1 + 1, a, t.b, sum(a) AS total, COUNT(DISTINCT a), \
         \"MyFn\"(a), pg_catalog.version() FROM t",
        &[
            "count(*)",
            "Utf8(\"x\")",
            "now()",
            "Int64(1) + Int64(1)",
            "a",
            "b",
            "total",
            "count(DISTINCT t.a)",
            "MyFn(t.a)",
            "version()",
        ],
    );
    assert_eq!(
        got,
        [
            "count", "?column?", "now", "?column?", "a", "b", "total", "count", "MyFn", "version"
        ]
    );
}

#[test]
fn casts_name_their_operand_or_else_their_type() {
    let got = relabeled(
        "SELECT a::text, '1'::int, 1::bigint, CAST(2.5 AS DOUBLE PRECISION), x::varchar(10), \
         DATE '2026-01-01', INTERVAL '1 day', count(*)::int, NULL::timestamptz FROM t",
        &["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"],
    );
    assert_eq!(
        got,
        [
            "a",
            "int4",
            "int8",
            "float8",
            "x",
            "date",
            "interval",
            "count",
            "timestamptz"
        ]
    );
}

#[test]
fn expressions_of_other_shapes() {
    let got = relabeled(
        "SELECT CASE WHEN a > 0 THEN 1 END, CASE WHEN a > 0 THEN 1 ELSE b END, \
         EXISTS (SELECT 1), (SELECT max(a) FROM t), (SELECT 1), ARRAY[1, 2], \
         EXTRACT(YEAR FROM ts), trim(s), trim(LEADING 'x' FROM s), substring(s FROM 2), \
         (a), a IS NULL, -a, ts AT TIME ZONE 'UTC', (s).f FROM t",
        &["c"; 15],
    );
    assert_eq!(
        got,
        [
            "case",
            "b",
            "exists",
            "max",
            "?column?",
            "array",
            "extract",
            "btrim",
            "ltrim",
            "substring",
            "a",
            "?column?",
            "?column?",
            "timezone",
            "f"
        ]
    );
}

#[test]
fn a_star_keeps_its_columns_and_the_terms_around_it_are_labeled() {
    let got = relabeled(
        "SELECT count(*) OVER (), *, 1, a FROM t",
        &["count(*) ROWS ...", "a", "b", "Int64(1)", "a"],
    );
    assert_eq!(got, ["count", "a", "b", "?column?", "a"]);
}

#[test]
fn set_operations_take_the_first_select_list() {
    let got = relabeled(
        "SELECT 1, a FROM t UNION ALL SELECT count(*), b FROM u ORDER BY 2",
        &["Int64(1)", "a"],
    );
    assert_eq!(got, ["?column?", "a"]);
}

#[test]
fn repeated_terms_labeled_by_kiln_are_labeled_like_the_rest() {
    let got = relabeled(
        "SELECT NULL, NULL AS \"?column?2\", count(*), count(*) AS \"?column?4\", \
         1 AS \"?column?\" FROM t",
        &["NULL", "?column?2", "count(*)", "?column?4", "?column?"],
    );
    assert_eq!(got, ["?column?", "?column?", "count", "count", "?column?"]);
}

#[test]
fn statements_needing_no_labels_give_none() {
    for sql in [
        "SELECT a, t.b, count(*) AS n FROM t",
        "SELECT * FROM t",
        "INSERT INTO t VALUES (1)",
        "VALUES (1, 2)",
        "SHOW ALL",
    ] {
        let stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        assert_eq!(labels(&stmt), None, "{sql}");
    }
}
