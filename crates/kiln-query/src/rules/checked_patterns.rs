//! [`CheckedPatterns`]: a regular expression whose pattern (or flags) is
//! neither a literal nor a parameter is checked as it runs, so a pattern
//! that does not compile is bad input (2201B) naming it, not an internal
//! error.
//!
//! Why: literals are checked after parsing and parameters' values when
//! they are bound ([`crate::shape::patterns`]). A pattern read from a
//! column (a table of rules matched against URLs), or computed from
//! values (`'^' || prefix`), reaches Arrow's and DataFusion's kernels
//! unchecked, and they report one that does not compile as a computation
//! error that carries only text: an internal error (500, XX000).
//!
//! Such a pattern goes through `checked_pattern(pattern, flags)`
//! ([`CheckedPattern`]), which gives its pattern back unchanged (the same
//! array, not a copy) once every distinct pattern of the batch compiles
//! with its row's flags; otherwise it fails with
//! [`crate::Error::InvalidRegex`], naming the parameters the pattern and
//! flags read (`'^' || $1`). It is immutable, so a constant pattern is
//! checked once, when the plan is simplified. An analyzer rule after type
//! coercion, so the types it sees are final; expressions keep their
//! column names. A plan made for one set of values binds them before it
//! is analyzed, so it is put through the rule first ([`bind`]),
//! while its parameters are still there to be named.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, ParamValues, Result, ScalarValue, plan_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, lit,
};
use datafusion::optimizer::AnalyzerRule;

use crate::shape::patterns::{Flags, RegexArgs, compile, regex_args, usable_flags, written};

/// Puts every regular expression's pattern that is not written out (a
/// literal or a parameter) through [`CheckedPattern`].
#[derive(Debug, Default)]
pub struct CheckedPatterns;

impl AnalyzerRule for CheckedPatterns {
    fn name(&self) -> &str {
        "kiln_checked_patterns"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        wrapped(plan)
    }
}

/// `plan` with every pattern not written out put through
/// [`CheckedPattern`] (the rule, which reads no option).
fn wrapped(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        // Most nodes match no pattern: passed over unchanged.
        if !has_unchecked(&node) {
            return Ok(Transformed::no(node));
        }
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let saved = names.save(&e);
            let t = e.transform_up(|e| Ok(checked(e)))?;
            Ok(t.update_data(|e| saved.restore(e)))
        })
    })
    .map(|t| t.data)
}

/// `plan` with `values` bound, its patterns not written out put through
/// [`CheckedPattern`] first, while its parameters are still placeholders:
/// a plan made for one set of values (a custom plan, HTTP `params`) binds
/// them before it is analyzed, and a value that does not compile is then
/// named by its parameter as in a kept plan. The analyzer passes over
/// them afterwards.
pub(crate) fn bind(plan: LogicalPlan, values: &ParamValues) -> Result<LogicalPlan> {
    wrapped(plan)?.replace_params_with_values(values)
}

/// Whether an expression of `node` matches a pattern not written out.
fn has_unchecked(node: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = node.apply_expressions(|e| {
        e.apply(|e| {
            found = unchecked(e).is_some();
            Ok(match found {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        })
    });
    found
}

/// The flags of `e`'s pattern if `e` matches a regular expression whose
/// pattern or flags are not written out (and not already checked), and
/// the function that reads them (`""` for the operators).
fn unchecked(e: &Expr) -> Option<(Expr, String)> {
    let RegexArgs {
        pattern,
        flags,
        function,
    } = regex_args(e)?;
    if is_checked(pattern) {
        return None;
    }
    let flags = match flags {
        Flags::Fixed(_) if written(pattern) => return None,
        Flags::Fixed(flags) => lit(flags),
        Flags::Arg(flags) if written(pattern) && written(flags) => return None,
        Flags::Arg(flags) => flags.clone(),
    };
    Some((flags, function.to_string()))
}

/// `e` with its pattern put through [`CheckedPattern`] where
/// [`unchecked`] finds one.
fn checked(e: Expr) -> Transformed<Expr> {
    let Some((flags, function)) = unchecked(&e) else {
        return Transformed::no(e);
    };
    let wrap = |pattern: Expr| {
        let from = parameters(&[&pattern, &flags]);
        let udf = Arc::new(ScalarUDF::new_from_impl(CheckedPattern::new(
            &function, from,
        )));
        Expr::ScalarFunction(ScalarFunction::new_udf(udf, vec![pattern, flags]))
    };
    Transformed::yes(match e {
        Expr::BinaryExpr(mut b) => {
            b.right = Box::new(wrap(*b.right));
            Expr::BinaryExpr(b)
        }
        Expr::SimilarTo(mut like) => {
            like.pattern = Box::new(wrap(*like.pattern));
            Expr::SimilarTo(like)
        }
        Expr::ScalarFunction(mut f) => {
            let pattern = std::mem::replace(&mut f.args[1], lit(""));
            f.args[1] = wrap(pattern);
            Expr::ScalarFunction(f)
        }
        e => unreachable!("unchecked() matched {e}"),
    })
}

/// The parameters `exprs` read, as an error names them after the pattern
/// (` (parameter $1)`, ` (parameters $1, $2)`), or nothing: a value bound
/// to a parameter of a computed pattern is named as one bound to the
/// pattern itself is ([`crate::shape::patterns`]).
fn parameters(exprs: &[&Expr]) -> String {
    let mut ids: Vec<String> = vec![];
    for e in exprs {
        let _ = e.apply(|e| {
            if let Expr::Placeholder(p) = e
                && !ids.contains(&p.id)
            {
                ids.push(p.id.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    match ids.as_slice() {
        [] => String::new(),
        [one] => format!(" (parameter {one})"),
        many => format!(" (parameters {})", many.join(", ")),
    }
}

/// Whether `e` is already a call of [`CheckedPattern`].
fn is_checked(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.func.inner().downcast_ref::<CheckedPattern>().is_some())
}

/// `checked_pattern(pattern, flags)`: `pattern`, unchanged, once each
/// distinct pattern of the batch compiles with its row's flags.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedPattern {
    signature: Signature,
    /// The function whose pattern it is (`""` for the operators), which
    /// decides how its flags read.
    function: String,
    /// The parameters the pattern and flags read, named after the pattern
    /// in an error ([`parameters`]).
    from: String,
}

impl CheckedPattern {
    pub fn new(function: &str, from: String) -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
            function: function.to_string(),
            from,
        }
    }
}

impl ScalarUDFImpl for CheckedPattern {
    fn name(&self) -> &str {
        "checked_pattern"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(t) => Ok(t.clone()),
            None => plan_err!("checked_pattern takes a pattern and its flags"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [pattern, flags] = args.args.as_slice() else {
            return plan_err!("checked_pattern takes a pattern and its flags");
        };
        let rows = match (pattern, flags) {
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)) => 1,
            _ => args.number_rows,
        };
        let (patterns, flags) = (Texts::of(pattern), Texts::of(flags));
        let mut seen = HashSet::new();
        for row in 0..rows {
            let (Some(p), Some(f)) = (patterns.get(row), flags.get(row)) else {
                continue;
            };
            if !seen.insert((p, f)) {
                continue;
            }
            if let Some(f) = usable_flags(&self.function, f) {
                compile(p, &f, &self.from).map_err(|e| DataFusionError::External(Box::new(e)))?;
            }
        }
        Ok(pattern.clone())
    }
}

/// The texts of a pattern or flags argument, by row.
enum Texts<'a> {
    /// The same for every row (a scalar).
    One(Option<&'a str>),
    Utf8(&'a arrow::array::StringArray),
    Large(&'a arrow::array::LargeStringArray),
    View(&'a arrow::array::StringViewArray),
    /// Not text (nothing to check: the kernels refuse it themselves).
    None,
}

impl<'a> Texts<'a> {
    fn of(v: &'a ColumnarValue) -> Self {
        match v {
            ColumnarValue::Scalar(
                ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s),
            ) => Texts::One(s.as_deref()),
            ColumnarValue::Scalar(_) => Texts::None,
            ColumnarValue::Array(a) => match a.data_type() {
                DataType::Utf8 => Texts::Utf8(a.as_string()),
                DataType::LargeUtf8 => Texts::Large(a.as_string()),
                DataType::Utf8View => Texts::View(a.as_string_view()),
                _ => Texts::None,
            },
        }
    }

    fn get(&self, row: usize) -> Option<&'a str> {
        match self {
            Texts::One(s) => *s,
            Texts::Utf8(a) => a.is_valid(row).then(|| a.value(row)),
            Texts::Large(a) => a.is_valid(row).then(|| a.value(row)),
            Texts::View(a) => a.is_valid(row).then(|| a.value(row)),
            Texts::None => None,
        }
    }
}

#[cfg(test)]
mod tests;
