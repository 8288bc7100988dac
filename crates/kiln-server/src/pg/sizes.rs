//! What admin tools and health checks ask a server about itself:
//! `pg_size_pretty(bytes)`, `pg_database_size(name | oid)` and
//! `pg_postmaster_start_time()`.
//!
//! Why: pgAdmin's dashboard, DBeaver's database view and monitoring
//! scripts call these when they connect; without them the call failed
//! with 42883 and the tool showed an error where a size or an uptime
//! belongs. The answers are Kiln's own: a database's size is the bytes of
//! every table's segments (the Parquet files flushed to storage; rows
//! still in memory and the WAL are not counted, as PostgreSQL does not
//! count its WAL), the start time is when the server set up its catalog.

use std::sync::Arc;
use std::time::SystemTime;

use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use kiln_storage::Db;

/// Registers the three functions over `db`.
pub fn register(ctx: &SessionContext, db: Db) {
    ctx.register_udf(size_pretty());
    ctx.register_udf(database_size(db));
    ctx.register_udf(start_time(SystemTime::now()));
}

/// `pg_size_pretty(bigint)`: PostgreSQL's text for a size in bytes.
fn size_pretty() -> ScalarUDF {
    let signature = Signature::uniform(1, vec![DataType::Int64], Volatility::Immutable);
    let fun = Arc::new(|args: &[ColumnarValue]| {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let sizes = arrays[0].as_primitive::<Int64Type>();
        let text: StringArray = sizes.iter().map(|s| s.map(pretty)).collect();
        Ok(ColumnarValue::Array(Arc::new(text) as ArrayRef))
    });
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_size_pretty",
        signature,
        DataType::Utf8,
        fun,
    ))
}

/// Units of [`pretty`]: name, the size below which it is used, whether
/// the value is rounded half away from zero, and its bits.
const UNITS: [(&str, u64, bool, u32); 6] = [
    ("bytes", 10 * 1024, false, 0),
    ("kB", 20 * 1024 - 1, true, 10),
    ("MB", 20 * 1024 - 1, true, 20),
    ("GB", 20 * 1024 - 1, true, 30),
    ("TB", 20 * 1024 - 1, true, 40),
    ("PB", 20 * 1024 - 1, true, 50),
];

/// PostgreSQL's `pg_size_pretty`: the largest unit that keeps the value
/// under its limit, rounding half away from zero from kB on (one bit
/// fewer is shifted off to round with).
fn pretty(bytes: i64) -> String {
    let mut size = bytes;
    for (i, &(name, limit, round, bits)) in UNITS.iter().enumerate() {
        let last = i + 1 == UNITS.len();
        if last || size.unsigned_abs() < limit {
            if round {
                size = (size + if size < 0 { -1 } else { 1 }) / 2;
            }
            return format!("{size} {name}");
        }
        let (_, _, next_round, next_bits) = UNITS[i + 1];
        let shift = next_bits - bits - u32::from(next_round) + u32::from(round);
        size /= 1 << shift;
    }
    unreachable!("the last unit is always used")
}

/// `pg_database_size(name | oid)`: the bytes of every table's segments.
/// Kiln serves one database; another name is an error, as in PostgreSQL.
fn database_size(db: Db) -> ScalarUDF {
    let signature = Signature::one_of(
        vec![
            TypeSignature::Exact(vec![DataType::Utf8]),
            TypeSignature::Exact(vec![DataType::Int64]),
            TypeSignature::Exact(vec![DataType::Int32]),
            TypeSignature::Exact(vec![DataType::UInt32]),
        ],
        Volatility::Volatile,
    );
    let fun = Arc::new(move |args: &[ColumnarValue]| {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        if let Some(names) = arrays[0].as_string_opt::<i32>()
            && let Some(other) = names.iter().flatten().find(|n| *n != kiln_query::CATALOG)
        {
            return exec_err!(
                "database \"{other}\" does not exist (this server has one, \"{}\")",
                kiln_query::CATALOG
            );
        }
        let bytes: i64 = db
            .tables()
            .iter()
            .flat_map(|t| t.mem.manifest().segments.clone())
            .map(|s| s.meta.bytes as i64)
            .sum();
        let n = arrays[0].len();
        let sizes: Int64Array = (0..n)
            .map(|i| arrays[0].is_valid(i).then_some(bytes))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(sizes) as ArrayRef))
    });
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_database_size",
        signature,
        DataType::Int64,
        fun,
    ))
}

/// `pg_postmaster_start_time()`: when the server started, in UTC.
fn start_time(at: SystemTime) -> ScalarUDF {
    let micros = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let value = ScalarValue::TimestampMicrosecond(Some(micros), Some("+00:00".into()));
    let signature = Signature::exact(vec![], Volatility::Stable);
    let fun = Arc::new(move |_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(value.clone())));
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_postmaster_start_time",
        signature,
        DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        fun,
    ))
}

#[cfg(test)]
mod tests;
