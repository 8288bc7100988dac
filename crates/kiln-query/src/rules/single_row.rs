//! [`SingleRowSubqueries`]: a correlated scalar subquery that is not an
//! aggregate, such as `(SELECT c.relkind FROM pg_class c WHERE c.oid =
//! t.typrelid)`, runs as PostgreSQL runs it: its one row's value, NULL
//! without a row, an error with more than one (SQLSTATE 21000).
//!
//! Why: DataFusion decorrelates only aggregated scalar subqueries and
//! refuses the rest at planning ("Correlated scalar subquery must be
//! aggregated"), which failed catalog queries of drivers (pgjdbc's
//! `getTypeInfo`, `getUDTs`) that look a row up by key this way.
//!
//! An analyzer rule: the subquery's plan gets an aggregate on top,
//! `single_row(value)` with no grouping, which DataFusion then decorrelates
//! as any aggregated subquery (grouped by the correlated columns). The
//! aggregate keeps the value of the one row it sees and fails on a second,
//! so a key that is not unique is an error, never an arbitrary row. The
//! groups are computed for every correlated value of the inner table, so
//! a value with two rows fails the query even if no outer row asks for it
//! (PostgreSQL would not look): an error where PostgreSQL answers, never a
//! wrong answer. (datafusion-postgres's SQL rewrite answers a correlated
//! subquery in a select list NULL before planning; this sees the others.)
//!
//! Two shapes DataFusion cannot decorrelate at all are first put in one
//! it can, as SQLAlchemy's column reflection writes them: filter conjuncts
//! that read only the outer row (`WHERE outer.flag AND inner.k =
//! outer.k`) become a guard around the subquery (`CASE WHEN outer.flag
//! THEN (...) END`), and a value that reads the outer row as well as its
//! own (`SELECT f(outer.a, inner.b) ...`) is computed outside over the
//! inner columns the subquery gives as one struct.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DataFusionError, Result, ScalarValue};
use datafusion::functions::core::expr_fn::{get_field, named_struct};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, Filter, LogicalPlan, LogicalPlanBuilder,
    Projection, Signature, Subquery, Volatility, lit, when,
};
use datafusion::optimizer::AnalyzerRule;

/// PostgreSQL's error for a scalar subquery with more than one row.
pub const MORE_THAN_ONE_ROW: &str =
    "more than one row returned by a subquery used as an expression";

/// Puts [`SingleRow`] on top of correlated scalar subqueries that do not
/// aggregate.
#[derive(Debug, Default)]
pub struct SingleRowSubqueries;

impl AnalyzerRule for SingleRowSubqueries {
    fn name(&self) -> &str {
        "kiln_single_row_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            // A guard changes an expression's text: its column keeps its name.
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let t = e.transform_up(|e| match e {
                    Expr::ScalarSubquery(sq) if unaggregated(&sq) => {
                        let (sq, guard) = hoist_outer_only(sq)?;
                        let (sq, outside) = outer_projection(sq)?;
                        let sq = match sq.outer_ref_columns.is_empty() {
                            true => sq,
                            false => single_row(sq)?,
                        };
                        let value = match outside {
                            Some((e, inner)) => outside_value(Expr::ScalarSubquery(sq), e, &inner)?,
                            None => Expr::ScalarSubquery(sq),
                        };
                        Ok(Transformed::yes(match guard {
                            Some(guard) => when(guard, value).end()?,
                            None => value,
                        }))
                    }
                    e => Ok(Transformed::no(e)),
                })?;
                Ok(t.update_data(|e| saved.restore(e)))
            })
        })
        .map(|t| t.data)
    }
}

/// `sq` without the conjuncts of its filter that read only the outer row
/// (`WHERE outer.flag AND inner.k = outer.k`, as SQLAlchemy's column
/// reflection writes), which DataFusion cannot decorrelate, and those
/// conjuncts as a guard over the outer row: a subquery without an
/// aggregate gives NULL when they are false, as `CASE WHEN guard THEN sq
/// END` does.
fn hoist_outer_only(sq: Subquery) -> Result<(Subquery, Option<Expr>)> {
    let mut guards = vec![];
    let plan = Arc::unwrap_or_clone(sq.subquery)
        .transform_down(|node| match node {
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => Ok(Transformed::no(node)),
            LogicalPlan::Filter(f) => {
                let (outer, inner): (Vec<Expr>, Vec<Expr>) = split_conjunction_owned(f.predicate)
                    .into_iter()
                    .partition(reads_only_the_outer_row);
                let node = match (outer.is_empty(), conjunction(inner)) {
                    (true, Some(p)) | (false, Some(p)) => {
                        LogicalPlan::Filter(Filter::try_new(p, f.input)?)
                    }
                    (_, None) => Arc::unwrap_or_clone(f.input),
                };
                let changed = !outer.is_empty();
                guards.extend(outer);
                Ok(Transformed::new(node, changed, TreeNodeRecursion::Stop))
            }
            other => Ok(Transformed::new(other, false, TreeNodeRecursion::Stop)),
        })?
        .data;
    let Some(guard) = conjunction(guards) else {
        return Ok((
            Subquery {
                subquery: Arc::new(plan),
                ..sq
            },
            None,
        ));
    };
    let guard = guard
        .transform(|e| match e {
            Expr::OuterReferenceColumn(_, c) => Ok(Transformed::yes(Expr::Column(c))),
            e => Ok(Transformed::no(e)),
        })?
        .data;
    let sq = Subquery {
        outer_ref_columns: outer_references(&plan)?,
        subquery: Arc::new(plan),
        spans: sq.spans,
    };
    Ok((sq, Some(guard)))
}

/// A subquery's value computed outside it: its expression and the inner
/// columns it reads, in the order of the struct the subquery gives.
type OutsideValue = (Expr, Vec<Column>);

/// `sq` computing only its own columns when its one value also reads the
/// outer row (`SELECT f(outer.a, inner.b) FROM ...`, which DataFusion
/// cannot decorrelate): the subquery gives the inner columns it reads as
/// one struct, and the value ([`outside_value`]) is computed over the
/// outer row. Returns the value's expression and the inner columns, in
/// the struct's order.
fn outer_projection(sq: Subquery) -> Result<(Subquery, Option<OutsideValue>)> {
    let LogicalPlan::Projection(p) = sq.subquery.as_ref() else {
        return Ok((sq, None));
    };
    let [e] = p.expr.as_slice() else {
        return Ok((sq, None));
    };
    let e = e.clone().unalias();
    if !e.exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(..))))? {
        return Ok((sq, None));
    }
    let mut inner: Vec<Column> = vec![];
    e.apply(|e| {
        if let Expr::Column(c) = e
            && !inner.contains(c)
        {
            inner.push(c.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    // A row with no inner column read still says whether there is a row.
    let mut fields = vec![lit("row"), lit(true)];
    for (i, c) in inner.iter().enumerate() {
        fields.extend([lit(format!("c{i}")), Expr::Column(c.clone())]);
    }
    let row = named_struct(fields).alias("__kiln_row");
    let plan = LogicalPlan::Projection(Projection::try_new(vec![row], p.input.clone())?);
    let sq = Subquery {
        outer_ref_columns: outer_references(&plan)?,
        subquery: Arc::new(plan),
        spans: sq.spans,
    };
    Ok((sq, Some((e, inner))))
}

/// `e` over the outer row, its inner columns read from `row` (the struct
/// [`outer_projection`] makes); NULL when the subquery has no row.
fn outside_value(row: Expr, e: Expr, inner: &[Column]) -> Result<Expr> {
    let value = e
        .transform(|e| match e {
            Expr::OuterReferenceColumn(_, c) => Ok(Transformed::yes(Expr::Column(c))),
            Expr::Column(c) => {
                let i = inner.iter().position(|x| x == &c).expect("collected");
                Ok(Transformed::yes(get_field(row.clone(), format!("c{i}"))))
            }
            e => Ok(Transformed::no(e)),
        })?
        .data;
    when(row.is_not_null(), value).end()
}

/// The outer references read anywhere in `plan`.
fn outer_references(plan: &LogicalPlan) -> Result<Vec<Expr>> {
    let mut found = vec![];
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if matches!(e, Expr::OuterReferenceColumn(..)) && !found.contains(e) {
                    found.push(e.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(found)
}

/// Whether `e` reads the outer row and nothing of the subquery's own.
fn reads_only_the_outer_row(e: &Expr) -> bool {
    let mut outer = false;
    let mut inner = false;
    let _ = e.apply(|e| {
        match e {
            Expr::OuterReferenceColumn(..) => outer = true,
            Expr::Column(_) | Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) => {
                inner = true
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    outer && !inner
}

/// A correlated subquery DataFusion would refuse: no aggregate under its
/// projections, and no bound of one row.
fn unaggregated(sq: &Subquery) -> bool {
    if sq.outer_ref_columns.is_empty() || sq.subquery.schema().fields().len() != 1 {
        return false;
    }
    let mut inner = sq.subquery.as_ref();
    while let LogicalPlan::Projection(p) = inner {
        inner = p.input.as_ref();
    }
    if let LogicalPlan::SubqueryAlias(a) = inner {
        inner = a.input.as_ref();
    }
    if let LogicalPlan::Filter(f) = inner
        && matches!(f.input.as_ref(), LogicalPlan::Aggregate(_))
    {
        inner = f.input.as_ref();
    }
    let aggregated = matches!(inner, LogicalPlan::Aggregate(a) if !a.aggr_expr.is_empty());
    !aggregated && sq.subquery.max_rows().is_none_or(|n| n > 1)
}

/// `sq` with `single_row` of its one column on top, under the same name.
fn single_row(sq: Subquery) -> Result<Subquery> {
    let (qualifier, field) = sq.subquery.schema().qualified_field(0);
    let value = Expr::Column(Column::new(qualifier.cloned(), field.name()));
    let name = field.name().clone();
    let udaf = Arc::new(AggregateUDF::new_from_impl(SingleRow::new()));
    let plan = LogicalPlanBuilder::from(Arc::unwrap_or_clone(sq.subquery))
        .aggregate(Vec::<Expr>::new(), vec![udaf.call(vec![value]).alias(name)])?
        .build()?;
    Ok(Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns: sq.outer_ref_columns,
        spans: sq.spans,
    })
}

/// `single_row(x)`: the value of the group's one row (NULL without one);
/// a second row is an error.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleRow {
    signature: Signature,
}

impl SingleRow {
    pub fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl Default for SingleRow {
    fn default() -> Self {
        Self::new()
    }
}

impl AggregateUDFImpl for SingleRow {
    fn name(&self) -> &str {
        "single_row"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(OneRow {
            value: ScalarValue::try_from(args.return_field.data_type())?,
            rows: 0,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new("value", args.return_type().clone(), true)),
            Arc::new(Field::new("rows", DataType::UInt64, false)),
        ])
    }
}

/// The value seen and how many rows carried it (0 or 1).
#[derive(Debug)]
struct OneRow {
    value: ScalarValue,
    rows: u64,
}

impl OneRow {
    fn add(&mut self, rows: u64, value: impl FnOnce() -> Result<ScalarValue>) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        if self.rows + rows > 1 {
            return Err(DataFusionError::Execution(MORE_THAN_ONE_ROW.into()));
        }
        self.rows = 1;
        self.value = value()?;
        Ok(())
    }
}

impl Accumulator for OneRow {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let values = &values[0];
        self.add(values.len() as u64, || {
            ScalarValue::try_from_array(values, 0)
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let rows = datafusion::common::cast::as_uint64_array(&states[1])?;
        for i in 0..rows.len() {
            self.add(rows.value(i), || ScalarValue::try_from_array(&states[0], i))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::UInt64(Some(self.rows)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::UInt64Array;

    #[test]
    fn one_row_keeps_its_value_and_refuses_a_second() {
        let mut acc = OneRow {
            value: ScalarValue::Int64(None),
            rows: 0,
        };
        let empty: ArrayRef = Arc::new(arrow::array::Int64Array::from(Vec::<i64>::new()));
        acc.update_batch(&[empty]).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int64(None));
        let one: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![7]));
        acc.update_batch(std::slice::from_ref(&one)).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int64(Some(7)));
        let err = acc.update_batch(&[one]).unwrap_err();
        assert!(err.to_string().contains(MORE_THAN_ONE_ROW), "{err}");
        let rows: ArrayRef = Arc::new(UInt64Array::from(vec![1]));
        let mut fresh = OneRow {
            value: ScalarValue::Int64(None),
            rows: 0,
        };
        let values: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![3]));
        fresh.merge_batch(&[values.clone(), rows.clone()]).unwrap();
        assert!(fresh.merge_batch(&[values, rows]).is_err());
    }

    #[tokio::test]
    async fn outer_only_filters_and_outer_columns_in_the_value_are_answered() {
        use datafusion::prelude::SessionContext;
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(Arc::new(SingleRowSubqueries));
        for sql in [
            "CREATE TABLE t (k INT, flag BOOLEAN, x INT) AS VALUES (1, true, 10), (2, false, 20), (3, true, 30)",
            "CREATE TABLE u (k INT, v INT) AS VALUES (1, 1), (2, 2)",
        ] {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        // SQLAlchemy's column reflection: `WHERE outer.flag AND inner.k =
        // outer.k`, and a value reading outer and inner columns, in a CASE.
        let batches = ctx
            .sql(
                "SELECT k, CASE WHEN k > 0 THEN (SELECT t.x + u.v FROM u WHERE t.flag AND u.k = t.k) \
                 END AS s FROM t ORDER BY k",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("| "))
            .skip(1)
            .collect();
        assert_eq!(rows, ["| 1 | 11 |", "| 2 |    |", "| 3 |    |"], "{text}");
    }
}
