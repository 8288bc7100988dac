use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};

use super::Cut;

/// Dimensions `k`, `t`, `r` and a state `s`, sorted by the dimensions:
/// `s` numbers the rows.
fn batch() -> (SchemaRef, RecordBatch) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("t", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("r", DataType::Utf8, false),
        Field::new("s", DataType::Int64, false),
    ]));
    let k = [1, 1, 2, 2, 2, 2, 3];
    let t = [5, 20, 10, 10, 20, 30, 10];
    let r = ["a", "b", "a", "b", "a", "b", "a"];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(k.to_vec())),
        Arc::new(TimestampNanosecondArray::from(t.to_vec())),
        Arc::new(StringArray::from(r.to_vec())),
        Arc::new(Int64Array::from_iter_values(0..7)),
    ];
    (
        schema.clone(),
        RecordBatch::try_new(schema, columns).unwrap(),
    )
}

fn key(v: i64) -> Vec<(usize, ArrayRef)> {
    vec![(0, Arc::new(Int64Array::from(vec![v])) as ArrayRef)]
}

/// The `s` column of a cut's output (its `at`-th column).
fn rows(out: &RecordBatch, at: usize) -> Vec<i64> {
    let s = out.column(at).as_primitive::<Int64Type>();
    s.values().to_vec()
}

fn cut(
    schema: &SchemaRef,
    keys: Vec<(usize, ArrayRef)>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    time: Option<usize>,
    projection: Option<&[usize]>,
) -> Cut {
    let out = match projection {
        Some(p) => Arc::new(schema.project(p).unwrap()),
        None => schema.clone(),
    };
    Cut::new(schema, keys, filter.as_ref(), time, projection, out).unwrap()
}

/// One batch's cut: its slice, finished alone.
fn apply(c: &Cut, b: &RecordBatch, buckets: Option<(i128, i128)>) -> Result<RecordBatch> {
    let out = c.finish(vec![c.slice(b, buckets)?], 8192)?;
    match out.as_slice() {
        [] => Ok(RecordBatch::new_empty(c.out_schema.clone())),
        [one] => Ok(one.clone()),
        _ => panic!("one slice finished as {} batches", out.len()),
    }
}

#[test]
fn keys_select_a_slice_and_the_output_takes_the_projection_in_its_order() {
    let (schema, b) = batch();
    let c = cut(&schema, key(2), None, None, Some(&[3, 0]));
    let out = apply(&c, &b, None).unwrap();
    assert_eq!(out.num_columns(), 2);
    assert_eq!(out.schema().field(0).name(), "s");
    assert_eq!(rows(&out, 0), [2, 3, 4, 5]);
    let k = out.column(1).as_primitive::<Int64Type>();
    assert!(k.values().iter().all(|k| *k == 2));
    // A key no row holds: nothing.
    let none = cut(&schema, key(9), None, None, None);
    assert_eq!(apply(&none, &b, None).unwrap().num_rows(), 0);
}

#[test]
fn a_range_cuts_sorted_rows_by_search_and_others_by_a_filter() {
    let (schema, b) = batch();
    // After the key, the rows are sorted by `t`: [10, 30) is a slice.
    let sorted = cut(&schema, key(2), None, Some(1), Some(&[3]));
    assert_eq!(
        rows(&apply(&sorted, &b, Some((10, 30))).unwrap(), 0),
        [2, 3, 4]
    );
    assert_eq!(
        rows(&apply(&sorted, &b, Some((11, 20))).unwrap(), 0),
        Vec::<i64>::new()
    );
    let open = (i128::MIN, i128::MAX);
    assert_eq!(
        rows(&apply(&sorted, &b, Some(open)).unwrap(), 0),
        [2, 3, 4, 5]
    );
    // Without a key the rows are not sorted by `t`: filtered, and `t` is
    // read though the output does not hold it.
    let unsorted = cut(&schema, vec![], None, Some(1), Some(&[3]));
    let out = apply(&unsorted, &b, Some((10, 21))).unwrap();
    assert_eq!(out.num_columns(), 1);
    assert_eq!(rows(&out, 0), [1, 2, 3, 4, 6]);
}

#[test]
fn the_filter_reads_columns_the_output_does_not_hold() {
    let (schema, b) = batch();
    let r = Arc::new(Column::new("r", 2));
    let a = Arc::new(Literal::new(ScalarValue::Utf8(Some("a".into()))));
    let filter: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(r, Operator::Eq, a));
    let c = cut(&schema, key(2), Some(filter.clone()), Some(1), Some(&[3]));
    assert_eq!(rows(&apply(&c, &b, None).unwrap(), 0), [2, 4]);
    assert_eq!(rows(&apply(&c, &b, Some((15, 40))).unwrap(), 0), [4]);
    // Every column returned: the same rows, the schema's columns.
    let all = cut(&schema, vec![], Some(filter), None, None);
    let out = apply(&all, &b, None).unwrap();
    assert_eq!(out.schema(), schema);
    assert_eq!(rows(&out, 3), [0, 2, 4, 6]);
    assert!(
        out.column(2)
            .as_string::<i32>()
            .iter()
            .all(|r| r == Some("a"))
    );
    assert_eq!(out.column(0).len(), 4);
}

#[test]
fn small_slices_are_put_together_and_filtered_once_large_ones_pass_uncopied() {
    let (schema, b) = batch();
    let r = Arc::new(Column::new("r", 2));
    let a = Arc::new(Literal::new(ScalarValue::Utf8(Some("a".into()))));
    let filter: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(r, Operator::Eq, a));
    // Slices of 2, 4 and 1 rows; runs of at least 5 rows make a batch.
    let filtered = cut(&schema, vec![], Some(filter), None, Some(&[3]));
    let slices = [(0, 2), (2, 4), (6, 1)].map(|(at, n)| filtered.slice(&b.slice(at, n), None));
    let out = filtered.finish(slices.into_iter().collect::<Result<_>>().unwrap(), 5);
    let out = out.unwrap();
    let got: Vec<Vec<i64>> = out.iter().map(|o| rows(o, 0)).collect();
    // The first two (6 rows) together, the last alone; rows with `r = a`.
    assert_eq!(got, [vec![0, 2, 4], vec![6]]);
    // Unfiltered, a slice as large as a batch is the slice itself.
    let all = cut(&schema, vec![], None, None, None);
    let slices = [(0, 1), (1, 5)].map(|(at, n)| all.slice(&b.slice(at, n), None).unwrap());
    let out = all.finish(slices.to_vec(), 3).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(rows(&out[1], 3), [0]);
    let large = out[0].column(3).to_data();
    let source = b.column(3).slice(1, 5).to_data();
    assert_eq!(large.buffers()[0].as_ptr(), source.buffers()[0].as_ptr());
    // Slices with no row are left out; none at all, no batch.
    let none = cut(&schema, key(9), None, None, None);
    let empty = none.finish(vec![none.slice(&b, None).unwrap()], 3).unwrap();
    assert!(empty.is_empty());
}
