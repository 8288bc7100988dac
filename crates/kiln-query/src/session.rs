//! The DataFusion session, built once per process and shared by every query:
//! config, runtime (object store, Parquet metadata cache) and the catalog
//! of Kiln tables. Nothing here is rebuilt or re-read per query.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, SchemaProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::prelude::{SessionConfig, SessionContext};
use kiln_storage::{Db, STORE_URL};

use datafusion::optimizer::{Analyzer, AnalyzerRule, Optimizer, OptimizerRule};
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;

use crate::admission::{QueryHandle, QueryRegistry};
use crate::cache::Caches;
use crate::config::QueryConfig;
use crate::cube::rewrite::CubeRewrite;
use crate::cube::{CubePlanner, Cubes};
use crate::memory::{QueryPool, ServerPool, heap};
use crate::options::KilnOptions;
use crate::rules::balance::BalanceChains;
use crate::scan::KilnTable;

/// Catalog and schema names of user tables.
pub const CATALOG: &str = "kiln";
pub const SCHEMA: &str = "public";

/// The `public` schema: a live view of the database's tables.
#[derive(Debug)]
pub struct KilnSchema {
    db: Db,
    caches: Arc<Caches>,
}

#[async_trait]
impl SchemaProvider for KilnSchema {
    fn table_names(&self) -> Vec<String> {
        self.db
            .tables()
            .iter()
            .map(|t| t.name().to_string())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .db
            .table(name)
            .map(|t| Arc::new(KilnTable::new(self.db.clone(), t, self.caches.clone())) as _))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.table(name).is_some()
    }
}

/// Builds the shared session over `db`; its scans share `cache`.
pub fn build_session(
    db: &Db,
    target_partitions: usize,
    queries: Arc<QueryRegistry>,
    caches: Arc<Caches>,
    cubes: Arc<Cubes>,
    config: &QueryConfig,
) -> DfResult<SessionContext> {
    let query_config = config;
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_default_catalog_and_schema(CATALOG, SCHEMA)
        .with_create_default_catalog_and_schema(false)
        .with_target_partitions(target_partitions.max(1))
        .with_option_extension(KilnOptions::default());
    let opts = config.options_mut();
    opts.execution.parquet.pushdown_filters = false;
    opts.execution.parquet.enable_page_index = true;
    let pool = Arc::new(ServerPool::new(
        query_config.memory_limit.as_usize(),
        Box::new(heap::allocated),
        Box::new(heap::resident),
        held_outside_queries(db.clone(), caches.clone(), cubes.clone()),
    ));
    let mut runtime = RuntimeEnvBuilder::new().with_memory_pool(pool.clone());
    if let Some(dir) = &query_config.spill_dir {
        std::fs::create_dir_all(dir)?;
        runtime = runtime.with_temp_file_path(dir);
    }
    let runtime = runtime.build_arc()?;
    queries.set_memory_pool(pool);
    let url = ObjectStoreUrl::parse(STORE_URL)?;
    runtime.register_object_store(url.as_ref(), db.store().object_store());
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_analyzer_rules(
            std::iter::once(Arc::new(BalanceChains) as Arc<dyn AnalyzerRule + Send + Sync>)
                .chain(Analyzer::new().rules)
                .collect(),
        )
        .with_analyzer_rule(Arc::new(crate::rules::shared::SharedSubplans))
        .with_analyzer_rule(Arc::new(crate::rules::arithmetic::CheckedArithmetic))
        .with_analyzer_rule(Arc::new(crate::rules::int_casts::RoundedIntCasts))
        .with_analyzer_rule(Arc::new(crate::rules::pg_types::PgTypeNames))
        .with_analyzer_rule(Arc::new(crate::rules::single_row::SingleRowSubqueries))
        .with_analyzer_rule(Arc::new(crate::rules::mark_subqueries::MarkSubqueries))
        .with_analyzer_rule(Arc::new(crate::rules::checked_patterns::CheckedPatterns))
        // Cubes first: before DataFusion splits `count(DISTINCT)` apart.
        .with_optimizer_rules(
            std::iter::once(
                Arc::new(CubeRewrite::new(cubes.clone())) as Arc<dyn OptimizerRule + Send + Sync>
            )
            .chain(Optimizer::new().rules)
            .collect(),
        )
        .with_optimizer_rule(Arc::new(crate::rules::time_predicates::TimePredicates))
        .with_optimizer_rule(Arc::new(BalanceChains))
        .with_query_planner(Arc::new(crate::rules::shared::QueryPlanner {
            others: vec![Arc::new(CubePlanner {
                cubes: cubes.clone(),
            })],
        }))
        .with_physical_optimizer_rules(crate::rules::sized_literals::with_sized_literals(
            PhysicalOptimizer::new().rules,
        ))
        .with_physical_optimizer_rule(Arc::new(crate::rules::dedup::DropRepeats))
        .with_physical_optimizer_rule(Arc::new(crate::rules::partials::SegmentPartials))
        .with_physical_optimizer_rule(Arc::new(crate::rules::file_sinks::FileSinkPieces))
        .build();
    let ctx = SessionContext::new_with_state(state);
    crate::functions::register(&ctx);
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
        crate::system::cancel::CancelBackend::new(queries.clone()),
    ));
    let catalog = MemoryCatalogProvider::new();
    catalog
        .register_schema(
            SCHEMA,
            Arc::new(KilnSchema {
                db: db.clone(),
                caches: caches.clone(),
            }),
        )
        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
    catalog
        .register_schema(
            crate::system::SYSTEM,
            Arc::new(crate::system::SystemSchema::new(
                db.clone(),
                queries,
                caches,
                cubes,
            )),
        )
        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
    ctx.register_catalog(CATALOG, Arc::new(catalog));
    Ok(ctx)
}

/// The session state to plan one query with: the session's, with the
/// query's parallelism (`target_partitions`) divided among the queries
/// running now.
///
/// Why: a query split into N partitions pays for it with repartitioning and
/// a second aggregation phase. That buys latency when cores are idle, and
/// nothing when other queries already keep them busy: with 25 dashboard
/// clients on 2 cores, planning every query with 1 partition served
/// 15-37% more queries per second (docs/benchmark-history.md). A query alone still
/// gets every core.
pub fn query_state(ctx: &SessionContext, queries: &QueryRegistry) -> SessionState {
    let mut state = ctx.state();
    let max = state.config().target_partitions();
    let n = partitions_for(max, queries.running());
    if n != max {
        state.config_mut().options_mut().execution.target_partitions = n;
    }
    state
}

/// Applies to `state` the options `query`'s session set and who its
/// session is ([`KilnOptions::session_user`]).
///
/// Options are copied only when there is something to set: the user only
/// for a statement that can read it (every function that does has `user`
/// in its name).
pub fn apply_query(state: &mut SessionState, query: &QueryHandle) -> crate::error::Result<()> {
    let settings = query.settings();
    let text = query.info().text.as_bytes();
    let reads_user = text.windows(4).any(|w| w.eq_ignore_ascii_case(b"user"));
    if settings.is_empty() && !reads_user {
        return Ok(());
    }
    let options = state.config_mut().options_mut();
    apply_settings(options, &settings)?;
    if reads_user && let Some(kiln) = options.extensions.get_mut::<KilnOptions>() {
        kiln.session_user = Some(query.session_user());
    }
    Ok(())
}

/// Sets a session's options (its `SET`s, [`QueryHandle::settings`]) on
/// `options`.
pub fn apply_settings(
    options: &mut ConfigOptions,
    settings: &[(String, String)],
) -> crate::error::Result<()> {
    for (name, value) in settings {
        options
            .set(name, value)
            .map_err(|e| crate::error::Error::Sql(format!("SET {name}: {}", e.message())))?;
    }
    Ok(())
}

/// `text` told apart by a session's options, as a key of kept plans: a
/// plan is optimized with the options (`kiln.cubes = off` plans without
/// cubes), so sessions with other options keep other plans. The server's
/// options add nothing.
pub fn settings_key<'a>(text: &'a str, settings: &[(String, String)]) -> Cow<'a, str> {
    if settings.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut sorted: Vec<_> = settings.iter().collect();
    sorted.sort();
    let mut key = text.to_string();
    for (name, value) in sorted {
        // Apart from the text: NUL ends a PostgreSQL string.
        key.push_str(&format!("\0{name}={value}"));
    }
    Cow::Owned(key)
}

/// What the server holds on the heap apart from queries: memstores and
/// caches ([`ServerPool`] leaves it out of query memory).
fn held_outside_queries(db: Db, caches: Arc<Caches>, cubes: Arc<Cubes>) -> crate::memory::Outside {
    Box::new(move || {
        let memstores: usize = db.tables().iter().map(|t| t.mem.bytes()).sum();
        memstores + caches.segments.usage() + caches.partials.usage() + cubes.held_bytes()
    })
}

/// The context to execute one query's plan in: `state`'s, with the
/// query's own share of the memory pool ([`QueryPool`]). Built per
/// execution from shared parts (a few `Arc`s), not per session.
pub fn task_ctx(state: &SessionState, queries: &QueryRegistry) -> Arc<TaskContext> {
    let mut runtime = RuntimeEnv::clone(state.runtime_env().as_ref());
    runtime.memory_pool = Arc::new(QueryPool::new(
        runtime.memory_pool.clone(),
        queries.limits().query_memory,
    ));
    Arc::new(TaskContext::from(state).with_runtime(Arc::new(runtime)))
}

/// Partitions for one query when `running` queries (itself included) share
/// `max` partitions' worth of cores.
pub(crate) fn partitions_for(max: usize, running: usize) -> usize {
    (max / running.max(1)).max(1)
}

#[cfg(test)]
mod tests;
