//! Table definitions: the column types Kiln stores, the time column that
//! partitions rows by day, and validation of incoming rows against them.
//!
//! Validation happens once, before a write reaches the WAL, so a bad row is
//! rejected with its row and column named and nothing of its batch applied.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{CastOptions, cast_with_options, take_record_batch};
use arrow::datatypes::{
    DataType, Date32Type, Field, Schema, SchemaRef, TimeUnit, TimestampNanosecondType,
};
use chrono::Datelike;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Nanoseconds in one day: partitions are UTC days of the time column.
pub const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// The column types a Kiln table may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    Boolean,
    Int,
    Bigint,
    Double,
    Varchar,
    Date,
    Timestamp,
}

impl ColumnType {
    /// The Arrow type used in memory and in Parquet.
    pub fn arrow_type(self) -> DataType {
        match self {
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Int => DataType::Int32,
            ColumnType::Bigint => DataType::Int64,
            ColumnType::Double => DataType::Float64,
            ColumnType::Varchar => DataType::Utf8,
            ColumnType::Date => DataType::Date32,
            ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
        }
    }

    /// Parses a SQL type name (case-insensitive, parameters ignored).
    pub fn from_sql(name: &str) -> Option<Self> {
        let base = name
            .split('(')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_uppercase();
        Some(match base.as_str() {
            "BOOLEAN" | "BOOL" => ColumnType::Boolean,
            "INT" | "INTEGER" | "INT4" | "SMALLINT" | "INT2" | "TINYINT" => ColumnType::Int,
            "BIGINT" | "INT8" | "LONG" => ColumnType::Bigint,
            "DOUBLE" | "DOUBLE PRECISION" | "FLOAT" | "FLOAT8" | "REAL" | "FLOAT4" => {
                ColumnType::Double
            }
            "VARCHAR" | "TEXT" | "STRING" | "CHAR" | "CHARACTER VARYING" | "CHARACTER" => {
                ColumnType::Varchar
            }
            "DATE" => ColumnType::Date,
            "TIMESTAMP" | "TIMESTAMP WITHOUT TIME ZONE" | "DATETIME" => ColumnType::Timestamp,
            _ => return None,
        })
    }

    /// The SQL name shown in `system.tables` and error messages.
    pub fn sql_name(self) -> &'static str {
        match self {
            ColumnType::Boolean => "BOOLEAN",
            ColumnType::Int => "INT",
            ColumnType::Bigint => "BIGINT",
            ColumnType::Double => "DOUBLE",
            ColumnType::Varchar => "VARCHAR",
            ColumnType::Date => "DATE",
            ColumnType::Timestamp => "TIMESTAMP",
        }
    }
}

/// One column of a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    pub nullable: bool,
}

/// A table's persisted definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Never reused, so WAL records of a dropped table are never replayed into a new one.
    pub id: u64,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Index of the time column in `columns` (a NOT NULL TIMESTAMP).
    pub time_column: usize,
    /// Columns segments are sorted by, before the time column.
    pub sort_key: Vec<usize>,
}

/// Most columns a table may have (PostgreSQL's limit). Queries plan their
/// select lists in time that grows with the square of their length, and
/// `SELECT *` lists every column.
pub const MAX_COLUMNS: usize = 1600;

impl TableDef {
    /// Builds a definition, choosing the time column: the one named by
    /// `time_column`, else the first `NOT NULL` TIMESTAMP column.
    pub fn new(
        id: u64,
        name: &str,
        columns: Vec<ColumnDef>,
        time_column: Option<&str>,
        sort_key: &[String],
    ) -> Result<Self> {
        if columns.is_empty() {
            return Err(Error::InvalidSchema(format!(
                "table '{name}' has no columns"
            )));
        }
        if columns.len() > MAX_COLUMNS {
            return Err(Error::InvalidSchema(format!(
                "tables can have at most {MAX_COLUMNS} columns: table '{name}' has {}",
                columns.len()
            )));
        }
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].iter().any(|o| o.name == c.name) {
                return Err(Error::InvalidSchema(format!(
                    "column '{}' is defined twice",
                    c.name
                )));
            }
        }
        let find = |col: &str| {
            columns.iter().position(|c| c.name == col).ok_or_else(|| {
                Error::InvalidSchema(format!("table '{name}' has no column '{col}'"))
            })
        };
        let time_column = match time_column {
            Some(col) => {
                let i = find(col)?;
                let c = &columns[i];
                if c.ty != ColumnType::Timestamp || c.nullable {
                    return Err(Error::InvalidSchema(format!(
                        "time column '{col}' must be TIMESTAMP NOT NULL, it is {}{}",
                        c.ty.sql_name(),
                        if c.nullable { " NULL" } else { "" }
                    )));
                }
                i
            }
            None => columns
                .iter()
                .position(|c| c.ty == ColumnType::Timestamp && !c.nullable)
                .ok_or_else(|| {
                    Error::InvalidSchema(format!(
                        "table '{name}' needs a time column: declare a TIMESTAMP NOT NULL column \
                         (or name one with WITH (time_column = '...'))"
                    ))
                })?,
        };
        let sort_key = sort_key
            .iter()
            .map(|c| find(c))
            .collect::<Result<Vec<_>>>()?;
        if sort_key.contains(&time_column) {
            return Err(Error::InvalidSchema(
                "the time column is always the last sort key; leave it out of sort_key".into(),
            ));
        }
        Ok(Self {
            id,
            name: name.to_string(),
            columns,
            time_column,
            sort_key,
        })
    }

    /// The Arrow schema of the table.
    pub fn arrow_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| Field::new(&c.name, c.ty.arrow_type(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }

    pub fn time_column_name(&self) -> &str {
        &self.columns[self.time_column].name
    }
}

/// Checks a batch against the table and returns it in the table's exact
/// schema: columns matched by name (missing nullable columns become NULL),
/// values cast where lossless casting is possible, NOT NULL enforced.
/// `row_offset` is added to row numbers in errors (1-based rows).
pub fn conform(
    def: &TableDef,
    schema: &SchemaRef,
    batch: &RecordBatch,
    row_offset: usize,
    max_row_bytes: usize,
) -> Result<RecordBatch> {
    let in_schema = batch.schema();
    for f in in_schema.fields() {
        if schema.field_with_name(f.name()).is_err() {
            return Err(Error::data(format!(
                "table '{}' has no column '{}'",
                def.name,
                f.name()
            )));
        }
    }
    let opts = CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let col = match in_schema.index_of(field.name()) {
            Ok(i) => {
                let col = batch.column(i);
                if col.data_type() == field.data_type() {
                    col.clone()
                } else {
                    cast_column(col, field, &opts, row_offset)?
                }
            }
            Err(_) => arrow::array::new_null_array(field.data_type(), batch.num_rows()),
        };
        if !field.is_nullable() && col.null_count() > 0 {
            let row = (0..col.len()).find(|&r| col.is_null(r)).unwrap_or(0);
            return Err(Error::NotNull {
                row: row_offset + row + 1,
                column: field.name().clone(),
                time: field.name() == def.time_column_name(),
            });
        }
        columns.push(col);
    }
    let out = RecordBatch::try_new(schema.clone(), columns)?;
    check_row_size(&out, row_offset, max_row_bytes)?;
    check_dates(&out, row_offset)?;
    Ok(out)
}

/// Refuses a DATE past the years a date can be shown in (about 262,000
/// either way): stored, it could never be read back. A text date cannot
/// be one; a number of days (NDJSON, Arrow) can.
fn check_dates(batch: &RecordBatch, row_offset: usize) -> Result<()> {
    let epoch = chrono::NaiveDate::default();
    let days = |d: chrono::NaiveDate| (d - epoch).num_days();
    let range = days(chrono::NaiveDate::MIN)..=days(chrono::NaiveDate::MAX);
    let fits = |v: Option<i32>| v.is_none_or(|v| range.contains(&i64::from(v)));
    for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let Some(dates) = col.as_primitive_opt::<Date32Type>() else {
            continue;
        };
        if fits(arrow::compute::min(dates)) && fits(arrow::compute::max(dates)) {
            continue;
        }
        let Some(row) =
            (0..dates.len()).find(|&r| dates.is_valid(r) && !fits(Some(dates.value(r))))
        else {
            continue;
        };
        return Err(Error::row(
            row_offset + row + 1,
            format!(
                "column '{}': date {} days from 1970-01-01 is out of range (years {} to {})",
                field.name(),
                dates.value(row),
                chrono::NaiveDate::MIN.year(),
                chrono::NaiveDate::MAX.year(),
            ),
        ));
    }
    Ok(())
}

fn cast_column(
    col: &ArrayRef,
    field: &Field,
    opts: &CastOptions,
    row_offset: usize,
) -> Result<ArrayRef> {
    let from = col.data_type().clone();
    if let Some(text) = col.as_string_opt::<i32>()
        && crate::strict::reads_as_text(field.data_type())
    {
        return crate::strict::convert(text, field.data_type(), None).map_err(|u| {
            Error::row(
                row_offset + u.row + 1,
                format!("column '{}': {}", field.name(), u.msg),
            )
        });
    }
    if from.is_integer() && matches!(field.data_type(), DataType::Timestamp(..)) {
        return Err(Error::row(
            row_offset + 1,
            format!(
                "column '{}': an integer column has no timestamp unit; send a timestamp column",
                field.name()
            ),
        ));
    }
    let castable = arrow::compute::can_cast_types(&from, field.data_type());
    let res = if castable {
        cast_with_options(col, field.data_type(), opts).ok()
    } else {
        None
    };
    match res {
        Some(a) if from.is_numeric() && field.data_type().is_numeric() => {
            exact(col, a, field, row_offset)
        }
        Some(a) => Ok(a),
        None => {
            // Find the first row that does not convert, to name it.
            let row = (0..col.len())
                .find(|&r| {
                    !castable
                        || cast_with_options(&col.slice(r, 1), field.data_type(), opts).is_err()
                })
                .unwrap_or(0);
            let value = arrow::util::display::array_value_to_string(col, row).unwrap_or_default();
            Err(Error::row(
                row_offset + row + 1,
                format!(
                    "column '{}' expects {}, got {from} value '{value}'",
                    field.name(),
                    field.data_type()
                ),
            ))
        }
    }
}

/// `cast` (`col` cast to a numeric `field`) if it holds the same numbers:
/// a fraction cast to an integer, or an integer too large for a DOUBLE to
/// hold exactly, names its row instead of being stored changed.
fn exact(col: &ArrayRef, cast: ArrayRef, field: &Field, row_offset: usize) -> Result<ArrayRef> {
    let back = cast_with_options(&cast, col.data_type(), &CastOptions::default())?;
    let same = arrow::compute::kernels::cmp::not_distinct(col, &back)?;
    match (0..same.len()).find(|&r| !same.value(r)) {
        None => Ok(cast),
        Some(row) => {
            let value = arrow::util::display::array_value_to_string(col, row).unwrap_or_default();
            Err(Error::row(
                row_offset + row + 1,
                format!(
                    "column '{}': {value} does not fit {} exactly",
                    field.name(),
                    field.data_type()
                ),
            ))
        }
    }
}

fn check_row_size(batch: &RecordBatch, row_offset: usize, max_row_bytes: usize) -> Result<()> {
    let strings: Vec<_> = batch
        .columns()
        .iter()
        .filter_map(|c| c.as_string_opt::<i32>())
        .collect();
    let total: usize = strings.iter().map(|s| s.value_data().len()).sum();
    if total <= max_row_bytes {
        return Ok(());
    }
    for row in 0..batch.num_rows() {
        let size: usize = strings.iter().map(|s| s.value_length(row) as usize).sum();
        if size > max_row_bytes {
            return Err(Error::row(
                row_offset + row + 1,
                format!("row is {size} bytes, above the limit of {max_row_bytes} bytes"),
            ));
        }
    }
    Ok(())
}

/// Splits a conformed batch by UTC day of the time column: `(day, rows)`
/// with days as days since the Unix epoch, in ascending order.
pub fn split_by_day(batch: &RecordBatch, time_column: usize) -> Result<Vec<(i32, RecordBatch)>> {
    let ts = batch
        .column(time_column)
        .as_primitive::<TimestampNanosecondType>();
    let day = |v: i64| v.div_euclid(NANOS_PER_DAY) as i32;
    let values = ts.values();
    let Some(&first) = values.first() else {
        return Ok(vec![]);
    };
    let d0 = day(first);
    if values.iter().all(|&v| day(v) == d0) {
        return Ok(vec![(d0, batch.clone())]);
    }
    let mut by_day: std::collections::BTreeMap<i32, Vec<u32>> = Default::default();
    for (i, &v) in values.iter().enumerate() {
        by_day.entry(day(v)).or_default().push(i as u32);
    }
    by_day
        .into_iter()
        .map(|(d, idx)| Ok((d, take_record_batch(batch, &UInt32Array::from(idx))?)))
        .collect()
}

/// `YYYY-MM-DD` of a partition day.
/// `schema` with its `Utf8` columns as `Utf8View`: the form queries read
/// (Parquet pages decode straight into views, and DataFusion compares and
/// groups views faster). Files and the memstore keep plain `Utf8`.
pub fn view_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8View)),
            _ => f.clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

pub fn day_string(day: i32) -> String {
    chrono::DateTime::from_timestamp(day as i64 * 86_400, 0)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| format!("day{day}"))
}

#[cfg(test)]
mod tests;
