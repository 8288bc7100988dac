//! [`Answer`]: a statement the connection answers itself, the same over
//! both protocols, as a datafusion-postgres hook ([`Hook`]). Kiln's
//! transaction, cursor and `SHOW` handling are answers; the hook trait's
//! three entry points (simple query, Parse, Execute) come down to two.

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::results::Response;
use datafusion_postgres::pgwire::error::PgWireResult;

#[async_trait]
pub(crate) trait Answer: Send + Sync {
    /// The reply to `stmt`, at a simple query or an Execute (None: not a
    /// statement this answers).
    /// `params` are the values bound at an Execute (none at a simple
    /// query).
    async fn respond(
        &self,
        stmt: &Statement,
        params: &[ScalarValue],
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>>;

    /// The plan Parse gives `stmt` (None: not one this answers): no rows,
    /// with the columns Describe reports.
    fn plan(
        &self,
        stmt: &Statement,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>>;
}

/// An [`Answer`] as a datafusion-postgres hook.
pub(crate) struct Hook<A>(pub A);

#[async_trait]
impl<A: Answer> QueryHook for Hook<A> {
    async fn handle_simple_query(
        &self,
        stmt: &Statement,
        _ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.0.respond(stmt, &[], client).await
    }

    async fn handle_extended_parse_query(
        &self,
        stmt: &Statement,
        _ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        self.0.plan(stmt, client)
    }

    async fn handle_extended_query(
        &self,
        stmt: &Statement,
        _plan: &LogicalPlan,
        params: &ParamValues,
        _ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let values: Vec<ScalarValue> = match params {
            ParamValues::List(list) => list.iter().map(|p| p.value.clone()).collect(),
            ParamValues::Map(_) => Vec::new(),
        };
        self.0.respond(stmt, &values, client).await
    }
}
