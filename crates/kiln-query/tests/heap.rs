//! The heap counter as a global allocator: it sees allocations no pool
//! accounts for, and frees.

use kiln_query::memory::heap::{Counting, FLUSH_BYTES, allocated};

#[global_allocator]
static GLOBAL: Counting<std::alloc::System> = Counting(std::alloc::System);

#[test]
fn the_counting_allocator_tracks_live_heap_bytes() {
    let slack = 4 * FLUSH_BYTES as i64;
    let before = allocated().expect("installed") as i64;
    let big = vec![7u8; 64 << 20];
    let during = allocated().unwrap() as i64;
    assert!(
        (during - before - (64 << 20)).abs() < slack,
        "{before} -> {during}"
    );
    let mut grown = big;
    grown.reserve_exact(64 << 20);
    let regrown = allocated().unwrap() as i64;
    assert!((regrown - before - (128 << 20)).abs() < slack);
    drop(grown);
    let after = allocated().unwrap() as i64;
    assert!((after - before).abs() < slack, "{before} -> {after}");
}
