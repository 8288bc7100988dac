//! A/B test aggregates returning a `STRUCT`:
//!
//! - `welch_t_test(value, in_treatment)`: Welch's unequal-variance t-test of
//!   mean(treatment) - mean(control), with Welch–Satterthwaite df, two-sided
//!   p and a 95% CI. Per-arm count, mean and M2 are kept with Welford's
//!   update and merged with Chan's formula, so partial states combine
//!   without losing precision.
//! - `proportion_z_test(converted, in_treatment)`: two-proportion z-test
//!   (pooled standard error for z and p, unpooled for the 95% CI).
//!
//! Rows where either argument is NULL are ignored. A statistic that needs
//! two rows per arm (or a non-zero standard error) is NULL otherwise.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, UInt64Type};
use datafusion::common::scalar::ScalarStructBuilder;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use super::distributions::{t_quantile, t_two_sided_p, z_quantile, z_two_sided_p};
use super::{check_arity, coerce_bool, coerce_f64};

/// Two-sided confidence level of the intervals.
const CONFIDENCE: f64 = 0.95;

fn struct_type(names: &[&str]) -> DataType {
    let fields: Fields = names
        .iter()
        .map(|n| {
            let t = if n.ends_with("_count") {
                DataType::Int64
            } else {
                DataType::Float64
            };
            Field::new(*n, t, true)
        })
        .collect();
    DataType::Struct(fields)
}

/// Builds the result struct from `(value)` per field of `t`, in order.
fn build_struct(t: &DataType, values: Vec<ScalarValue>) -> Result<ScalarValue> {
    let DataType::Struct(fields) = t else {
        unreachable!("struct return type")
    };
    let mut b = ScalarStructBuilder::new();
    for (f, v) in fields.iter().zip(values) {
        b = b.with_scalar(f.as_ref().clone(), v);
    }
    b.build()
}

fn f64_or_null(v: Option<f64>) -> ScalarValue {
    ScalarValue::Float64(v.filter(|x| x.is_finite()))
}

/// Which test an [`AbTest`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Test {
    Welch,
    Proportion,
}

const WELCH_FIELDS: &[&str] = &[
    "control_mean",
    "control_count",
    "treatment_mean",
    "treatment_count",
    "diff",
    "t",
    "df",
    "p_value",
    "ci_low",
    "ci_high",
];

const PROPORTION_FIELDS: &[&str] = &[
    "control_rate",
    "control_count",
    "treatment_rate",
    "treatment_count",
    "diff",
    "z",
    "p_value",
    "ci_low",
    "ci_high",
];

/// `welch_t_test` and `proportion_z_test`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AbTest {
    test: Test,
    signature: Signature,
}

pub struct WelchTTest;
pub struct ProportionZTest;

impl WelchTTest {
    pub fn udaf() -> AggregateUDF {
        super::udaf(AbTest {
            test: Test::Welch,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }
}

impl ProportionZTest {
    pub fn udaf() -> AggregateUDF {
        super::udaf(AbTest {
            test: Test::Proportion,
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }
}

impl AggregateUDFImpl for AbTest {
    fn name(&self) -> &str {
        match self.test {
            Test::Welch => "welch_t_test",
            Test::Proportion => "proportion_z_test",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let name = self.name();
        check_arity(name, args, 2, 2)?;
        let value = match self.test {
            Test::Welch => coerce_f64(name, &args[0])?,
            Test::Proportion => coerce_bool(name, &args[0])?,
        };
        Ok(vec![value, coerce_bool(name, &args[1])?])
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(match self.test {
            Test::Welch => struct_type(WELCH_FIELDS),
            Test::Proportion => struct_type(PROPORTION_FIELDS),
        })
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut out = vec![];
        for arm in ["control", "treatment"] {
            for (part, t) in [
                ("n", DataType::UInt64),
                ("mean", DataType::Float64),
                ("m2", DataType::Float64),
            ] {
                let name = format_state_name(args.name, &format!("{arm}_{part}"));
                out.push(Arc::new(Field::new(name, t, true)));
            }
        }
        Ok(out)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(AbAccumulator {
            test: self.test,
            return_type: args.return_type().clone(),
            arms: [Moments::default(); 2],
        }))
    }
}

/// Count, mean and sum of squared deviations (M2) of one arm.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Moments {
    pub n: u64,
    pub mean: f64,
    pub m2: f64,
}

impl Moments {
    /// Welford's update.
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// Chan et al.'s pairwise combination.
    pub fn merge(&mut self, o: &Moments) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *o;
            return;
        }
        let (na, nb) = (self.n as f64, o.n as f64);
        let n = na + nb;
        let delta = o.mean - self.mean;
        self.mean += delta * nb / n;
        self.m2 += o.m2 + delta * delta * na * nb / n;
        self.n += o.n;
    }

    /// Sample variance over n - 1.
    fn var(&self) -> f64 {
        self.m2 / (self.n as f64 - 1.0)
    }

    fn mean(&self) -> Option<f64> {
        (self.n > 0).then_some(self.mean)
    }
}

#[derive(Debug)]
struct AbAccumulator {
    test: Test,
    return_type: DataType,
    /// [control, treatment]. For the proportion test the values are 0/1, so
    /// the mean is the conversion rate.
    arms: [Moments; 2],
}

impl Accumulator for AbAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if values[0].data_type() == &DataType::Null || values[1].data_type() == &DataType::Null {
            return Ok(());
        }
        let arm = values[1].as_boolean();
        let value = |row: usize| -> f64 {
            match self.test {
                Test::Welch => values[0].as_primitive::<Float64Type>().value(row),
                Test::Proportion => f64::from(u8::from(values[0].as_boolean().value(row))),
            }
        };
        let mut arms = self.arms;
        for row in 0..arm.len() {
            if arm.is_valid(row) && values[0].is_valid(row) {
                arms[usize::from(arm.value(row))].push(value(row));
            }
        }
        self.arms = arms;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for (a, s) in states.chunks_exact(3).enumerate() {
            let n = s[0].as_primitive::<UInt64Type>();
            let mean = s[1].as_primitive::<Float64Type>();
            let m2 = s[2].as_primitive::<Float64Type>();
            for row in 0..n.len() {
                if n.is_valid(row) {
                    self.arms[a].merge(&Moments {
                        n: n.value(row),
                        mean: mean.value(row),
                        m2: m2.value(row),
                    });
                }
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(self
            .arms
            .iter()
            .flat_map(|m| {
                [
                    ScalarValue::UInt64(Some(m.n)),
                    ScalarValue::Float64(Some(m.mean)),
                    ScalarValue::Float64(Some(m.m2)),
                ]
            })
            .collect())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let values = match self.test {
            Test::Welch => welch(&self.arms[0], &self.arms[1]),
            Test::Proportion => proportion(&self.arms[0], &self.arms[1]),
        };
        build_struct(&self.return_type, values)
    }

    fn size(&self) -> usize {
        size_of::<Self>()
    }
}

fn count(m: &Moments) -> ScalarValue {
    ScalarValue::Int64(Some(m.n as i64))
}

/// Result fields of Welch's t-test of `t` - `c`, in [`WELCH_FIELDS`] order.
pub(crate) fn welch(c: &Moments, t: &Moments) -> Vec<ScalarValue> {
    let diff = (c.n > 0 && t.n > 0).then_some(t.mean - c.mean);
    let (mut stat, mut df, mut p, mut lo, mut hi) = (None, None, None, None, None);
    if c.n >= 2 && t.n >= 2 {
        let (vc, vt) = (c.var() / c.n as f64, t.var() / t.n as f64);
        let se2 = vc + vt;
        if se2 > 0.0 && se2.is_finite() {
            let d = diff.expect("both arms non-empty");
            let se = se2.sqrt();
            let dof = se2 * se2 / (vc * vc / (c.n as f64 - 1.0) + vt * vt / (t.n as f64 - 1.0));
            let ts = d / se;
            let q = t_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0, dof);
            (stat, df, p) = (Some(ts), Some(dof), Some(t_two_sided_p(ts, dof)));
            (lo, hi) = (Some(d - q * se), Some(d + q * se));
        }
    }
    vec![
        f64_or_null(c.mean()),
        count(c),
        f64_or_null(t.mean()),
        count(t),
        f64_or_null(diff),
        f64_or_null(stat),
        f64_or_null(df),
        f64_or_null(p),
        f64_or_null(lo),
        f64_or_null(hi),
    ]
}

/// Result fields of the two-proportion z-test, in [`PROPORTION_FIELDS`]
/// order; `c` and `t` hold 0/1 conversions.
pub(crate) fn proportion(c: &Moments, t: &Moments) -> Vec<ScalarValue> {
    let diff = (c.n > 0 && t.n > 0).then_some(t.mean - c.mean);
    let (mut z, mut p, mut lo, mut hi) = (None, None, None, None);
    if c.n >= 2 && t.n >= 2 {
        let d = diff.expect("both arms non-empty");
        let (nc, nt) = (c.n as f64, t.n as f64);
        let pooled = (c.mean * nc + t.mean * nt) / (nc + nt);
        let se_pooled = (pooled * (1.0 - pooled) * (1.0 / nc + 1.0 / nt)).sqrt();
        if se_pooled > 0.0 {
            let zs = d / se_pooled;
            (z, p) = (Some(zs), Some(z_two_sided_p(zs)));
        }
        let se = (c.mean * (1.0 - c.mean) / nc + t.mean * (1.0 - t.mean) / nt).sqrt();
        let q = z_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0);
        (lo, hi) = (Some(d - q * se), Some(d + q * se));
    }
    vec![
        f64_or_null(c.mean()),
        count(c),
        f64_or_null(t.mean()),
        count(t),
        f64_or_null(diff),
        f64_or_null(z),
        f64_or_null(p),
        f64_or_null(lo),
        f64_or_null(hi),
    ]
}
