//! The node below one that copies constants into rows: it cuts that
//! node's batches, or, below a window function, counts its rows.
//!
//! [`CopiesExec`] sits below a node whose expressions copy a large
//! constant (or a parameter) into each row. It measures those constants
//! once per stream, on its first batch (a parameter's value is bound only
//! by then), and then, as [`Copies`] says:
//! - below a projection, filter, aggregate, sort, join or repartition, it
//!   cuts each batch into slices of at most [`SLICE_BYTES`] / (their
//!   bytes) rows, so that the copies in one batch take at most
//!   [`SLICE_BYTES`]. Slices share their batch's buffers: nothing is
//!   copied here.
//! - below a window function, it passes batches whole and counts their
//!   rows. A window evaluates its arguments over all the rows it holds of
//!   a partition at once, and may hold them all: smaller batches would
//!   only be gathered again (over 9,000 rows of a 300,000-byte constant it
//!   took 14 s and 4 GB outside any accounting). The node stops the query
//!   with a clear error before the copies would take more than
//!   [`WINDOW_BYTES`], where the window's string column would have failed
//!   with an internal error (its 32-bit offsets overflow past 2 GiB).

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    apply_expression_roots,
};
use futures::{StreamExt, stream};

use crate::error::Error;
use crate::functions::value_bytes as bytes;

/// The bytes that copies of constants may take in one batch of a column
/// (or of all such columns of a node together).
pub const SLICE_BYTES: usize = 64 << 20;

/// Most bytes the copies of constants a window function holds may take:
/// half of what a string column's 32-bit offsets address, and the limit
/// on one call's results of the sized functions.
pub const WINDOW_BYTES: usize = 1 << 30;

/// What a [`CopiesExec`] does with its input's batches.
#[derive(Debug, Clone)]
pub enum Copies {
    /// Cuts them into slices whose rows the node above can copy its
    /// constants into within [`SLICE_BYTES`].
    Sliced,
    /// Passes them whole, and fails once the window above would hold more
    /// than [`WINDOW_BYTES`] of copies.
    Capped {
        /// The window functions that copy them, as the error names them.
        functions: String,
    },
}

/// Passes its input's rows on, as [`Copies`] says, for the node above
/// that copies its `constants` into each row. Order, partitioning and
/// schema are its input's.
#[derive(Debug)]
pub struct CopiesExec {
    input: Arc<dyn ExecutionPlan>,
    /// Expressions returning one value for every row: the large constants
    /// and parameters the node above copies into each row.
    constants: Vec<Arc<dyn PhysicalExpr>>,
    copies: Copies,
}

impl CopiesExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        constants: Vec<Arc<dyn PhysicalExpr>>,
        copies: Copies,
    ) -> Self {
        Self {
            input,
            constants,
            copies,
        }
    }

    /// The node whose batches it passes on.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// What it does with them.
    pub fn copies(&self) -> &Copies {
        &self.copies
    }

    /// The constants the node above copies into each row.
    pub fn constants(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.constants
    }
}

/// The rows of a slice whose copies of values of `bytes` bytes take at
/// most [`SLICE_BYTES`]; at least one.
pub fn slice_rows(bytes: usize) -> usize {
    SLICE_BYTES.checked_div(bytes).unwrap_or(usize::MAX).max(1)
}

/// The bytes of the string and binary values `constants` return over
/// `batch` (any batch: they return one value for all rows).
pub(super) fn measure(constants: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<usize> {
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

/// The error for a window holding `rows` rows with `bytes` of copies each.
fn too_many(functions: &str, bytes: usize, rows: usize) -> DataFusionError {
    DataFusionError::External(Box::new(Error::LimitExceeded(format!(
        "window function {functions} copies {bytes} bytes of constants into each row it \
         holds: over {rows} rows that is more than the {WINDOW_BYTES}-byte limit; compute \
         the constant outside the window function (for example \
         CASE WHEN lag(x) OVER w IS NOT NULL THEN '...' END)"
    ))))
}

impl DisplayAs for CopiesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let n = self.constants.len();
        match self.copies {
            Copies::Sliced => write!(
                f,
                "SlicedExec: copies of {n} constant(s) within {SLICE_BYTES} bytes a batch"
            ),
            Copies::Capped { .. } => write!(
                f,
                "CappedExec: copies of {n} constant(s) within {WINDOW_BYTES} bytes"
            ),
        }
    }
}

impl ExecutionPlan for CopiesExec {
    fn name(&self) -> &str {
        match self.copies {
            Copies::Sliced => "SlicedExec",
            Copies::Capped { .. } => "CappedExec",
        }
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
            return internal_err!("{} has one child, got {}", self.name(), children.len());
        }
        Ok(Arc::new(Self::new(
            children.swap_remove(0),
            self.constants.clone(),
            self.copies.clone(),
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
        let copies = self.copies.clone();
        let mut each = None;
        let mut held = 0usize;
        let out = input.flat_map(move |batch| {
            let cut = batch.and_then(|batch| {
                let each = match each {
                    Some(each) => each,
                    None => *each.insert(measure(&constants, &batch)?),
                };
                match &copies {
                    Copies::Sliced => Ok(slices(batch, slice_rows(each))),
                    Copies::Capped { functions } => {
                        // The window may hold every row that passes.
                        held += batch.num_rows();
                        if held.saturating_mul(each) > WINDOW_BYTES {
                            return Err(too_many(functions, each, held));
                        }
                        Ok(vec![batch])
                    }
                }
            });
            stream::iter(match cut {
                Ok(slices) => slices.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, out)))
    }
}
