//! PostgreSQL syntax DataFusion plans under another spelling, rewritten
//! right after parsing:
//! - field selection from a composite value, `(expr).field`, becomes
//!   DataFusion's struct access, `(expr)['field']`. DataFusion refuses the
//!   first ("Dot access not supported for non-string expr"), which
//!   PostgreSQL's catalogs and drivers use on row-valued functions:
//!   pgjdbc's `getPrimaryKeys`, `getIndexInfo` and `getBestRowIdentifier`
//!   read `(information_schema._pg_expandarray(...)).n`. A field name
//!   follows PostgreSQL's identifier rules: folded to lower case unless
//!   quoted. `a.b` without parentheses stays a column (a compound
//!   identifier);
//! - a call of a set-returning function in a select list becomes `unnest`
//!   of the list the function returns ([`SET_RETURNING`]), so each element
//!   is a row, as in PostgreSQL;
//! - `generate_series(...)` as a whole select-list term becomes
//!   `unnest(generate_series(...)) AS generate_series` (its alias kept if
//!   it has one): a row per value, named as PostgreSQL names it, where
//!   DataFusion's function answers one row holding a list;
//! - `generate_subscripts(a, 1)` in a select list becomes
//!   `unnest(generate_series(1, array_length(a, 1)))`: the subscripts of
//!   `a`, one per row, beside `unnest(a)` as SQLAlchemy's reflection of
//!   keys and indexes pairs them;
//! - `LIKE pattern ESCAPE 'c'` with a literal pattern and another escape
//!   than the backslash (SQLAlchemy's `ESCAPE '/'`) becomes the same
//!   pattern escaped with the backslash, the only escape DataFusion
//!   accepts;
//! - an unnamed select-list expression repeated in the same list (`SELECT
//!   NULL, NULL`, pgjdbc's `getProcedures`) gets a label of its own,
//!   `?column?N` for the Nth column: PostgreSQL allows duplicate output
//!   names, DataFusion refuses them ("Projections require unique
//!   expression names"). The first keeps DataFusion's label. So does a
//!   cast of a column beside that column (`SELECT CAST(id AS INT), id`),
//!   since DataFusion names a cast by its operand;
//! - `number * INTERVAL '...'` (either order; the interval a literal or a
//!   cast) becomes [`INTERVAL_MUL`]`(interval, number)`: Arrow multiplies
//!   no interval, and dashboards write `now() - 5 * INTERVAL '1 minute'`;
//! - a quoted number beside an arithmetic operator (`'41' + 1`) becomes
//!   the number. PostgreSQL types a quoted literal from its context, so
//!   `'41' + 1` is 42 there; clients that inline parameters (pgx's simple
//!   protocol, which Grafana's panels use) write every value quoted, and
//!   DataFusion refused the sum ("Cannot coerce arithmetic expression
//!   Utf8 + Int64"). A quoted value that is not a number, or a sum of two
//!   quoted values, is left as it was.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, Query, SelectItem, SetExpr,
    Statement, Subscript, Value, VisitMut, VisitorMut,
};

/// Set-returning functions implemented as functions returning a list of
/// their rows (lower case, as named in SQL, schema included if any).
pub const SET_RETURNING: &[&str] = &["_pg_expandarray", "information_schema._pg_expandarray"];

/// Kiln's function for an interval times a number (in `functions`).
pub const INTERVAL_MUL: &str = "kiln_interval_mul";

/// Whether `e` is an interval by its syntax: a literal or a cast.
fn is_interval(e: &Expr) -> bool {
    match e {
        Expr::Interval(_) => true,
        Expr::Cast { data_type, .. } => matches!(data_type, DataType::Interval { .. }),
        Expr::Nested(inner) => is_interval(inner),
        _ => false,
    }
}

/// Whether `sql` may hold something [`rewrite`],
/// [`super::relations::rewrite`], [`super::order::rewrite`] or
/// [`super::first::rewrite`] rewrites: lets a protocol skip parsing the
/// text a second time.
pub fn may_rewrite(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    sql.contains(").")
        || lower.contains("_pg_expandarray")
        || lower.contains("generate_subscripts")
        || lower.contains("generate_series")
        || lower.contains("escape")
        || repeats_a_term(&lower)
        || (lower.contains("interval") && sql.contains('*'))
        || quoted_number_in_arithmetic(sql)
        || super::relations::may_rewrite(&lower)
        || super::order::may_rewrite(&lower)
        || super::first::may_rewrite(&lower)
}

/// Whether some select-list term may repeat: two equal comma-separated
/// pieces of a `SELECT`'s text before its first `FROM` (`select null,
/// null from`), found without a parse; `current_user` is the same term as
/// `session_user`, which the PostgreSQL parser makes of it. Other
/// statements (a long multi-row `INSERT ... VALUES` repeats pieces too)
/// are not parsed twice for it.
fn repeats_a_term(lower: &str) -> bool {
    let Some(rest) = lower.trim_start().strip_prefix("select") else {
        return false;
    };
    let list = rest.split(" from ").next().unwrap_or(rest);
    let mut seen = HashSet::new();
    list.split(',')
        .map(|p| match cast_operand(p.trim()) {
            "current_user" => "session_user",
            p => p,
        })
        .any(|p| !p.is_empty() && !seen.insert(p))
}

/// The operand of a term that is a cast (`cast(x as int)`, `x::int`), as
/// DataFusion names the cast by it; else the term.
fn cast_operand(term: &str) -> &str {
    if let Some(inner) = term.strip_prefix("cast(")
        && let Some(at) = inner.find(" as ")
    {
        return inner[..at].trim();
    }
    match term.find("::") {
        Some(at) => term[..at].trim(),
        None => term,
    }
}

/// Whether a quoted number (`'41'`) stands beside an arithmetic operator
/// in `sql`, found without a parse.
fn quoted_number_in_arithmetic(sql: &str) -> bool {
    let arithmetic = |c: Option<char>| matches!(c, Some('+' | '-' | '*' | '/' | '%'));
    let mut rest = sql;
    while let Some(open) = rest.find('\'') {
        let Some(len) = rest[open + 1..].find('\'') else {
            return false;
        };
        let inside = &rest[open + 1..open + 1 + len];
        let before = rest[..open].trim_end().chars().next_back();
        let after_at = open + len + 2;
        let after = rest[after_at..].trim_start().chars().next();
        if is_number(inside) && (arithmetic(before) || arithmetic(after)) {
            return true;
        }
        rest = &rest[after_at..];
    }
    false
}

/// Whether `s` is a decimal number as SQL writes one (`41`, `-1.5`, `2e3`).
fn is_number(s: &str) -> bool {
    let s = s.trim();
    s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
        && s.parse::<f64>().is_ok()
}

/// The number a quoted literal holds, for [`is_number`] text.
fn quoted_number(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) if is_number(s) => Some(s.trim().to_string()),
            _ => None,
        },
        _ => None,
    }
}

fn is_quoted(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_)))
}

/// Rewrites `stmt` (module docs); whether anything was rewritten.
pub fn rewrite(stmt: &mut Statement) -> bool {
    let mut v = Rewrite { rewrote: false };
    let _ = stmt.visit(&mut v);
    v.rewrote
}

struct Rewrite {
    rewrote: bool,
}

impl VisitorMut for Rewrite {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.rewrote |= series_rows(&mut query.body);
        self.rewrote |= labels(&mut query.body);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::CompoundFieldAccess { root, access_chain } => {
                // After an identifier, dots continue the compound name
                // DataFusion resolves itself (`t.col.field`).
                if matches!(**root, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                    return ControlFlow::Continue(());
                }
                for access in access_chain {
                    if let AccessExpr::Dot(Expr::Identifier(ident)) = access {
                        let name = match ident.quote_style {
                            Some(_) => ident.value.clone(),
                            None => ident.value.to_lowercase(),
                        };
                        *access = AccessExpr::Subscript(Subscript::Index {
                            index: Expr::value(Value::SingleQuotedString(name)),
                        });
                        self.rewrote = true;
                    }
                }
            }
            Expr::Function(f) if set_returning(f) => {
                let call = std::mem::replace(expr, Expr::value(Value::Null));
                *expr = unnest(call);
                self.rewrote = true;
            }
            Expr::Function(f)
                if f.name
                    .to_string()
                    .eq_ignore_ascii_case("generate_subscripts") =>
            {
                if let FunctionArguments::List(list) = &f.args
                    && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array)), dim] =
                        list.args.as_slice()
                {
                    let dim = match dim {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(d)) => d.clone(),
                        _ => return ControlFlow::Continue(()),
                    };
                    let length = call("array_length", vec![array.clone(), dim]);
                    let series = call("generate_series", vec![Expr::value(number("1")), length]);
                    *expr = unnest(series);
                    self.rewrote = true;
                }
            }
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Multiply,
                right,
            } if is_interval(left) != is_interval(right) => {
                let (interval, factor) = match is_interval(left) {
                    true => (left.as_ref().clone(), right.as_ref().clone()),
                    false => (right.as_ref().clone(), left.as_ref().clone()),
                };
                *expr = call(INTERVAL_MUL, vec![interval, factor]);
                self.rewrote = true;
            }
            Expr::BinaryOp { left, op, right }
                if matches!(
                    op,
                    BinaryOperator::Plus
                        | BinaryOperator::Minus
                        | BinaryOperator::Multiply
                        | BinaryOperator::Divide
                        | BinaryOperator::Modulo
                ) && is_quoted(left) != is_quoted(right) =>
            {
                for side in [left, right] {
                    if let Some(n) = quoted_number(side) {
                        **side = Expr::value(number(&n));
                        self.rewrote = true;
                    }
                }
            }
            Expr::Like {
                pattern,
                escape_char: Some(escape),
                ..
            }
            | Expr::ILike {
                pattern,
                escape_char: Some(escape),
                ..
            } => {
                if let Value::SingleQuotedString(c) = &escape.value
                    && let Some(c) = single_char(c)
                    && c != '\\'
                {
                    let literal = match pattern.as_ref() {
                        Expr::Value(p) => match &p.value {
                            Value::SingleQuotedString(text) => Some(text.clone()),
                            _ => None,
                        },
                        _ => None,
                    };
                    match literal {
                        Some(text) => {
                            **pattern = Expr::value(Value::SingleQuotedString(
                                escape_with_backslash(&text, c),
                            ));
                        }
                        // A bound pattern is rewritten as it is evaluated.
                        None => {
                            let bound =
                                std::mem::replace(pattern.as_mut(), Expr::value(Value::Null));
                            **pattern = call(
                                LIKE_ESCAPE,
                                vec![bound, Expr::value(Value::SingleQuotedString(c.into()))],
                            );
                        }
                    }
                    escape.value = Value::SingleQuotedString("\\".into());
                    self.rewrote = true;
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Labels repeated unnamed terms of `body`'s select lists (module docs);
/// whether there were any.
/// `generate_series(...)` terms of `body`'s select lists made rows (module
/// docs); whether any was.
fn series_rows(body: &mut SetExpr) -> bool {
    let select = match body {
        SetExpr::SetOperation { left, right, .. } => return series_rows(left) | series_rows(right),
        SetExpr::Select(select) => select,
        _ => return false,
    };
    let series = |e: &Expr| {
        matches!(e, Expr::Function(f) if f.name.0.last().and_then(|p| p.as_ident())
            .is_some_and(|i| i.value.eq_ignore_ascii_case("generate_series")))
    };
    let mut rewrote = false;
    for item in &mut select.projection {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(e) if series(e) => (e, Ident::new("generate_series")),
            SelectItem::ExprWithAlias { expr, alias } if series(expr) => (expr, alias.clone()),
            _ => continue,
        };
        let call = std::mem::replace(expr, Expr::value(Value::Null));
        *item = SelectItem::ExprWithAlias {
            expr: unnest(call),
            alias,
        };
        rewrote = true;
    }
    rewrote
}

fn labels(body: &mut SetExpr) -> bool {
    match body {
        SetExpr::SetOperation { left, right, .. } => labels(left) | labels(right),
        SetExpr::Select(select) => {
            let mut seen = HashSet::new();
            // The columns named as they are, which a cast of one would
            // collide with.
            let mut columns: HashSet<String> = select
                .projection
                .iter()
                .filter_map(|item| match item {
                    SelectItem::UnnamedExpr(
                        e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_)),
                    ) => column_name(e),
                    _ => None,
                })
                .collect();
            let mut rewrote = false;
            for (i, item) in select.projection.iter_mut().enumerate() {
                let SelectItem::UnnamedExpr(e) = item else {
                    continue;
                };
                let cast_collides = matches!(e, Expr::Cast { .. })
                    && column_name(e).is_some_and(|n| !columns.insert(n));
                if !cast_collides
                    && (matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
                        || seen.insert(e.to_string()))
                {
                    continue;
                }
                let expr = std::mem::replace(e, Expr::value(Value::Null));
                *item = SelectItem::ExprWithAlias {
                    expr,
                    alias: Ident::with_quote('"', format!("?column?{}", i + 1)),
                };
                rewrote = true;
            }
            rewrote
        }
        _ => false,
    }
}

/// The name DataFusion gives `e` when it is a column, or a cast of one
/// (casts are named by their operand): its identifier's text, unquoted
/// parts in lower case.
fn column_name(e: &Expr) -> Option<String> {
    let part = |i: &Ident| match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    };
    match e {
        Expr::Identifier(i) => Some(part(i)),
        Expr::CompoundIdentifier(parts) => {
            Some(parts.iter().map(part).collect::<Vec<_>>().join("."))
        }
        Expr::Cast { expr, .. } | Expr::Nested(expr) => column_name(expr),
        _ => None,
    }
}

/// The function that rewrites a pattern that is not a literal for the
/// backslash escape (`functions::pg_like`).
pub const LIKE_ESCAPE: &str = "kiln_like_escape";

/// The one character of `s`, if it has exactly one.
fn single_char(s: &str) -> Option<char> {
    let mut chars = s.chars();
    let c = chars.next()?;
    chars.next().is_none().then_some(c)
}

/// `pattern`, written with escape character `escape`, rewritten for the
/// backslash: `escape` followed by a character becomes a backslash
/// followed by it; a backslash of its own becomes an escaped backslash.
pub fn escape_with_backslash(pattern: &str, escape: char) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == escape {
            out.push('\\');
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

fn number(n: &str) -> Value {
    Value::Number(n.into(), false)
}

fn set_returning(f: &Function) -> bool {
    let name = f.name.to_string().to_lowercase();
    SET_RETURNING.contains(&name.as_str())
}

/// `unnest(call)`.
fn unnest(call: Expr) -> Expr {
    self::call("unnest", vec![call])
}

/// `name(args...)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> (bool, String) {
        let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        let changed = rewrite(&mut stmt);
        (changed, stmt.to_string())
    }

    #[test]
    fn parenthesized_values_have_their_fields_selected() {
        assert_eq!(
            rewritten("SELECT (f(a)).n, (t.keys).X, (t.keys).\"X\" FROM t"),
            (
                true,
                "SELECT (f(a))['n'], (t.keys)['x'], (t.keys)['X'] FROM t".into()
            )
        );
        assert_eq!(
            rewritten("SELECT t.a, a[1], s['f'] FROM t"),
            (false, "SELECT t.a, a[1], s['f'] FROM t".into())
        );
    }

    #[test]
    fn set_returning_functions_are_unnested() {
        assert_eq!(
            rewritten("SELECT (information_schema._pg_expandarray(k)).n, _pg_expandarray(k) AS r"),
            (
                true,
                "SELECT (unnest(information_schema._pg_expandarray(k)))['n'], \
                 unnest(_pg_expandarray(k)) AS r"
                    .into()
            )
        );
        assert!(may_rewrite("select _PG_EXPANDARRAY(k)"));
        assert!(may_rewrite("SELECT a, NULL, NULL, d FROM t"));
        assert!(may_rewrite("SELECT 1, 1"));
        assert!(!may_rewrite("SELECT a, b FROM t WHERE c IN (1, 1)"));
        assert!(!may_rewrite("INSERT INTO t VALUES (1, 'a'), (1, 'a')"));
        assert!(!may_rewrite("SELECT f(a) FROM t"));
    }

    #[test]
    fn a_series_in_a_select_list_is_rows_named_as_postgresql_names_them() {
        assert_eq!(
            rewritten("SELECT x, generate_series(1, 3), GENERATE_SERIES(1, x, 2) AS s FROM t"),
            (
                true,
                "SELECT x, unnest(generate_series(1, 3)) AS generate_series, \
                 unnest(GENERATE_SERIES(1, x, 2)) AS s FROM t"
                    .into()
            )
        );
        // Elsewhere it is DataFusion's list, as written.
        for sql in [
            "SELECT * FROM generate_series(1, 3)",
            "SELECT unnest(generate_series(1, 3))",
            "SELECT array_length(generate_series(1, 3), 1)",
        ] {
            assert_eq!(rewritten(sql), (false, sql.into()));
            assert!(may_rewrite(sql));
        }
    }

    #[test]
    fn subscripts_and_other_like_escapes_take_datafusion_spellings() {
        assert_eq!(
            rewritten("SELECT unnest(k) AS a, generate_subscripts(k, 1) AS o FROM t"),
            (
                true,
                "SELECT unnest(k) AS a, unnest(generate_series(1, array_length(k, 1))) AS o FROM t"
                    .into()
            )
        );
        assert_eq!(
            rewritten(r"SELECT n FROM t WHERE n NOT LIKE 'pg/_%' ESCAPE '/' AND m LIKE 'a\b//' ESCAPE '/'"),
            (
                true,
                r"SELECT n FROM t WHERE n NOT LIKE 'pg\_%' ESCAPE '\' AND m LIKE 'a\\b\/' ESCAPE '\'"
                    .into()
            )
        );
        assert!(!rewritten(r"SELECT 1 WHERE 'a' LIKE 'a\%' ESCAPE '\'").0);
        assert_eq!(
            rewritten("SELECT 1 WHERE n LIKE $1 ESCAPE '/'").1,
            r"SELECT 1 WHERE n LIKE kiln_like_escape($1, '/') ESCAPE '\'"
        );
        assert!(may_rewrite("select 1 where a like 'x' escape '/'"));
    }

    #[test]
    fn repeated_terms_get_labels_of_their_own() {
        assert_eq!(
            rewritten("SELECT a, NULL, NULL, 1, NULL AS x, a FROM t UNION SELECT 1, 2, 2, 2, 2, 2"),
            (
                true,
                "SELECT a, NULL, NULL AS \"?column?3\", 1, NULL AS x, a FROM t \
                 UNION SELECT 1, 2, 2 AS \"?column?3\", 2 AS \"?column?4\", 2 AS \"?column?5\", \
                 2 AS \"?column?6\""
                    .into()
            )
        );
    }
}
