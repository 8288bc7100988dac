use super::*;

const MIB: usize = 1 << 20;

#[test]
fn writes_slow_from_four_flushes_behind_to_the_longest_wait_at_eight() {
    let (flush, cap) = (96 * MIB, 6 << 30);
    assert_eq!(delay(0, flush, cap), Duration::ZERO);
    assert_eq!(delay(384 * MIB, flush, cap), Duration::ZERO);
    assert_eq!(delay(480 * MIB, flush, cap), MAX_DELAY / 4);
    assert_eq!(delay(576 * MIB, flush, cap), MAX_DELAY / 2);
    assert_eq!(delay(768 * MIB, flush, cap), MAX_DELAY);
    assert_eq!(delay(5 << 30, flush, cap), MAX_DELAY);
}

#[test]
fn small_flushes_do_not_slow_small_tables() {
    // A table flushed at every byte is behind only past the floor.
    assert_eq!(delay(FLOOR, 1, usize::MAX), Duration::ZERO);
    assert_eq!(delay(FLOOR + FLOOR / 2, 1, usize::MAX), MAX_DELAY / 2);
}

#[test]
fn writes_slow_before_a_small_cap_refuses_them() {
    // Under a cap smaller than eight flushes, the slowing ends at it.
    let (flush, cap) = (96 * MIB, 512 * MIB);
    assert_eq!(delay(256 * MIB, flush, cap), Duration::ZERO);
    assert_eq!(delay(384 * MIB, flush, cap), MAX_DELAY / 2);
    assert_eq!(delay(512 * MIB, flush, cap), MAX_DELAY);
    assert_eq!(delay(100, 96 * MIB, 0), MAX_DELAY);
}
