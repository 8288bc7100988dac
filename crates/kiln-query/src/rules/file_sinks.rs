//! A query written to a CSV or JSON file (`COPY ... TO 'file'`) reaches
//! the file's writer in pieces of about [`TARGET_BYTES`] of values, as
//! results sent to a client do ([`crate::chunks`]).
//!
//! Why: DataFusion's CSV and JSON sinks encode each batch as text in a
//! task of its own and queue up to a hundred encoded batches while the
//! file is written. When writing is slower than encoding, that queue holds
//! whole batches of text outside any memory accounting: copying a table of
//! 20 KB rows to a 957 MB CSV file raised the server's peak RSS by about
//! as much as the file, and a wider table or a longer file would take
//! more. A value that a batch's rows share (a view or a dictionary) is
//! also written once per row, so one encoded batch can be many times the
//! batch. [`PiecesExec`] cuts the sink's input into zero-copy slices, so
//! the queue holds about a hundred pieces of about [`TARGET_BYTES`] each
//! (one row at least). Arrow and Parquet sinks write a batch at a time
//! (Parquet's buffered row group is counted against the query's memory)
//! and are left as they are.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::datasource::file_format::csv::CsvSink;
use datafusion::datasource::file_format::json::JsonSink;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    replace_children_if_necessary,
};

use crate::chunks::{TARGET_BYTES, sliced};

/// Puts a [`PiecesExec`] below every CSV or JSON file sink (module docs).
#[derive(Debug, Default)]
pub struct FileSinkPieces;

impl PhysicalOptimizerRule for FileSinkPieces {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(sink) = node.downcast_ref::<DataSinkExec>() else {
                return Ok(Transformed::no(node));
            };
            if !encodes_text(sink.sink()) || sink.input().is::<PiecesExec>() {
                return Ok(Transformed::no(node));
            }
            let pieces = Arc::new(PiecesExec {
                input: sink.input().clone(),
            });
            Ok(Transformed::yes(replace_children_if_necessary(
                node,
                vec![pieces],
            )?))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "file_sink_pieces"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `sink` encodes batches as text, queueing them as it writes.
fn encodes_text(sink: &dyn DataSink) -> bool {
    let sink: &dyn std::any::Any = sink;
    sink.is::<CsvSink>() || sink.is::<JsonSink>()
}

/// Passes its input's batches on in slices whose values take about
/// [`TARGET_BYTES`] (one row at least). Order, partitioning and schema are
/// its input's; nothing is copied.
#[derive(Debug)]
pub struct PiecesExec {
    input: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for PiecesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PiecesExec: slices of about {TARGET_BYTES} bytes of values"
        )
    }
}

impl ExecutionPlan for PiecesExec {
    fn name(&self) -> &str {
        "PiecesExec"
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
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
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
            return internal_err!("PiecesExec has one child, got {}", children.len());
        }
        Ok(Arc::new(Self {
            input: children.swap_remove(0),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            sliced(input),
        )))
    }
}

#[cfg(test)]
mod tests;
