use super::*;

#[test]
fn a_fingerprint_is_seen_from_its_second_pass_until_its_slot_is_taken() {
    let cache = PartialCache::new(1 << 20);
    assert!(!cache.seen_before(5), "first pass");
    assert!(cache.seen_before(5), "second pass");
    assert!(cache.seen_before(5));
    // Another fingerprint of the same slot takes it.
    let same_slot = 5 + RECENT_SLOTS as u64;
    assert!(!cache.seen_before(same_slot));
    assert!(!cache.seen_before(5), "forgotten");
    // Other slots are left alone.
    assert!(!cache.seen_before(6));
    assert!(cache.seen_before(5));
    assert!(cache.seen_before(6));
}

#[test]
fn a_keys_filter_is_counted_in_its_bytes() {
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::{col, in_list, lit};

    let schema = Schema::new(vec![Field::new("name", DataType::Utf8, false)]);
    let aggregate = Arc::new(AggregateKey::new(vec![], vec![], vec![], None));
    let unfiltered = PartialKey::whole(aggregate.clone(), None);
    let values = (0..10_000)
        .map(|i| lit(ScalarValue::Utf8(Some(format!("value number {i}")))))
        .collect();
    let list = in_list(col("name", &schema).unwrap(), values, &false, &schema).unwrap();
    let filtered = PartialKey::whole(aggregate, Some(list));
    assert!(key_bytes(&unfiltered) < 1024, "{}", key_bytes(&unfiltered));
    // Each of the 10,000 values: its node and its string.
    assert!(
        key_bytes(&filtered) > 10_000 * (EXPR_NODE_BYTES + 15),
        "{}",
        key_bytes(&filtered)
    );
}

#[test]
fn keys_hashed_once_compare_by_what_they_hold() {
    use std::hash::BuildHasher;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::{col, lit};

    let schema = Schema::new(vec![Field::new("n", DataType::Int64, false)]);
    let n = || col("n", &schema).unwrap();
    let aggregate = |projection: Vec<usize>| {
        Arc::new(AggregateKey::new(
            vec![vec![false]],
            vec![n()],
            vec![],
            Some(projection),
        ))
    };
    let state = std::hash::RandomState::new();
    // Made apart from equal parts: equal, and hashed alike.
    let (a, b) = (aggregate(vec![0]), aggregate(vec![0]));
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(a, b);
    assert_eq!(state.hash_one(&a), state.hash_one(&b));
    assert_ne!(a, aggregate(vec![0, 1]), "another projection");
    let runs = |end: usize, value: i64| vec![(0..end, Some(lit(value)))];
    let key = PartialKey::new(a.clone(), runs(3, 1));
    assert_eq!(key, PartialKey::new(b.clone(), runs(3, 1)));
    assert_eq!(
        key.fingerprint(),
        PartialKey::new(b.clone(), runs(3, 1)).fingerprint()
    );
    assert_ne!(key, PartialKey::new(b.clone(), runs(4, 1)), "other slices");
    assert_ne!(key, PartialKey::new(b.clone(), runs(3, 2)), "another value");
    assert_ne!(
        key.fingerprint(),
        PartialKey::new(b.clone(), runs(3, 2)).fingerprint()
    );
    assert_ne!(
        PartialKey::whole(a.clone(), Some(lit(1i64))),
        PartialKey::whole(b, Some(lit(2i64)))
    );
    // A lookup hashes the fingerprint alone.
    let mut alone = std::hash::DefaultHasher::new();
    key.hash(&mut alone);
    let mut fingerprint = std::hash::DefaultHasher::new();
    fingerprint.write_u64(key.fingerprint());
    assert_eq!(alone.finish(), fingerprint.finish());
}

#[test]
fn entries_of_no_rows_are_counted_so_the_cache_stays_bounded() {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;

    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from_iter_values(0..10))],
    )
    .unwrap();
    let mut file = vec![];
    let mut w = ArrowWriter::try_new(&mut file, schema.clone(), None).unwrap();
    w.write(&rows).unwrap();
    w.close().unwrap();
    let segment = Arc::new(DecodedSegment::decode(Bytes::from(file), &schema).unwrap());
    let capacity = 64 << 10;
    let cache = PartialCache::new(capacity);
    // Reads of distinct aggregates under no filter, each keeping no rows.
    for i in 0..10_000 {
        let aggregate = Arc::new(AggregateKey::new(vec![], vec![], vec![], Some(vec![i])));
        let key = PartialKey::whole(aggregate, None);
        cache.insert(&segment, key, Arc::from(Vec::<RecordBatch>::new()));
    }
    assert!(cache.usage() <= capacity, "{} bytes", cache.usage());
    assert!(
        cache.entries() * ENTRY_BYTES <= capacity,
        "{} entries",
        cache.entries()
    );
    assert!(cache.entries() > 0);
}
