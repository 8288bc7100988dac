//! Unit tests: round trip, torn tails, corruption, group commit, rolling and
//! trimming, interval sync.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::*;

/// Applier that records everything it sees.
#[derive(Default)]
struct Recorder(Mutex<Vec<(Seq, Bytes)>>);

impl Applier for Recorder {
    fn apply(&self, seq: Seq, payload: &Bytes) {
        self.0.lock().push((seq, payload.clone()));
    }
}

/// 32-byte payload, so every frame is 48 bytes.
fn payload(i: u64) -> Bytes {
    Bytes::from(format!("record-{i:025}"))
}

const FRAME: u64 = 48;

fn start(dir: &Path, opts: WalOptions, next_seq: Seq) -> (Wal, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let wal = Wal::start(dir, opts, next_seq, rec.clone()).unwrap();
    (wal, rec)
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

/// Writes records 1..=n, one group each, and closes.
fn write_n(dir: &Path, opts: WalOptions, n: u64) {
    let (wal, _) = start(dir, opts, 1);
    for i in 1..=n {
        assert_eq!(wal.append_blocking(payload(i)).unwrap(), i);
    }
    wal.close().unwrap();
}

fn seqs(r: &Recovered) -> Vec<Seq> {
    r.records.iter().map(|(s, _)| *s).collect()
}

#[test]
fn wal_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Wal>();
}

#[test]
fn round_trip_blocking_and_async() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let r = Wal::recover(&dir, &WalOptions::default()).unwrap();
    assert!(r.records.is_empty());
    assert_eq!(r.next_seq(), 1);
    let (wal, rec) = start(&dir, WalOptions::default(), r.next_seq());
    for i in 1..=10 {
        assert_eq!(wal.append_blocking(payload(i)).unwrap(), i);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for i in 11..=20 {
            assert_eq!(wal.append(payload(i)).await.unwrap(), i);
        }
        wal.sync().await.unwrap();
    });
    let stats = wal.stats();
    assert_eq!(stats.records, 20);
    assert_eq!(stats.bytes, 20 * FRAME);
    wal.close().unwrap();
    wal.close().unwrap(); // idempotent
    assert!(matches!(
        wal.append_blocking(payload(99)),
        Err(Error::Closed)
    ));

    let expected: Vec<_> = (1..=20).map(|i| (i, payload(i))).collect();
    assert_eq!(*rec.0.lock(), expected);
    let r = Wal::recover(&dir, &WalOptions::default()).unwrap();
    assert_eq!(r.records, expected);
    assert!(r.skipped.is_empty());
    assert_eq!(r.truncated_tail, None);
    assert_eq!(r.next_seq(), 21);
}

#[test]
fn torn_tail_is_truncated_and_log_continues() {
    let last = 4 * FRAME; // offset of record 5
    let cuts = [1, 8, 15, 16, 17, 40, FRAME - 1];
    for cut in cuts.into_iter().map(Some).chain([None]) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write_n(dir, WalOptions::default(), 5);
        let files = segment_files(dir);
        assert_eq!(files.len(), 1);
        let file = &files[0];
        match cut {
            Some(cut) => fs::File::options()
                .write(true)
                .open(file)
                .unwrap()
                .set_len(last + cut)
                .unwrap(),
            None => {
                // A CRC mismatch in the last record, nothing after it: torn too.
                let mut data = fs::read(file).unwrap();
                data[(last + 20) as usize] ^= 0xff;
                fs::write(file, data).unwrap();
            }
        }
        let r = Wal::recover(dir, &WalOptions::default()).unwrap();
        assert_eq!(seqs(&r), vec![1, 2, 3, 4], "cut {cut:?}");
        assert_eq!(r.truncated_tail, Some((file.clone(), last)), "cut {cut:?}");
        assert_eq!(fs::metadata(file).unwrap().len(), last);

        let (wal, _) = start(dir, WalOptions::default(), r.next_seq());
        assert_eq!(
            wal.append_blocking(Bytes::from_static(b"after")).unwrap(),
            5
        );
        wal.close().unwrap();
        let r2 = Wal::recover(dir, &WalOptions::default()).unwrap();
        assert_eq!(seqs(&r2), vec![1, 2, 3, 4, 5]);
        assert_eq!(r2.records[4].1, Bytes::from_static(b"after"));
        assert_eq!(r2.records[..4], r.records[..]);
        assert_eq!(r2.truncated_tail, None);
    }
}

#[test]
fn crc_mismatch_mid_log_is_corrupt_or_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_n(dir, WalOptions::default(), 10);
    let file = segment_files(dir).remove(0);
    let frame3 = 2 * FRAME;
    let mut data = fs::read(&file).unwrap();
    data[(frame3 + 16 + 5) as usize] ^= 0x01;
    fs::write(&file, &data).unwrap();

    let err = Wal::recover(dir, &WalOptions::default()).unwrap_err();
    match &err {
        Error::Corrupt {
            file: f, offset, ..
        } => {
            assert_eq!(f, &file);
            assert_eq!(*offset, frame3);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("offset {frame3}")), "{msg}");
    // Nothing was truncated.
    assert_eq!(fs::metadata(&file).unwrap().len(), 10 * FRAME);

    let opts = WalOptions {
        skip_corrupt: true,
        ..WalOptions::default()
    };
    let r = Wal::recover(dir, &opts).unwrap();
    assert_eq!(seqs(&r), vec![1, 2, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(r.records[2].1, payload(4));
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].file, file);
    assert_eq!(r.skipped[0].offset, frame3);
    assert_eq!(r.truncated_tail, None);
}

#[test]
fn implausible_length_mid_log_skips_rest_of_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_n(dir, WalOptions::default(), 10);
    let file = segment_files(dir).remove(0);
    let mut data = fs::read(&file).unwrap();
    data[(2 * FRAME) as usize..(2 * FRAME + 4) as usize]
        .copy_from_slice(&0xF000_0000u32.to_le_bytes());
    fs::write(&file, &data).unwrap();

    // Valid records follow, so this is not a torn tail.
    let err = Wal::recover(dir, &WalOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { offset, .. } if offset == 2 * FRAME));
    let opts = WalOptions {
        skip_corrupt: true,
        ..WalOptions::default()
    };
    let r = Wal::recover(dir, &opts).unwrap();
    assert_eq!(seqs(&r), vec![1, 2]);
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(fs::metadata(&file).unwrap().len(), 10 * FRAME);
}

#[test]
fn damage_at_end_of_non_last_file_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = WalOptions {
        segment_bytes: 5 * FRAME,
        ..WalOptions::default()
    };
    write_n(dir, opts, 8);
    let files = segment_files(dir);
    assert_eq!(files.len(), 2);
    fs::File::options()
        .write(true)
        .open(&files[0])
        .unwrap()
        .set_len(5 * FRAME - 3)
        .unwrap();
    let err = Wal::recover(dir, &WalOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { file, offset, .. } if *file == files[0] && *offset == 4 * FRAME),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_shares_fsyncs_under_concurrency() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = WalOptions {
        linger: Duration::from_millis(1),
        ..WalOptions::default()
    };
    let (wal, rec) = start(dir, opts, 1);
    let wal = Arc::new(wal);
    let mut tasks = Vec::new();
    for t in 0..64u64 {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..50u64 {
                let p = Bytes::from(format!("task {t} item {i}"));
                out.push((wal.append(p.clone()).await.unwrap(), p));
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: HashSet<Seq> = all.iter().map(|(s, _)| *s).collect();
    assert_eq!(distinct.len(), 3200);
    assert_eq!(distinct, (1..=3200).collect());
    let stats = wal.stats();
    assert_eq!(stats.records, 3200);
    assert!(stats.groups < 3200, "no group sharing: {stats:?}");
    assert!(stats.fsyncs < 3200, "no fsync sharing: {stats:?}");
    assert_eq!(stats.fsyncs, stats.groups);
    wal.close().unwrap();

    all.sort_by_key(|(s, _)| *s);
    assert_eq!(*rec.0.lock(), all, "applier saw records in seq order");
    let r = Wal::recover(dir, &WalOptions::default()).unwrap();
    assert_eq!(r.records, all);
}

#[test]
fn rolling_and_remove_through() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = WalOptions {
        segment_bytes: 200, // rolls after 5 records of 48 bytes
        ..WalOptions::default()
    };
    let (wal, _) = start(dir, opts.clone(), 1);
    for i in 1..=20 {
        wal.append_blocking(payload(i)).unwrap();
    }
    let names = |d: &Path| -> Vec<String> {
        segment_files(d)
            .iter()
            .map(|p| {
                p.file_name().unwrap().to_string_lossy()[..20]
                    .trim_start_matches('0')
                    .to_string()
            })
            .collect()
    };
    assert_eq!(names(dir), ["1", "6", "11", "16", "21"]);
    assert_eq!(wal.stats().segment_files, 5);
    assert_eq!(wal.removable_through(4), 0);
    assert_eq!(wal.remove_through(4).unwrap(), 0); // file 1 holds 5
    assert_eq!(wal.removable_through(12), 2);
    assert_eq!(wal.removable_through(u64::MAX), 4); // never the active file
    assert_eq!(wal.remove_through(8).unwrap(), 1); // file 1 (max 5) only
    assert_eq!(wal.remove_through(12).unwrap(), 1); // file 6 (max 10) only
    assert_eq!(names(dir), ["11", "16", "21"]);
    assert_eq!(wal.stats().segment_files, 3);
    wal.close().unwrap();
    let r = Wal::recover(dir, &opts).unwrap();
    assert_eq!(seqs(&r), (11..=20).collect::<Vec<_>>());

    // The empty leftover file 21 is replaced; the active file is never removed.
    let (wal, _) = start(dir, opts.clone(), r.next_seq());
    assert_eq!(wal.append_blocking(payload(21)).unwrap(), 21);
    assert_eq!(wal.remove_through(u64::MAX).unwrap(), 2);
    assert_eq!(names(dir), ["21"]);
    assert_eq!(wal.stats().segment_files, 1);
    wal.close().unwrap();
    let r = Wal::recover(dir, &opts).unwrap();
    assert_eq!(r.records, vec![(21, payload(21))]);
}

#[test]
fn start_refuses_to_reuse_seqs() {
    let tmp = tempfile::tempdir().unwrap();
    write_n(tmp.path(), WalOptions::default(), 3);
    let err = Wal::start(
        tmp.path(),
        WalOptions::default(),
        1,
        Arc::new(Recorder::default()),
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_policy_syncs_in_background() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = WalOptions {
        sync: SyncPolicy::Interval(Duration::from_millis(300)),
        ..WalOptions::default()
    };
    let (wal, rec) = start(dir, opts, 1);
    for i in 1..=50 {
        assert_eq!(wal.append(payload(i)).await.unwrap(), i);
    }
    // Acknowledged without per-record fsyncs, and already applied.
    assert!(wal.stats().fsyncs <= 1, "{:?}", wal.stats());
    assert_eq!(rec.0.lock().len(), 50);
    let before = wal.stats().fsyncs;
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(wal.stats().fsyncs > before, "idle WAL never synced");
    let idle = wal.stats().fsyncs;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(wal.stats().fsyncs, idle, "clean WAL must not keep syncing");

    assert_eq!(wal.append(payload(51)).await.unwrap(), 51);
    wal.sync().await.unwrap();
    assert_eq!(wal.stats().fsyncs, idle + 1);
    wal.close().unwrap();
    let r = Wal::recover(dir, &WalOptions::default()).unwrap();
    assert_eq!(seqs(&r), (1..=51).collect::<Vec<_>>());
}

/// Panics on seq 2; everything else is accepted.
struct PanicOnTwo;

impl Applier for PanicOnTwo {
    fn apply(&self, seq: Seq, _: &Bytes) {
        assert_ne!(seq, 2, "applier refuses seq 2");
    }
}

#[test]
fn applier_panic_poisons_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let wal = Wal::start(dir, WalOptions::default(), 1, Arc::new(PanicOnTwo)).unwrap();
    assert_eq!(wal.append_blocking(payload(1)).unwrap(), 1);
    assert!(matches!(
        wal.append_blocking(payload(2)),
        Err(Error::Poisoned(_))
    ));
    assert!(matches!(
        wal.append_blocking(payload(3)),
        Err(Error::Poisoned(_))
    ));
    assert!(matches!(wal.close(), Err(Error::Poisoned(_))));
    // Record 2 was durable before apply; recovery replays it.
    let r = Wal::recover(dir, &WalOptions::default()).unwrap();
    assert_eq!(seqs(&r), vec![1, 2]);
}

/// Applier that takes its time, so the commit queue backs up.
struct Slow(Recorder);

impl Applier for Slow {
    fn apply(&self, seq: Seq, payload: &Bytes) {
        std::thread::sleep(Duration::from_millis(2));
        self.0.apply(seq, payload);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_nowait_queues_bounded_and_close_makes_it_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = WalOptions {
        max_queued_bytes: 4 * 32, // four payloads
        max_batch_records: 1,     // one record per group: the queue backs up
        ..WalOptions::default()
    };
    let slow = Arc::new(Slow(Recorder::default()));
    let wal = Wal::start(dir, opts, 1, slow.clone()).unwrap();
    let mut max_seen = 0;
    for i in 1..=40 {
        wal.append_nowait(payload(i)).await.unwrap();
        max_seen = max_seen.max(
            wal.shared
                .queued_bytes
                .load(std::sync::atomic::Ordering::Acquire),
        );
    }
    // Never more than the limit plus the one payload let in below it.
    assert!(max_seen <= 5 * 32, "queue grew to {max_seen} bytes");
    assert!(
        max_seen >= 4 * 32,
        "queue never filled ({max_seen} bytes): test too weak"
    );
    // A durable append queued behind them is answered after all of them.
    assert_eq!(wal.append(payload(41)).await.unwrap(), 41);
    assert_eq!(slow.0.0.lock().len(), 41);
    for i in 42..=50 {
        wal.append_nowait(payload(i)).await.unwrap();
    }
    // close() writes and fsyncs what is still queued.
    wal.close().unwrap();
    assert!(matches!(
        wal.append_nowait(payload(51)).await,
        Err(Error::Closed)
    ));
    let r = Wal::recover(dir, &WalOptions::default()).unwrap();
    assert_eq!(seqs(&r), (1..=50).collect::<Vec<_>>());
    assert_eq!(r.records[49].1, payload(50));
}

#[tokio::test]
async fn append_nowait_reports_known_errors_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = Wal::start(tmp.path(), WalOptions::default(), 1, Arc::new(PanicOnTwo)).unwrap();
    let huge = Bytes::from(vec![0u8; MAX_RECORD_BYTES + 1]);
    assert!(matches!(
        wal.append_nowait(huge).await,
        Err(Error::RecordTooLarge { .. })
    ));
    // Seq 2 panics in the applier: nobody waits for it, but it poisons.
    wal.append_nowait(payload(1)).await.unwrap();
    wal.append_nowait(payload(2)).await.unwrap();
    assert!(matches!(wal.sync().await, Err(Error::Poisoned(_))));
    assert!(matches!(
        wal.append_nowait(payload(3)).await,
        Err(Error::Poisoned(_))
    ));
    assert!(matches!(wal.close(), Err(Error::Poisoned(_))));
}
