use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::*;
use crate::error::ErrorKind;

fn checked(sql: &str) -> Result<()> {
    let stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    check(&stmt)
}

fn refused(sql: &str) -> String {
    let e = checked(sql).expect_err(sql);
    assert_eq!(e.kind(), ErrorKind::InvalidRegularExpression, "{sql}");
    e.to_string()
}

#[test]
fn a_literal_pattern_that_does_not_compile_is_refused_with_where_and_why() {
    assert_eq!(
        refused("SELECT * FROM t WHERE url ~ '('"),
        "invalid regular expression '(': unclosed group at byte 0"
    );
    assert_eq!(
        refused("SELECT 'x' !~* 'ab[z-a]'"),
        "invalid regular expression 'ab[z-a]' with flags 'i': invalid character class range, the start must be <= the end at byte 3"
    );
    assert!(
        refused("SELECT regexp_like(s, 'a{1000}{1000}{1000}') FROM t")
            .contains("-byte limit on one pattern")
    );
    assert!(
        refused("SELECT regexp_replace(s, 'a)', 'b', 'g') FROM t")
            .starts_with("invalid regular expression 'a)':")
    );
    assert!(refused("SELECT regexp_count(s, '[', 1) FROM t").contains("at byte 0"));
    assert!(refused("SELECT regexp_instr(s, '\\p{Nope}') FROM t").contains("at byte 0"));
    // In a subquery, a CTE, a function's argument.
    refused("WITH a AS (SELECT 1 AS x WHERE 'a' ~ '*') SELECT * FROM a");
    refused("SELECT count(*) FROM t WHERE lower(s) ~ (('(('))");
    // SIMILAR TO's pattern is matched as a regular expression.
    assert!(
        refused("SELECT * FROM t WHERE s NOT SIMILAR TO 'a[b'")
            .starts_with("invalid regular expression 'a[b':")
    );
    // A flag the regex crate does not know.
    assert!(refused("SELECT regexp_match(s, 'a', 'z') FROM t").contains("(in its flags)"));
}

#[test]
fn patterns_that_compile_or_are_not_literals_pass() {
    for sql in [
        "SELECT * FROM t WHERE url ~ '^/item/[0-9]+$' AND s !~* 'BOT'",
        "SELECT * FROM t WHERE s SIMILAR TO '(a|b)+'",
        "SELECT regexp_replace(s, '(a)(b)', '\\2\\1', 'gi') FROM t",
        // x: spaces and comments are ignored, so this compiles.
        "SELECT regexp_like(s, 'a #(', 'x') FROM t",
        // Not literals: compiled where they are used.
        "SELECT * FROM t WHERE s ~ p",
        "SELECT * FROM t WHERE s ~ $1",
        "SELECT regexp_like(s, '(', flags) FROM t",
        // `g` is refused by regexp_like itself, with its own message.
        "SELECT regexp_like(s, 'a', 'g') FROM t",
        // Not a regular expression.
        "SELECT * FROM t WHERE s LIKE '(' AND s = '('",
    ] {
        checked(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}
