//! Parquet segments: which days' rows share one ([`pack_days`]), sorting
//! them, encoding them (lz4 by default), column statistics and a page
//! index, and the per-column min/max kept in the manifest for pruning
//! without opening files.
//!
//! A segment holds one day's rows, so a query over a range of days reads
//! those days' segments only. Days whose rows are few (a backfill of
//! years at a reading a day) would make a file each, and a file costs a
//! scan more to open than such a day costs to read: consecutive thin days
//! share one segment instead, up to a row group's rows
//! (`--segment-pack-rows`).

use std::collections::BTreeMap;

use arrow::array::UInt32Array;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::kernels::sort::{FixedLexicographicalComparator, LexicographicalComparator};
use arrow::compute::{SortColumn, concat_batches, lexsort_to_indices, take_record_batch};
use arrow::datatypes::{
    DataType, Date32Type, Float64Type, Int32Type, Int64Type, SchemaRef, TimestampNanosecondType,
};
use bytes::Bytes;
use object_store::path::Path;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::config::SegmentCompression;
use crate::cpu::CpuPool;
use crate::error::Result;
use crate::manifest::{ColumnStats, SegmentMeta, StatValue};
use crate::schema::{TableDef, day_string};
use crate::store::Store;

/// Rows per Parquet row group: small enough to prune, large enough to scan fast.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Groups rows by day into segments to write, in day order: each day
/// alone, except runs of consecutive thin days, which share one segment
/// while together they hold at most `limit` rows (0: none share). Returns
/// each segment's first day and its rows.
pub fn pack_days(
    by_day: BTreeMap<i32, Vec<RecordBatch>>,
    limit: usize,
) -> Vec<(i32, Vec<RecordBatch>)> {
    let rows = |(_, batches): &(i32, Vec<RecordBatch>)| batches.iter().map(|b| b.num_rows()).sum();
    let packs = runs_within(by_day, rows, limit).into_iter();
    packs
        .map(|run| (run[0].0, run.into_iter().flat_map(|(_, b)| b).collect()))
        .collect()
}

/// `items` cut, in their order, into runs holding at most `limit` rows
/// together (`rows` of each); an item of more rows is a run of its own.
/// The rule thin days share a segment by ([`pack_days`]), and small
/// in-memory batches a packed batch.
pub fn runs_within<T>(
    items: impl IntoIterator<Item = T>,
    rows: impl Fn(&T) -> usize,
    limit: usize,
) -> Vec<Vec<T>> {
    let mut runs: Vec<(Vec<T>, usize)> = vec![];
    for item in items {
        let n = rows(&item);
        match runs.last_mut() {
            Some((run, held)) if *held + n <= limit => {
                run.push(item);
                *held += n;
            }
            _ => runs.push((vec![item], n)),
        }
    }
    runs.into_iter().map(|(run, _)| run).collect()
}

/// How the rows handed to [`sort_rows`] are already ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// In no useful order: a flush's rows, in the order they arrived.
    Any,
    /// A few consecutive runs, each already sorted: a compaction's input
    /// segments. A merge sort finds the runs and merges them, in about
    /// `rows * log2(runs)` comparisons instead of `rows * log2(rows)`.
    Runs,
}

/// Concatenates and sorts rows by the table's sort key, then time.
pub fn sort_rows(
    def: &TableDef,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    order: Order,
) -> Result<RecordBatch> {
    let batch = concat_batches(schema, batches)?;
    if batch.num_rows() <= 1 {
        return Ok(batch);
    }
    let keys: Vec<SortColumn> = def
        .sort_key
        .iter()
        .chain(std::iter::once(&def.time_column))
        .map(|&i| SortColumn {
            values: batch.column(i).clone(),
            options: None,
        })
        .collect();
    let idx = match order {
        Order::Any => lexsort_to_indices(&keys, None)?,
        Order::Runs => merge_runs(&keys)?,
    };
    Ok(take_record_batch(&batch, &idx)?)
}

/// The order of `keys`' rows, by a stable merge sort, which merges runs
/// already in order rather than sorting them again (`lexsort_to_indices`
/// sorts by quicksort, which does not). Specialized for the few key
/// columns tables have, as arrow's lexsort is.
fn merge_runs(keys: &[SortColumn]) -> Result<UInt32Array> {
    fn by(rows: usize, compare: impl Fn(usize, usize) -> std::cmp::Ordering) -> UInt32Array {
        let mut idx: Vec<u32> = (0..rows as u32).collect();
        idx.sort_by(|a, b| compare(*a as usize, *b as usize));
        UInt32Array::from(idx)
    }
    fn fixed<const N: usize>(keys: &[SortColumn]) -> Result<UInt32Array> {
        let c = FixedLexicographicalComparator::<N>::try_new(keys)?;
        Ok(by(keys[0].values.len(), |a, b| c.compare(a, b)))
    }
    match keys.len() {
        1 => fixed::<1>(keys),
        2 => fixed::<2>(keys),
        3 => fixed::<3>(keys),
        4 => fixed::<4>(keys),
        _ => {
            let c = LexicographicalComparator::try_new(keys)?;
            Ok(by(keys[0].values.len(), |a, b| c.compare(a, b)))
        }
    }
}

/// Encodes a sorted batch as Parquet. The time column, if given, is
/// delta-encoded instead of dictionary-encoded: sorted by the sort key and
/// then time, its values rise within each key's run, so the deltas are
/// small whether instants are unique (events) or shared (readings at fixed
/// intervals). A dictionary of nearly unique instants costs an interning
/// per row and grows as large as the values themselves.
pub fn encode(
    batch: &RecordBatch,
    time_column: Option<usize>,
    compression: SegmentCompression,
) -> Result<Bytes> {
    let compression = match compression {
        SegmentCompression::Lz4 => Compression::LZ4_RAW,
        SegmentCompression::Zstd => Compression::ZSTD(ZstdLevel::try_new(1)?),
        SegmentCompression::None => Compression::UNCOMPRESSED,
    };
    let mut props = WriterProperties::builder()
        .set_compression(compression)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    if let Some(t) = time_column {
        let time = ColumnPath::from(batch.schema().field(t).name().as_str());
        props = props
            .set_column_dictionary_enabled(time.clone(), false)
            .set_column_encoding(time, Encoding::DELTA_BINARY_PACKED);
    }
    let props = props.build();
    let mut buf = Vec::with_capacity(batch.get_array_memory_size() / 4);
    let mut writer = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(Bytes::from(buf))
}

/// Sorts one segment's rows (on `cpu`), as [`put`] writes them.
pub async fn sort(
    cpu: &CpuPool,
    def: &TableDef,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    order: Order,
) -> Result<RecordBatch> {
    let (def, schema) = (def.clone(), schema.clone());
    cpu.run(move || sort_rows(&def, &schema, &batches, order))
        .await
}

/// A new segment's path: unique, under its table and its first day.
pub fn new_path(def: &TableDef, day: i32) -> String {
    format!(
        "tables/{}/{}/{}.parquet",
        def.id,
        day_string(day),
        uuid::Uuid::new_v4()
    )
}

/// Encodes (on `cpu`) and durably writes `rows`, sorted by [`sort`], as
/// the segment at `path` whose first day is `day`. Returns its manifest
/// entry; the segment is not visible until a manifest refers to it.
pub async fn put(
    cpu: &CpuPool,
    store: &Store,
    def: &TableDef,
    path: String,
    day: i32,
    rows: &RecordBatch,
    compression: SegmentCompression,
) -> Result<SegmentMeta> {
    let batch = rows.clone();
    let time = Some(def.time_column);
    let bytes = cpu.run(move || encode(&batch, time, compression)).await?;
    let len = bytes.len() as u64;
    store.put_durable(&Path::from(path.as_str()), bytes).await?;
    Ok(meta(def, path, day, rows, len))
}

/// Reads a whole segment back (compaction, building a cube part), decoded
/// on `cpu`: from the cache where it holds the bytes, and without filling
/// it, so a one-off read evicts nothing hot.
pub async fn read(cpu: &CpuPool, store: &Store, path: &str) -> Result<Vec<RecordBatch>> {
    let bytes = store.get_once(&Path::from(path)).await?;
    cpu.run(move || -> Result<_> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?
            .with_batch_size(64 * 1024)
            .build()?;
        Ok(reader.collect::<Result<Vec<_>, _>>()?)
    })
    .await
}

fn meta(def: &TableDef, path: String, day: i32, batch: &RecordBatch, bytes: u64) -> SegmentMeta {
    let columns: Vec<ColumnStats> = batch.columns().iter().map(column_stats).collect();
    let ts = batch
        .column(def.time_column)
        .as_primitive::<TimestampNanosecondType>();
    SegmentMeta {
        path,
        day,
        rows: batch.num_rows() as u64,
        bytes,
        min_time: arrow::compute::min(ts).unwrap_or(0),
        max_time: arrow::compute::max(ts).unwrap_or(0),
        columns,
    }
}

fn column_stats(col: &ArrayRef) -> ColumnStats {
    use arrow::compute::{max, max_boolean, max_string, min, min_boolean, min_string};
    let (lo, hi) = match col.data_type() {
        DataType::Boolean => {
            let a = col.as_boolean();
            (
                min_boolean(a).map(StatValue::Bool),
                max_boolean(a).map(StatValue::Bool),
            )
        }
        DataType::Int32 => {
            let a = col.as_primitive::<Int32Type>();
            (
                min(a).map(|v| StatValue::Int(v as i64)),
                max(a).map(|v| StatValue::Int(v as i64)),
            )
        }
        DataType::Date32 => {
            let a = col.as_primitive::<Date32Type>();
            (
                min(a).map(|v| StatValue::Int(v as i64)),
                max(a).map(|v| StatValue::Int(v as i64)),
            )
        }
        DataType::Int64 => {
            let a = col.as_primitive::<Int64Type>();
            (min(a).map(StatValue::Int), max(a).map(StatValue::Int))
        }
        DataType::Timestamp(_, _) => {
            let a = col.as_primitive::<TimestampNanosecondType>();
            (min(a).map(StatValue::Int), max(a).map(StatValue::Int))
        }
        DataType::Float64 => {
            let a = col.as_primitive::<Float64Type>();
            // NaN makes min/max meaningless for pruning: record none.
            if a.values().iter().any(|v| v.is_nan()) {
                (None, None)
            } else {
                (min(a).map(StatValue::Float), max(a).map(StatValue::Float))
            }
        }
        DataType::Utf8 => {
            let a = col.as_string::<i32>();
            // Long strings are not worth keeping whole in the manifest.
            let keep = |s: &str| s.len() <= 256;
            (
                min_string(a)
                    .filter(|s| keep(s))
                    .map(|s| StatValue::Str(s.to_string())),
                max_string(a)
                    .filter(|s| keep(s))
                    .map(|s| StatValue::Str(s.to_string())),
            )
        }
        _ => (None, None),
    };
    ColumnStats {
        null_count: col.null_count() as u64,
        min: lo,
        max: hi,
    }
}

/// Approximate in-memory size of a batch's values, in O(columns).
pub fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8 => {
                let s = c.as_string::<i32>();
                let o = s.value_offsets();
                (o[o.len() - 1] - o[0]) as usize + 4 * s.len()
            }
            DataType::Boolean => c.len().div_ceil(8),
            dt => dt.primitive_width().unwrap_or(8) * c.len(),
        })
        .sum::<usize>()
        .max(1)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// A batch of `rows` rows of one Int64 column.
    fn rows(rows: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let n = Int64Array::from_iter_values(0..rows as i64);
        RecordBatch::try_new(schema, vec![Arc::new(n)]).unwrap()
    }

    /// Thin days share a segment in day order up to the limit; a full day
    /// is alone, and ends the run before it; a limit of 0 packs nothing.
    #[test]
    fn thin_days_are_packed_in_order_and_full_days_stand_alone() {
        let limit = 3_000;
        let full = limit + 1;
        let thin = limit / 3;
        let days = BTreeMap::from([
            (1, vec![rows(10), rows(5)]),
            (2, vec![rows(10)]),
            (5, vec![rows(full)]),
            (6, vec![rows(thin)]),
            (7, vec![rows(thin)]),
            (9, vec![rows(thin)]),
            (10, vec![rows(thin)]),
        ]);
        let rows_of = |packs: Vec<(i32, Vec<RecordBatch>)>| -> Vec<(i32, Vec<usize>)> {
            packs
                .into_iter()
                .map(|(day, b)| (day, b.iter().map(|b| b.num_rows()).collect()))
                .collect()
        };
        let packed = rows_of(pack_days(days.clone(), limit));
        assert_eq!(
            packed,
            [
                (1, vec![10, 5, 10]),
                (5, vec![full]),
                (6, vec![thin, thin, thin]),
                (10, vec![thin]),
            ]
        );
        let apart = rows_of(pack_days(days, 0));
        assert_eq!(apart.len(), 7, "0: a segment per day");
    }

    /// Merging a compaction's sorted runs orders rows exactly as sorting
    /// them anew does, for every number of sort-key columns (each of
    /// `merge_runs`' specializations and its general case), with nulls,
    /// strings, doubles and ties; rows in no order are sorted too.
    #[test]
    fn merged_runs_are_in_the_order_a_fresh_sort_gives() {
        use crate::schema::{ColumnDef, ColumnType};
        let c = |name: &str, ty| ColumnDef {
            name: name.into(),
            ty,
            nullable: name != "ts",
        };
        let columns = vec![
            c("ts", ColumnType::Timestamp),
            c("a", ColumnType::Bigint),
            c("b", ColumnType::Varchar),
            c("c", ColumnType::Double),
            c("d", ColumnType::Bigint),
            c("e", ColumnType::Varchar),
        ];
        let keys = ["a", "b", "c", "d", "e"].map(String::from);
        let mut seed = 42u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for n in 0..=keys.len() {
            let def = TableDef::new(1, "t", columns.clone(), None, &keys[..n]).unwrap();
            let schema = def.arrow_schema();
            let mut unsorted = vec![];
            let mut runs = vec![];
            for run in 0..4 {
                let rows = [0, 1, 700, 2_000][run];
                let mut v = |m| (0..rows).map(|_| next(m)).collect::<Vec<_>>();
                let (ts, a, b, c, d, e) = (v(50), v(5), v(4), v(6), v(3), v(7));
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(arrow::array::TimestampNanosecondArray::from_iter_values(
                            ts.iter().map(|&t| t as i64),
                        )),
                        Arc::new(Int64Array::from_iter(
                            a.iter().map(|&x| (x > 0).then_some(x as i64)),
                        )),
                        Arc::new(StringArray::from_iter(
                            b.iter().map(|&x| (x > 0).then(|| format!("s{x}"))),
                        )),
                        Arc::new(arrow::array::Float64Array::from_iter(
                            c.iter().map(|&x| (x > 0).then_some(x as f64 / 3.0)),
                        )),
                        Arc::new(Int64Array::from_iter_values(d.iter().map(|&x| x as i64))),
                        Arc::new(StringArray::from_iter(
                            e.iter().map(|&x| (x > 0).then(|| format!("e{x}"))),
                        )),
                    ],
                )
                .unwrap();
                runs.push(
                    sort_rows(&def, &schema, std::slice::from_ref(&batch), Order::Any).unwrap(),
                );
                unsorted.push(batch);
            }
            let fresh = sort_rows(&def, &schema, &unsorted, Order::Any).unwrap();
            let sort_columns: Vec<usize> = def.sort_key.iter().copied().chain([0]).collect();
            let key_of = |b: &RecordBatch| b.project(&sort_columns).unwrap();
            for (what, input) in [("sorted runs", &runs), ("rows in no order", &unsorted)] {
                let merged = sort_rows(&def, &schema, input, Order::Runs).unwrap();
                assert_eq!(merged.num_rows(), 2_701, "{n} keys, {what}");
                assert_eq!(key_of(&merged), key_of(&fresh), "{n} keys, {what}");
            }
        }
    }

    /// Every codec round-trips the rows, and the file says which codec it
    /// used; the time column (here `n`) is delta-encoded, the others keep
    /// their dictionaries.
    #[test]
    fn each_compression_round_trips_and_is_recorded() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..10_000)),
                Arc::new(StringArray::from_iter(
                    (0..10_000).map(|i| (i % 7 != 0).then(|| format!("v{}", i % 13))),
                )),
            ],
        )
        .unwrap();
        for (setting, codec) in [
            (SegmentCompression::Lz4, Compression::LZ4_RAW),
            (
                SegmentCompression::Zstd,
                Compression::ZSTD(ZstdLevel::try_new(1).unwrap()),
            ),
            (SegmentCompression::None, Compression::UNCOMPRESSED),
        ] {
            let bytes = encode(&batch, Some(0), setting).unwrap();
            let file = SerializedFileReader::new(bytes.clone()).unwrap();
            let rg = file.metadata().row_group(0);
            assert!(
                rg.columns().iter().all(|c| c.compression() == codec),
                "{setting:?}"
            );
            let encodings = |c: usize| rg.column(c).encodings().collect::<Vec<_>>();
            assert!(encodings(0).contains(&Encoding::DELTA_BINARY_PACKED));
            assert!(!encodings(0).contains(&Encoding::RLE_DICTIONARY));
            assert!(encodings(1).contains(&Encoding::RLE_DICTIONARY));
            let back: Vec<_> = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .unwrap()
                .build()
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                concat_batches(&batch.schema(), &back).unwrap(),
                batch,
                "{setting:?}"
            );
        }
    }
}
