//! Large constants in a select list, checked against the rows they fill.
//!
//! Why: a projection copies a constant into every row of each batch.
//! `SELECT '<300,000 characters>' AS c, x FROM t` fills 8,192 rows, 2.3
//! GiB, per batch. Arrow allocates that at once, outside any memory
//! accounting, and a string column's 32-bit offsets overflow past 2 GiB:
//! the query failed with an internal error (a panic, "offset overflow")
//! after allocating gigabytes.
//!
//! [`SizedLiterals`] wraps each string or binary constant of at least
//! [`WRAPPED_FROM`] bytes that a projection returns in a [`SizedLiteral`].
//! It refuses a batch whose copies of it would take more than
//! [`MAX_CALL_BYTES`] (the limit on one function call's results, which
//! the guarded functions share) before anything is copied, naming the
//! constant's size and the batch's rows.

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{FieldRef, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

use crate::functions::MAX_CALL_BYTES;

/// Constants smaller than this are left as they are: one fills no batch
/// of up to a million rows past [`MAX_CALL_BYTES`].
pub const WRAPPED_FROM: usize = 1024;

/// Wraps the large constants projections return (module docs).
#[derive(Debug, Default)]
pub struct SizedLiterals;

impl PhysicalOptimizerRule for SizedLiterals {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(p) = node.downcast_ref::<ProjectionExec>() else {
                return Ok(Transformed::no(node));
            };
            if !p.expr().iter().any(|e| large(&e.expr).is_some()) {
                return Ok(Transformed::no(node));
            }
            let exprs = p.expr().iter().map(|e| ProjectionExpr {
                expr: match (large(&e.expr), e.expr.downcast_ref::<Literal>()) {
                    (Some(bytes), Some(inner)) => Arc::new(SizedLiteral {
                        inner: Arc::new(inner.clone()),
                        bytes,
                    }),
                    _ => e.expr.clone(),
                },
                alias: e.alias.clone(),
            });
            let wrapped = ProjectionExec::try_new(exprs, p.input().clone())?;
            Ok(Transformed::yes(Arc::new(wrapped) as Arc<dyn ExecutionPlan>))
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

/// The bytes of `expr`'s value if it is a string or binary constant of
/// at least [`WRAPPED_FROM`] bytes.
fn large(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    let bytes = match expr.downcast_ref::<Literal>()?.value() {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.len(),
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b)) => b.len(),
        _ => return None,
    };
    (bytes >= WRAPPED_FROM).then_some(bytes)
}

/// A large constant a projection returns, refused for a batch its copies
/// would fill past [`MAX_CALL_BYTES`] (module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SizedLiteral {
    inner: Arc<Literal>,
    bytes: usize,
}

impl fmt::Display for SizedLiteral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl PhysicalExpr for SizedLiteral {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let rows = batch.num_rows();
        let total = self.bytes as u128 * rows as u128;
        if total > MAX_CALL_BYTES as u128 {
            return exec_err!(
                "a constant of {} bytes in the select list, copied into each of {rows} rows, would take {total} bytes, more than the {MAX_CALL_BYTES}-byte limit on one column of one batch (rows are computed a batch at a time)",
                self.bytes
            );
        }
        self.inner.evaluate(batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}
