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
//! The server pool is DataFusion's `GreedyMemoryPool`: one atomic counter,
//! no lock on the query path (its fair-spill pool takes a mutex on every
//! reservation change); the per-query limit provides the fairness.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// The server's pool of `limit` bytes.
pub fn server_pool(limit: usize) -> Arc<dyn MemoryPool> {
    Arc::new(GreedyMemoryPool::new(limit))
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
            return Err(match e {
                DataFusionError::ResourcesExhausted(_) => {
                    DataFusionError::ResourcesExhausted(format!(
                        "out of memory: queries are using the server's {} (--memory-limit); \
                         {} of this query could not get {}",
                        human(match self.server.memory_limit() {
                            MemoryLimit::Finite(n) => n,
                            _ => usize::MAX,
                        }),
                        reservation.consumer().name(),
                        human(additional)
                    ))
                }
                other => other,
            });
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

/// `n` bytes as `1.5 GiB`.
fn human(n: usize) -> String {
    kiln_storage::ByteSize::b(n as u64).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(pool: &Arc<dyn MemoryPool>, name: &str) -> MemoryReservation {
        MemoryConsumer::new(name).register(pool)
    }

    #[test]
    fn a_query_stops_at_its_own_limit_and_frees_what_it_held() {
        let server = server_pool(1 << 20);
        let query: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(server.clone(), 1000));
        let r = reservation(&query, "sort");
        r.try_grow(800).unwrap();
        assert_eq!(server.reserved(), 800);
        let e = r.try_grow(300).unwrap_err().to_string();
        assert!(e.contains("--query-memory-limit"), "{e}");
        assert_eq!(query.reserved(), 800);
        drop(r);
        assert_eq!((server.reserved(), query.reserved()), (0, 0));
    }

    #[test]
    fn queries_together_stop_at_the_server_limit() {
        let server = server_pool(1000);
        let a: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(server.clone(), 900));
        let b: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(server.clone(), 900));
        let ra = reservation(&a, "agg a");
        let rb = reservation(&b, "agg b");
        ra.try_grow(700).unwrap();
        let e = rb.try_grow(700).unwrap_err().to_string();
        assert!(e.contains("--memory-limit"), "{e}");
        assert_eq!(b.reserved(), 0);
        rb.try_grow(300).unwrap();
        assert_eq!(server.reserved(), 1000);
    }
}
