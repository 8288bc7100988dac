//! Planning a long statement for the PostgreSQL protocol's Parse step.
//!
//! Why: Parse plans a statement before any query is registered for it, so
//! the deadline a query runs under does not cover it, and planning is
//! synchronous work no deadline interrupts where it runs. A long statement
//! (at least [`crate::executor::PLAN_APART_BYTES`]: only those plan
//! slowly, a 20 KB `ORDER BY` for 11 s) is planned here on the execution
//! runtime, and the caller stops waiting at the session's
//! `statement_timeout`, as a query's own planning is stopped.

use std::time::Duration;

use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use super::Engine;
use crate::error::{Error, Result};

impl Engine {
    /// The logical plan of `stmt`, planned on the execution runtime;
    /// [`Error::Timeout`] once `timeout` has passed (the planning, which
    /// cannot be interrupted, is abandoned at its next await).
    pub async fn plan_apart(
        &self,
        stmt: Statement,
        timeout: Option<Duration>,
    ) -> Result<LogicalPlan> {
        let stmt = DfStatement::Statement(Box::new(stmt));
        let names = self.names(&stmt);
        let state = self.ctx.state();
        let work = self
            .executor
            .plan(true, async move { state.statement_to_plan(stmt).await });
        let planned = match timeout {
            Some(d) => tokio::time::timeout(d, work)
                .await
                .map_err(|_| Error::Timeout(d))?,
            None => work.await,
        }?;
        planned.map_err(|e| self.planning_error(&names, e))
    }
}
