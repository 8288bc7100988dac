//! Pieces against the bytes their rows' values take.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, DictionaryArray, Int64Array, LargeStringArray, RecordBatch, StringArray,
    StringViewArray, StringViewBuilder,
};
use arrow::datatypes::Int32Type;

use super::pieces;

/// `rows` views sharing one `len`-byte value (one copy in memory).
fn shared(len: usize, rows: usize) -> ArrayRef {
    let mut b = StringViewBuilder::with_capacity(rows);
    b.try_append_value_n("x".repeat(len), rows).unwrap();
    Arc::new(b.finish())
}

fn batch(columns: Vec<ArrayRef>) -> RecordBatch {
    let named = columns
        .into_iter()
        .enumerate()
        .map(|(i, c)| (format!("c{i}"), c));
    RecordBatch::try_from_iter(named).unwrap()
}

/// The ranges cover the rows in order, and each holds one row or rows
/// whose `bytes` are at most `target`; a range stops only where its next
/// row would pass `target`.
fn check(b: &RecordBatch, target: u64, bytes: &dyn Fn(usize) -> u64) -> usize {
    let ranges = pieces(b, target);
    let mut next = 0;
    for (i, r) in ranges.iter().enumerate() {
        assert_eq!(r.start, next, "{ranges:?}");
        let sum: u64 = r.clone().map(bytes).sum();
        assert!(r.len() == 1 || sum <= target, "{r:?}: {sum} > {target}");
        if i + 1 < ranges.len() {
            assert!(
                sum + bytes(r.end) > target,
                "{r:?} could take row {}",
                r.end
            );
        }
        next = r.end;
    }
    assert_eq!(next, b.num_rows());
    ranges.len()
}

#[test]
fn shared_values_are_counted_once_per_row() {
    // 1,000 rows of one 100 KB value: about 100 MB as text, 100 KB in
    // memory; ten rows a piece.
    let b = batch(vec![shared(100_000, 1000)]);
    assert_eq!(check(&b, 1 << 20, &|_| 100_000), 100);
    // A row larger than the target is a piece alone.
    let b = batch(vec![shared(3 << 20, 4)]);
    assert_eq!(check(&b, 1 << 20, &|_| 3 << 20), 4);
}

#[test]
fn a_batch_that_fits_is_one_piece() {
    let b = batch(vec![
        Arc::new(Int64Array::from_iter_values(0..100)),
        Arc::new(StringArray::from_iter_values(
            (0..100).map(|i| i.to_string()),
        )),
    ]);
    assert_eq!(
        pieces(&b, 1 << 20),
        std::iter::once(0..100).collect::<Vec<_>>()
    );
    let empty = b.slice(0, 0);
    assert_eq!(
        pieces(&empty, 1 << 20),
        std::iter::once(0..0).collect::<Vec<_>>()
    );
}

/// Row sizes that change within a batch (a small first row does not set
/// the size of the rest), over each kind of text array, sliced ones too,
/// and dictionaries whose values are shared.
#[test]
fn every_kind_of_text_array_is_cut_by_its_rows() {
    let lens: Vec<usize> = (0..300)
        .map(|i| [3, 40_000, 0, 900_000, 7][i % 5] * (i % 3))
        .collect();
    let values: Vec<String> = lens.iter().map(|n| "é".repeat(n / 2)).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(refs.clone())),
        Arc::new(LargeStringArray::from(refs.clone())),
        Arc::new(StringViewArray::from(refs.clone())),
    ];
    let target = 1 << 20;
    for array in arrays {
        for (offset, len) in [(0, 300), (17, 200)] {
            let b = batch(vec![
                array.slice(offset, len),
                Arc::new(Int64Array::from(vec![1; len])),
            ]);
            let bytes = |r: usize| values[offset + r].len() as u64 + super::FIXED_BYTES;
            check(&b, target, &bytes);
        }
    }
    // A dictionary: each row counts its value's bytes.
    let keys: Vec<i32> = (0..300).map(|i| i % 5).collect();
    let dict = DictionaryArray::<Int32Type>::try_new(
        keys.clone().into(),
        Arc::new(StringArray::from(refs[..5].to_vec())),
    )
    .unwrap();
    let b = batch(vec![Arc::new(dict)]);
    check(&b, target, &|r| values[keys[r] as usize].len() as u64);
}

/// Lists (and other nested values) are cut by their memory, shared
/// evenly by the rows.
#[test]
fn nested_values_are_cut_by_their_memory() {
    use arrow::array::ListArray;
    use arrow::datatypes::Int64Type;
    let rows = 10_000;
    let list = ListArray::from_iter_primitive::<Int64Type, _, _>(
        (0..rows).map(|i| Some((0..100).map(move |j| Some(i * j)))),
    );
    let b = batch(vec![Arc::new(list)]);
    let ranges = pieces(&b, 1 << 20);
    // 8 MB of values and 40 KB of offsets: 8 or 9 pieces.
    assert!((8..=9).contains(&ranges.len()), "{ranges:?}");
    assert_eq!(ranges.first().unwrap().start, 0);
    assert_eq!(ranges.last().unwrap().end, rows as usize);
    assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
}
