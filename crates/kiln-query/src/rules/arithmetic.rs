//! [`CheckedArithmetic`]: arithmetic fails where PostgreSQL's does,
//! instead of answering a wrong number a dashboard then plots or sums
//! without a word:
//! - an integer `+`, `-`, `*` or unary `-` whose result does not fit its
//!   type fails with "Overflow happened on: ..." (SQLSTATE 22003, "out of
//!   range"), where Arrow's kernels DataFusion plans would wrap around
//!   (`9223372036854775807 + 1` was `-9223372036854775808`);
//! - a floating-point value divided by zero fails with "division by zero"
//!   (SQLSTATE 22012), where it would answer `Infinity` or `NaN`;
//! - a string `||` whose result would pass the limit on one value fails
//!   as `concat` does ([`string_concat`]), where a string doubled again and
//!   again took gigabytes until Arrow's offsets overflowed in a panic;
//! - a timestamp or date moved by an interval or a duration (`+`, `-`)
//!   past the years its type holds fails with "timestamp out of range"
//!   (SQLSTATE 22008, as PostgreSQL's), where Arrow's refusal was a
//!   computation error of no particular cause (22000).
//!
//! An analyzer rule after type coercion, so both operands of an operator
//! have their final type (temporal operators at physical planning,
//! [`checked_time`], after the optimizer's rules that read them): such an
//! operator becomes a call of
//! `checked_add`, `checked_sub`, `checked_mul`, `checked_negate`,
//! `float_divide`, `checked_time_add`, `checked_time_sub` or `||`, which run Arrow's checked kernels (a NULL operand still
//! gives NULL, and only rows that are not NULL are checked). Column names
//! are kept. Because analysis comes before constant folding, a constant
//! expression that overflows is not folded: it fails when it runs. Integer
//! and decimal division, and decimal `+ - *`, already fail on their own.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, Datum, Scalar};
use arrow::compute::kernels::cmp::eq;
use arrow::compute::kernels::numeric::{add, div, mul, neg, sub};
use arrow::datatypes::{DataType, Field, FieldRef};
use arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use datafusion::logical_expr::binary::BinaryTypeCoercer;

use crate::error::Error;
use crate::functions::string_concat;

/// Rewrites integer `+ - *` and negation, floating-point division,
/// temporal `+ -` and string `||` to their checked functions.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn name(&self) -> &str {
        "kiln_checked_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_plan(plan, Pass::Analysis).map(|t| t.data)
    }
}

/// `plan` with its temporal `+ -` made checked calls, once it is
/// optimized: the optimizer's rules (cubes, time ranges) read a shifted
/// timestamp as the operator it is, so these become calls only on the
/// way to the physical plan. Extension nodes are left as they are.
/// `None` when no node has such an operator (one look, nothing copied).
pub fn checked_time(plan: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let mut found = false;
    let stop = |found: bool| match found {
        true => TreeNodeRecursion::Stop,
        false => TreeNodeRecursion::Continue,
    };
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            found = e.exists(|e| Ok(checked_op(e, Pass::Planning)))?;
            Ok(stop(found))
        })?;
        Ok(stop(found))
    })?;
    if !found {
        return Ok(None);
    }
    rewrite_plan(plan.clone(), Pass::Planning).map(|t| Some(t.data))
}

/// Which operators a pass makes checked calls of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Integer, floating-point and string operators, after type coercion.
    Analysis,
    /// Temporal `+ -`, after optimization.
    Planning,
}

fn rewrite_plan(plan: LogicalPlan, pass: Pass) -> Result<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(|plan| {
        if matches!(plan, LogicalPlan::Extension(_)) {
            return Ok(Transformed::no(plan));
        }
        // Most nodes compute nothing: they cost one look at their
        // expressions, no schema and no function.
        let mut computes = false;
        plan.apply_expressions(|e| {
            computes = e.exists(|e| Ok(checked_op(e, pass)))?;
            Ok(match computes {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        })?;
        if !computes {
            return Ok(Transformed::no(plan));
        }
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
            let t = e.transform_up(|e| Ok(rewrite(e, &schema, pass)))?;
            Ok(match t.transformed {
                true => Transformed::yes(saved.restore(t.data)),
                false => t,
            })
        })
    })
}

/// Whether `e` is an operator `pass` may rewrite (its types decide).
fn checked_op(e: &Expr, pass: Pass) -> bool {
    match e {
        Expr::BinaryExpr(b) if pass == Pass::Planning => {
            matches!(b.op, Operator::Plus | Operator::Minus)
        }
        Expr::BinaryExpr(b) => matches!(
            b.op,
            Operator::Plus
                | Operator::Minus
                | Operator::Multiply
                | Operator::Divide
                | Operator::StringConcat
        ),
        Expr::Negative(_) => pass == Pass::Analysis,
        _ => false,
    }
}

/// What a rewritten operator becomes.
#[derive(Clone, Copy, Debug)]
enum Checked {
    Int(IntOp),
    FloatDivide,
    /// A timestamp or date `+` or `-` an interval or a duration.
    Time(Operator),
    StringConcat,
}

/// The function `c` calls, made once per process.
fn function(c: Checked) -> Arc<ScalarUDF> {
    static MADE: LazyLock<[Arc<ScalarUDF>; 7]> = LazyLock::new(|| {
        let int = |op| Arc::new(ScalarUDF::new_from_impl(CheckedInt::new(op)));
        [
            int(IntOp::Add),
            int(IntOp::Sub),
            int(IntOp::Mul),
            int(IntOp::Negate),
            Arc::new(ScalarUDF::new_from_impl(FloatDivide::new())),
            Arc::new(ScalarUDF::new_from_impl(CheckedTime::new(Operator::Plus))),
            Arc::new(ScalarUDF::new_from_impl(CheckedTime::new(Operator::Minus))),
        ]
    });
    let made = match c {
        Checked::Int(IntOp::Add) => 0,
        Checked::Int(IntOp::Sub) => 1,
        Checked::Int(IntOp::Mul) => 2,
        Checked::Int(IntOp::Negate) => 3,
        Checked::FloatDivide => 4,
        Checked::Time(Operator::Minus) => 6,
        Checked::Time(_) => 5,
        Checked::StringConcat => return string_concat(),
    };
    MADE[made].clone()
}

/// `e` as a call of its checked function, if its operands' types ask
/// for one.
fn rewrite(e: Expr, schema: &DFSchema, pass: Pass) -> Transformed<Expr> {
    let ty = |x: &Expr| x.get_type(schema).ok();
    let float = |t: &Option<DataType>| matches!(t, Some(DataType::Float32 | DataType::Float64));
    let int = |t: &Option<DataType>| t.as_ref().is_some_and(DataType::is_integer);
    let string = |t: &Option<DataType>| {
        matches!(
            t,
            Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        )
    };
    let temporal = |t: &Option<DataType>| {
        matches!(
            t,
            Some(DataType::Timestamp(..) | DataType::Date32 | DataType::Date64)
        )
    };
    let span =
        |t: &Option<DataType>| matches!(t, Some(DataType::Interval(_) | DataType::Duration(_)));
    let checked = match &e {
        Expr::BinaryExpr(b) => {
            let (l, r) = (ty(&b.left), ty(&b.right));
            match b.op {
                Operator::Plus | Operator::Minus if temporal(&l) && span(&r) => Checked::Time(b.op),
                Operator::Plus if span(&l) && temporal(&r) => Checked::Time(b.op),
                Operator::Divide if float(&l) && float(&r) => Checked::FloatDivide,
                Operator::Plus if int(&l) && l == r => Checked::Int(IntOp::Add),
                Operator::Minus if int(&l) && l == r => Checked::Int(IntOp::Sub),
                Operator::Multiply if int(&l) && l == r => Checked::Int(IntOp::Mul),
                Operator::StringConcat if string(&l) && l == r => Checked::StringConcat,
                _ => return Transformed::no(e),
            }
        }
        Expr::Negative(x) if int(&ty(x)) => Checked::Int(IntOp::Negate),
        _ => return Transformed::no(e),
    };
    if matches!(checked, Checked::Time(_)) != (pass == Pass::Planning) {
        return Transformed::no(e);
    }
    let args = match e {
        Expr::BinaryExpr(BinaryExpr { left, right, .. }) => vec![*left, *right],
        Expr::Negative(x) => vec![*x],
        _ => unreachable!("matched above"),
    };
    Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
        function(checked),
        args,
    )))
}

/// An integer operator [`CheckedInt`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum IntOp {
    Add,
    Sub,
    Mul,
    Negate,
}

/// An integer operator of operands of one type, failing with Arrow's
/// `ArithmeticOverflow` when a row's result does not fit that type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedInt {
    op: IntOp,
    signature: Signature,
}

impl CheckedInt {
    fn new(op: IntOp) -> Self {
        let arity = match op {
            IntOp::Negate => 1,
            _ => 2,
        };
        Self {
            op,
            signature: Signature::any(arity, Volatility::Immutable),
        }
    }
}

/// A function's argument as an Arrow datum, a scalar kept one value long.
enum Operand {
    Array(ArrayRef),
    Scalar(Scalar<ArrayRef>),
}

impl Operand {
    fn new(v: &ColumnarValue) -> Result<Self> {
        Ok(match v {
            ColumnarValue::Array(a) => Self::Array(a.clone()),
            ColumnarValue::Scalar(s) => Self::Scalar(s.to_scalar()?),
        })
    }

    fn datum(&self) -> &dyn Datum {
        match self {
            Self::Array(a) => a,
            Self::Scalar(s) => s,
        }
    }

    fn array(&self) -> &dyn Array {
        match self {
            Self::Array(a) => a.as_ref(),
            Self::Scalar(s) => s.get().0,
        }
    }
}

impl ScalarUDFImpl for CheckedInt {
    fn name(&self) -> &str {
        match self.op {
            IntOp::Add => "checked_add",
            IntOp::Sub => "checked_sub",
            IntOp::Mul => "checked_mul",
            IntOp::Negate => "checked_negate",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let operands = args
            .args
            .iter()
            .map(Operand::new)
            .collect::<Result<Vec<_>>>()?;
        let out = match (self.op, operands.as_slice()) {
            (IntOp::Negate, [x]) => neg(x.array())?,
            (IntOp::Add, [l, r]) => add(l.datum(), r.datum())?,
            (IntOp::Sub, [l, r]) => sub(l.datum(), r.datum())?,
            (IntOp::Mul, [l, r]) => mul(l.datum(), r.datum())?,
            (op, _) => {
                return Err(DataFusionError::Internal(format!(
                    "{op:?} given {} arguments",
                    operands.len()
                )));
            }
        };
        columnar(out, &args.args)
    }
}

/// A kernel's result: one value if every argument was one.
fn columnar(out: ArrayRef, args: &[ColumnarValue]) -> Result<ColumnarValue> {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
    }
    Ok(ColumnarValue::Array(out))
}

/// A timestamp or date moved by an interval or a duration, failing with
/// "timestamp out of range" (or "date out of range") when a row's result
/// is past the years its type holds. Arrow's kernel checks every row; the
/// only error it can give for operands of these types is that one.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedTime {
    op: Operator,
    signature: Signature,
}

impl CheckedTime {
    fn new(op: Operator) -> Self {
        Self {
            op,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedTime {
    fn name(&self) -> &str {
        match self.op {
            Operator::Minus => "checked_time_sub",
            _ => "checked_time_add",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    /// The operator's own type, as DataFusion would give it.
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [l, r] => BinaryTypeCoercer::new(l, &self.op, r).get_result_type(),
            _ => Err(DataFusionError::Internal(format!(
                "{} given {} arguments",
                self.name(),
                arg_types.len()
            ))),
        }
    }
    /// Nullable as the operator is: when either operand is.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(
            self.name(),
            self.return_type(&types)?,
            nullable,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [l, r] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} given {} arguments",
                self.name(),
                args.args.len()
            )));
        };
        let (l, r) = (Operand::new(l)?, Operand::new(r)?);
        let out = match self.op {
            Operator::Minus => sub(l.datum(), r.datum()),
            _ => add(l.datum(), r.datum()),
        };
        let out = out.map_err(|_| {
            let ty = args.return_field.data_type();
            let what = match ty {
                DataType::Date32 | DataType::Date64 => "date",
                _ => "timestamp",
            };
            DataFusionError::External(Box::new(Error::DatetimeOutOfRange(format!(
                "{what} out of range: a result is past the years a {ty} holds"
            ))))
        })?;
        columnar(out, &args.args)
    }
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
        columnar(div(x, y)?, &args.args)
    }
}

#[cfg(test)]
mod tests;
