//! The window function `nth_value(x, n)` refusing an `n` below 1, as
//! PostgreSQL does (22016, "argument of nth_value must be greater than
//! zero").
//!
//! Why: DataFusion's answers NULL for `n = 0` and counts from the end of
//! the frame for a negative `n`, so a query written for PostgreSQL that
//! passed a bad row number got NULLs or other rows without a word. The
//! check runs when the window is evaluated, before any row, on the
//! literal `n` DataFusion requires; the function is otherwise
//! DataFusion's, reversed frames included.

use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{
    ExpressionArgs, PartitionEvaluatorArgs, WindowFunctionSimplification, WindowUDFFieldArgs,
};
use datafusion::logical_expr::{
    Documentation, LimitEffect, PartitionEvaluator, ReversedUDWF, Signature, WindowUDF,
    WindowUDFImpl,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;

use crate::error::{Error, ErrorKind};

/// The guarded `nth_value`, from the session's own (`registered`).
pub fn guard(registered: impl Fn(&str) -> Option<Arc<WindowUDF>>) -> Option<WindowUDF> {
    Some(guarded(registered("nth_value")?.as_ref()))
}

fn guarded(inner: &WindowUDF) -> WindowUDF {
    WindowUDF::new_from_impl(NthValue {
        inner: inner.clone(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct NthValue {
    inner: WindowUDF,
}

/// Refuses a literal row number below 1.
fn check(args: &[Arc<dyn PhysicalExpr>]) -> Result<()> {
    let Some(n) = args
        .get(1)
        .and_then(|e| e.downcast_ref::<Literal>())
        .and_then(|l| l.value().cast_to(&DataType::Int64).ok())
    else {
        return Ok(());
    };
    match n {
        ScalarValue::Int64(Some(n)) if n < 1 => {
            Err(DataFusionError::External(Box::new(Error::Argument(
                ErrorKind::InvalidNthValueArgument,
                format!("argument of nth_value must be greater than zero (it is {n})"),
            ))))
        }
        _ => Ok(()),
    }
}

impl WindowUDFImpl for NthValue {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn expressions(&self, expr_args: ExpressionArgs) -> Vec<Arc<dyn PhysicalExpr>> {
        self.inner.expressions(expr_args)
    }

    fn partition_evaluator(
        &self,
        args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        check(args.input_exprs())?;
        self.inner.inner().partition_evaluator(args)
    }

    fn simplify(&self) -> Option<WindowFunctionSimplification> {
        self.inner.simplify()
    }

    fn field(&self, field_args: WindowUDFFieldArgs) -> Result<FieldRef> {
        self.inner.field(field_args)
    }

    fn sort_options(&self) -> Option<SortOptions> {
        self.inner.sort_options()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn reverse_expr(&self) -> ReversedUDWF {
        match self.inner.reverse_expr() {
            ReversedUDWF::Reversed(f) if f.name() == self.name() => {
                ReversedUDWF::Reversed(Arc::new(guarded(&f)))
            }
            other => other,
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn limit_effect(&self, args: &[Arc<dyn PhysicalExpr>]) -> LimitEffect {
        self.inner.inner().limit_effect(args)
    }
}
