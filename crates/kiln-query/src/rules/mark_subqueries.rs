//! [`MarkSubqueries`]: an uncorrelated `x IN (subquery)` or `EXISTS
//! (subquery)` in a select list or an `ORDER BY` is answered through a mark
//! join, as DataFusion answers one inside a filter's `OR`.
//!
//! Why: DataFusion plans `IN` and `EXISTS` subqueries in filters only and
//! refuses them elsewhere at execution ("Physical plan does not support
//! logical expression InSubquery"). Grafana's table list (`SELECT CASE
//! WHEN quote_ident(table_schema) IN (SELECT ... search_path ...) THEN
//! ... END ... ORDER BY CASE WHEN ... IN (...) THEN 0 ELSE 1 END`) and
//! reports that flag rows by membership write them so.
//!
//! An analyzer rule, after type coercion: the node's input gets a `LeftMark`
//! join with the subquery (on `x = value` for `IN`), which adds one boolean
//! column, true where the row has a match. `EXISTS` is that column. `IN`
//! keeps PostgreSQL's three-valued answer: true on a match, else NULL when
//! `x` is NULL and the subquery has rows or when the subquery holds a NULL,
//! else false; the NULL tests read the subquery once more (one scalar
//! subquery), only where `x` or the value can be NULL. A sort has its
//! terms computed in a projection below it (DataFusion plans scalar
//! subqueries in projections, not sorts) and its input's columns restored
//! above it. Correlated subqueries are left as they are.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result, ScalarValue};
use datafusion::functions_aggregate::count::count_all;
use datafusion::functions_aggregate::expr_fn::bool_or;
use datafusion::logical_expr::expr::{Exists, InSubquery, Sort as SortExpr};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    Expr, ExprSchemable, JoinType, LogicalPlan, LogicalPlanBuilder, Projection, Subquery, case,
    lit, when,
};
use datafusion::optimizer::AnalyzerRule;

/// Prefix of the mark joins' aliases and of a sort's computed terms.
const ALIAS: &str = "__kiln_mark_";

/// Answers uncorrelated `IN` and `EXISTS` subqueries in projections and
/// sorts through mark joins.
#[derive(Debug, Default)]
pub struct MarkSubqueries;

impl AnalyzerRule for MarkSubqueries {
    fn name(&self) -> &str {
        "kiln_mark_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let mut next = 0usize;
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Projection(p) if p.expr.iter().any(markable) => {
                let names = NamePreserver::new_for_projection();
                let mut input = Arc::unwrap_or_clone(p.input);
                let exprs = p
                    .expr
                    .into_iter()
                    .map(|e| {
                        let saved = names.save(&e);
                        Ok(saved.restore(mark(e, &mut input, &mut next)?))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let p = Projection::try_new(exprs, Arc::new(input))?;
                Ok(Transformed::yes(LogicalPlan::Projection(p)))
            }
            LogicalPlan::Sort(s) if s.expr.iter().any(|t| markable(&t.expr)) => {
                let columns: Vec<Expr> = s
                    .input
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect();
                let mut input = Arc::unwrap_or_clone(s.input);
                let mut computed = vec![];
                let mut terms = vec![];
                for t in s.expr {
                    if !markable(&t.expr) {
                        terms.push(t);
                        continue;
                    }
                    let name = format!("{ALIAS}{next}");
                    next += 1;
                    let SortExpr {
                        expr,
                        asc,
                        nulls_first,
                    } = t;
                    computed.push(mark(expr, &mut input, &mut next)?.alias(&name));
                    terms.push(SortExpr {
                        expr: Expr::Column(Column::from_name(name)),
                        asc,
                        nulls_first,
                    });
                }
                let below: Vec<Expr> = columns.iter().cloned().chain(computed).collect();
                let plan = LogicalPlanBuilder::from(input)
                    .project(below)?
                    .sort_with_limit(terms, s.fetch)?
                    .project(columns)?
                    .build()?;
                Ok(Transformed::yes(plan))
            }
            node => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
    }
}

/// Whether `e` holds an uncorrelated `IN` or `EXISTS` subquery.
fn markable(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(match e {
            Expr::InSubquery(InSubquery { subquery, .. })
            | Expr::Exists(Exists { subquery, .. }) => subquery.outer_ref_columns.is_empty(),
            _ => false,
        })
    })
    .unwrap_or(false)
}

/// `e` with each uncorrelated `IN` and `EXISTS` subquery replaced by its
/// answer from a mark join added to `input`.
fn mark(e: Expr, input: &mut LogicalPlan, next: &mut usize) -> Result<Expr> {
    e.transform_down(|e| match e {
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated,
        }) if subquery.outer_ref_columns.is_empty() => {
            let x_nullable = expr.nullable(input.schema())?;
            let sq = Arc::unwrap_or_clone(subquery.subquery.clone());
            let (joined, right, found) = mark_join(input, &sq, next, |value| {
                Some((*expr).clone().eq(Expr::Column(value)))
            })?;
            *input = joined;
            let value_nullable = right.schema().field(0).is_nullable();
            let answer = match x_nullable || value_nullable {
                false => found,
                true => {
                    let value = Expr::Column(Column::from(sq.schema().qualified_field(0)));
                    let on_miss = miss(&sq, value, &subquery, x_nullable.then_some(*expr))?;
                    when(found, lit(true)).otherwise(on_miss)?
                }
            };
            let answer = if negated { !answer } else { answer };
            Ok(Transformed::new(answer, true, TreeNodeRecursion::Jump))
        }
        Expr::Exists(Exists { subquery, negated }) if subquery.outer_ref_columns.is_empty() => {
            let sq = Arc::unwrap_or_clone(subquery.subquery);
            let (joined, _, found) = mark_join(input, &sq, next, |_| None)?;
            *input = joined;
            let answer = if negated { !found } else { found };
            Ok(Transformed::new(answer, true, TreeNodeRecursion::Jump))
        }
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

/// `input` with a `LeftMark` join to `sq` (aliased) on `on(first column
/// of sq)`, or on nothing; returns the join, the aliased subquery and
/// the mark column.
fn mark_join(
    input: &LogicalPlan,
    sq: &LogicalPlan,
    next: &mut usize,
    on: impl FnOnce(Column) -> Option<Expr>,
) -> Result<(LogicalPlan, LogicalPlan, Expr)> {
    let alias = format!("{ALIAS}{next}");
    *next += 1;
    let right = LogicalPlanBuilder::from(sq.clone())
        .alias(&alias)?
        .build()?;
    let value = Column::from(right.schema().qualified_field(0));
    let on = on(value).unwrap_or(lit(true));
    let joined = LogicalPlanBuilder::from(input.clone())
        .join_on(right.clone(), JoinType::LeftMark, [on])?
        .build()?;
    Ok((
        joined,
        right,
        Expr::Column(Column::new(Some(alias), "mark")),
    ))
}

/// The answer of `x IN (sq)` for a row without a match: false when `sq`
/// has no rows; else NULL when `sq` holds a NULL or `x` (given when it can
/// be NULL) is NULL; else false. `sq` is read once more, by one
/// uncorrelated scalar subquery giving its state: 0 no rows, 1 rows
/// without a NULL, 2 rows with one.
fn miss(sq: &LogicalPlan, value: Expr, like: &Subquery, x: Option<Expr>) -> Result<Expr> {
    let (n, nulls) = (Column::from_name("n"), Column::from_name("nulls"));
    let plan = LogicalPlanBuilder::from(sq.clone())
        .aggregate(
            Vec::<Expr>::new(),
            [
                count_all().alias("n"),
                bool_or(value.is_null()).alias("nulls"),
            ],
        )?
        .project([when(Expr::Column(n).eq(lit(0i64)), lit(0i64))
            .when(Expr::Column(nulls), lit(2i64))
            .otherwise(lit(1i64))?])?
        .build()?;
    let state = Expr::ScalarSubquery(Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns: vec![],
        spans: like.spans.clone(),
    });
    let unknown = lit(ScalarValue::Boolean(None));
    let rows = match x {
        Some(x) => when(x.is_null(), unknown.clone()).otherwise(lit(false))?,
        None => lit(false),
    };
    case(state)
        .when(lit(0i64), lit(false))
        .when(lit(2i64), unknown)
        .otherwise(rows)
}

#[cfg(test)]
mod tests;
