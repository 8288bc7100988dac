//! The `Wal` handle: starting, appending, syncing, trimming and closing.
//!
//! Why a thin handle over a channel: appenders (async or blocking) only
//! enqueue a request and wait on a oneshot, so they never contend on the file;
//! the commit thread in `commit.rs` does all I/O and group commit.

use std::fs::{self, File};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::Seq;
use crate::commit::{Committer, Request, Segment, Shared, create_segment};
use crate::error::{Error, Result, io_err};
use crate::format::{HEADER_LEN, Header, MAX_RECORD_BYTES, list_segments, sync_dir};
use crate::options::{Applier, StatCounters, WalOptions, WalStats};
use crate::recovery::{self, Recovered};

/// A running write-ahead log. `Send + Sync`; share it via `Arc`.
///
/// Dropping it closes it (see [`Wal::close`]).
pub struct Wal {
    pub(crate) shared: Arc<Shared>,
    max_queued_bytes: usize,
    tx: Mutex<Option<mpsc::Sender<Request>>>,
    thread: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl Wal {
    /// Scans `dir` (creating it if missing) and returns every intact record in
    /// seq order. Does not start the commit thread.
    ///
    /// Durability on return: a torn tail of the newest segment has been
    /// truncated away and the truncation fsynced, so later recoveries see the
    /// same log. Mid-log damage fails with [`Error::Corrupt`] unless
    /// `opts.skip_corrupt`.
    pub fn recover(dir: &Path, opts: &WalOptions) -> Result<Recovered> {
        recovery::recover(dir, opts)
    }

    /// Starts the commit thread. New records get seqs starting at `next_seq`,
    /// which must exceed every seq on disk (use [`Recovered::next_seq`]).
    ///
    /// Writes go to a new segment file `{next_seq:020}.wal`; old files are
    /// never appended to. A leftover file of that name holding no records
    /// (e.g. created just before a crash) is replaced; one holding records
    /// makes this fail with [`Error::InvalidArgument`]. On return the new
    /// file's directory entry is durable.
    pub fn start(
        dir: &Path,
        opts: WalOptions,
        next_seq: Seq,
        applier: Arc<dyn Applier>,
    ) -> Result<Wal> {
        if next_seq == 0 {
            return Err(Error::InvalidArgument("next_seq must be >= 1".into()));
        }
        fs::create_dir_all(dir).map_err(|e| io_err(format!("creating {}", dir.display()), e))?;
        let mut segments = Vec::new();
        let mut removed = false;
        for (first_seq, path) in list_segments(dir)? {
            if first_seq < next_seq {
                segments.push(Segment { first_seq, path });
            } else if holds_no_record(&path)? {
                fs::remove_file(&path)
                    .map_err(|e| io_err(format!("removing {}", path.display()), e))?;
                removed = true;
            } else {
                return Err(Error::InvalidArgument(format!(
                    "next_seq {next_seq} would reuse seqs: {} holds records",
                    path.display()
                )));
            }
        }
        if removed {
            sync_dir(dir)?;
        }
        let (file, path) = create_segment(dir, next_seq)?;
        segments.push(Segment {
            first_seq: next_seq,
            path: path.clone(),
        });
        let stats = StatCounters::default();
        stats
            .segment_files
            .store(segments.len() as u64, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            segments: Mutex::new(segments),
            poisoned: Mutex::new(None),
            stats,
            queued_bytes: Default::default(),
            room: Default::default(),
            degraded: Mutex::new(None),
        });
        let max_queued_bytes = opts.max_queued_bytes;
        let (tx, rx) = mpsc::channel();
        let committer = Committer {
            shared: shared.clone(),
            opts,
            applier,
            rx,
            file,
            path,
            file_bytes: 0,
            next_seq,
            buf: Vec::new(),
            dirty: false,
            last_sync: Instant::now(),
            broken: false,
            abandon_file: false,
        };
        let thread = std::thread::Builder::new()
            .name("kiln-wal-commit".into())
            .spawn(move || committer.run())
            .map_err(|e| io_err("spawning WAL commit thread", e))?;
        Ok(Wal {
            shared,
            max_queued_bytes,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Appends one record and returns its seq.
    ///
    /// Durability on return (`Ok`): the record is written, fsynced (under
    /// [`crate::SyncPolicy::Always`]; under `Interval` only written to the OS),
    /// and has been passed to the [`Applier`]. On `Err` the record was not
    /// acknowledged; after an I/O error the WAL is poisoned.
    /// Cancelling the future does not withdraw an already queued record.
    pub async fn append(&self, payload: Bytes) -> Result<Seq> {
        let rx = self.send_append(payload)?;
        rx.await.map_err(|_| self.gone())?
    }

    /// Blocking [`Wal::append`] with the same guarantees.
    ///
    /// # Panics
    /// Panics if called from within an asynchronous execution context (a
    /// tokio runtime worker); use [`Wal::append`] there, or wrap the call in
    /// `tokio::task::spawn_blocking`.
    pub fn append_blocking(&self, payload: Bytes) -> Result<Seq> {
        let rx = self.send_append(payload)?;
        rx.blocking_recv().map_err(|_| self.gone())?
    }

    /// Queues one record without waiting for it to be written.
    ///
    /// Durability on return (`Ok`): none yet. The record is only queued for
    /// the commit thread; it is written (and, under
    /// [`crate::SyncPolicy::Always`], fsynced) and passed to the [`Applier`]
    /// with the next group commit, in the order of the queue, so it becomes
    /// visible within one group commit. A crash before that fsync loses it.
    /// [`Wal::sync`] and [`Wal::close`] write and fsync it (they are queued
    /// behind it). If the write or fsync later fails, nobody is told
    /// directly: the failure poisons the WAL (logged at error level) and
    /// every later append and `close` returns [`Error::Poisoned`].
    ///
    /// Waits (without blocking a thread) only while the queue holds more than
    /// [`WalOptions::max_queued_bytes`]. Errors known at once (record too
    /// large, WAL poisoned or closed) are returned and nothing is queued.
    pub async fn append_nowait(&self, payload: Bytes) -> Result<()> {
        self.check_append(&payload)?;
        loop {
            // Registered before the check, so a wake-up in between is not lost.
            let room = self.shared.room.notified();
            if self.shared.queued_bytes.load(Ordering::Acquire) < self.max_queued_bytes {
                break;
            }
            if let Some(e) = self.shared.poison_error() {
                return Err(e);
            }
            room.await;
        }
        self.enqueue(payload, None)
    }

    /// Forces an fdatasync of everything written so far and waits for it.
    ///
    /// Durability on return (`Ok`): every record acknowledged before this call
    /// survives power loss, whatever the [`crate::SyncPolicy`].
    pub async fn sync(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Sync { reply })?;
        rx.await.map_err(|_| self.gone())?
    }

    /// How many segment files [`Wal::remove_through`] would delete for `seq`
    /// right now (callers persist what those files alone remember first).
    pub fn removable_through(&self, seq: Seq) -> usize {
        let segs = self.shared.segments.lock();
        (0..segs.len().saturating_sub(1))
            .take_while(|&n| segs[n + 1].first_seq - 1 <= seq)
            .count()
    }

    /// Deletes every closed segment file all of whose records have seq <=
    /// `seq` (the caller has persisted them elsewhere); returns how many.
    ///
    /// The file being written is never deleted. A closed file's last seq is
    /// bounded by the next file's first seq - 1. Durability on return: the
    /// removals are fsynced in the directory.
    pub fn remove_through(&self, seq: Seq) -> Result<usize> {
        let mut segs = self.shared.segments.lock();
        let mut n = 0;
        while n + 1 < segs.len() && segs[n + 1].first_seq - 1 <= seq {
            let path = &segs[n].path;
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    let err = io_err(format!("removing {}", path.display()), e);
                    segs.drain(..n);
                    return Err(err);
                }
            }
            n += 1;
        }
        segs.drain(..n);
        self.shared
            .stats
            .segment_files
            .store(segs.len() as u64, Ordering::Relaxed);
        drop(segs);
        if n > 0 {
            sync_dir(&self.shared.dir)?;
        }
        Ok(n)
    }

    /// Stops the commit thread after it has written every queued request and
    /// synced. Idempotent (later calls return `Ok`); also done on drop.
    ///
    /// Durability on return (`Ok`): every acknowledged record is fsynced.
    /// Returns [`Error::Poisoned`] if the WAL had failed earlier. Blocks the
    /// calling thread until the commit thread exits.
    pub fn close(&self) -> Result<()> {
        let mut thread = self.thread.lock();
        drop(self.tx.lock().take());
        match thread.take() {
            None => Ok(()),
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err(Error::Poisoned("WAL commit thread panicked".into()))),
        }
    }

    /// A snapshot of the WAL's counters.
    /// Why writes are failing now, if they are: the WAL's last group failed
    /// and has not been repaired (a full or failing disk), or the WAL is
    /// poisoned. `None` when the WAL accepts writes.
    pub fn degraded(&self) -> Option<String> {
        let shared = &self.shared;
        shared
            .poisoned
            .lock()
            .clone()
            .or_else(|| shared.degraded.lock().clone())
    }

    pub fn stats(&self) -> WalStats {
        self.shared.stats.snapshot()
    }

    fn send_append(&self, payload: Bytes) -> Result<oneshot::Receiver<Result<Seq>>> {
        self.check_append(&payload)?;
        let (reply, rx) = oneshot::channel();
        self.enqueue(payload, Some(reply))?;
        Ok(rx)
    }

    fn check_append(&self, payload: &Bytes) -> Result<()> {
        if payload.len() > MAX_RECORD_BYTES {
            return Err(Error::RecordTooLarge {
                len: payload.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        match self.shared.poison_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Sends an append, counting its bytes as queued until the commit thread
    /// has handled it.
    fn enqueue(&self, payload: Bytes, reply: Option<oneshot::Sender<Result<Seq>>>) -> Result<()> {
        let len = payload.len();
        self.shared.queued_bytes.fetch_add(len, Ordering::AcqRel);
        let sent = self.send(Request::Append { payload, reply });
        if sent.is_err() {
            self.shared.queued_bytes.fetch_sub(len, Ordering::AcqRel);
        }
        sent
    }

    fn send(&self, req: Request) -> Result<()> {
        match self.tx.lock().as_ref() {
            Some(tx) => tx.send(req).map_err(|_| self.gone()),
            None => Err(Error::Closed),
        }
    }

    /// The error for a request the commit thread never answered.
    fn gone(&self) -> Error {
        self.shared.poison_error().unwrap_or(Error::Closed)
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!(error = %e, "closing WAL on drop failed");
        }
    }
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Whether a segment file holds no record: empty, or starting with the
/// all-zero end marker.
fn holds_no_record(path: &Path) -> Result<bool> {
    let mut head = Vec::with_capacity(HEADER_LEN);
    File::open(path)
        .and_then(|f| f.take(HEADER_LEN as u64).read_to_end(&mut head))
        .map_err(|e| io_err(format!("reading {}", path.display()), e))?;
    Ok(head.iter().all(|&b| b == 0)
        && (head.len() < HEADER_LEN || Header::decode(&head).is_end_marker()))
}
