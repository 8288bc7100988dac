//! Injectable time, so flush ages and manifest timestamps are deterministic in tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall-clock time in nanoseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now_ns(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start_ns: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(start_ns)))
    }
    pub fn advance(&self, ns: i64) {
        self.0.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
