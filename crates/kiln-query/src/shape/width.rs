//! How many entries a query's lists may hold, checked right after parsing:
//! at most [`MAX_ENTRIES`] in a select list, a `GROUP BY`, an `ORDER BY`
//! or a row of `VALUES`, PostgreSQL's limit on a target list (SQLSTATE
//! 54011).
//!
//! Why: DataFusion plans these lists in time that grows with the square of
//! their length (each entry's name is compared with those before it). In
//! a debug build, 8,000 select-list entries took 6 s to plan and 4,000
//! `ORDER BY` terms 64 s, all of it in one synchronous call that neither a
//! timeout nor a cancel can stop once it runs. At the limit the worst of
//! them plans in about a second in a release build.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    GroupByExpr, OrderByKind, Query, SetExpr, Statement, Visit, Visitor,
};

use crate::error::{Error, Result};

/// Most entries one list of a query may hold (PostgreSQL's
/// `MaxTupleAttributeNumber`).
pub const MAX_ENTRIES: usize = 1664;

/// Refuses `stmt` if a list of one of its queries, subqueries included,
/// holds more than [`MAX_ENTRIES`] entries.
pub fn check(stmt: &Statement) -> Result<()> {
    match stmt.visit(&mut Width) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(e) => Err(e),
    }
}

struct Width;

impl Visitor for Width {
    type Break = Error;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Error> {
        if let Some(order) = &query.order_by
            && let OrderByKind::Expressions(terms) = &order.kind
        {
            within("ORDER BY", terms.len())?;
        }
        body(&query.body)
    }
}

/// The lists of one query's body; its subqueries are visited on their own.
fn body(set: &SetExpr) -> ControlFlow<Error> {
    match set {
        SetExpr::Select(select) => {
            within("select list", select.projection.len())?;
            if let GroupByExpr::Expressions(keys, _) = &select.group_by {
                within("GROUP BY", keys.len())?;
            }
            ControlFlow::Continue(())
        }
        SetExpr::Values(values) => values
            .rows
            .iter()
            .try_for_each(|row| within("row of VALUES", row.len())),
        SetExpr::SetOperation { left, right, .. } => {
            body(left)?;
            body(right)
        }
        _ => ControlFlow::Continue(()),
    }
}

fn within(list: &str, entries: usize) -> ControlFlow<Error> {
    if entries <= MAX_ENTRIES {
        return ControlFlow::Continue(());
    }
    ControlFlow::Break(Error::TooManyColumns(format!(
        "target lists can have at most {MAX_ENTRIES} entries: this {list} has {entries}"
    )))
}
