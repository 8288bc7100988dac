//! [`LazyScan`]: a scan that pins its snapshot when it executes.
//!
//! Why: a kept plan ([`crate::plan_cache`]) runs many times, and each run must
//! see the rows acknowledged before it, and prune with the parameters bound
//! for it. So this node holds what the planner decided (projection, filters,
//! limit, partitions) and plans the snapshot scan at its first `execute`.
//! DataFusion's `reset_plan_states` hands every run a fresh node, so that
//! happens once per run. The pruning predicate is built once, with the
//! node: the parameters in it are functions that read the run's values
//! when it is evaluated.

use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use parking_lot::Mutex;

use super::slices::{Filtered, filtered_stream};
use super::snapshot::ParquetFilter;
use super::{KilnTable, ScanSpec};
use crate::pruning::{Pruner, pruner};

/// Scans a Kiln table; see the module docs.
#[derive(Debug)]
pub(super) struct LazyScan {
    pub(super) table: KilnTable,
    pub(super) spec: ScanSpec,
    /// The pruning form of the predicate, built once: it reads the
    /// parameters' values when it is evaluated, as the predicate does.
    pub(super) pruning: Option<Arc<Pruner>>,
    properties: Arc<PlanProperties>,
    /// This run's snapshot scan, planned by the first partition to execute.
    planned: Mutex<Option<Planned>>,
}

/// A run's snapshot scan.
#[derive(Debug, Clone)]
enum Planned {
    /// Some segments are read from Parquet: a plan of them and the rest.
    Plan(Arc<dyn ExecutionPlan>),
    /// Every row left after pruning is in memory: streamed as they are,
    /// without building plan nodes for them (a point lookup's common case).
    Memory(Arc<Vec<Filtered>>),
}

impl LazyScan {
    pub(super) fn new(table: KilnTable, spec: ScanSpec) -> Result<Self> {
        let schema = match &spec.projection {
            Some(p) => Arc::new(table.schema.project(p)?),
            None => table.schema.clone(),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(spec.target),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            pruning: pruner(spec.predicate.as_ref(), &table.schema),
            table,
            spec,
            properties,
            planned: Mutex::new(None),
        })
    }

    /// The snapshot scan of this run, with the parameters bound now.
    fn planned(&self) -> Result<Planned> {
        let mut planned = self.planned.lock();
        if let Some(p) = &*planned {
            return Ok(p.clone());
        }
        let mut scan =
            self.table
                .scan_snapshot(&self.spec, self.pruning.as_deref(), ParquetFilter::Own)?;
        scan.held_into_batches(self.spec.conjuncts.as_deref());
        let plan = match scan.files {
            None => Planned::Memory(Arc::new(scan.in_memory)),
            Some(_) => Planned::Plan(self.table.plan_scan(&self.spec, scan)?),
        };
        *planned = Some(plan.clone());
        Ok(plan)
    }
}

impl DisplayAs for LazyScan {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "LazyScan: table={}", self.table.table.name())?;
        if let Some(p) = &self.spec.predicate {
            write!(f, ", predicate={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for LazyScan {
    fn name(&self) -> &str {
        "LazyScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        match &self.spec.predicate {
            Some(p) => f(p),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }

    fn replace_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    /// A fresh node for the next run: it will take its own snapshot.
    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self {
            table: self.table.clone(),
            spec: self.spec.clone(),
            pruning: self.pruning.clone(),
            properties: self.properties.clone(),
            planned: Mutex::new(None),
        }))
    }

    /// Output partition `partition` runs the snapshot scan's partitions
    /// `partition`, `partition + n`, ... one after the other.
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let n = self.spec.target;
        let schema = self.properties.eq_properties.schema().clone();
        let inner = match self.planned()? {
            Planned::Plan(p) => p,
            Planned::Memory(batches) => {
                // Batch i goes to partition i % n, as the plan would spread them.
                let mine = batches.iter().skip(partition).step_by(n).cloned().collect();
                let projection = self.spec.projection.clone();
                let size = context.session_config().batch_size();
                return Ok(filtered_stream(
                    mine,
                    schema,
                    projection,
                    self.spec.limit,
                    size,
                ));
            }
        };
        let parts = inner.output_partitioning().partition_count();
        let streams = futures::stream::iter((partition..parts).step_by(n))
            .map(move |p| inner.execute(p, context.clone()))
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, streams)))
    }
}
