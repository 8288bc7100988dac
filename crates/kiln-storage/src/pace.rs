//! Write pacing: a write to a table whose flushes fall behind first
//! waits a moment, so the flushes catch up before memory fills.
//!
//! Why: flushes, compactions and cube parts run below the priority of the
//! threads that take writes (on idle cores only, then at `--execution-nice`
//! once a table falls behind: [`crate::cpu`]), so that queries answer
//! under any write load. Under writes that keep every core busy, they get
//! too little of the CPU: a table's unflushed rows grow, each flush takes
//! everything held and so takes longer than the last, and once rows fill
//! `--memstore-max-bytes` writes are refused. A table holding more than
//! [`BEHIND`] flushes' worth of rows (`--flush-bytes`, at least
//! [`FLOOR`]) is behind: each write to it first sleeps, from nothing
//! there up to [`MAX_DELAY`] at twice that. The cores its writers leave
//! idle go to the flushes, and writes settle at the rate the flushes keep
//! up with; they are refused only if even that does not hold memory under
//! the cap. Each write waits on its own: nothing is queued or locked.

use std::time::Duration;

/// How many flushes' worth of rows a table holds before its writes slow.
pub const BEHIND: usize = 4;

/// Rows a table may hold before its writes slow, however small
/// `--flush-bytes` is: a flush is due long before.
pub const FLOOR: usize = 64 << 20;

/// Longest a write waits, when its table holds twice what slows it.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// How long a write to a table holding `held` bytes waits first. Writes
/// slow from `BEHIND × flush_bytes` (at least [`FLOOR`], at most half of
/// `cap`, the memstore's limit) and wait [`MAX_DELAY`] at twice that.
pub fn delay(held: usize, flush_bytes: usize, cap: usize) -> Duration {
    let from = flush_bytes.saturating_mul(BEHIND).max(FLOOR).min(cap / 2);
    if held <= from {
        return Duration::ZERO;
    }
    let over = (held - from) as f64 / from.max(1) as f64;
    MAX_DELAY.mul_f64(over.min(1.0))
}

#[cfg(test)]
mod tests;
