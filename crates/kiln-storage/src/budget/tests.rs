use std::sync::Arc;

use arrow::array::{DictionaryArray, Int32Array, Int64Array, StringArray};
use arrow::datatypes::{Field, Int32Type};

use super::*;

#[test]
fn a_dictionary_counts_its_value_for_each_row_that_refers_to_it() {
    let table = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("url", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]);
    // 1,000 rows of one 10,000-byte value, and a short one never used.
    let urls = DictionaryArray::<Int32Type>::new(
        Int32Array::from(vec![0; 1_000]),
        Arc::new(StringArray::from(vec!["u".repeat(10_000), "v".into()])),
    );
    let ids = Int64Array::from_iter_values(0..1_000);
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(ids.clone()) as ArrayRef),
        ("url", Arc::new(urls)),
    ])
    .unwrap();
    let bytes = footprint(&batch, &table);
    // The values per row and their offsets, the ids, and `n` as NULLs.
    let expected = 1_000 * (10_000 + WIDE) + ids.get_array_memory_size() as u64 + 1_000 * WIDE;
    assert_eq!(bytes, expected);
}

#[tokio::test(start_paused = true)]
async fn writes_wait_for_the_budget_in_turn_and_are_refused_after_the_wait() {
    let budget = MemoryBudget::new(10 << 20);
    // Past the whole budget: clamped, so it runs alone.
    let all = budget.reserve_write(100 << 20).await.unwrap();
    let err = budget.reserve_write(1).await.err().unwrap();
    assert!(
        matches!(err, Error::WritesFull { need, limit } if need == COPIES && limit == 10 << 20),
        "{err}"
    );
    let spent = budget.reserve(3, Duration::from_secs(1)).await.err();
    assert_eq!(
        spent,
        Some(Spent {
            need: 3,
            limit: 10 << 20
        })
    );
    drop(all);
    let half = budget.reserve(5 << 20, WAIT).await.unwrap();
    let other = budget.reserve(5 << 20, WAIT).await.unwrap();
    // A third waits until one is given back.
    let budget = Arc::new(budget);
    let waiting = tokio::spawn({
        let budget = budget.clone();
        async move { budget.reserve(4 << 20, WAIT).await.map(drop) }
    });
    tokio::time::sleep(WAIT / 2).await;
    assert!(!waiting.is_finished());
    assert_eq!(budget.reserved_bytes(), 10 << 20);
    drop(half);
    waiting.await.unwrap().unwrap();
    assert_eq!(budget.reserved_bytes(), 5 << 20);
    drop(other);
    assert_eq!((budget.reserved_bytes(), budget.waits()), (0, 3));
}

#[tokio::test]
async fn a_reservation_shrinks_to_what_it_keeps() {
    let budget = MemoryBudget::new(1 << 20);
    let mut held = budget.reserve(1 << 20, WAIT).await.unwrap();
    held.shrink_to(1025);
    // Rounded up to whole KiB.
    assert_eq!(budget.reserved_bytes(), 2048);
    // What was given back is free at once.
    let rest = budget.reserve((1 << 20) - 2048, Duration::ZERO).await;
    assert!(rest.is_ok());
    held.shrink_to(0);
    drop(rest);
    assert_eq!(budget.reserved_bytes(), 0);
}
