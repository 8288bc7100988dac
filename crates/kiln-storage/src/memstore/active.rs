//! The active buffer: small, mutable, append-only column buffers.
//!
//! Appends copy whole Arrow arrays into typed vectors pre-sized from what the
//! previous buffer held (row count and string bytes, so there is no row-by-row
//! re-growth). Readers never lock it for long: [`ActiveBuffer::snapshot`] turns
//! the rows appended since the last snapshot into an immutable batch, merged
//! with the smaller batches before it, so a row is copied a logarithmic number
//! of times and a snapshot never copies more than the buffer.

use std::sync::Arc;

use super::MemBatch;
use arrow::array::BooleanBufferBuilder;
use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, PrimitiveArray, RecordBatch,
    StringArray,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    DataType, Date32Type, Float64Type, Int32Type, Int64Type, SchemaRef, TimestampNanosecondType,
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
    fn slice(&self, a: usize, b: usize) -> Option<NullBuffer> {
        let bits = self.0.as_ref()?;
        let buf = BooleanBuffer::from_iter((a..b).map(|i| bits.get_bit(i)));
        Some(NullBuffer::new(buf)).filter(|n| n.null_count() > 0)
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

fn prim<T: ArrowPrimitiveType>(
    v: &[T::Native],
    a: usize,
    b: usize,
    n: Option<NullBuffer>,
) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(
        ScalarBuffer::from(v[a..b].to_vec()),
        n,
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

    fn string_bytes(&self) -> usize {
        match self {
            Column::Utf8 { data, .. } => data.len(),
            _ => 0,
        }
    }

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

    /// Copies rows `a..b` into an immutable array.
    fn slice(&self, a: usize, b: usize) -> ArrayRef {
        match self {
            Column::Bool(bits, v) => {
                let vals = BooleanBuffer::from_iter((a..b).map(|i| bits.get_bit(i)));
                Arc::new(BooleanArray::new(vals, v.slice(a, b)))
            }
            Column::I32(x, v) => prim::<Int32Type>(x, a, b, v.slice(a, b)),
            Column::I64(x, v) => prim::<Int64Type>(x, a, b, v.slice(a, b)),
            Column::F64(x, v) => prim::<Float64Type>(x, a, b, v.slice(a, b)),
            Column::Date(x, v) => prim::<Date32Type>(x, a, b, v.slice(a, b)),
            Column::Ts(x, v) => prim::<TimestampNanosecondType>(x, a, b, v.slice(a, b)),
            Column::Utf8 {
                offsets,
                data,
                validity,
            } => {
                let (s, e) = (offsets[a], offsets[b]);
                let offs: Vec<i32> = offsets[a..=b].iter().map(|o| o - s).collect();
                // SAFETY-free path: offsets are monotonic and data came from valid UTF-8 arrays.
                let arr = StringArray::new(
                    OffsetBuffer::new(ScalarBuffer::from(offs)),
                    Buffer::from(data[s as usize..e as usize].to_vec()),
                    validity.slice(a, b),
                );
                Arc::new(arr)
            }
        }
    }
}

/// The mutable buffer of one table partition.
#[derive(Debug)]
pub struct ActiveBuffer {
    schema: SchemaRef,
    columns: Vec<Column>,
    rows: usize,
    bytes: usize,
    /// Rows already handed to readers as `published` batches.
    published_rows: usize,
    published: Vec<Arc<MemBatch>>,
    /// Smallest and largest WAL sequence appended.
    pub min_seq: u64,
    pub max_seq: u64,
}

impl ActiveBuffer {
    /// A buffer sized for `rows` rows and `string_bytes` bytes of string data per string column.
    pub fn new(schema: SchemaRef, rows: usize, string_bytes: &[usize]) -> Self {
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
        for (c, arr) in self.columns.iter_mut().zip(batch.columns()) {
            c.append(self.rows, arr);
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
            let mut start = self.published_rows;
            while let Some(last) = self.published.last()
                && last.rows() <= self.rows - start
            {
                start -= last.rows();
                self.published.pop();
            }
            let batch = self.range(start, self.rows);
            self.published.push(Arc::new(MemBatch::new(batch)));
            self.published_rows = self.rows;
        }
        self.published.clone()
    }

    fn range(&self, a: usize, b: usize) -> RecordBatch {
        let cols = self.columns.iter().map(|c| c.slice(a, b)).collect();
        RecordBatch::try_new(self.schema.clone(), cols).expect("active buffer matches its schema")
    }

    /// Turns the whole buffer into one immutable batch and returns a fresh,
    /// pre-sized buffer in its place.
    pub fn freeze(&mut self) -> RecordBatch {
        let batch = self.range(0, self.rows);
        let widths: Vec<usize> = self.columns.iter().map(Column::string_bytes).collect();
        *self = ActiveBuffer::new(self.schema.clone(), self.rows, &widths);
        batch
    }
}
