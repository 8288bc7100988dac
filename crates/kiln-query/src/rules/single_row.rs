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

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, LogicalPlan, LogicalPlanBuilder, Signature,
    Subquery, Volatility,
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
            node.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::ScalarSubquery(sq) if unaggregated(&sq) => {
                        Ok(Transformed::yes(Expr::ScalarSubquery(single_row(sq)?)))
                    }
                    e => Ok(Transformed::no(e)),
                })
            })
        })
        .map(|t| t.data)
    }
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
}
