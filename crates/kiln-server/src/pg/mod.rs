//! PostgreSQL wire protocol: pgwire's message handling with
//! datafusion-postgres's parser (PostgreSQL syntax rewritten for DataFusion)
//! and pg_catalog, in front of Kiln's one door, [`Engine`].
//!
//! Why not `datafusion_postgres::serve_with_hooks`: it binds its own listener
//! from host and port (no port 0, no way to stop accepting), so Kiln runs the
//! accept loop itself and hands each socket to its connection loop
//! ([`conn`]). Why not `DfSessionService`'s query handlers: they run
//! statements on the DataFusion session directly, past Kiln's admission,
//! DDL and INSERT checks, each query's share of the cores and its plan
//! cache. Kiln keeps the service only for its Parse step ([`Parser`]):
//! - [`PgSimple`] parses each query once, lets the protocol's own hooks take
//!   what is the connection's business (`SET`/`SHOW`, transactions,
//!   cursors, `COPY ... FROM STDIN`), and sends every other statement to the
//!   engine as one registered query;
//! - [`PgExtended`] does the same for each Execute: a prepared `SELECT`
//!   goes to the engine's plan cache with its bound values ([`execute`]),
//!   anything else to the engine with the plan made at Parse;
//! - [`KilnParseHook`] gives Kiln's DDL an empty plan at Parse (the
//!   engine recognises it again at Execute) and starts COPY;
//! - [`KilnCancel`] answers the CancelRequest message: after checking the
//!   secret key it cancels the connection's query in the registry, which
//!   stops its rows wherever they are.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::DfSessionService;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire::api::Type;
use datafusion_postgres::pgwire::api::auth::StartupHandler;
use datafusion_postgres::pgwire::api::cancel::CancelHandler;
use datafusion_postgres::pgwire::api::copy::CopyHandler;
use datafusion_postgres::pgwire::api::portal::{Format, Portal, PortalExecutionState};
use datafusion_postgres::pgwire::api::query::{
    ExtendedQueryHandler, SimpleQueryHandler, send_describe_response,
};
use datafusion_postgres::pgwire::api::results::{
    DescribePortalResponse, QueryResponse, Response, Tag,
};
use datafusion_postgres::pgwire::api::store::{Entry, PortalStore};
use datafusion_postgres::pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, DEFAULT_NAME, PgWireConnectionState,
    PgWireServerHandlers,
};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use datafusion_postgres::pgwire::messages::cancel::CancelRequest;
use datafusion_postgres::pgwire::messages::data::ParameterDescription;
use datafusion_postgres::pgwire::messages::extendedquery::{
    Describe, Execute, TARGET_TYPE_BYTE_STATEMENT,
};
use datafusion_postgres::pgwire::messages::response::TransactionStatus;
use datafusion_postgres::pgwire::messages::simplequery::Query as SimpleQuery;
use futures::{SinkExt, StreamExt};
use kiln_query::engine::Learn;
use kiln_query::plan_cache::Door;
use kiln_query::shape::labels::{Labels, labels};
use kiln_query::{Begin, Engine, Origin, Query, QueryRegistry, Streamed};
use kiln_storage::budget::MemoryBudget;
use parse::KilnParser;
use sql_parser::SqlParser;

use crate::error::{ApiError, pg_error};
use crate::metrics::Metrics;
use account::{run_own, session_user, user};
use hook::Hook;
use startup::Startup;

mod accept;
mod account;
mod activity;
mod catalog;
mod conn;
mod copy;
mod copy_out;
mod cursor;
mod execute;
mod hook;
mod parse;
mod pg_catalog;
mod regproc;
mod settings;
mod sizes;
mod sql_parser;
mod startup;
mod transaction;

/// A prepared statement as `DfSessionService` keeps it (SQL text and plan).
type PgStatement = <DfSessionService as ExtendedQueryHandler>::Statement;

pub use accept::accept_loop;

/// What the catalog and the connections share: the open sessions
/// (`pg_stat_activity`) and the server's settings (`pg_settings`, `SHOW`).
pub struct Shared {
    sessions: Arc<activity::Sessions>,
    settings: Arc<settings::Settings>,
}

/// Makes the shared session look like PostgreSQL to clients (pg_catalog
/// tables and functions such as `current_database()`). The connections
/// [`Handlers`] register are listed in `pg_stat_activity`.
pub fn setup_catalog(engine: &Engine, config: &crate::ServerConfig) -> Result<Shared, ApiError> {
    let settings = Arc::new(settings::Settings::new(config.pg_max_connections));
    datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog(
        engine.session(),
        kiln_query::CATALOG,
        datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider,
    )
    .map_err(|e| ApiError::internal(format!("setting up pg_catalog: {e}")))?;
    let sessions = Arc::new(activity::Sessions::default());
    let activity = Arc::new(activity::Activity {
        sessions: sessions.clone(),
        queries: engine.queries().clone(),
    });
    let oids = Arc::new(sizes::Oids::default());
    pg_catalog::wrap(
        engine.session(),
        kiln_query::CATALOG,
        settings.all(),
        activity,
        oids.clone(),
    )
    .map_err(|e| ApiError::internal(format!("setting up pg_catalog: {e}")))?;
    let regproc = regproc::RegprocComparisons::new()
        .map_err(|e| ApiError::internal(format!("setting up pg_catalog: {e}")))?;
    engine.session().add_analyzer_rule(Arc::new(regproc));
    settings::register_functions(engine.session(), settings.clone());
    sizes::register(engine.session(), engine.db().clone(), oids);
    engine.session().register_udf(activity::blocking_pids());
    engine
        .session()
        .register_udf(datafusion::logical_expr::ScalarUDF::from(
            catalog::ExpandArray::new(),
        ));
    Ok(Shared { sessions, settings })
}

/// The plan Parse gives a statement answered at Execute by a hook or by
/// Kiln's DDL: no rows, `schema`'s columns (what Describe reports).
fn no_rows(schema: DFSchema) -> LogicalPlan {
    LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: false,
        schema: Arc::new(schema),
    })
}

fn to_pg(e: kiln_query::Error) -> PgWireError {
    ApiError::from(e).to_pg()
}

/// Kiln's part of Parse and of the simple protocol's hooks: DDL gets an
/// empty plan (run by the engine at Execute), COPY FROM STDIN starts.
pub struct KilnParseHook {
    engine: Arc<Engine>,
    copy_limit: usize,
}

#[async_trait]
impl QueryHook for KilnParseHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        copy::start(statement, &self.engine, self.copy_limit, &*client).await
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        if matches!(statement, Statement::Copy { .. }) {
            if let Err(e) = self.engine.check_files(statement) {
                return Some(Err(to_pg(e)));
            }
            let msg = "COPY is supported through the simple query protocol";
            return Some(Err(ApiError::bad_input(msg).to_pg()));
        }
        match Engine::is_ddl(statement) {
            Ok(false) => None,
            Err(e) => Some(Err(to_pg(e))),
            // No parameters and no result columns; the engine runs the
            // statement itself at Execute.
            Ok(true) => Some(Ok(no_rows(DFSchema::empty()))),
        }
    }

    async fn handle_extended_query(
        &self,
        _statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        None
    }
}

/// The connection's own statements (`SET`/`SHOW`, transactions, cursors),
/// answered by datafusion-postgres's hooks; Kiln's runs first.
struct ProtocolHooks {
    hooks: Vec<Arc<dyn QueryHook>>,
    ctx: Arc<SessionContext>,
}

impl ProtocolHooks {
    async fn simple(
        &self,
        stmt: &Statement,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        for hook in &self.hooks {
            if let Some(r) = hook.handle_simple_query(stmt, &self.ctx, client).await {
                return Some(r);
            }
        }
        None
    }

    async fn extended(
        &self,
        stmt: &Statement,
        plan: &LogicalPlan,
        params: &ParamValues,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        for hook in &self.hooks {
            if let Some(r) = hook
                .handle_extended_query(stmt, plan, params, &self.ctx, client)
                .await
            {
                return Some(r);
            }
        }
        None
    }
}

/// The client metadata key under which datafusion-postgres's SET hook
/// keeps the session's `statement_timeout`, in milliseconds.
const STATEMENT_TIMEOUT_MS: &str = "statement_timeout_ms";

/// `client`'s `statement_timeout`, if one is set.
fn statement_timeout<C: ClientInfo + ?Sized>(client: &C) -> Option<std::time::Duration> {
    client
        .metadata()
        .get(STATEMENT_TIMEOUT_MS)
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(std::time::Duration::from_millis)
}

/// Registers `text` as a query of `client`'s connection at the engine's
/// door, under the session's `statement_timeout`, in the light lane when
/// `light`, in the connection's open transaction if there is one.
async fn begin<C: ClientInfo + Send + Sync + ?Sized>(
    engine: &Engine,
    text: &str,
    client: &C,
    light: bool,
) -> PgWireResult<Query> {
    let timeout = statement_timeout(client);
    let pid = client.pid_and_secret_key().0;
    engine
        .begin_with(
            Origin::pg(pid),
            text,
            Begin {
                timeout,
                light,
                transaction: transaction::current(client),
                settings: settings::datafusion_settings(client),
                user: user(client),
                session_user: session_user(client),
            },
        )
        .await
        .map_err(to_pg)
}

/// A statement's result as a pgwire response; rows in `format`, columns
/// under PostgreSQL's `labels` where it has any.
fn respond<C: ClientInfo>(
    streamed: Streamed,
    format: &Format,
    labels: Option<&Labels>,
    client: &C,
) -> PgWireResult<Response> {
    Ok(match streamed {
        Streamed::Command { tag, .. } => Response::Execution(Tag::new(&tag)),
        Streamed::Rows { schema, stream } => {
            Response::Query(execute::encode(&schema, stream, format, labels, client)?)
        }
    })
}

/// The simple query protocol: every statement through the engine's door.
pub struct PgSimple {
    engine: Arc<Engine>,
    parser: SqlParser,
    hooks: Arc<ProtocolHooks>,
}

#[async_trait]
impl SimpleQueryHandler for PgSimple {
    /// pgwire's handling, after giving an aborted transaction's `ROLLBACK
    /// TO` its status back ([`transaction::resumes`]).
    async fn on_query<C>(&self, client: &mut C, query: SimpleQuery) -> PgWireResult<()>
    where
        C: ClientInfo
            + ClientPortalStore
            + futures::Sink<PgWireBackendMessage>
            + Unpin
            + Send
            + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
        if client.transaction_status() == TransactionStatus::Error
            && let Ok(stmts) = self.parser.parse(&query.query)
            && let [stmt] = stmts.as_slice()
        {
            transaction::resumes(stmt, client);
        }
        self._on_query(client, query).await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo
            + ClientPortalStore
            + futures::Sink<PgWireBackendMessage>
            + Unpin
            + Send
            + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
        let origin = Origin::pg(client.pid_and_secret_key().0);
        if let Some(own) = self.engine.own_statement(query) {
            return Ok(vec![run_own(&self.engine, query, own, client).await?]);
        }
        // A text like one already run through a kept shape runs unparsed
        // (`kiln_query::plan_cache::texts`). Text the parser looks at
        // itself first (its client query list reads catalogs; the search
        // path, kept subqueries) never does; nor a statement in a
        // transaction, which the hooks answer.
        let template = match client.transaction_status() == TransactionStatus::Idle
            && !SqlParser::reads_text(query)
        {
            true => self.engine.template(Door::Pg, query, false),
            false => None,
        };
        let mut query_handle = None;
        if let Some(hit) = template.as_ref().and_then(|t| self.engine.text_hit(t)) {
            // Learned only from a statement that reads a table: not light.
            let q = begin(&self.engine, query, client, false).await?;
            if let Some(streamed) = self.engine.run_text(&q, &hit, &[]).await.map_err(to_pg)? {
                let labels = hit.learned.labels.as_ref();
                return Ok(vec![respond(
                    streamed,
                    &Format::UnifiedText,
                    labels,
                    client,
                )?]);
            }
            query_handle = Some(q);
        }
        let checked = self.engine.check_size(query).and_then(|()| {
            let mut statements = self
                .parser
                .parse(query)
                .map_err(|e| kiln_query::shape::parse_error(e, query))?;
            for stmt in &mut statements {
                self.engine.check_shape(stmt)?;
            }
            Ok(statements)
        });
        let statements = match checked {
            Ok(s) => s,
            Err(e) => {
                self.engine.record_failed(origin, query, &e);
                return Err(to_pg(e));
            }
        };
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let light = Engine::is_light(&statements);
        let template = template.filter(|_| statements.len() == 1 && !light);
        let mut responses = Vec::with_capacity(statements.len());
        for stmt in statements {
            if let Some(r) = self.hooks.simple(&stmt, client).await {
                // A copy out is sent here, where its error can end it
                // ([`copy_out::in_turn`]).
                let r = match r.map_err(pg_error)? {
                    Response::CopyOut(copy) => {
                        copy_out::in_turn(client, &mut responses, copy).await?
                    }
                    r => r,
                };
                responses.push(r);
                continue;
            }
            let q = match &query_handle {
                Some(q) => q,
                None => query_handle.insert(begin(&self.engine, query, client, light).await?),
            };
            let labels = labels(&stmt);
            let stmt = kiln_query::shape::explain::statement(stmt).map_err(to_pg)?;
            let streamed = match &template {
                Some(template) => {
                    let learn = Learn {
                        template,
                        labels: labels.clone(),
                    };
                    self.engine.run_learning(q, stmt, &[], learn).await
                }
                None => self.engine.run(q, stmt, &[]).await,
            }
            .map_err(to_pg)?;
            responses.push(respond(
                streamed,
                &Format::UnifiedText,
                labels.as_ref(),
                client,
            )?);
        }
        Ok(responses)
    }
}

/// The extended query protocol (Parse/Bind/Execute: prepared statements).
/// The statement's logical plan is built once at Parse; each Execute sends
/// it through the engine's door with its bound values.
pub struct PgExtended {
    parser: Arc<KilnParser>,
    engine: Arc<Engine>,
    hooks: Arc<ProtocolHooks>,
    types: execute::ParamTypes,
}

#[async_trait]
impl ExtendedQueryHandler for PgExtended {
    type Statement = PgStatement;
    type QueryParser = KilnParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    /// Describe: pgwire's, except that a statement with parameters and no
    /// result columns (an INSERT) is described by NoData, as PostgreSQL
    /// does, not by an empty RowDescription. pgjdbc reads an empty
    /// RowDescription as a query's and its batches then counted 0 rows.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo
            + ClientPortalStore
            + futures::Sink<PgWireBackendMessage>
            + Unpin
            + Send
            + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        if message.target_type == TARGET_TYPE_BYTE_STATEMENT
            && let Some(Entry::Value(stmt)) = client.portal_store().get_statement(name)
        {
            let described = self.do_describe_statement(client, &stmt).await?;
            let oids = described.parameters.iter().map(Type::oid).collect();
            client
                .send(PgWireBackendMessage::ParameterDescription(
                    ParameterDescription::new(oids),
                ))
                .await?;
            let columns = DescribePortalResponse::new(described.fields);
            return send_describe_response(client, &columns).await;
        }
        self._on_describe(client, message).await
    }

    /// Execute: pgwire's handling, except that a query portal executed for
    /// all its rows (max rows 0, what most drivers send) streams them to
    /// the socket as they are computed. pgwire's portal fetch gathers the
    /// rows it returns in memory, so a 20M-row result read by a slow
    /// client was held whole (2.5 GiB) and computed to the end even after
    /// the client left; streamed, the socket's backpressure paces the
    /// query and a client that leaves stops it.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo
            + ClientPortalStore
            + futures::Sink<PgWireBackendMessage>
            + Unpin
            + Send
            + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        // An aborted transaction's `ROLLBACK TO` (pgjdbc sends it this
        // way) gets its status back first ([`transaction::resumes`]).
        if client.transaction_status() == TransactionStatus::Error
            && let Some(Entry::Value(p)) = client.portal_store().get_portal(name)
            && let Some((stmt, _)) = &p.statement.statement.1
        {
            transaction::resumes(stmt, client);
        }
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(p)) if message.max_rows == 0 => p,
            _ => return self._on_execute(client, message).await,
        };
        let is_query = matches!(
            &portal.statement.statement.1,
            Some((Statement::Query(_), _))
        );
        let fresh = matches!(*portal.state().lock().await, PortalExecutionState::Initial);
        if !is_query || !fresh || !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return self._on_execute(client, message).await;
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let Response::Query(mut rows) = self.do_query(client, &portal, 0).await? else {
            return Err(ApiError::internal("a query's portal answered without rows").to_pg());
        };
        // Finished: a second Execute of the portal returns no rows.
        let columns = rows.row_schema();
        portal
            .start(QueryResponse::new(columns, futures::stream::empty()))
            .await;
        let tag = rows.command_tag().to_owned();
        let mut sent = 0;
        let data = rows.data_rows();
        while let Some(row) = data.next().await {
            client.feed(PgWireBackendMessage::DataRow(row?)).await?;
            sent += 1;
        }
        let done = Tag::new(&tag).with_rows(sent);
        client
            .send(PgWireBackendMessage::CommandComplete(done.into()))
            .await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo
            + ClientPortalStore
            + futures::Sink<PgWireBackendMessage>
            + Unpin
            + Send
            + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
        let (text, parsed) = &portal.statement.statement;
        let Some((stmt, plan)) = parsed else {
            if let Some(own) = kiln_query::OwnStatement::parse(text) {
                return run_own(&self.engine, text, own, client).await;
            }
            return Ok(Response::EmptyQuery);
        };
        // The hooks answer the connection's own statements (SET, SHOW,
        // transactions, cursors), never a query: a prepared SELECT skips them.
        if let Statement::Fetch {
            name, direction, ..
        } = stmt
        {
            // In the format the Bind asked for, whatever the DECLARE said.
            let format = Some(&portal.result_column_format);
            return cursor::fetch(&name.value, direction, format, client)
                .await
                .map_err(pg_error);
        }
        if !matches!(stmt, Statement::Query(_)) {
            // A cursor's query binds the values as the client sent them.
            let params = match stmt {
                Statement::Declare { .. } => {
                    execute::bind(portal, &vec![None; portal.parameter_len()])?
                }
                _ => ParamValues::List(vec![]),
            };
            if let Some(r) = self.hooks.extended(stmt, plan, &params, client).await {
                return r.map_err(pg_error);
            }
        }
        if client.transaction_status() == TransactionStatus::Error {
            return Err(ApiError::in_failed_transaction().to_pg());
        }
        let light = Engine::is_light([stmt]);
        let query = begin(&self.engine, text, client, light).await?;
        let streamed = execute::execute(&self.engine, &query, &self.types, portal).await?;
        let labels = portal
            .statement
            .statement
            .1
            .as_ref()
            .and_then(|(stmt, _)| labels(stmt));
        respond(
            streamed,
            &portal.result_column_format,
            labels.as_ref(),
            client,
        )
    }
}

/// CancelRequest: checks the pid and secret key against pgwire's connection
/// registry, then cancels that connection's running query.
pub struct KilnCancel {
    connections: Arc<ConnectionManager>,
    queries: Arc<QueryRegistry>,
}

#[async_trait]
impl CancelHandler for KilnCancel {
    async fn on_cancel_request(&self, req: CancelRequest) {
        if self.connections.cancel(req.pid, &req.secret_key).await {
            let n = self.queries.cancel_session(req.pid);
            tracing::info!(pid = req.pid, cancelled = n, "cancel request");
        }
    }
}

/// The handler set given to every connection.
pub struct Handlers {
    simple: Arc<PgSimple>,
    extended: Arc<PgExtended>,
    startup: Arc<Startup>,
    cancel: Arc<KilnCancel>,
    copy: Arc<copy::KilnCopy>,
    metrics: Arc<Metrics>,
    /// TLS for clients that ask for it (SSLRequest or direct TLS).
    tls: Option<Arc<crate::tls::Tls>>,
}

impl Handlers {
    /// Handlers under `config`'s limits; a COPY's data is reserved from
    /// `bodies` (`--body-memory-limit`, shared with HTTP bodies), and each
    /// connection is listed in `shared`'s sessions while open.
    pub fn new(
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        config: &crate::ServerConfig,
        bodies: Arc<MemoryBudget>,
        shared: Shared,
    ) -> Self {
        let Shared { sessions, settings } = shared;
        let copy_limit = config.max_body_bytes.as_usize();
        let max_connections = config.pg_max_connections as usize;
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(Hook(transaction::TransactionHook {
                engine: engine.clone(),
                limit: copy_limit,
            })),
            Arc::new(KilnParseHook {
                engine: engine.clone(),
                copy_limit,
            }),
            Arc::new(Hook(cursor::CursorHook {
                engine: engine.clone(),
            })),
            Arc::new(Hook(settings::ShowHook {
                engine: engine.clone(),
                settings,
            })),
            Arc::new(Hook(settings::SetHook {
                engine: engine.clone(),
            })),
            Arc::new(SetShowHook),
        ];
        let ctx = Arc::new(engine.session().clone());
        let session = Arc::new(DfSessionService::new_with_hooks(ctx.clone(), hooks.clone()));
        let hooks = Arc::new(ProtocolHooks { hooks, ctx });
        let connections = Arc::new(ConnectionManager::new());
        Self {
            simple: Arc::new(PgSimple {
                engine: engine.clone(),
                parser: SqlParser::default(),
                hooks: hooks.clone(),
            }),
            extended: Arc::new(PgExtended {
                parser: Arc::new(KilnParser {
                    inner: session.query_parser(),
                    engine: engine.clone(),
                    sql: SqlParser::default(),
                }),
                engine: engine.clone(),
                hooks,
                types: Default::default(),
            }),
            startup: Arc::new(Startup {
                connections: connections.clone(),
                engine: engine.clone(),
                pids: Default::default(),
                slots: Arc::new(tokio::sync::Semaphore::new(max_connections)),
                max_connections,
                sessions,
                metrics: metrics.clone(),
            }),
            cancel: Arc::new(KilnCancel {
                connections,
                queries: engine.queries().clone(),
            }),
            copy: Arc::new(copy::KilnCopy {
                engine,
                bodies,
                wait: config.body_read_timeout,
            }),
            metrics,
            tls: None,
        }
    }

    /// Offers TLS to clients (and, with `--tls-required`, insists on it).
    pub fn with_tls(mut self, tls: Option<Arc<crate::tls::Tls>>) -> Self {
        self.tls = tls;
        self
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.simple.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.extended.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.copy.clone()
    }
}

#[cfg(test)]
mod tests;
