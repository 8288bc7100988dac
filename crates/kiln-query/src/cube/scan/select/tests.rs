use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::common::ScalarValue;
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

#[test]
fn keys_select_a_slice_and_the_output_takes_the_projection_in_its_order() {
    let (schema, b) = batch();
    let c = cut(&schema, key(2), None, None, Some(&[3, 0]));
    let out = c.apply(&b, None).unwrap();
    assert_eq!(out.num_columns(), 2);
    assert_eq!(out.schema().field(0).name(), "s");
    assert_eq!(rows(&out, 0), [2, 3, 4, 5]);
    let k = out.column(1).as_primitive::<Int64Type>();
    assert!(k.values().iter().all(|k| *k == 2));
    // A key no row holds: nothing.
    let none = cut(&schema, key(9), None, None, None);
    assert_eq!(none.apply(&b, None).unwrap().num_rows(), 0);
}

#[test]
fn a_range_cuts_sorted_rows_by_search_and_others_by_a_filter() {
    let (schema, b) = batch();
    // After the key, the rows are sorted by `t`: [10, 30) is a slice.
    let sorted = cut(&schema, key(2), None, Some(1), Some(&[3]));
    assert_eq!(
        rows(&sorted.apply(&b, Some((10, 30))).unwrap(), 0),
        [2, 3, 4]
    );
    assert_eq!(
        rows(&sorted.apply(&b, Some((11, 20))).unwrap(), 0),
        Vec::<i64>::new()
    );
    let open = (i128::MIN, i128::MAX);
    assert_eq!(
        rows(&sorted.apply(&b, Some(open)).unwrap(), 0),
        [2, 3, 4, 5]
    );
    // Without a key the rows are not sorted by `t`: filtered, and `t` is
    // read though the output does not hold it.
    let unsorted = cut(&schema, vec![], None, Some(1), Some(&[3]));
    let out = unsorted.apply(&b, Some((10, 21))).unwrap();
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
    assert_eq!(rows(&c.apply(&b, None).unwrap(), 0), [2, 4]);
    assert_eq!(rows(&c.apply(&b, Some((15, 40))).unwrap(), 0), [4]);
    // Every column returned: the same rows, the schema's columns.
    let all = cut(&schema, vec![], Some(filter), None, None);
    let out = all.apply(&b, None).unwrap();
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
