//! Kiln's write-ahead log.
//!
//! Records (opaque byte payloads) are appended to CRC-framed segment files by
//! a single commit thread that groups concurrent appends into one `write` and
//! one fdatasync. The storage crate appends every mutation here before
//! applying it, and trims the log with [`Wal::remove_through`] once it has
//! persisted the records elsewhere.
//!
//! # Guarantees
//! - Every record gets a [`Seq`]: starting at 1, strictly increasing, and
//!   never reused for a durable record across restarts (start with
//!   [`Recovered::next_seq`]).
//! - Under [`SyncPolicy::Always`] (the default) an `Ok` from [`Wal::append`]
//!   means the record is on stable storage and the [`Applier`] has seen it.
//!   Under [`SyncPolicy::Interval`] it means written to the OS and applied;
//!   up to one interval may be lost on power loss (but not on a process crash).
//! - [`Wal::append_nowait`] only queues: nothing is durable when it returns;
//!   the record is written, synced and applied with the next group commit
//!   (or by [`Wal::sync`] / [`Wal::close`]), and is lost if the process dies
//!   first. Its queue is bounded by [`WalOptions::max_queued_bytes`].
//! - The applier sees records in seq order, each before its appender is
//!   acknowledged. No append is acknowledged after a failed write or fsync;
//!   such a failure poisons the WAL ([`Error::Poisoned`]).
//! - [`Wal::recover`] returns exactly the intact records. A torn tail of the
//!   newest segment (a crash mid-write) is cut off and reported; any other
//!   damage is [`Error::Corrupt`] naming file and byte offset, unless
//!   [`WalOptions::skip_corrupt`] is set.
//!
//! # Typical use
//! ```no_run
//! # use std::sync::Arc;
//! # use kiln_wal::*;
//! # struct Mem;
//! # impl Applier for Mem { fn apply(&self, _: Seq, _: &bytes::Bytes) {} }
//! # fn main() -> Result<()> {
//! let dir = std::path::Path::new("/var/lib/kiln/wal");
//! let opts = WalOptions::default();
//! let recovered = Wal::recover(dir, &opts)?;
//! // ... replay recovered.records into memory ...
//! let wal = Wal::start(dir, opts, recovered.next_seq(), Arc::new(Mem))?;
//! let seq = wal.append_blocking(bytes::Bytes::from_static(b"put k v"))?;
//! wal.close()?;
//! # let _ = seq; Ok(()) }
//! ```

mod commit;
mod error;
mod format;
mod latency;
mod options;
mod recovery;
mod wal;

#[cfg(test)]
mod tests;

/// A WAL sequence number: starts at 1, strictly increasing.
pub type Seq = u64;

pub use error::{Error, ErrorKind, Result};
pub use format::MAX_RECORD_BYTES;
pub use latency::{LATENCY_BOUNDS_S, LatencyHistogram, LatencySnapshot};
pub use options::{Applier, SyncPolicy, WalOptions, WalStats};
pub use recovery::{CorruptRecord, Recovered};
pub use wal::Wal;
