//! Batches cut to the rows a node above can copy its constants into.
//!
//! [`SlicedExec`] sits below a node (a projection, filter, aggregate,
//! sort, join or repartition) whose expressions copy a large constant (or
//! a parameter) into each row. It measures those constants once per
//! stream, on its first batch (a parameter's value is bound only by then),
//! and cuts each batch into slices of at most [`SLICE_BYTES`] / (their
//! bytes) rows, so that the copies in one batch take at most
//! [`SLICE_BYTES`]. Slices share their batch's
//! buffers: nothing is copied here.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    apply_expression_roots,
};
use futures::{StreamExt, stream};

use crate::functions::value_bytes as bytes;

/// The bytes that copies of constants may take in one batch of a column
/// (or of all such columns of a node together).
pub const SLICE_BYTES: usize = 64 << 20;

/// Passes its input's rows on, in slices whose rows the node above can
/// copy its `constants` into within [`SLICE_BYTES`]. Order, partitioning
/// and schema are its input's.
#[derive(Debug)]
pub struct SlicedExec {
    input: Arc<dyn ExecutionPlan>,
    /// Expressions returning one value for every row: the large constants
    /// and parameters the node above copies into each row.
    constants: Vec<Arc<dyn PhysicalExpr>>,
}

impl SlicedExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, constants: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        Self { input, constants }
    }

    /// The node whose batches it cuts.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
}

/// The rows of a slice whose copies of values of `bytes` bytes take at
/// most [`SLICE_BYTES`]; at least one.
pub fn slice_rows(bytes: usize) -> usize {
    SLICE_BYTES.checked_div(bytes).unwrap_or(usize::MAX).max(1)
}

/// The bytes of the string and binary values `constants` return over
/// `batch`.
fn measure(constants: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<usize> {
    let empty = batch.slice(0, 0);
    let mut total = 0usize;
    for c in constants {
        if let ColumnarValue::Scalar(value) = c.evaluate(&empty)? {
            total = total.saturating_add(bytes(&value).unwrap_or(0));
        }
    }
    Ok(total)
}

/// `batch` in slices of at most `rows` rows.
fn slices(batch: RecordBatch, rows: usize) -> Vec<RecordBatch> {
    let n = batch.num_rows();
    if n <= rows {
        return vec![batch];
    }
    (0..n)
        .step_by(rows)
        .map(|from| batch.slice(from, rows.min(n - from)))
        .collect()
}

impl DisplayAs for SlicedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SlicedExec: copies of {} constant(s) within {SLICE_BYTES} bytes a batch",
            self.constants.len()
        )
    }
}

impl ExecutionPlan for SlicedExec {
    fn name(&self) -> &str {
        "SlicedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(&self.constants, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        #[expect(deprecated)]
        self.with_new_children(children)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("SlicedExec has one child, got {}", children.len());
        }
        Ok(Arc::new(Self::new(
            children.swap_remove(0),
            self.constants.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let constants = self.constants.clone();
        let mut rows = None;
        let out = input.flat_map(move |batch| {
            let cut = batch.and_then(|batch| {
                let rows = match rows {
                    Some(rows) => rows,
                    None => *rows.insert(slice_rows(measure(&constants, &batch)?)),
                };
                Ok(slices(batch, rows))
            });
            stream::iter(match cut {
                Ok(slices) => slices.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, out)))
    }
}
