//! Parameters of a kept plan: each `$n` becomes a call of a nullary
//! function that reads the value bound for the current execution.
//!
//! Why: DataFusion 55 has no physical placeholder; a physical plan can only
//! be built once every `$n` is a value. A function call can be planned
//! without its value, and evaluates to whatever was bound last. The values
//! live in [`ParamSlots`], one per plan instance, which a caller holds
//! exclusively while the instance runs.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use parking_lot::RwLock;

/// The values bound to one plan instance's `$1`, `$2`, ...
#[derive(Debug)]
pub struct ParamSlots {
    types: Vec<DataType>,
    values: RwLock<Vec<ScalarValue>>,
}

impl ParamSlots {
    fn new(types: Vec<DataType>) -> Self {
        let values = types
            .iter()
            .map(|t| ScalarValue::try_from(t).unwrap_or(ScalarValue::Null))
            .collect();
        Self {
            types,
            values: RwLock::new(values),
        }
    }

    /// Binds the next execution's values, each cast to its placeholder's
    /// type; an error names the `$n` that does not fit.
    pub fn bind(&self, values: &[ScalarValue]) -> Result<()> {
        if values.len() != self.types.len() {
            return plan_err!(
                "expected {} parameters, got {}",
                self.types.len(),
                values.len()
            );
        }
        let cast = values
            .iter()
            .zip(&self.types)
            .enumerate()
            .map(|(i, (v, t))| cast_param(i, v, t))
            .collect::<Result<Vec<_>>>()?;
        *self.values.write() = cast;
        Ok(())
    }

    fn get(&self, index: usize) -> ScalarValue {
        self.values.read()[index].clone()
    }
}

/// The value of parameter `$(index + 1)` as type `t` (a NULL of that
/// type for a NULL); the error names the parameter.
pub(crate) fn cast_param(index: usize, v: &ScalarValue, t: &DataType) -> Result<ScalarValue> {
    if v.is_null() {
        return ScalarValue::try_from(t);
    }
    if v.data_type() == *t {
        return Ok(v.clone());
    }
    v.cast_to(t)
        .or_else(|e| plan_err!("parameter ${}: cannot use {v:?} as {t}: {e}", index + 1))
}

/// `$n` as a function of no argument.
#[derive(Debug)]
struct Param {
    name: String,
    index: usize,
    slots: Arc<ParamSlots>,
    signature: Signature,
}

impl PartialEq for Param {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index && Arc::ptr_eq(&self.slots, &other.slots)
    }
}

impl Eq for Param {}

impl Hash for Param {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.index.hash(state);
        Arc::as_ptr(&self.slots).hash(state);
    }
}

impl ScalarUDFImpl for Param {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.slots.types[self.index].clone())
    }

    /// `$n`, as the placeholder it replaced is named: an expression over a
    /// parameter (`sum(x * $1)`) keeps the column name the plan above it
    /// was built with.
    fn schema_name(&self, _: &[Expr]) -> Result<String> {
        Ok(self.name.clone())
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.slots.get(self.index)))
    }
}

/// Replaces `$1..$n` in an optimized plan with calls reading the returned
/// slots. `types[i]` is the type of `$(i+1)`.
pub fn parameterize(
    plan: LogicalPlan,
    types: &[DataType],
) -> Result<(LogicalPlan, Arc<ParamSlots>)> {
    let slots = Arc::new(ParamSlots::new(types.to_vec()));
    let udfs: Vec<Arc<ScalarUDF>> = (0..types.len())
        .map(|index| {
            Arc::new(ScalarUDF::new_from_impl(Param {
                name: format!("${}", index + 1),
                index,
                slots: slots.clone(),
                // Stable: one value for the whole execution. The plan is
                // already optimized, so nothing folds it.
                signature: Signature::nullary(Volatility::Stable),
            }))
        })
        .collect();
    let plan = plan
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::Placeholder(p) => {
                        let index =
                            p.id.strip_prefix('$')
                                .and_then(|n| n.parse::<usize>().ok())
                                .and_then(|n| n.checked_sub(1))
                                .filter(|i| *i < udfs.len());
                        let Some(index) = index else {
                            return plan_err!("unknown parameter {}", p.id);
                        };
                        Ok(Transformed::yes(Expr::ScalarFunction(
                            ScalarFunction::new_udf(udfs[index].clone(), vec![]),
                        )))
                    }
                    e => Ok(Transformed::no(e)),
                })
            })
        })?
        .data;
    Ok((plan, slots))
}
