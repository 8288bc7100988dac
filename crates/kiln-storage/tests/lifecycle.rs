//! The life of rows after a write, through the public `Db` API: flushed from
//! the memstore into segments, small segments compacted, each change
//! committed as a new manifest version while older snapshots keep reading
//! their files, and a restart rebuilding the same table from the manifest,
//! the WAL and the segment files. Every check reads segment files back from
//! disk, so a row lost or kept twice by any step changes a count or a sum.
//! (What a crash in the middle of a flush or compaction leaves behind is
//! covered by `crash_points.rs`, built with `--features failpoints`.)

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::TimestampNanosecondType;
use kiln_storage::memstore::SMALL_ROWS;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_moves_rows_from_memory_into_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let want = write(&db, 0, 0..100).await + write(&db, 1, 100..150).await;
    assert_eq!(in_memory(&db), want);
    assert_eq!(
        (version(&db), in_segments(&db).await),
        (0, Totals::default())
    );
    let before_flush = db.table(TABLE).unwrap().snapshot();

    db.flush_all().await.unwrap();
    assert_eq!(
        in_memory(&db),
        Totals::default(),
        "flushed rows left memory"
    );
    assert_eq!(in_segments(&db).await, want, "and are all in segments");
    let m = db.table(TABLE).unwrap().mem.manifest();
    assert_eq!(m.version, 1);
    assert_eq!(m.flushed_seq, 2, "both WAL records are covered");
    assert_eq!(
        (m.segments.len(), m.segments[0].meta.day),
        (1, day_of(0)),
        "two thin days share one segment, named by its first"
    );
    assert_eq!(parquet_files(&db).await, referenced(&db));
    assert_eq!(manifest_files(&db).await, [1]);
    assert_eq!(db.metrics().flushes.load(Ordering::Relaxed), 1);
    // A snapshot taken before still sees each row once (in its memory).
    assert_eq!(totals_of(&db, &before_flush).await, want);

    // Nothing left to flush: no new version.
    db.flush_all().await.unwrap();
    assert_eq!(version(&db), 1);
    let more = write(&db, 0, 150..160).await;
    db.flush_all().await.unwrap();
    assert_eq!(version(&db), 2);
    assert_eq!(db.table(TABLE).unwrap().segments().len(), 2);
    assert_eq!(stored(&db).await, want + more);
    assert_eq!(manifest_files(&db).await, [2], "older versions are pruned");
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_merges_small_segments_and_deletes_them_once_released() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let mut want = Totals::default();
    for i in 0..4 {
        want = want + write(&db, 0, i * 10..i * 10 + 10).await;
        db.flush_all().await.unwrap();
    }
    let replaced = referenced(&db);
    assert_eq!((replaced.len(), version(&db)), (4, 4));
    let pinned = db.table(TABLE).unwrap().snapshot();

    assert_eq!(db.compact_all().await.unwrap(), 1);
    let m = db.table(TABLE).unwrap().mem.manifest();
    assert_eq!((m.version, m.segments.len()), (5, 1));
    assert_eq!(m.segments[0].meta.rows, 40);
    assert_eq!(
        in_segments(&db).await,
        want,
        "the merged file holds every row"
    );
    assert!(replaced.is_disjoint(&referenced(&db)));
    assert_eq!(db.metrics().compactions.load(Ordering::Relaxed), 1);
    assert_eq!(
        db.compact_all().await.unwrap(),
        0,
        "one segment: nothing to do"
    );

    // Deletion is immediate in these tests, yet a pinned snapshot keeps them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(replaced.is_subset(&parquet_files(&db).await));
    assert_eq!(totals_of(&db, &pinned).await, want);
    drop(pinned);
    wait_until("the replaced files are deleted", || async {
        parquet_files(&db).await == referenced(&db)
    })
    .await;
    db.close().await.unwrap();

    let db = open(tmp.path()).await;
    assert_eq!(version(&db), 5);
    assert_consistent(&db, want).await;
    db.close().await.unwrap();
}

/// A day of many rows is a segment of its own; thin days around it share
/// one, so a table spread thin over years keeps a few files, not one a day.
/// Before their flush, the thin days' small batches in memory are packed
/// into one, which the flush splits by day again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_day_has_its_own_segment_and_thin_days_share_one() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    // 300,000 rows pass the default `segment_pack_rows`, 600 days of one
    // row do not.
    assert_eq!(config(tmp.path()).segment_pack_rows, 131_072);
    let mut want = write(&db, 300, 0..300_000).await;
    for day in 0..600 {
        want = want + write(&db, day, 300_000 + day..300_001 + day).await;
    }
    let t = db.table(TABLE).unwrap();
    assert!(t.mem.pack_small(131_072) >= 600);
    let snapshot = t.snapshot();
    let mem = snapshot.mem_by_days();
    let small: Vec<_> = mem.iter().filter(|(_, b)| b.rows() < SMALL_ROWS).collect();
    assert_eq!(small.len(), 1, "the thin days' rows in one batch");
    assert_eq!(
        (small[0].0.first, small[0].0.last),
        (day_of(0), day_of(599))
    );
    for (days, b) in &mem {
        let (first, last) = days.time_range();
        let ts = b.batch.column(0).as_primitive::<TimestampNanosecondType>();
        assert!(ts.values().iter().all(|t| (first..=last).contains(t)));
    }
    assert_eq!(Totals::of(&snapshot.mem_batches()), want);
    db.flush_all().await.unwrap();
    let m = db.table(TABLE).unwrap().mem.manifest();
    let mut spans: Vec<_> = m
        .segments
        .iter()
        .map(|s| {
            (
                s.meta.day,
                s.meta.rows,
                day_at(s.meta.min_time),
                day_at(s.meta.max_time),
            )
        })
        .collect();
    spans.sort();
    let d = day_of;
    assert_eq!(
        spans,
        [
            (d(0), 300, d(0), d(299)),
            (d(300), 300_001, d(300), d(300)),
            (d(301), 299, d(301), d(599)),
        ],
        "(first day, rows, days of the first and last rows) of each segment"
    );
    assert_eq!(in_segments(&db).await, want);
    db.close().await.unwrap();
    let db = open(tmp.path()).await;
    assert_consistent(&db, want).await;
    db.close().await.unwrap();
}

/// Thin segments of different days (each day's few rows flushed on its
/// own) are merged into one by compaction, as a day's small segments are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_merges_thin_segments_of_different_days() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let mut want = Totals::default();
    for day in 0..6 {
        want = want + write(&db, day * 30, day * 10..day * 10 + 10).await;
        db.flush_all().await.unwrap();
    }
    assert_eq!(db.table(TABLE).unwrap().segments().len(), 6);
    assert_eq!(db.compact_all().await.unwrap(), 1);
    let m = db.table(TABLE).unwrap().mem.manifest();
    assert_eq!(m.segments.len(), 1);
    let s = &m.segments[0].meta;
    assert_eq!(
        (s.day, s.rows, day_at(s.max_time)),
        (day_of(0), 60, day_of(150))
    );
    assert_eq!(in_segments(&db).await, want);
    assert_eq!(db.compact_all().await.unwrap(), 0, "nothing left to merge");
    db.close().await.unwrap();
    let db = open(tmp.path()).await;
    assert_consistent(&db, want).await;
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_keeps_reading_its_manifest_version_after_swaps() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let a = write(&db, 0, 0..10).await;
    db.flush_all().await.unwrap();
    let v1 = db.table(TABLE).unwrap().snapshot();
    let v1_files = referenced(&db);
    let b = write(&db, 0, 10..30).await;
    db.flush_all().await.unwrap();
    let b_files: BTreeSet<_> = referenced(&db).difference(&v1_files).cloned().collect();
    db.compact_all().await.unwrap();

    let now = db.table(TABLE).unwrap().snapshot();
    assert_eq!(
        (v1.version.manifest.version, now.version.manifest.version),
        (1, 3),
        "each commit is the next version"
    );
    assert_eq!(manifest_files(&db).await, [3]);
    assert_eq!(totals_of(&db, &now).await, a + b);
    // Version 1 still reads exactly its own rows, from its own file...
    assert_eq!(totals_of(&db, &v1).await, a);
    // ...while the file only version 2 named, pinned by nobody, is gone.
    wait_until("the unpinned replaced file is deleted", || async {
        parquet_files(&db).await.is_disjoint(&b_files)
    })
    .await;
    assert!(v1_files.is_subset(&parquet_files(&db).await));
    drop(v1);
    wait_until("version 1's file is deleted once released", || async {
        parquet_files(&db).await.is_disjoint(&v1_files)
    })
    .await;
    assert_eq!(totals_of(&db, &now).await, a + b);
    db.close().await.unwrap();
}

/// WAL files of `dir` holding at least one byte.
fn wal_files_with_records(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unflushed_rows_are_replayed_from_the_wal_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let a = write(&db, 0, 0..50).await;
    db.flush_all().await.unwrap();
    let b = write(&db, 0, 50..80).await + write(&db, 1, 80..90).await;
    // One WAL file, still being written: the flushed record is in it too.
    assert_eq!(wal_files_with_records(tmp.path()).len(), 1);
    db.close().await.unwrap();

    let db = open(tmp.path()).await;
    assert_eq!(version(&db), 1);
    assert_eq!(in_segments(&db).await, a, "flushed rows come from segments");
    assert_eq!(
        in_memory(&db),
        b,
        "only records past the manifest are replayed"
    );
    db.flush_all().await.unwrap();
    assert_eq!((version(&db), in_memory(&db)), (2, Totals::default()));
    db.close().await.unwrap();

    let db = open(tmp.path()).await;
    assert_eq!(in_memory(&db), Totals::default());
    assert_consistent(&db, a + b).await;
    db.close().await.unwrap();
}

/// Byte offsets of the frames of a WAL file (16-byte header whose first
/// four bytes are the payload length, then the payload).
fn frame_offsets(file: &Path) -> Vec<u64> {
    let data = std::fs::read(file).unwrap();
    let mut offsets = vec![];
    let mut at = 0;
    while at + 16 <= data.len() {
        offsets.push(at as u64);
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        at += 16 + len;
    }
    assert_eq!(at, data.len(), "whole frames");
    offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_wal_tail_is_cut_off_and_the_log_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let a = write(&db, 0, 0..10).await;
    write(&db, 0, 10..20).await;
    db.close().await.unwrap();
    // A crash in the middle of writing the second record.
    let [file] = &wal_files_with_records(tmp.path())[..] else {
        panic!("one WAL file")
    };
    let offsets = frame_offsets(file);
    assert_eq!(offsets.len(), 2);
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.set_len(offsets[1] + 20).unwrap();
    drop(f);

    let db = open(tmp.path()).await;
    assert_eq!(
        stored(&db).await,
        a,
        "the torn record is dropped, the rest kept"
    );
    assert_eq!(
        std::fs::metadata(file).unwrap().len(),
        offsets[1],
        "the tail is truncated"
    );
    let c = write(&db, 0, 20..25).await;
    db.close().await.unwrap();

    let db = open(tmp.path()).await;
    assert_eq!(stored(&db).await, a + c, "records after the cut are kept");
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_numbers_go_on_after_the_wal_was_trimmed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = config(tmp.path());
    cfg.wal_segment_bytes = kiln_storage::ByteSize::b(1); // a new WAL file per group: flushed ones can be deleted
    let db = open_with(cfg.clone()).await;
    create(&db).await;
    let a = write(&db, 0, 0..10).await + write(&db, 0, 10..20).await;
    db.flush_all().await.unwrap();
    assert!(wal_files_with_records(tmp.path()).is_empty(), "WAL trimmed");
    db.close().await.unwrap();

    // The WAL holds no record now: new ones must still be numbered past the
    // manifest's flushed sequence, or the next recovery would skip them.
    let db = open_with(cfg.clone()).await;
    let b = write(&db, 0, 20..30).await;
    db.close().await.unwrap();
    let db = open_with(cfg).await;
    assert_eq!(in_memory(&db), b);
    assert_consistent(&db, a + b).await;
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_deletes_segment_files_no_manifest_names() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let a = write(&db, 0, 0..10).await;
    db.flush_all().await.unwrap();
    let kept = referenced(&db);
    db.close().await.unwrap();
    // Valid Parquet files no manifest names: one in the table's partition
    // (as a crash mid-flush leaves), one of a table the catalog lacks, and
    // the temporary files of a segment and a manifest version a crash cut
    // short.
    let real = tmp.path().join(kept.first().unwrap());
    let strays = [
        tmp.path().join("tables/1/2026-05-02/stray.parquet"),
        tmp.path().join("tables/77/2026-05-02/dropped.parquet"),
        tmp.path().join("tables/1/2026-05-02/cut.parquet.tmp"),
        tmp.path()
            .join("tables/1/manifest/00000000000000000009.json.0a1b.tmp"),
    ];
    for s in &strays {
        std::fs::create_dir_all(s.parent().unwrap()).unwrap();
        std::fs::copy(&real, s).unwrap();
    }

    let db = open(tmp.path()).await;
    assert!(strays.iter().all(|s| !s.exists()), "strays deleted");
    assert_eq!(parquet_files(&db).await, kept);
    assert_consistent(&db, a).await;
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_then_are_refused_when_unflushed_rows_fill_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    c.memstore_max_bytes = kiln_storage::ByteSize::kib(1);
    let db = open_with(c).await;
    create(&db).await;
    // Room at first; past the cap (no background flush in these tests)
    // the next write waits, then is refused, and writes nothing.
    let want = write(&db, 0, 0..1000).await;
    assert!(db.table(TABLE).unwrap().mem.bytes() > 1024);
    let t = db.table(TABLE).unwrap();
    let batch = arrow::array::RecordBatch::new_empty(t.schema.clone());
    let started = std::time::Instant::now();
    let e = db.write(TABLE, &[batch]).await.unwrap_err();
    assert!(started.elapsed() >= kiln_storage::MEMSTORE_WAIT);
    assert_eq!(e.kind(), kiln_storage::ErrorKind::Backpressure, "{e}");
    assert_eq!(in_memory(&db), want);
    // A flush makes room: writes are accepted again at once.
    db.flush_all().await.unwrap();
    write(&db, 0, 1000..1010).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_table_whose_flushes_fall_behind_wait_first() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    create(&db).await;
    let mut want = write(&db, 0, 0..1000).await;
    let held = db.table(TABLE).unwrap().mem.bytes();
    db.close().await.unwrap();
    // Reopened with its rows unflushed under a cap of 1.5 times them:
    // writes slow from half the cap, so the table is a third of the way
    // to the longest wait.
    let mut c = config(tmp.path());
    c.memstore_max_bytes = kiln_storage::ByteSize::b(held as u64 * 3 / 2);
    let db = open_with(c.clone()).await;
    let held = db.table(TABLE).unwrap().mem.bytes();
    let (flush, cap) = (c.flush_bytes.as_usize(), c.memstore_max_bytes.as_usize());
    let wait = kiln_storage::pace::delay(held, flush, cap);
    assert!(wait >= kiln_storage::pace::MAX_DELAY / 4, "{wait:?}");
    let started = std::time::Instant::now();
    want = want + write(&db, 0, 1000..1001).await;
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    assert_eq!(in_memory(&db), want, "then written");
    let m = db.metrics();
    assert_eq!(m.writes_paced.load(Ordering::Relaxed), 1);
    assert_eq!(
        m.pace_micros.load(Ordering::Relaxed),
        wait.as_micros() as u64
    );
    // Once flushed, the table is not behind: writes go straight in.
    db.flush_all().await.unwrap();
    write(&db, 0, 1001..1002).await;
    assert_eq!(m.writes_paced.load(Ordering::Relaxed), 1);
}

/// A part builder that panics, as DataFusion's t-digest did for a cube
/// asking for a digest of `i64::MAX` centroids.
struct Panics;

impl kiln_storage::CubeBuilder for Panics {
    fn build(
        &self,
        _: &kiln_storage::Table,
        _: &kiln_storage::CubeDef,
        _: arrow::array::RecordBatch,
    ) -> Option<futures::future::BoxFuture<'static, kiln_storage::Result<arrow::array::RecordBatch>>>
    {
        Some(Box::pin(async { panic!("capacity overflow") }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cube_part_whose_build_panics_leaves_its_segment_raw_and_flushes_going() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    db.set_cube_builder(std::sync::Arc::new(Panics));
    create(&db).await;
    create_count_cube(&db).await;
    let a = write(&db, 0, 0..100).await;
    db.flush_all().await.unwrap();
    let b = write(&db, 0, 100..150).await;
    db.flush_all().await.unwrap();
    assert_eq!(stored(&db).await, a + b, "both flushes committed");
    let t = db.table(TABLE).unwrap();
    assert_eq!(t.segments().len(), 2);
    assert!(
        t.segments().iter().all(|s| s.part(1).is_none()),
        "no part: queries read the segments raw"
    );
    // The failed parts are not retried at once, and trying does not panic.
    assert_eq!(db.build_cube_parts().await.unwrap(), 0);
    db.close().await.unwrap();
}

/// A flush of several days writes their segments side by side, as many
/// as there are cores, each with its part: one cube, so parts built at
/// once are different segments'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushs_segments_are_written_at_once_up_to_the_cores() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    // Each day its own segment, however few its rows.
    c.segment_pack_rows = 1;
    let db = open_with(c).await;
    let builder = std::sync::Arc::new(Slow::default());
    db.set_cube_builder(builder.clone());
    create(&db).await;
    create_count_cube(&db).await;
    for day in 0..3 {
        write(&db, day, day * 10..day * 10 + 10).await;
    }
    db.flush_all().await.unwrap();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(builder.most.load(Ordering::SeqCst), cores.min(3));
    let t = db.table(TABLE).unwrap();
    let segments = t.segments();
    assert_eq!(segments.len(), 3);
    for s in segments.iter() {
        assert_eq!(s.meta.rows, 10);
        assert_eq!(s.part(1).map(|p| p.meta.rows), Some(1), "{}", s.meta.path);
    }
    db.close().await.unwrap();
}

/// A builder whose parts take a while and count how many are being built
/// at once; each part holds its input's row count.
#[derive(Default)]
struct Slow {
    building: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl kiln_storage::CubeBuilder for Slow {
    fn build(
        &self,
        _: &kiln_storage::Table,
        _: &kiln_storage::CubeDef,
        rows: arrow::array::RecordBatch,
    ) -> Option<futures::future::BoxFuture<'static, kiln_storage::Result<arrow::array::RecordBatch>>>
    {
        let (building, most) = (self.building.clone(), self.most.clone());
        Some(Box::pin(async move {
            let now = building.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            building.fetch_sub(1, Ordering::SeqCst);
            let n = arrow::array::Int64Array::from(vec![rows.num_rows() as i64]);
            Ok(
                arrow::array::RecordBatch::try_from_iter([("n", std::sync::Arc::new(n) as _)])
                    .unwrap(),
            )
        }))
    }
}

/// A segment's parts are built at once, as many as there are cores, and
/// each is committed with the segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segments_parts_are_built_at_once_up_to_the_cores() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    let builder = std::sync::Arc::new(Slow::default());
    db.set_cube_builder(builder.clone());
    create(&db).await;
    for name in ["c1", "c2", "c3"] {
        create_count_cube_named(&db, name).await;
    }
    write(&db, 0, 0..100).await;
    db.flush_all().await.unwrap();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(builder.most.load(Ordering::SeqCst), cores.min(3));
    let t = db.table(TABLE).unwrap();
    let segments = t.segments();
    assert_eq!(segments.len(), 1);
    for cube in t.cubes().iter() {
        let part = segments[0].part(cube.id);
        assert_eq!(part.map(|p| p.meta.rows), Some(1), "cube {}", cube.name);
    }
    db.close().await.unwrap();
}

/// A runtime of its own for the storage engine's CPU work, counting how
/// many pieces of work were sent to it.
struct CountingRuntime {
    runtime: &'static tokio::runtime::Runtime,
    sent: std::sync::atomic::AtomicUsize,
}

impl CountingRuntime {
    fn new() -> std::sync::Arc<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        // Leaked: a runtime may not be dropped inside the test's own.
        std::sync::Arc::new(CountingRuntime {
            runtime: Box::leak(Box::new(runtime)),
            sent: Default::default(),
        })
    }

    fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }
}

impl kiln_storage::CpuRuntime for CountingRuntime {
    fn handle(&self) -> tokio::runtime::Handle {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.runtime.handle().clone()
    }
}

/// Flushes and compactions sort, encode and decode on the installed
/// runtime, so the query layer decides at what priority they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_and_compactions_run_their_cpu_work_on_the_installed_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    let db = open(tmp.path()).await;
    let cpu = CountingRuntime::new();
    db.set_cpu_runtimes(cpu.clone(), cpu.clone());
    create(&db).await;
    let mut want = Totals::default();
    for i in 0..2 {
        want = want + write(&db, 0, i * 10..i * 10 + 10).await;
        let before = cpu.sent.load(Ordering::SeqCst);
        db.flush_all().await.unwrap();
        // Sorting and encoding the segment.
        assert!(cpu.sent.load(Ordering::SeqCst) >= before + 2);
    }
    let before = cpu.sent.load(Ordering::SeqCst);
    assert_eq!(db.compact_all().await.unwrap(), 1);
    // Decoding both segments, sorting and encoding the merged one.
    assert!(cpu.sent.load(Ordering::SeqCst) >= before + 4);
    assert_eq!(in_segments(&db).await, want);
    db.close().await.unwrap();
}

/// Background work runs on the idle runtime while the table keeps up. A
/// table holding two flushes' worth of rows makes it urgent: found so by
/// a write (before any background round) or by the round, which then
/// flushes on the urgent runtime; the next round finds the table keeping
/// up and sends work back to the idle one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_work_runs_on_idle_cores_until_a_table_falls_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config(tmp.path());
    c.flush_bytes = kiln_storage::ByteSize::kib(64);
    let db = open_with(c.clone()).await;
    let (idle, urgent) = (CountingRuntime::new(), CountingRuntime::new());
    db.set_cpu_runtimes(idle.clone(), urgent.clone());
    create(&db).await;
    let mut want = write(&db, 0, 0..10).await;
    db.flush_all().await.unwrap();
    assert!(idle.sent() >= 2, "sorting and encoding: {}", idle.sent());
    assert_eq!(urgent.sent(), 0);
    // Rows past two flushes' worth, then a write that finds them there.
    want = want + write(&db, 0, 10..20_000).await;
    let held = db.table(TABLE).unwrap().mem.bytes();
    assert!(held >= 128 << 10, "{held} bytes held");
    assert!(
        !db.background_urgency().is_urgent(),
        "no write found it yet"
    );
    want = want + write(&db, 0, 20_000..20_001).await;
    assert!(db.background_urgency().is_urgent());
    db.close().await.unwrap();
    // Reopened with the rows unflushed and the background running: its
    // first round finds the table behind and flushes it on the urgent
    // runtime, a later one finds it keeping up.
    c.background_interval = Duration::from_millis(300);
    let db = open_with(c).await;
    let (idle, urgent) = (CountingRuntime::new(), CountingRuntime::new());
    db.set_cpu_runtimes(idle.clone(), urgent.clone());
    wait_until("flushed, and a round found the table keeping up", || {
        let done = in_memory(&db).rows == 0 && !db.background_urgency().is_urgent();
        async move { done }
    })
    .await;
    let (idle_before, urgent_before) = (idle.sent(), urgent.sent());
    assert!(urgent_before >= 2, "sorting and encoding: {urgent_before}");
    // Back on idle cores: the next flush's work (and the rounds' packing
    // of in-memory batches) goes there.
    want = want + write(&db, 0, 20_001..20_011).await;
    db.flush_all().await.unwrap();
    assert!(idle.sent() >= idle_before + 2, "{}", idle.sent());
    assert_eq!(urgent.sent(), urgent_before);
    assert_eq!(in_segments(&db).await, want);
    db.close().await.unwrap();
}
