//! Latency statistics of a load run: an HDR histogram of microseconds per
//! level, turned into a per-level table (clients, handled queries, q/s,
//! mean and tail latencies, errors).
//!
//! Why HDR histograms: p99.9 and p99.99 must be honest, and a
//! histogram with 3 significant digits is exact to 0.1% at any value while
//! merging per-client histograms costs nothing on the hot path.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies up to one hour, in microseconds, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Records one latency (clamped to the histogram's range).
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = (d.as_micros() as u64).clamp(1, h.high());
    h.record(us).expect("clamped to range");
}

/// One row of the report: a concurrency level, or one second of a write run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelReport {
    pub clients: usize,
    /// Successful requests.
    pub queries: u64,
    pub errors: u64,
    pub seconds: f64,
    pub qps: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub p9999_ms: f64,
    pub max_ms: f64,
}

impl LevelReport {
    /// Summarizes the latencies of successful requests over `elapsed`.
    pub fn new(clients: usize, h: &Histogram<u64>, errors: u64, elapsed: Duration) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        let q = |p: f64| {
            if h.is_empty() {
                0.0
            } else {
                ms(h.value_at_quantile(p))
            }
        };
        let seconds = elapsed.as_secs_f64();
        Self {
            clients,
            queries: h.len(),
            errors,
            seconds,
            qps: if seconds > 0.0 {
                h.len() as f64 / seconds
            } else {
                0.0
            },
            mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_ms: q(0.5),
            p95_ms: q(0.95),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            p9999_ms: q(0.9999),
            max_ms: if h.is_empty() { 0.0 } else { ms(h.max()) },
        }
    }
}

/// The JMeter-style per-level table (clients, handled queries, q/s, mean, p50, p95, p99, p99.9 ms, errors), as Markdown.
pub fn level_table(levels: &[LevelReport]) -> String {
    let mut s = String::from(
        "| clients | handled queries | q/s | mean ms | p50 ms | p95 ms | p99 ms | p99.9 ms | errors |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for l in levels {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            l.clients,
            l.queries,
            l.qps,
            l.mean_ms,
            l.p50_ms,
            l.p95_ms,
            l.p99_ms,
            l.p999_ms,
            l.errors
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latencies 1..=100,000 µs, each once: every quantile is known exactly.
    fn uniform() -> Histogram<u64> {
        let mut h = histogram();
        for us in 1..=100_000u64 {
            h.record(us).unwrap();
        }
        h
    }

    fn close(got: f64, want: f64) {
        // 3 significant digits: within 0.1% (plus the bucket's rounding).
        assert!(
            (got - want).abs() <= want * 0.001 + 0.001,
            "got {got}, want {want}"
        );
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let r = LevelReport::new(4, &uniform(), 3, Duration::from_secs(10));
        assert_eq!((r.clients, r.queries, r.errors), (4, 100_000, 3));
        close(r.qps, 10_000.0);
        close(r.mean_ms, 50.0005);
        close(r.p50_ms, 50.0);
        close(r.p95_ms, 95.0);
        close(r.p99_ms, 99.0);
        close(r.p999_ms, 99.9);
        close(r.p9999_ms, 99.99);
        close(r.max_ms, 100.0);
    }

    #[test]
    fn skewed_distribution_tail() {
        // 990 fast (1 ms) and 10 slow (500 ms): p99 is still fast, p99.9 slow.
        let mut h = histogram();
        for _ in 0..990 {
            record(&mut h, Duration::from_millis(1));
        }
        for _ in 0..10 {
            record(&mut h, Duration::from_millis(500));
        }
        let r = LevelReport::new(1, &h, 0, Duration::from_secs(1));
        close(r.p50_ms, 1.0);
        close(r.p99_ms, 1.0);
        close(r.p999_ms, 500.0);
        close(r.mean_ms, (990.0 + 5000.0) / 1000.0);
    }

    #[test]
    fn empty_level_is_zero_not_nan() {
        let r = LevelReport::new(2, &histogram(), 7, Duration::from_secs(1));
        assert_eq!((r.queries, r.errors, r.qps, r.p99_ms), (0, 7, 0.0, 0.0));
        let t = level_table(&[r]);
        assert!(
            t.lines().nth(2).unwrap().starts_with("| 2 | 0 | 0.0 |"),
            "{t}"
        );
    }
}
