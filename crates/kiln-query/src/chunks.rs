//! Results cut into pieces of bounded size before they are encoded as text
//! (HTTP's JSON, NDJSON and CSV, `COPY ... TO STDOUT`, and a query written
//! to a CSV or JSON file by `COPY ... TO`).
//!
//! Why: a batch can be small in memory and huge as text. A string view or
//! a dictionary shares one value between rows, so `SELECT <a 100 MB
//! constant> FROM t` holds the constant once per batch but writes it once
//! per row: encoded a batch at a time, 20 rows took 3 GiB and a batch of
//! 8,192 would take 800 GB. Cut into slices whose values take about
//! [`TARGET_BYTES`] (one row at least), each encoded piece is sent, and
//! the socket drained, before the next is written. Slicing copies nothing.
//! A file sink encodes many batches at once and queues their text (up to
//! a hundred, in DataFusion's writer) while the file is written: pieces
//! bound that queue too.

use std::ops::Range;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type,
    UInt64Type,
};
use futures::{Stream, StreamExt};

/// About how many bytes of values one piece holds (escaping may make its
/// text a few times larger).
pub const TARGET_BYTES: u64 = 1 << 20;

/// What a value of a fixed-width type is counted as (a number, a date or
/// a timestamp as text).
const FIXED_BYTES: u64 = 48;

/// `batches` with each batch cut into slices of about [`TARGET_BYTES`].
pub fn sliced<S, E>(batches: S) -> impl Stream<Item = Result<RecordBatch, E>> + Send
where
    S: Stream<Item = Result<RecordBatch, E>> + Send,
    E: Send,
{
    batches.flat_map(|batch| {
        let pieces: Vec<Result<RecordBatch, E>> = match batch {
            Ok(batch) => pieces(&batch, TARGET_BYTES)
                .into_iter()
                .map(|rows| Ok(batch.slice(rows.start, rows.len())))
                .collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(pieces)
    })
}

/// The row ranges `batch` is cut into: consecutive rows while their
/// values take at most `target` bytes, one row at least; the whole batch
/// (one range, even with no rows) when all of it fits.
pub fn pieces(batch: &RecordBatch, target: u64) -> Vec<Range<usize>> {
    let rows = batch.num_rows();
    let total: u64 = batch.columns().iter().map(column_bytes).sum();
    if total <= target {
        return std::iter::once(0..rows).collect();
    }
    let mut each = vec![0u64; rows];
    for column in batch.columns() {
        add_row_bytes(column, &mut each);
    }
    let mut out = vec![];
    let (mut start, mut bytes) = (0, 0u64);
    for (row, b) in each.into_iter().enumerate() {
        if row > start && bytes.saturating_add(b) > target {
            out.push(start..row);
            (start, bytes) = (row, 0);
        }
        bytes = bytes.saturating_add(b);
    }
    out.push(start..rows);
    out
}

/// All of a column's values' bytes, without a pass over its rows where
/// offsets give them (a dictionary's values counted for each row).
pub(crate) fn column_bytes(column: &ArrayRef) -> u64 {
    let rows = column.len() as u64;
    match column.data_type() {
        DataType::Utf8 => spread(column.as_string::<i32>().value_offsets()),
        DataType::LargeUtf8 => spread(column.as_string::<i64>().value_offsets()),
        DataType::Binary => spread(column.as_binary::<i32>().value_offsets()),
        DataType::LargeBinary => spread(column.as_binary::<i64>().value_offsets()),
        // A view's low 32 bits are its length.
        DataType::Utf8View => view_bytes(column.as_string_view().views()),
        DataType::BinaryView => view_bytes(column.as_binary_view().views()),
        DataType::Dictionary(..) => {
            let mut each = vec![0u64; column.len()];
            add_row_bytes(column, &mut each);
            each.iter().sum()
        }
        t if t.is_primitive() || t == &DataType::Boolean || t == &DataType::Null => {
            rows * FIXED_BYTES
        }
        _ => column.to_data().get_slice_memory_size().unwrap_or(0) as u64 + rows * FIXED_BYTES,
    }
}

/// The bytes between the first and last of `offsets`.
fn spread<O: arrow::datatypes::ArrowNativeType>(offsets: &[O]) -> u64 {
    match (offsets.first(), offsets.last()) {
        (Some(first), Some(last)) => (last.as_usize() - first.as_usize()) as u64,
        _ => 0,
    }
}

fn view_bytes(views: &[u128]) -> u64 {
    views.iter().map(|v| *v as u32 as u64).sum()
}

/// Adds each row's bytes of `column` to `each`.
fn add_row_bytes(column: &ArrayRef, each: &mut [u64]) {
    let add = |each: &mut [u64], len: &dyn Fn(usize) -> usize| {
        for (row, b) in each.iter_mut().enumerate() {
            *b += len(row) as u64;
        }
    };
    match column.data_type() {
        DataType::Utf8 => add(each, &|r| {
            column.as_string::<i32>().value_length(r) as usize
        }),
        DataType::LargeUtf8 => add(each, &|r| {
            column.as_string::<i64>().value_length(r) as usize
        }),
        DataType::Binary => add(each, &|r| {
            column.as_binary::<i32>().value_length(r) as usize
        }),
        DataType::LargeBinary => add(each, &|r| {
            column.as_binary::<i64>().value_length(r) as usize
        }),
        // A view's low 32 bits are its length.
        DataType::Utf8View => {
            let views = column.as_string_view().views();
            add(each, &|r| views[r] as u32 as usize);
        }
        DataType::BinaryView => {
            let views = column.as_binary_view().views();
            add(each, &|r| views[r] as u32 as usize);
        }
        DataType::Dictionary(key, _) => {
            let (keys, values) = dictionary_parts(column, key);
            let mut value_bytes = vec![0u64; values.len()];
            add_row_bytes(&values, &mut value_bytes);
            add(each, &|r| {
                let k = keys.get(r).copied().unwrap_or(0);
                value_bytes.get(k).copied().unwrap_or(0) as usize
            });
        }
        t if t.is_primitive() || t == &DataType::Boolean || t == &DataType::Null => {
            add(each, &|_| FIXED_BYTES as usize)
        }
        // Lists, structs, maps: their memory shared evenly by the rows.
        _ => {
            let share = column_bytes(column) / each.len().max(1) as u64;
            add(each, &|_| share as usize)
        }
    }
}

/// A dictionary's keys as indexes (a NULL key as 0) and its values.
fn dictionary_parts(column: &ArrayRef, key: &DataType) -> (Vec<usize>, ArrayRef) {
    macro_rules! parts {
        ($t:ty) => {{
            let d = column.as_dictionary::<$t>();
            let keys = d
                .keys()
                .iter()
                .map(|k| k.map_or(0, |k| k as usize))
                .collect();
            (keys, d.values().clone())
        }};
    }
    match key {
        DataType::Int8 => parts!(Int8Type),
        DataType::Int16 => parts!(Int16Type),
        DataType::Int32 => parts!(Int32Type),
        DataType::Int64 => parts!(Int64Type),
        DataType::UInt8 => parts!(UInt8Type),
        DataType::UInt16 => parts!(UInt16Type),
        DataType::UInt32 => parts!(UInt32Type),
        DataType::UInt64 => parts!(UInt64Type),
        _ => (vec![0; column.len()], column.slice(0, 0)),
    }
}

#[cfg(test)]
mod tests;
