//! PostgreSQL wire protocol through `datafusion-postgres`, over the same
//! DataFusion session as HTTP (one `Engine`, one catalog).
//!
//! Why not `datafusion_postgres::serve_with_hooks`: it binds its own listener
//! from host and port (no port 0, no way to stop accepting), so Kiln runs the
//! accept loop itself and hands each socket to `pgwire::tokio::process_socket`
//! with a handler set equivalent to the crate's own. On top of it:
//! - [`KilnDdlHook`] sends `CREATE TABLE` / `DROP TABLE` to Kiln's DDL (else
//!   DataFusion would create an in-memory table), in the simple and the
//!   extended query paths, and starts `COPY ... FROM STDIN` ([`copy`]);
//! - [`PgSimple`] and [`PgExtended`] wrap the simple and extended query
//!   handlers: each query is registered in the engine's [`QueryRegistry`]
//!   (admission, timeout, `system.queries`, metrics), its row stream is
//!   guarded so a cancel or timeout stops it while rows are still being
//!   computed, and DataFusion errors get SQLSTATEs through [`crate::error`];
//! - [`KilnCancel`] answers the CancelRequest message: pgwire's own cancel
//!   only interrupts a query until it returns its row stream, and rows are
//!   computed while that stream is sent, so after checking the secret key it
//!   also cancels the connection's query in the registry.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{ObjectType, Statement};
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire::api::auth::StartupHandler;
use datafusion_postgres::pgwire::api::auth::noop::NoopStartupHandler;
use datafusion_postgres::pgwire::api::cancel::CancelHandler;
use datafusion_postgres::pgwire::api::copy::CopyHandler;
use datafusion_postgres::pgwire::api::portal::Portal;
use datafusion_postgres::pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use datafusion_postgres::pgwire::api::results::{Response, Tag};
use datafusion_postgres::pgwire::api::store::PortalStore;
use datafusion_postgres::pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers,
};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use datafusion_postgres::pgwire::messages::cancel::CancelRequest;
use datafusion_postgres::{DfSessionService, Parser};
use kiln_query::{Engine, Output, QueryHandle, QueryRegistry};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::error::{ApiError, pg_error};
use crate::metrics::{Metrics, PG};

mod conn;
mod copy;
mod execute;

/// A prepared statement as `DfSessionService` keeps it (SQL text and plan).
type PgStatement = <DfSessionService as ExtendedQueryHandler>::Statement;

/// Makes the shared session look like PostgreSQL to clients (pg_catalog
/// tables and functions such as `current_database()`).
pub fn setup_catalog(engine: &Engine) -> Result<(), ApiError> {
    datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog(
        engine.session(),
        kiln_query::CATALOG,
        datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider,
    )
    .map_err(|e| ApiError::internal(format!("setting up pg_catalog: {e}")))
}

/// Sends Kiln's DDL to the engine instead of DataFusion.
pub struct KilnDdlHook {
    engine: Arc<Engine>,
    copy_limit: usize,
}

fn is_kiln_ddl(stmt: &Statement) -> bool {
    match stmt {
        Statement::CreateTable(_) => true,
        Statement::Drop { object_type, .. } => *object_type == ObjectType::Table,
        _ => false,
    }
}

impl KilnDdlHook {
    async fn run(&self, stmt: &Statement) -> PgWireResult<Response> {
        let out = self
            .engine
            .execute_statement(DfStatement::Statement(Box::new(stmt.clone())))
            .await
            .map_err(|e| ApiError::from(e).to_pg())?;
        Ok(match out {
            Output::Command { tag, .. } => Response::Execution(Tag::new(&tag)),
            Output::Rows { .. } => Response::EmptyQuery,
        })
    }
}

#[async_trait]
impl QueryHook for KilnDdlHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Some(copy) = copy::start(statement, &self.engine, self.copy_limit, &*client) {
            return Some(copy);
        }
        if !is_kiln_ddl(statement) {
            return None;
        }
        Some(self.run(statement).await)
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        if matches!(statement, Statement::Copy { .. }) {
            let msg = "COPY FROM STDIN is supported through the simple query protocol";
            return Some(Err(ApiError::bad_input(msg).to_pg()));
        }
        if !is_kiln_ddl(statement) {
            return None;
        }
        // A placeholder plan with no parameters and no result columns; the
        // statement itself is run by `handle_extended_query`.
        Some(Ok(LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(DFSchema::empty()),
        })))
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if !is_kiln_ddl(statement) {
            return None;
        }
        Some(self.run(statement).await)
    }
}

/// Registers a query of connection `pid`; refused (overloaded) as a pg error.
async fn begin(
    queries: &Arc<QueryRegistry>,
    text: &str,
    pid: i32,
) -> PgWireResult<Arc<QueryHandle>> {
    match queries.begin(PG, text, Some(pid)).await {
        Ok(h) => Ok(Arc::new(h)),
        Err(e) => Err(ApiError::from(e).to_pg()),
    }
}

/// Runs `fut` (a handler's `do_query`) under the query's cancel and
/// deadline, maps its errors to Kiln's SQLSTATEs and records them.
async fn run_guarded<T>(
    handle: &Arc<QueryHandle>,
    fut: impl Future<Output = PgWireResult<T>>,
) -> PgWireResult<T> {
    match handle.run(fut).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => {
            let e = pg_error(e);
            handle.fail(&kiln_query::Error::Sql(e.to_string()));
            Err(e)
        }
        Err(stopped) => Err(ApiError::from(stopped).to_pg()),
    }
}

/// Puts a query's row stream under its handle: rows are counted, and a
/// cancel or timeout ends the stream with SQLSTATE 57014.
fn guard_response(handle: &Arc<QueryHandle>, resp: Response) -> Response {
    match resp {
        Response::Query(mut q) => {
            let rows = std::mem::replace(&mut q.data_rows, Box::pin(futures::stream::empty()));
            let guarded = handle.clone().guard(
                rows,
                |_| 1,
                |stop| ApiError::from(kiln_query::Error::from(stop)).to_pg(),
            );
            q.data_rows = Box::pin(guarded);
            Response::Query(q)
        }
        Response::Error(e) => {
            handle.fail(&kiln_query::Error::Sql(e.message.clone()));
            Response::Error(e)
        }
        other => other,
    }
}

/// The simple query handler, registered and guarded.
pub struct PgSimple {
    inner: Arc<DfSessionService>,
    queries: Arc<QueryRegistry>,
}

#[async_trait]
impl SimpleQueryHandler for PgSimple {
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
        let handle = begin(&self.queries, query, client.pid_and_secret_key().0).await?;
        let responses = run_guarded(
            &handle,
            SimpleQueryHandler::do_query(&*self.inner, client, query),
        )
        .await?;
        Ok(responses
            .into_iter()
            .map(|r| guard_response(&handle, r))
            .collect())
    }
}

/// The extended query handler (Parse/Bind/Execute: prepared statements),
/// registered and guarded like [`PgSimple`]. The statement's logical plan
/// is built once at Parse and reused by every Execute; queries are run by
/// [`execute::execute_query`], everything else by `DfSessionService`.
pub struct PgExtended {
    inner: Arc<DfSessionService>,
    queries: Arc<QueryRegistry>,
    engine: Arc<Engine>,
    types: execute::ParamTypes,
}

#[async_trait]
impl ExtendedQueryHandler for PgExtended {
    type Statement = PgStatement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.inner.query_parser()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        max_rows: usize,
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
        let text = &portal.statement.statement.0;
        let handle = begin(&self.queries, text, client.pid_and_secret_key().0).await?;
        let resp = run_guarded(&handle, async {
            match execute::execute_query(&self.engine, &self.types, client, portal).await? {
                Some(resp) => Ok(resp),
                None => {
                    ExtendedQueryHandler::do_query(&*self.inner, client, portal, max_rows).await
                }
            }
        })
        .await?;
        Ok(guard_response(&handle, resp))
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

/// Startup without authentication (as `datafusion_postgres::serve` does);
/// registers connections so cancel requests can find them.
pub struct Startup {
    connections: Arc<ConnectionManager>,
}

#[async_trait]
impl NoopStartupHandler for Startup {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
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
}

impl Handlers {
    /// `copy_limit`: the most bytes one COPY FROM STDIN may send.
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, copy_limit: usize) -> Self {
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(KilnDdlHook {
                engine: engine.clone(),
                copy_limit,
            }),
            Arc::new(CursorStatementHook),
            Arc::new(SetShowHook),
            Arc::new(TransactionStatementHook),
        ];
        let ctx = Arc::new(engine.session().clone());
        let session = Arc::new(DfSessionService::new_with_hooks(ctx, hooks));
        let connections = Arc::new(ConnectionManager::new());
        let queries = engine.queries().clone();
        Self {
            simple: Arc::new(PgSimple {
                inner: session.clone(),
                queries: queries.clone(),
            }),
            extended: Arc::new(PgExtended {
                inner: session,
                queries: queries.clone(),
                engine: engine.clone(),
                types: Default::default(),
            }),
            startup: Arc::new(Startup {
                connections: connections.clone(),
            }),
            cancel: Arc::new(KilnCancel {
                connections,
                queries,
            }),
            copy: Arc::new(copy::KilnCopy { engine }),
            metrics,
        }
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

/// Accepts connections until `shutdown` turns true; returns the connections
/// still running so the caller can give them a grace period.
pub async fn accept_loop(
    listener: TcpListener,
    handlers: Arc<Handlers>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut conns = JoinSet::new();
    while !*shutdown.borrow_and_update() {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, addr)) => {
                    let handlers = handlers.clone();
                    let open = handlers.metrics.connection(PG);
                    conns.spawn(async move {
                        let _open = open;
                        if let Err(e) =
                            conn::serve(socket, handlers).await
                        {
                            tracing::debug!(%addr, "pg connection: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("pg accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
        while conns.try_join_next().is_some() {}
    }
    conns
}
