use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::*;
use crate::error::ErrorKind;

fn explain(sql: &str) -> Result<ExplainStatementOptions> {
    let stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    match statement(stmt)? {
        DfStatement::Explain(e) => Ok(e.options),
        other => panic!("{sql}: {other:?}"),
    }
}

#[test]
fn postgresql_explain_options_are_datafusion_s() {
    let cases = [
        (
            "EXPLAIN (FORMAT JSON) SELECT 1",
            Some(ExplainFormat::PostgresJSON),
            false,
            false,
        ),
        (
            "EXPLAIN (FORMAT TEXT, VERBOSE) SELECT 1",
            Some(ExplainFormat::Indent),
            false,
            true,
        ),
        (
            "EXPLAIN (ANALYZE, FORMAT tree) SELECT 1",
            Some(ExplainFormat::Tree),
            true,
            false,
        ),
        (
            "EXPLAIN FORMAT JSON SELECT 1",
            Some(ExplainFormat::PostgresJSON),
            false,
            false,
        ),
        ("EXPLAIN ANALYZE VERBOSE SELECT 1", None, true, true),
        (
            "EXPLAIN FORMAT GRAPHVIZ SELECT 1",
            Some(ExplainFormat::Graphviz),
            false,
            false,
        ),
    ];
    for (sql, format, analyze, verbose) in cases {
        let o = explain(sql).unwrap();
        assert_eq!(
            (o.format, o.analyze, o.verbose),
            (format, analyze, verbose),
            "{sql}"
        );
    }
}

#[test]
fn options_datafusion_lacks_are_refused_by_name() {
    let e = explain("EXPLAIN (FORMAT YAML) SELECT 1").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Syntax), "{e}");
    assert!(e.to_string().contains("Got 'YAML'"), "{e}");
    let e = explain("EXPLAIN (BUFFERS) SELECT 1").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Unsupported), "{e}");
    assert!(e.to_string().contains("BUFFERS"), "{e}");
}

#[test]
fn other_statements_are_kept() {
    let stmt = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT 1")
        .unwrap()
        .remove(0);
    assert!(matches!(
        statement(stmt).unwrap(),
        DfStatement::Statement(_)
    ));
}
