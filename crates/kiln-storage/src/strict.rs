//! Values given as text (CSV fields, NDJSON numbers and timestamps, COPY
//! fields, strings in Arrow or Parquet bodies) converted to their column's
//! type exactly, or refused.
//!
//! Why Kiln's own conversion: the Arrow readers are lenient where a
//! database must not be. arrow-json reads `1.5` into an integer column as
//! `1`, `1e400` into a DOUBLE as infinity, and an integer timestamp as
//! nanoseconds (a huge one clamped); a database that stores something
//! other than what it was given has lost data without saying so. Readers
//! decode these columns as text and [`convert`] turns them into values,
//! naming the first one that does not fit. An integer timestamp is read
//! only in a unit the writer declares ([`TimestampUnit`]).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Float64Builder, Int32Builder, Int64Builder, StringArray,
    TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, TimeUnit};

/// The unit of integer timestamps, declared by the writer (HTTP
/// `?timestamp_unit=`). Without one, an integer timestamp is an error:
/// `1700000000` is a date in 2023 in seconds and in 1970 in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampUnit {
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl TimestampUnit {
    /// Parses `s`, `ms`, `us` or `ns`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "s" => Self::Seconds,
            "ms" => Self::Millis,
            "us" => Self::Micros,
            "ns" => Self::Nanos,
            _ => return None,
        })
    }

    fn nanos(self) -> i64 {
        match self {
            Self::Seconds => 1_000_000_000,
            Self::Millis => 1_000_000,
            Self::Micros => 1_000,
            Self::Nanos => 1,
        }
    }
}

/// Whether a column of type `ty` is decoded as text and converted by
/// [`convert`] (the types whose Arrow readers round, overflow or guess).
pub fn reads_as_text(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Int32 | DataType::Int64 | DataType::Float64 | DataType::Timestamp(_, _)
    )
}

/// A value that does not fit its column: the row (0-based, within the
/// array) and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Unfit {
    pub row: usize,
    pub msg: String,
}

/// Converts text values to `ty` (one [`reads_as_text`] accepts), exactly:
/// a fraction into an integer column, a number out of the column's range,
/// an overflowing DOUBLE, an out-of-range timestamp or an integer
/// timestamp without a declared `unit` is an [`Unfit`] naming the row.
/// NULL stays NULL; surrounding whitespace is ignored.
pub fn convert(
    text: &StringArray,
    ty: &DataType,
    unit: Option<TimestampUnit>,
) -> Result<ArrayRef, Unfit> {
    let each = |f: &mut dyn FnMut(&str) -> Result<(), String>| {
        for row in 0..text.len() {
            if text.is_valid(row) {
                f(text.value(row).trim()).map_err(|msg| Unfit { row, msg })?;
            }
        }
        Ok::<_, Unfit>(())
    };
    let valid = |row: usize| text.is_valid(row);
    Ok(match ty {
        DataType::Int32 => {
            let mut b = Int32Builder::with_capacity(text.len());
            each(&mut |s| {
                let v = integer(s, "INT")?;
                let v = i32::try_from(v).map_err(|_| format!("{s} is out of range for INT"))?;
                b.append_value(v);
                Ok(())
            })?;
            Arc::new(with_nulls(b.finish(), text.len(), valid))
        }
        DataType::Int64 => {
            let mut b = Int64Builder::with_capacity(text.len());
            each(&mut |s| {
                b.append_value(integer(s, "BIGINT")?);
                Ok(())
            })?;
            Arc::new(with_nulls(b.finish(), text.len(), valid))
        }
        DataType::Float64 => {
            let mut b = Float64Builder::with_capacity(text.len());
            each(&mut |s| {
                b.append_value(double(s)?);
                Ok(())
            })?;
            Arc::new(with_nulls(b.finish(), text.len(), valid))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, tz) => {
            let mut b = TimestampNanosecondBuilder::with_capacity(text.len());
            each(&mut |s| {
                b.append_value(timestamp(s, unit)?);
                Ok(())
            })?;
            Arc::new(with_nulls(b.finish(), text.len(), valid).with_timezone_opt(tz.clone()))
        }
        other => {
            return Err(Unfit {
                row: 0,
                msg: format!("no exact conversion from text to {other}"),
            });
        }
    })
}

/// `values` (one per valid row, in order) spread over `len` rows with
/// NULL where `valid` says so.
fn with_nulls<T: arrow::datatypes::ArrowPrimitiveType>(
    values: arrow::array::PrimitiveArray<T>,
    len: usize,
    valid: impl Fn(usize) -> bool,
) -> arrow::array::PrimitiveArray<T> {
    if values.len() == len {
        return values;
    }
    let mut out = arrow::array::PrimitiveBuilder::<T>::with_capacity(len);
    let mut next = values.values().iter();
    for row in 0..len {
        match valid(row).then(|| next.next()).flatten() {
            Some(v) => out.append_value(*v),
            None => out.append_null(),
        }
    }
    out.finish()
}

/// Largest magnitude an `f64` holds every integer up to.
const EXACT_F64: f64 = 9_007_199_254_740_992.0;

/// An integer written as one (`42`) or as a number with no fraction
/// (`42.0`, `4.2e1`), exactly.
fn integer(s: &str, ty: &str) -> Result<i64, String> {
    if let Ok(v) = s.parse::<i64>() {
        return Ok(v);
    }
    match s.parse::<f64>() {
        Ok(f)
            if f.is_nan()
                || s.bytes()
                    .any(|c| c.is_ascii_alphabetic() && c != b'e' && c != b'E') =>
        {
            Err(format!("'{s}' is not an integer ({ty})"))
        }
        Ok(f) if f.fract() != 0.0 => Err(format!("{s} is not an integer ({ty})")),
        Ok(f) if f.abs() < EXACT_F64 => Ok(f as i64),
        Ok(_) => Err(format!("{s} is out of range for {ty}")),
        Err(_) => Err(format!("'{s}' is not an integer ({ty})")),
    }
}

/// A DOUBLE; a finite number too large for one is out of range, not
/// infinity (which must be written `Infinity`, `inf` or `-inf`).
fn double(s: &str) -> Result<f64, String> {
    let v = s
        .parse::<f64>()
        .map_err(|_| format!("'{s}' is not a number (DOUBLE)"))?;
    if v.is_infinite() {
        let word = s.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if word != "inf" && word != "infinity" {
            return Err(format!("{s} is out of range for DOUBLE"));
        }
    }
    Ok(v)
}

/// A timestamp: an ISO 8601 / RFC 3339 string (without a zone: UTC), or an
/// integer in the declared `unit`; nanoseconds since the epoch.
fn timestamp(s: &str, unit: Option<TimestampUnit>) -> Result<i64, String> {
    let integral = !s.is_empty()
        && s.strip_prefix('-')
            .unwrap_or(s)
            .bytes()
            .all(|c| c.is_ascii_digit());
    if integral {
        let Some(unit) = unit else {
            return Err(format!(
                "integer timestamp {s} has no unit: declare one with timestamp_unit=s|ms|us|ns, \
                 or write the time as text (2026-11-01T10:00:00Z)"
            ));
        };
        return s
            .parse::<i64>()
            .ok()
            .and_then(|v| v.checked_mul(unit.nanos()))
            .ok_or_else(|| format!("timestamp {s} is out of range (years 1677 to 2262)"));
    }
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s).map_err(|e| {
        let e = e.to_string();
        let e = e.strip_prefix("Parser error: ").unwrap_or(&e);
        format!("'{s}' is not a timestamp in range: {e}")
    })
}

#[cfg(test)]
mod tests;
