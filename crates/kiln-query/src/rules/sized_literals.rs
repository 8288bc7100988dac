//! Large constants in a select list, checked against the rows they fill.
//!
//! Why: a projection copies a constant value into every row of each batch.
//! `SELECT '<300,000 characters>' AS c, x FROM t` fills 8,192 rows, 2.3
//! GiB, per batch. Arrow allocates that at once, outside any memory
//! accounting, and a string column's 32-bit offsets overflow past 2 GiB:
//! the query failed with an internal error (a panic, "offset overflow")
//! after allocating gigabytes. An expression returning such a constant
//! for a whole batch (`CASE WHEN x > 0 THEN '<...>' END`, `coalesce(s,
//! '<...>')` over a batch of nulls, a prepared statement's parameter, the
//! same in an aggregate's argument) panicked the same way.
//!
//! [`SizedLiterals`] wraps each string or binary expression of a
//! projection, or argument of an aggregate (evaluated over each batch in
//! the same way), that holds a constant of at least [`WRAPPED_FROM`] bytes
//! or a parameter, in a [`SizedScalar`]. When the expression returns one
//! value for the whole batch, that refuses a batch whose copies of it
//! would take more than [`MAX_CALL_BYTES`] (the limit on one function
//! call's results, which the guarded functions share) before anything is
//! copied, naming the value's size and the batch's rows. A view type's
//! value is kept once for all rows, and is let through; expressions that
//! return a column are built by Arrow, which checks their offsets as it
//! goes.

#[cfg(test)]
mod tests;

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, exec_err, internal_err};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

use crate::functions::MAX_CALL_BYTES;

/// Constants smaller than this are left as they are: one fills no batch
/// of up to a million rows past [`MAX_CALL_BYTES`].
pub const WRAPPED_FROM: usize = 1024;

/// Wraps the projections' expressions and aggregates' arguments that
/// hold a large constant or a parameter (module docs).
#[derive(Debug, Default)]
pub struct SizedLiterals;

impl PhysicalOptimizerRule for SizedLiterals {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let rebuilt = if let Some(p) = node.downcast_ref::<ProjectionExec>() {
                projection(p)?
            } else if let Some(a) = node.downcast_ref::<AggregateExec>() {
                aggregate(a)?
            } else {
                None
            };
            Ok(match rebuilt {
                Some(rebuilt) => Transformed::yes(rebuilt),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "sized_literals"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `p` with its expressions that [`wrapped`] says wrapped, if any.
fn projection(p: &ProjectionExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let input = p.input().schema();
    let wraps = p
        .expr()
        .iter()
        .map(|e| Ok(wrapped(&e.expr, &e.expr.data_type(&input)?)))
        .collect::<Result<Vec<_>>>()?;
    if !wraps.contains(&true) {
        return Ok(None);
    }
    let exprs = p.expr().iter().zip(wraps).map(|(e, wrap)| ProjectionExpr {
        expr: if wrap { sized(&e.expr) } else { e.expr.clone() },
        alias: e.alias.clone(),
    });
    Ok(Some(Arc::new(ProjectionExec::try_new(
        exprs,
        p.input().clone(),
    )?)))
}

/// `a` with its aggregates' arguments that [`wrapped`] says wrapped, if
/// any: an aggregate evaluates its arguments over each batch as a
/// projection does.
fn aggregate(a: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let input = a.input_schema();
    let mut changed = false;
    let mut aggregates = Vec::with_capacity(a.aggr_expr().len());
    for f in a.aggr_expr() {
        let args = f.expressions();
        let wraps = args
            .iter()
            .map(|e| Ok(wrapped(e, &e.data_type(&input)?)))
            .collect::<Result<Vec<_>>>()?;
        // A reversed aggregate is left as it is: rebuilding one undoes it.
        let rebuilt = (wraps.contains(&true) && !f.is_reversed())
            .then(|| {
                let args = args
                    .iter()
                    .zip(&wraps)
                    .map(|(e, wrap)| if *wrap { sized(e) } else { e.clone() })
                    .collect();
                let order = f.order_bys().iter().map(|o| o.expr.clone()).collect();
                f.with_new_expressions(args, order)
            })
            .flatten();
        changed |= rebuilt.is_some();
        aggregates.push(rebuilt.map(Arc::new).unwrap_or_else(|| f.clone()));
    }
    Ok(changed.then(|| Arc::new(a.with_new_aggr_exprs(aggregates)) as _))
}

/// `expr` in a [`SizedScalar`].
fn sized(expr: &Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    Arc::new(SizedScalar {
        inner: expr.clone(),
    })
}

/// Whether `expr`, returning `t`, is wrapped: it returns a type whose
/// values a repeated column copies into each row, and holds a string or
/// binary constant of at least [`WRAPPED_FROM`] bytes or a function of no
/// argument (a prepared statement's parameter in a kept plan, whose value
/// is known only as it runs).
fn wrapped(expr: &Arc<dyn PhysicalExpr>, t: &DataType) -> bool {
    let copies = matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
    );
    copies
        && expr
            .exists(|e| {
                let large = e
                    .downcast_ref::<Literal>()
                    .and_then(|l| bytes(l.value()))
                    .is_some_and(|b| b >= WRAPPED_FROM);
                let nullary = e
                    .downcast_ref::<ScalarFunctionExpr>()
                    .is_some_and(|f| f.args().is_empty());
                Ok(large || nullary)
            })
            .unwrap_or(false)
}

/// The bytes of a string or binary value; `None` for other values and
/// nulls.
fn bytes(value: &ScalarValue) -> Option<usize> {
    match value {
        ScalarValue::Utf8View(Some(s)) => Some(s.len()),
        ScalarValue::BinaryView(Some(b)) => Some(b.len()),
        other => copied_bytes(other),
    }
}

/// The bytes a column repeating `value` copies into each row: those of a
/// string or binary value with offsets. A view array keeps one copy that
/// every row's view points to.
fn copied_bytes(value: &ScalarValue) -> Option<usize> {
    match value {
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => Some(s.len()),
        ScalarValue::Binary(Some(b)) | ScalarValue::LargeBinary(Some(b)) => Some(b.len()),
        _ => None,
    }
}

/// An expression of a projection holding a large constant or a
/// parameter, whose one value for a whole batch is refused where its
/// copies would fill the batch past [`MAX_CALL_BYTES`] (module docs).
#[derive(Debug, Eq)]
pub struct SizedScalar {
    inner: Arc<dyn PhysicalExpr>,
}

impl PartialEq for SizedScalar {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl Hash for SizedScalar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl fmt::Display for SizedScalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl PhysicalExpr for SizedScalar {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let out = self.inner.evaluate(batch)?;
        let rows = batch.num_rows();
        if let ColumnarValue::Scalar(value) = &out
            && let Some(bytes) = copied_bytes(value)
        {
            let total = bytes as u128 * rows as u128;
            if total > MAX_CALL_BYTES as u128 {
                return exec_err!(
                    "a constant of {bytes} bytes in the select list, copied into each of {rows} rows, would take {total} bytes, more than the {MAX_CALL_BYTES}-byte limit on one column of one batch (rows are computed a batch at a time)"
                );
            }
        }
        Ok(out)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        match children.pop() {
            Some(inner) if children.is_empty() => Ok(Arc::new(SizedScalar { inner })),
            _ => internal_err!("SizedScalar takes one child"),
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}
