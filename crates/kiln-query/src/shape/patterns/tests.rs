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

/// `sql`'s plan, with placeholders, over a table `t` of a text column `s`.
async fn plan(sql: &str) -> LogicalPlan {
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.sql("CREATE TABLE t (s VARCHAR, n BIGINT)")
        .await
        .unwrap();
    ctx.state().create_logical_plan(sql).await.unwrap()
}

/// [`check_bound`] of `sql` with `params` as `$1`, `$2`..., where
/// [`binds_patterns`] says there is something to check, as kept plans do.
async fn bound_check(sql: &str, params: &[ScalarValue]) -> Result<()> {
    let plan = plan(sql).await;
    match binds_patterns(&plan) {
        true => check_bound(&plan, &positional(params)),
        false => Ok(()),
    }
}

#[tokio::test]
async fn only_a_placeholder_in_a_pattern_or_its_flags_binds_a_pattern() {
    for sql in [
        "SELECT * FROM t WHERE s ~ $1",
        "SELECT * FROM t WHERE n = $1 AND s !~* CAST($2 AS VARCHAR)",
        "SELECT regexp_match(s, 'a', $1) FROM t",
        "SELECT (SELECT count(*) FROM t WHERE s SIMILAR TO $1) AS c",
    ] {
        assert!(binds_patterns(&plan(sql).await), "{sql}");
    }
    for sql in [
        "SELECT * FROM t WHERE s ~ 'a' AND n = $1",
        "SELECT regexp_like(s, 'a') FROM t WHERE s = $1",
        "SELECT * FROM t WHERE s LIKE $1",
    ] {
        assert!(!binds_patterns(&plan(sql).await), "{sql}");
    }
}

fn text(s: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

#[tokio::test]
async fn a_bound_pattern_that_does_not_compile_is_refused_naming_its_parameter() {
    let refused = |r: Result<()>| {
        let e = r.expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidRegularExpression);
        e.to_string()
    };
    let n = ScalarValue::Int64(Some(1));
    assert_eq!(
        refused(bound_check("SELECT * FROM t WHERE n = $1 AND s ~ $2", &[n, text("(")]).await),
        "invalid regular expression '(' (parameter $2): unclosed group at byte 0"
    );
    assert_eq!(
        refused(bound_check("SELECT * FROM t WHERE s !~* $1", &[text("ab[z-a]")]).await),
        "invalid regular expression 'ab[z-a]' with flags 'i' (parameter $1): invalid character class range, the start must be <= the end at byte 3"
    );
    // Through a cast, in a subquery, in SIMILAR TO.
    refused(
        bound_check(
            "SELECT * FROM t WHERE s ~ CAST($1 AS VARCHAR)",
            &[text("[")],
        )
        .await,
    );
    refused(
        bound_check(
            "SELECT (SELECT count(*) FROM t WHERE s ~ $1) AS c",
            &[text("a)")],
        )
        .await,
    );
    refused(bound_check("SELECT * FROM t WHERE s SIMILAR TO $1", &[text("(")]).await);
    // A function's pattern, its flags, or both.
    assert!(
        refused(bound_check("SELECT regexp_like(s, $1) FROM t", &[text("*")]).await)
            .contains("(parameter $1)")
    );
    let flags = refused(bound_check("SELECT regexp_match(s, 'a', $1) FROM t", &[text("z")]).await);
    assert!(
        flags.contains("(parameter $1)") && flags.contains("(in its flags)"),
        "{flags}"
    );
    assert!(
        refused(
            bound_check(
                "SELECT regexp_replace(s, $1, 'x', $2) FROM t",
                &[text("a("), text("gi")]
            )
            .await
        )
        .starts_with("invalid regular expression 'a(' with flags 'i' (parameters $1, $2):")
    );
    // Named parameters, as DataFusion's ParamValues hold them.
    let named = ParamValues::Map([("p".to_string(), text("(").into())].into_iter().collect());
    let by_name = plan("SELECT * FROM t WHERE s ~ $p").await;
    refused(check_bound(&by_name, &bound_values(&named)));
    let list = ParamValues::List(vec![text("(").into()]);
    let by_position = plan("SELECT * FROM t WHERE s ~ $1").await;
    refused(check_bound(&by_position, &bound_values(&list)));
}

#[tokio::test]
async fn bound_patterns_that_compile_or_are_not_text_pass() {
    for (sql, params) in [
        ("SELECT * FROM t WHERE s ~ $1", vec![text("^/item/[0-9]+$")]),
        (
            "SELECT * FROM t WHERE s ~ $1",
            vec![ScalarValue::Utf8(None)],
        ),
        (
            "SELECT regexp_like(s, $1, $2) FROM t",
            vec![text("a #("), text("x")],
        ),
        // `g` is refused by regexp_like itself, with its own message.
        (
            "SELECT regexp_like(s, $1, $2) FROM t",
            vec![text("("), text("g")],
        ),
        // Not a pattern.
        ("SELECT * FROM t WHERE s LIKE $1 OR s = $1", vec![text("(")]),
        // A literal was checked at parse, and is not compiled again.
        (
            "SELECT * FROM t WHERE s ~ '(' AND n = $1",
            vec![ScalarValue::Int64(Some(1))],
        ),
        // A column is compiled by the kernel.
        (
            "SELECT * FROM t WHERE s ~ s AND n = $1",
            vec![ScalarValue::Int64(Some(1))],
        ),
    ] {
        bound_check(sql, &params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[test]
fn the_check_agrees_with_the_regex_crate() {
    // Patterns that compile, fail to parse, or pass the size limit (some
    // near it: `\w` is hundreds of NFA states, `{n}` copies them n times).
    let patterns = [
        "^x[0-9]{1,17}(a|b)?$",
        "(?i)(chrome|firefox|safari)/[0-9.]+",
        r"\w+@\w+\.com",
        "(a|b){3000}",
        r"\w{100}",
        r"\w{100}{10}",
        r"\w{30}{30}",
        r"\pL{500}",
        "a{1000}{1000}",
        "[[:alpha:]]{2000}",
        "(",
        "a{2,1}",
        r"\p{Nope}",
        "(?z)a",
        r"\bword\b",
    ];
    for flags in ["", "i", "s"] {
        for p in patterns {
            let ours = compile(p, flags, "");
            let theirs = regex::Regex::new(&with_flags(p, flags));
            assert_eq!(
                ours.is_ok(),
                theirs.is_ok(),
                "{p} ({flags}): {ours:?} / {theirs:?}"
            );
        }
    }
}
