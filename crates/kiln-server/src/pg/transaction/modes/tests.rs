use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::*;

fn stmt(sql: &str) -> Statement {
    Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0)
}

fn modes_of(sql: &str) -> Result<Modes, ApiError> {
    match stmt(sql) {
        Statement::StartTransaction { modes, .. } => parse(&modes),
        Statement::Set(datafusion::sql::sqlparser::ast::Set::SetTransaction { modes, .. }) => {
            parse(&modes)
        }
        other => panic!("{other}"),
    }
}

#[test]
fn read_committed_and_weaker_are_taken_stronger_refused() {
    let m = modes_of("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED");
    assert_eq!(m.unwrap().isolation, Some("read uncommitted"));
    let m = modes_of("BEGIN ISOLATION LEVEL READ COMMITTED, READ ONLY").unwrap();
    assert_eq!(
        m,
        Modes {
            isolation: Some("read committed"),
            read_only: Some(true)
        }
    );
    assert_eq!(modes_of("BEGIN READ WRITE").unwrap().read_only, Some(false));
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let e = modes_of(&format!("SET TRANSACTION ISOLATION LEVEL {level}")).unwrap_err();
        assert_eq!(e.sqlstate, "0A000");
        assert!(e.to_string().contains(level), "{e}");
    }
}

#[test]
fn writes_are_named_reads_are_not() {
    for (sql, want) in [
        ("INSERT INTO t VALUES (1)", Some("INSERT")),
        ("CREATE TABLE t (a INT)", Some("CREATE TABLE")),
        ("DROP TABLE t", Some("DROP TABLE")),
        ("DELETE FROM t", Some("DELETE")),
        ("COPY t FROM STDIN", Some("COPY")),
        ("EXPLAIN ANALYZE INSERT INTO t VALUES (1)", Some("INSERT")),
        ("SELECT * FROM t", None),
        ("EXPLAIN INSERT INTO t VALUES (1)", None),
        ("COPY t TO STDOUT", None),
        ("SHOW timezone", None),
        ("SET timezone = 'UTC'", None),
        ("COMMIT", None),
    ] {
        assert_eq!(writes(&stmt(sql)).as_deref(), want, "{sql}");
    }
}
