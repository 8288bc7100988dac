//! [`LatencyHistogram`]: fixed-bucket durations recorded with atomics, so
//! the WAL's commit thread and the storage engine's flushes can be timed
//! without a lock and without depending on a metrics library; the server
//! renders them as Prometheus histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (a last `+Inf` bucket follows).
pub const LATENCY_BOUNDS_S: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Counts of durations per bucket, their sum and count.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS_S.len() + 1],
    sum_micros: AtomicU64,
}

/// A copy of a [`LatencyHistogram`] at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySnapshot {
    /// Cumulative counts: `cumulative[i]` durations were at most
    /// `LATENCY_BOUNDS_S[i]`; the last entry is the total count.
    pub cumulative: Vec<u64>,
    pub sum_seconds: f64,
}

impl LatencySnapshot {
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

impl LatencyHistogram {
    pub fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BOUNDS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BOUNDS_S.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect();
        LatencySnapshot {
            cumulative,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(50)); // <= 0.0001
        h.record(Duration::from_millis(3)); // <= 0.005
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(60)); // +Inf
        let s = h.snapshot();
        assert_eq!(s.count(), 4);
        assert_eq!(s.cumulative[0], 1);
        assert_eq!(s.cumulative[4], 1, "<= 2.5 ms");
        assert_eq!(s.cumulative[5], 3, "<= 5 ms");
        assert_eq!(s.cumulative[LATENCY_BOUNDS_S.len() - 1], 3, "<= 10 s");
        assert!((s.sum_seconds - 60.00605).abs() < 1e-9);
    }
}
