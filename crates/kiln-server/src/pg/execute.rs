//! Execute of a prepared statement, and the encoding of rows for the wire.
//!
//! Why not `DfSessionService`'s Execute: it runs DataFusion's analyzer and
//! optimizer twice per Execute (once itself, once more inside
//! `DataFrame::create_physical_plan`) and clones the session state three
//! times; in a profile of pgbench's prepared `SELECT 1` those were about a
//! third of the server's CPU. Here a `SELECT` whose parameter types the
//! plan infers goes to [`Engine::run_prepared`] with the bound values:
//! planned once per execution (one state snapshot with the query's share
//! of the cores, one optimization, one physical plan), or, once a generic
//! plan has proved faster, not planned at all ([`kiln_query::plan_cache`]).
//! Any other statement goes to [`Engine::run_planned`] with the plan made
//! at Parse; its parameter types come from the plan where it infers them,
//! else from the client's Parse message.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::Schema;
use bytes::{BufMut, BytesMut};
use dashmap::DashMap;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use datafusion_postgres::arrow_pg::datatypes::{
    arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type,
};
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::Type;
use datafusion_postgres::pgwire::api::portal::{Format, Portal};
use datafusion_postgres::pgwire::api::results::{FieldInfo, QueryResponse};
use datafusion_postgres::pgwire::api::stmt::StoredStatement;
use datafusion_postgres::pgwire::error::{PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::data::DataRow;
use datafusion_postgres::pgwire::types::format::FormatOptions;
use futures::StreamExt;
use kiln_query::shape::labels::Labels;
use kiln_query::{Engine, Query, Streamed};

use super::{PgStatement, to_pg};
use crate::error::ApiError;

fn api(e: impl std::error::Error + Send + Sync + 'static) -> PgWireError {
    PgWireError::ApiError(Box::new(e))
}

/// Runs the portal's statement under `query`.
pub(super) async fn execute(
    engine: &Engine,
    query: &Query,
    types: &ParamTypes,
    portal: &Portal<PgStatement>,
) -> PgWireResult<Streamed> {
    let (sql, parsed) = &portal.statement.statement;
    let Some((stmt, plan)) = parsed else {
        unreachable!("the caller answers an empty statement");
    };
    // Named statements are the ones executed again; an unnamed one is
    // usually parsed for each execution, so its types are not kept.
    let session = engine.session();
    let params = match portal.statement.id.is_empty() {
        true => Arc::new(parameter_types(plan, session)?),
        false => types.of(&portal.statement, plan, session)?,
    };
    if let Statement::Query(_) = stmt
        && let Some(types) = &params.all
    {
        let values = match bind(portal, &types.iter().map(Some).collect::<Vec<_>>())? {
            ParamValues::List(list) => list.into_iter().map(|p| p.value).collect::<Vec<_>>(),
            ParamValues::Map(_) => unreachable!("the wire binds by position"),
        };
        return engine
            .run_prepared(query, sql, plan, types, &values)
            .await
            .map_err(to_pg);
    }
    let ordered: Vec<Option<DataType>> = (1..=portal.parameter_len())
        .map(|i| params.by_id.get(&format!("${i}")).cloned().flatten())
        .collect();
    let params = bind(
        portal,
        &ordered.iter().map(Option::as_ref).collect::<Vec<_>>(),
    )?;
    engine
        .run_planned(query, stmt, plan, &params)
        .await
        .map_err(to_pg)
}

/// The portal's bound values, decoded as `types` (`None`: as the client
/// declared them at Parse).
pub(super) fn bind(
    portal: &Portal<PgStatement>,
    types: &[Option<&DataType>],
) -> PgWireResult<ParamValues> {
    let wire: Vec<Option<Type>> = types
        .iter()
        .map(|t| t.map(into_pg_type).transpose())
        .collect::<PgWireResult<_>>()?;
    deserialize_parameters_with_server_types(
        portal,
        types,
        &wire.iter().map(Option::as_ref).collect::<Vec<_>>(),
    )
}

/// The columns of a result of `schema`, as Describe reports them.
pub(super) fn fields(schema: &Schema, format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
    let format = format.unwrap_or(&Format::UnifiedText);
    Ok(described(arrow_schema_to_pg_fields(schema, format, None)?))
}

/// Rows as pgwire sends them, in the columns' `format`, under `labels`
/// where given; an error while computing them gets its SQLSTATE.
pub(super) fn encode<C: ClientInfo + ?Sized>(
    schema: &Schema,
    batches: SendableRecordBatchStream,
    format: &Format,
    labels: Option<&Labels>,
    client: &C,
) -> PgWireResult<QueryResponse> {
    let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
    let fields = described(arrow_schema_to_pg_fields(schema, format, Some(options))?);
    let fields = Arc::new(match labels {
        Some(labels) => labeled(fields, labels),
        None => fields,
    });
    let row_fields = fields.clone();
    let rows = batches
        .map(move |batch| {
            let rows: Box<dyn Iterator<Item = PgWireResult<_>> + Send + Sync> = match batch {
                Ok(batch) => {
                    let nulls = null_intervals(&batch);
                    let rows = encode_recordbatch(row_fields.clone(), batch);
                    match nulls.is_empty() {
                        true => rows,
                        false => Box::new(
                            rows.enumerate()
                                .map(move |(i, row)| row.map(|row| with_nulls(row, i, &nulls))),
                        ),
                    }
                }
                Err(e) => Box::new(std::iter::once(Err(ApiError::from(e).to_pg()))),
            };
            futures::stream::iter(rows)
        })
        .flatten();
    Ok(QueryResponse::new(fields, rows))
}

/// The interval columns of `batch` that hold NULLs, with their arrays.
/// arrow-pg writes a NULL interval as `00:00:00` (its encoder checks
/// nulls for durations, not intervals): [`with_nulls`] puts them back.
fn null_intervals(batch: &RecordBatch) -> Vec<(usize, ArrayRef)> {
    batch
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.data_type(), DataType::Interval(_)) && c.null_count() > 0)
        .map(|(i, c)| (i, c.clone()))
        .collect()
}

/// `row` (row `index` of its batch) with the fields of `nulls` that are
/// NULL in that row sent as NULL (length -1).
pub(super) fn with_nulls(row: DataRow, index: usize, nulls: &[(usize, ArrayRef)]) -> DataRow {
    let null_at = |field: usize| {
        nulls
            .iter()
            .any(|(c, array)| *c == field && array.is_null(index))
    };
    if !(0..row.field_count as usize).any(null_at) {
        return row;
    }
    let data = &row.data;
    let mut out = BytesMut::with_capacity(data.len());
    let mut at = 0;
    for field in 0..row.field_count as usize {
        let len = i32::from_be_bytes(data[at..at + 4].try_into().expect("four bytes"));
        let end = at + 4 + usize::try_from(len).unwrap_or(0);
        if null_at(field) {
            out.put_i32(-1);
        } else {
            out.extend_from_slice(&data[at..end]);
        }
        at = end;
    }
    DataRow::new(out, row.field_count)
}

/// Result columns as PostgreSQL describes them: a column of no type (a
/// `NULL` literal, Arrow's `Null`) is `text`, as PostgreSQL 10+ resolves
/// an unknown-typed output column, never `unknown` (OID 705), which
/// pgjdbc cannot map to a JDBC type and looks up in `pg_type` instead.
pub(super) fn described(fields: Vec<FieldInfo>) -> Vec<FieldInfo> {
    fields
        .into_iter()
        .map(|f| match *f.datatype() == Type::UNKNOWN {
            false => f,
            true => FieldInfo::new(
                f.name().to_string(),
                f.table_id(),
                f.column_id(),
                Type::TEXT,
                f.format(),
            )
            .with_format_options(f.format_options().clone()),
        })
        .collect()
}

/// `fields` named as PostgreSQL labels them (`shape::labels`).
pub(super) fn labeled(fields: Vec<FieldInfo>, labels: &Labels) -> Vec<FieldInfo> {
    let mut names: Vec<String> = fields.iter().map(|f| f.name().to_string()).collect();
    labels.apply(&mut names);
    fields
        .into_iter()
        .zip(names)
        .map(|(f, name)| match f.name() == name {
            true => f,
            false => FieldInfo::new(
                name,
                f.table_id(),
                f.column_id(),
                f.datatype().clone(),
                f.format(),
            )
            .with_format_options(f.format_options().clone()),
        })
        .collect()
}

/// At most this many statements' types are kept; past it, those of closed
/// statements are dropped.
const MAX_KEPT_TYPES: usize = 4096;

/// Parameter types of prepared statements, worked out once per statement
/// (one Parse), not at every Execute: that walk of the plan was 6% of the
/// server's CPU under pgbench's prepared lookup.
///
/// Keyed by the address of the statement; each entry holds a weak
/// reference to it, so the address cannot be reused while the entry
/// exists, and an entry whose statement is closed is dead.
pub(super) struct ParamTypes<S = StoredStatement<PgStatement>> {
    by_statement: DashMap<usize, (Weak<S>, Arc<Params>)>,
}

/// A statement's parameter types, worked out from its plan.
#[derive(Debug, PartialEq)]
struct Params {
    /// Every one in order (`$1`, `$2`, ...), if each is known and none
    /// carries field metadata (the catalog's OID columns): the statement
    /// can then run a kept plan.
    all: Option<Vec<DataType>>,
    /// Each one known by id ([`inferred_types`]), to decode values with
    /// otherwise.
    by_id: HashMap<String, Option<DataType>>,
}

impl<S> Default for ParamTypes<S> {
    fn default() -> Self {
        Self {
            by_statement: DashMap::new(),
        }
    }
}

impl<S> ParamTypes<S> {
    /// The types of `statement`, whose plan is `plan` in `session`.
    fn of(
        &self,
        statement: &Arc<S>,
        plan: &LogicalPlan,
        session: &SessionContext,
    ) -> PgWireResult<Arc<Params>> {
        let key = Arc::as_ptr(statement) as usize;
        if let Some(kept) = self.by_statement.get(&key)
            && kept.0.strong_count() > 0
        {
            return Ok(kept.1.clone());
        }
        let types = Arc::new(parameter_types(plan, session)?);
        if self.by_statement.len() >= MAX_KEPT_TYPES {
            self.by_statement
                .retain(|_, kept| kept.0.strong_count() > 0);
        }
        if self.by_statement.len() < MAX_KEPT_TYPES {
            self.by_statement
                .insert(key, (Arc::downgrade(statement), types.clone()));
        }
        Ok(types)
    }
}

/// The plan's parameter types by id. Where the plan does not infer one:
/// the type a parameter is cast to (`$1::INT`), as Describe reports it, so
/// a value the client sends in binary for that type decodes as that type;
/// else the one type `session`'s analyzer casts it to where it is used (an
/// argument of a function, `make_date(2026, 10, $2)`), as PostgreSQL
/// infers a parameter's type from its context.
fn inferred_types(
    plan: &LogicalPlan,
    session: &SessionContext,
) -> PgWireResult<HashMap<String, Option<DataType>>> {
    let mut types = plan.get_parameter_types().map_err(api)?;
    if types.values().all(Option::is_some) {
        return Ok(types);
    }
    for (id, ty) in placeholder_casts(plan).map_err(api)? {
        if let Some(slot @ None) = types.get_mut(&id) {
            *slot = ty;
        }
    }
    if types.values().all(Option::is_some) {
        return Ok(types);
    }
    let state = session.state();
    // A plan the analyzer refuses fails when it runs, with its own error.
    let Ok(analyzed) =
        state
            .analyzer()
            .execute_and_check(plan.clone(), state.config_options(), |_, _| {})
    else {
        return Ok(types);
    };
    for (id, ty) in placeholder_casts(&analyzed).map_err(api)? {
        if let Some(slot @ None) = types.get_mut(&id) {
            *slot = ty;
        }
    }
    Ok(types)
}

/// The parameter types Describe reports for `plan`: `reported`
/// (datafusion-postgres's), each one it leaves unknown typed as
/// [`inferred_types`] types it, as Bind then decodes it.
pub(super) fn described_parameters(
    reported: Vec<Type>,
    plan: &LogicalPlan,
    session: &SessionContext,
) -> PgWireResult<Vec<Type>> {
    if !reported.contains(&Type::UNKNOWN) {
        return Ok(reported);
    }
    let mut inferred: Vec<(String, Option<DataType>)> =
        inferred_types(plan, session)?.into_iter().collect();
    inferred.sort_by_key(|(id, _)| {
        id.trim_start_matches('$')
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    if inferred.len() != reported.len() {
        return Ok(reported);
    }
    Ok(reported
        .into_iter()
        .zip(inferred)
        .map(|(t, (_, inferred))| match (&t, inferred) {
            (&Type::UNKNOWN, Some(ty)) => into_pg_type(&ty).unwrap_or(t),
            _ => t,
        })
        .collect())
}

/// The type each untyped placeholder of `plan` is cast to; `None` for one
/// cast to two types.
fn placeholder_casts(plan: &LogicalPlan) -> Result<HashMap<String, Option<DataType>>> {
    let mut casts: HashMap<String, Option<DataType>> = HashMap::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Cast(cast) = e
                    && let Expr::Placeholder(p) = cast.expr.as_ref()
                    && p.field.is_none()
                {
                    let ty = cast.field.data_type();
                    casts
                        .entry(p.id.clone())
                        .and_modify(|kept| {
                            if kept.as_ref() != Some(ty) {
                                *kept = None;
                            }
                        })
                        .or_insert_with(|| Some(ty.clone()));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(casts)
}

/// The plan's parameter types ([`Params`]).
fn parameter_types(plan: &LogicalPlan, session: &SessionContext) -> PgWireResult<Params> {
    let by_id = inferred_types(plan, session)?;
    Ok(Params {
        all: in_order(plan, &by_id)?,
        by_id,
    })
}

/// The types of `by_id` in order (`$1`, `$2`, ...), if every one is known
/// and none of `plan`'s placeholders carries field metadata.
fn in_order(
    plan: &LogicalPlan,
    by_id: &HashMap<String, Option<DataType>>,
) -> PgWireResult<Option<Vec<DataType>>> {
    let mut plain = true;
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Placeholder(p) = e
                    && p.field.as_ref().is_some_and(|f| !f.metadata().is_empty())
                {
                    plain = false;
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })
    .map_err(api)?;
    if !plain {
        return Ok(None);
    }
    let mut types = Vec::new();
    for (id, ty) in by_id {
        let (Some(n), Some(ty)) = (
            id.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()),
            ty.clone(),
        ) else {
            return Ok(None);
        };
        types.push((n, ty));
    }
    types.sort_by_key(|(n, _)| *n);
    // `$1..$n` without gaps, as the Bind message numbers them.
    if types.iter().enumerate().any(|(i, (n, _))| *n != i + 1) {
        return Ok(None);
    }
    Ok(Some(types.into_iter().map(|(_, ty)| ty).collect()))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    use datafusion::prelude::SessionContext;

    use std::sync::Arc;

    use datafusion_postgres::pgwire::api::Type;

    use super::{ParamTypes, parameter_types};

    async fn types(sql: &str) -> Option<Vec<DataType>> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT, ts TIMESTAMP, s VARCHAR)")
            .await
            .unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        parameter_types(&plan, &ctx).unwrap().all
    }

    #[tokio::test]
    async fn parameter_types_in_order_or_none() {
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
        assert_eq!(
            types("SELECT count(*) FROM t WHERE ts < $2 AND a = $1 AND s = $3").await,
            Some(vec![DataType::Int64, ts.clone(), DataType::Utf8View])
        );
        assert_eq!(types("SELECT 1").await, Some(vec![]));
        // Not inferred from the plan: left to DfSessionService.
        assert_eq!(types("SELECT $1").await, None);
        // A gap: $1 is never used.
        assert_eq!(types("SELECT a FROM t WHERE ts < $2").await, None);
    }

    #[tokio::test]
    async fn a_parameter_only_a_function_takes_has_the_type_of_its_argument() {
        // Not typed by the plan: DataFusion infers comparisons only.
        let sql = "SELECT count(*) FROM t WHERE ts >= make_date(2026, 10, $2) AND a = $1";
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT, ts TIMESTAMP)")
            .await
            .unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        assert_eq!(plan.get_parameter_types().unwrap()["$2"], None);
        assert_eq!(
            types(sql).await,
            Some(vec![DataType::Int64, DataType::Int32])
        );
        assert_eq!(
            types("SELECT concat($1, 'x')").await,
            Some(vec![DataType::Utf8])
        );
        // A factor of an interval (`$1 * INTERVAL '1 second'`, which the
        // front end makes this call): a double, as PostgreSQL resolves
        // `unknown * interval`.
        let kiln = SessionContext::new();
        kiln_query::functions::register(&kiln);
        let sql = "SELECT kiln_interval_mul(INTERVAL '1 second', $1)";
        let plan = kiln.state().create_logical_plan(sql).await.unwrap();
        let typed = parameter_types(&plan, &kiln).unwrap().all;
        assert_eq!(typed, Some(vec![DataType::Float64]));
        // Used as two types: none, as PostgreSQL refuses it.
        assert_eq!(
            types("SELECT make_date(2026, 10, $1), concat($1, 'x')").await,
            None
        );
        // Describe reports the type Bind decodes with; a type it reported
        // already stays.
        let sql = "SELECT count(*) FROM t WHERE ts >= make_date(2026, 10, $1) AND a = $2";
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let described = |reported| super::described_parameters(reported, &plan, &ctx).unwrap();
        assert_eq!(
            described(vec![Type::UNKNOWN, Type::INT8]),
            vec![Type::INT4, Type::INT8]
        );
        assert_eq!(
            described(vec![Type::TEXT, Type::INT8]),
            vec![Type::TEXT, Type::INT8]
        );
        let plan = ctx.state().create_logical_plan("SELECT $1").await.unwrap();
        let reported = vec![Type::UNKNOWN];
        assert_eq!(
            super::described_parameters(reported.clone(), &plan, &ctx).unwrap(),
            reported
        );
    }

    #[tokio::test]
    async fn types_are_kept_per_statement_while_it_lives() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT, ts TIMESTAMP)")
            .await
            .unwrap();
        // A statement object per Parse; its contents do not matter here.
        let prepare = async |sql: &str| {
            let plan = ctx.state().create_logical_plan(sql).await.unwrap();
            (Arc::new(sql.to_string()), plan)
        };
        let types = ParamTypes::default();
        let (a, a_plan) = prepare("SELECT a FROM t WHERE a = $1").await;
        let (_, ts_plan) = prepare("SELECT a FROM t WHERE ts < $1").await;
        assert_eq!(
            types.of(&a, &a_plan, &ctx).unwrap().all,
            Some(vec![DataType::Int64])
        );
        // Kept for that statement: its plan is not walked again.
        assert_eq!(
            types.of(&a, &ts_plan, &ctx).unwrap().all,
            Some(vec![DataType::Int64])
        );
        // Once it is closed, its entry is dead.
        drop(a);
        let (b, b_plan) = prepare("SELECT a FROM t WHERE ts < $1").await;
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
        assert_eq!(types.of(&b, &b_plan, &ctx).unwrap().all, Some(vec![ts]));
        // A statement some of whose types are unknown keeps what is known,
        // so its executions do not analyze its plan again.
        let (c, c_plan) = prepare("SELECT $1, a FROM t WHERE a = $2").await;
        let first = types.of(&c, &c_plan, &ctx).unwrap();
        assert_eq!(first.all, None);
        assert_eq!(first.by_id["$2"], Some(DataType::Int64));
        assert!(Arc::ptr_eq(&first, &types.of(&c, &c_plan, &ctx).unwrap()));
    }
}
