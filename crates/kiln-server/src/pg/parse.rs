//! Parse of the extended protocol: datafusion-postgres's, after Kiln's
//! size check, its own statements and its PostgreSQL rewrites, with
//! errors typed as the engine types them. An `EXPLAIN` with options is
//! planned here, as the simple protocol plans it, and so is a long query:
//! on the execution runtime, under the session's `statement_timeout`
//! ([`Engine::plan_apart`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_postgres::Parser;
use datafusion_postgres::pgwire::api::portal::Format;
use datafusion_postgres::pgwire::api::results::FieldInfo;
use datafusion_postgres::pgwire::api::stmt::QueryParser;
use datafusion_postgres::pgwire::api::{ClientInfo, Type};
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use kiln_query::shape::labels::labels;
use kiln_query::{Engine, Origin};

use super::sql_parser::SqlParser;
use super::{PgStatement, execute, pg_error, statement_timeout, to_pg};

/// datafusion-postgres's Parse (PostgreSQL syntax rewritten, the statement
/// planned once), its errors typed as the engine types them, so Parse
/// fails with the SQLSTATE Execute would give, and recorded as queries.
pub struct KilnParser {
    pub(super) inner: Arc<Parser>,
    pub(super) engine: Arc<Engine>,
    pub(super) sql: SqlParser,
}

impl KilnParser {
    /// `e`, raised at Parse, typed; the statement is recorded as a failed
    /// query of connection `pid`.
    fn error(&self, sql: &str, pid: i32, e: PgWireError) -> PgWireError {
        let kiln = match e {
            PgWireError::ApiError(inner) => match inner.downcast::<DataFusionError>() {
                Ok(df) => {
                    // Parsed again on this error path only, for its names.
                    let stmt = self.sql.parse(sql).ok().and_then(|s| s.into_iter().next());
                    let names = match stmt {
                        Some(s) => self.engine.names(&DfStatement::Statement(Box::new(s))),
                        None => Default::default(),
                    };
                    self.engine.planning_error(&names, *df)
                }
                Err(other) => match other.downcast::<ParserError>() {
                    // Parsed again on this error path only, for its place.
                    Ok(e) => match self.sql.parse(sql) {
                        Err(located) => kiln_query::shape::parse_error(located, sql),
                        Ok(_) => kiln_query::shape::parse_error(*e, sql),
                    },
                    Err(other) => return pg_error(PgWireError::ApiError(other)),
                },
            },
            PgWireError::UserError(info) => {
                let e = kiln_query::Error::Sql(info.message.clone());
                self.engine.record_failed(Origin::pg(pid), sql, &e);
                return PgWireError::UserError(info);
            }
            other => return other,
        };
        self.engine.record_failed(Origin::pg(pid), sql, &kiln);
        to_pg(kiln)
    }

    /// The one statement of `text` if it is an `EXPLAIN` with options or
    /// a format, which datafusion-postgres's Parse would plan without them.
    fn explain_with_options(&self, text: &str) -> Option<Statement> {
        let head = text.trim_start().get(..7)?;
        if !head.eq_ignore_ascii_case("explain") {
            return None;
        }
        let mut stmts = self.sql.parse(text).ok()?;
        match stmts.as_slice() {
            [
                Statement::Explain {
                    options: Some(_), ..
                },
            ]
            | [
                Statement::Explain {
                    format: Some(_), ..
                },
            ] => stmts.pop(),
            _ => None,
        }
    }

    /// The one statement of `text` if it is a query (`SELECT`, `WITH`,
    /// `VALUES`, set operations), which no hook of the protocol's takes.
    fn query(&self, text: &str) -> Option<Statement> {
        let mut stmts = self.sql.parse(text).ok()?;
        match stmts.as_slice() {
            [Statement::Query(_)] => stmts.pop(),
            _ => None,
        }
    }

    /// `stmt`, an `EXPLAIN` with options, planned as the simple protocol
    /// plans it ([`kiln_query::shape::explain`]).
    async fn explain(
        &self,
        sql: &str,
        pid: i32,
        stmt: Statement,
    ) -> PgWireResult<Option<PgStatement>> {
        let df = match kiln_query::shape::explain::statement(stmt.clone()) {
            Ok(df) => df,
            Err(e) => {
                self.engine.record_failed(Origin::pg(pid), sql, &e);
                return Err(to_pg(e));
            }
        };
        let state = self.engine.session().state();
        let plan = state
            .statement_to_plan(df)
            .await
            .map_err(|e| self.error(sql, pid, PgWireError::ApiError(Box::new(e))))?;
        Ok(Some((stmt.to_string(), Some((stmt, plan)))))
    }
}

#[async_trait]
impl QueryParser for KilnParser {
    type Statement = PgStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let pid = client.pid_and_secret_key().0;
        if let Err(e) = self.engine.check_size(sql) {
            self.engine.record_failed(Origin::pg(pid), sql, &e);
            return Err(to_pg(e));
        }
        // Kiln's own statements (accounts, cubes) are kept as text (no
        // plan), parsed and run at Execute: no other parser sees a password.
        if kiln_query::OwnStatement::is_own_text(sql) {
            return Ok(Some((sql.to_string(), None)));
        }
        // Only text this long can nest past the limit (each level takes a
        // term and an operator) or hold a list past its limit (each entry
        // takes a term and a comma), and only some text has PostgreSQL syntax
        // the planner is given rewritten (`(expr).field`, set-returning
        // functions; `shape::postgres`): other statements skip the second
        // parse.
        let most = (self.engine.max_expression_depth()).min(kiln_query::shape::width::MAX_ENTRIES);
        let deep = sql.len() > 2 * most;
        // A subquery in a select list may be kept from datafusion-postgres's
        // rules by Kiln's parse (`sql_parser`): then its text is planned.
        let subquery = SqlParser::may_keep_subqueries(sql);
        let mut rewritten = None;
        if (deep || subquery || kiln_query::shape::postgres::may_rewrite(sql))
            && let Ok((mut stmts, kept)) = self.sql.parse_keeping(sql)
        {
            let mut rewrote = kept;
            for stmt in &mut stmts {
                match self.engine.check_shape(stmt) {
                    Ok(r) => rewrote |= r,
                    Err(e) => {
                        self.engine.record_failed(Origin::pg(pid), sql, &e);
                        return Err(to_pg(e));
                    }
                }
            }
            if rewrote {
                let text: Vec<String> = stmts.iter().map(ToString::to_string).collect();
                rewritten = Some(text.join("; "));
            }
        }
        // A long statement may take long to plan: not on a protocol worker.
        let apart = sql.len() >= kiln_query::executor::PLAN_APART_BYTES;
        let text = rewritten.as_deref().unwrap_or(sql);
        if let Some(stmt) = self.explain_with_options(text) {
            return kiln_query::executor::beside(apart, self.explain(sql, pid, stmt)).await;
        }
        // A long query is planned on the execution runtime, stopped by the
        // session's timeout (no hook of the protocol's takes a query).
        if apart && let Some(stmt) = self.query(text) {
            return match self
                .engine
                .plan_apart(stmt.clone(), statement_timeout(client))
                .await
            {
                Ok(plan) => Ok(Some((stmt.to_string(), Some((stmt, plan))))),
                Err(e) => {
                    self.engine.record_failed(Origin::pg(pid), sql, &e);
                    Err(to_pg(e))
                }
            };
        }
        let planned = self.inner.parse_sql(client, text, types);
        kiln_query::executor::beside(apart, planned)
            .await
            .map_err(|e| self.error(sql, pid, e))
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        let reported = self.inner.get_parameter_types(stmt)?;
        match &stmt.1 {
            Some((_, plan)) => execute::described_parameters(reported, plan, self.engine.session()),
            None => Ok(reported),
        }
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        if let (text, None) = stmt
            && let Some(Ok(own)) = kiln_query::OwnStatement::parse(text)
        {
            return match own.result_schema() {
                Some(schema) => execute::fields(&schema, column_format),
                None => Ok(vec![]),
            };
        }
        let fields = execute::described(self.inner.get_result_schema(stmt, column_format)?);
        Ok(match stmt.1.as_ref().and_then(|(stmt, _)| labels(stmt)) {
            Some(labels) => execute::labeled(fields, &labels),
            None => fields,
        })
    }
}
