//! The execution side: copies of one subplan that run it once.

use std::fmt;
use std::sync::{Arc, Weak};

use arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, InputDistributionRequirements,
    PlanProperties,
};
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt, TryStreamExt};
use parking_lot::Mutex;

type Rows = Shared<BoxFuture<'static, std::result::Result<Arc<Held>, Arc<DataFusionError>>>>;

/// The rows of one run of a shared subplan, while a reader holds them.
struct Run {
    rows: Rows,
}

/// What the copies of one subplan share: the run in progress.
///
/// A run lives as long as a stream reading it. A copy executed while
/// another copy's stream is alive reads that run; otherwise it starts a new
/// one. The copies of one query execute while the query's streams are
/// alive (a join creates both inputs' streams before it ends). A kept plan
/// is reset before each execution (`reset_plan_states`), which forgets the
/// run, so a run never serves another execution, whose parameters may
/// differ, even while an aborted one's tasks are still being dropped.
pub struct SharedSource {
    id: usize,
    run: Mutex<Weak<Run>>,
}

impl fmt::Debug for SharedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedSource({})", self.id)
    }
}

impl SharedSource {
    pub fn new(id: usize) -> Self {
        Self {
            id,
            run: Mutex::new(Weak::new()),
        }
    }

    /// The live run, or a new one reading `start()`; its rows are counted
    /// against `context`'s memory pool.
    fn run(
        &self,
        context: &TaskContext,
        start: impl FnOnce() -> Result<SendableRecordBatchStream>,
    ) -> Result<Arc<Run>> {
        let mut current = self.run.lock();
        if let Some(run) = current.upgrade() {
            return Ok(run);
        }
        let stream = start()?;
        let reservation =
            MemoryConsumer::new(format!("SharedExec[{}]", self.id)).register(context.memory_pool());
        let rows = collect(stream, reservation)
            .map(|r| r.map_err(Arc::new))
            .boxed()
            .shared();
        let run = Arc::new(Run { rows });
        *current = Arc::downgrade(&run);
        Ok(run)
    }

    /// Forgets the run, so the next execution starts its own.
    fn forget(&self) {
        *self.run.lock() = Weak::new();
    }
}

/// Every batch of `stream`, reserved in memory while held.
async fn collect(
    mut stream: SendableRecordBatchStream,
    reservation: MemoryReservation,
) -> Result<Arc<Held>> {
    let mut batches = vec![];
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        reservation.try_grow(batch.get_array_memory_size())?;
        batches.push(batch);
    }
    Ok(Arc::new(Held {
        batches,
        _reservation: reservation,
    }))
}

/// A run's rows and their memory reservation.
struct Held {
    batches: Vec<RecordBatch>,
    _reservation: MemoryReservation,
}

/// One copy of a shared subplan: its input is that copy's plan, which runs
/// only if no other copy's run is live.
#[derive(Debug)]
pub struct SharedExec {
    source: Arc<SharedSource>,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl SharedExec {
    pub fn new(source: Arc<SharedSource>, input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            source,
            input,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for SharedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SharedExec: id={}", self.source.id)
    }
}

impl ExecutionPlan for SharedExec {
    fn name(&self) -> &str {
        "SharedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        InputDistributionRequirements::new(vec![Distribution::SinglePartition])
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

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(
            self.source.clone(),
            children.swap_remove(0),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let run = self
            .source
            .run(&context, || self.input.execute(partition, context.clone()))?;
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let rows = run.rows.clone();
        let batches = futures::stream::once(async move {
            let held = rows.await.map_err(DataFusionError::Shared)?;
            Ok::<_, DataFusionError>(futures::stream::iter(
                (0..held.batches.len()).map(move |i| Ok(held.batches[i].clone())),
            ))
        })
        .try_flatten()
        // The stream holds the run: while it lives, other copies read it.
        .map(move |b| {
            let _ = &run;
            if let Ok(b) = &b {
                baseline.record_output(b.num_rows());
            }
            b
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            batches,
        )))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        self.source.forget();
        Ok(Arc::new(Self::new(self.source.clone(), self.input.clone())))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
