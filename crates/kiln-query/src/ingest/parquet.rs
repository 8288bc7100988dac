//! Parquet bodies and files, decoded within a bound on the memory their
//! rows take.
//!
//! Why a module of its own: a Parquet file's size says little about the
//! rows it holds. A dictionary page of one 1 MB string, referred to by a
//! million rows whose keys are one run-length-encoded run, is a file of a
//! few hundred bytes that the Arrow reader turns into a terabyte of
//! strings; a compressed page of repeated bytes inflates a thousandfold.
//! So before any row is read:
//! - columns the table does not have, or of a type no table column can
//!   take, are refused by name;
//! - the pages' declared sizes once inflated are checked against the
//!   limit, and pages of a codec the reader inflates whole are checked
//!   not to inflate past them ([`pages`]);
//! - a string or binary column with a dictionary page is read as Arrow
//!   dictionary keys over the one dictionary, not copied out per row, and
//!   the longest value of every dictionary bounds how many rows a batch
//!   takes, so the reader's fallback (copying values out when a batch
//!   meets both dictionary and plain pages) stays within
//!   [`SPILL_BYTES`] per column;
//!
//! and while reading, the rows are measured as they will be once cast to
//! the table's types ([`super::batch_bytes`]), and reading stops as soon
//! as they pass the limit.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::can_cast_types;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::Type as PhysicalType;
use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;

use super::{BATCH_ROWS, Decoded, Refused, batch_bytes};

mod pages;

/// The most bytes of values one column of one batch may take when the
/// reader copies dictionary values out (see the module docs).
pub const SPILL_BYTES: usize = 64 << 20;

/// Decodes a Parquet file from `input` for a table of schema `table`,
/// refusing rows that would take more than `max_bytes` once cast. The
/// Parquet reader can panic on inconsistent input (found by the fuzz
/// targets): a panic is caught and reported as malformed input.
pub(super) fn decode<R: ChunkReader + 'static>(
    input: R,
    table: &SchemaRef,
    max_bytes: usize,
) -> Result<Decoded, Refused> {
    let input = Arc::new(input);
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        read(&input, table, max_bytes)
    }));
    match decoded {
        Ok(res) => res,
        Err(_) => Err(malformed("malformed file (inconsistent pages or metadata)")),
    }
}

fn malformed(e: impl std::fmt::Display) -> Refused {
    Refused::Invalid(format!("Parquet: {e}"))
}

fn read<R: ChunkReader + 'static>(
    input: &Arc<R>,
    table: &SchemaRef,
    max_bytes: usize,
) -> Result<Decoded, Refused> {
    let found = ArrowReaderMetadata::load(&Shared(input.clone()), ArrowReaderOptions::new())
        .map_err(malformed)?;
    let meta = found.metadata().clone();
    check_columns(found.schema(), table)?;
    pages::check(input.as_ref(), &meta, max_bytes)?;
    let (schema, longest) = keyed_schema(input, &meta, found.schema())?;
    let options = ArrowReaderOptions::new().with_schema(schema);
    let keyed = ArrowReaderMetadata::try_new(meta, options).map_err(malformed)?;
    let rows = (SPILL_BYTES / longest.max(1)).clamp(1, BATCH_ROWS);
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(Shared(input.clone()), keyed)
        .with_batch_size(rows)
        .build()
        .map_err(malformed)?;
    let mut batches: Vec<RecordBatch> = vec![];
    let mut bytes = 0u64;
    for batch in reader {
        let batch = batch.map_err(malformed)?;
        bytes = bytes.saturating_add(batch_bytes(&batch, table));
        if bytes > max_bytes as u64 {
            return Err(Refused::TooLarge { bytes });
        }
        batches.push(batch);
    }
    Ok(Decoded::unlined(batches))
}

/// Refuses a column the table does not have, or whose type no cast turns
/// into the table column's, before anything is read.
fn check_columns(file: &Schema, table: &Schema) -> Result<(), Refused> {
    for f in file.fields() {
        let Ok(t) = table.field_with_name(f.name()) else {
            return Err(malformed(format_args!(
                "the table has no column '{}'",
                f.name()
            )));
        };
        if !can_cast_types(f.data_type(), t.data_type()) {
            return Err(malformed(format_args!(
                "column '{}' holds {} values, which cannot be read as the table's {}",
                f.name(),
                f.data_type(),
                t.data_type()
            )));
        }
    }
    Ok(())
}

/// The schema to read `file` with: each string or binary column that has
/// a dictionary page in some row group read as dictionary keys, and the
/// longest value of those dictionaries.
fn keyed_schema<R: ChunkReader + 'static>(
    input: &Arc<R>,
    meta: &ParquetMetaData,
    file: &SchemaRef,
) -> Result<(SchemaRef, usize), Refused> {
    let mut longest = 0usize;
    let mut fields = Vec::with_capacity(file.fields().len());
    for f in file.fields() {
        let values = match f.data_type() {
            DataType::Utf8 | DataType::Utf8View => DataType::Utf8,
            DataType::LargeUtf8 => DataType::LargeUtf8,
            DataType::Binary | DataType::BinaryView => DataType::Binary,
            DataType::LargeBinary => DataType::LargeBinary,
            _ => {
                fields.push(f.clone());
                continue;
            }
        };
        let Some((leaf, _)) =
            parquet::arrow::parquet_column(meta.file_metadata().schema_descr(), file, f.name())
        else {
            fields.push(f.clone());
            continue;
        };
        let mut keyed = false;
        for rg in meta.row_groups() {
            let chunk = rg.column(leaf);
            if chunk.column_type() != PhysicalType::BYTE_ARRAY
                || chunk.dictionary_page_offset().is_none()
            {
                continue;
            }
            keyed = true;
            let rows = usize::try_from(rg.num_rows()).unwrap_or(0);
            let mut pages =
                SerializedPageReader::new(input.clone(), chunk, rows, None).map_err(malformed)?;
            if let Some(Page::DictionaryPage {
                buf, num_values, ..
            }) = pages.get_next_page().map_err(malformed)?
            {
                longest = longest.max(longest_value(&buf, num_values));
            }
        }
        fields.push(if keyed {
            let key = DataType::Dictionary(Box::new(DataType::Int32), Box::new(values));
            Arc::new(Field::new(f.name(), key, f.is_nullable()).with_metadata(f.metadata().clone()))
        } else {
            f.clone()
        });
    }
    let schema = Schema::new(fields).with_metadata(file.metadata().clone());
    Ok((Arc::new(schema), longest))
}

/// The longest of a PLAIN-encoded dictionary page's `n` byte arrays (each
/// a little-endian `u32` length, then its bytes). A page cut short ends
/// the count; the reader reports it.
fn longest_value(page: &[u8], n: u32) -> usize {
    let mut at = 0usize;
    let mut longest = 0usize;
    for _ in 0..n {
        let Some(len) = page.get(at..at + 4) else {
            break;
        };
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        longest = longest.max(len);
        at = at.saturating_add(4).saturating_add(len);
    }
    longest
}

/// One input read by both the page reader (for dictionary pages) and the
/// Arrow reader, which take a reader by `Arc` and by value.
struct Shared<R>(Arc<R>);

impl<R: ChunkReader> Length for Shared<R> {
    fn len(&self) -> u64 {
        self.0.len()
    }
}

impl<R: ChunkReader> ChunkReader for Shared<R> {
    type T = R::T;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        self.0.get_read(start)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.0.get_bytes(start, length)
    }
}
