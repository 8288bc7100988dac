use std::sync::Arc;

use arrow::array::{Int64Array, StringArray, StringViewArray, TimestampNanosecondArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, Schema, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::logical_expr::{col, lit};
use datafusion::prelude::SessionContext;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::*;
use crate::pruning::pruner;

const ROWS: i64 = 50_000;

/// A segment as Kiln writes it: sorted by `k`, strings as plain Utf8, two row groups.
fn segment() -> (Bytes, SchemaRef) {
    let file_schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        file_schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                (0..ROWS).map(|i| i * 1_000),
            )),
            Arc::new(Int64Array::from_iter_values((0..ROWS).map(|i| i / 1000))),
            Arc::new(StringArray::from_iter(
                (0..ROWS).map(|i| (i % 5 != 0).then(|| format!("s{}", i % 11))),
            )),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(30_000))
        .build();
    let mut buf = vec![];
    let mut w = ArrowWriter::try_new(&mut buf, file_schema.clone(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    (
        Bytes::from(buf),
        kiln_storage::schema::view_schema(&file_schema),
    )
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

#[test]
fn decodes_every_row_in_slices_with_the_query_schema() {
    let (file, schema) = segment();
    let d = DecodedSegment::decode(file, &schema).unwrap();
    let all = d.slices(None);
    assert_eq!(rows(&all), ROWS as usize);
    assert_eq!(d.rows(), ROWS as usize);
    // Row groups of 30,000 and 20,000 rows, pruned in slices of 1,024,
    // scanned in batches of at most 8,192.
    assert_eq!(d.slices.len(), 30 + 20);
    assert_eq!(all.len(), 4 + 3);
    assert!(all.iter().all(|b| b.num_rows() <= BATCH_ROWS));
    assert!(d.bytes() > 0);
    let whole = concat_batches(&schema, &all).unwrap();
    assert_eq!(whole.schema(), schema);
    let s = whole
        .column(2)
        .as_any()
        .downcast_ref::<StringViewArray>()
        .unwrap();
    assert_eq!(s.null_count(), (ROWS / 5) as usize);
    assert_eq!(s.value(1), "s1");
    let k = whole
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(k.value(ROWS as usize - 1), (ROWS - 1) / 1000);
}

#[test]
fn slices_are_pruned_by_their_min_and_max() {
    let (file, schema) = segment();
    let d = DecodedSegment::decode(file, &schema).unwrap();
    let df_schema = DFSchema::try_from(schema.as_ref().clone()).unwrap();
    let ctx = SessionContext::new();
    let prune = |e| {
        let expr = ctx.create_physical_expr(e, &df_schema).unwrap();
        pruner(Some(&expr), &schema)
    };

    // k = 20 is rows 20,000..21,000: slices 19 and 20 of the first row
    // group (rows 19,456..21,504), scanned as one batch.
    let kept = d.slices(prune(col("k").eq(lit(20i64))).as_deref());
    assert_eq!(kept.len(), 1);
    assert_eq!(rows(&kept), 2 * SLICE_ROWS);
    let k = kept[0]
        .column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert!(k.iter().flatten().any(|v| v == 20));

    // Nothing matches past the end; everything matches a bound below the start.
    assert!(
        d.slices(prune(col("k").gt(lit(1_000i64))).as_deref())
            .is_empty()
    );
    assert_eq!(
        rows(&d.slices(prune(col("k").gt_eq(lit(0i64))).as_deref())),
        ROWS as usize
    );

    // Strings prune too (s is "s0".."s9" in every slice, so nothing is cut
    // by a value inside that range, and everything by one outside it).
    assert_eq!(d.slices(prune(col("s").eq(lit("s3"))).as_deref()).len(), 7);
    assert!(
        d.slices(prune(col("s").eq(lit("zzz"))).as_deref())
            .is_empty()
    );

    // IS NULL keeps every slice (each has nulls) by the null counts.
    assert_eq!(d.slices(prune(col("s").is_null()).as_deref()).len(), 7);

    // Several segments are pruned in one pass, each keeping its own slices.
    let (file, _) = segment();
    let e = DecodedSegment::decode(file, &schema).unwrap();
    let both = kept_slices(&[&d, &e], prune(col("k").eq(lit(20i64))).as_deref(), None);
    assert_eq!(both.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1]);
    let both = kept_slices(&[&d, &e], prune(col("k").gt(lit(44i64))).as_deref(), None);
    assert_eq!(rows_of(&both[0]), rows_of(&both[1]));
    assert!(!both[0].is_empty() && both[0].len() < 7);
    let all = kept_slices(&[&d, &e], None, None);
    assert_eq!(rows_of(&all[0]) + rows_of(&all[1]), 2 * ROWS as usize);
}

fn rows_of(batches: &[(RecordBatch, Residual)]) -> usize {
    batches.iter().map(|(b, _)| b.num_rows()).sum()
}

/// The kept slices, each filtered by the conjuncts it was left with, hold
/// exactly the rows the whole filter selects; and the statistics spare the
/// filter where they prove it.
#[test]
fn slices_are_filtered_only_by_the_conjuncts_left() {
    use arrow::compute::filter_record_batch;

    let (file, schema) = segment();
    let d = DecodedSegment::decode(file, &schema).unwrap();
    let df_schema = DFSchema::try_from(schema.as_ref().clone()).unwrap();
    let ctx = SessionContext::new();
    let whole = concat_batches(&schema, &d.slices(None)).unwrap();
    let apply = |b: &RecordBatch, f: &Arc<dyn datafusion::physical_expr::PhysicalExpr>| {
        let mask = f.evaluate(b).unwrap().into_array(b.num_rows()).unwrap();
        filter_record_batch(b, mask.as_any().downcast_ref().unwrap()).unwrap()
    };
    // (filter, whether some batch needs no filter at all)
    for (e, some_unfiltered) in
        [
            (
                col("k").gt_eq(lit(10i64)).and(col("k").lt(lit(40i64))),
                true,
            ),
            // k = 20 straddles two slices, neither of them all 20.
            (col("k").eq(lit(20i64)), false),
            (
                col("k").gt_eq(lit(10i64)).and(col("ts").lt(lit(
                    ScalarValue::TimestampNanosecond(Some(45_000_000), None),
                ))),
                true,
            ),
            (
                col("k").lt_eq(lit(30i64)).and(col("s").eq(lit("s3"))),
                false,
            ),
            (col("s").is_not_null(), false),
            // Past the 64th conjunct, every one is evaluated on every row.
            (
                (0..65)
                    .map(|_| col("k").gt_eq(lit(0i64)))
                    .fold(col("k").lt(lit(45i64)), |a, b| b.and(a)),
                false,
            ),
        ]
    {
        let expr = ctx.create_physical_expr(e.clone(), &df_schema).unwrap();
        let want = apply(&whole, &expr);
        let pruning = pruner(Some(&expr), &schema);
        let conjuncts = Conjuncts::of(&expr, &schema);
        let kept = kept_slices(&[&d], pruning.as_deref(), Some(&conjuncts)).remove(0);
        let got: Vec<RecordBatch> = kept
            .iter()
            .map(|(b, left)| match conjuncts.filter(*left) {
                Some(f) => apply(b, &f),
                None => b.clone(),
            })
            .collect();
        assert_eq!(concat_batches(&schema, &got).unwrap(), want, "{e}");
        assert!(want.num_rows() > 0, "{e}");
        assert_eq!(
            kept.iter()
                .any(|(_, left)| conjuncts.filter(*left).is_none()),
            some_unfiltered,
            "{e}"
        );
        // A nullable column's comparison is never proven where it has nulls.
        if format!("{e}").contains("s3") {
            assert!(kept.iter().all(|(_, left)| *left & 2 != 0), "{e}");
        }
    }
}

#[tokio::test]
async fn a_disabled_cache_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::local(dir.path().to_path_buf()).unwrap();
    let cache = SegmentCache::new(store, 0);
    assert_eq!(cache.capacity(), 0);
    assert!(cache.get("x").is_none());
}

#[tokio::test]
async fn evicts_the_least_recently_used_segment_to_make_room() {
    let (file, schema) = segment();
    let size = DecodedSegment::decode(file.clone(), &schema)
        .unwrap()
        .bytes();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::local(dir.path().to_path_buf()).unwrap();
    // Room for two segments, not three.
    let cache = SegmentCache::new(store, 2 * size + size / 2);
    let decoded = || DecodedSegment::decode(file.clone(), &schema).unwrap();
    cache.insert("a".into(), decoded());
    cache.insert("b".into(), decoded());
    assert_eq!((cache.entries(), cache.usage()), (2, 2 * size));
    // Peeking at the size counts no lookup and does not refresh "b".
    assert_eq!((cache.held_bytes("b"), cache.held_bytes("x")), (size, 0));
    assert_eq!(cache.lookups(), (0, 0));
    // "a" is used after "b", so "b" is the one evicted for "c".
    assert!(cache.get("a").is_some());
    cache.insert("c".into(), decoded());
    assert_eq!((cache.entries(), cache.usage()), (2, 2 * size));
    assert!(cache.get("a").is_some() && cache.get("c").is_some());
    assert!(cache.get("b").is_none());
    // Inserting a path again replaces it without double counting.
    cache.insert("c".into(), decoded());
    assert_eq!(cache.usage(), 2 * size);
    // A segment larger than the whole cache is not held.
    let small = SegmentCache::new(Store::local(dir.path().to_path_buf()).unwrap(), size - 1);
    small.insert("a".into(), decoded());
    assert_eq!(small.entries(), 0);
}
