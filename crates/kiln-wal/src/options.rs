//! Configuration, the apply hook and statistics.
//!
//! Why here and not on `Wal`: the storage crate builds options from its own
//! config and reads stats from a metrics loop; keeping these plain data types
//! apart from the commit machinery keeps that surface small and obvious.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use crate::Seq;

/// When the commit thread fsyncs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fdatasync every group before any of its appenders is acknowledged.
    /// An acknowledged record survives power loss.
    Always,
    /// `write()` each group at once and acknowledge after the write; fsync at
    /// most once per interval (also when idle). An acknowledged record
    /// survives a process crash but up to one interval of records may be lost
    /// on power loss.
    Interval(Duration),
}

/// Tuning knobs for [`crate::Wal`]. See each field for its default.
#[derive(Clone, Debug)]
pub struct WalOptions {
    /// Default [`SyncPolicy::Always`].
    pub sync: SyncPolicy,
    /// Default 0: how long the commit thread waits for more requests after
    /// the first one of a group before writing.
    pub linger: Duration,
    /// Default 8 MiB: a group stops growing once it holds this many payload bytes.
    pub max_batch_bytes: usize,
    /// Default 4096: a group stops growing once it holds this many records.
    pub max_batch_records: usize,
    /// Default 64 MiB: roll to a new segment once the current one reaches this size.
    pub segment_bytes: u64,
    /// Default 64 MiB: [`crate::Wal::append_nowait`] waits for room while the
    /// commit thread's queue holds this many payload bytes, so writers that do
    /// not wait for the fsync cannot grow the queue without bound.
    pub max_queued_bytes: usize,
    /// Default false: on mid-log damage, recovery skips it (reporting it in
    /// [`crate::Recovered::skipped`]) instead of failing with `Error::Corrupt`.
    pub skip_corrupt: bool,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            sync: SyncPolicy::Always,
            linger: Duration::ZERO,
            max_batch_bytes: 8 << 20,
            max_batch_records: 4096,
            segment_bytes: 64 << 20,
            max_queued_bytes: 64 << 20,
            skip_corrupt: false,
        }
    }
}

/// Receives every record after it is written (and, under
/// [`SyncPolicy::Always`], fsynced) and before its appender is acknowledged
/// (an [`crate::Wal::append_nowait`] caller was answered when it queued).
///
/// Called on the commit thread, in seq order; keep it cheap, it delays every
/// appender of the group. A panic poisons the WAL (the record stays on disk
/// and is returned by the next recovery).
pub trait Applier: Send + Sync + 'static {
    /// Applies one durable record.
    fn apply(&self, seq: Seq, payload: &Bytes);
}

/// A point-in-time copy of the WAL's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WalStats {
    /// Records written.
    pub records: u64,
    /// Groups written (one `write` each; one fsync each under `Always`).
    pub groups: u64,
    /// Frame bytes written (headers included).
    pub bytes: u64,
    /// fdatasync calls on segment files.
    pub fsyncs: u64,
    /// Duration of the most recent fdatasync, in microseconds.
    pub last_fsync_micros: u64,
    /// Segment files currently on disk (including the active one).
    pub segment_files: u64,
    /// Durations of every fdatasync so far.
    pub fsync_latency: crate::LatencySnapshot,
}

/// Lock-free counters behind [`WalStats`].
#[derive(Debug, Default)]
pub(crate) struct StatCounters {
    pub records: AtomicU64,
    pub groups: AtomicU64,
    pub bytes: AtomicU64,
    pub fsyncs: AtomicU64,
    pub last_fsync_micros: AtomicU64,
    pub segment_files: AtomicU64,
    pub fsync_latency: crate::LatencyHistogram,
}

impl StatCounters {
    pub(crate) fn snapshot(&self) -> WalStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WalStats {
            records: r(&self.records),
            groups: r(&self.groups),
            bytes: r(&self.bytes),
            fsyncs: r(&self.fsyncs),
            last_fsync_micros: r(&self.last_fsync_micros),
            segment_files: r(&self.segment_files),
            fsync_latency: self.fsync_latency.snapshot(),
        }
    }
}
