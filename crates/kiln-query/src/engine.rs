//! [`Engine`]: runs SQL text against a [`Db`]. Kiln's own DDL is handled
//! here; every other statement is planned and executed by the shared
//! DataFusion session.

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{SchemaRef, UInt64Type};
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use kiln_storage::Db;

use crate::ddl::{self, Ddl};
use crate::error::{Error, Result};
use crate::session::build_session;

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

/// SQL over one database. Cheap to share: clone the `Arc` around it.
pub struct Engine {
    db: Db,
    ctx: SessionContext,
}

impl Engine {
    /// Builds the engine and its session once.
    pub fn new(db: Db) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let ctx = build_session(&db, cores)?;
        Ok(Self { db, ctx })
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// Splits SQL text into statements.
    pub fn parse(sql: &str) -> Result<Vec<DfStatement>> {
        let stmts = DFParser::parse_sql_with_dialect(sql, &GenericDialect {})
            .map_err(|e| Error::Sql(format!("SQL error: {e}")))?;
        Ok(stmts.into_iter().collect())
    }

    /// Runs every statement of `sql` in order, stopping at the first error.
    pub async fn execute(&self, sql: &str) -> Result<Vec<Output>> {
        let mut out = vec![];
        for stmt in Self::parse(sql)? {
            out.push(self.execute_statement(stmt).await?);
        }
        Ok(out)
    }

    /// Runs one parsed statement.
    pub async fn execute_statement(&self, stmt: DfStatement) -> Result<Output> {
        if let DfStatement::Statement(s) = &stmt {
            if let Some(ddl) = ddl::parse(s)? {
                return self.run_ddl(ddl).await;
            }
            ddl::check_insert_values(s, &self.db)?;
        }
        let plan = self.ctx.state().statement_to_plan(stmt).await?;
        self.execute_plan(plan).await
    }

    /// Executes a logical plan and collects its result.
    pub async fn execute_plan(&self, plan: LogicalPlan) -> Result<Output> {
        let insert = matches!(
            &plan,
            LogicalPlan::Dml(DmlStatement {
                op: WriteOp::Insert(_),
                ..
            })
        );
        let df = self.ctx.execute_logical_plan(plan).await?;
        let schema = df.schema().inner().clone();
        let batches = df.collect().await?;
        if insert {
            let rows = batches
                .iter()
                .filter_map(|b| b.column(0).as_primitive_opt::<UInt64Type>())
                .map(|c| c.values().iter().sum::<u64>())
                .sum();
            return Ok(Output::Command {
                tag: format!("INSERT 0 {rows}"),
                rows,
            });
        }
        Ok(Output::Rows { schema, batches })
    }

    async fn run_ddl(&self, ddl: Ddl) -> Result<Output> {
        match ddl {
            Ddl::Create(req) => {
                self.db.create_table(req).await?;
                Ok(Output::Command {
                    tag: "CREATE TABLE".into(),
                    rows: 0,
                })
            }
            Ddl::Drop { names, if_exists } => {
                for name in names {
                    self.db.drop_table(&name, if_exists).await?;
                }
                Ok(Output::Command {
                    tag: "DROP TABLE".into(),
                    rows: 0,
                })
            }
        }
    }
}
