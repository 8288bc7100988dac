use super::*;
use crate::error::ErrorKind;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

fn parse(sql: &str) -> Statement {
    Parser::parse_sql(&GenericDialect {}, sql)
        .unwrap()
        .remove(0)
}

fn chain(op: &str, n: usize) -> String {
    let terms: Vec<String> = (0..n).map(|i| format!("x = {i}")).collect();
    format!("SELECT * FROM t WHERE {}", terms.join(&format!(" {op} ")))
}

/// Deepest nesting of expressions (measured by the check itself).
fn depth(stmt: &mut Statement) -> usize {
    (1..).find(|&d| check(stmt, d).is_ok()).unwrap()
}

#[test]
fn long_or_and_chains_are_rebalanced_not_refused() {
    for op in ["OR", "AND"] {
        let mut stmt = parse(&chain(op, 10_000));
        check(&mut stmt, 100).unwrap();
        // 10,000 terms: 14 levels of the operator, then `x = i`.
        assert!(depth(&mut stmt) <= 16, "{op}: {}", depth(&mut stmt));
        // Same terms, same order.
        let text = stmt.to_string();
        assert!(
            text.contains(&format!("x = 0 {op} x = 1 {op} x = 2")),
            "{op}"
        );
        assert!(text.ends_with(&format!("x = 9998 {op} x = 9999")), "{op}");
    }
}

#[test]
fn short_chains_keep_their_shape() {
    let mut stmt = parse(&chain("OR", 10));
    let before = format!("{stmt:?}");
    check(&mut stmt, 100).unwrap();
    assert_eq!(format!("{stmt:?}"), before);
}

#[test]
fn a_deep_arithmetic_chain_is_refused_with_54001() {
    let terms = vec!["1"; 5_000].join("+");
    let mut stmt = parse(&format!("SELECT {terms}"));
    let e = check(&mut stmt, 1_000).unwrap_err();
    assert!(matches!(e.kind(), crate::ErrorKind::TooComplex), "{e}");
    assert!(e.to_string().contains("more than 1000 levels"), "{e}");
    // Within the limit it passes untouched.
    let mut ok = parse(&format!("SELECT {}", vec!["1"; 500].join("+")));
    check(&mut ok, 1_000).unwrap();
}

#[test]
fn quoted_numbers_in_arithmetic_become_numbers() {
    use super::postgres::{may_rewrite, rewrite};
    for (sql, want) in [
        ("SELECT '41' + 1", "SELECT 41 + 1"),
        ("SELECT x * ' -2.5e1 ' FROM t", "SELECT x * -2.5e1 FROM t"),
        (
            "SELECT '1' || 'x', 'a' + 1, '1' + '2'",
            "SELECT '1' || 'x', 'a' + 1, '1' + '2'",
        ),
    ] {
        assert!(may_rewrite(sql) || sql == want, "{sql}");
        let mut stmt = parse(sql);
        assert_eq!(rewrite(&mut stmt), sql != want, "{sql}");
        assert_eq!(stmt.to_string(), want);
    }
    assert!(!may_rewrite(
        "SELECT * FROM t WHERE ts > '2026-01-01' AND v = '5'"
    ));
}

#[test]
fn a_cast_beside_its_column_is_labelled_apart() {
    use super::postgres::{may_rewrite, rewrite};
    for (sql, want) in [
        (
            "SELECT CAST(id AS INT), id FROM t",
            "SELECT CAST(id AS INT) AS \"?column?1\", id FROM t",
        ),
        (
            "SELECT id, id::TEXT FROM t",
            "SELECT id, id::TEXT AS \"?column?2\" FROM t",
        ),
    ] {
        assert!(may_rewrite(sql), "{sql}");
        let mut stmt = parse(sql);
        assert!(rewrite(&mut stmt), "{sql}");
        assert_eq!(stmt.to_string(), want);
    }
    let mut stmt = parse("SELECT CAST(a AS INT), b FROM t");
    assert!(!rewrite(&mut stmt));
    assert!(!may_rewrite("SELECT CAST(a AS INT), b FROM t"));
}

#[test]
fn current_user_beside_session_user_may_repeat() {
    use super::postgres::may_rewrite;
    // The PostgreSQL parser makes the first the second.
    assert!(may_rewrite("SELECT current_user, session_user"));
    assert!(may_rewrite("SELECT CURRENT_USER, session_user, 1"));
    assert!(!may_rewrite("SELECT current_user, 1"));
}

#[test]
fn a_syntax_error_names_its_position_in_characters() {
    let error = |sql: &str| {
        let e = Parser::parse_sql(&GenericDialect {}, sql).unwrap_err();
        parse_error(e, sql)
    };
    let e = error("SELEC 1");
    assert_eq!(
        (e.kind(), e.position()),
        (ErrorKind::Syntax, Some(1)),
        "{e}"
    );
    assert_eq!(error("SELECT 1\nFROM t WHERE x = = 2").position(), Some(27));
    // Characters, not bytes.
    assert_eq!(error("SELECT 'é', 1 +* 2").position(), Some(16));
    assert_eq!(char_position("", 1, 1), None);
    assert_eq!(char_position("SELECT", 2, 1), None);
    assert_eq!(location("no location here"), None);
}

#[test]
fn a_list_past_1664_entries_is_refused_with_54011_naming_it() {
    let items =
        |n: usize, f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
    let cases = [
        (
            "select list",
            "SELECT {} FROM t",
            &(|i| format!("a AS c{i}")) as &dyn Fn(usize) -> String,
        ),
        ("GROUP BY", "SELECT count(*) FROM t GROUP BY {}", &|i| {
            format!("a + {i}")
        }),
        ("ORDER BY", "SELECT a FROM t ORDER BY {}", &|i| {
            format!("a + {i}")
        }),
        ("row of VALUES", "SELECT * FROM (VALUES ({})) v", &|i| {
            i.to_string()
        }),
        // In a subquery, and in the second branch of a UNION.
        ("select list", "SELECT * FROM (SELECT {} FROM t) s", &|i| {
            format!("a AS c{i}")
        }),
        ("select list", "SELECT 1 UNION ALL SELECT {}", &|i| {
            i.to_string()
        }),
    ];
    for (list, template, item) in cases {
        let at_limit = parse(&template.replace("{}", &items(width::MAX_ENTRIES, item)));
        width::check(&at_limit).unwrap();
        let past = parse(&template.replace("{}", &items(width::MAX_ENTRIES + 1, item)));
        let e = width::check(&past).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::TooManyColumns), "{list}: {e}");
        assert_eq!(
            e.to_string(),
            format!("target lists can have at most 1664 entries: this {list} has 1665")
        );
    }
}
