//! [`PgCatalog`]: datafusion-postgres's `pg_catalog` schema with the
//! columns drivers index or read given PostgreSQL's types, `pg_settings`
//! listing Kiln's settings, and `pg_stat_activity`.
//!
//! Why: the catalog keeps `int2vector` and `int2[]` columns as their text
//! (`pg_index.indkey` is `1 2`, `pg_constraint.conkey` is `[2, 20, 3]`), so
//! `indoption[n]` or `conkey[pos.n]` failed to plan ("array_element does
//! not support type Utf8"; pgjdbc's `getIndexInfo`, `getImportedKeys`);
//! `pg_class` has no `relacl` (`getTablePrivileges`) or `reloptions` (SQLAlchemy's `get_indexes`); and `pg_settings`
//! has one row, so pgjdbc could not read `max_index_keys`
//! (`getImportedKeys`, `getExportedKeys`). Each table named here is
//! answered as a view over the catalog's own table, built when a query
//! names it (so `pg_class` still lists the tables of that moment): the
//! text columns parsed into `smallint[]`, `regproc` columns (kept as
//! names) marked for [`super::regproc`], missing columns added as NULL.
//! `pg_settings` lists [`super::settings`]' settings with their defaults;
//! `pg_stat_activity` ([`super::activity`]), which the catalog lacks, is
//! added. Reading `pg_class` also learns its tables' oids
//! ([`super::sizes::Oids`]).
//! Written so it could move into datafusion-postgres's catalog as is.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int16Builder, ListBuilder, StringArray, new_null_array,
};
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::common::metadata::FieldMetadata;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::{ViewTable, provider_as_source};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlanBuilder, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility, col, lit,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::TryStreamExt;

/// Columns kept as text that PostgreSQL types `int2vector` or `int2[]`.
const INT2_ARRAYS: &[(&str, &[&str])] = &[
    (
        "pg_index",
        &["indkey", "indoption", "indclass", "indcollation"],
    ),
    ("pg_constraint", &["conkey", "confkey"]),
];

/// `regproc` columns kept as function names, marked for
/// [`super::regproc`] (field metadata).
const REGPROCS: &[(&str, &[&str])] = &[(
    "pg_type",
    &[
        "typinput",
        "typoutput",
        "typreceive",
        "typsend",
        "typmodin",
        "typmodout",
        "typanalyze",
    ],
)];

/// Text columns PostgreSQL has and the catalog lacks, answered NULL.
const MISSING: &[(&str, &[&str])] = &[("pg_class", &["relacl", "reloptions"])];

/// A setting: name, value, description.
pub(super) type Setting = (String, String, String);

/// The `pg_catalog` schema, some tables retyped (module docs).
#[derive(Debug)]
pub(super) struct PgCatalog {
    inner: Arc<dyn SchemaProvider>,
    /// Each setting, for `pg_settings`.
    settings: Vec<Setting>,
    /// `pg_stat_activity`, which the catalog lacks.
    activity: Arc<dyn TableProvider>,
    /// Tables' oids, learnt whenever a query names `pg_class`.
    oids: Arc<super::sizes::Oids>,
}

/// The table [`PgCatalog`] adds to the catalog's.
const ACTIVITY: &str = "pg_stat_activity";

impl PgCatalog {
    pub(super) fn new(
        inner: Arc<dyn SchemaProvider>,
        settings: Vec<Setting>,
        activity: Arc<dyn TableProvider>,
        oids: Arc<super::sizes::Oids>,
    ) -> Self {
        Self {
            inner,
            settings,
            activity,
            oids,
        }
    }

    /// `class` (the catalog's `pg_class`), its rows read through
    /// [`LearnOids`].
    fn learning(&self, class: Arc<dyn TableProvider>) -> Result<Arc<dyn TableProvider>> {
        let learn = LearnOids {
            schema: class.schema(),
            class,
            namespace: self.inner.clone(),
            oids: self.oids.clone(),
        };
        Ok(Arc::new(StreamingTable::try_new(
            learn.schema.clone(),
            vec![Arc::new(learn)],
        )?))
    }

    /// `pg_settings` with the catalog's columns, one row per setting.
    fn settings_table(&self, like: &dyn TableProvider) -> Result<Arc<dyn TableProvider>> {
        let schema = like.schema();
        let n = self.settings.len();
        let text = |f: &dyn Fn(&Setting) -> Option<String>| -> ArrayRef {
            Arc::new(self.settings.iter().map(f).collect::<StringArray>())
        };
        let columns = schema
            .fields()
            .iter()
            .map(|field| match field.name().as_str() {
                "name" => text(&|s| Some(s.0.clone())),
                "setting" | "boot_val" | "reset_val" => text(&|s| Some(s.1.clone())),
                "short_desc" => text(&|s| Some(s.2.clone())),
                "source" => text(&|_| Some("default".into())),
                "context" => text(&|_| Some("user".into())),
                "vartype" => text(&|_| Some("string".into())),
                "pending_restart" => Arc::new(BooleanArray::from(vec![false; n])) as ArrayRef,
                _ => new_null_array(field.data_type(), n),
            })
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

/// `pg_class`'s rows, the oids they give tables learnt on the way
/// ([`super::sizes::Oids`]), for the relation size functions. Read when
/// the query runs, not when it is planned: reading `pg_class` names every
/// table of the catalog, `pg_class` too, while it holds the catalog's oid
/// lock, so a read started from within one would wait for it forever.
#[derive(Debug)]
struct LearnOids {
    schema: arrow::datatypes::SchemaRef,
    class: Arc<dyn TableProvider>,
    /// The catalog's own schema, for `pg_namespace`.
    namespace: Arc<dyn SchemaProvider>,
    oids: Arc<super::sizes::Oids>,
}

impl PartitionStream for LearnOids {
    fn schema(&self) -> &arrow::datatypes::SchemaRef {
        &self.schema
    }

    fn execute(&self, _: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (class, namespace, oids) = (
            self.class.clone(),
            self.namespace.clone(),
            self.oids.clone(),
        );
        let rows = async move {
            let state = datafusion::prelude::SessionContext::new().state();
            let read = |table: Arc<dyn TableProvider>| {
                let state = &state;
                async move {
                    let plan = table.scan(state, None, &[], None).await?;
                    datafusion::physical_plan::collect(plan, state.task_ctx()).await
                }
            };
            let class = read(class).await?;
            if let Some(namespace) = namespace.table("pg_namespace").await? {
                oids.learn(&class, &read(namespace).await?)?;
            }
            Ok::<_, DataFusionError>(futures::stream::iter(class.into_iter().map(Ok)))
        };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(rows).try_flatten(),
        ))
    }
}

/// `table` as a view with `int2` columns parsed, `regproc` columns marked
/// and `missing` added.
fn retyped(
    name: &str,
    table: Arc<dyn TableProvider>,
    [int2, regproc, missing]: [&[&str]; 3],
) -> Result<Arc<dyn TableProvider>> {
    let regproc_mark = FieldMetadata::from(BTreeMap::from([(
        super::regproc::KEY.to_string(),
        super::regproc::REGPROC.to_string(),
    )]));
    let parse = Arc::new(ScalarUDF::from(Int2Array::new()));
    let schema = table.schema();
    let mut exprs: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| {
            let c = col(format!("\"{}\"", f.name()));
            let utf8 = f.data_type() == &DataType::Utf8;
            let name = f.name().as_str();
            if utf8 && int2.contains(&name) {
                parse.call(vec![c]).alias(name)
            } else if utf8 && regproc.contains(&name) {
                c.alias_with_metadata(name, Some(regproc_mark.clone()))
            } else {
                c
            }
        })
        .collect();
    for m in missing {
        if schema.field_with_name(m).is_err() {
            exprs.push(lit(ScalarValue::Utf8(None)).alias(*m));
        }
    }
    let plan = LogicalPlanBuilder::scan(name, provider_as_source(table), None)?
        .project(exprs)?
        .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

#[async_trait]
impl SchemaProvider for PgCatalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.push(ACTIVITY.to_string());
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name.eq_ignore_ascii_case(ACTIVITY) {
            return Ok(Some(self.activity.clone()));
        }
        let Some(table) = self.inner.table(name).await? else {
            return Ok(None);
        };
        let lower = name.to_ascii_lowercase();
        let table = match lower.as_str() {
            "pg_class" => self.learning(table)?,
            _ => table,
        };
        if lower == "pg_settings" {
            return self.settings_table(table.as_ref()).map(Some);
        }
        let find = |list: &[(&str, &'static [&'static str])]| {
            list.iter()
                .find(|(t, _)| *t == lower)
                .map_or(&[][..], |(_, c)| *c)
        };
        let columns = [find(INT2_ARRAYS), find(REGPROCS), find(MISSING)];
        if columns.iter().all(|c| c.is_empty()) {
            return Ok(Some(table));
        }
        retyped(&lower, table, columns).map(Some)
    }

    fn table_exist(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(ACTIVITY) || self.inner.table_exist(name)
    }
}

/// An `int2vector` (`1 2`) or `int2[]` (`[1, 2]`, `{1,2}`) as text, parsed.
pub(super) fn int2s(text: &str) -> Result<Vec<i16>> {
    text.trim_matches(|c| matches!(c, '[' | ']' | '{' | '}'))
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i16>()
                .map_err(|_| DataFusionError::Execution(format!("not an int2 array: {text:?}")))
        })
        .collect()
}

/// Text of an `int2` array to `smallint[]` (used by the views only).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Int2Array {
    signature: Signature,
}

impl Int2Array {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Int2Array {
    fn name(&self) -> &str {
        "int2_array_in"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(
            DataType::Int16,
            true,
        ))))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let input = args.args[0].to_array(args.number_rows)?;
        let mut out = ListBuilder::new(Int16Builder::new());
        for text in input.as_string::<i32>().iter() {
            match text {
                None => out.append_null(),
                Some(t) => {
                    out.values().append_slice(&int2s(t)?);
                    out.append(true);
                }
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// The catalog's schema for `pg_catalog`, wrapped.
pub(super) fn wrap(
    ctx: &datafusion::prelude::SessionContext,
    catalog: &str,
    settings: Vec<Setting>,
    activity: Arc<dyn TableProvider>,
    oids: Arc<super::sizes::Oids>,
) -> Result<()> {
    let catalog = ctx
        .catalog(catalog)
        .ok_or_else(|| DataFusionError::Plan(format!("no catalog {catalog}")))?;
    let inner = catalog
        .schema("pg_catalog")
        .ok_or_else(|| DataFusionError::Plan("no pg_catalog schema".into()))?;
    catalog.register_schema(
        "pg_catalog",
        Arc::new(PgCatalog::new(inner, settings, activity, oids)),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    #[test]
    fn int2_arrays_are_read_from_their_text() {
        assert_eq!(int2s("1 2").unwrap(), vec![1, 2]);
        assert_eq!(int2s("[2, 20, 3]").unwrap(), vec![2, 20, 3]);
        assert_eq!(int2s("{4,5}").unwrap(), vec![4, 5]);
        assert!(int2s("").unwrap().is_empty());
        assert!(int2s("x").is_err());
    }

    #[test]
    fn int2_text_becomes_a_list() {
        let udf = Int2Array::new();
        let input: ArrayRef = Arc::new(StringArray::from(vec![Some("1 2"), None, Some("[]")]));
        let args = ScalarFunctionArgs {
            args: vec![ColumnarValue::Array(input)],
            arg_fields: vec![Arc::new(Field::new("t", DataType::Utf8, true))],
            number_rows: 3,
            return_field: Arc::new(Field::new("r", udf.return_type(&[]).unwrap(), true)),
            config_options: Default::default(),
        };
        let ColumnarValue::Array(out) = udf.invoke_with_args(args).unwrap() else {
            panic!("an array")
        };
        let list = out.as_list::<i32>();
        assert_eq!(
            list.value(0)
                .as_primitive::<arrow::datatypes::Int16Type>()
                .values(),
            &[1, 2]
        );
        assert!(list.is_null(1));
        assert_eq!(list.value(2).len(), 0);
    }
}
