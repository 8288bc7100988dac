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
