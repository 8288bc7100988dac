//! Memory for query execution: one pool for the server, a share of it per
//! query.
//!
//! Why: DataFusion's operators that hold rows (sorts, hash aggregates,
//! joins, string_agg) reserve what they hold from the session's
//! `MemoryPool`, and without a bounded pool nothing stops them, so one
//! cross join with ORDER BY grew past 6 GB. The server pool holds
//! `--memory-limit`: an operator that can spill (sort, aggregate, join)
//! spills to `--spill-dir` when it cannot grow; the others fail with
//! "resources exhausted" (SQLSTATE 53200). Each query executes with a
//! [`QueryPool`] over it, which also stops it at `--query-memory-limit`,
//! so one query cannot take the whole pool from the rest.
//!
//! The server pool ([`ServerPool`]) is DataFusion's `GreedyMemoryPool`:
//! one atomic counter, no lock on the query path (its fair-spill pool takes
//! a mutex on every reservation change); the per-query limit provides the
//! fairness. Since DataFusion does not account everything a query holds,
//! the server pool also refuses to grow while the heap, counted at the
//! allocator ([`heap`]), holds more than the limit beyond what the server
//! keeps outside queries (memstores, caches, its state at start). Both
//! stop a tenth short of the limit ([`HEADROOM`]): that tenth is left for
//! pages the allocator holds beyond the heap.

pub mod heap;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// Bytes live on the heap, if known ([`heap::allocated`]).
pub type HeapGauge = Box<dyn Fn() -> Option<usize> + Send + Sync>;

/// Bytes the server holds outside queries now (memstores, caches).
pub type Outside = Box<dyn Fn() -> usize + Send + Sync>;

/// The share of `--memory-limit` (one part in this many) the pool leaves
/// for pages the allocator holds beyond the heap: blocks freed in pages
/// still in use, pages kept for reuse. Without it, 200 spilling
/// aggregations under a 1 GiB limit held up to a quarter over the limit
/// resident (docs/reliability.md).
pub const HEADROOM: usize = 10;

/// How often the server pool re-reads what is held outside queries.
const OUTSIDE_REFRESH_MS: u64 = 100;

/// The server's pool of `limit` bytes for query execution: what operators
/// reserve, and what the heap holds beyond the rest of the server.
pub struct ServerPool {
    accounted: GreedyMemoryPool,
    limit: usize,
    /// What queries may hold: `limit` less [`HEADROOM`].
    pool_limit: usize,
    heap: HeapGauge,
    /// The gauge when the pool was made, less what `outside` counted then.
    baseline: usize,
    outside: Outside,
    outside_now: AtomicUsize,
    refreshed_ms: AtomicU64,
    started: Instant,
}

impl std::fmt::Debug for ServerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPool")
            .field("limit", &self.limit)
            .field("reserved", &self.accounted.reserved())
            .field("heap_in_queries", &self.heap_in_queries())
            .finish()
    }
}

impl std::fmt::Display for ServerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server pool: {} of {} reserved",
            human(self.accounted.reserved()),
            human(self.limit)
        )
    }
}

impl ServerPool {
    /// A pool of `limit` bytes that also watches the heap through `heap`,
    /// leaving out what `outside` says the server holds apart from queries.
    pub fn new(limit: usize, heap: HeapGauge, outside: Outside) -> Self {
        let held = outside();
        let baseline = heap().map_or(0, |h| h.saturating_sub(held));
        let pool_limit = limit - limit / HEADROOM;
        Self {
            accounted: GreedyMemoryPool::new(pool_limit),
            limit,
            pool_limit,
            heap,
            baseline,
            outside,
            outside_now: AtomicUsize::new(held),
            refreshed_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// A pool that only accounts reservations (no heap figure).
    pub fn accounted_only(limit: usize) -> Self {
        Self::new(limit, Box::new(|| None), Box::new(|| 0))
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Heap held for queries, accounted or not: the heap less what the
    /// server holds apart from them. `None` without a heap figure.
    pub fn heap_in_queries(&self) -> Option<usize> {
        let heap = (self.heap)()?;
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.refreshed_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= OUTSIDE_REFRESH_MS
            && self
                .refreshed_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.outside_now.store((self.outside)(), Ordering::Relaxed);
        }
        let outside = self.baseline + self.outside_now.load(Ordering::Relaxed);
        Some(heap.saturating_sub(outside))
    }

    /// Query memory in use: the larger of what is reserved and what the
    /// heap holds for queries. Admission waits on this.
    pub fn in_use(&self) -> usize {
        self.accounted
            .reserved()
            .max(self.heap_in_queries().unwrap_or(0))
    }
}

impl MemoryPool for ServerPool {
    fn name(&self) -> &str {
        "kiln_server"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.accounted.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.accounted.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.accounted.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.accounted.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let heap = self.heap_in_queries();
        let refused = match heap {
            Some(heap) if heap + additional > self.pool_limit => true,
            _ => self.accounted.try_grow(reservation, additional).is_err(),
        };
        if refused {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "out of memory: queries are using the {} of the server's {} --memory-limit \
                 they may ({} reserved, {} on the heap); {} could not get {} more",
                human(self.pool_limit),
                human(self.limit),
                human(self.accounted.reserved()),
                heap.map_or("unknown".into(), human),
                reservation.consumer().name(),
                human(additional)
            )));
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.accounted.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.pool_limit)
    }
}

/// One query's view of the server pool: every reservation goes to the
/// server pool, and the query's total may not pass `limit`.
#[derive(Debug)]
pub struct QueryPool {
    server: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl QueryPool {
    pub fn new(server: Arc<dyn MemoryPool>, limit: usize) -> Self {
        Self {
            server,
            limit,
            used: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Display for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "query pool: {} of {} used, in {}",
            human(self.reserved()),
            human(self.limit),
            self.server
        )
    }
}

impl MemoryPool for QueryPool {
    fn name(&self) -> &str {
        "kiln_query"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.server.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.server.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.server.grow(reservation, additional);
        self.used.fetch_add(additional, Ordering::Relaxed);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.server.shrink(reservation, shrink);
        self.used.fetch_sub(shrink, Ordering::Relaxed);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let used = self.used.fetch_add(additional, Ordering::Relaxed);
        if used + additional > self.limit {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "out of memory: the query needs more than its {} (--query-memory-limit) \
                 for {}",
                human(self.limit),
                reservation.consumer().name()
            )));
        }
        if let Err(e) = self.server.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

/// `n` bytes as `1.5GiB` or `812.3MiB`.
fn human(n: usize) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    match n as f64 / MIB {
        m if m >= 1024.0 => format!("{:.1}GiB", m / 1024.0),
        m => format!("{m:.1}MiB"),
    }
}

#[cfg(test)]
mod tests;
