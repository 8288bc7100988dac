//! `information_schema.columns.data_type` in PostgreSQL's type names.
//!
//! Why: DataFusion fills it with Arrow's names (`Timestamp(ns)`,
//! `Utf8View`, `Float64`), so BI tools that pick columns by type found
//! none: Grafana's query builder looks for `timestamp without time zone`
//! to offer a time column, Superset and Metabase sort columns into
//! temporal, numeric and text by these names. An analyzer rule puts a
//! projection over every scan of that table that maps the column through
//! [`pg_type_name`]; queries keep their columns and qualifiers.
//! `udt_name`, which DataFusion's table lacks, is added where a query asks
//! for it (`shape::relations`) through `functions::pg_types`.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, Projection, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::functions::pg_types::pg_type_name;

/// The analyzer rule (module docs).
#[derive(Debug, Default)]
pub struct PgTypeNames;

impl AnalyzerRule for PgTypeNames {
    fn name(&self) -> &str {
        "kiln_pg_type_names"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // Built only for a plan that scans the table (most never do).
        let mut udf: Option<Arc<ScalarUDF>> = None;
        plan.transform_up_with_subqueries(|node| {
            let LogicalPlan::TableScan(scan) = &node else {
                return Ok(Transformed::no(node));
            };
            if scan.table_name.schema() != Some("information_schema")
                || scan.table_name.table() != "columns"
                || !node
                    .schema()
                    .fields()
                    .iter()
                    .any(|f| f.name() == "data_type")
            {
                return Ok(Transformed::no(node));
            }
            let exprs = node
                .schema()
                .iter()
                .map(|(qualifier, field)| {
                    let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
                    match field.name().as_str() {
                        "data_type" => udf
                            .get_or_insert_with(|| {
                                Arc::new(ScalarUDF::new_from_impl(PgTypeName::default()))
                            })
                            .call(vec![column])
                            .alias_qualified(qualifier.cloned(), "data_type"),
                        _ => column,
                    }
                })
                .collect();
            let projection = Projection::try_new(exprs, Arc::new(node))?;
            Ok(Transformed::yes(LogicalPlan::Projection(projection)))
        })
        .map(|t| t.data)
    }
}

/// [`pg_type_name`] as a function of a text column.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeName {
    signature: Signature,
}

impl Default for PgTypeName {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for PgTypeName {
    fn name(&self) -> &str {
        "kiln_pg_type_name"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        crate::functions::map_text(&args.args[0], pg_type_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    #[tokio::test]
    async fn information_schema_columns_answers_postgresql_names() {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        ctx.add_analyzer_rule(Arc::new(PgTypeNames));
        ctx.sql("CREATE TABLE t (ts TIMESTAMP, host VARCHAR, v DOUBLE, n BIGINT)")
            .await
            .unwrap();
        let batches = ctx
            .sql(
                "SELECT c.column_name, c.data_type FROM information_schema.columns c \
                 WHERE c.table_name = 't' AND c.data_type LIKE 'timestamp%' ORDER BY 1",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(
            text.contains("| ts          | timestamp without time zone |"),
            "{text}"
        );
        assert_eq!(
            batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            1,
            "{text}"
        );
    }
}
