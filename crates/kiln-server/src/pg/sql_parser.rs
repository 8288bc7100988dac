//! datafusion-postgres's SQL parser, minus three things it does that are
//! wrong now that Kiln plans what they stood in for, plus the place of a
//! syntax error (it parses tokens stripped of their lines and columns, so
//! a failed parse is repeated on the text, on the error path only).
//!
//! - `PostgresCompatibilityParser` replaces Grafana's search-path subquery
//!   (`string_to_array(current_setting('search_path'), ',') s`,
//!   `generate_series(...) AS i`, `THEN user`) by `''`, from when none of
//!   it could be planned, so Grafana's editors matched no schema and
//!   listed every table schema-qualified. Kiln plans that subquery now
//!   (`current_setting` in `settings`, the rest in
//!   `kiln_query::shape::relations`), so text that reads the search path
//!   is parsed without the replacement list.
//! - Its rule `RemoveSubqueryFromProjection` answers every correlated
//!   scalar subquery of a select list with NULL: a wrong answer, not an
//!   error. In a statement that reads no catalog relation (`pg_catalog`,
//!   `information_schema`, a `pg_` table) every such subquery is kept
//!   from the rule: parenthesised once more (`((SELECT ...))`, the same
//!   expression), which it does not look into. The engine then answers it
//!   as over HTTP, or fails; never NULL in place of a value. In a catalog
//!   statement only the forms DataFusion plans are kept (one term that is
//!   a call of a common aggregate, or a sort limited to one row, which
//!   `kiln_query::shape::first` makes an aggregate): catalog queries
//!   (psql's `\d`) have others DataFusion cannot plan, and tolerate NULL.
//!   A statement the parser replaces wholesale (its list of client
//!   queries) stays as it makes it.
//!
//! - Its rules rename `current_user` to `session_user` (one function
//!   answers both), so its column was labelled `session_user`: the first
//!   unnamed `current_user` of a select list is named `current_user`
//!   first, as PostgreSQL labels it.
//!
//! Its other rewrite rules still apply; every other statement goes through
//! the parser unchanged. Upstream, the list entry should be deleted and the
//! rule should leave subqueries DataFusion can plan alone.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArguments, Ident, ObjectName, Query, SelectItem, SetExpr, Statement, VisitMut,
    VisitorMut, visit_relations,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;

/// The text whose replacement is stale (module docs).
const SEARCH_PATH: &str = "current_setting('search_path')";

/// What the parser's rules rename `session_user`; its column keeps the
/// label PostgreSQL gives it (module docs).
const CURRENT_USER: &str = "current_user";

#[derive(Debug, Default)]
pub struct SqlParser(PostgresCompatibilityParser);

/// Whether `text` holds `needle`, ignoring ASCII case; compared in place,
/// as this runs for every statement.
fn contains_ignore_case(text: &str, needle: &str) -> bool {
    text.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Whether `sql` may have a subquery as a select-list term: a `(`
/// followed by `select` and preceded by `select` or a comma (spaces
/// between allowed). Derived tables (`FROM (SELECT`), `IN (SELECT` and
/// `EXISTS (SELECT`, which BI tools write around most queries, are not
/// kept and so do not cost a second parse.
fn may_have_scalar_subquery(sql: &str) -> bool {
    let is_select = |b: &[u8]| b.eq_ignore_ascii_case(b"select");
    sql.match_indices('(').any(|(at, _)| {
        let rest = sql[at + 1..].trim_start().as_bytes();
        let before = sql[..at].trim_end().as_bytes();
        let term = before.ends_with(b",")
            || (before.len() >= 6
                && is_select(&before[before.len() - 6..])
                && !before[..before.len() - 6]
                    .last()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_'));
        term && rest.len() >= 6 && is_select(&rest[..6])
    })
}

impl SqlParser {
    /// Whether [`SqlParser::parse_keeping`] may change the statements
    /// before the rules (keep a subquery from them, label `current_user`;
    /// module docs): a cheap look at the text, before any parse.
    pub fn may_keep_subqueries(sql: &str) -> bool {
        may_have_scalar_subquery(sql) || contains_ignore_case(sql, CURRENT_USER)
    }

    /// Whether the parser looks at `sql`'s text itself, not only at its
    /// statements: it reads the search path or may keep subqueries from
    /// the rules, or it names a catalog table (`pg_`), as every query of
    /// the parser's client list does. Such text is always parsed, never
    /// run by its template (`kiln_query::plan_cache::texts`).
    pub fn reads_text(sql: &str) -> bool {
        contains_ignore_case(sql, SEARCH_PATH)
            || Self::may_keep_subqueries(sql)
            || contains_ignore_case(sql, "pg_")
    }

    /// `sql`'s statements, rewritten by datafusion-postgres's rules.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        self.parse_keeping(sql).map(|(stmts, _)| stmts)
    }

    /// [`SqlParser::parse`], and whether a subquery was kept from the rules:
    /// then a protocol that parses the text again must be given the
    /// statements' text instead.
    pub fn parse_keeping(&self, sql: &str) -> Result<(Vec<Statement>, bool), ParserError> {
        self.parse_rewritten(sql).map_err(|e| located(sql, e))
    }

    fn parse_rewritten(&self, sql: &str) -> Result<(Vec<Statement>, bool), ParserError> {
        let reads_search_path = contains_ignore_case(sql, SEARCH_PATH);
        if !reads_search_path && !Self::may_keep_subqueries(sql) {
            return Ok((self.0.parse(sql)?, false));
        }
        let mut raw = Parser::parse_sql(&PostgreSqlDialect {}, sql)?;
        let mut keep = KeepSubqueries {
            kept: false,
            all: !raw.iter().any(reads_catalog),
        };
        for stmt in &mut raw {
            let _ = stmt.visit(&mut keep);
        }
        if !reads_search_path {
            if !keep.kept {
                return Ok((self.0.parse(sql)?, false));
            }
            // A statement the parser replaces wholesale stays as it makes
            // it: its rules give something else than on the text as typed.
            let parsed = self.0.parse(sql)?;
            let plain = Parser::parse_sql(&PostgreSqlDialect {}, sql)?;
            let plain: Vec<Statement> = plain.into_iter().map(|s| self.0.rewrite(s)).collect();
            if parsed != plain {
                return Ok((parsed, false));
            }
        }
        let stmts = raw.into_iter().map(|stmt| self.0.rewrite(stmt)).collect();
        Ok((stmts, keep.kept))
    }
}

/// `error`, or the same error with its line and column: datafusion-postgres
/// parses tokens it has stripped of their places, so where its parser
/// fails, the error is taken again from a plain parse of the text.
fn located(sql: &str, error: ParserError) -> ParserError {
    match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
        Err(plain) => plain,
        Ok(_) => error,
    }
}

/// Parenthesises the subqueries of select lists once more and labels
/// `current_user` (module docs).
struct KeepSubqueries {
    /// Whether it changed anything.
    kept: bool,
    /// Every subquery, not only the forms DataFusion plans in catalogs.
    all: bool,
}

/// Whether `stmt` reads a catalog relation: one of `pg_catalog` or
/// `information_schema`, or a table named `pg_...`.
fn reads_catalog(stmt: &Statement) -> bool {
    let catalog = |name: &ObjectName| {
        let mut parts = name.0.iter().filter_map(|p| p.as_ident()).map(|i| &i.value);
        parts.clone().any(|p| {
            p.eq_ignore_ascii_case("pg_catalog") || p.eq_ignore_ascii_case("information_schema")
        }) || parts
            .next_back()
            .and_then(|t| t.get(..3))
            .is_some_and(|t| t.eq_ignore_ascii_case("pg_"))
    };
    visit_relations(stmt, |name| match catalog(name) {
        true => ControlFlow::Break(()),
        false => ControlFlow::Continue(()),
    })
    .is_break()
}

/// Aggregates whose correlated subqueries DataFusion decorrelates.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "first_value",
    "last_value",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
];

/// Whether `query` is one of the two forms kept from the rule.
fn keepable(query: &Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }] =
        select.projection.as_slice()
    else {
        return false;
    };
    let first_row = query.order_by.is_some() && query.limit_clause.is_some();
    let aggregate = matches!(e, Expr::Function(f) if f.over.is_none()
    && f.name.0.last().is_some_and(|p| {
        AGGREGATES.contains(&p.to_string().to_lowercase().as_str())
    }));
    first_row || aggregate
}

impl VisitorMut for KeepSubqueries {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            // The first unnamed `current_user` is labelled as PostgreSQL
            // labels it (a second would repeat the name).
            if let Some(item) = select.projection.iter_mut().find(|i| {
                matches!(i, SelectItem::UnnamedExpr(Expr::Function(f))
                    if matches!(f.args, FunctionArguments::None)
                        && f.name.to_string().eq_ignore_ascii_case(CURRENT_USER))
            }) && let SelectItem::UnnamedExpr(e) = item
            {
                *item = SelectItem::ExprWithAlias {
                    expr: e.clone(),
                    alias: Ident::with_quote('"', CURRENT_USER),
                };
                self.kept = true;
            }
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                    && matches!(e, Expr::Subquery(q) if self.all || keepable(q))
                {
                    *e = Expr::Nested(Box::new(e.clone()));
                    self.kept = true;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> String {
        let stmts = SqlParser::default().parse(sql).unwrap();
        stmts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    #[test]
    fn current_user_keeps_its_label() {
        assert_eq!(
            parsed("SELECT current_user"),
            "SELECT session_user AS \"current_user\""
        );
        // Named already, or a second one: as the rules make it.
        assert_eq!(
            parsed("SELECT CURRENT_USER AS u, current_user"),
            "SELECT session_user AS u, session_user AS \"current_user\""
        );
        assert_eq!(
            parsed("SELECT current_user, current_user"),
            "SELECT session_user AS \"current_user\", session_user"
        );
    }

    #[test]
    fn correlated_subqueries_in_a_select_list_are_kept() {
        let sql = "SELECT t.a, (SELECT max(c.b) FROM c WHERE c.a = t.a) AS m FROM t";
        assert!(
            SqlParser::default().0.parse(sql).unwrap()[0]
                .to_string()
                .contains("NULL AS m")
        );
        assert_eq!(
            parsed(sql),
            "SELECT t.a, ((SELECT max(c.b) FROM c WHERE c.a = t.a)) AS m FROM t"
        );
        let first = "SELECT (SELECT c.b FROM c WHERE c.a = t.a ORDER BY c.k LIMIT 1) FROM t";
        assert!(
            parsed(first).starts_with("SELECT ((SELECT c.b"),
            "{}",
            parsed(first)
        );
        // Any form over tables; in a catalog statement, other forms stay
        // with the rule (psql's catalog queries have some).
        let plain = "SELECT (SELECT c.b FROM c WHERE c.a = t.a) AS x FROM t";
        assert_eq!(
            parsed(plain),
            "SELECT ((SELECT c.b FROM c WHERE c.a = t.a)) AS x FROM t"
        );
        let other = "SELECT (SELECT c.relname FROM pg_class c WHERE c.oid <> t.typrelid) AS x FROM pg_type t";
        assert_eq!(parsed(other), "SELECT NULL AS x FROM pg_catalog.pg_type t");
        let parser = SqlParser::default();
        assert!(parser.parse_keeping(sql).unwrap().1);
        assert!(parser.parse_keeping(plain).unwrap().1);
        // A name whose first characters are not ASCII is no catalog's.
        let wide = "SELECT (SELECT c.b FROM \"éé\" c WHERE c.a = t.a) AS x FROM t";
        assert!(parser.parse_keeping(wide).unwrap().1);
        assert!(!parser.parse_keeping(other).unwrap().1);
        let filter = "SELECT a FROM t WHERE a IN (SELECT b FROM u)";
        assert!(!parser.parse_keeping(filter).unwrap().1, "nothing to keep");
        assert!(may_have_scalar_subquery("select ( SELECT 1)"));
        assert!(!may_have_scalar_subquery("select count(x) from t"));
        assert!(may_have_scalar_subquery("select a, (select 1) from t"));
        for other in [
            "SELECT * FROM (SELECT 1) AS virtual_table",
            "SELECT a FROM t WHERE a IN (SELECT b FROM u)",
            "SELECT EXISTS (SELECT 1)",
            "SELECT a FROM t JOIN (select b FROM u) v ON true",
            "SELECT my_select(select_x) FROM t",
        ] {
            assert!(!may_have_scalar_subquery(other), "{other}");
        }
    }
}
