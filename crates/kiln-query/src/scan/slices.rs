//! [`SliceScan`]: the rows a scan holds in memory (memstore rows, slices of
//! cached segments), each batch filtered by what its statistics leave.
//!
//! Why: Kiln reports its filters to DataFusion as exact and applies them
//! here, so a batch the statistics prove wholly inside the query's ranges
//! goes on as it is (no comparison a row, no copy), and the others are
//! filtered by only the conjuncts left ([`crate::pruning::Conjuncts`]),
//! evaluated over the columns they read alone ([`Narrow`]). A scan also
//! cuts its output at the query's `LIMIT` after filtering.
//!
//! Batches left small by their filter, or small to begin with (a live
//! stream's memstore holds a few small batches per day), are gathered into
//! batches of the session's batch size before they go on ([`Coalesced`]):
//! every operator above pays a fixed cost per batch, whatever its rows.
//! Under a dashboard over a table written 25,000 rows/s, each query's raw
//! read of the memstore met dozens of batches of a few rows each.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::{BatchCoalescer, filter_record_batch};
use arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

/// A batch of the table's full schema and the filter its rows still need
/// (None: every row matches).
pub(super) type Filtered = (RecordBatch, Option<Arc<dyn PhysicalExpr>>);

/// Scans batches held in memory; see the module docs.
#[derive(Debug)]
pub(super) struct SliceScan {
    /// Per output partition, its batches.
    parts: Vec<Vec<Filtered>>,
    projection: Option<Vec<usize>>,
    fetch: Option<usize>,
    /// The query's whole filter, for display.
    predicate: Option<Arc<dyn PhysicalExpr>>,
    properties: Arc<PlanProperties>,
    /// The table and scan it was planned from, when it reads held
    /// segments: a group-by over it can keep partials per segment
    /// ([`super::partials`]) by planning the scan again when it runs.
    pub(super) origin: Option<(super::KilnTable, super::ScanSpec)>,
}

impl SliceScan {
    /// Spreads `batches` over `target` partitions (batch i to i % n).
    pub(super) fn new(
        batches: Vec<Filtered>,
        target: usize,
        schema: SchemaRef,
        projection: Option<Vec<usize>>,
        fetch: Option<usize>,
        predicate: Option<Arc<dyn PhysicalExpr>>,
    ) -> Self {
        let mut parts = vec![vec![]; target.clamp(1, batches.len().max(1))];
        let n = parts.len();
        for (i, b) in batches.into_iter().enumerate() {
            parts[i % n].push(b);
        }
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(n),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            parts,
            projection,
            fetch,
            predicate,
            properties,
            origin: None,
        }
    }

    pub(super) fn with_origin(mut self, table: super::KilnTable, spec: super::ScanSpec) -> Self {
        self.origin = Some((table, spec));
        self
    }
}

/// The rows of `batches` their filters keep, projected, at most `fetch`,
/// small batches gathered into batches of up to `batch_size` rows
/// ([`Coalesced`]).
pub(super) fn filtered_stream(
    batches: Vec<Filtered>,
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    fetch: Option<usize>,
    batch_size: usize,
) -> SendableRecordBatchStream {
    let mut left = fetch.unwrap_or(usize::MAX);
    let mut narrowed = Narrowed::default();
    let batches = batches.into_iter().filter_map(move |(batch, filter)| {
        if left == 0 {
            return None;
        }
        let filter = filter.map(|f| narrowed.of(f, batch.schema_ref()));
        match keep(batch, filter.as_ref(), projection.as_deref()) {
            Ok(b) if b.num_rows() == 0 => None,
            Ok(b) => {
                let n = b.num_rows().min(left);
                left -= n;
                Some(Ok(b.slice(0, n)))
            }
            Err(e) => Some(Err(e)),
        }
    });
    make_cooperative(Box::pin(RecordBatchStreamAdapter::new(
        schema,
        futures::stream::iter(Coalesced::new(batches, batch_size)),
    )))
}

/// Batches under this share of the target size are gathered; larger ones
/// go on as they are (uncopied), in their place.
const SMALL_SHARE: usize = 8;

/// The batches of `inner` in their order, each under `target /
/// SMALL_SHARE` rows gathered with the small ones next to it into batches
/// of at most `target` rows (copied once, by Arrow's [`BatchCoalescer`]).
struct Coalesced<I> {
    inner: I,
    target: usize,
    /// Small batches gathered so far (made for the first one's schema).
    gathered: Option<BatchCoalescer>,
    ready: VecDeque<Result<RecordBatch>>,
    done: bool,
}

impl<I> Coalesced<I> {
    fn new(inner: I, target: usize) -> Self {
        Self {
            inner,
            target: target.max(1),
            gathered: None,
            ready: VecDeque::new(),
            done: false,
        }
    }

    /// Moves what is gathered to `ready`: the completed batches, and with
    /// `all` the rows still buffered too.
    fn drain(&mut self, all: bool) {
        let Some(c) = &mut self.gathered else {
            return;
        };
        if all && let Err(e) = c.finish_buffered_batch() {
            self.ready.push_back(Err(e.into()));
        }
        while let Some(b) = c.next_completed_batch() {
            self.ready.push_back(Ok(b));
        }
    }
}

impl<I: Iterator<Item = Result<RecordBatch>>> Iterator for Coalesced<I> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            match self.inner.next() {
                Some(Ok(b)) if b.num_rows() < (self.target / SMALL_SHARE).max(1) => {
                    let target = self.target;
                    let c = self
                        .gathered
                        .get_or_insert_with(|| BatchCoalescer::new(b.schema(), target));
                    if let Err(e) = c.push_batch(b) {
                        self.ready.push_back(Err(e.into()));
                    }
                    self.drain(false);
                }
                Some(other) => {
                    self.drain(true);
                    self.ready.push_back(other);
                }
                None => {
                    self.drain(true);
                    self.done = true;
                }
            }
        }
    }
}

/// A filter over the columns it reads alone: their indexes in the
/// batch, and the filter with its columns renumbered to them.
///
/// Why: DataFusion evaluates `a AND b` over the rows `a` keeps when they
/// are few, copying them first. Over a table's whole batch that copies
/// every column, strings included, for two or three it reads.
type Narrow = (Vec<usize>, Arc<dyn PhysicalExpr>);

/// The narrowed form of each filter a stream meets, made once: a scan's
/// batches share a few filters (one per set of conjuncts left).
#[derive(Default)]
struct Narrowed(Vec<(Arc<dyn PhysicalExpr>, Option<Narrow>)>);

impl Narrowed {
    /// `filter` narrowed over `schema`, the schema of every batch it
    /// filters; the filter as it is where that fails.
    fn of(&mut self, filter: Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Narrow {
        let all = || ((0..schema.fields().len()).collect(), filter.clone());
        if let Some((_, n)) = self.0.iter().find(|(f, _)| Arc::ptr_eq(f, &filter)) {
            return n.clone().unwrap_or_else(all);
        }
        let mut columns: Vec<usize> = collect_columns(&filter).iter().map(|c| c.index()).collect();
        columns.sort_unstable();
        let narrow = schema
            .project(&columns)
            .and_then(|s| Ok(reassign_expr_columns(filter.clone(), &s)?))
            .ok()
            .map(|e| (columns, e));
        self.0.push((filter.clone(), narrow.clone()));
        narrow.unwrap_or_else(all)
    }
}

/// The rows of `batch` for which `filter` is true (not false or null),
/// projected. The mask is computed over the filter's columns alone
/// ([`Narrow`]), and only the projected columns are copied.
fn keep(
    batch: RecordBatch,
    filter: Option<&Narrow>,
    projection: Option<&[usize]>,
) -> Result<RecordBatch> {
    let mask = match filter {
        Some((columns, f)) => {
            let read = batch.project(columns)?;
            Some(f.evaluate(&read)?.into_array(batch.num_rows())?)
        }
        None => None,
    };
    let batch = match projection {
        Some(p) => batch.project(p)?,
        None => batch,
    };
    let Some(mask) = mask else {
        return Ok(batch);
    };
    let Some(mask) = mask.as_boolean_opt() else {
        return datafusion::common::internal_err!(
            "filter {} gave {}, not booleans",
            filter.map(|f| f.1.to_string()).unwrap_or_default(),
            mask.data_type()
        );
    };
    Ok(filter_record_batch(&batch, mask)?)
}

impl DisplayAs for SliceScan {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let batches: usize = self.parts.iter().map(Vec::len).sum();
        let filtered: usize = self
            .parts
            .iter()
            .flatten()
            .filter(|(_, f)| f.is_some())
            .count();
        write!(
            f,
            "SliceScan: partitions={}, batches={batches}, filtered={filtered}",
            self.parts.len()
        )?;
        if let Some(p) = &self.predicate {
            write!(f, ", predicate={p}")?;
        }
        if let Some(n) = self.fetch {
            write!(f, ", fetch={n}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SliceScan {
    fn name(&self) -> &str {
        "SliceScan"
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
        match &self.predicate {
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

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Ok(filtered_stream(
            self.parts[partition].clone(),
            self.properties.eq_properties.schema().clone(),
            self.projection.clone(),
            self.fetch,
            ctx.session_config().batch_size(),
        ))
    }
}

#[cfg(test)]
mod tests;
