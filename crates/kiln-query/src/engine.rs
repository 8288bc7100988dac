//! [`Engine`]: runs SQL text against a [`Db`]. Kiln's own DDL is handled
//! here; every other statement is planned and executed by the shared
//! DataFusion session. Every protocol shares one engine, so they share the
//! session's caches and one [`QueryRegistry`] (admission, timeouts,
//! `system.queries`).

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef, UInt64Type};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use futures::TryStreamExt;
use kiln_storage::Db;

use crate::ddl::{self, Ddl};
use crate::error::{Error, Result};
use crate::queries::{QueryLimits, QueryRegistry};
use crate::reuse::{PlanCache, cast_param};
use crate::segment_cache::SegmentCache;
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

/// SQL over one database. Cheap to share: clone the `Arc` around it.
pub struct Engine {
    db: Db,
    ctx: SessionContext,
    queries: Arc<QueryRegistry>,
    cache: Arc<SegmentCache>,
    plans: PlanCache,
}

impl Engine {
    /// Builds the engine and its session once, with default query limits.
    pub fn new(db: Db) -> Result<Self> {
        Self::with_limits(db, QueryLimits::default())
    }

    /// Builds the engine with the given admission and timeout limits.
    pub fn with_limits(db: Db, limits: QueryLimits) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mode = limits.plan_cache_mode;
        let queries = QueryRegistry::new(limits);
        let cache = Arc::new(
            SegmentCache::new(db.store().clone(), db.config().segment_cache_bytes)
                .with_partials(db.config().partial_cache_bytes),
        );
        let ctx = build_session(&db, cores, queries.clone(), cache.clone())?;
        Ok(Self {
            plans: PlanCache::new(db.clone(), mode),
            db,
            ctx,
            queries,
            cache,
        })
    }

    /// Running and recent queries; protocols register theirs here.
    pub fn queries(&self) -> &Arc<QueryRegistry> {
        &self.queries
    }

    /// Hot segments held decoded.
    pub fn segment_cache(&self) -> &Arc<SegmentCache> {
        &self.cache
    }

    /// Kept plans of prepared statements.
    pub fn plans(&self) -> &PlanCache {
        &self.plans
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The session state to plan one query with; see [`query_state`].
    pub fn query_state(&self) -> SessionState {
        query_state(&self.ctx, &self.queries)
    }

    /// Runs a prepared query: `logical` is the plan of `sql` with
    /// placeholders `$1..$n` of `types`, `params` their values. Repeated
    /// statements may run a kept plan ([`crate::reuse`]).
    pub async fn execute_prepared(
        &self,
        sql: &str,
        logical: &LogicalPlan,
        types: &[DataType],
        params: &[ScalarValue],
    ) -> Result<SendableRecordBatchStream> {
        Ok(self
            .plans
            .execute(&self.ctx, &self.queries, sql, logical, types, params)
            .await?)
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
        match self.execute_streamed(stmt, &[]).await? {
            Streamed::Command { tag, rows } => Ok(Output::Command { tag, rows }),
            Streamed::Rows { schema, stream } => Ok(Output::Rows {
                schema,
                batches: stream.try_collect().await?,
            }),
        }
    }

    /// Plans one statement, binds `params` to its `$1`, `$2`... (each cast
    /// to the type the plan infers for it), and starts it: rows are computed
    /// as the returned stream is polled. DDL and INSERT run to completion
    /// here and return a command tag.
    pub async fn execute_streamed(
        &self,
        stmt: DfStatement,
        params: &[ScalarValue],
    ) -> Result<Streamed> {
        if let DfStatement::Statement(s) = &stmt {
            if let Some(ddl) = ddl::parse(s)? {
                let Output::Command { tag, rows } = self.run_ddl(ddl).await? else {
                    unreachable!("DDL returns a command tag")
                };
                return Ok(Streamed::Command { tag, rows });
            }
            ddl::check_insert_values(s, &self.db)?;
        }
        let mut plan = self.ctx.state().statement_to_plan(stmt).await?;
        if !params.is_empty() {
            plan = bind_params(plan, params)?;
        }
        self.execute_plan(plan).await
    }

    /// Executes a logical plan: INSERTs run to completion, queries stream.
    pub async fn execute_plan(&self, plan: LogicalPlan) -> Result<Streamed> {
        let insert = matches!(
            &plan,
            LogicalPlan::Dml(DmlStatement {
                op: WriteOp::Insert(_),
                ..
            })
        );
        let df = match plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                self.ctx.execute_logical_plan(plan).await?
            }
            plan => DataFrame::new(self.query_state(), plan),
        };
        let schema = df.schema().inner().clone();
        if insert {
            let batches = df.collect().await?;
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
        Ok(Streamed::Rows {
            schema,
            stream: df.execute_stream().await?,
        })
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

/// The session state to plan one query with: the session's, with the
/// query's parallelism (`target_partitions`) divided among the queries
/// running now.
///
/// Why: a query split into N partitions pays for it with repartitioning and
/// a second aggregation phase. That buys latency when cores are idle, and
/// nothing when other queries already keep them busy: with 25 dashboard
/// clients on 2 cores, planning every query with 1 partition served
/// 15-37% more queries per second (docs/benchmarks.md). A query alone still
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

/// Partitions for one query when `running` queries (itself included) share
/// `max` partitions' worth of cores.
pub(crate) fn partitions_for(max: usize, running: usize) -> usize {
    (max / running.max(1)).max(1)
}

/// Binds positional parameters, casting each value to the type the plan
/// infers for its placeholder (a JSON string becomes a TIMESTAMP where the
/// plan compares it with one); a value that does not fit names its `$N`.
fn bind_params(plan: LogicalPlan, params: &[ScalarValue]) -> Result<LogicalPlan> {
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
    Ok(plan.replace_params_with_values(&ParamValues::List(
        bound.into_iter().map(Into::into).collect(),
    ))?)
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::queries::QueryLimits;

    #[test]
    fn partitions_are_shared_among_running_queries() {
        assert_eq!(partitions_for(2, 0), 2);
        assert_eq!(partitions_for(2, 1), 2);
        assert_eq!(partitions_for(2, 2), 1);
        assert_eq!(partitions_for(2, 150), 1);
        assert_eq!(partitions_for(8, 3), 2);
        assert_eq!(partitions_for(1, 1), 1);
    }

    #[tokio::test]
    async fn a_query_planned_beside_others_gets_fewer_partitions() {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        let queries = QueryRegistry::new(QueryLimits::default());
        let partitions = |q: &QueryRegistry| query_state(&ctx, q).config().target_partitions();
        assert_eq!(partitions(&queries), 4);
        let a = queries.begin("pg", "a", None).await.unwrap();
        let b = queries.begin("pg", "b", None).await.unwrap();
        assert_eq!(partitions(&queries), 2);
        drop((a, b));
        assert_eq!(partitions(&queries), 4);
        // The session's own setting is untouched.
        assert_eq!(ctx.state().config().target_partitions(), 4);
    }
}
