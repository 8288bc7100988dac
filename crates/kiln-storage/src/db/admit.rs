//! Write admission: before a write is applied it waits while its table's
//! flushes fall behind ([`crate::pace`]) and while the rows held in memory,
//! all tables, fill `--memstore-max-bytes`. A write that finds its table
//! behind also marks background work urgent ([`crate::cpu::Urgency`]), so
//! the flush under way gets the CPU before the next background round.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Db, MEMSTORE_WAIT};
use crate::error::{Error, Result};
use crate::pace;
use crate::table::Table;

impl Db {
    /// Waits as long as `t`'s unflushed rows ask ([`pace::delay`]).
    pub(super) async fn pace(&self, t: &Table) {
        let c = &self.inner.config;
        let (flush, cap) = (c.flush_bytes.as_usize(), c.memstore_max_bytes.as_usize());
        let held = t.mem.bytes();
        if held >= flush.saturating_mul(crate::cpu::URGENT) {
            // The flush under way takes its next pieces of work at the
            // execution threads' priority; the background round clears it.
            self.inner.cpu.urgency().set(true);
        }
        let wait = pace::delay(held, flush, cap);
        if wait.is_zero() {
            return;
        }
        let m = &self.inner.metrics;
        m.writes_paced.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        m.pace_micros.fetch_add(micros, Ordering::Relaxed);
        tokio::time::sleep(wait).await;
    }

    /// Waits until the rows held in memory, all tables, fit
    /// `--memstore-max-bytes`, or fails after [`MEMSTORE_WAIT`].
    pub(super) async fn room_in_memory(&self) -> Result<()> {
        let cap = self.inner.config.memstore_max_bytes.as_usize();
        let held = || -> usize {
            let registry = self.inner.registry.load();
            registry.by_id.values().map(|t| t.mem.bytes()).sum()
        };
        let started = Instant::now();
        loop {
            let now = held();
            if now <= cap {
                return Ok(());
            }
            if started.elapsed() >= MEMSTORE_WAIT {
                return Err(Error::MemstoreFull { held: now, cap });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
