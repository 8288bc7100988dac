//! PostgreSQL wire protocol through `datafusion-postgres`, over the same
//! DataFusion session as HTTP (one `Engine`, one catalog).
//!
//! Why not `datafusion_postgres::serve_with_hooks`: it binds its own listener
//! from host and port (no port 0, no way to stop accepting), so Kiln runs the
//! accept loop itself and hands each socket to `pgwire::tokio::process_socket`
//! with a handler set equivalent to the crate's own. On top of it:
//! - [`KilnDdlHook`] sends `CREATE TABLE` / `DROP TABLE` to Kiln's DDL (else
//!   DataFusion would create an in-memory table), in the simple and the
//!   extended query paths;
//! - [`PgSimple`] wraps the simple query handler to count and time queries
//!   and to map DataFusion errors to SQLSTATEs through [`crate::error`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{ObjectType, Statement};
use datafusion_postgres::DfSessionService;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire::api::auth::StartupHandler;
use datafusion_postgres::pgwire::api::auth::noop::NoopStartupHandler;
use datafusion_postgres::pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use datafusion_postgres::pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use datafusion_postgres::pgwire::api::results::{Response, Tag};
use datafusion_postgres::pgwire::api::store::PortalStore;
use datafusion_postgres::pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers,
};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use kiln_query::{Engine, Output};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::error::{ApiError, pg_error};
use crate::metrics::{Metrics, PG};

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
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
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

/// The simple query handler, counted, timed and with Kiln's SQLSTATEs.
pub struct PgSimple {
    inner: Arc<DfSessionService>,
    metrics: Arc<Metrics>,
    slow_query: Duration,
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
        C::Error: std::fmt::Debug,
        PgWireError: From<<C as futures::Sink<PgWireBackendMessage>>::Error>,
    {
        let started = Instant::now();
        let res = SimpleQueryHandler::do_query(&*self.inner, client, query)
            .await
            .map_err(pg_error);
        let elapsed = started.elapsed();
        let outcome = match &res {
            Ok(_) => "ok",
            Err(PgWireError::UserError(info)) if info.code.starts_with("XX") => "error",
            Err(PgWireError::UserError(_)) => "rejected",
            Err(_) => "error",
        };
        self.metrics.query(PG, outcome, elapsed);
        if elapsed >= self.slow_query {
            tracing::warn!(
                protocol = PG,
                elapsed_ms = elapsed.as_millis() as u64,
                outcome,
                sql = query,
                "slow query"
            );
        }
        res
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
    session: Arc<DfSessionService>,
    startup: Arc<Startup>,
    cancel: Arc<DefaultCancelHandler>,
}

impl Handlers {
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, slow_query: Duration) -> Self {
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(KilnDdlHook {
                engine: engine.clone(),
            }),
            Arc::new(CursorStatementHook),
            Arc::new(SetShowHook),
            Arc::new(TransactionStatementHook),
        ];
        let ctx = Arc::new(engine.session().clone());
        let session = Arc::new(DfSessionService::new_with_hooks(ctx, hooks));
        let connections = Arc::new(ConnectionManager::new());
        Self {
            simple: Arc::new(PgSimple {
                inner: session.clone(),
                metrics,
                slow_query,
            }),
            session,
            startup: Arc::new(Startup {
                connections: connections.clone(),
            }),
            cancel: Arc::new(DefaultCancelHandler::new(connections)),
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.simple.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.session.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.cancel.clone()
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
                    conns.spawn(async move {
                        if let Err(e) =
                            datafusion_postgres::pgwire::tokio::process_socket(socket, None, handlers).await
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
