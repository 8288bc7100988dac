//! Partial aggregate rows of held segments ([`crate::rules::partials`] says
//! why and when they are used).
//!
//! Nothing here is durable. An entry is keyed by its decoded segment's
//! address, which the entry's weak reference keeps from being reused, so
//! it is found only through that segment. When room is needed, entries of
//! segments no longer held go first, then the least recently used, within
//! `--partial-cache-bytes`.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::FieldRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;

use crate::cache::lru::ByteLru;
use crate::cache::segment::DecodedSegment;

/// An entry holds at most this share of the cache (1/8).
pub const MAX_ENTRY_SHARE: usize = 8;

/// Fingerprints [`PartialCache::seen_before`] remembers (32 KiB).
pub const RECENT_SLOTS: usize = 4096;

/// What identifies one segment's partial rows apart from the segment: the
/// aggregate, and the slices read, as runs of neighbouring slices with the
/// same conjuncts left on them (their parameters bound to this run's
/// values).
///
/// Its hash is computed once, when it is made: a lookup hashes a `u64`.
/// Hashing expressions costs more than the lookup they serve (a function
/// call hashes its signature, which may list every type it takes), and a
/// run looks up one key per held segment.
#[derive(Clone, Debug)]
pub struct PartialKey {
    aggregate: Arc<AggregateKey>,
    slices: Vec<SliceRun>,
    hash: u64,
}

/// Neighbouring slices of a segment read with the same conjuncts left on
/// them (none: every row of the slices qualifies).
pub type SliceRun = (Range<usize>, Option<Arc<dyn PhysicalExpr>>);

impl PartialKey {
    pub fn new(aggregate: Arc<AggregateKey>, slices: Vec<SliceRun>) -> Self {
        let mut hasher = DefaultHasher::new();
        aggregate.hash.hash(&mut hasher);
        slices.hash(&mut hasher);
        Self {
            aggregate,
            slices,
            hash: hasher.finish(),
        }
    }

    /// The key of a segment's rows read whole: every one of its slices,
    /// with the whole `predicate` (its values bound) left on each. Pruning
    /// the slices first reads the same rows, so the entry stands for any
    /// read of that segment under that predicate, and is found without
    /// pruning; keys of pruned reads, unlike it, are shared by predicates
    /// that prune alike (a moving range's middle segments). The segment is
    /// the cache's part of the key, so one key serves every segment.
    pub fn whole(aggregate: Arc<AggregateKey>, predicate: Option<Arc<dyn PhysicalExpr>>) -> Self {
        Self::new(aggregate, vec![(0..usize::MAX, predicate)])
    }

    /// The aggregate the rows are of.
    pub fn aggregate(&self) -> &Arc<AggregateKey> {
        &self.aggregate
    }

    /// The key's hash, computed when it was made.
    pub fn fingerprint(&self) -> u64 {
        self.hash
    }
}

impl PartialEq for PartialKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.aggregate == other.aggregate && self.slices == other.slices
    }
}

impl Eq for PartialKey {}

impl Hash for PartialKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// An aggregate's identity: its grouping sets and group expressions, its
/// functions, and the columns its scan reads. Expressions compare as
/// DataFusion's physical expressions do (columns by name and index,
/// literals by value). Hashed once, when it is made ([`PartialKey`] says
/// why).
#[derive(Debug)]
pub struct AggregateKey {
    groups: Vec<Vec<bool>>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    functions: Vec<FunctionKey>,
    projection: Option<Vec<usize>>,
    hash: u64,
}

impl AggregateKey {
    pub fn new(
        groups: Vec<Vec<bool>>,
        group_exprs: Vec<Arc<dyn PhysicalExpr>>,
        functions: Vec<FunctionKey>,
        projection: Option<Vec<usize>>,
    ) -> Self {
        let mut hasher = DefaultHasher::new();
        (&groups, &group_exprs, &functions, &projection).hash(&mut hasher);
        Self {
            groups,
            group_exprs,
            functions,
            projection,
            hash: hasher.finish(),
        }
    }
}

impl PartialEq for AggregateKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.groups == other.groups
            && self.group_exprs == other.group_exprs
            && self.functions == other.functions
            && self.projection == other.projection
    }
}

impl Eq for AggregateKey {}

impl Hash for AggregateKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// One aggregate function call of an [`AggregateKey`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FunctionKey {
    pub name: String,
    pub distinct: bool,
    pub ignore_nulls: bool,
    pub reversed: bool,
    pub field: FieldRef,
    pub args: Vec<Arc<dyn PhysicalExpr>>,
    pub order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
}

/// Partial aggregate rows of held segments, bounded by bytes
/// ([`ByteLru`]: least recently used evicted, entries of segments no
/// longer held first, 1/8 of the capacity freed at once: entries are
/// small and many). Lookups take no global lock.
#[derive(Debug)]
pub struct PartialCache {
    /// By the decoded segment's address and the run's key.
    lru: ByteLru<(usize, PartialKey), Arc<Entry>>,
    /// Fingerprints of reads kept only when they repeat
    /// ([`Self::seen_before`]).
    recent: Recent,
}

/// One fingerprint per slot, the last that fell in it.
struct Recent(Box<[AtomicU64]>);

impl fmt::Debug for Recent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recent({} slots)", self.0.len())
    }
}

#[derive(Debug)]
struct Entry {
    batches: Arc<[RecordBatch]>,
    /// The segment the rows are of. It also keeps the address in the key
    /// from being reused while the entry lives.
    segment: Weak<DecodedSegment>,
}

impl PartialCache {
    /// A cache of at most `capacity` bytes (0: off).
    pub fn new(capacity: usize) -> Self {
        Self {
            lru: ByteLru::new(capacity, capacity / MAX_ENTRY_SHARE, capacity / 8),
            recent: Recent((0..RECENT_SLOTS).map(|_| AtomicU64::new(0)).collect()),
        }
    }

    /// Whether `fingerprint` was passed here recently (its slot still holds
    /// it: each slot remembers the last fingerprint that fell in it), and
    /// remembers it. A read whose rows pay for keeping only when it repeats
    /// keeps them from its second sighting on: a cube's cut buckets under a
    /// dashboard's range, which may move with every refresh. So a read made
    /// once costs its fingerprint, and keeps nothing. Lock-free; a
    /// collision only makes a read kept early.
    pub fn seen_before(&self, fingerprint: u64) -> bool {
        let slot = &self.recent.0[(fingerprint % RECENT_SLOTS as u64) as usize];
        slot.swap(fingerprint, Ordering::Relaxed) == fingerprint
    }

    pub fn enabled(&self) -> bool {
        self.lru.capacity() > 0
    }

    pub fn capacity(&self) -> usize {
        self.lru.capacity()
    }

    /// Bytes of partial rows held now.
    pub fn usage(&self) -> usize {
        self.lru.usage()
    }

    pub fn entries(&self) -> usize {
        self.lru.entries()
    }

    /// Lookups so far: (hits, misses).
    pub fn lookups(&self) -> (u64, u64) {
        self.lru.lookups()
    }

    /// The rows kept for `segment` under `key`, if any.
    pub fn get(
        &self,
        segment: &Arc<DecodedSegment>,
        key: PartialKey,
    ) -> Option<Arc<[RecordBatch]>> {
        // The key's address is the segment's: an entry's weak reference
        // keeps the address from being reused while the entry lives.
        let key = (Arc::as_ptr(segment) as usize, key);
        self.lru.get(&key).map(|e| e.batches.clone())
    }

    /// Keeps `batches` for `segment` under `key`. Rows larger than a
    /// [`MAX_ENTRY_SHARE`]th of the cache are not kept: one wide group-by
    /// would evict every dashboard's rows.
    pub fn insert(
        &self,
        segment: &Arc<DecodedSegment>,
        key: PartialKey,
        batches: Arc<[RecordBatch]>,
    ) {
        let bytes = batches
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum::<usize>()
            + key_bytes(&key)
            + ENTRY_BYTES;
        let entry = Arc::new(Entry {
            batches,
            segment: Arc::downgrade(segment),
        });
        let key = (Arc::as_ptr(segment) as usize, key);
        self.lru
            .insert(key, entry, bytes, |e| e.segment.strong_count() == 0);
    }
}

/// Bytes every entry is counted besides its rows and its key's filter: the
/// key and the entry as the cache's map holds them, with their
/// allocations' headers and the map's own slot. Without them an entry of
/// no rows (a read whose filter kept none) under an unfiltered key counted
/// only its key's runs, a fraction of what it holds, so many such entries
/// held more memory than the cache's bytes say.
const ENTRY_BYTES: usize =
    std::mem::size_of::<(usize, PartialKey)>() + std::mem::size_of::<Entry>() + 64;

/// Bytes counted for one node of a key's filter, besides a literal's value.
const EXPR_NODE_BYTES: usize = 64;

/// Bytes `key` holds: its runs and their bound filters, each node and each
/// literal's value counted. Keys of many small entries (a range's edges
/// read under long `IN` lists) so cannot hold more than the cache's bytes.
/// The aggregate's key is shared by its plan's entries and not counted.
fn key_bytes(key: &PartialKey) -> usize {
    let filter = |f: &Arc<dyn PhysicalExpr>| {
        let mut bytes = 0;
        let _ = f.apply(|node| {
            bytes += EXPR_NODE_BYTES;
            if let Some(l) = node.downcast_ref::<Literal>() {
                bytes += l.value().size();
            }
            Ok(TreeNodeRecursion::Continue)
        });
        bytes
    };
    let runs = key
        .slices
        .iter()
        .map(|(_, f)| std::mem::size_of::<SliceRun>() + f.as_ref().map_or(0, filter));
    std::mem::size_of::<PartialKey>() + runs.sum::<usize>()
}

#[cfg(test)]
mod tests;
