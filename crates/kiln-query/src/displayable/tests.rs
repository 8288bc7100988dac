use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Array, Int64Array, Time64NanosecondArray, TimestampSecondArray,
};
use arrow::datatypes::Field;

use super::*;
use crate::ErrorKind;

fn batch(columns: Vec<ArrayRef>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[test]
fn results_of_types_that_always_print_are_not_checked() {
    let ns = Arc::new(arrow::array::TimestampNanosecondArray::from(vec![i64::MAX]));
    let ints = Arc::new(Int64Array::from(vec![i64::MAX]));
    assert!(Displayable::of(&batch(vec![ns, ints]).schema()).is_none());
}

#[test]
fn the_first_value_that_does_not_print_is_named_by_column_and_row() {
    let ok = Arc::new(TimestampSecondArray::from(vec![
        Some(0),
        None,
        Some(1 << 40),
    ]));
    let days = Arc::new(Date32Array::from(vec![Some(0), Some(19_000)]));
    let first = batch(vec![
        ok.clone(),
        Arc::new(Date32Array::from(vec![Some(1), None, Some(2)])),
    ]);
    let mut check = Displayable::of(&first.schema()).unwrap();
    check.check(first).unwrap();
    let bad = batch(vec![
        Arc::new(TimestampSecondArray::from(vec![Some(0), Some(i64::MAX)])),
        days,
    ]);
    let e = check.check(bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DatetimeOutOfRange);
    assert!(
        e.to_string()
            .starts_with("timestamp out of range in column \"c0\", row 5:"),
        "{e}"
    );
    let far = batch(vec![Arc::new(Date32Array::from(vec![
        Some(0),
        Some(i32::MAX),
    ]))]);
    let mut check = Displayable::of(&far.schema()).unwrap();
    let e = check.check(far).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("date out of range in column \"c0\", row 2:"),
        "{e}"
    );
}

#[test]
fn the_edges_of_the_range_print_and_a_time_past_midnight_does_not() {
    let edge = NaiveDate::from_ymd_opt(262_000, 12, 31).unwrap();
    let secs = edge.and_hms_opt(23, 59, 59).unwrap().and_utc().timestamp();
    let stamps_again = || -> ArrayRef {
        Arc::new(TimestampSecondArray::from(vec![secs, -secs]).with_timezone("+14:00"))
    };
    let stamps = stamps_again();
    let times = Arc::new(Time64NanosecondArray::from(vec![86_399_999_999_999, 0]));
    let b = batch(vec![stamps, times]);
    let mut check = Displayable::of(&b.schema()).unwrap();
    let printed = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&b))
        .unwrap()
        .to_string();
    assert!(!printed.contains("ERROR"), "{printed}");
    check.check(b).unwrap();
    let past = Arc::new(Time64NanosecondArray::from(vec![0, 86_400_000_000_000]));
    let e = check.check(batch(vec![stamps_again(), past])).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("time out of range in column \"c1\", row 4:"),
        "{e}"
    );
}

#[test]
fn a_value_inside_a_list_struct_or_dictionary_is_checked_and_its_row_named() {
    use arrow::array::{DictionaryArray, Int32Array, ListArray, StructArray};
    use arrow::buffer::OffsetBuffer;
    let days = |v: Vec<Option<i32>>| Arc::new(Date32Array::from(v)) as ArrayRef;
    let item = Arc::new(Field::new("item", DataType::Date32, true));
    // Rows: [0, 1], [], [2, MAX]: the third row holds the bad date.
    let lists = ListArray::new(
        item.clone(),
        OffsetBuffer::from_lengths([2, 0, 2]),
        days(vec![Some(0), Some(1), Some(2), Some(i32::MAX)]),
        None,
    );
    // Sliced past its bad row: nothing to refuse.
    let head = Arc::new(lists.slice(0, 2)) as ArrayRef;
    let b = batch(vec![head]);
    let mut check = Displayable::of(&b.schema()).unwrap();
    check.check(b).unwrap();
    let b = batch(vec![Arc::new(lists) as ArrayRef]);
    let e = check.check(b).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("date out of range in column \"c0\", row 5:"),
        "{e}"
    );
    let structs = StructArray::from(vec![
        (
            Arc::new(Field::new("n", DataType::Int64, true)),
            Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef,
        ),
        (item.clone(), days(vec![Some(3), Some(i32::MIN)])),
    ]);
    let keys = DictionaryArray::<arrow::datatypes::Int32Type>::new(
        Int32Array::from(vec![0, 0, 1]),
        days(vec![Some(0), Some(i32::MAX)]),
    );
    for (column, row) in [(Arc::new(structs) as ArrayRef, 2), (Arc::new(keys) as _, 3)] {
        let b = batch(vec![column]);
        let e = Displayable::of(&b.schema()).unwrap().check(b).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("date out of range in column \"c0\", row {row}:")),
            "{e}"
        );
    }
}
