use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{may_rewrite, rewrite};

/// `sql` rewritten; `None` if nothing was rewritten.
fn rewritten(sql: &str) -> Option<String> {
    let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    rewrite(&mut stmt).then(|| stmt.to_string())
}

#[test]
fn a_sort_by_a_subquery_sorts_a_derived_table() {
    assert_eq!(
        rewritten(
            "SELECT a AS x FROM t ORDER BY (SELECT max(c) FROM u WHERE u.k = t.k) DESC, 1, x LIMIT 5"
        )
        .as_deref(),
        Some(
            "SELECT * EXCLUDE (\"__kiln_order_0\") FROM (SELECT a AS x, (SELECT max(c) FROM u \
             WHERE u.k = t.k) AS \"__kiln_order_0\" FROM t) AS \"__kiln_sorted\" \
             ORDER BY \"__kiln_order_0\" DESC, 1, x LIMIT 5"
        )
    );
}

#[test]
fn input_columns_the_select_list_drops_move_inside_too() {
    assert_eq!(
        rewritten("SELECT a FROM t ORDER BY (SELECT 1) + b, b").as_deref(),
        Some(
            "SELECT * EXCLUDE (\"__kiln_order_0\", \"__kiln_order_1\") FROM (SELECT a, (SELECT 1) \
             + b AS \"__kiln_order_0\", b AS \"__kiln_order_1\" FROM t) AS \"__kiln_sorted\" \
             ORDER BY \"__kiln_order_0\", \"__kiln_order_1\""
        )
    );
}

#[test]
fn other_sorts_distinct_and_set_operations_are_left_alone() {
    for sql in [
        "SELECT a FROM t ORDER BY a, 1",
        "SELECT DISTINCT a FROM t ORDER BY (SELECT 1)",
        "SELECT a FROM t ORDER BY a IN (SELECT 1)",
        "SELECT a FROM t ORDER BY EXISTS (SELECT 1)",
        "SELECT a FROM t UNION SELECT b FROM u ORDER BY 1",
        "SELECT a FROM t WHERE a IN (SELECT 1) ORDER BY a",
    ] {
        assert_eq!(rewritten(sql), None, "{sql}");
    }
    assert!(may_rewrite("select a from t order by a in (select 1)"));
    assert!(!may_rewrite(
        "select a from t where a in (select 1) order by a"
    ));
}
