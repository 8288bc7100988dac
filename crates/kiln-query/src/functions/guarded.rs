//! [`Guarded`]: one of the session's scalar functions with a check that
//! runs on its arguments before every call. The function keeps its name,
//! aliases, signature, types, simplifications and ordering properties, so
//! a query plans and reads as it did; only calls the check refuses change.
//!
//! Why one wrapper: each guard (a cost bound, a bound on results' sizes,
//! a function's domain) is a check of arguments; the rest, delegating to
//! DataFusion's function, is the same for all of them.

use std::fmt::Debug;
use std::hash::Hash;

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// What a guard checks before a call of its function.
pub trait Check: Debug + PartialEq + Eq + Hash + Send + Sync + 'static {
    /// Refuses the call of `name` on `args` (`rows` rows) with an error,
    /// or lets it run.
    fn check(&self, name: &str, args: &[ColumnarValue], rows: usize) -> Result<()>;

    /// What a simplification of the function (as DataFusion's rewrite
    /// it) becomes: by default `expr` itself; a guard whose function
    /// simplifies into another function it also guards wraps that one.
    fn simplified(&self, expr: Expr) -> Expr {
        expr
    }
}

/// `inner`, its calls first passed through `check`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Guarded<C> {
    inner: ScalarUDF,
    check: C,
}

impl<C: Check> Guarded<C> {
    pub fn new(inner: &ScalarUDF, check: C) -> Self {
        Self {
            inner: inner.clone(),
            check,
        }
    }
}

impl<C: Check> ScalarUDFImpl for Guarded<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        Ok(match self.inner.simplify(args, info)? {
            ExprSimplifyResult::Simplified(expr) => {
                ExprSimplifyResult::Simplified(self.check.simplified(expr))
            }
            original => original,
        })
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> Result<Interval> {
        self.inner.evaluate_bounds(input)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn strictly_order_preserving(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.strictly_order_preserving(inputs)
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        inputs: &[&Interval],
    ) -> Result<Option<Vec<Interval>>> {
        self.inner.propagate_constraints(interval, inputs)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check
            .check(self.inner.name(), &args.args, args.number_rows)?;
        self.inner.invoke_with_args(args)
    }
}
