//! Packing a table's small in-memory batches of many days into a few, and
//! a frozen buffer's batches into one.
//!
//! Rows in memory are kept by day, so a table written thinly over many
//! days (a backfill of daily readings, devices sending late rows) holds a
//! small batch per day until its flush, and every query handles each one:
//! its filter, its cube states, its share of the scan's bookkeeping. The
//! background task packs them as a flush packs thin days into a segment:
//! small batches, in day order, into frozen batches of at most
//! `--segment-pack-rows` rows, each covering the range of [`Days`] of its
//! inputs. A live table, which holds a small batch for each of the few days
//! or weeks its rows are written to, is left alone ([`PACK_MIN_SMALL`]).
//!
//! Rows stay visible throughout: an active buffer is frozen in the same
//! hold of the lock that adds its batch to the frozen ones, and packed
//! batches replace their inputs in one pointer swap. A packing that a
//! flush began during is dropped (the flush took the batches it read), so
//! no row is ever in two batches or none.
//!
//! A freeze holds the lock, so it keeps the buffer's batches (a few, of
//! halving size) as they are; the background task merges them into one
//! the same way ([`MemStore::merge_frozen`]), so that queries handle one
//! batch, and one set of cube states, per frozen buffer. The merged batch
//! inherits its inputs' states ([`MemBatch::merged`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::compute::concat_batches;

use super::{Days, FrozenChunk, MemBatch, MemStore, TableVersion};
use crate::segment::runs_within;

/// A batch of fewer rows than this is small: below it a query spends more
/// on handling the batch than on reading its rows (DataFusion's batch
/// size).
pub const SMALL_ROWS: usize = 8192;

/// A table's small batches are packed once it holds this many. Fewer cost
/// a query little (about 2 us each), and a live stream's rows spread over
/// a few weeks (one small active buffer a day) are left as they are.
pub const PACK_MIN_SMALL: usize = 64;

/// Active buffers frozen per hold of the table's lock, so writers and
/// queries never wait long for a packing.
const FREEZE_PER_HOLD: usize = 256;

/// Runs of small frozen batches to pack ([`MemStore::small_runs`]), and
/// how many flushes had begun when they were picked.
pub(super) struct Runs {
    begun: u64,
    runs: Vec<Vec<Arc<FrozenChunk>>>,
}

impl MemStore {
    /// Packs the table's small in-memory batches, if it holds at least
    /// [`PACK_MIN_SMALL`]: freezes its small active buffers, then replaces
    /// runs of small frozen batches, in order of their first day, by one
    /// batch each of at most `limit` rows (0: nothing is packed). Returns
    /// how many batches were packed into others. Nothing is persisted: the
    /// rows stay in the WAL until their flush, as before.
    pub fn pack_small(&self, limit: usize) -> usize {
        match self.small_runs(limit) {
            Some(runs) => self.swap_packed(runs),
            None => 0,
        }
    }

    /// Merges each frozen buffer's batches into one (a freeze, under the
    /// table's lock, keeps them as they are), outside the lock, swapped in
    /// unless a flush began meanwhile. One buffer at a time, so a merge
    /// adds at most one buffer's rows to memory until its inputs go. A
    /// query then handles one batch per frozen buffer, with one set of
    /// cube states. Returns how many batches were merged into others.
    pub fn merge_frozen(&self) -> usize {
        let (begun, several) = {
            let st = self.state.lock();
            if st.flushing_from.is_some() {
                return 0;
            }
            let several = st.version.frozen.iter().filter(|c| c.batches.len() > 1);
            (st.flushes_begun, several.cloned().collect::<Vec<_>>())
        };
        let mut merged = 0;
        for c in several {
            let n = c.batches.len();
            let runs = vec![vec![c]];
            if self.swap_packed(Runs { begun, runs }) == 0 {
                break;
            }
            merged += n;
        }
        merged
    }

    /// Freezes the small active buffers, a few hundred per hold of the
    /// lock, and picks the runs of small frozen batches to pack: none if
    /// the table holds fewer than [`PACK_MIN_SMALL`] small batches, or a
    /// flush is under way.
    pub(super) fn small_runs(&self, limit: usize) -> Option<Runs> {
        if limit == 0 {
            return None;
        }
        let (begun, days) = {
            let st = self.state.lock();
            let small = |rows: usize| rows < SMALL_ROWS;
            let active: Vec<i32> = st
                .active
                .iter()
                .filter(|(_, b)| small(b.rows()))
                .map(|(d, _)| *d)
                .collect();
            let frozen = st.version.frozen.iter();
            let count = active.len() + frozen.filter(|c| small(c.rows())).count();
            if st.flushing_from.is_some() || count < PACK_MIN_SMALL {
                return None;
            }
            (st.flushes_begun, active)
        };
        for days in days.chunks(FREEZE_PER_HOLD) {
            let mut st = self.state.lock();
            if st.flushes_begun != begun {
                return None;
            }
            let chunks: Vec<_> = days
                .iter()
                .filter_map(|d| self.frozen_chunk(&mut st, *d))
                .collect();
            let mut frozen = st.version.frozen.clone();
            frozen.extend(chunks);
            st.version = Arc::new(TableVersion {
                manifest: st.version.manifest.clone(),
                frozen,
            });
        }
        let small = {
            let st = self.state.lock();
            let frozen = st.version.frozen.iter();
            frozen.filter(|c| c.rows() < SMALL_ROWS).cloned().collect()
        };
        // Sorted and cut outside the lock.
        let runs = runs(small, limit);
        (!runs.is_empty()).then_some(Runs { begun, runs })
    }

    /// Packs each run into one batch, outside the lock, and swaps the
    /// packed batches in for their inputs, unless a flush began since the
    /// runs were picked. Returns how many batches were packed.
    pub(super) fn swap_packed(&self, Runs { begun, runs }: Runs) -> usize {
        let packed: Vec<Arc<FrozenChunk>> = runs.iter().map(|run| self.packed(run)).collect();
        let mut st = self.state.lock();
        if st.flushes_begun != begun {
            return 0;
        }
        let gone: HashSet<u64> = runs.iter().flatten().map(|c| c.id).collect();
        let kept = st.version.frozen.iter().filter(|c| !gone.contains(&c.id));
        let frozen = kept.cloned().chain(packed).collect();
        st.version = Arc::new(TableVersion {
            manifest: st.version.manifest.clone(),
            frozen,
        });
        drop(st);
        let inputs = runs.iter().flatten().flat_map(|c| &c.batches);
        inputs.for_each(|b| b.release());
        gone.len()
    }

    /// The rows of `run` as one frozen batch, counted as its inputs were,
    /// inheriting what was derived from them ([`MemBatch::merged`]).
    fn packed(&self, run: &[Arc<FrozenChunk>]) -> Arc<FrozenChunk> {
        let inputs = || run.iter().flat_map(|c| c.batches.iter().map(|b| &**b));
        let batches = inputs().map(|b| &b.batch);
        let batch = concat_batches(&self.schema, batches).expect("frozen batches share the schema");
        let days = Days {
            first: run.iter().map(|c| c.days.first).min().unwrap_or_default(),
            last: run.iter().map(|c| c.days.last).max().unwrap_or_default(),
        };
        Arc::new(FrozenChunk {
            id: self.next_chunk.fetch_add(1, Ordering::Relaxed),
            days,
            batches: vec![Arc::new(MemBatch::merged(
                batch,
                inputs(),
                self.bytes.clone(),
            ))],
            bytes: run.iter().map(|c| c.bytes).sum(),
        })
    }
}

/// `small` in order of first day, cut into runs of at most `limit` rows
/// together; the runs of two batches or more.
fn runs(mut small: Vec<Arc<FrozenChunk>>, limit: usize) -> Vec<Vec<Arc<FrozenChunk>>> {
    small.sort_by_key(|c| (c.days, c.id));
    let runs = runs_within(small, |c| c.rows(), limit).into_iter();
    runs.filter(|run| run.len() > 1).collect()
}
