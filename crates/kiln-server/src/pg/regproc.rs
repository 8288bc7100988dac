//! `regproc` columns compared with OIDs: `pg_type.typinput =
//! 'pg_catalog.array_in'::regproc` (pgjdbc's type lookup, which
//! `getTypeInfo` runs) compares a function with a function, as in
//! PostgreSQL.
//!
//! Why: datafusion-postgres's catalog keeps `regproc` columns as the
//! function's name (`boolin`: what PostgreSQL displays), while its
//! rewrite of `'name'::regproc` gives the function's OID, so DataFusion
//! cast every name to a number to compare them and failed ("Cannot cast
//! string 'boolin' to value of Int32 type"). [`super::pg_catalog`] marks
//! those columns (field metadata `pg.oid_alias = regproc`); this analyzer
//! rule, after type coercion, finds such a column cast to an integer and
//! compares it as a name instead: the other side goes through
//! `regproc_out(oid)`, the name of the function with that OID in the
//! catalog's `pg_proc` (NULL for none, as a failed lookup compares in
//! PostgreSQL).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{AsArray, StringArray};
use arrow::datatypes::{DataType, Int32Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::PgCatalogStaticTables;

/// The field metadata key and value marking a `regproc` column kept as
/// names (the catalog's own key for OID aliases).
pub(super) const KEY: &str = "pg.oid_alias";
pub(super) const REGPROC: &str = "regproc";

/// Compares `regproc` name columns with OIDs by name (module docs).
#[derive(Debug)]
pub(super) struct RegprocComparisons {
    out: Arc<ScalarUDF>,
}

impl RegprocComparisons {
    pub(super) fn new() -> Result<Self> {
        Ok(Self {
            out: Arc::new(ScalarUDF::from(RegprocOut::new()?)),
        })
    }

    /// `e` if it is a `regproc` name column cast to an integer: the column.
    fn name_column(e: &Expr, schema: &DFSchema) -> Option<Expr> {
        let Expr::Cast(Cast { expr, field }) = e else {
            return None;
        };
        if !field.data_type().is_integer() || !matches!(**expr, Expr::Column(_)) {
            return None;
        }
        let (_, field) = expr.to_field(schema).ok()?;
        let regproc = field.metadata().get(KEY).is_some_and(|k| k == REGPROC);
        (regproc && field.data_type() == &DataType::Utf8).then(|| (**expr).clone())
    }

    fn rewrite(&self, e: Expr, schema: &DFSchema) -> Transformed<Expr> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
            return Transformed::no(e);
        };
        if !matches!(op, Operator::Eq | Operator::NotEq) {
            return Transformed::no(e);
        }
        let name = |oid: &Expr| self.out.call(vec![oid.clone()]);
        let compared = match (
            Self::name_column(left, schema),
            Self::name_column(right, schema),
        ) {
            (Some(l), None) => (l, name(right)),
            (None, Some(r)) => (name(left), r),
            _ => return Transformed::no(e),
        };
        Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(compared.0),
            *op,
            Box::new(compared.1),
        )))
    }
}

impl AnalyzerRule for RegprocComparisons {
    fn name(&self) -> &str {
        "kiln_regproc_comparisons"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let mut schema = DFSchema::empty();
            for input in node.inputs() {
                schema.merge(input.schema());
            }
            // Output columns keep their names.
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let t = e.transform_up(|e| Ok(self.rewrite(e, &schema)))?;
                Ok(match t.transformed {
                    true => Transformed::yes(saved.restore(t.data)),
                    false => t,
                })
            })
        })
        .map(|t| t.data)
    }
}

/// `regproc_out(oid)`: the name of the catalog's function `oid`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RegprocOut {
    signature: Signature,
    names: Vec<(i32, String)>,
}

impl RegprocOut {
    fn new() -> Result<Self> {
        let tables = PgCatalogStaticTables::try_new()?;
        let mut names = Vec::new();
        for batch in tables.pg_proc.data() {
            let (Some(oid), Some(name)) =
                (batch.column_by_name("oid"), batch.column_by_name("proname"))
            else {
                continue;
            };
            let oids = arrow::compute::cast(oid, &DataType::Int32)?;
            let proname = arrow::compute::cast(name, &DataType::Utf8)?;
            for (o, n) in oids
                .as_primitive::<Int32Type>()
                .iter()
                .zip(proname.as_string::<i32>().iter())
            {
                if let (Some(o), Some(n)) = (o, n) {
                    names.push((o, n.to_string()));
                }
            }
        }
        Ok(Self {
            signature: Signature::any(1, Volatility::Immutable),
            names,
        })
    }
}

impl ScalarUDFImpl for RegprocOut {
    fn name(&self) -> &str {
        "regproc_out"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let oids = args.args[0].to_array(args.number_rows)?;
        let oids = arrow::compute::cast(&oids, &DataType::Int32)?;
        let by_oid: HashMap<i32, &str> = self.names.iter().map(|(o, n)| (*o, n.as_str())).collect();
        let names: StringArray = oids
            .as_primitive::<Int32Type>()
            .iter()
            .map(|o| o.and_then(|o| by_oid.get(&o).copied()))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(names)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_named_from_the_catalog() {
        let out = RegprocOut::new().unwrap();
        let oid = |name: &str| out.names.iter().find(|(_, n)| n == name).map(|(o, _)| *o);
        assert!(oid("array_in").is_some() && oid("boolin").is_some());
        assert_eq!(oid("no_such_function"), None);
    }
}
