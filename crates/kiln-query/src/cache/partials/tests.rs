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
    let aggregate = Arc::new(AggregateKey {
        groups: vec![],
        group_exprs: vec![],
        functions: vec![],
        projection: None,
    });
    let unfiltered = PartialKey::whole(aggregate.clone(), 4, None);
    let values = (0..10_000)
        .map(|i| lit(ScalarValue::Utf8(Some(format!("value number {i}")))))
        .collect();
    let list = in_list(col("name", &schema).unwrap(), values, &false, &schema).unwrap();
    let filtered = PartialKey::whole(aggregate, 4, Some(list));
    assert!(key_bytes(&unfiltered) < 1024, "{}", key_bytes(&unfiltered));
    // Each of the 10,000 values: its node and its string.
    assert!(
        key_bytes(&filtered) > 10_000 * (EXPR_NODE_BYTES + 15),
        "{}",
        key_bytes(&filtered)
    );
}
