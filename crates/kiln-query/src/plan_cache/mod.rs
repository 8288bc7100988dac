//! Plans kept across executions of the same statement: generic plans.
//!
//! Why: planning is most of a short query's cost. In a profile of pgbench's
//! prepared one-row lookup, DataFusion's physical planning took 41% of the
//! server's CPU, its logical optimizer 21% and Kiln's scan planning 10%;
//! executing the plan took a few percent. PostgreSQL answers the same way:
//! after a few executions of a prepared statement planned with its values
//! (custom plans) it tries one plan for every value (a generic plan) and
//! keeps it if it costs no more.
//!
//! Here a statement is eligible when its plan reads only Kiln tables and
//! calls only immutable functions (`now()` would be frozen at planning).
//! Its first [`TRIALS`] executions are planned with their values; the next
//! [`TRIALS`] run a generic plan: optimized with its placeholders, each
//! `$n` then made a function that reads the value bound for the run
//! ([`params`]), and every table scan a [`LazyScan`] that takes its
//! snapshot and prunes when it runs. The generic plan is used from then on
//! unless the custom plans' best run took at most half its best: a
//! generic plan can be slower where a value would have let the optimizer
//! rewrite a predicate. Trials are timed by the clock, so under load they
//! are noisy; a statement settled on custom plans runs its trials again
//! every [`RETRY_AFTER`] executions, and the margin keeps noise from
//! settling it there in the first place (under 50 clients a dashboard
//! chart had settled on planning every run, 15% of the server's CPU).
//!
//! A generic run in one partition (a short statement's, or any under
//! load) starts on the thread that reads it, not on the execution runtime
//! ([`crate::executor::Executor::run_short`]); once one outgrows that and
//! moves, the statement's next [`MOVED_RUNS`] generic runs start on the
//! execution runtime. Trials never start so: both kinds are timed on the
//! same runtime.
//!
//! A generic plan's parameters live in its instance, so an instance serves
//! one execution at a time; each statement keeps a small pool of them, and
//! each is made again when the server's settings, the query's share of
//! the cores, or a table it reads (dropped and created again) change. A
//! session with options of its own (`SET kiln.cubes = off`) keeps plans of
//! its own: they are kept by text and options.
//! Nothing here is durable: the cache is rebuilt by use after a restart.
//!
//! Queries sent with their values written in reach the same cache by their
//! shape: [`literals`] lifts the literals of their filters into
//! placeholders and keeps each shape's logical plan, and [`texts`]
//! finds the shape of a text like one seen before without parsing it.
//!
//! [`LazyScan`]: crate::scan

mod literals;
mod params;
#[cfg(test)]
mod tests;
mod texts;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use arrow::datatypes::DataType;
use dashmap::DashMap;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use kiln_storage::{Db, Table};
use parking_lot::Mutex;

pub(crate) use literals::{Shape, lift};
pub(crate) use params::cast_param;
use params::{ParamSlots, parameterize};
pub use texts::{Door, Learned, Template, TextHit, TextShapes};

use crate::admission::{QueryHandle, QueryRegistry};
use crate::config::PlanCacheMode;
use crate::executor::deferred;
use crate::rules::checked_patterns;
use crate::scan::{KeptPlan, KilnTable};
use crate::session::{apply_settings, partitions_for, settings_key};
use crate::shape::patterns;

/// Executions of each kind of plan before the faster is chosen.
pub const TRIALS: u64 = 5;
/// At most this many statements are tracked. When full, those not settled
/// on a generic plan are forgotten; if all are, new ones are planned per
/// execution.
const MAX_STATEMENTS: usize = 1024;
/// A statement whose best custom run (planning included) took less than
/// this runs its generic plan in one partition. A one-row lookup over a
/// cached segment served 17–23% more queries at one connection that way.
const SERIAL_BELOW_NANOS: u64 = 1_000_000;
/// At most this many idle instances of one statement's generic plan.
const MAX_INSTANCES: usize = 64;
/// Custom plans are chosen only if their best trial took at most this
/// share of the generic plan's best.
const CUSTOM_MARGIN: f64 = 0.5;
/// A statement settled on custom plans by its trials runs them again
/// after this many executions.
pub const RETRY_AFTER: u64 = 500;
/// Generic runs started on the execution runtime after one expected to be
/// short had to move there; then they start where they are read again.
const MOVED_RUNS: u32 = 100;

/// Kept plans by statement text; see the module docs.
pub struct PlanCache {
    db: Db,
    mode: PlanCacheMode,
    statements: DashMap<String, Arc<Statement>>,
    /// Queries' shapes by their text with placeholders ([`literals`]).
    shapes: DashMap<String, Kept>,
    /// Texts whose shape is known, by template ([`texts`]).
    texts: TextShapes,
    counts: Arc<Counts>,
}

/// What the cache did since the server started ([`PlanCache::counts`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PlanCounts {
    /// Executions that ran an instance of a kept generic plan.
    pub generic_runs: u64,
    /// Executions planned with their values (trials, statements whose
    /// plan is not kept or ran faster so).
    pub custom_runs: u64,
    /// Generic plan instances planned: a statement's first ones, and new
    /// ones when none was idle or settings, share of cores or tables changed.
    pub instances_planned: u64,
    /// Queries that ran through the shape their text's template learned,
    /// unparsed ([`texts`]): texts with their values written in, and
    /// texts sent again with their values apart.
    pub unparsed_runs: u64,
    /// Generic runs started on the thread that read them, expected short.
    pub short_runs: u64,
    /// Of those, runs that used their CPU time there and moved to the
    /// execution runtime.
    pub short_moved: u64,
}

#[derive(Default)]
struct Counts {
    generic_runs: AtomicU64,
    custom_runs: AtomicU64,
    instances_planned: AtomicU64,
    unparsed_runs: AtomicU64,
    short_runs: AtomicU64,
    short_moved: AtomicU64,
}

/// What is known of a query's shape ([`literals`]).
#[derive(Clone)]
pub(crate) enum Kept {
    /// Never seen before: planned as written, so a query whose shape
    /// never comes again costs no more than it did.
    New,
    /// Seen once: its shape is worth planning.
    Seen,
    Shape(Arc<Shape>),
    /// A shape that cannot be kept: planned as written.
    AsWritten,
}

const UNDECIDED: u8 = 0;
/// Planned per execution for good: its plan cannot be kept.
const CUSTOM: u8 = 1;
const GENERIC: u8 = 2;
/// Planned per execution because its trials were faster so, until it
/// runs them again ([`RETRY_AFTER`]).
const CUSTOM_FASTER: u8 = 3;

/// What is known about one statement's plans.
#[derive(Default)]
struct Statement {
    /// UNDECIDED, CUSTOM, GENERIC or CUSTOM_FASTER.
    choice: AtomicU8,
    custom: Trials,
    generic: Trials,
    /// Executions since it settled on CUSTOM_FASTER.
    since_choice: AtomicU64,
    /// Generic runs left to start on the execution runtime ([`MOVED_RUNS`]).
    moved_runs: AtomicU32,
    idle: Mutex<Vec<Instance>>,
    /// Whether a placeholder is a regular expression's pattern or flags
    /// ([`patterns::binds_patterns`]).
    patterns: bool,
}

impl Statement {
    /// Counts a run settled on CUSTOM_FASTER; after [`RETRY_AFTER`] of
    /// them, forgets the trials so that they run again.
    fn count_custom(&self) {
        if self.since_choice.fetch_add(1, Ordering::Relaxed) + 1 < RETRY_AFTER {
            return;
        }
        self.since_choice.store(0, Ordering::Relaxed);
        for t in [&self.custom, &self.generic] {
            t.runs.store(0, Ordering::Relaxed);
            t.best_nanos.store(u64::MAX, Ordering::Relaxed);
        }
        self.choice.store(UNDECIDED, Ordering::Relaxed);
    }

    /// Whether its next generic run in one partition starts where it is
    /// read: unless one had to move lately.
    fn starts_short(&self) -> bool {
        self.moved_runs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
    }
}

/// Executions of one kind of plan and the fastest of them.
struct Trials {
    runs: AtomicU64,
    best_nanos: AtomicU64,
}

impl Default for Trials {
    fn default() -> Self {
        Self {
            runs: AtomicU64::new(0),
            best_nanos: AtomicU64::new(u64::MAX),
        }
    }
}

impl Trials {
    fn record(&self, nanos: u64) -> u64 {
        self.best_nanos.fetch_min(nanos, Ordering::Relaxed);
        self.runs.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// One generic plan, ready to run once its parameters are bound.
struct Instance {
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
    slots: Arc<ParamSlots>,
    /// The session settings it was planned under.
    settings: Arc<ConfigOptions>,
    partitions: usize,
    /// The tables its scans read.
    tables: Vec<Arc<Table>>,
}

/// How one execution is planned.
enum Kind {
    /// With its values; a trial when timed.
    Custom {
        timed: bool,
    },
    Generic,
}

impl PlanCache {
    pub fn new(db: Db, mode: PlanCacheMode) -> Self {
        Self {
            db,
            mode,
            statements: DashMap::new(),
            shapes: DashMap::new(),
            texts: TextShapes::default(),
            counts: Arc::default(),
        }
    }

    /// What the cache did since the server started.
    pub fn counts(&self) -> PlanCounts {
        let c = &self.counts;
        PlanCounts {
            generic_runs: c.generic_runs.load(Ordering::Relaxed),
            custom_runs: c.custom_runs.load(Ordering::Relaxed),
            instances_planned: c.instances_planned.load(Ordering::Relaxed),
            unparsed_runs: c.unparsed_runs.load(Ordering::Relaxed),
            short_runs: c.short_runs.load(Ordering::Relaxed),
            short_moved: c.short_moved.load(Ordering::Relaxed),
        }
    }

    /// Whether queries sent with their values written in run through kept
    /// plans too ([`literals`]): unless every execution is planned with its
    /// values anyway.
    pub fn lifts_literals(&self) -> bool {
        self.mode != PlanCacheMode::ForceCustom
    }

    /// Texts whose shape is known ([`texts`]).
    pub fn texts(&self) -> &TextShapes {
        &self.texts
    }

    /// Counts a query run through its text's learned shape.
    pub(crate) fn ran_unparsed(&self) {
        self.counts.unparsed_runs.fetch_add(1, Ordering::Relaxed);
    }

    /// What is kept of the shape `key`, remembering that it was seen.
    pub(crate) fn shape(&self, key: &str) -> Kept {
        if let Some(kept) = self.shapes.get(key) {
            return match &*kept {
                Kept::Shape(s) if !s.is_current(&self.db) => Kept::Seen,
                kept => kept.clone(),
            };
        }
        if self.shapes.len() >= MAX_STATEMENTS {
            self.shapes.retain(|_, k| matches!(k, Kept::Shape(_)));
            if self.shapes.len() >= MAX_STATEMENTS {
                self.shapes.clear();
            }
        }
        self.shapes.insert(key.to_string(), Kept::Seen);
        Kept::New
    }

    /// Keeps `shape` as `key`'s, if its plan can be kept.
    pub(crate) fn keep_shape(&self, key: String, shape: Option<Shape>) -> Option<Arc<Shape>> {
        let shape = shape.filter(|s| keepable(&s.logical)).map(Arc::new);
        let kept = match &shape {
            Some(s) => Kept::Shape(s.clone()),
            None => Kept::AsWritten,
        };
        self.shapes.insert(key, kept);
        shape
    }

    /// Runs `sql`, whose plan (with placeholders `$1..$n` of `types`) is
    /// `logical`, with `params`: with a kept generic plan (kept by `sql`
    /// and the session's options) when that has proved faster, otherwise
    /// planned now with the values.
    pub async fn execute(
        &self,
        ctx: &SessionContext,
        query: &QueryHandle,
        sql: &str,
        logical: &LogicalPlan,
        types: &[DataType],
        params: &[ScalarValue],
    ) -> Result<SendableRecordBatchStream> {
        let queries = query.registry();
        let started = Instant::now();
        let settings = query.settings();
        let statement = self.statement(&settings_key(sql, &settings), logical);
        let choice = statement.as_ref().map(|s| s.choice.load(Ordering::Relaxed));
        if let (Some(s), Some(CUSTOM_FASTER)) = (&statement, choice) {
            s.count_custom();
        }
        let kind = match (&statement, choice, self.mode) {
            (None, ..)
            | (_, Some(CUSTOM | CUSTOM_FASTER), _)
            | (.., PlanCacheMode::ForceCustom) => Kind::Custom { timed: false },
            (_, Some(GENERIC), _) | (.., PlanCacheMode::ForceGeneric) => Kind::Generic,
            (Some(s), ..) if s.custom.runs.load(Ordering::Relaxed) < TRIALS => {
                Kind::Custom { timed: true }
            }
            _ => Kind::Generic,
        };
        // A trial's time runs from `from` until its stream is dropped: a
        // custom trial's from here (it plans every time), a generic one's
        // from when it has its instance, as it will once the pool holds
        // one for each concurrent run. Planning the pool's instances is
        // paid once; counted in trials, it made statements whose first runs
        // overlapped (each planning an instance) settle on custom plans.
        let timed = |stream: SendableRecordBatchStream, trial: Option<bool>, from: Instant| {
            let (Some(statement), Some(generic)) = (statement.clone(), trial) else {
                return stream;
            };
            let done = Finish(Some(Box::new(move || {
                record(&statement, generic, from.elapsed().as_nanos() as u64);
            })));
            with_finish(stream, done)
        };
        if let (Kind::Generic, Some(s)) = (&kind, &statement) {
            match self
                .generic(ctx, queries, &settings, s, logical, types)
                .await
            {
                Ok(instance) => {
                    let from = Instant::now();
                    let trial = self.mode == PlanCacheMode::Auto
                        && s.choice.load(Ordering::Relaxed) == UNDECIDED;
                    if !trial && instance.partitions == 1 && s.starts_short() {
                        self.counts.short_runs.fetch_add(1, Ordering::Relaxed);
                        let (s, counts) = (s.clone(), self.counts.clone());
                        query.expect_short(Box::new(move || {
                            s.moved_runs.store(MOVED_RUNS, Ordering::Relaxed);
                            counts.short_moved.fetch_add(1, Ordering::Relaxed);
                        }));
                    }
                    let stream = run_generic(s.clone(), instance, params)?;
                    self.counts.generic_runs.fetch_add(1, Ordering::Relaxed);
                    return Ok(timed(stream, trial.then_some(true), from));
                }
                Err(e) => {
                    tracing::debug!(sql, error = %e, "no generic plan; planning per execution");
                    s.choice.store(CUSTOM, Ordering::Relaxed);
                }
            }
        }
        let stream = custom(ctx, query, logical, params).await?;
        self.counts.custom_runs.fetch_add(1, Ordering::Relaxed);
        let trial = matches!(kind, Kind::Custom { timed: true });
        Ok(timed(stream, trial.then_some(false), started))
    }

    /// Whether `logical`, the plan of `sql` run by `query`, binds a
    /// regular expression's pattern or flags to a placeholder, whose values
    /// are then compiled before they run ([`patterns::check_bound`]):
    /// worked out once per statement kept, not at every execution.
    pub fn binds_patterns(&self, query: &QueryHandle, sql: &str, logical: &LogicalPlan) -> bool {
        let settings = query.settings();
        match self.statement(&settings_key(sql, &settings), logical) {
            Some(statement) => statement.patterns,
            None => patterns::binds_patterns(logical),
        }
    }

    /// The statement's record, made on first use; None if the cache is
    /// full of statements that run generic plans.
    fn statement(&self, sql: &str, logical: &LogicalPlan) -> Option<Arc<Statement>> {
        if let Some(s) = self.statements.get(sql) {
            return Some(s.clone());
        }
        if self.statements.len() >= MAX_STATEMENTS {
            // Make room: statements not settled on a generic plan cost only
            // a few trials to learn again.
            self.statements
                .retain(|_, s| s.choice.load(Ordering::Relaxed) == GENERIC);
            if self.statements.len() >= MAX_STATEMENTS {
                return None;
            }
        }
        // A statement whose plan cannot be kept is remembered as custom,
        // so its plan is not walked again.
        let choice = if keepable(logical) { UNDECIDED } else { CUSTOM };
        let statement = self.statements.entry(sql.to_string()).or_insert_with(|| {
            Arc::new(Statement {
                choice: AtomicU8::new(choice),
                patterns: patterns::binds_patterns(logical),
                ..Default::default()
            })
        });
        Some(statement.value().clone())
    }

    /// An idle generic instance still valid now, or a new one, planned
    /// with the session's options `own` (the statement's key has them).
    async fn generic(
        &self,
        ctx: &SessionContext,
        queries: &QueryRegistry,
        own: &[(String, String)],
        statement: &Statement,
        logical: &LogicalPlan,
        types: &[DataType],
    ) -> Result<Instance> {
        let settings = ctx.state_ref().read().config().options().clone();
        // A statement whose custom runs were short runs its generic plan in
        // one partition: spreading it over cores (spawned tasks, a merge)
        // costs more than it saves.
        let short = statement.custom.best_nanos.load(Ordering::Relaxed) < SERIAL_BELOW_NANOS;
        let partitions = match short {
            true => 1,
            false => partitions_for(settings.execution.target_partitions, queries.running()),
        };
        {
            let mut idle = statement.idle.lock();
            idle.retain(|i| {
                Arc::ptr_eq(&i.settings, &settings)
                    && i.tables.iter().all(|t| {
                        self.db
                            .table(t.name())
                            .is_some_and(|now| Arc::ptr_eq(&now, t))
                    })
            });
            if let Some(at) = idle.iter().position(|i| i.partitions == partitions) {
                return Ok(idle.swap_remove(at));
            }
        }
        self.counts
            .instances_planned
            .fetch_add(1, Ordering::Relaxed);
        let mut state = ctx.state();
        apply_settings(state.config_mut().options_mut(), own)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        state.config_mut().options_mut().execution.target_partitions = partitions;
        state.config_mut().set_extension(Arc::new(KeptPlan));
        let optimized = state.optimize(logical)?;
        let (parameterized, slots) = parameterize(optimized, types)?;
        let plan = state
            .query_planner()
            .create_physical_plan(&parameterized, &state)
            .await?;
        Ok(Instance {
            plan,
            task: crate::session::task_ctx(&state, queries),
            slots,
            settings,
            partitions,
            tables: tables(logical),
        })
    }
}

/// Plans `logical` with `params` as `query`'s session (its user) and
/// starts it.
async fn custom(
    ctx: &SessionContext,
    query: &QueryHandle,
    logical: &LogicalPlan,
    params: &[ScalarValue],
) -> Result<SendableRecordBatchStream> {
    let queries = query.registry();
    let values = ParamValues::List(params.iter().map(|v| v.clone().into()).collect());
    let bound = checked_patterns::bind(logical.clone(), &values)?;
    let mut state = crate::session::query_state(ctx, queries);
    crate::session::apply_query(&mut state, query)
        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
    let optimized = state.optimize(&bound)?;
    let physical = state
        .query_planner()
        .create_physical_plan(&optimized, &state)
        .await?;
    Ok(deferred(
        physical,
        crate::session::task_ctx(&state, queries),
    ))
}

/// Binds `params` to `instance` and starts a fresh copy of its plan; the
/// instance goes back to the pool when the stream is dropped.
fn run_generic(
    statement: Arc<Statement>,
    instance: Instance,
    params: &[ScalarValue],
) -> Result<SendableRecordBatchStream> {
    instance.slots.bind(params)?;
    let stream = deferred(
        reset_plan_states(instance.plan.clone())?,
        instance.task.clone(),
    );
    let give_back = Finish(Some(Box::new(move || {
        let mut idle = statement.idle.lock();
        if idle.len() < MAX_INSTANCES {
            idle.push(instance);
        }
    })));
    Ok(with_finish(stream, give_back))
}

/// Records a trial run; once both kinds have had their trials, chooses.
fn record(statement: &Statement, generic: bool, nanos: u64) {
    let trials = match generic {
        true => &statement.generic,
        false => &statement.custom,
    };
    if trials.record(nanos) < TRIALS {
        return;
    }
    let (custom, generic) = (&statement.custom, &statement.generic);
    if generic.runs.load(Ordering::Relaxed) >= TRIALS {
        let custom_best = custom.best_nanos.load(Ordering::Relaxed) as f64;
        let generic_best = generic.best_nanos.load(Ordering::Relaxed) as f64;
        let generic = custom_best > generic_best * CUSTOM_MARGIN;
        let choice = if generic { GENERIC } else { CUSTOM_FASTER };
        statement.since_choice.store(0, Ordering::Relaxed);
        statement.choice.store(choice, Ordering::Relaxed);
        tracing::debug!(generic, "plan kind chosen");
    }
}

/// Runs its closure once, when dropped.
struct Finish(Option<Box<dyn FnOnce() + Send>>);

impl Drop for Finish {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f()
        }
    }
}

/// `stream`, holding `finish` until it is dropped.
fn with_finish(stream: SendableRecordBatchStream, finish: Finish) -> SendableRecordBatchStream {
    let schema = stream.schema();
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        stream.map(move |batch| {
            let _ = &finish;
            batch
        }),
    ))
}

/// True if `plan` can be kept: plain relational nodes over Kiln tables,
/// and no function whose result may change between calls (`now()`, which
/// the optimizer folds, or `random()`).
pub(crate) fn keepable(plan: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|node| {
        ok &= match node {
            LogicalPlan::TableScan(scan) => {
                source_as_provider(&scan.source).is_ok_and(|p| p.is::<KilnTable>())
            }
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::EmptyRelation(_)
            | LogicalPlan::Values(_)
            | LogicalPlan::Limit(_)
            | LogicalPlan::Sort(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::Distinct(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Window(_)
            | LogicalPlan::Subquery(_) => true,
            _ => false,
        };
        if !ok {
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                ok &= match e {
                    Expr::ScalarVariable(..) => false,
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    _ => true,
                };
                Ok(if ok {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            })
        })
    });
    ok
}

/// The Kiln tables `plan` reads.
fn tables(plan: &LogicalPlan) -> Vec<Arc<Table>> {
    let mut out = vec![];
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(p) = source_as_provider(&scan.source)
            && let Some(t) = p.downcast_ref::<KilnTable>()
        {
            out.push(t.table().clone());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}
