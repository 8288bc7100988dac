//! The active buffer: small, mutable, append-only column buffers.
//!
//! Appends copy whole Arrow arrays into typed vectors pre-sized from what the
//! previous buffer of the same day held (row count and string bytes, so a
//! steady stream does not re-grow them), or else from the first rows
//! appended (a day written once reserves no more than it holds). Readers
//! never lock it for long: [`ActiveBuffer::snapshot`] moves the rows
//! appended since the last snapshot out of the vectors into an immutable
//! batch (the vectors become its buffers, uncopied), merged with the
//! smaller batches before it, so a row is copied a logarithmic number of
//! times and a snapshot never copies more than the buffer. Each row is
//! held once: in the vectors until a reader sees it, in a batch from then
//! on.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::MemBatch;
use arrow::array::BooleanBufferBuilder;
use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, PrimitiveArray, RecordBatch,
    StringArray,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::concat_batches;
use arrow::datatypes::{
    ArrowNativeType, DataType, Date32Type, Float64Type, Int32Type, Int64Type, SchemaRef,
    TimestampNanosecondType,
};

/// Validity bits, created only once a NULL arrives.
#[derive(Debug, Default)]
struct Validity(Option<BooleanBufferBuilder>);

impl Validity {
    fn append(&mut self, len_before: usize, nulls: Option<&NullBuffer>, n: usize) {
        match (nulls, &mut self.0) {
            (None, None) => {}
            (None, Some(b)) => b.append_n(n, true),
            (Some(nb), slot) => {
                let b = slot.get_or_insert_with(|| {
                    let mut b = BooleanBufferBuilder::new(len_before + n);
                    b.append_n(len_before, true);
                    b
                });
                b.append_buffer(nb.inner());
            }
        }
    }

    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |b| b.capacity() / 8)
    }

    /// The bits appended, leaving none.
    fn take(&mut self) -> Option<NullBuffer> {
        let bits = self.0.take()?.finish();
        Some(NullBuffer::new(bits)).filter(|n| n.null_count() > 0)
    }
}

#[derive(Debug)]
enum Column {
    Bool(BooleanBufferBuilder, Validity),
    I32(Vec<i32>, Validity),
    I64(Vec<i64>, Validity),
    F64(Vec<f64>, Validity),
    Date(Vec<i32>, Validity),
    Ts(Vec<i64>, Validity),
    Utf8 {
        offsets: Vec<i32>,
        data: Vec<u8>,
        validity: Validity,
    },
}

/// `v`'s values as a buffer, `v` left empty with room for as many: the
/// vector becomes the buffer, uncopied unless its room exceeds its values
/// by more than an eighth (growth slack, a pre-sized vector read early),
/// which a batch would keep for its life.
fn moved<T: ArrowNativeType>(v: &mut Vec<T>) -> Buffer {
    let mut out = std::mem::replace(v, Vec::with_capacity(v.len()));
    if out.capacity() > out.len() + out.len() / 8 {
        out.shrink_to_fit();
    }
    Buffer::from_vec(out)
}

fn prim<T: ArrowPrimitiveType>(v: &mut Vec<T::Native>, n: &mut Validity) -> ArrayRef {
    let len = v.len();
    Arc::new(PrimitiveArray::<T>::new(
        ScalarBuffer::new(moved(v), 0, len),
        n.take(),
    ))
}

impl Column {
    fn new(dt: &DataType, rows: usize, string_bytes: usize) -> Self {
        let v = Validity::default();
        match dt {
            DataType::Boolean => Column::Bool(BooleanBufferBuilder::new(rows), v),
            DataType::Int32 => Column::I32(Vec::with_capacity(rows), v),
            DataType::Int64 => Column::I64(Vec::with_capacity(rows), v),
            DataType::Float64 => Column::F64(Vec::with_capacity(rows), v),
            DataType::Date32 => Column::Date(Vec::with_capacity(rows), v),
            DataType::Timestamp(_, _) => Column::Ts(Vec::with_capacity(rows), v),
            DataType::Utf8 => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                Column::Utf8 {
                    offsets,
                    data: Vec::with_capacity(string_bytes),
                    validity: v,
                }
            }
            other => unreachable!("kiln tables have no {other} columns"),
        }
    }

    /// Appends `arr`; `len` is how many rows the column holds before it.
    fn append(&mut self, len: usize, arr: &ArrayRef) {
        let n = arr.len();
        let nulls = arr.nulls();
        match self {
            Column::Bool(b, v) => {
                b.append_buffer(arr.as_boolean().values());
                v.append(len, nulls, n)
            }
            Column::I32(b, v) => {
                b.extend_from_slice(arr.as_primitive::<Int32Type>().values());
                v.append(len, nulls, n)
            }
            Column::I64(b, v) => {
                b.extend_from_slice(arr.as_primitive::<Int64Type>().values());
                v.append(len, nulls, n)
            }
            Column::F64(b, v) => {
                b.extend_from_slice(arr.as_primitive::<Float64Type>().values());
                v.append(len, nulls, n)
            }
            Column::Date(b, v) => {
                b.extend_from_slice(arr.as_primitive::<Date32Type>().values());
                v.append(len, nulls, n)
            }
            Column::Ts(b, v) => {
                b.extend_from_slice(arr.as_primitive::<TimestampNanosecondType>().values());
                v.append(len, nulls, n)
            }
            Column::Utf8 {
                offsets,
                data,
                validity,
            } => {
                let s = arr.as_string::<i32>();
                let src = s.value_offsets();
                let (start, end) = (src[0] as usize, src[n] as usize);
                let base = *offsets.last().unwrap_or(&0) - src[0];
                offsets.extend(src[1..].iter().map(|o| o + base));
                data.extend_from_slice(&s.value_data()[start..end]);
                validity.append(len, nulls, n)
            }
        }
    }

    /// Bytes the column's vectors hold, used or not.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        match self {
            Column::Bool(b, v) => b.capacity() / 8 + v.held_bytes(),
            Column::I32(x, v) | Column::Date(x, v) => x.capacity() * 4 + v.held_bytes(),
            Column::I64(x, v) | Column::Ts(x, v) => x.capacity() * 8 + v.held_bytes(),
            Column::F64(x, v) => x.capacity() * 8 + v.held_bytes(),
            Column::Utf8 {
                offsets,
                data,
                validity,
            } => offsets.capacity() * 4 + data.capacity() + validity.held_bytes(),
        }
    }

    /// The rows appended, as an immutable array, leaving the column empty.
    fn take(&mut self) -> ArrayRef {
        match self {
            Column::Bool(bits, v) => Arc::new(BooleanArray::new(bits.finish(), v.take())),
            Column::I32(x, v) => prim::<Int32Type>(x, v),
            Column::I64(x, v) => prim::<Int64Type>(x, v),
            Column::F64(x, v) => prim::<Float64Type>(x, v),
            Column::Date(x, v) => prim::<Date32Type>(x, v),
            Column::Ts(x, v) => prim::<TimestampNanosecondType>(x, v),
            Column::Utf8 {
                offsets,
                data,
                validity,
            } => {
                let n = offsets.len();
                let offs = ScalarBuffer::new(moved(offsets), 0, n);
                offsets.push(0);
                // Offsets from 0, copied from valid string arrays' offsets.
                Arc::new(StringArray::new(
                    OffsetBuffer::new(offs),
                    moved(data),
                    validity.take(),
                ))
            }
        }
    }
}

/// The mutable buffer of one table partition.
#[derive(Debug)]
pub struct ActiveBuffer {
    schema: SchemaRef,
    /// The rows appended since the last snapshot.
    columns: Vec<Column>,
    rows: usize,
    bytes: usize,
    /// Rows already handed to readers as `published` batches.
    published_rows: usize,
    published: Vec<Arc<MemBatch>>,
    /// The memstore's count of bytes held, for the batches' charges.
    held: Arc<AtomicUsize>,
    /// Smallest and largest WAL sequence appended.
    pub min_seq: u64,
    pub max_seq: u64,
}

impl ActiveBuffer {
    /// A buffer sized for `rows` rows and `string_bytes` bytes of string
    /// data per string column, whose batches' charges count in `held`
    /// ([`MemBatch::charge`]).
    pub fn new(
        schema: SchemaRef,
        rows: usize,
        string_bytes: &[usize],
        held: Arc<AtomicUsize>,
    ) -> Self {
        let columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Column::new(
                    f.data_type(),
                    rows,
                    string_bytes.get(i).copied().unwrap_or(0),
                )
            })
            .collect();
        Self {
            schema,
            columns,
            rows: 0,
            bytes: 0,
            published_rows: 0,
            published: vec![],
            held,
            min_seq: u64::MAX,
            max_seq: 0,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes appended, as counted at insert (O(1)).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends a batch already conformed to the table schema.
    pub fn append(&mut self, seq: u64, batch: &RecordBatch, bytes: usize) {
        let unpublished = self.rows - self.published_rows;
        for (c, arr) in self.columns.iter_mut().zip(batch.columns()) {
            c.append(unpublished, arr);
        }
        self.rows += batch.num_rows();
        self.bytes += bytes;
        self.min_seq = self.min_seq.min(seq);
        self.max_seq = self.max_seq.max(seq);
    }

    /// Immutable batches holding every row appended so far. The rows added
    /// since the previous call become a new batch, which takes the place of
    /// the batches before it that are no larger than it (a binary counter):
    /// the batches halve in size or more from the first, so a buffer is at
    /// most about log2(rows) batches however often it is read, and its
    /// large batches live long, with what is derived from them
    /// ([`MemBatch::derived`]). Each row is copied about log2(rows) times
    /// over the buffer's life, never more than the whole buffer at once
    /// (as a freeze does).
    pub fn snapshot(&mut self) -> Vec<Arc<MemBatch>> {
        if self.rows > self.published_rows {
            let new = self.take_unpublished();
            let mut merged = vec![];
            let mut rows = new.num_rows();
            while let Some(last) = self.published.last()
                && last.rows() <= rows
            {
                rows += last.rows();
                merged.extend(self.published.pop());
            }
            let batch = match merged.is_empty() {
                true => MemBatch::new(new, self.held.clone()),
                false => {
                    let older = merged.iter().rev().map(|b| &b.batch);
                    let rows = concat_batches(&self.schema, older.chain([&new]))
                        .expect("batches of one buffer share its schema");
                    let inputs = merged.iter().rev().map(|b| &**b);
                    MemBatch::merged(rows, inputs, self.held.clone())
                }
            };
            for b in &merged {
                b.release();
            }
            self.published.push(Arc::new(batch));
        }
        self.published.clone()
    }

    /// Bytes the buffer holds: its vectors' and its batches' buffers.
    #[cfg(test)]
    pub(super) fn held_bytes(&self) -> usize {
        let columns: usize = self.columns.iter().map(Column::held_bytes).sum();
        let batches: usize = self
            .published
            .iter()
            .map(|b| b.batch.get_array_memory_size())
            .sum();
        columns + batches
    }

    /// The rows appended since the last snapshot, moved out of the columns.
    fn take_unpublished(&mut self) -> RecordBatch {
        let cols = self.columns.iter_mut().map(Column::take).collect();
        self.published_rows = self.rows;
        RecordBatch::try_new(self.schema.clone(), cols).expect("active buffer matches its schema")
    }

    /// Every row appended, as the immutable batches a snapshot gives: what
    /// the buffer holds once frozen. Called under the table's lock, so the
    /// batches are not copied into one; the rows since the last snapshot
    /// are merged as [`Self::snapshot`] merges them.
    pub fn freeze(mut self) -> Vec<Arc<MemBatch>> {
        self.snapshot()
    }
}
