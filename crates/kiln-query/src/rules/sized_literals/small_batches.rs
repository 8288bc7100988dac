//! The session's batch size, lowered for a plan that copies large
//! constants into rows.
//!
//! Why: [`CopiesExec`] cuts the batches below each node that copies a
//! large constant into rows, but nodes above gather rows again into
//! batches of the session's size: a hash repartition coalesces what it
//! sends to each partition (before any accounting), a join builds its
//! output, a merge of sorted runs emits its own batches. A join on keys
//! built from a 300,000-byte constant had its repartitions gather 8,192
//! keys, 2.4 GB, a batch: the heap grew by 12 GB while the query's
//! accounted memory stayed at 4 GB. [`SmallBatchesExec`] sits at the root
//! of a plan holding a [`CopiesExec`]. It measures the constants as the
//! plan starts (a parameter's value is bound by then) and runs the plan
//! under a batch size whose copies take at most [`SLICE_BYTES`]. Nodes
//! that read whole held batches (in-memory slices) still rely on the
//! [`CopiesExec`] below each copying node.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    apply_expression_roots,
};

use super::copies::measure;
use super::{CopiesExec, SLICE_BYTES, slice_rows};

/// Runs its input with a batch size whose copies of `constants` take at
/// most [`SLICE_BYTES`] (and no larger than the session's). Order,
/// partitioning and schema are its input's.
#[derive(Debug)]
pub struct SmallBatchesExec {
    input: Arc<dyn ExecutionPlan>,
    /// Every constant a node of the plan copies into rows, once.
    constants: Vec<Arc<dyn PhysicalExpr>>,
}

impl SmallBatchesExec {
    /// `plan` under a [`SmallBatchesExec`] if a [`CopiesExec`] in it
    /// copies constants into rows (and it has none at its root yet).
    pub fn over(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        if plan.is::<SmallBatchesExec>() {
            return Ok(plan);
        }
        let mut constants: Vec<Arc<dyn PhysicalExpr>> = vec![];
        plan.apply(|node| {
            if let Some(copies) = node.downcast_ref::<CopiesExec>() {
                for c in copies.constants() {
                    if !constants.iter().any(|f| Arc::ptr_eq(f, c)) {
                        constants.push(c.clone());
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if constants.is_empty() {
            return Ok(plan);
        }
        Ok(Arc::new(Self {
            input: plan,
            constants,
        }))
    }
}

impl DisplayAs for SmallBatchesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SmallBatchesExec: batches whose copies of {} constant(s) take at most {SLICE_BYTES} bytes",
            self.constants.len()
        )
    }
}

impl ExecutionPlan for SmallBatchesExec {
    fn name(&self) -> &str {
        "SmallBatchesExec"
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
            return internal_err!("SmallBatchesExec has one child, got {}", children.len());
        }
        Ok(Arc::new(Self {
            input: children.swap_remove(0),
            constants: self.constants.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let empty = RecordBatch::new_empty(self.input.schema());
        let rows = slice_rows(measure(&self.constants, &empty)?);
        let config = context.session_config();
        if rows >= config.batch_size() {
            return self.input.execute(partition, context);
        }
        let config = config.clone().with_batch_size(rows);
        let lowered = TaskContext::new(
            context.task_id(),
            context.session_id(),
            config,
            context.scalar_functions().clone(),
            context.higher_order_functions().clone(),
            context.aggregate_functions().clone(),
            context.window_functions().clone(),
            context.runtime_env(),
        );
        self.input.execute(partition, Arc::new(lowered))
    }
}
