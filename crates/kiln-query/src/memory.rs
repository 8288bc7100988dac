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
//! pages the allocator holds beyond the heap. Those pages are not bounded
//! by the heap, though: under 200 heavy `count(DISTINCT)`s they held 280
//! to 540 MiB beyond it. So once queries have reserved half the pool, it
//! also refuses growth that would take the process's resident memory,
//! less what it held at start and what the server keeps outside queries,
//! past the limit: the figure the limit is meant to bound, read from the
//! system every few milliseconds. Below half, reservations are granted
//! whatever is resident: under a small limit, connections and threads
//! alone can hold more than the limit, and queries must still run.

pub mod heap;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// Bytes of something, if known: live on the heap ([`heap::allocated`]),
/// resident ([`heap::resident`]).
pub type Gauge = Box<dyn Fn() -> Option<usize> + Send + Sync>;

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

/// How often the server pool re-reads resident memory: growing at 450
/// MB/s (the fastest seen), a figure this old is 4.5 MB behind.
const RESIDENT_REFRESH_MS: u64 = 10;

/// A figure read again when it is older than some milliseconds: one
/// thread re-reads it (the one that wins the timestamp), the others use
/// the last.
struct Refreshed {
    read: Box<dyn Fn() -> usize + Send + Sync>,
    every_ms: u64,
    value: AtomicUsize,
    at_ms: AtomicU64,
}

impl Refreshed {
    fn new(read: Box<dyn Fn() -> usize + Send + Sync>, every_ms: u64) -> Self {
        let value = AtomicUsize::new(read());
        Self {
            read,
            every_ms,
            value,
            at_ms: AtomicU64::new(0),
        }
    }

    fn get(&self, now_ms: u64) -> usize {
        let last = self.at_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) >= self.every_ms
            && self
                .at_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.value.store((self.read)(), Ordering::Relaxed);
        }
        self.value.load(Ordering::Relaxed)
    }
}

/// The server's pool of `limit` bytes for query execution: what operators
/// reserve, what the heap holds beyond the rest of the server, and what
/// is resident beyond it.
pub struct ServerPool {
    accounted: GreedyMemoryPool,
    limit: usize,
    /// What queries may hold: `limit` less [`HEADROOM`].
    pool_limit: usize,
    heap: Gauge,
    /// The gauge when the pool was made, less what `outside` counted then.
    baseline: usize,
    outside: Refreshed,
    /// Resident memory, if the system says ([`heap::resident`]).
    resident: Option<Refreshed>,
    /// Resident memory when the pool was made, less what `outside`
    /// counted then.
    resident_baseline: usize,
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
    /// A pool of `limit` bytes that also watches the heap through `heap`
    /// and resident memory through `resident`, leaving out what `outside`
    /// says the server holds apart from queries.
    pub fn new(limit: usize, heap: Gauge, resident: Gauge, outside: Outside) -> Self {
        let held = outside();
        let baseline = heap().map_or(0, |h| h.saturating_sub(held));
        let resident_now = resident();
        let resident_baseline = resident_now.map_or(0, |r| r.saturating_sub(held));
        let resident = resident_now.map(|_| {
            Refreshed::new(
                Box::new(move || resident().unwrap_or(0)),
                RESIDENT_REFRESH_MS,
            )
        });
        let pool_limit = limit - limit / HEADROOM;
        Self {
            accounted: GreedyMemoryPool::new(pool_limit),
            limit,
            pool_limit,
            heap,
            baseline,
            outside: Refreshed::new(outside, OUTSIDE_REFRESH_MS),
            resident,
            resident_baseline,
            started: Instant::now(),
        }
    }

    /// A pool that only accounts reservations (no heap or resident figure).
    pub fn accounted_only(limit: usize) -> Self {
        Self::new(limit, Box::new(|| None), Box::new(|| None), Box::new(|| 0))
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Heap held for queries, accounted or not: the heap less what the
    /// server holds apart from them. `None` without a heap figure.
    pub fn heap_in_queries(&self) -> Option<usize> {
        let heap = (self.heap)()?;
        let outside = self.baseline + self.outside.get(self.now_ms());
        Some(heap.saturating_sub(outside))
    }

    /// Resident memory beyond what the process held at start and what
    /// the server holds apart from queries: the heap for queries and the
    /// pages the allocator keeps beyond it. `None` without the figure.
    pub fn resident_in_queries(&self) -> Option<usize> {
        let now = self.now_ms();
        let resident = self.resident.as_ref()?.get(now);
        let outside = self.resident_baseline + self.outside.get(now);
        Some(resident.saturating_sub(outside))
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
        // Resident memory is looked at (and read from the system) only
        // once half the pool is reserved.
        let past_half = self.accounted.reserved() + additional > self.pool_limit / 2;
        let refused = match heap {
            Some(heap) if heap + additional > self.pool_limit => true,
            _ if past_half
                && self
                    .resident_in_queries()
                    .is_some_and(|r| r + additional > self.limit) =>
            {
                true
            }
            _ => self.accounted.try_grow(reservation, additional).is_err(),
        };
        if refused {
            let resident = self.resident_in_queries();
            let figure = |n: Option<usize>| n.map_or("unknown".into(), human);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "out of memory: queries are using the {} of the server's {} --memory-limit \
                 they may ({} reserved, {} on the heap, {} resident); {} could not get {} more",
                human(self.pool_limit),
                human(self.limit),
                human(self.accounted.reserved()),
                figure(heap),
                figure(resident),
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
