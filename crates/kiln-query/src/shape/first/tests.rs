use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{may_rewrite, rewrite};

/// `sql` rewritten with `count` and `max` as the only aggregates; `None`
/// if nothing was rewritten.
fn rewritten(sql: &str) -> Option<String> {
    let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    let is_aggregate = |name: &str| matches!(name, "count" | "max");
    rewrite(&mut stmt, &is_aggregate).then(|| stmt.to_string())
}

#[test]
fn a_subquery_picking_its_first_row_is_an_aggregate() {
    assert_eq!(
        rewritten(
            "SELECT t.name, (SELECT quote_ident(c.col) AS x FROM c WHERE c.t = t.name \
             ORDER BY c.pos DESC NULLS LAST LIMIT 1) AS first FROM t"
        )
        .as_deref(),
        Some(
            "SELECT t.name, (SELECT first_value(quote_ident(c.col) ORDER BY c.pos DESC NULLS LAST) \
             AS x FROM c WHERE c.t = t.name) AS first FROM t"
        )
    );
    // A sort by position or by the term's alias sorts by the term.
    assert_eq!(
        rewritten("SELECT (SELECT a + 1 AS y FROM c ORDER BY y, 1 LIMIT 1)").as_deref(),
        Some("SELECT (SELECT first_value(a + 1 ORDER BY a + 1, a + 1) AS y FROM c)")
    );
}

#[test]
fn other_subqueries_are_left_alone() {
    for sql in [
        "SELECT (SELECT a FROM c ORDER BY a LIMIT 2)",
        "SELECT (SELECT a FROM c ORDER BY a LIMIT 1 OFFSET 1)",
        "SELECT (SELECT a FROM c LIMIT 1)",
        "SELECT (SELECT max(a) FROM c ORDER BY 1 LIMIT 1)",
        "SELECT (SELECT DISTINCT a FROM c ORDER BY a LIMIT 1)",
        "SELECT (SELECT a FROM c GROUP BY a ORDER BY a LIMIT 1)",
        "SELECT (SELECT a, b FROM c ORDER BY a LIMIT 1)",
        "SELECT a FROM c WHERE a IN (SELECT b FROM d ORDER BY b LIMIT 1)",
        "SELECT a FROM c ORDER BY a LIMIT 1",
    ] {
        assert_eq!(rewritten(sql), None, "{sql}");
    }
    assert!(may_rewrite("select (select a from c order by a limit 1)"));
    assert!(!may_rewrite("select a from c order by a limit 1"));
}
