//! [`Engine`]: the one door into the query layer. Every statement from
//! every entry point (HTTP, the PostgreSQL simple and extended protocols,
//! COPY, the embedded CLI) is registered here as a query ([`Engine::begin`]:
//! admission, deadline, cancellation, `system.queries`) and run here
//! ([`Engine::run`], [`Engine::run_prepared`], [`Engine::run_planned`],
//! [`Engine::run_text`]):
//! Kiln's DDL is recognised in one place ([`crate::ddl`]), INSERTs are
//! checked, and everything else is planned with the query's share of the
//! cores and executed by the shared DataFusion session, its rows guarded
//! by the query's handle. Protocols only parse, bind and encode.

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef, UInt64Type};
use datafusion::common::{DataFusionError, ParamValues, ScalarValue};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{Statement, visit_relations};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use futures::{StreamExt, TryStreamExt};
use kiln_storage::Db;
use std::ops::ControlFlow;

use crate::admission::{Begin, QueryHandle, QueryRegistry};
use crate::auth::{Access, Auth};
use crate::cache::{Caches, PartialCache, SegmentCache};
use crate::config::QueryConfig;
use crate::cube::{Cubes, PartBuilder};
use crate::ddl::{self, Ddl};
use crate::error::{Error, Result};
use crate::executor::{Executor, deferred};
use crate::files::FileAccess;
use crate::plan_cache::{PlanCache, cast_param};
use crate::rules::checked_patterns;
use crate::session::{build_session, query_state};
use crate::shape::{self, patterns};
use crate::transaction::Transaction;

/// Who sends a query: its protocol and, over the PostgreSQL wire, the
/// connection's backend pid (which a CancelRequest names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub protocol: &'static str,
    pub session: Option<i32>,
}

impl Origin {
    pub const HTTP: Origin = Origin {
        protocol: "http",
        session: None,
    };
    /// `kiln sql --data-dir`, `kiln bench` and tests: the engine in process.
    pub const EMBEDDED: Origin = Origin {
        protocol: "embedded",
        session: None,
    };

    /// A PostgreSQL connection with backend pid `pid`.
    pub fn pg(pid: i32) -> Self {
        Origin {
            protocol: "pg",
            session: Some(pid),
        }
    }
}

/// One registered query: hold it while its rows are read; dropping the last
/// clone records its final status.
pub type Query = Arc<QueryHandle>;

/// The result of one statement.
#[derive(Debug)]
pub enum Output {
    /// A query's rows.
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A command's completion tag, e.g. `CREATE TABLE` or `INSERT 0 3`.
    Command { tag: String, rows: u64 },
}

/// The result of one statement, rows not yet computed: they are produced
/// as the stream is polled.
pub enum Streamed {
    Rows {
        schema: SchemaRef,
        stream: SendableRecordBatchStream,
    },
    Command {
        tag: String,
        rows: u64,
    },
}

impl Streamed {
    /// Reads every row.
    pub async fn collect(self) -> Result<Output> {
        Ok(match self {
            Streamed::Command { tag, rows } => Output::Command { tag, rows },
            Streamed::Rows { schema, stream } => Output::Rows {
                schema,
                batches: stream.try_collect().await?,
            },
        })
    }
}

/// SQL over one database. Cheap to share: clone the `Arc` around it.
pub struct Engine {
    db: Db,
    ctx: SessionContext,
    queries: Arc<QueryRegistry>,
    caches: Arc<Caches>,
    plans: Arc<PlanCache>,
    max_expression_depth: usize,
    max_statement_bytes: usize,
    /// Which server files SQL may use (`--sql-file-access`).
    files: FileAccess,
    /// Where heavy queries' rows are computed.
    executor: Executor,
    /// Users and their privileges ([`crate::auth`]).
    auth: Arc<Auth>,
    /// Cubes' plans, parts and counters ([`crate::cube`]).
    cubes: Arc<Cubes>,
}

impl Engine {
    /// Builds the engine and its session once, with the default settings.
    pub fn new(db: Db) -> Result<Self> {
        Self::with_config(db, &QueryConfig::default())
    }

    /// Builds the engine and its session once, with `config`'s limits and caches.
    pub fn with_config(db: Db, config: &QueryConfig) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let queries = QueryRegistry::new(config.limits());
        let caches = Arc::new(Caches {
            segments: Arc::new(SegmentCache::new(
                db.store().clone(),
                config.segment_cache_bytes.as_usize(),
            )),
            partials: PartialCache::new(config.partial_cache_bytes.as_usize()),
        });
        let cubes = Cubes::new(config.cube_cache_bytes.as_usize());
        let ctx = build_session(
            &db,
            cores,
            queries.clone(),
            caches.clone(),
            cubes.clone(),
            config,
        )?;
        cubes.attach(ctx.state_weak_ref());
        own::prepare_cubes(&db, &cubes);
        let executor = Executor::dedicated(config.execution_threads, config.execution_nice)
            .map_err(|source| Error::Io {
                context: "starting the execution runtime".into(),
                source,
            })?;
        let background =
            Executor::background(config.execution_nice).map_err(|source| Error::Io {
                context: "starting the background runtime".into(),
                source,
            })?;
        let idle = match config.background_idle {
            true => Executor::idle().map_err(|source| Error::Io {
                context: "starting the idle background runtime".into(),
                source,
            })?,
            false => background.clone(),
        };
        if let (Some(idle), Some(urgent)) = (idle.cpu_runtime(), background.cpu_runtime()) {
            db.set_cpu_runtimes(idle, urgent);
        }
        db.set_cube_builder(Arc::new(PartBuilder {
            cubes: cubes.clone(),
            idle,
            urgent: background,
            urgency: db.background_urgency(),
        }));
        let files = FileAccess::new(config.sql_file_access.as_deref(), &db.config().data_dir)?;
        let auth = Arc::new(Auth::open(
            &db.config().data_dir,
            Arc::new(kiln_storage::SystemClock),
        )?);
        Ok(Self {
            auth,
            cubes,
            files,
            plans: Arc::new(PlanCache::new(db.clone(), config.plan_cache_mode)),
            db,
            ctx,
            queries,
            caches,
            max_expression_depth: config.max_expression_depth,
            max_statement_bytes: config.max_statement_bytes.as_usize(),
            executor,
        })
    }

    /// Running and recent queries.
    pub fn queries(&self) -> &Arc<QueryRegistry> {
        &self.queries
    }

    /// Hot segments held decoded and the partial aggregates kept over them.
    pub fn caches(&self) -> &Arc<Caches> {
        &self.caches
    }

    /// Kept plans of prepared statements.
    pub fn plans(&self) -> &PlanCache {
        &self.plans
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Users, tokens and privileges; authentication is off until
    /// [`Auth::enable`].
    pub fn auth(&self) -> &Arc<Auth> {
        &self.auth
    }

    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The session state to plan one query with; see [`query_state`].
    pub fn query_state(&self) -> SessionState {
        query_state(&self.ctx, &self.queries)
    }

    /// Splits SQL text into statements (DataFusion's dialect), unchecked:
    /// for a client that sends them on to a server.
    pub fn split(sql: &str) -> Result<Vec<DfStatement>> {
        let stmts =
            DFParser::parse_sql_with_dialect(sql, &GenericDialect {}).map_err(|e| match e {
                DataFusionError::SQL(e, _) => shape::parse_error(*e, sql),
                other => Error::Sql(format!("SQL error: {other}")),
            })?;
        Ok(stmts.into_iter().collect())
    }

    /// Splits SQL text into statements (DataFusion's dialect), each
    /// checked by [`Engine::check_shape`].
    pub fn parse(&self, sql: &str) -> Result<Vec<DfStatement>> {
        self.check_size(sql)?;
        let stmts = match Self::split(sql) {
            Ok(stmts) => stmts,
            Err(e) => {
                let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
                let pg = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql)
                    .unwrap_or_default();
                // DataFusion has no `COPY ... FROM 'file'`: PostgreSQL's
                // parser finds it, so it is refused as file access.
                for stmt in &pg {
                    self.check_files(stmt)?;
                }
                // DataFusion's parser takes its own `EXPLAIN` formats
                // only; PostgreSQL's (`FORMAT JSON`) are read as the
                // simple protocol reads them.
                if pg.is_empty() || !pg.iter().all(|s| matches!(s, Statement::Explain { .. })) {
                    return Err(e);
                }
                pg.into_iter()
                    .map(shape::explain::statement)
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let mut out = Vec::with_capacity(stmts.len());
        for mut stmt in stmts {
            match &mut stmt {
                DfStatement::Statement(s) => {
                    self.check_shape(s)?;
                }
                DfStatement::Explain(e) => {
                    if let DfStatement::Statement(s) = e.statement.as_mut() {
                        self.check_shape(s)?;
                    }
                }
                _ => {}
            }
            out.push(stmt);
        }
        Ok(out)
    }

    /// Rebalances long AND/OR chains of a parsed statement and refuses it
    /// if an expression nests deeper than `--max-expression-depth`
    /// ([`crate::shape`]), a list holds too many entries
    /// ([`shape::width`]) or a regular expression literal does not compile
    /// ([`shape::patterns`]); then writes PostgreSQL syntax DataFusion spells
    /// otherwise as DataFusion plans it ([`shape::postgres`],
    /// [`shape::relations`], [`shape::order`], [`shape::first`]); returns
    /// whether it did. Every protocol calls it on what it parsed.
    pub fn check_shape(&self, stmt: &mut Statement) -> Result<bool> {
        shape::check(stmt, self.max_expression_depth)?;
        shape::width::check(stmt)?;
        shape::patterns::check(stmt)?;
        let is_table_function = |name: &str| self.ctx.table_function(name).is_ok();
        let relations = shape::relations::rewrite(stmt, &is_table_function);
        let order = shape::order::rewrite(stmt);
        let is_aggregate = |name: &str| self.ctx.udaf(name).is_ok();
        let first = shape::first::rewrite(stmt, &is_aggregate);
        Ok(shape::postgres::rewrite(stmt) | relations | order | first)
    }

    /// `--max-expression-depth`.
    pub fn max_expression_depth(&self) -> usize {
        self.max_expression_depth
    }

    /// Refuses SQL text longer than `--max-statement-bytes`, before any
    /// parser sees it: a statement of a few megabytes can be a tree
    /// millions of levels deep, which even dropping recurses through.
    pub fn check_size(&self, sql: &str) -> Result<()> {
        if sql.len() > self.max_statement_bytes {
            return Err(Error::TooComplex(format!(
                "statement too large: {} bytes, more than --max-statement-bytes ({})",
                sql.len(),
                self.max_statement_bytes
            )));
        }
        Ok(())
    }

    /// Checks `SET name = value` of a DataFusion option for one session:
    /// returns the option's name (lower case) and value (`None`: back to
    /// the server's, `SET name TO DEFAULT`). Options of the whole server
    /// (`datafusion.runtime.*`: memory, spilling, caches) are refused
    /// ([`Error::PermissionDenied`]): they are set by the server's flags.
    pub fn check_setting(&self, name: &str, value: &str) -> Result<(String, Option<String>)> {
        let name = name.to_ascii_lowercase();
        if name.starts_with("datafusion.runtime.") {
            return Err(Error::PermissionDenied(format!(
                "{name} is a server-wide setting: set it in the server's configuration, not with SET"
            )));
        }
        if value.eq_ignore_ascii_case("default") {
            return Ok((name, None));
        }
        let mut options = self.ctx.state().config_options().as_ref().clone();
        options
            .set(&name, value)
            .map_err(|e| Error::Sql(format!("SET {name}: {}", e.message())))?;
        bounds::check(&name, &options)?;
        Ok((name, Some(value.to_string())))
    }

    /// The server's value of a DataFusion option (`SHOW` of a session
    /// that did not `SET` it); `None`: no such option.
    pub fn setting(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.ctx
            .state()
            .config_options()
            .entries()
            .into_iter()
            .find(|e| e.key == name)
            .map(|e| e.value.unwrap_or_else(|| "NULL".into()))
    }

    /// Whether Kiln runs `stmt` itself (its DDL) rather than DataFusion: a
    /// protocol that plans statements ahead (PostgreSQL's Parse) gives
    /// these an empty plan. Errors on DDL Kiln refuses.
    pub fn is_ddl(stmt: &Statement) -> Result<bool> {
        Ok(ddl::parse(stmt)?.is_some())
    }

    /// Registers `text` as one query from `origin` and waits for an
    /// execution slot: fails at once when the queue is full
    /// ([`Error::Overloaded`]), or with the query's deadline or cancel
    /// while waiting. Every statement of `text` then runs under it.
    pub async fn begin(&self, origin: Origin, text: &str) -> Result<Query> {
        self.begin_with(origin, text, Begin::default()).await
    }

    /// [`Engine::begin`] with the query's own options: the client's timeout
    /// and whether it is light ([`Engine::is_light`]).
    pub async fn begin_with(&self, origin: Origin, text: &str, opts: Begin) -> Result<Query> {
        // A password in the text is never shown (system.queries, logs).
        let text = crate::auth::statement::redact(text);
        Ok(Arc::new(
            self.queries
                .begin_with(origin.protocol, &text, origin.session, opts)
                .await?,
        ))
    }

    /// Whether every statement of `stmts` is light (see [`Begin::light`]):
    /// a query, SET, SHOW or KILL that reads no table but Kiln's system
    /// tables and the catalogs. A table function, a CTE or any user table
    /// makes it an ordinary query. Call it on statements that passed
    /// [`Engine::check_shape`] (it walks them recursively).
    pub fn is_light<'a>(stmts: impl IntoIterator<Item = &'a Statement>) -> bool {
        stmts.into_iter().all(|stmt| {
            let kind = matches!(
                stmt,
                Statement::Query(_)
                    | Statement::Kill { .. }
                    | Statement::Set(_)
                    | Statement::ShowVariable { .. }
            );
            let mut light = kind;
            let _ = visit_relations(stmt, |name| {
                let parts = &name.0;
                let schema = parts.len().checked_sub(2).and_then(|i| parts[i].as_ident());
                light &= schema.is_some_and(|s| {
                    [crate::system::SYSTEM, "information_schema", "pg_catalog"]
                        .iter()
                        .any(|light| s.value.eq_ignore_ascii_case(light))
                });
                if light {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            });
            light
        })
    }

    /// Records `text` from `origin` as a query that failed with `e` before
    /// it could begin (see [`QueryRegistry::record_failed`]).
    pub fn record_failed(&self, origin: Origin, text: &str, e: &Error) {
        let text = crate::auth::statement::redact(text);
        self.queries
            .record_failed(origin.protocol, &text, origin.session, e);
    }

    /// Runs every statement of `sql` in order as one embedded query,
    /// stopping at the first error; rows are collected.
    pub async fn execute(&self, sql: &str) -> Result<Vec<Output>> {
        if let Some(own) = self.own_statement(sql) {
            let query = self.begin(Origin::EMBEDDED, sql).await?;
            return Ok(vec![self.run_own(&query, own?).await?.collect().await?]);
        }
        let stmts = self.parse(sql)?;
        let query = self.begin(Origin::EMBEDDED, sql).await?;
        let mut out = vec![];
        for stmt in stmts {
            out.push(self.run(&query, stmt, &[]).await?.collect().await?);
        }
        Ok(out)
    }

    /// Runs one statement of `query`, binding `params` to its `$1`, `$2`...
    /// (each cast to the type the plan infers for it). DDL and INSERT run
    /// to completion here and return a command tag; a query's rows are
    /// computed as the returned stream is polled, under the query's cancel
    /// and deadline.
    pub async fn run(
        &self,
        query: &Query,
        stmt: DfStatement,
        params: &[ScalarValue],
    ) -> Result<Streamed> {
        self.guarded(query, self.plan_and_start(stmt, params, query, None))
            .await
    }

    /// [`Engine::run`] of a statement whose text's template learns its
    /// shape if it runs through one ([`crate::plan_cache::texts`]).
    pub async fn run_learning(
        &self,
        query: &Query,
        stmt: DfStatement,
        params: &[ScalarValue],
        learn: Learn<'_>,
    ) -> Result<Streamed> {
        self.guarded(query, self.plan_and_start(stmt, params, query, Some(learn)))
            .await
    }

    /// Runs one statement planned ahead (PostgreSQL's Parse): `plan` is
    /// `stmt`'s logical plan with placeholders, `params` their values.
    /// Kiln's DDL (whose plan is empty) runs from `stmt`.
    pub async fn run_planned(
        &self,
        query: &Query,
        stmt: &Statement,
        plan: &LogicalPlan,
        params: &ParamValues,
    ) -> Result<Streamed> {
        self.guarded(query, async {
            if let Some(ddl) = ddl::parse(stmt)? {
                return self.run_ddl(query, ddl).await;
            }
            self.check_files(stmt)?;
            ddl::check_insert_values(stmt, &self.db)?;
            let plan = match params {
                ParamValues::List(l) if l.is_empty() => plan.clone(),
                params => {
                    patterns::check_bound(plan, &patterns::bound_values(params))?;
                    checked_patterns::bind(plan.clone(), params)?
                }
            };
            self.start_plan(plan, query).await
        })
        .await
    }

    /// Runs a prepared query: `logical` is the plan of `sql` with
    /// placeholders `$1..$n` of `types`, `params` their values. Repeated
    /// statements may run a kept plan ([`crate::plan_cache`]).
    pub async fn run_prepared(
        &self,
        query: &Query,
        sql: &str,
        logical: &LogicalPlan,
        types: &[DataType],
        params: &[ScalarValue],
    ) -> Result<Streamed> {
        self.guarded(query, async {
            self.authorize_plan(query, logical)?;
            if self.plans.binds_patterns(query, sql, logical) {
                patterns::check_bound(logical, &patterns::positional(params))?;
            }
            let stream = self
                .run_kept_plan(query, sql, logical, types, params)
                .await?;
            Ok(Streamed::Rows {
                schema: stream.schema(),
                stream,
            })
        })
        .await
    }

    /// Runs `start` under `query`'s cancel and deadline, records its error,
    /// and puts the rows it returns under the query too.
    async fn guarded(
        &self,
        query: &Query,
        start: impl Future<Output = Result<Streamed>>,
    ) -> Result<Streamed> {
        let started = query.run(start).await;
        // Set by the plan cache while starting, for this stream only.
        let short = query.take_short();
        let started = match started {
            Ok(Ok(s)) => s,
            Ok(Err(e)) | Err(e) => {
                query.fail(&e);
                return Err(e);
            }
        };
        Ok(match started {
            Streamed::Rows { schema, stream } => {
                let stream = match (query.is_light(), short) {
                    (true, _) => stream,
                    (false, Some(moved)) => self.executor.run_short(stream, moved),
                    (false, None) => self.executor.run(stream),
                };
                let stream = crate::displayable::checked(stream);
                let rows = query.clone().guard(
                    stream,
                    |b: &RecordBatch| b.num_rows() as u64,
                    |stop| DataFusionError::External(Box::new(Error::from(stop))),
                );
                Streamed::Rows {
                    stream: Box::pin(RecordBatchStreamAdapter::new(schema.clone(), rows)),
                    schema,
                }
            }
            command => command,
        })
    }

    /// Plans one statement and starts it (see [`Engine::run`]).
    async fn plan_and_start(
        &self,
        stmt: DfStatement,
        params: &[ScalarValue],
        query: &Query,
        learn: Option<Learn<'_>>,
    ) -> Result<Streamed> {
        if let DfStatement::Statement(s) = &stmt {
            if let Some(ddl) = ddl::parse(s)? {
                return self.run_ddl(query, ddl).await;
            }
            ddl::check_insert_values(s, &self.db)?;
        }
        if let Some(streamed) = self.run_shape(&stmt, params, query, learn).await? {
            return Ok(streamed);
        }
        let mut state = self.ctx.state();
        crate::session::apply_query(&mut state, query)?;
        // The names it uses, for a typed error should planning fail: a
        // walk of the statement, cheaper than keeping a copy of it.
        let names = self.names(&stmt);
        let planned = self
            .executor
            .plan(plans_apart(query), async move {
                state.statement_to_plan(stmt).await
            })
            .await?;
        let mut plan = match planned {
            Ok(plan) => plan,
            Err(e) => return Err(self.planning_error(&names, e)),
        };
        if !params.is_empty() {
            plan = bind_params(plan, params)?;
        }
        self.start_plan(plan, query).await
    }

    /// Executes a logical plan: INSERTs run to completion (staged in `txn`
    /// when given, see [`Transaction`]), queries stream.
    async fn start_plan(&self, plan: LogicalPlan, query: &Query) -> Result<Streamed> {
        let txn = query.transaction();
        self.authorize_plan(query, &plan)?;
        self.check_plan_files(&plan)?;
        if let LogicalPlan::Statement(datafusion::logical_expr::Statement::SetVariable(set)) = &plan
        {
            // Per query (an HTTP request, the CLI): never the shared session.
            let (name, value) = self.check_setting(&set.variable, &set.value)?;
            query.set(&name, value);
            return Ok(Streamed::Command {
                tag: "SET".into(),
                rows: 0,
            });
        }
        let insert = matches!(
            &plan,
            LogicalPlan::Dml(DmlStatement {
                op: WriteOp::Insert(_),
                ..
            })
        );
        if let LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) = plan {
            let df = self.ctx.execute_logical_plan(plan).await?;
            return Ok(Streamed::Rows {
                schema: df.schema().inner().clone(),
                stream: df.execute_stream().await?,
            });
        }
        let schema = plan.schema().inner().clone();
        let mut state = self.query_state();
        crate::session::apply_query(&mut state, query)?;
        if let Some(txn) = txn {
            state.config_mut().set_extension(txn.clone());
        }
        let task = crate::session::task_ctx(&state, &self.queries);
        let (physical, state, plan) = self
            .executor
            .plan(plans_apart(query), async move {
                let physical = state.create_physical_plan(&plan).await;
                (physical, state, plan)
            })
            .await?;
        let physical = physical?;
        if insert {
            let rows = self.executor.run(deferred(physical, task));
            let batches: Vec<RecordBatch> = rows.try_collect().await?;
            let rows = batches
                .iter()
                .filter_map(|b| b.column(0).as_primitive_opt::<UInt64Type>())
                .map(|c| c.values().iter().sum::<u64>())
                .sum();
            return Ok(Streamed::Command {
                tag: format!("INSERT 0 {rows}"),
                rows,
            });
        }
        let mut stream = deferred(physical, task);
        if let Some(why) = crate::cube::why_not(&state, &plan) {
            let rows = stream.chain(futures::stream::once(async { Ok(why) }));
            stream = Box::pin(RecordBatchStreamAdapter::new(schema.clone(), rows));
        }
        Ok(Streamed::Rows { schema, stream })
    }

    /// Writes what `txn` staged as one atomic write (PostgreSQL's COMMIT),
    /// leaving it empty; returns the rows written. An error means nothing
    /// was written.
    pub async fn commit(&self, txn: &Transaction) -> Result<usize> {
        match txn.take() {
            None => Ok(0),
            Some(w) => Ok(self.db.write(&w.table, &w.batches).await?),
        }
    }

    async fn run_ddl(&self, query: &Query, ddl: Ddl) -> Result<Streamed> {
        let what = match &ddl {
            Ddl::Create(_) => "CREATE TABLE",
            Ddl::Drop { .. } => "DROP TABLE",
            Ddl::Kill { .. } => "KILL",
        };
        self.authorize(query.user(), Access::Admin(what))?;
        let tag = match ddl {
            Ddl::Create(req) => {
                self.db.create_table(req).await?;
                "CREATE TABLE"
            }
            Ddl::Drop { names, if_exists } => {
                for name in names {
                    self.db.drop_table(&name, if_exists).await?;
                }
                "DROP TABLE"
            }
            Ddl::Kill { id } => {
                let rows = u64::from(self.queries.cancel(id));
                return Ok(Streamed::Command {
                    tag: "KILL".into(),
                    rows,
                });
            }
        };
        Ok(Streamed::Command {
            tag: tag.into(),
            rows: 0,
        })
    }
}

/// Whether `query`'s statements are planned apart from the protocol
/// runtime ([`Executor::plan`]): its text is long enough that planning may
/// take long.
pub(crate) fn plans_apart(query: &Query) -> bool {
    query.info().text.len() >= crate::executor::PLAN_APART_BYTES
}

/// Binds positional parameters, casting each value to the type the plan
/// infers for its placeholder (a JSON string becomes a TIMESTAMP where the
/// plan compares it with one); a value that does not fit names its `$N`.
fn bind_params(plan: LogicalPlan, params: &[ScalarValue]) -> Result<LogicalPlan> {
    patterns::check_bound(&plan, &patterns::positional(params))?;
    let types = plan.get_parameter_types()?;
    let mut bound = Vec::with_capacity(params.len());
    for (i, v) in params.iter().enumerate() {
        bound.push(match types.get(&format!("${}", i + 1)).cloned().flatten() {
            Some(t) => cast_param(i, v, &t)?,
            None => v.clone(),
        });
    }
    if let Some(missing) = (params.len() + 1..=types.len())
        .map(|i| format!("${i}"))
        .find(|n| types.contains_key(n))
    {
        return Err(Error::Sql(format!(
            "parameter {missing} has no value: {} given",
            params.len()
        )));
    }
    let values = ParamValues::List(bound.into_iter().map(Into::into).collect());
    Ok(checked_patterns::bind(plan, &values)?)
}

mod access;
mod bounds;
mod names;
mod own;
mod parse;
mod shapes;

pub use names::Names;
pub use own::OwnStatement;
pub use shapes::Learn;
#[cfg(test)]
mod tests;
