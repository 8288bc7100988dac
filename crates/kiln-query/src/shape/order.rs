//! `ORDER BY` terms holding a scalar subquery, rewritten right after
//! parsing as DataFusion plans them. DataFusion plans scalar subqueries in
//! projections, filters and joins, not in a sort, so `ORDER BY (SELECT
//! max(x) FROM u WHERE u.k = t.k)` failed. Such a query sorts a derived
//! table instead, whose hidden columns are those terms:
//!
//! ```text
//! SELECT a FROM t ORDER BY (SELECT ...), 1 LIMIT 5
//! SELECT * EXCLUDE ("__kiln_order_0") FROM
//!   (SELECT a, (SELECT ...) AS "__kiln_order_0" FROM t) AS "__kiln_sorted"
//!   ORDER BY "__kiln_order_0", 1 LIMIT 5
//! ```
//!
//! Every term but a position or an output name moves into the derived
//! table, so terms naming input columns the select list drops still work;
//! positions and output names stay, as the outer query has the same
//! columns in the same order. A `SELECT DISTINCT` is left alone (a hidden
//! column would change what is distinct) and so are set operations. `IN`
//! and `EXISTS` subqueries are left alone too: the analyzer rule
//! [`crate::rules::mark_subqueries`] answers them in a sort as it is.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, OrderByKind, Query, SelectItem, SetExpr, Statement, TableFactor, Value, VisitMut,
    VisitorMut, visit_expressions,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Prefix of the hidden columns.
const HIDDEN: &str = "__kiln_order_";

/// Whether `lower` (SQL text in lower case) may hold a subquery in an
/// `ORDER BY`: a `select` after an `order by`. Lets a protocol skip
/// parsing the text a second time.
pub fn may_rewrite(lower: &str) -> bool {
    lower
        .find("order by")
        .is_some_and(|at| lower[at..].contains("select"))
}

/// Rewrites every query of `stmt` that sorts by a scalar subquery;
/// returns whether it did.
pub fn rewrite(stmt: &mut Statement) -> bool {
    let mut r = Rewriter { changed: false };
    let _ = stmt.visit(&mut r);
    r.changed
}

struct Rewriter {
    changed: bool,
}

impl VisitorMut for Rewriter {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.changed |= sort_outside(query);
        ControlFlow::Continue(())
    }
}

/// Whether `e` holds a scalar subquery, and no `IN` or `EXISTS` one.
fn has_scalar_subquery(e: &Expr) -> bool {
    let mut scalar = false;
    let other = visit_expressions(e, |e| match e {
        Expr::Subquery(_) => {
            scalar = true;
            ControlFlow::Continue(())
        }
        Expr::InSubquery { .. } | Expr::Exists { .. } => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break();
    scalar && !other
}

/// Output names of a select list, in lower case.
fn output_names(items: &[SelectItem]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match i {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.to_lowercase()),
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => Some(id.value.to_lowercase()),
            _ => None,
        })
        .collect()
}

/// Rewrites `query` as the module says, if it sorts by a scalar subquery.
fn sort_outside(query: &mut Query) -> bool {
    let Some(OrderByKind::Expressions(terms)) = query.order_by.as_ref().map(|o| &o.kind) else {
        return false;
    };
    if !terms.iter().any(|t| has_scalar_subquery(&t.expr)) {
        return false;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return false;
    };
    if select.distinct.is_some() {
        return false;
    }
    let names = output_names(&select.projection);
    let mut order_by = query.order_by.take().expect("checked above");
    let OrderByKind::Expressions(terms) = &mut order_by.kind else {
        unreachable!("checked above")
    };
    let mut hidden = vec![];
    for (i, term) in terms.iter_mut().enumerate() {
        let stays = match &term.expr {
            Expr::Value(v) => matches!(v.value, Value::Number(..)),
            Expr::Identifier(id) => names.contains(&id.value.to_lowercase()),
            _ => false,
        };
        if stays {
            continue;
        }
        let name = Ident::with_quote('"', format!("{HIDDEN}{i}"));
        let expr = std::mem::replace(&mut term.expr, Expr::Identifier(name.clone()));
        select.projection.push(SelectItem::ExprWithAlias {
            expr,
            alias: name.clone(),
        });
        hidden.push(format!("\"{}\"", name.value));
    }
    let outer_sql = format!(
        "SELECT * EXCLUDE ({}) FROM (SELECT 1) AS \"__kiln_sorted\"",
        hidden.join(", ")
    );
    let Ok(Some(Statement::Query(mut outer))) =
        Parser::parse_sql(&GenericDialect {}, &outer_sql).map(|mut s| s.pop())
    else {
        unreachable!("the outer query parses")
    };
    let inner = Query {
        with: query.with.take(),
        body: query.body.clone(),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: std::mem::take(&mut query.locks),
        for_clause: None,
        settings: query.settings.take(),
        format_clause: None,
        pipe_operators: std::mem::take(&mut query.pipe_operators),
    };
    if let SetExpr::Select(s) = outer.body.as_mut()
        && let Some(TableFactor::Derived { subquery, .. }) =
            s.from.first_mut().map(|f| &mut f.relation)
    {
        **subquery = inner;
    }
    outer.order_by = Some(order_by);
    outer.limit_clause = query.limit_clause.take();
    outer.fetch = query.fetch.take();
    *query = *outer;
    true
}

#[cfg(test)]
mod tests;
