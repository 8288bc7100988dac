//! Cubes: aggregating indexes kept current at every flush, which answer
//! dashboard aggregates from pre-aggregated states.
//!
//! A cube (`CREATE CUBE name ON table DIMENSIONS (...) MEASURES (...)`)
//! keeps, for each segment, a part: the measures' partial states grouped
//! by the dimensions, written with the segment and committed in the same
//! manifest version ([`kiln_storage::cube`]). A query's aggregate that the
//! cube can derive is rewritten to merge those states ([`rewrite`]), and
//! what has no part yet (the memstore, segments not built, the edges of a
//! time range cutting a bucket) is aggregated from raw rows at query time
//! ([`scan`]), so an answer always includes every acknowledged row.
//!
//! Submodules, in layer order: [`rewrite`] (the optimizer rule) over
//! [`scan`] (the plan node and its execution) over `mem` (states over
//! rows in the memstore) over [`rollup`] (a part or states
//! merged to a query's dimensions) over [`plan`] (a definition
//! planned and checked) over [`merge`] (merging states), [`distinct`]
//! (sorted-values states of integer distinct counts) over [`gaps`] (how
//! parts store those values) and [`ordinals`] (their values' ordinals in
//! memory), [`statement`]
//! (the statements' syntax), [`grain`] (functions of a time bucket) over
//! [`unit`] (time buckets).

pub mod distinct;
pub mod gaps;
pub mod grain;
mod mem;
pub mod merge;
pub mod ordinals;
pub mod plan;
pub mod rewrite;
pub mod rollup;
pub mod scan;
pub mod statement;
#[cfg(test)]
mod tests;
pub mod unit;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use dashmap::DashMap;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::Count;
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::future::BoxFuture;
use kiln_storage::schema::view_schema;
use kiln_storage::{CubeBuilder, CubeDef, Db, Part, PartMeta, Table};
use object_store::path::Path;

use crate::cache::ByteLru;
use crate::error::{Error, Result};
use crate::executor::{Executor, shared};
pub use mem::MEM_ROLLUPS;
use plan::CubePlan;
use scan::{CubeScan, CubeScanExec, PhysicalRange};

thread_local! {
    /// Why no cube answered the aggregates optimized on this thread, while
    /// [`why_not`] records them (`None`: not recording).
    static MISSES: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// For `EXPLAIN` of a plan over tables with cubes: one more row
/// (`plan_type` = `cube_rewrite`) saying, for each aggregate no cube
/// answered, why each cube could not (the first condition that failed).
/// The explained plan is optimized again, on this thread, to find out.
pub fn why_not(state: &SessionState, plan: &LogicalPlan) -> Option<RecordBatch> {
    let LogicalPlan::Explain(e) = plan else {
        return None;
    };
    MISSES.with(|m| *m.borrow_mut() = Some(vec![]));
    let _ = state.optimize(&e.plan);
    let misses = MISSES.with(|m| m.borrow_mut().take()).unwrap_or_default();
    let mut lines: Vec<String> = vec![];
    for m in misses {
        if !lines.contains(&m) {
            lines.push(m);
        }
    }
    if lines.is_empty() {
        return None;
    }
    let schema = plan.schema().inner().clone();
    let columns: Vec<datafusion::arrow::array::ArrayRef> = vec![
        Arc::new(datafusion::arrow::array::StringArray::from(vec![
            "cube_rewrite",
        ])),
        Arc::new(datafusion::arrow::array::StringArray::from(vec![
            lines.join("\n"),
        ])),
    ];
    RecordBatch::try_new(schema, columns).ok()
}

/// The cubes' planned forms, decoded parts and counters, shared by the
/// rule, the scans and the part builder.
pub struct Cubes {
    /// Read lock-free by every query's rule; replaced whole on DDL.
    plans: ArcSwap<HashMap<u64, Arc<CubePlan>>>,
    /// Decoded parts by path (parts are immutable), and their rollups by
    /// path and dimensions read (`path#mask`, [`rollup::key`]).
    parts: ByteLru<String, RecordBatch>,
    /// Keys of `parts` being made, each with the turn its makers wait for.
    making: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// The session that plans definitions; weak, as the session holds the rule.
    session: OnceLock<Weak<parking_lot::RwLock<SessionState>>>,
}

impl std::fmt::Debug for Cubes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cubes")
            .field("plans", &self.plans.load().len())
            .field("parts", &self.parts)
            .finish()
    }
}

impl Cubes {
    /// With a cache of `part_bytes` for decoded parts.
    pub fn new(part_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            plans: Default::default(),
            parts: ByteLru::new(part_bytes, part_bytes / 4, 0),
            making: DashMap::new(),
            session: OnceLock::new(),
        })
    }

    /// Sets the session that plans definitions.
    pub fn attach(&self, session: Weak<parking_lot::RwLock<SessionState>>) {
        let _ = self.session.set(session);
    }

    fn state(&self) -> Result<SessionState> {
        let state = self
            .session
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::Sql("cubes: the query engine is shutting down".into()))?;
        let state = state.read().clone();
        Ok(state)
    }

    /// Plans `def` over `table` (checking it) and keeps the plan.
    pub async fn prepare(&self, table: &Table, def: Arc<CubeDef>) -> Result<Arc<CubePlan>> {
        if let Some(p) = self.plans.load().get(&def.id) {
            return Ok(p.clone());
        }
        let state = self.state()?;
        let plan = Arc::new(CubePlan::new(&state, table, def).await?);
        self.plans.rcu(|plans| {
            let mut plans = HashMap::clone(plans);
            plans.insert(plan.def.id, plan.clone());
            plans
        });
        Ok(plan)
    }

    /// Checks a definition without keeping it.
    pub async fn check(&self, table: &Table, def: Arc<CubeDef>) -> Result<()> {
        CubePlan::new(&self.state()?, table, def).await.map(|_| ())
    }

    /// Forgets a dropped cube.
    pub fn forget(&self, id: u64) {
        self.plans.rcu(|plans| {
            let mut plans = HashMap::clone(plans);
            plans.remove(&id);
            plans
        });
    }

    /// `table`'s planned cubes, each with its size in rows (parts, plus
    /// raw rows of segments without one).
    pub fn candidates(&self, table: &Table) -> Vec<(Arc<CubePlan>, u64)> {
        let cubes = table.cubes();
        if cubes.is_empty() {
            return vec![];
        }
        let plans = self.plans.load();
        let segments = table.segments();
        cubes
            .iter()
            .filter_map(|c| plans.get(&c.id).cloned())
            .map(|p| {
                let rows = segments
                    .iter()
                    .map(|s| s.part(p.def.id).map_or(s.meta.rows, |part| part.meta.rows))
                    .sum();
                (p, rows)
            })
            .collect()
    }

    /// Records why no cube answered an aggregate, if [`why_not`] asks.
    pub fn record_misses(&self, misses: Vec<String>) {
        MISSES.with(|m| {
            if let Some(m) = m.borrow_mut().as_mut() {
                m.extend(misses);
            }
        });
    }

    /// Queries a cube has answered since the start (or since it was planned).
    pub fn answered(&self, id: u64) -> u64 {
        self.plans
            .load()
            .get(&id)
            .map_or(0, |p| p.answered.load(Ordering::Relaxed))
    }

    /// Bytes of decoded parts and ordinals held.
    pub fn held_bytes(&self) -> usize {
        let ordinals: usize = self.plans.load().values().map(|p| p.ordinal_bytes()).sum();
        self.parts.usage() + ordinals
    }

    /// [`Self::part_rows`] merged to the dimensions in `used`
    /// ([`rollup`]), made once and kept the same way. Counts in `made` a
    /// read found neither kept nor merged: made by this call, or awaited
    /// from another's.
    async fn rolled_up(
        &self,
        db: &Db,
        part: &Part,
        cube: &Arc<CubePlan>,
        used: &[bool],
        ctx: &Arc<TaskContext>,
        made: &Count,
    ) -> DfResult<RecordBatch> {
        let Some(key) = rollup::key(used) else {
            if let Some(b) = self.parts.get(&part.meta.path) {
                return Ok(b);
            }
            made.add(1);
            return self.part_rows(db, part, cube).await;
        };
        let key = format!("{}#{key:x}", part.meta.path);
        if let Some(b) = self.parts.get(&key) {
            return Ok(b);
        }
        made.add(1);
        let rows = self.part_rows(db, part, cube).await?;
        // A rollup pays only once kept: where the part itself found no
        // room (no cache, or too large a part), the query reads the part.
        if !self.parts.contains(&part.meta.path) {
            return Ok(rows);
        }
        let (cube, used, ctx) = (cube.clone(), used.to_vec(), ctx.clone());
        let make = async move {
            cube.rolled_up_to(&used);
            rollup::rollup(&cube, rows, &used, ctx).await
        };
        self.kept(key, shared(make)).await
    }

    /// Keeps what queries read of a new part before its commit: its rows
    /// as [`Self::part_rows`] decodes them, from the `states` it was
    /// written from, and those merged to each set of dimensions other
    /// parts of its cube were recently merged to. So the first queries
    /// after a flush or compaction find them made, instead of making them
    /// while they hold execution slots and the others queue behind.
    pub async fn warm(
        &self,
        path: &str,
        cube: &Arc<CubePlan>,
        states: RecordBatch,
    ) -> DfResult<()> {
        let rows = scan_rows(cube, &[states])?;
        let size = rows.get_array_memory_size();
        self.parts
            .insert(path.to_string(), rows.clone(), size, |_| false);
        let rollups = cube.rollups();
        if rollups.is_empty() || !self.parts.contains(path) {
            return Ok(());
        }
        let ctx = self
            .state()
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
            .task_ctx();
        for used in rollups {
            let Some(key) = rollup::key(&used) else {
                continue;
            };
            let merged = rollup::rollup(cube, rows.clone(), &used, ctx.clone()).await?;
            let size = merged.get_array_memory_size();
            self.parts
                .insert(format!("{path}#{key:x}"), merged, size, |_| false);
        }
        Ok(())
    }

    /// A part's rows in the cube's scan schema, decoded once and kept,
    /// sorted by the cube's dimensions in their order (a query's
    /// equalities on the leading dimensions then read a slice, [`scan`]),
    /// distinct counts' ids given ordinals ([`ordinals`]).
    async fn part_rows(&self, db: &Db, part: &Part, cube: &Arc<CubePlan>) -> DfResult<RecordBatch> {
        let (db, path, cube) = (db.clone(), part.meta.path.clone(), cube.clone());
        let make = async move {
            let bytes = db
                .store()
                .get(&Path::from(path.as_str()))
                .await
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)?
                    .with_batch_size(64 * 1024)
                    .build()?;
            let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
            scan_rows(&cube, &batches)
        };
        self.kept(part.meta.path.clone(), shared(make)).await
    }

    /// The batch kept as `key`, or the one `make` makes, kept. Queries
    /// asking for the same missing key wait for one of them to make it
    /// (after a restart, every client's first chart needs the same parts).
    async fn kept(
        &self,
        key: String,
        make: impl Future<Output = DfResult<RecordBatch>>,
    ) -> DfResult<RecordBatch> {
        if let Some(b) = self.parts.get(&key) {
            return Ok(b);
        }
        let gate = self.making.entry(key.clone()).or_default().clone();
        let _turn = gate.lock().await;
        if let Some(b) = self.parts.get(&key) {
            return Ok(b);
        }
        let made = make.await;
        if let Ok(b) = &made {
            let size = b.get_array_memory_size();
            self.parts.insert(key.clone(), b.clone(), size, |_| false);
        }
        self.making.remove(&key);
        made
    }
}

/// Plans [`CubeScan`] nodes.
#[derive(Debug)]
pub struct CubePlanner {
    pub cubes: Arc<Cubes>,
}

#[async_trait]
impl ExtensionPlanner for CubePlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        _physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(scan) = node.as_any().downcast_ref::<CubeScan>() else {
            return Ok(None);
        };
        let view = view_schema(&scan.table.table().schema);
        let df_schema = DFSchema::try_from(view.as_ref().clone())?;
        let filter = match scan.filters.iter().cloned().reduce(Expr::and) {
            Some(f) => Some(session.create_physical_expr(f, &df_schema)?),
            None => None,
        };
        let part_filter = match scan.part_filters.iter().cloned().reduce(Expr::and) {
            Some(f) => Some(session.create_physical_expr(f, &scan.schema)?),
            None => None,
        };
        let range = match &scan.range {
            Some(r) => {
                let physical = |e: &datafusion::prelude::Expr| {
                    session.create_physical_expr(e.clone(), &df_schema)
                };
                let limit = |l: &scan::Limit| Ok((physical(&l.value)?, l.after));
                let dimension = scan.cube.scan_schema.index_of(&r.dimension)?;
                let column = datafusion::prelude::col(r.column.as_str());
                Some(Arc::new(PhysicalRange {
                    dimension,
                    unit: r.unit,
                    column: physical(&column)?,
                    lower: r.lower.iter().map(limit).collect::<DfResult<_>>()?,
                    upper: r.upper.iter().map(limit).collect::<DfResult<_>>()?,
                }))
            }
            None => None,
        };
        let keys = scan
            .keys
            .iter()
            .map(|(d, v)| {
                let d = scan.cube.scan_schema.index_of(d)?;
                Ok((d, session.create_physical_expr(v.clone(), &df_schema)?))
            })
            .collect::<DfResult<_>>()?;
        Ok(Some(Arc::new(CubeScanExec {
            cubes: self.cubes.clone(),
            keys,
            properties: CubeScanExec::properties_of(scan.cube.scan_schema.clone()),
            projection: None,
            cube: scan.cube.clone(),
            table: scan.table.clone(),
            filter,
            part_filter,
            range,
            used: scan.used.as_slice().into(),
            metrics: Default::default(),
        })))
    }
}

/// A part's rows as kept (`batches`, of [`CubePlan::schema`] but for
/// their fields' names, as read from its file) as a scan reads them:
/// sorted by the dimensions, distinct counts' ids given ordinals.
fn scan_rows(cube: &CubePlan, batches: &[RecordBatch]) -> DfResult<RecordBatch> {
    let batch = concat_batches(&cube.schema, batches)?;
    let batch = RecordBatch::try_new(cube.schema.clone(), batch.columns().to_vec())?;
    cube.for_scan(rollup::sorted(batch, cube.def.dimensions.len())?)
}

/// Computes parts at flush and in the background build, on a background
/// runtime: the parts of a segment are computed side by side, apart from
/// the protocol runtime's threads (connections) and the execution
/// runtime's (queries), on idle cores only ([`Executor::idle`]) unless
/// the storage engine says the work is urgent ([`kiln_storage::cpu`]),
/// then at the background threads' priority ([`Executor::background`]).
pub struct PartBuilder {
    pub cubes: Arc<Cubes>,
    pub idle: Executor,
    pub urgent: Executor,
    pub urgency: kiln_storage::Urgency,
}

impl PartBuilder {
    /// Where the next piece of work runs.
    fn executor(&self) -> Executor {
        match self.urgency.is_urgent() {
            true => self.urgent.clone(),
            false => self.idle.clone(),
        }
    }
}

impl CubeBuilder for PartBuilder {
    fn written(&self, part: &PartMeta, states: RecordBatch) -> Option<BoxFuture<'static, ()>> {
        let plan = self.cubes.plans.load().get(&part.cube_id).cloned()?;
        let (cubes, path) = (self.cubes.clone(), part.path.clone());
        let executor = self.executor();
        Some(Box::pin(async move {
            let warm = executor.plan(true, async move {
                let warmed = cubes.warm(&path, &plan, states).await;
                (path, warmed)
            });
            if let Ok((path, Err(e))) = warm.await {
                tracing::debug!(part = path, error = %e, "a new part's reads were not made before its commit");
            }
        }))
    }

    fn merge(
        &self,
        cube: &CubeDef,
        parts: Vec<RecordBatch>,
    ) -> Option<BoxFuture<'static, kiln_storage::Result<RecordBatch>>> {
        let plan = self.cubes.plans.load().get(&cube.id).cloned()?;
        let name = cube.name.clone();
        let executor = self.executor();
        Some(Box::pin(async move {
            let merged = executor.plan(true, async move {
                let states = concat_batches(&plan.schema, &parts)?;
                let states = RecordBatch::try_new(plan.schema.clone(), states.columns().to_vec())?;
                rollup::kept(&plan, states).await
            });
            merged
                .await
                .and_then(|m| m)
                .map_err(|e| kiln_storage::Error::CubeBuild {
                    cube: name,
                    reason: format!("merging parts failed: {e}"),
                })
        }))
    }

    fn build(
        &self,
        _: &Table,
        cube: &CubeDef,
        rows: RecordBatch,
    ) -> Option<BoxFuture<'static, kiln_storage::Result<RecordBatch>>> {
        let plan = self.cubes.plans.load().get(&cube.id).cloned()?;
        let name = cube.name.clone();
        let failed = move |e: String| kiln_storage::Error::CubeBuild {
            cube: name.clone(),
            reason: e,
        };
        let executor = self.executor();
        Some(Box::pin(async move {
            let rows = plan.read(&rows).map_err(|e| failed(e.to_string()))?;
            let states = executor.plan(true, async move {
                let rows = kiln_storage::memstore::view_strings(&rows);
                plan.states_of(rows).await
            });
            match states.await {
                Ok(states) => states.map_err(|e| failed(e.to_string())),
                Err(e) => Err(failed(e.to_string())),
            }
        }))
    }
}
