//! PostgreSQL's binary COPY format, as pgx's `CopyFrom`, pgjdbc's
//! `CopyManager` with `FORMAT binary` and psycopg's binary copies send it:
//! a signature, then per row a field count and each field as a length
//! (-1: NULL) and the value in the type's binary send format, then -1.
//!
//! A value's encoding depends on its type, which the client takes from the
//! column types the server describes, so each field is read as its
//! column's type: integers and floats big-endian, booleans one byte, text
//! as UTF-8, timestamps as microseconds and dates as days since
//! 2000-01-01. A field whose length does not fit its type, or a type
//! without a binary reading here, is an error naming the row and column.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, RecordBatch, StringBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use super::Decoded;

/// The 11 bytes every binary COPY starts with.
pub const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS as i64 * 86_400_000_000;

enum Column {
    Bool(BooleanBuilder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Text(StringBuilder),
    Date(Date32Builder),
    /// Microseconds since 1970, turned into the column's unit at the end.
    Timestamp(Int64Builder, TimeUnit, Option<Arc<str>>),
}

impl Column {
    fn new(t: &DataType) -> Result<Self, String> {
        Ok(match t {
            DataType::Boolean => Self::Bool(BooleanBuilder::new()),
            DataType::Int16 => Self::I16(Int16Builder::new()),
            DataType::Int32 => Self::I32(Int32Builder::new()),
            DataType::Int64 => Self::I64(Int64Builder::new()),
            DataType::Float32 => Self::F32(Float32Builder::new()),
            DataType::Float64 => Self::F64(Float64Builder::new()),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
                Self::Text(StringBuilder::new())
            }
            DataType::Date32 => Self::Date(Date32Builder::new()),
            DataType::Timestamp(unit, tz) => {
                Self::Timestamp(Int64Builder::new(), *unit, tz.clone())
            }
            other => {
                return Err(format!(
                    "binary COPY into a {other} column is not supported"
                ));
            }
        })
    }

    fn push_null(&mut self) {
        match self {
            Self::Bool(b) => b.append_null(),
            Self::I16(b) => b.append_null(),
            Self::I32(b) => b.append_null(),
            Self::I64(b) | Self::Timestamp(b, ..) => b.append_null(),
            Self::F32(b) => b.append_null(),
            Self::F64(b) => b.append_null(),
            Self::Text(b) => b.append_null(),
            Self::Date(b) => b.append_null(),
        }
    }

    /// Appends one value from its binary form; an error says what is wrong.
    fn push(&mut self, v: &[u8]) -> Result<(), String> {
        fn fixed<const N: usize>(v: &[u8], what: &str) -> Result<[u8; N], String> {
            v.try_into()
                .map_err(|_| format!("a {what} takes {N} bytes, got {}", v.len()))
        }
        match self {
            Self::Bool(b) => b.append_value(fixed::<1>(v, "boolean")?[0] != 0),
            Self::I16(b) => b.append_value(i16::from_be_bytes(fixed(v, "smallint")?)),
            Self::I32(b) => b.append_value(i32::from_be_bytes(fixed(v, "integer")?)),
            Self::I64(b) => b.append_value(i64::from_be_bytes(fixed(v, "bigint")?)),
            Self::F32(b) => b.append_value(f32::from_be_bytes(fixed(v, "real")?)),
            Self::F64(b) => b.append_value(f64::from_be_bytes(fixed(v, "double precision")?)),
            Self::Text(b) => b.append_value(
                std::str::from_utf8(v)
                    .map_err(|e| format!("invalid UTF-8 at byte {}", e.valid_up_to()))?,
            ),
            Self::Date(b) => {
                let days = i32::from_be_bytes(fixed(v, "date")?);
                b.append_value(days.checked_add(PG_EPOCH_DAYS).ok_or("date out of range")?)
            }
            Self::Timestamp(b, unit, _) => {
                let micros = i64::from_be_bytes(fixed(v, "timestamp")?)
                    .checked_add(PG_EPOCH_MICROS)
                    .ok_or("timestamp out of range")?;
                let value = match unit {
                    TimeUnit::Second => Some(micros.div_euclid(1_000_000)),
                    TimeUnit::Millisecond => Some(micros.div_euclid(1_000)),
                    TimeUnit::Microsecond => Some(micros),
                    TimeUnit::Nanosecond => micros.checked_mul(1_000),
                };
                b.append_value(value.ok_or("timestamp out of range for the column")?)
            }
        }
        Ok(())
    }

    fn finish(self) -> (DataType, ArrayRef) {
        match self {
            Self::Bool(mut b) => (DataType::Boolean, Arc::new(b.finish())),
            Self::I16(mut b) => (DataType::Int16, Arc::new(b.finish())),
            Self::I32(mut b) => (DataType::Int32, Arc::new(b.finish())),
            Self::I64(mut b) => (DataType::Int64, Arc::new(b.finish())),
            Self::F32(mut b) => (DataType::Float32, Arc::new(b.finish())),
            Self::F64(mut b) => (DataType::Float64, Arc::new(b.finish())),
            Self::Text(mut b) => (DataType::Utf8, Arc::new(b.finish())),
            Self::Date(mut b) => (DataType::Date32, Arc::new(b.finish())),
            Self::Timestamp(mut b, unit, tz) => {
                let t = DataType::Timestamp(unit, tz.clone());
                let values = b.finish();
                let array = arrow::compute::cast(&values, &t).expect("int64 to its timestamp");
                (t, array)
            }
        }
    }
}

/// Reads `n` bytes at `*at`, or says how far the data ran short.
fn take<'a>(data: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let end = at
        .checked_add(n)
        .filter(|&e| e <= data.len())
        .ok_or_else(|| {
            format!(
                "byte {}: the data ends inside a value ({n} bytes wanted)",
                *at
            )
        })?;
    let out = &data[*at..end];
    *at = end;
    Ok(out)
}

/// Decodes binary COPY data for `columns` of types `types` into one batch
/// (rows numbered from 1 in errors).
pub fn decode(columns: &[String], types: &[DataType], data: &[u8]) -> Result<Decoded, String> {
    let mut at = 0;
    if take(data, &mut at, SIGNATURE.len())? != SIGNATURE {
        return Err("byte 0: not binary COPY data (no PGCOPY signature)".into());
    }
    let _flags = take(data, &mut at, 4)?;
    let extension = u32::from_be_bytes(take(data, &mut at, 4)?.try_into().expect("4 bytes"));
    take(data, &mut at, extension as usize)?;
    let mut built: Vec<Column> = types.iter().map(Column::new).collect::<Result<_, _>>()?;
    let mut row = 0;
    // The data ends with a field count of -1, or (as PostgreSQL accepts,
    // and pgx sends) at a row's start.
    while at < data.len() {
        let count = i16::from_be_bytes(take(data, &mut at, 2)?.try_into().expect("2 bytes"));
        if count == -1 {
            break;
        }
        row += 1;
        if count as usize != columns.len() {
            return Err(format!(
                "row {row}: expected {} columns, got {count}",
                columns.len()
            ));
        }
        for (column, (name, b)) in columns.iter().zip(built.iter_mut()).enumerate() {
            let len = i32::from_be_bytes(take(data, &mut at, 4)?.try_into().expect("4 bytes"));
            if len == -1 {
                b.push_null();
                continue;
            }
            if len < 0 {
                return Err(format!(
                    "row {row}, column {} ({name}): field length {len}",
                    column + 1
                ));
            }
            let value = take(data, &mut at, len as usize)?;
            b.push(value)
                .map_err(|e| format!("row {row}, column {} ({name}): {e}", column + 1))?;
        }
    }
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns
        .iter()
        .zip(built)
        .map(|(name, b)| {
            let (t, a) = b.finish();
            (Field::new(name, t, true), a)
        })
        .unzip();
    let batch =
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| e.to_string())?;
    Ok(Decoded::unlined(vec![batch]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type, TimestampNanosecondType};

    fn field(out: &mut Vec<u8>, v: Option<&[u8]>) {
        match v {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }

    fn copy(rows: &[[Option<Vec<u8>>; 4]], trailer: bool) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        out.extend_from_slice(&[0; 8]);
        for row in rows {
            out.extend_from_slice(&4i16.to_be_bytes());
            for v in row {
                field(&mut out, v.as_deref());
            }
        }
        if trailer {
            out.extend_from_slice(&(-1i16).to_be_bytes());
        }
        out
    }

    fn columns() -> (Vec<String>, Vec<DataType>) {
        (
            ["ts", "n", "v", "host"].map(String::from).to_vec(),
            vec![
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                DataType::Int64,
                DataType::Float64,
                DataType::Utf8View,
            ],
        )
    }

    #[test]
    fn rows_are_read_as_their_columns_types_with_or_without_the_trailer() {
        // 2026-01-01 00:00:00.000001 as microseconds since 2000-01-01.
        let micros = 820_540_800_000_001i64;
        let rows = [
            [
                Some(micros.to_be_bytes().to_vec()),
                Some(42i64.to_be_bytes().to_vec()),
                Some(1.5f64.to_be_bytes().to_vec()),
                Some(b"web-1".to_vec()),
            ],
            [Some(0i64.to_be_bytes().to_vec()), None, None, None],
        ];
        let (names, types) = columns();
        for trailer in [true, false] {
            let decoded = decode(&names, &types, &copy(&rows, trailer)).unwrap();
            let b = &decoded.batches[0];
            assert_eq!(b.num_rows(), 2);
            let ts = b.column(0).as_primitive::<TimestampNanosecondType>();
            assert_eq!(ts.value(0), 1_767_225_600_000_001_000);
            assert_eq!(ts.value(1), PG_EPOCH_MICROS * 1000);
            assert_eq!(b.column(1).as_primitive::<Int64Type>().value(0), 42);
            assert!(b.column(1).is_null(1));
            assert_eq!(b.column(2).as_primitive::<Float64Type>().value(0), 1.5);
            assert_eq!(b.column(3).as_string::<i32>().value(0), "web-1");
        }
    }

    #[test]
    fn bad_data_is_named_by_row_column_or_byte() {
        let (names, types) = columns();
        let short = [[
            Some(vec![0; 8]),
            Some(vec![0; 4]),
            Some(vec![0; 8]),
            Some(b"x".to_vec()),
        ]];
        let e = decode(&names, &types, &copy(&short, true)).unwrap_err();
        assert_eq!(e, "row 1, column 2 (n): a bigint takes 8 bytes, got 4");
        let mut cut = copy(&short, true);
        cut.truncate(30);
        assert!(
            decode(&names, &types, &cut)
                .unwrap_err()
                .contains("ends inside a value")
        );
        assert!(
            decode(&names, &types, b"ts,n\n1,2\n3,4\n5,6\n")
                .unwrap_err()
                .contains("signature")
        );
        let e = decode(
            &names[..1],
            &[DataType::Decimal128(10, 2)],
            &copy(&[], true),
        )
        .unwrap_err();
        assert!(e.contains("not supported"), "{e}");
    }
}
