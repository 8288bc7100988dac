//! What a statement may touch: the server files SQL may use
//! (`--sql-file-access`, see [`crate::files`]) and the privileges of the
//! query's user (see [`crate::auth`]), checked in the one door; and
//! account statements, run as their user.

use datafusion::logical_expr::{LogicalPlan, WriteOp};
use datafusion::sql::sqlparser::ast::{self, Statement};

use super::{Engine, Query, Streamed};
use crate::auth::{Access, Account, AccountOutput};
use crate::error::{Error, Result};

impl Engine {
    /// Refuses a statement that uses a server file (`COPY ... TO/FROM
    /// 'path'`, `CREATE EXTERNAL TABLE ... LOCATION`) unless
    /// `--sql-file-access` allows that path ([`FileAccess`]); a COPY FROM a
    /// file that is allowed is still unsupported (COPY FROM STDIN, the
    /// HTTP write API and `kiln load` import files). Protocols that parse
    /// with PostgreSQL's parser call it; plans are checked again at
    /// execution ([`Engine::check_plan_files`]).
    pub fn check_files(&self, stmt: &Statement) -> Result<()> {
        match stmt {
            Statement::Copy { target, to, .. } => {
                let what = if *to { "COPY ... TO" } else { "COPY ... FROM" };
                match target {
                    ast::CopyTarget::File { filename } => {
                        self.files.check(what, filename)?;
                        if !*to {
                            return Err(Error::Unsupported(
                                "COPY ... FROM a server file: use COPY ... FROM STDIN, the HTTP write API or kiln load".into(),
                            ));
                        }
                        Ok(())
                    }
                    ast::CopyTarget::Program { .. } => Err(Error::PermissionDenied(format!(
                        "{what} PROGRAM: SQL may not run programs on the server"
                    ))),
                    ast::CopyTarget::Stdin | ast::CopyTarget::Stdout => Ok(()),
                }
            }
            Statement::CreateTable(ct) if ct.external => {
                let location = ct.location.as_deref().unwrap_or_default();
                self.files
                    .check("CREATE EXTERNAL TABLE ... LOCATION", location)
                    .map(drop)
            }
            _ => Ok(()),
        }
    }

    /// Refuses a plan that reads or writes a server file outside what
    /// `--sql-file-access` allows, anywhere in it (an `EXPLAIN ANALYZE
    /// COPY` too): the check every protocol's statements pass.
    pub fn check_plan_files(&self, plan: &LogicalPlan) -> Result<()> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        use datafusion::logical_expr::DdlStatement;
        let mut denied = None;
        plan.apply(|p| {
            let checked = match p {
                LogicalPlan::Copy(c) => self.files.check("COPY ... TO", &c.output_url),
                LogicalPlan::Ddl(DdlStatement::CreateExternalTable(c)) => {
                    let what = "CREATE EXTERNAL TABLE ... LOCATION";
                    match c.locations.as_slice() {
                        [] => self.files.check(what, ""),
                        all => all
                            .iter()
                            .try_for_each(|l| self.files.check(what, l).map(drop))
                            .map(|()| Default::default()),
                    }
                }
                _ => return Ok(TreeNodeRecursion::Continue),
            };
            match checked {
                Ok(_) => Ok(TreeNodeRecursion::Continue),
                Err(e) => {
                    denied = Some(e);
                    Ok(TreeNodeRecursion::Stop)
                }
            }
        })?;
        match denied {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Whether `user` may do `access`; with no user (authentication off,
    /// the embedded engine) everything is allowed. For what a protocol
    /// does itself (COPY FROM STDIN, the HTTP write API).
    pub fn authorize(&self, user: Option<&str>, access: Access<'_>) -> Result<()> {
        match user {
            Some(u) => self.auth.authorize(u, access),
            None => Ok(()),
        }
    }

    /// Refuses a plan that needs a privilege the query's user lacks: every
    /// Kiln table it reads (subqueries too) needs SELECT, an INSERT's table
    /// INSERT; DDL and COPY to a file need an admin.
    pub(super) fn authorize_plan(&self, query: &Query, plan: &LogicalPlan) -> Result<()> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let Some(user) = query.user() else {
            return Ok(());
        };
        let mut refused = None;
        plan.apply_with_subqueries(|p| {
            // Cancelling another session's query is an admin's, as KILL is.
            let cancels = p.expressions().iter().any(|e| {
                e.exists(|e| {
                    Ok(
                        matches!(e, datafusion::logical_expr::Expr::ScalarFunction(f)
                        if f.name() == crate::system::cancel::PG_CANCEL_BACKEND),
                    )
                })
                .unwrap_or(false)
            });
            let checked = match p {
                _ if cancels => self
                    .auth
                    .authorize(user, Access::Admin("pg_cancel_backend")),
                LogicalPlan::TableScan(scan) => {
                    let kiln = datafusion::datasource::source_as_provider(&scan.source)
                        .is_ok_and(|p| p.is::<crate::KilnTable>());
                    match kiln {
                        true => self
                            .auth
                            .authorize(user, Access::Read(scan.table_name.table())),
                        false => Ok(()),
                    }
                }
                LogicalPlan::Dml(d) => match d.op {
                    WriteOp::Insert(_) => self
                        .auth
                        .authorize(user, Access::Write(d.table_name.table())),
                    _ => self.auth.authorize(user, Access::Admin(d.op.name())),
                },
                LogicalPlan::Copy(_) => self
                    .auth
                    .authorize(user, Access::Admin("COPY ... TO a server file")),
                LogicalPlan::Ddl(d) => self.auth.authorize(user, Access::Admin(d.name())),
                _ => Ok(()),
            };
            match checked {
                Ok(()) => Ok(TreeNodeRecursion::Continue),
                Err(e) => {
                    refused = Some(e);
                    Ok(TreeNodeRecursion::Stop)
                }
            }
        })?;
        refused.map_or(Ok(()), Err)
    }

    /// Runs an account statement ([`crate::auth::statement`]) as `query`'s
    /// user (who must be an admin, but for their own password).
    pub(super) async fn run_account(&self, query: &Query, stmt: Account) -> Result<Streamed> {
        let auth = self.auth.clone();
        let user = query.user().map(str::to_string);
        self.guarded(query, async move {
            // Password hashing (PBKDF2) and a file write: off the async threads.
            let out = tokio::task::spawn_blocking(move || auth.execute(user.as_deref(), stmt))
                .await
                .map_err(|e| Error::Io {
                    context: "running an account statement".into(),
                    source: std::io::Error::other(e.to_string()),
                })??;
            Ok(match out {
                AccountOutput::Command(tag) => Streamed::Command {
                    tag: tag.into(),
                    rows: 0,
                },
                AccountOutput::Rows(batch) => {
                    let schema = batch.schema();
                    let stream = datafusion::physical_plan::memory::MemoryStream::try_new(
                        vec![batch],
                        schema.clone(),
                        None,
                    )?;
                    Streamed::Rows {
                        schema,
                        stream: Box::pin(stream),
                    }
                }
            })
        })
        .await
    }
}
