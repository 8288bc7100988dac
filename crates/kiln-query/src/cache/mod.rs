//! Caches of decoded data, shared by every query of the process: hot
//! segments decoded as Arrow ([`segment`]) and partial aggregates computed
//! over them ([`partials`]). Nothing here is durable: segment files are
//! immutable, so an entry is never stale, only evicted.
//!
//! Layer: above [`crate::pruning`] (a held segment's slices are pruned by
//! their statistics), below the scans ([`crate::scan`]) that read through it.

use std::sync::Arc;

pub mod lru;
pub mod partials;
pub mod segment;

pub use lru::ByteLru;
pub use partials::{AggregateKey, FunctionKey, PartialCache, PartialKey};
pub use segment::{DecodedSegment, SegmentCache};

/// The caches the scans of one engine read through.
#[derive(Debug)]
pub struct Caches {
    pub segments: Arc<SegmentCache>,
    pub partials: PartialCache,
}
