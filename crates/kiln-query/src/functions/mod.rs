//! Kiln's own SQL functions for experiment analytics, registered on the
//! shared session by [`register`]:
//!
//! - bitmaps (`bitmap.rs`, `bitmap_scalar.rs`): `bitmap_agg`, `bitmap_union`
//!   and scalar `bitmap_*` functions over roaring bitmaps in the portable
//!   64-bit serialization that CRoaring, Java and pyroaring `BitMap64` read;
//! - funnels (`funnel.rs`): ClickHouse-style `retention` and `window_funnel`;
//! - tests (`stats.rs`, `distributions.rs`): `welch_t_test` and
//!   `proportion_z_test`;
//! - size guards (`sized.rs`): DataFusion's functions whose result size
//!   is an argument (`repeat`, `lpad`, `array_repeat`, `range`, `replace`,
//!   ...), refusing a value or a call's results too large before
//!   allocating them (`format` bounds its own), and the aggregates whose
//!   value grows with their rows (`string_agg`, `array_agg`), refusing a
//!   value past the same limit as it grows;
//! - a cost guard (`costly.rs`): `levenshtein`, refusing a call whose
//!   work (the product of its strings' lengths) would pass a limit before
//!   it runs;
//! - domain guards (`domain.rs`, `domain/nth_value.rs`): `sqrt`, `ln`, `log`,
//!   `power`, `acos`, `asin` and the window function `nth_value`
//!   refusing arguments PostgreSQL refuses, with its SQLSTATEs, where
//!   DataFusion's answer `NaN`, an infinity or NULL; these guards and the
//!   cost guard share one wrapper (`guarded.rs`);
//! - operators as functions (`operator.rs`): DataFusion's binary
//!   operators called as functions, so a string `||` can be size-guarded;
//! - `sum` (`checked_sum.rs`): DataFusion's, failing when an integer total
//!   leaves its type's range instead of wrapping around;
//! - PostgreSQL spellings (`pg_format.rs`): `to_char`, `to_timestamp` and
//!   `to_date` with PostgreSQL's template patterns and TimescaleDB's
//!   `time_bucket`; `json_build_object`
//!   (`pg_json.rs`); LIKE patterns with another escape than the backslash
//!   (`pg_like.rs`); `quote_literal` (`pg_quote.rs`); `number * INTERVAL`
//!   (`kiln_interval_mul`, `pg_interval.rs`); `age` (`pg_age.rs`); `format`
//!   (`pg_text_format.rs`);
//!   `session_user`, which `current_user` becomes (`pg_session.rs`).
//!
//! Every aggregate keeps a mergeable state, so it works with DataFusion's
//! two-phase (partial / final) aggregation over many partitions.
//! `docs/sql.md` documents the SQL surface.

mod bitmap;
mod bitmap_scalar;
mod checked_sum;
mod costly;
mod distributions;
mod domain;
mod funnel;
mod guarded;
mod operator;
mod pg_age;
mod pg_format;
mod pg_interval;
mod pg_json;
mod pg_like;
mod pg_quote;
mod pg_session;
mod pg_text_format;
pub(crate) mod pg_types;
mod sized;
mod stats;
#[cfg(test)]
mod tests;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::prelude::SessionContext;

pub(crate) use pg_format::TIME_BUCKET_ORIGIN_NS;
pub(crate) use pg_interval::{fixed_interval_ns, shifted};
pub(crate) use sized::{LARGE_FROM, string_concat, value_bytes};

/// Registers every Kiln function on `ctx`.
pub fn register(ctx: &SessionContext) {
    for udaf in [
        bitmap::BitmapAgg::udaf(),
        bitmap::BitmapAgg::union_udaf(),
        funnel::Retention::udaf(),
        funnel::WindowFunnel::udaf(),
        stats::WelchTTest::udaf(),
        stats::ProportionZTest::udaf(),
        checked_sum::CheckedSum::udaf(),
    ] {
        ctx.register_udaf(udaf);
    }
    ctx.register_udf(udf(pg_json::JsonBuildObject::default()));
    ctx.register_udf(udf(pg_like::LikeEscape::default()));
    ctx.register_udf(udf(pg_quote::QuoteLiteral::default()));
    ctx.register_udf(udf(pg_interval::IntervalMul::default()));
    ctx.register_udf(udf(pg_age::Age::default()));
    ctx.register_udf(udf(pg_types::PgUdtName::default()));
    for udf in bitmap_scalar::udfs() {
        ctx.register_udf(udf);
    }
    // PostgreSQL's `format(fmt, ...)` (Metabase's sync builds type names
    // with it); it bounds its results itself.
    ctx.register_udf(pg_text_format::udf());
    ctx.register_udf(session_user());
    let state = ctx.state();
    for udf in sized::guard(|name| state.scalar_functions().get(name).cloned()) {
        ctx.register_udf(udf);
    }
    if let Some(udf) = costly::guard(|name| state.scalar_functions().get(name).cloned()) {
        ctx.register_udf(udf);
    }
    for udf in domain::guard(|name| state.scalar_functions().get(name).cloned()) {
        ctx.register_udf(udf);
    }
    if let Some(udwf) = domain::nth_value::guard(|name| state.window_functions().get(name).cloned())
    {
        ctx.register_udwf(udwf);
    }
    for udaf in sized::aggregates::guard(|name| state.aggregate_functions().get(name).cloned()) {
        ctx.register_udaf(udaf);
    }
    for udf in pg_format::wrap(|name| state.scalar_functions().get(name).cloned()) {
        ctx.register_udf(udf);
    }
}

/// `f` over one text argument, scalar or column (any type, cast to text);
/// NULL stays NULL. The shape of Kiln's PostgreSQL text functions.
pub(crate) fn map_text(
    arg: &datafusion::logical_expr::ColumnarValue,
    f: impl Fn(&str) -> String,
) -> Result<datafusion::logical_expr::ColumnarValue> {
    use datafusion::arrow::array::{Array, StringArray};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::ColumnarValue;
    match arg {
        ColumnarValue::Scalar(s) => {
            let text = match s {
                ScalarValue::Null => ScalarValue::Utf8(None),
                s => s.cast_to(&DataType::Utf8)?,
            };
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                text.try_as_str().flatten().map(f),
            )))
        }
        ColumnarValue::Array(a) => {
            let text = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
            let text = text
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("cast to Utf8");
            let out: StringArray = text.iter().map(|t| t.map(&f)).collect();
            Ok(ColumnarValue::Array(std::sync::Arc::new(out)))
        }
    }
}

/// `session_user` (`current_user`): the query's session user. Registered
/// by [`register`], and again by a protocol that installs a catalog with
/// one of its own.
pub fn session_user() -> ScalarUDF {
    udf(pg_session::SessionUser::default())
}

pub(crate) fn udaf(imp: impl datafusion::logical_expr::AggregateUDFImpl + 'static) -> AggregateUDF {
    AggregateUDF::new_from_impl(imp)
}

pub(crate) fn udf(imp: impl datafusion::logical_expr::ScalarUDFImpl + 'static) -> ScalarUDF {
    ScalarUDF::new_from_impl(imp)
}

/// Coerces an integer id argument: `UInt64` stays, every other integer (and
/// NULL) becomes `Int64`.
pub(crate) fn coerce_id(func: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::UInt64 => Ok(DataType::UInt64),
        DataType::Null
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => Ok(DataType::Int64),
        other => plan_err!("{func}: expected an integer id, got {other}"),
    }
}

/// Coerces a bitmap argument (any binary type, or NULL) to `Binary`.
pub(crate) fn coerce_bitmap(func: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::Null | DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            Ok(DataType::Binary)
        }
        other => plan_err!("{func}: expected a bitmap (BINARY), got {other}"),
    }
}

/// Coerces a condition / flag argument: booleans stay, integers (0 = false)
/// and NULL become `Boolean`.
pub(crate) fn coerce_bool(func: &str, t: &DataType) -> Result<DataType> {
    if t.is_integer() || matches!(t, DataType::Boolean | DataType::Null) {
        Ok(DataType::Boolean)
    } else {
        plan_err!("{func}: expected a BOOLEAN condition, got {t}")
    }
}

/// Coerces a numeric measurement to `Float64`.
pub(crate) fn coerce_f64(func: &str, t: &DataType) -> Result<DataType> {
    if t.is_numeric() || matches!(t, DataType::Null) {
        Ok(DataType::Float64)
    } else {
        plan_err!("{func}: expected a numeric value, got {t}")
    }
}

/// Checks the argument count of `func`.
pub(crate) fn check_arity(func: &str, args: &[DataType], min: usize, max: usize) -> Result<()> {
    if args.len() < min || args.len() > max {
        let want = if min == max {
            format!("{min}")
        } else if max == usize::MAX {
            format!("at least {min}")
        } else {
            format!("{min} to {max}")
        };
        return plan_err!("{func} takes {want} arguments, got {}", args.len());
    }
    Ok(())
}
