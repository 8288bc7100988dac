//! [`RoundedIntCasts`]: a float cast to an integer is rounded, as in
//! PostgreSQL, not truncated: `CAST(1.5 AS INT)` is 2, and `INSERT`ing 1.5
//! into an `INT` column stores 2.
//!
//! Why: Arrow's cast truncates toward zero, so `CAST(2.7 AS INT)` was 2
//! and an `INSERT` changed the value it was given without a word.
//! Kiln rounds half away from zero, as PostgreSQL rounds a number literal
//! (a `numeric`: `CAST(2.5 AS INT)` and `INSERT ... VALUES (2.5)` give 3
//! in both); PostgreSQL rounds a `double precision` value that is exactly
//! a half to even instead (2.5 to 2), which Kiln, whose number literals
//! are doubles too, does not tell apart. A value out of the integer's
//! range still fails the cast.
//!
//! An analyzer rule after type coercion, so it sees the casts coercion and
//! `INSERT` add; a rounded expression keeps its column name.

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result};
use datafusion::functions::math::expr_fn::round;
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// Rounds the operand of every cast from a float to an integer type.
#[derive(Debug, Default)]
pub struct RoundedIntCasts;

impl AnalyzerRule for RoundedIntCasts {
    fn name(&self) -> &str {
        "kiln_rounded_int_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            // Most nodes cast nothing to an integer: they are passed over
            // before any schema is merged or expression rebuilt.
            if !casts_to_an_integer(&node) {
                return Ok(Transformed::no(node));
            }
            let schema = match node.inputs().as_slice() {
                [] => DFSchema::empty(),
                inputs => merge_schema(inputs),
            };
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let t = e.transform_up(|e| rounded(e, &schema))?;
                Ok(t.update_data(|e| saved.restore(e)))
            })
        })
        .map(|t| t.data)
    }
}

/// Whether an expression of `node` casts something to an integer type.
fn casts_to_an_integer(node: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = node.apply_expressions(|e| {
        e.apply(|e| {
            found = matches!(e, Expr::Cast(Cast { field, .. }) | Expr::TryCast(TryCast { field, .. })
                if field.data_type().is_integer());
            Ok(match found {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        })
    });
    found
}

/// `e` with its operand rounded if it casts a float to an integer.
fn rounded(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let float_to_int = |operand: &Expr, to: &DataType| {
        to.is_integer() && operand.get_type(schema).is_ok_and(|t| t.is_floating())
    };
    Ok(match e {
        Expr::Cast(Cast { expr, field }) if float_to_int(&expr, field.data_type()) => {
            let expr = Box::new(round(vec![*expr]));
            Transformed::yes(Expr::Cast(Cast { expr, field }))
        }
        Expr::TryCast(TryCast { expr, field }) if float_to_int(&expr, field.data_type()) => {
            let expr = Box::new(round(vec![*expr]));
            Transformed::yes(Expr::TryCast(TryCast { expr, field }))
        }
        e => Transformed::no(e),
    })
}

#[cfg(test)]
mod tests;
