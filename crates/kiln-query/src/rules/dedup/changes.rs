//! Which rows of a column differ from the row before them.
//!
//! Why not arrow's `distinct` kernel on two offset slices: it compares
//! through a generic per-element closure, string views included; with the
//! dashboard's keys (`arm`, `user_id`, a day) it took 14% of a daily
//! active users query's CPU (docs/benchmark-history.md). Here a fixed-width column
//! compares its raw values as integers, and a string view compares its
//! 16-byte view first: views of strings up to 12 bytes hold the whole
//! string, so equal views are equal strings and unequal views unequal
//! ones; longer strings differ if their lengths or 4-byte prefixes do, and
//! only otherwise are their bytes compared. Other types use `distinct`.
//!
//! Equality is arrow's `distinct` semantics: nulls equal nulls, floats are
//! equal when their bits are (so `-0.0` differs from `0.0`, `NaN` equals
//! the same `NaN`).

use arrow::array::{Array, ArrayRef, AsArray, GenericByteViewArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::cmp::distinct;
use arrow::datatypes::{ArrowNativeType, BinaryViewType, ByteViewType, DataType, StringViewType};
use datafusion::common::Result;

/// Bit `i` set when row `i + 1` of `column` differs from row `i`
/// (`column.len() - 1` bits; `column` has at least two rows).
pub(super) fn changes(column: &ArrayRef) -> Result<BooleanBuffer> {
    let n = column.len() - 1;
    let values = match column.data_type() {
        DataType::Utf8View => views(column.as_byte_view::<StringViewType>()),
        DataType::BinaryView => views(column.as_byte_view::<BinaryViewType>()),
        // Fixed widths only: `None` for strings, nested types, dictionaries.
        t => match t.primitive_width() {
            Some(1) => raw::<u8>(column),
            Some(2) => raw::<u16>(column),
            Some(4) => raw::<u32>(column),
            Some(8) => raw::<u64>(column),
            Some(16) => raw::<u128>(column),
            _ => None,
        },
    };
    let Some(values) = values else {
        let differs = distinct(&column.slice(1, n), &column.slice(0, n))?;
        return Ok(differs.values().clone());
    };
    // Nulls equal nulls; a null differs from a value.
    Ok(match column.logical_nulls() {
        None => values,
        Some(nulls) => {
            let valid = nulls.inner();
            let (next, prev) = (valid.slice(1, n), valid.slice(0, n));
            let validity_changes = &next ^ &prev;
            let both_valid = &next & &prev;
            &validity_changes | &(&both_valid & &values)
        }
    })
}

/// Value changes of a fixed-width column of `T`-sized values, by bits.
fn raw<T: ArrowNativeType + PartialEq>(column: &ArrayRef) -> Option<BooleanBuffer> {
    let data = column.to_data();
    let buffer = data.buffers().first()?;
    let all: &[T] = buffer.typed_data::<T>();
    let v = all.get(data.offset()..data.offset() + data.len())?;
    Some(BooleanBuffer::collect_bool(v.len() - 1, |i| {
        v[i + 1] != v[i]
    }))
}

/// Value changes of a string or binary view column.
fn views<T: ByteViewType + ?Sized>(column: &GenericByteViewArray<T>) -> Option<BooleanBuffer> {
    let v = column.views();
    Some(BooleanBuffer::collect_bool(v.len() - 1, |i| {
        let (a, b) = (v[i + 1], v[i]);
        if a == b {
            // Equal views: equal inline strings, or the same bytes.
            return false;
        }
        let len = a as u32;
        // Lengths or prefixes differ, or a string fits inline (then the
        // whole string is in the view; were its zero padding not zero, a
        // repeat would only be kept). A null's view may be anything; its
        // answer is replaced from the null masks.
        if len != b as u32 || len <= 12 || (a >> 32) as u32 != (b >> 32) as u32 {
            return true;
        }
        if column.is_null(i) || column.is_null(i + 1) {
            return true;
        }
        // SAFETY: both rows are in bounds and valid.
        let (x, y): (&[u8], &[u8]) = unsafe {
            (
                column.value_unchecked(i + 1).as_ref(),
                column.value_unchecked(i).as_ref(),
            )
        };
        x != y
    }))
}

/// Rows that differ from the row before them on any of `keys`, as a
/// mask of `len - 1` bits (row 0 excluded), or `None` for fewer than two
/// rows.
pub(super) fn any_changes(keys: &[ArrayRef]) -> Result<Option<BooleanBuffer>> {
    let mut acc: Option<BooleanBuffer> = None;
    for key in keys.iter().filter(|k| k.len() > 1) {
        let c = changes(key)?;
        acc = Some(match acc {
            None => c,
            Some(a) => &a | &c,
        });
    }
    Ok(acc)
}
