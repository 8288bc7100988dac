//! What admin tools and health checks ask a server about itself:
//! `pg_size_pretty(bytes)`, `pg_database_size(name | oid)`,
//! `pg_relation_size`, `pg_total_relation_size` and `pg_table_size`
//! (`oid | name`), and `pg_postmaster_start_time()`.
//!
//! Why: pgAdmin's dashboard, DBeaver's database view and monitoring
//! scripts call these when they connect; without them the call failed
//! with 42883 and the tool showed an error where a size or an uptime
//! belongs. The answers are Kiln's own: a database's size is the bytes of
//! every table's segments (the Parquet files flushed to storage; rows
//! still in memory and the WAL are not counted, as PostgreSQL does not
//! count its WAL), a table's size is the bytes of its own segments, the
//! start time is when the server set up its catalog.
//!
//! A table's oid is the one pg_catalog gives it in `pg_class`, which keeps
//! those numbers to itself: [`Oids`] is filled each time a query reads
//! `pg_class` (as `c.oid` in pgAdmin's and DBeaver's table lists, or the
//! subquery a `'t'::regclass` becomes), before its rows go on, so every
//! oid the query can see is known when the size functions run on it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use kiln_storage::Db;

/// Registers the functions over `db`, tables' oids read from `oids`.
pub fn register(ctx: &SessionContext, db: Db, oids: Arc<Oids>) {
    ctx.register_udf(size_pretty());
    ctx.register_udf(database_size(db.clone()));
    ctx.register_udf(start_time(SystemTime::now()));
    for name in RELATION_SIZES {
        ctx.register_udf(relation_size(name, db.clone(), oids.clone()));
    }
}

/// The relation size functions: each a table's segment bytes (Kiln keeps
/// no indexes, TOAST or free-space maps beside them).
const RELATION_SIZES: [&str; 3] = [
    "pg_relation_size",
    "pg_total_relation_size",
    "pg_table_size",
];

/// Tables by the oid pg_catalog gives them in `pg_class`: (schema, name).
#[derive(Debug, Default)]
pub struct Oids {
    tables: parking_lot::RwLock<HashMap<i64, (String, String)>>,
}

impl Oids {
    /// Learns the oids of `pg_class`'s rows, their schemas named by
    /// `pg_namespace`'s.
    pub(super) fn learn(&self, class: &[RecordBatch], namespace: &[RecordBatch]) -> Result<()> {
        let mut schemas = HashMap::new();
        for b in namespace {
            let (oids, names) = (int_column(b, "oid")?, text_column(b, "nspname")?);
            for (oid, name) in oids.into_iter().zip(names) {
                if let (Some(oid), Some(name)) = (oid, name) {
                    schemas.insert(oid, name.to_string());
                }
            }
        }
        let mut tables = HashMap::new();
        for b in class {
            let oids = int_column(b, "oid")?;
            let names = text_column(b, "relname")?;
            let spaces = int_column(b, "relnamespace")?;
            for i in 0..b.num_rows() {
                if let (Some(oid), Some(name), Some(schema)) = (
                    oids.get(i).copied().flatten(),
                    names.get(i).copied().flatten(),
                    spaces
                        .get(i)
                        .copied()
                        .flatten()
                        .and_then(|s| schemas.get(&s)),
                ) {
                    tables.insert(oid, (schema.clone(), name.to_string()));
                }
            }
        }
        *self.tables.write() = tables;
        Ok(())
    }
}

/// An integer column (an oid) of `batch` as `i64`s.
fn int_column(batch: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no column {name}")))?;
    int_values(column)
}

/// A text column of `batch`.
fn text_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<Vec<Option<&'a str>>> {
    let column = batch
        .column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no text {name}")))?;
    Ok(column.iter().collect())
}

/// One of [`RELATION_SIZES`]: the segment bytes of the table named by its
/// oid or its name (`'t'`, `'s.t'`); 0 for what Kiln keeps no segments
/// of (catalog tables, views), NULL for an oid no table has, as
/// PostgreSQL answers a dropped one, an error for a name no table has. A second argument (a fork) is taken,
/// as PostgreSQL's `pg_relation_size(rel, 'main')`.
fn relation_size(name: &'static str, db: Db, oids: Arc<Oids>) -> ScalarUDF {
    let mut forms = Vec::new();
    for t in [
        DataType::Utf8,
        DataType::Int64,
        DataType::Int32,
        DataType::UInt32,
    ] {
        forms.push(TypeSignature::Exact(vec![t.clone()]));
        forms.push(TypeSignature::Exact(vec![t, DataType::Utf8]));
    }
    let signature = Signature::one_of(forms, Volatility::Volatile);
    let fun = Arc::new(move |args: &[ColumnarValue]| {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        // None: no such table of Kiln's.
        let bytes = |schema: &str, table: &str| -> Option<i64> {
            if schema != kiln_query::SCHEMA {
                return Some(0);
            }
            let manifest = db.table(table)?.mem.manifest();
            Some(manifest.segments.iter().map(|s| s.meta.bytes as i64).sum())
        };
        let sizes: Int64Array = if let Some(names) = arrays[0].as_string_opt::<i32>() {
            let mut sizes = Vec::new();
            for n in names.iter() {
                let Some(n) = n else {
                    sizes.push(None);
                    continue;
                };
                let (schema, table) = n.split_once('.').unwrap_or((kiln_query::SCHEMA, n));
                match bytes(schema, table) {
                    Some(b) => sizes.push(Some(b)),
                    None => return exec_err!("relation \"{n}\" does not exist"),
                }
            }
            sizes.into_iter().collect()
        } else {
            let known = oids.tables.read();
            int_values(&arrays[0])?
                .into_iter()
                .map(|oid| {
                    let (schema, table) = known.get(&oid?)?;
                    bytes(schema, table)
                })
                .collect()
        };
        Ok(ColumnarValue::Array(Arc::new(sizes) as ArrayRef))
    });
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        name,
        signature,
        DataType::Int64,
        fun,
    ))
}

/// An integer argument's values as `i64`s.
fn int_values(array: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let array = arrow::compute::cast(array, &DataType::Int64)?;
    Ok(array.as_primitive::<Int64Type>().iter().collect())
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
