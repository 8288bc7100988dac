//! [`ByteLru`]: the one byte-bounded cache type under Kiln's caches, with
//! one eviction policy and hit/miss counts.
//!
//! Why not a crate's cache (foyer, moka, quick_cache): foyer's and
//! quick_cache's in-memory caches split their capacity evenly over shards,
//! and one decoded segment (about 100 MiB for a day of the benchmark
//! table) is a large share of a shard, so a dashboard's working set kept
//! evicting itself while the total was half used. moka's admission policy
//! (TinyLFU) refuses a new entry that is not yet popular, so the segment a
//! dashboard starts reading would not be kept. Kiln's caches hold few,
//! large, immutable entries whose liveness the cache can ask the value.
//!
//! The policy: lookups take no global lock (a sharded map and a logical
//! clock for recency). Inserts are serialized among themselves, never with
//! lookups. An entry larger than `max_entry` bytes is not kept. When an
//! insert needs room, entries whose value says it is dead go first, then
//! the least recently used, in one walk, until the new entry fits with
//! `headroom` bytes to spare: a cache of many small entries frees a share
//! of itself at once, so a working set larger than the cache does not pay
//! a walk at every insert; a cache of few large ones frees just enough,
//! keeping its capacity in use.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dashmap::DashMap;

/// A concurrent map bounded by the bytes of its values; see the module docs.
pub struct ByteLru<K, V> {
    capacity: usize,
    max_entry: usize,
    headroom: usize,
    map: DashMap<K, Slot<V>>,
    usage: AtomicUsize,
    /// Logical clock of lookups, for recency.
    tick: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Serializes inserts and evictions (never a lookup).
    admit: parking_lot::Mutex<()>,
}

struct Slot<V> {
    value: V,
    bytes: usize,
    last_used: AtomicU64,
}

impl<K: Eq + std::hash::Hash, V> std::fmt::Debug for ByteLru<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteLru")
            .field("capacity", &self.capacity)
            .field("usage", &self.usage.load(Ordering::Relaxed))
            .field("entries", &self.map.len())
            .finish()
    }
}

impl<K: Eq + Hash + Clone, V: Clone> ByteLru<K, V> {
    /// At most `capacity` bytes (0: keeps nothing), no entry over
    /// `max_entry`, `headroom` bytes freed beyond the need when an insert
    /// needs room.
    pub fn new(capacity: usize, max_entry: usize, headroom: usize) -> Self {
        Self {
            capacity,
            max_entry: max_entry.min(capacity),
            headroom: headroom.min(capacity),
            map: DashMap::new(),
            usage: AtomicUsize::new(0),
            tick: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            admit: parking_lot::Mutex::new(()),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held now.
    pub fn usage(&self) -> usize {
        self.usage.load(Ordering::Relaxed)
    }

    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// Lookups so far by [`Self::get`]: (hits, misses).
    pub fn lookups(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// The value under `key`, counted as a hit or a miss and made the most
    /// recently used.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(slot) = self.map.get(key) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        slot.last_used
            .store(self.tick.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        Some(slot.value.clone())
    }

    /// The value under `key`, without counting a lookup or changing its
    /// recency: for deciding what to read, and for observability.
    pub fn peek<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key).map(|s| s.value.clone())
    }

    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.contains_key(key)
    }

    /// Keeps `value` (`bytes` of memory) under `key`, replacing what was
    /// there, and makes room as the module docs say, `dead` telling which
    /// values no lookup can ask for again. Returns false, keeping nothing,
    /// for an entry over the largest allowed.
    pub fn insert(&self, key: K, value: V, bytes: usize, dead: impl Fn(&V) -> bool) -> bool {
        if bytes > self.max_entry || self.capacity == 0 {
            return false;
        }
        let _g = self.admit.lock();
        self.remove_locked(&key);
        if self.usage() + bytes > self.capacity {
            let mut by_age: Vec<_> = self
                .map
                .iter()
                .map(|e| {
                    let alive = !dead(&e.value);
                    (
                        (alive, e.last_used.load(Ordering::Relaxed)),
                        e.key().clone(),
                    )
                })
                .collect();
            by_age.sort_unstable_by_key(|(order, _)| *order);
            let room = self.capacity - self.headroom;
            for (_, k) in by_age {
                if self.usage() + bytes <= room.max(bytes) {
                    break;
                }
                self.remove_locked(&k);
            }
        }
        self.usage.fetch_add(bytes, Ordering::Relaxed);
        let slot = Slot {
            value,
            bytes,
            last_used: AtomicU64::new(self.tick.fetch_add(1, Ordering::Relaxed)),
        };
        self.map.insert(key, slot);
        true
    }

    /// Drops every entry `dead` says no lookup can ask for again: for a
    /// cache of few large entries, whose dead ones should not wait for
    /// room to be needed.
    pub fn remove_dead(&self, dead: impl Fn(&V) -> bool) {
        let _g = self.admit.lock();
        let keys: Vec<K> = self
            .map
            .iter()
            .filter(|e| dead(&e.value))
            .map(|e| e.key().clone())
            .collect();
        keys.iter().for_each(|k| self.remove_locked(k));
    }

    /// Drops the entry under `key`, if any.
    pub fn remove(&self, key: &K) {
        let _g = self.admit.lock();
        self.remove_locked(key);
    }

    fn remove_locked(&self, key: &K) {
        if let Some((_, old)) = self.map.remove(key) {
            self.usage.fetch_sub(old.bytes, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
