//! [`FloatDivision`]: dividing a floating-point value by zero fails with
//! "division by zero" (SQLSTATE 22012), as in PostgreSQL, instead of
//! answering `Infinity` or `NaN`, which a dashboard then plots or sums
//! without a word.
//!
//! An analyzer rule after type coercion: a division whose operands are
//! `REAL` or `DOUBLE` becomes `float_divide(x, y)`, which checks the
//! divisors (a NULL operand still gives NULL) and then divides with
//! Arrow's kernel. Column names are kept. Integer and decimal division
//! already fail on zero.

use std::sync::Arc;

use arrow::array::Array;
use arrow::compute::kernels::cmp::eq;
use arrow::compute::kernels::numeric::div;
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// Rewrites floating-point divisions to [`FloatDivide`].
#[derive(Debug, Default)]
pub struct FloatDivision;

impl AnalyzerRule for FloatDivision {
    fn name(&self) -> &str {
        "kiln_float_division"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let mut udf = None;
        plan.transform_up_with_subqueries(|plan| {
            // Most nodes divide nothing: they cost one look at their
            // expressions, no schema and no function.
            let mut divides = false;
            plan.apply_expressions(|e| {
                divides =
                    e.exists(|e| Ok(matches!(e, Expr::BinaryExpr(b) if b.op == Operator::Divide)))?;
                Ok(match divides {
                    true => TreeNodeRecursion::Stop,
                    false => TreeNodeRecursion::Continue,
                })
            })?;
            if !divides {
                return Ok(Transformed::no(plan));
            }
            let udf = udf
                .get_or_insert_with(|| Arc::new(ScalarUDF::new_from_impl(FloatDivide::new())))
                .clone();
            // The expressions of a node read its inputs' columns.
            let mut schema = DFSchema::empty();
            for input in plan.inputs() {
                schema.merge(input.schema());
            }
            if plan.inputs().is_empty() {
                schema.merge(plan.schema());
            }
            let names = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let saved = names.save(&e);
                let t = e.transform_up(|e| Ok(rewrite(e, &schema, &udf)))?;
                Ok(match t.transformed {
                    true => Transformed::yes(saved.restore(t.data)),
                    false => t,
                })
            })
        })
        .map(|t| t.data)
    }
}

fn rewrite(e: Expr, schema: &DFSchema, udf: &Arc<ScalarUDF>) -> Transformed<Expr> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Divide,
        right,
    }) = &e
    else {
        return Transformed::no(e);
    };
    let float = |x: &Expr| {
        matches!(
            x.get_type(schema),
            Ok(DataType::Float32 | DataType::Float64)
        )
    };
    if !(float(left) && float(right)) {
        return Transformed::no(e);
    }
    let Expr::BinaryExpr(b) = e else {
        unreachable!("matched above")
    };
    Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
        udf.clone(),
        vec![*b.left, *b.right],
    )))
}

/// `x / y` on floats, failing when a divisor is zero (and its row's
/// dividend is not NULL).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FloatDivide {
    signature: Signature,
}

impl FloatDivide {
    fn new() -> Self {
        Self {
            signature: Signature::uniform(
                2,
                vec![DataType::Float32, DataType::Float64],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for FloatDivide {
    fn name(&self) -> &str {
        "float_divide"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (x, y) = (&arrays[0], &arrays[1]);
        let zero = match y.data_type() {
            DataType::Float32 => ScalarValue::Float32(Some(0.0)),
            _ => ScalarValue::Float64(Some(0.0)),
        };
        let zeros = eq(y, &zero.to_scalar()?)?;
        // A zero divisor of a row whose dividend is NULL gives NULL.
        let by_zero = zeros
            .iter()
            .zip(0..x.len())
            .any(|(z, i)| z == Some(true) && x.is_valid(i));
        if by_zero {
            return Err(DataFusionError::ArrowError(
                Box::new(ArrowError::DivideByZero),
                None,
            ));
        }
        let out = div(x, y)?;
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests;
