//! A scalar subquery that picks one row by an order, rewritten right after
//! parsing as the aggregate it is:
//!
//! ```text
//! (SELECT x FROM c WHERE c.t = t.t ORDER BY k LIMIT 1)
//! (SELECT first_value(x ORDER BY k) FROM c WHERE c.t = t.t)
//! ```
//!
//! Why: DataFusion decorrelates a correlated scalar subquery only when it
//! aggregates, and refuses one with a sort and a limit. Both forms give the
//! first row's value by that order, and NULL when there is no row. Grafana's
//! metric-table finder asks this way for a table's first time column and
//! value column.
//!
//! Only a subquery of one plain `SELECT` term that is no aggregate, without
//! `DISTINCT`, `GROUP BY` or `HAVING`, sorted and limited to exactly 1 row
//! (no offset) is rewritten. A sort term that is a position or the term's
//! alias means the term itself.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, GroupByExpr, LimitClause, OrderByKind, Query, SelectItem, SetExpr, Statement, Value,
    VisitMut, VisitorMut, visit_expressions,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Whether `lower` (SQL text in lower case) may hold such a subquery: a
/// `limit` and a second `select`. Lets a protocol skip parsing the text a
/// second time.
pub fn may_rewrite(lower: &str) -> bool {
    lower.contains("limit") && lower.matches("select").nth(1).is_some()
}

/// Rewrites every scalar subquery of `stmt` that picks its first row;
/// `is_aggregate` tells an aggregate function by name. Returns whether it
/// rewrote one.
pub fn rewrite(stmt: &mut Statement, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    let mut r = Rewriter {
        is_aggregate,
        changed: false,
    };
    let _ = stmt.visit(&mut r);
    r.changed
}

struct Rewriter<'a> {
    is_aggregate: &'a dyn Fn(&str) -> bool,
    changed: bool,
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Subquery(query) = expr {
            self.changed |= as_first_value(query, self.is_aggregate);
        }
        ControlFlow::Continue(())
    }
}

/// True if `query` is `LIMIT 1`, with no offset and no FETCH.
fn limited_to_one(query: &Query) -> bool {
    let Some(LimitClause::LimitOffset {
        limit: Some(Expr::Value(v)),
        offset: None,
        limit_by,
    }) = &query.limit_clause
    else {
        return false;
    };
    limit_by.is_empty()
        && query.fetch.is_none()
        && matches!(&v.value, Value::Number(n, _) if n == "1")
}

fn calls_an_aggregate(e: &Expr, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    visit_expressions(e, |e| match e {
        Expr::Function(f) if f.over.is_some() || is_aggregate(&f.name.to_string()) => {
            ControlFlow::Break(())
        }
        Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. } => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

/// Rewrites `query` as the module says, if it has that shape.
fn as_first_value(query: &mut Query, is_aggregate: &dyn Fn(&str) -> bool) -> bool {
    if !limited_to_one(query) {
        return false;
    }
    let Some(OrderByKind::Expressions(terms)) = query.order_by.as_ref().map(|o| &o.kind) else {
        return false;
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return false;
    };
    let no_groups =
        matches!(&select.group_by, GroupByExpr::Expressions(g, m) if g.is_empty() && m.is_empty());
    if select.distinct.is_some() || select.having.is_some() || !no_groups {
        return false;
    }
    let [item] = select.projection.as_mut_slice() else {
        return false;
    };
    let (value, alias) = match item {
        SelectItem::UnnamedExpr(e) => (e, None),
        SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.to_lowercase())),
        _ => return false,
    };
    if calls_an_aggregate(value, is_aggregate) {
        return false;
    }
    let order: Vec<String> = terms
        .iter()
        .map(|t| {
            let itself = match &t.expr {
                Expr::Value(v) => matches!(&v.value, Value::Number(n, _) if n == "1"),
                Expr::Identifier(id) => alias.as_deref() == Some(id.value.to_lowercase().as_str()),
                _ => false,
            };
            let mut t = t.clone();
            if itself {
                t.expr = value.clone();
            }
            t.to_string()
        })
        .collect();
    let text = format!("first_value({value} ORDER BY {})", order.join(", "));
    let Ok(first) = Parser::new(&GenericDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
    else {
        return false;
    };
    *value = first;
    query.order_by = None;
    query.limit_clause = None;
    true
}

#[cfg(test)]
mod tests;
