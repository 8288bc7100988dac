//! The in-memory part of a table: per day partition, a small mutable
//! [`ActiveBuffer`] and, once it passes the freeze size, its immutable
//! batches frozen as they are ([`FrozenChunk`]).
//!
//! One short per-table mutex guards the active buffers and the pointer to
//! the current [`TableVersion`]; it is held to append rows, to swap
//! pointers, and to copy rows that arrived since the last snapshot, never
//! for a flush or a walk over the memstore, and a freeze under it copies
//! nothing (copying a day's rows into one batch there held up every
//! writer and query of the table at each flush). Memory is counted at
//! insert.
//!
//! Every row in memory sits in an immutable [`MemBatch`], so what upper
//! layers derive from a batch's rows (a cube's states) can be made once
//! and kept with it ([`MemBatch::derived`]) for as long as the batch lives.
//! What they keep is counted with the rows ([`MemBatch::charge`]) while
//! the batch is in the memstore: a table with many cubes holds states
//! for each, and the memstore's limits must see them. A batch merged from
//! others inherits what was derived from them (`batch`), so it is not made
//! again from every row.
//!
//! A table written thinly over many days (a backfill) would hold a small
//! batch per day, and every query would handle each one. The background
//! task packs such small batches of many days into a few frozen batches
//! ([`MemStore::pack_small`], in `pack`), as a flush packs thin days into a
//! segment; a frozen batch therefore covers a range of [`Days`].

mod active;
mod batch;
mod pack;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;

pub use active::ActiveBuffer;
pub use batch::{DerivedKey, MemBatch, view_strings};
pub use pack::{PACK_MIN_SMALL, SMALL_ROWS};

use crate::manifest::Manifest;
use crate::schema::{NANOS_PER_DAY, TableDef, split_by_day};
use crate::segment::batch_bytes;

/// The days an in-memory batch's rows fall in: one day for an active
/// buffer's batches and most frozen ones, a range for a packed batch of
/// small days ([`MemStore::pack_small`]). Its rows may not cover every day
/// of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Days {
    pub first: i32,
    pub last: i32,
}

impl Days {
    /// The one day `day`.
    pub fn one(day: i32) -> Self {
        Self {
            first: day,
            last: day,
        }
    }

    /// The first and last nanosecond of the range (clamped to `i64`'s
    /// range: the first and last days a timestamp can fall in are partial).
    pub fn time_range(&self) -> (i64, i64) {
        let start = |d: i32| i64::from(d).saturating_mul(NANOS_PER_DAY);
        let end = start(self.last).saturating_add(NANOS_PER_DAY - 1);
        (start(self.first), end)
    }
}

/// The immutable rows of one partition, or of several small ones packed
/// together, waiting to be flushed.
#[derive(Debug)]
pub struct FrozenChunk {
    pub id: u64,
    pub days: Days,
    /// A frozen active buffer's batches, as queries read them: a freeze
    /// holds the table's lock, so it copies nothing. A packing makes one.
    pub batches: Vec<Arc<MemBatch>>,
    pub bytes: usize,
}

impl FrozenChunk {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.rows()).sum()
    }
}

/// What a query pins: one manifest version plus the frozen batches not in it.
/// Swapped as one pointer, so a row is never in both or neither.
#[derive(Debug, Default)]
pub struct TableVersion {
    pub manifest: Arc<Manifest>,
    pub frozen: Vec<Arc<FrozenChunk>>,
}

/// A consistent view of a table: persisted segments and in-memory rows.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    pub version: Arc<TableVersion>,
    /// Rows of the active buffers, by day (a narrowed snapshot a query
    /// pins may hold frozen batches here too, under their range).
    pub active: Vec<(Days, Vec<Arc<MemBatch>>)>,
}

impl TableSnapshot {
    /// Every in-memory batch with its days, frozen ones first.
    pub fn mem_by_days(&self) -> Vec<(Days, Arc<MemBatch>)> {
        let frozen = self
            .version
            .frozen
            .iter()
            .flat_map(|c| c.batches.iter().map(|b| (c.days, b.clone())));
        let active = self
            .active
            .iter()
            .flat_map(|(d, b)| b.iter().map(move |b| (*d, b.clone())));
        frozen.chain(active).collect()
    }

    /// Every in-memory batch's rows.
    pub fn mem_batches(&self) -> Vec<RecordBatch> {
        let batches = self.mem_by_days().into_iter();
        batches.map(|(_, b)| b.batch.clone()).collect()
    }
}

#[derive(Debug)]
struct State {
    active: BTreeMap<i32, ActiveBuffer>,
    version: Arc<TableVersion>,
    /// Last WAL sequence applied to this table.
    last_seq: u64,
    /// Oldest WAL sequence in memory and not yet being flushed, and when it arrived.
    oldest_unflushed: Option<(u64, i64)>,
    /// Oldest WAL sequence of a flush under way.
    flushing_from: Option<u64>,
    /// Flushes begun: a packing of small batches that a flush began
    /// during is dropped, since the flush took the batches it read.
    flushes_begun: u64,
    /// What the last frozen buffer held, to pre-size the next active buffer
    /// of its day ([`SizeHint`]).
    size_hint: Option<SizeHint>,
}

/// The size of a day's last frozen buffer, which its next active buffer is
/// made with room for, so a steady stream into one day fills its vectors
/// without growing them. Only that day's: a buffer of another day starts
/// with room for its first rows and grows as they come (doubling, so each
/// row is copied a few times at most). Before, every new day's buffer took
/// the last frozen buffer's room: one write of a row to each of 20,000 days
/// reserved 136 GiB of address space and 490 MiB of memory for 1.6 MB of
/// rows.
#[derive(Debug)]
struct SizeHint {
    day: i32,
    rows: usize,
    string_bytes: Vec<usize>,
}

/// Memory side of one table.
#[derive(Debug)]
pub struct MemStore {
    schema: SchemaRef,
    time_column: usize,
    freeze_bytes: usize,
    state: Mutex<State>,
    /// Rows as counted at insert, and what is charged to their batches.
    bytes: Arc<AtomicUsize>,
    next_chunk: AtomicU64,
}

/// What a flush takes out of the memstore.
#[derive(Debug)]
pub struct FlushSet {
    pub chunks: Vec<Arc<FrozenChunk>>,
    /// Every record of this table up to this sequence is in `chunks` or already persisted.
    pub through_seq: u64,
}

impl MemStore {
    pub fn new(def: &TableDef, schema: SchemaRef, manifest: Manifest, freeze_bytes: usize) -> Self {
        let last_seq = manifest.flushed_seq;
        Self {
            schema,
            time_column: def.time_column,
            freeze_bytes,
            state: Mutex::new(State {
                active: BTreeMap::new(),
                version: Arc::new(TableVersion {
                    manifest: Arc::new(manifest),
                    frozen: vec![],
                }),
                last_seq,
                oldest_unflushed: None,
                flushing_from: None,
                flushes_begun: 0,
                size_hint: None,
            }),
            bytes: Arc::default(),
            next_chunk: AtomicU64::new(1),
        }
    }

    /// Bytes held in memory (active and frozen): rows as counted at insert,
    /// and what is charged to their batches ([`MemBatch::charge`]); kept at
    /// insert, charge and flush: O(1).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Applies a validated batch written to the WAL as record `seq`.
    /// Visible to every snapshot taken after this returns.
    pub fn apply(&self, seq: u64, batch: &RecordBatch, now_ns: i64) {
        let parts = split_by_day(batch, self.time_column).expect("validated before the WAL");
        let mut added = 0;
        let mut st = self.state.lock();
        for (day, part) in parts {
            let n = batch_bytes(&part);
            added += n;
            let State {
                active, size_hint, ..
            } = &mut *st;
            let buf = active.entry(day).or_insert_with(|| {
                let (rows, widths) = match size_hint {
                    Some(h) if h.day == day => (h.rows, h.string_bytes.clone()),
                    _ => (part.num_rows(), string_widths(&part)),
                };
                ActiveBuffer::new(self.schema.clone(), rows, &widths, self.bytes.clone())
            });
            buf.append(seq, &part, n);
            if buf.bytes() >= self.freeze_bytes {
                self.freeze_locked(&mut st, day);
            }
        }
        st.last_seq = st.last_seq.max(seq);
        st.oldest_unflushed.get_or_insert((seq, now_ns));
        drop(st);
        self.bytes.fetch_add(added, Ordering::Relaxed);
    }

    fn freeze_locked(&self, st: &mut State, day: i32) {
        let Some(chunk) = self.frozen_chunk(st, day) else {
            return;
        };
        let mut string_bytes = vec![0; self.schema.fields().len()];
        for b in &chunk.batches {
            let widths = string_widths(&b.batch).into_iter();
            string_bytes
                .iter_mut()
                .zip(widths)
                .for_each(|(s, w)| *s += w);
        }
        st.size_hint = Some(SizeHint {
            day,
            rows: chunk.rows(),
            string_bytes,
        });
        let mut frozen = st.version.frozen.clone();
        frozen.push(chunk);
        st.version = Arc::new(TableVersion {
            manifest: st.version.manifest.clone(),
            frozen,
        });
    }

    /// `day`'s active buffer, taken out and frozen (none if it is empty).
    /// The caller adds the chunk to the frozen batches in the same hold of
    /// the lock, so its rows stay visible.
    fn frozen_chunk(&self, st: &mut State, day: i32) -> Option<Arc<FrozenChunk>> {
        let buf = st.active.remove(&day)?;
        if buf.rows() == 0 {
            return None;
        }
        let bytes = buf.bytes();
        Some(Arc::new(FrozenChunk {
            id: self.next_chunk.fetch_add(1, Ordering::Relaxed),
            days: Days::one(day),
            batches: buf.freeze(),
            bytes,
        }))
    }

    /// A consistent snapshot of everything applied so far.
    pub fn snapshot(&self) -> TableSnapshot {
        let mut st = self.state.lock();
        let active = st
            .active
            .iter_mut()
            .map(|(d, b)| (Days::one(*d), b.snapshot()))
            .collect();
        TableSnapshot {
            version: st.version.clone(),
            active,
        }
    }

    /// The current manifest version.
    pub fn manifest(&self) -> Arc<Manifest> {
        self.state.lock().version.manifest.clone()
    }

    /// Age in ns of the oldest unflushed row, if any.
    pub fn oldest_unflushed(&self) -> Option<(u64, i64)> {
        self.state.lock().oldest_unflushed
    }

    /// Oldest WAL sequence this table still needs for recovery.
    pub fn wal_needed_from(&self) -> Option<u64> {
        let st = self.state.lock();
        match (st.oldest_unflushed.map(|o| o.0), st.flushing_from) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Freezes every active buffer and returns all frozen chunks for a flush.
    pub fn begin_flush(&self) -> FlushSet {
        let mut st = self.state.lock();
        let days: Vec<i32> = st.active.keys().copied().collect();
        for day in days {
            self.freeze_locked(&mut st, day);
        }
        if let Some((seq, _)) = st.oldest_unflushed.take() {
            st.flushing_from = Some(st.flushing_from.map_or(seq, |f| f.min(seq)));
        }
        st.flushes_begun += 1;
        FlushSet {
            chunks: st.version.frozen.clone(),
            through_seq: st.last_seq,
        }
    }

    /// Publishes a new manifest. With `flushed`, those chunks leave memory in
    /// the same pointer swap that makes their segments visible.
    pub fn publish(&self, manifest: Manifest, flushed: Option<&FlushSet>) {
        let mut st = self.state.lock();
        let frozen: Vec<_> = match flushed {
            Some(set) => st
                .version
                .frozen
                .iter()
                .filter(|c| !set.chunks.iter().any(|f| f.id == c.id))
                .cloned()
                .collect(),
            None => st.version.frozen.clone(),
        };
        st.version = Arc::new(TableVersion {
            manifest: Arc::new(manifest),
            frozen,
        });
        if let Some(set) = flushed {
            st.flushing_from = None;
            drop(st);
            let freed: usize = set.chunks.iter().map(|c| c.bytes).sum();
            self.bytes.fetch_sub(freed, Ordering::Relaxed);
            for b in set.chunks.iter().flat_map(|c| &c.batches) {
                b.release();
            }
        }
    }

    /// A flush failed: its rows stay in memory and remain needed for recovery.
    pub fn abort_flush(&self) {
        let mut st = self.state.lock();
        if let Some(from) = st.flushing_from.take() {
            let now = st.oldest_unflushed.map_or(0, |o| o.1);
            st.oldest_unflushed = Some(match st.oldest_unflushed {
                Some((s, t)) => (s.min(from), t),
                None => (from, now),
            });
        }
    }
}

fn string_widths(batch: &RecordBatch) -> Vec<usize> {
    use arrow::array::AsArray;
    batch
        .columns()
        .iter()
        .map(|c| c.as_string_opt::<i32>().map_or(0, |s| s.value_data().len()))
        .collect()
}

#[cfg(test)]
mod tests;
