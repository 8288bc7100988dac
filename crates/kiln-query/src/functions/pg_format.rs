//! PostgreSQL's spelling of the time functions dashboards use:
//!
//! - `to_char(timestamp, 'YYYY-MM-DD HH24:MI:SS')`,
//!   `to_timestamp(text, 'YYYY-MM-DD HH24:MI:SS.US')` and
//!   `to_date(text, 'YYYY-MM-DD')` with PostgreSQL's template patterns
//!   (DataFusion's take strftime patterns; a format containing `%` is
//!   still passed through as one). Superset writes every time filter on a
//!   PostgreSQL database with the last two;
//! - `time_bucket(interval, timestamp)`, TimescaleDB's name for
//!   DataFusion's `date_bin`, with TimescaleDB's origin (Monday
//!   2000-01-03), so weekly buckets start on Mondays.
//!
//! Each wraps the session's own function, keeping its signature, coercions,
//! return type and volatility (so a call on constants is still folded into
//! a constant when a query is planned).

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// The wrapped functions over the session's `to_char`, `to_timestamp`,
/// `to_date` and `date_bin`.
pub fn wrap(registered: impl Fn(&str) -> Option<std::sync::Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = vec![];
    for name in ["to_char", "to_timestamp", "to_date"] {
        if let Some(inner) = registered(name) {
            out.push(super::udf(PgPatterns {
                inner: inner.as_ref().clone(),
            }));
        }
    }
    if let Some(inner) = registered("date_bin") {
        out.push(super::udf(TimeBucket {
            inner: inner.as_ref().clone(),
        }));
    }
    out
}

/// PostgreSQL template patterns and their strftime forms, longest first
/// where one is a prefix of another (the first that matches is taken).
const PATTERNS: &[(&str, &str)] = &[
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MS", "%3f"),
    ("US", "%6f"),
    ("YYYY", "%Y"),
    ("YY", "%y"),
    ("MONTH", "%B"),
    ("Month", "%B"),
    ("month", "%B"),
    ("MON", "%b"),
    ("Mon", "%b"),
    ("mon", "%b"),
    ("MM", "%m"),
    ("DAY", "%A"),
    ("Day", "%A"),
    ("day", "%A"),
    ("DY", "%a"),
    ("Dy", "%a"),
    ("dy", "%a"),
    ("DDD", "%j"),
    ("DD", "%d"),
    ("IW", "%V"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("am", "%P"),
    ("pm", "%P"),
    ("TZ", "%Z"),
    ("OF", "%:z"),
    // Numeric fields in lower case, as PostgreSQL accepts them.
    ("hh24", "%H"),
    ("hh12", "%I"),
    ("hh", "%I"),
    ("mi", "%M"),
    ("ss", "%S"),
    ("ms", "%3f"),
    ("us", "%6f"),
    ("yyyy", "%Y"),
    ("yy", "%y"),
    ("mm", "%m"),
    ("ddd", "%j"),
    ("dd", "%d"),
    ("iw", "%V"),
];

/// `pattern` (PostgreSQL's template patterns) as a strftime format: `FM`
/// drops the padding of the next field, `"..."` is literal text, any
/// other character stands for itself.
pub fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut rest = pattern;
    let mut fill_mode = false;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("FM") {
            fill_mode = true;
            rest = r;
            continue;
        }
        if let Some(r) = rest.strip_prefix('"') {
            let end = r.find('"').unwrap_or(r.len());
            out.push_str(&r[..end].replace('%', "%%"));
            rest = r.get(end + 1..).unwrap_or("");
            continue;
        }
        if let Some((pg, strf)) = PATTERNS.iter().find(|(pg, _)| rest.starts_with(pg)) {
            match (fill_mode, strf.as_bytes()) {
                // `%-d`: no padding, for the numeric fields.
                (true, [b'%', c]) if b"dmHIMSjV".contains(c) => {
                    out.push_str("%-");
                    out.push(*c as char);
                }
                _ => out.push_str(strf),
            }
            fill_mode = false;
            rest = &rest[pg.len()..];
            continue;
        }
        let c = rest.chars().next().expect("not empty");
        match c {
            '%' => out.push_str("%%"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A function whose formats (every argument after the first, when a
/// constant) may be PostgreSQL's template patterns.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgPatterns {
    inner: ScalarUDF,
}

impl ScalarUDFImpl for PgPatterns {
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
    /// `to_timestamp`'s type follows the session's time zone.
    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let inner = self.inner.inner().with_updated_config(config)?;
        Some(super::udf(PgPatterns { inner }))
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        for format in args.args.iter_mut().skip(1) {
            let ColumnarValue::Scalar(format) = format else {
                continue;
            };
            let pg = match format {
                ScalarValue::Utf8(Some(f))
                | ScalarValue::LargeUtf8(Some(f))
                | ScalarValue::Utf8View(Some(f)) => (!f.contains('%')).then(|| translate(f)),
                _ => None,
            };
            if let Some(strftime) = pg {
                *format = ScalarValue::Utf8(Some(strftime));
            }
        }
        self.inner.invoke_with_args(args)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TimeBucket {
    inner: ScalarUDF,
}

/// TimescaleDB's default origin, 2000-01-03 00:00:00 (a Monday), in
/// nanoseconds since the epoch.
pub(crate) const TIME_BUCKET_ORIGIN_NS: i64 = 946_857_600_000_000_000;

impl ScalarUDFImpl for TimeBucket {
    fn name(&self) -> &str {
        "time_bucket"
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.len() != 2 {
            return exec_err!("time_bucket(interval, timestamp) takes two arguments");
        }
        let origin = match args.args[1].data_type() {
            DataType::Timestamp(unit, tz) => {
                let ns = ScalarValue::TimestampNanosecond(Some(TIME_BUCKET_ORIGIN_NS), tz.clone());
                ns.cast_to(&DataType::Timestamp(unit, tz))?
            }
            other => return exec_err!("time_bucket needs a timestamp, not {other}"),
        };
        args.arg_fields
            .push(std::sync::Arc::new(arrow::datatypes::Field::new(
                "origin",
                origin.data_type(),
                false,
            )));
        args.args.push(ColumnarValue::Scalar(origin));
        self.inner.invoke_with_args(args)
    }
}
