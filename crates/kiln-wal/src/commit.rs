//! The commit thread: group commit over one segment file.
//!
//! Why one dedicated thread: it alone owns the file, so there is no locking
//! around writes, and every request queued while a write+fsync is in flight
//! joins the next group. N concurrent appenders therefore cost one `write`
//! and one fdatasync, not N. Acknowledgement order is strict: write →
//! fdatasync (policy `Always`) → apply → answer (`append_nowait` requests
//! have nobody to answer; they were acknowledged when queued, and learn of a
//! failure only through the poison).
//!
//! A failed write or fsync (a full disk, an I/O error) fails its group and
//! leaves the WAL *broken*, not dead: before the next group is written the
//! file is cut back to the end of the last group that was written and
//! synced whole, and after a failed fsync (when the kernel may have
//! dropped the group's dirty pages and no later success on that file can
//! be trusted) writing moves on to a new segment file. Until that repair
//! succeeds every group fails with its error, so a full disk refuses
//! writes while it is full and accepts them again, without a restart, once
//! space is freed. Nothing of a failed group is applied or acknowledged.
//! A panic in the applier still poisons the WAL for good.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

use crate::Seq;
use crate::error::{Error, Result, dup_io, io_err};
use crate::format::{encode_frame, segment_file_name, sync_dir};
use crate::options::{Applier, StatCounters, SyncPolicy, WalOptions};

/// A request to the commit thread.
pub(crate) enum Request {
    Append {
        payload: Bytes,
        /// `None` for [`crate::Wal::append_nowait`]: nobody waits for the answer.
        reply: Option<oneshot::Sender<Result<Seq>>>,
    },
    Sync {
        reply: oneshot::Sender<Result<()>>,
    },
}

impl Request {
    pub(crate) fn payload_len(&self) -> usize {
        match self {
            Request::Append { payload, .. } => payload.len(),
            Request::Sync { .. } => 0,
        }
    }
}

/// One segment file on disk.
#[derive(Debug)]
pub(crate) struct Segment {
    pub first_seq: Seq,
    pub path: PathBuf,
}

/// State shared between the `Wal` handle and the commit thread.
pub(crate) struct Shared {
    pub dir: PathBuf,
    /// Sorted by `first_seq`; the last entry is the file being written.
    pub segments: Mutex<Vec<Segment>>,
    pub poisoned: Mutex<Option<String>>,
    pub stats: StatCounters,
    /// Payload bytes of appends sent but not yet written (or failed).
    pub queued_bytes: AtomicUsize,
    /// Notified whenever `queued_bytes` shrinks and when the commit thread exits.
    pub room: Notify,
    /// Why the last group failed, while the WAL is broken (see the module docs).
    pub degraded: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn poison_error(&self) -> Option<Error> {
        self.poisoned.lock().clone().map(Error::Poisoned)
    }

    fn poison(&self, msg: String) {
        tracing::error!(%msg, "WAL poisoned");
        self.poisoned.lock().get_or_insert(msg);
    }
}

/// Creates a new, empty segment file named after `first_seq` and makes its
/// directory entry durable.
pub(crate) fn create_segment(dir: &Path, first_seq: Seq) -> Result<(File, PathBuf)> {
    let path = dir.join(segment_file_name(first_seq));
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io_err(format!("creating {}", path.display()), e))?;
    sync_dir(dir)?;
    Ok((file, path))
}

pub(crate) struct Committer {
    pub shared: Arc<Shared>,
    pub opts: WalOptions,
    pub applier: Arc<dyn Applier>,
    pub rx: Receiver<Request>,
    pub file: File,
    pub path: PathBuf,
    pub file_bytes: u64,
    pub next_seq: Seq,
    pub buf: Vec<u8>,
    /// Bytes were written since the last fdatasync.
    pub dirty: bool,
    pub last_sync: Instant,
    /// Bytes past `file_bytes` may hold part of a failed group.
    pub broken: bool,
    /// The file's last fsync failed: write on in a new segment file.
    pub abandon_file: bool,
}

impl Committer {
    /// Runs until every `Sender` is dropped and the queue is drained, then
    /// syncs. Returns the final sync's result (or the poison).
    pub(crate) fn run(mut self) -> Result<()> {
        let mut batch = Vec::new();
        while let Some(first) = self.next_first() {
            batch.push(first);
            self.fill(&mut batch);
            let bytes: usize = batch.iter().map(Request::payload_len).sum();
            self.commit(&mut batch);
            self.shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.shared.room.notify_waiters();
        }
        if self.dirty
            && let Err(e) = self.fsync()
        {
            self.shared.poison(e.to_string());
        }
        self.shared.room.notify_waiters();
        match self.shared.poison_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Blocks for the first request of a group; under `Interval`, fsyncs
    /// when the interval elapses while idle. `None` once disconnected.
    fn next_first(&mut self) -> Option<Request> {
        loop {
            let wait = match self.opts.sync {
                SyncPolicy::Interval(d) if self.dirty => d.saturating_sub(self.last_sync.elapsed()),
                _ => return self.rx.recv().ok(),
            };
            match self.rx.recv_timeout(wait) {
                Ok(r) => return Some(r),
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = self.fsync() {
                        self.shared.poison(e.to_string());
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Grows the group: waits up to `linger`, then drains what is queued,
    /// stopping at the batch limits.
    fn fill(&mut self, batch: &mut Vec<Request>) {
        let max_records = self.opts.max_batch_records.max(1);
        let max_bytes = self.opts.max_batch_bytes;
        let (mut records, mut bytes) = (0usize, 0usize);
        let mut add = |r: &Request| {
            if let Request::Append { payload, .. } = r {
                records += 1;
                bytes += payload.len();
            }
            records >= max_records || bytes >= max_bytes
        };
        let mut full = add(&batch[0]);
        if !self.opts.linger.is_zero() {
            let deadline = Instant::now() + self.opts.linger;
            while !full {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.rx.recv_timeout(left) {
                    Ok(r) => {
                        full = add(&r);
                        batch.push(r);
                    }
                    Err(_) => break,
                }
            }
        }
        while !full {
            match self.rx.try_recv() {
                Ok(r) => {
                    full = add(&r);
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
    }

    /// Writes, syncs, applies and answers one group; empties `batch`.
    fn commit(&mut self, batch: &mut Vec<Request>) {
        if let Some(msg) = self.shared.poisoned.lock().clone() {
            answer_all(batch, || Error::Poisoned(msg.clone()));
            return;
        }
        if self.broken
            && let Err(Error::Io { context, source }) = self.repair()
        {
            self.fail_group(batch, context, source);
            return;
        }
        self.buf.clear();
        let mut seq = self.next_seq;
        let mut want_sync = false;
        for req in batch.iter() {
            match req {
                Request::Append { payload, .. } => {
                    encode_frame(&mut self.buf, seq, payload);
                    seq += 1;
                }
                Request::Sync { .. } => want_sync = true,
            }
        }
        let records = seq - self.next_seq;
        if !self.buf.is_empty() {
            if let Err(e) = self.file.write_all(&self.buf) {
                let ctx = format!("writing to {}", self.path.display());
                self.fail_group(batch, ctx, e);
                return;
            }
            self.dirty = true;
        }
        let sync_due = match self.opts.sync {
            SyncPolicy::Always => true,
            SyncPolicy::Interval(d) => want_sync || self.last_sync.elapsed() >= d,
        };
        if sync_due
            && self.dirty
            && let Err(Error::Io { context, source }) = self.fsync()
        {
            self.abandon_file = true;
            self.fail_group(batch, context, source);
            return;
        }
        let first = self.next_seq;
        self.next_seq = seq;
        self.file_bytes += self.buf.len() as u64;
        if self.shared.degraded.lock().take().is_some() {
            tracing::warn!(file = %self.path.display(), "WAL writes again after a failure");
        }
        let stats = &self.shared.stats;
        if records > 0 {
            stats.records.fetch_add(records, Ordering::Relaxed);
            stats.groups.fetch_add(1, Ordering::Relaxed);
            stats
                .bytes
                .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        }
        let applier = &self.applier;
        let applied = catch_unwind(AssertUnwindSafe(|| {
            let mut s = first;
            for req in batch.iter() {
                if let Request::Append { payload, .. } = req {
                    applier.apply(s, payload);
                    s += 1;
                }
            }
        }));
        if applied.is_err() {
            let msg = format!("applier panicked in group starting at seq {first}");
            self.shared.poison(msg.clone());
            answer_all(batch, || Error::Poisoned(msg.clone()));
            return;
        }
        // Roll before answering so that an acknowledged appender observes the
        // new segment. The group is durable either way; a failed roll leaves
        // the WAL broken, repaired (and rolled) before the next group.
        if self.file_bytes >= self.opts.segment_bytes
            && let Err(e) = self.roll()
        {
            tracing::error!(error = %e, "WAL segment roll failed; will retry");
            self.broken = true;
            self.abandon_file = true;
            *self.shared.degraded.lock() = Some(e.to_string());
        }
        let mut s = first;
        for req in batch.drain(..) {
            match req {
                Request::Append { reply, .. } => {
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(s));
                    }
                    s += 1;
                }
                Request::Sync { reply } => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
    }

    /// Answers every waiter of the failed group with the error and marks
    /// the WAL broken, to be repaired before the next group.
    fn fail_group(&mut self, batch: &mut Vec<Request>, context: String, e: std::io::Error) {
        let lost = batch
            .iter()
            .filter(|r| matches!(r, Request::Append { reply: None, .. }))
            .count();
        tracing::error!(%context, error = %e, lost_unsynced = lost, "WAL write failed; writes fail until it is repaired");
        self.broken = true;
        *self.shared.degraded.lock() = Some(format!("{context}: {e}"));
        answer_all(batch, || Error::Io {
            context: context.clone(),
            source: dup_io(&e),
        });
    }

    /// Cuts the file back to the last group written whole, and after a
    /// failed fsync starts a new segment file; see the module docs.
    fn repair(&mut self) -> Result<()> {
        let at = || format!("repairing {}", self.path.display());
        self.file
            .set_len(self.file_bytes)
            .and_then(|()| self.file.seek(SeekFrom::Start(self.file_bytes)).map(drop))
            .map_err(|e| io_err(at(), e))?;
        if self.abandon_file && self.file_bytes > 0 {
            self.file.sync_data().map_err(|e| io_err(at(), e))?;
            self.dirty = false;
            self.roll()?;
        }
        self.abandon_file = false;
        self.broken = false;
        Ok(())
    }

    /// fdatasync of the active file; clears `dirty` even on failure (a failed
    /// fsync cannot be retried meaningfully; the file is abandoned instead).
    fn fsync(&mut self) -> Result<()> {
        let start = Instant::now();
        let res = self.file.sync_data();
        let stats = &self.shared.stats;
        let took = start.elapsed();
        stats.fsyncs.fetch_add(1, Ordering::Relaxed);
        stats.fsync_latency.record(took);
        stats
            .last_fsync_micros
            .store(took.as_micros() as u64, Ordering::Relaxed);
        self.last_sync = Instant::now();
        self.dirty = false;
        res.map_err(|e| io_err(format!("fsyncing {}", self.path.display()), e))
    }

    /// Closes the full segment (after syncing it) and starts the next one,
    /// named by the next seq.
    fn roll(&mut self) -> Result<()> {
        if self.dirty {
            self.fsync()?;
        }
        let (file, path) = create_segment(&self.shared.dir, self.next_seq)?;
        tracing::debug!(file = %path.display(), "rolled WAL segment");
        self.file = file;
        self.path = path.clone();
        self.file_bytes = 0;
        let mut segs = self.shared.segments.lock();
        segs.push(Segment {
            first_seq: self.next_seq,
            path,
        });
        self.shared
            .stats
            .segment_files
            .store(segs.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn answer_all(batch: &mut Vec<Request>, err: impl Fn() -> Error) {
    for req in batch.drain(..) {
        match req {
            Request::Append { reply, .. } => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(err()));
                }
            }
            Request::Sync { reply } => {
                let _ = reply.send(Err(err()));
            }
        }
    }
}
