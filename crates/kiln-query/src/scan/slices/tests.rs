use arrow::array::{ArrayRef, Float64Array, Int64Array, StringViewArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, lit};

use super::*;

/// Columns ts, url (strings), k, v; rows i = 0..n with k = i % 4.
fn batch(n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Int64, false),
        Field::new("url", DataType::Utf8View, false),
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..n)),
        Arc::new(StringViewArray::from_iter_values(
            (0..n).map(|i| format!("https://example.com/page/{i}")),
        )),
        Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 4))),
        Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
    ];
    RecordBatch::try_new(schema, cols).unwrap()
}

/// `k = 1 AND ts < 50`: its left side keeps a quarter of the rows, so
/// DataFusion evaluates the right side over a copy of them.
fn filter() -> Arc<dyn PhysicalExpr> {
    let k = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("k", 2)),
        Operator::Eq,
        lit(1i64),
    ));
    let ts = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("ts", 0)),
        Operator::Lt,
        lit(50i64),
    ));
    Arc::new(BinaryExpr::new(k, Operator::And, ts))
}

#[test]
fn a_filter_reads_only_its_columns_and_keeps_the_same_rows() {
    let (batch, filter) = (batch(200), filter());
    let mut narrowed = Narrowed::default();
    let narrow = narrowed.of(filter.clone(), batch.schema_ref());
    // The filter over ts and k alone, renumbered to them.
    assert_eq!(narrow.0, vec![0, 2]);
    let mut read: Vec<_> = collect_columns(&narrow.1)
        .iter()
        .map(|c| (c.name().to_string(), c.index()))
        .collect();
    read.sort();
    assert_eq!(read, vec![("k".to_string(), 1), ("ts".to_string(), 0)]);
    // Made once per filter.
    let again = narrowed.of(filter.clone(), batch.schema_ref());
    assert!(Arc::ptr_eq(&again.1, &narrow.1));
    assert_eq!(narrowed.0.len(), 1);

    // The same rows as the filter over the whole batch, projected.
    let kept = keep(batch.clone(), Some(&narrow), Some(&[1, 3])).unwrap();
    let mask = filter.evaluate(&batch).unwrap().into_array(200).unwrap();
    let all = filter_record_batch(&batch, mask.as_boolean()).unwrap();
    assert_eq!(kept, all.project(&[1, 3]).unwrap());
    let ts: Vec<f64> = kept
        .column(1)
        .as_primitive::<arrow::datatypes::Float64Type>()
        .values()
        .to_vec();
    assert_eq!(
        ts,
        (0..50)
            .filter(|i| i % 4 == 1)
            .map(|i| i as f64)
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_filter_of_no_column_keeps_every_row_count() {
    let batch = batch(10);
    let always: Arc<dyn PhysicalExpr> = lit(true);
    let narrow = Narrowed::default().of(always, batch.schema_ref());
    assert!(narrow.0.is_empty());
    let kept = keep(batch, Some(&narrow), Some(&[2])).unwrap();
    assert_eq!(kept.num_rows(), 10);
}

/// Every batch `filtered_stream` returns for `batches`.
fn streamed(batches: Vec<Filtered>, fetch: Option<usize>, batch_size: usize) -> Vec<RecordBatch> {
    use futures::TryStreamExt;
    let schema = batch(0).schema();
    let stream = filtered_stream(batches, schema, None, fetch, batch_size);
    futures::executor::block_on(stream.try_collect()).unwrap()
}

#[test]
fn small_batches_are_gathered_in_order_and_large_ones_pass_uncopied() {
    // 20 filtered batches of 10 rows (times 0-199), a large unfiltered
    // one, then 5 small ones: with batches of 1,024 rows, those under 128
    // gather.
    let small = |i: i64| {
        let b = batch(10);
        let ts = Int64Array::from_iter_values((0..10).map(|r| i * 10 + r));
        let cols = [vec![Arc::new(ts) as ArrayRef], b.columns()[1..].to_vec()].concat();
        (
            RecordBatch::try_new(b.schema(), cols).unwrap(),
            Some(filter()),
        )
    };
    let large = batch(5000);
    let mut input: Vec<Filtered> = (0..20).map(small).collect();
    input.push((large.clone(), None));
    input.extend((0..5).map(|i| (batch(10), (i % 2 == 0).then(filter))));
    let expected: Vec<RecordBatch> = input
        .iter()
        .map(|(b, f)| {
            let narrow = f.clone().map(|f| Narrowed::default().of(f, b.schema_ref()));
            keep(b.clone(), narrow.as_ref(), None).unwrap()
        })
        .collect();

    let out = streamed(input.clone(), None, 1024);
    let rows: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
    // k = 1 keeps rows 1, 5 and 9 of a batch, ts < 50 those of the first
    // five: 15 rows gathered from 20 batches.
    let first: usize = expected[..20].iter().map(RecordBatch::num_rows).sum();
    let last: usize = expected[21..].iter().map(RecordBatch::num_rows).sum();
    assert_eq!(first, 15);
    assert_eq!(rows, vec![first, 5000, last]);
    let schema = batch(0).schema();
    assert_eq!(
        arrow::compute::concat_batches(&schema, &out).unwrap(),
        arrow::compute::concat_batches(&schema, &expected).unwrap()
    );
    // The large batch is the input's, not a copy.
    let buffer = |b: &RecordBatch| b.column(0).to_data().buffers()[0].as_ptr();
    assert_eq!(buffer(&out[1]), buffer(&large));

    // Gathered batches hold at most the batch size; a limit still holds.
    let unfiltered: Vec<Filtered> = (0..100).map(|_| (batch(50), None)).collect();
    let out = streamed(unfiltered.clone(), None, 1024);
    let rows: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(rows, vec![1024, 1024, 1024, 1024, 904]);
    let out = streamed(unfiltered, Some(70), 1024);
    assert_eq!(out.iter().map(RecordBatch::num_rows).sum::<usize>(), 70);
}
