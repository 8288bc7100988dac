//! Partial aggregate rows of held segments ([`crate::rules::partials`] says
//! why and when they are used).
//!
//! Nothing here is durable. An entry is keyed by its decoded segment's
//! address, which the entry's weak reference keeps from being reused, so
//! it is found only through that segment. When room is needed, entries of
//! segments no longer held go first, then the least recently used, within
//! `--partial-cache-bytes`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arrow::array::RecordBatch;
use dashmap::DashMap;

use crate::cache::segment::DecodedSegment;

/// An entry holds at most this share of the cache (1/8).
pub const MAX_ENTRY_SHARE: usize = 8;

/// Partial aggregate rows of held segments, bounded by bytes, least
/// recently used evicted. Lookups take no global lock.
#[derive(Debug)]
pub struct PartialCache {
    capacity: usize,
    /// By the decoded segment's address and the run's key.
    map: DashMap<(usize, String), Entry>,
    usage: AtomicUsize,
    tick: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Serializes inserts and evictions (never a lookup).
    admit: parking_lot::Mutex<()>,
}

#[derive(Debug)]
struct Entry {
    batches: Arc<[RecordBatch]>,
    bytes: usize,
    last_used: AtomicU64,
    /// The segment the rows are of. It also keeps the address in the key
    /// from being reused while the entry lives.
    segment: Weak<DecodedSegment>,
}

impl PartialCache {
    /// A cache of at most `capacity` bytes (0: off).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            map: DashMap::new(),
            usage: AtomicUsize::new(0),
            tick: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            admit: parking_lot::Mutex::new(()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of partial rows held now.
    pub fn usage(&self) -> usize {
        self.usage.load(Ordering::Relaxed)
    }

    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// Lookups so far: (hits, misses).
    pub fn lookups(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    fn key(segment: &Arc<DecodedSegment>, key: &str) -> (usize, String) {
        (Arc::as_ptr(segment) as usize, key.to_string())
    }

    /// The rows kept for `segment` under `key`, if any.
    pub fn get(&self, segment: &Arc<DecodedSegment>, key: &str) -> Option<Arc<[RecordBatch]>> {
        // The key's address is the segment's: an entry's weak reference
        // keeps the address from being reused while the entry lives.
        let Some(e) = self.map.get(&Self::key(segment, key)) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        e.last_used
            .store(self.tick.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Some(e.batches.clone())
    }

    /// Keeps `batches` for `segment` under `key`, evicting the least
    /// recently used entries (and those of segments no longer held) to make
    /// room. Rows larger than a [`MAX_ENTRY_SHARE`]th of the cache are not
    /// kept: one wide group-by would evict every dashboard's rows.
    pub fn insert(&self, segment: &Arc<DecodedSegment>, key: &str, batches: Arc<[RecordBatch]>) {
        let bytes: usize = batches
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum::<usize>()
            + key.len();
        if bytes > self.capacity / MAX_ENTRY_SHARE {
            return;
        }
        let _g = self.admit.lock();
        let key = Self::key(segment, key);
        self.remove(&key);
        if self.usage() + bytes > self.capacity {
            // Entries of segments no longer held first, then the least
            // recently used, down to 7/8 of the capacity in one walk: a
            // walk per insert would cost every miss of a working set
            // larger than the cache.
            let mut by_age: Vec<_> = self
                .map
                .iter()
                .map(|e| {
                    let alive = e.segment.strong_count() > 0;
                    (
                        (alive, e.last_used.load(Ordering::Relaxed)),
                        e.key().clone(),
                    )
                })
                .collect();
            by_age.sort_unstable_by_key(|(order, _)| *order);
            let room = self.capacity - self.capacity / 8;
            for (_, k) in by_age {
                if self.usage() + bytes <= room {
                    break;
                }
                self.remove(&k);
            }
        }
        self.usage.fetch_add(bytes, Ordering::Relaxed);
        let entry = Entry {
            batches,
            bytes,
            last_used: AtomicU64::new(self.tick.fetch_add(1, Ordering::Relaxed)),
            segment: Arc::downgrade(segment),
        };
        self.map.insert(key, entry);
    }

    fn remove(&self, key: &(usize, String)) {
        if let Some((_, old)) = self.map.remove(key) {
            self.usage.fetch_sub(old.bytes, Ordering::Relaxed);
        }
    }
}
