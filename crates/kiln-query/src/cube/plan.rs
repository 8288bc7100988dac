//! A cube definition made executable ([`CubePlan`]): its dimensions and
//! measures planned once against its table, checked, and turned into the
//! partial aggregation that computes its states.
//!
//! One plan serves both sides of a cube: at flush it aggregates a new
//! segment's rows into a part; at query time the same aggregation runs over
//! the rows that have no part yet (memstore, segments not built), so both
//! produce rows of one schema, which the query merges.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::execution::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{AggregateUDF, Expr, LogicalPlan, Volatility};
use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::{create_physical_expr, create_physical_sort_exprs};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionConfig;
use kiln_storage::schema::view_schema;
use kiln_storage::{CubeDef, Table};

use super::distinct::{DistinctValues, kept_as_values};
use super::merge::MergeStates;
use super::ordinals::Ordinals;
use crate::cache::AggregateKey;
use crate::error::{Error, Result};
use crate::scan::aggregate_key;

/// Aggregates a cube may keep: each merges exactly from partial states.
pub const MEASURES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "var_samp",
    "var_pop",
    "stddev_samp",
    "stddev_pop",
    "covar_samp",
    "covar_pop",
    "corr",
    "bitmap_agg",
    "approx_distinct",
    "approx_percentile_cont",
];

/// A cube's planned form.
#[derive(Debug)]
pub struct CubePlan {
    pub def: Arc<CubeDef>,
    /// Dimension expressions over the table's unqualified columns, as
    /// DataFusion's optimizer leaves a query's (analyzed, simplified).
    pub dimensions: Vec<Expr>,
    pub measures: Vec<Measure>,
    /// The table's columns the dimensions and measures read, in table
    /// order ([`Self::read`]).
    pub projection: Vec<usize>,
    /// The partial aggregation over those columns (view schema).
    group_by: PhysicalGroupBy,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Those columns of the table's view schema, the input of `aggregate`.
    input: SchemaRef,
    /// The identity of that aggregation over those columns, under which
    /// the partial cache keeps raw rows' states
    /// ([`KilnTable::aggregate_pinned`](crate::scan::KilnTable::aggregate_pinned)).
    pub raw_key: Arc<AggregateKey>,
    /// What a part holds: dimension columns, then each measure's states.
    pub schema: SchemaRef,
    /// What a scan returns: [`Self::schema`] with integer distinct counts'
    /// states given ordinals ([`super::ordinals`]).
    pub scan_schema: SchemaRef,
    /// Those states' columns and their measures' ordinals.
    ordinals: Vec<(usize, Arc<Ordinals>)>,
    /// Queries answered from this cube (`system.cubes`).
    pub answered: AtomicU64,
    /// The dimensions queries read parts merged to ([`super::rollup`]),
    /// most recently made first, at most [`ROLLUPS_KEPT`]: what a new part
    /// is merged to before its commit ([`super::Cubes::warm`]).
    rollups: parking_lot::Mutex<Vec<Vec<bool>>>,
}

/// Sets of dimensions a cube remembers parts being merged to.
pub const ROLLUPS_KEPT: usize = 32;

/// One measure: its aggregate as a query would spell it, and where its
/// states are in a part.
#[derive(Debug)]
pub struct Measure {
    /// The aggregate over unqualified table columns, without alias.
    pub expr: AggregateFunction,
    /// Its state columns' names in [`CubePlan::schema`].
    pub states: Vec<String>,
    /// The aggregate merging those states as a scan returns them.
    pub merge: Arc<AggregateUDF>,
    /// The aggregate merging them as a part keeps them, into the same
    /// ([`super::rollup::kept`]).
    pub keep: Arc<AggregateUDF>,
}

impl CubePlan {
    /// Plans `def` over `table` with `state`'s functions and rules; each
    /// error names the dimension or measure at fault.
    pub async fn new(state: &SessionState, table: &Table, def: Arc<CubeDef>) -> Result<Self> {
        let name = table.name();
        let quoted = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        for (what, c) in (def.dimensions.iter().map(|d| ("dimension", d)))
            .chain(def.measures.iter().map(|m| ("measure", m)))
        {
            let sql = format!("SELECT {} FROM {}", c.sql, quoted(name));
            plan_sql(state, &sql)
                .await
                .map_err(|e| Error::Sql(format!("{what} {}: {e}", c.sql)))?;
        }
        let dims: Vec<String> = def
            .dimensions
            .iter()
            .map(|d| format!("{} AS {}", d.sql, quoted(&d.name)))
            .collect();
        let measures: Vec<String> = def
            .measures
            .iter()
            .map(|m| format!("{} AS {}", m.sql, quoted(&m.name)))
            .collect();
        let group_by = match dims.len() {
            0 => String::new(),
            n => format!(
                " GROUP BY {}",
                (1..=n)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let all: Vec<String> = dims.iter().chain(&measures).cloned().collect();
        let sql = format!("SELECT {} FROM {}{group_by}", all.join(", "), quoted(name));
        let plan = plan_sql(state, &sql)
            .await
            .map_err(|e| Error::Sql(format!("cube '{}' on {name}: {e}", def.name)))?;
        let Some((groups, aggregates, input)) = find_aggregate(&plan) else {
            return Err(Error::Sql(format!(
                "cube '{}': its measures must be aggregates ({})",
                def.name,
                MEASURES.join(", ")
            )));
        };
        let simplify = |e: Expr| -> Result<Expr> {
            let ctx = SimplifyContext::builder()
                .with_schema(input.clone())
                .build();
            Ok(unqualify(ExprSimplifier::new(ctx).simplify(e)?))
        };
        let mut dimensions = vec![];
        for (d, e) in def.dimensions.iter().zip(groups) {
            let e = e.unalias_nested().data;
            if !immutable(&e) {
                return Err(Error::Sql(format!(
                    "dimension {}: not deterministic (a dimension must give the same value for the same row every time)",
                    d.sql
                )));
            }
            dimensions.push(simplify(e)?);
        }
        let mut funcs = vec![];
        for (m, e) in def.measures.iter().zip(aggregates) {
            let Expr::AggregateFunction(f) = e.unalias_nested().data else {
                return Err(Error::Sql(format!(
                    "measure {}: not an aggregate; a measure is one of {}",
                    m.sql,
                    MEASURES.join(", ")
                )));
            };
            check_measure(&m.sql, &f)?;
            let Expr::AggregateFunction(f) = simplify(Expr::AggregateFunction(f))? else {
                unreachable!("simplifying keeps an aggregate an aggregate")
            };
            funcs.push(f);
        }
        Self::physical(state, table, def, dimensions, funcs)
    }

    fn physical(
        state: &SessionState,
        table: &Table,
        def: Arc<CubeDef>,
        dimensions: Vec<Expr>,
        funcs: Vec<AggregateFunction>,
    ) -> Result<Self> {
        let view = view_schema(&table.schema);
        let projection = read_columns(&view, &dimensions, &funcs);
        let input = Arc::new(view.project(&projection)?);
        let df_schema = DFSchema::try_from(input.as_ref().clone())?;
        let props = state.execution_props();
        let planning = PhysicalPlanningContext::default();
        let mut groups = vec![];
        for (d, e) in def.dimensions.iter().zip(&dimensions) {
            groups.push((
                create_physical_expr(e, &df_schema, props, &planning)?,
                d.name.clone(),
            ));
        }
        let group_by = PhysicalGroupBy::new_single(groups);
        let mut aggregates = vec![];
        // What queries merge states with (a distinct count's partial
        // states in the scan's form).
        let mut merging = vec![];
        let mut ordinals = vec![];
        for (m, f) in def.measures.iter().zip(&funcs) {
            let args = f
                .params
                .args
                .iter()
                .map(|a| create_physical_expr(a, &df_schema, props, &planning))
                .collect::<DfResult<Vec<_>>>()?;
            let order =
                create_physical_sort_exprs(&f.params.order_by, &df_schema, props, &planning)?;
            // An integer distinct count keeps its values sorted and coded.
            let values = f.func.name() == "count"
                && f.params.distinct
                && args.len() == 1
                && kept_as_values(&args[0].data_type(&input)?);
            let build = |func: Arc<AggregateUDF>, distinct: bool| {
                AggregateExprBuilder::new(func, args.clone())
                    .schema(input.clone())
                    .alias(m.name.clone())
                    .with_distinct(distinct)
                    .order_by(order.clone())
                    .build()
                    .map(Arc::new)
            };
            let (agg, merged) = match values {
                true => {
                    let o = Arc::new(Ordinals::default());
                    ordinals.push((aggregates.len(), o.clone()));
                    let udf = |d: DistinctValues| Arc::new(AggregateUDF::from(d));
                    (
                        build(udf(DistinctValues::new(o.clone())), false)?,
                        build(udf(DistinctValues::scanned(o)), false)?,
                    )
                }
                false => {
                    let agg = build(f.func.clone(), f.params.distinct)?;
                    (agg.clone(), agg)
                }
            };
            aggregates.push(agg);
            merging.push(merged);
        }
        let probe = AggregateExec::try_new(
            AggregateMode::Partial,
            group_by.clone(),
            aggregates.clone(),
            vec![None; aggregates.len()],
            Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
                input.clone(),
            )),
            input.clone(),
        )?;
        let schema = probe.schema();
        let mut measures = vec![];
        for (i, (f, (agg, merged))) in funcs
            .into_iter()
            .zip(aggregates.iter().zip(merging))
            .enumerate()
        {
            let states = agg
                .state_fields()?
                .iter()
                .map(|f| f.name().clone())
                .collect();
            let merge = AggregateUDF::new_from_impl(MergeStates::new(merged, def.id, i));
            let keep = AggregateUDF::new_from_impl(MergeStates::kept(agg.clone(), def.id, i));
            measures.push(Measure {
                expr: f,
                states,
                merge: Arc::new(merge),
                keep: Arc::new(keep),
            });
        }
        // A measure's states follow the dimensions and earlier measures'.
        let mut at = def.dimensions.len();
        let mut starts = vec![];
        for agg in &aggregates {
            starts.push(at);
            at += agg.state_fields()?.len();
        }
        let ordinals: Vec<(usize, Arc<Ordinals>)> =
            ordinals.into_iter().map(|(m, o)| (starts[m], o)).collect();
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        for (i, _) in &ordinals {
            let f = fields[*i].as_ref().clone();
            fields[*i] = Arc::new(f.with_data_type(DataType::LargeBinary));
        }
        let scan_schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        let rows = Arc::new(EmptyExec::new(input.clone()));
        let raw = aggregate_exec(&group_by, &aggregates, rows, &input)?;
        let raw_key = Arc::new(aggregate_key(&raw, Some(projection.clone()))?);
        Ok(Self {
            def,
            dimensions,
            measures,
            projection,
            group_by,
            aggregates,
            input,
            raw_key,
            schema,
            scan_schema,
            ordinals,
            answered: AtomicU64::new(0),
            rollups: Default::default(),
        })
    }

    /// Records that a part was merged to the dimensions in `used` (called
    /// when a merge is made, not when a kept one is read).
    pub fn rolled_up_to(&self, used: &[bool]) {
        let mut rollups = self.rollups.lock();
        rollups.retain(|u| u != used);
        rollups.insert(0, used.to_vec());
        rollups.truncate(ROLLUPS_KEPT);
    }

    /// The dimensions parts were recently merged to, most recent first.
    pub fn rollups(&self) -> Vec<Vec<bool>> {
        self.rollups.lock().clone()
    }

    /// `batch` (rows of [`Self::schema`]) as a scan returns it
    /// ([`Self::scan_schema`]): distinct counts' states given ordinals.
    pub fn for_scan(&self, batch: RecordBatch) -> DfResult<RecordBatch> {
        if self.ordinals.is_empty() {
            return Ok(batch);
        }
        let mut columns = batch.columns().to_vec();
        for (i, o) in &self.ordinals {
            columns[*i] = o.encode(&columns[*i])?;
        }
        Ok(RecordBatch::try_new(self.scan_schema.clone(), columns)?)
    }

    /// Bytes the measures' ordinals hold.
    pub fn ordinal_bytes(&self) -> usize {
        self.ordinals.iter().map(|(_, o)| o.bytes()).sum()
    }

    /// The columns of `rows` (of the table's schema, strings viewed or not)
    /// the cube reads: what [`Self::states_of`] and [`Self::aggregate`]
    /// take. A scan reading only these copies only these.
    pub fn read(&self, rows: &RecordBatch) -> DfResult<RecordBatch> {
        Ok(rows.project(&self.projection)?)
    }

    /// The cube's states over `rows` (as [`Self::read`] returns them, strings
    /// viewed), every group aggregated: a part's rows ([`Self::schema`]),
    /// unsorted.
    pub async fn states_of(&self, rows: RecordBatch) -> DfResult<RecordBatch> {
        let input = MemorySourceConfig::try_new_exec(&[vec![rows]], self.input.clone(), None)?;
        let states = self
            .aggregate(input)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let batches = collect(states, states_context()).await?;
        Ok(concat_batches(&self.schema, &batches)?)
    }

    /// The cube's states over `rows` (an input of [`Self::read`]'s columns,
    /// strings viewed): dimension values and each measure's partial state,
    /// per group.
    pub fn aggregate(&self, rows: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let agg = aggregate_exec(&self.group_by, &self.aggregates, rows, &self.input)?;
        Ok(Arc::new(agg))
    }
}

/// Where states are made or merged to be kept: one partition, and every
/// row aggregated (a partial aggregation may otherwise pass rows through
/// unaggregated once it sees few repeats).
/// Made once: a task context's runtime takes a memory pool, a disk
/// manager and caches to make, more than a few rows' states cost.
pub fn states_context() -> Arc<TaskContext> {
    static CONTEXT: LazyLock<Arc<TaskContext>> = LazyLock::new(|| {
        let mut config = SessionConfig::new().with_target_partitions(1);
        config
            .options_mut()
            .execution
            .skip_partial_aggregation_probe_ratio_threshold = 2.0;
        Arc::new(TaskContext::default().with_session_config(config))
    });
    CONTEXT.clone()
}

/// The partial aggregation of `aggregates` grouped by `group_by` over
/// `rows` (of schema `input`).
fn aggregate_exec(
    group_by: &PhysicalGroupBy,
    aggregates: &[Arc<AggregateFunctionExpr>],
    rows: Arc<dyn ExecutionPlan>,
    input: &SchemaRef,
) -> DfResult<AggregateExec> {
    AggregateExec::try_new(
        AggregateMode::Partial,
        group_by.clone(),
        aggregates.to_vec(),
        vec![None; aggregates.len()],
        rows,
        input.clone(),
    )
}

async fn plan_sql(state: &SessionState, sql: &str) -> DfResult<LogicalPlan> {
    let plan = state.create_logical_plan(sql).await?;
    state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})
}

/// The group and aggregate expressions of the plan's aggregate, with the
/// schema they read.
fn find_aggregate(plan: &LogicalPlan) -> Option<(Vec<Expr>, Vec<Expr>, Arc<DFSchema>)> {
    match plan {
        LogicalPlan::Aggregate(a) => Some((
            a.group_expr.clone(),
            a.aggr_expr.clone(),
            a.input.schema().clone(),
        )),
        LogicalPlan::Projection(p) => find_aggregate(&p.input),
        _ => None,
    }
}

/// Refuses a measure Kiln cannot keep exactly, naming it.
fn check_measure(sql: &str, f: &AggregateFunction) -> Result<()> {
    let name = f.func.name();
    let known = |n: &str| MEASURES.contains(&n);
    if !known(name) && !f.func.aliases().iter().any(|a| known(a)) {
        return Err(Error::Sql(format!(
            "measure {sql}: {name} cannot be kept in a cube (its state does not merge exactly); a measure is one of {}",
            MEASURES.join(", ")
        )));
    }
    if f.params.distinct && name != "count" {
        return Err(Error::Sql(format!(
            "measure {sql}: DISTINCT is kept for count only"
        )));
    }
    if f.params.filter.is_some() {
        return Err(Error::Sql(format!(
            "measure {sql}: a measure takes no FILTER; make its condition a dimension and filter on it in queries"
        )));
    }
    if f.params.null_treatment.is_some() {
        return Err(Error::Sql(format!(
            "measure {sql}: IGNORE/RESPECT NULLS is not kept"
        )));
    }
    if !f.params.args.iter().all(immutable) {
        return Err(Error::Sql(format!("measure {sql}: not deterministic")));
    }
    if name == "approx_percentile_cont"
        && let Some(size) = f.params.args.get(2)
        && !digest_size(size).is_some_and(|n| (1.0..=MAX_DIGEST_SIZE as f64).contains(&n))
    {
        return Err(Error::Sql(format!(
            "measure {sql}: the t-digest size {size} is not a whole number from 1 to {MAX_DIGEST_SIZE}"
        )));
    }
    Ok(())
}

/// The largest t-digest a cube keeps (`approx_percentile_cont`'s third
/// argument; DataFusion's default is 100): every group of every part holds
/// one of up to this many centroids, and a size near `usize::MAX` makes
/// DataFusion's digest ask for more memory than exists.
pub const MAX_DIGEST_SIZE: usize = 10_000;

/// The value of a t-digest size argument, a literal maybe cast.
fn digest_size(e: &Expr) -> Option<f64> {
    match e {
        Expr::Cast(c) => digest_size(&c.expr),
        Expr::TryCast(c) => digest_size(&c.expr),
        Expr::Literal(v, _) => {
            let n = v.cast_to(&DataType::Float64).ok()?;
            match n {
                datafusion::common::ScalarValue::Float64(Some(n)) if n.fract() == 0.0 => Some(n),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The indexes of `schema`'s columns that `dimensions` and `funcs` read,
/// ascending; at least one, so that a batch of them still counts its rows
/// (`count(*)` with no dimension reads none).
pub(super) fn read_columns(
    schema: &Schema,
    dimensions: &[Expr],
    funcs: &[AggregateFunction],
) -> Vec<usize> {
    let mut names = std::collections::HashSet::new();
    let exprs = dimensions.iter().chain(funcs.iter().flat_map(|f| {
        (f.params.args.iter())
            .chain(f.params.filter.as_deref())
            .chain(f.params.order_by.iter().map(|o| &o.expr))
    }));
    for e in exprs {
        for c in e.column_refs() {
            names.insert(c.name.clone());
        }
    }
    let read: Vec<usize> = (schema.fields().iter().enumerate())
        .filter(|(_, f)| names.contains(f.name()))
        .map(|(i, _)| i)
        .collect();
    match read.is_empty() {
        true => vec![0],
        false => read,
    }
}

/// Whether every function `e` calls gives the same result for the same
/// arguments at any time (not `random()`, not `now()`): a part keeps what
/// it computed when it was built.
fn immutable(e: &Expr) -> bool {
    !e.exists(|e| {
        Ok(match e {
            Expr::ScalarFunction(f) => f.func.signature().volatility != Volatility::Immutable,
            e => e.is_volatile_node(),
        })
    })
    .unwrap_or(true)
}

/// `e` with column qualifiers and aliases removed, so a query's expression
/// and a dimension compare equal whatever the table is called in either.
pub fn unqualify(e: Expr) -> Expr {
    e.transform_up(|e| {
        Ok(match e {
            Expr::Column(c) if c.relation.is_some() => {
                Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))
            }
            Expr::Alias(a) => Transformed::yes(*a.expr),
            e => Transformed::no(e),
        })
    })
    .map(|t| t.data)
    .expect("infallible")
}
