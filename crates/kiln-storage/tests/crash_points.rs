//! A flush or compaction stopped at each of its commit boundaries (the
//! points in `kiln_storage::failpoints`), then the directory reopened: every
//! acknowledged row must be there exactly once (count and sum, read back
//! from the segment files), no segment file may be left on disk that the
//! manifest does not name (nor the reverse), and the manifest version loaded
//! must be the newest one written.
//!
//! A crash is a point set to `panic`: the flush or compaction runs on its own
//! task, stops there with nothing after it run (no error handling, no
//! cleanup), and the database is closed without flushing, which leaves the
//! files as a killed process would and releases the directory lock. A point
//! set to `return` checks the error path instead, in the same process.
//!
//! Built only with `--features failpoints`. The `fail` registry is
//! process-wide, so each test holds a `FailScenario`, which runs them one at
//! a time and clears every point when the test ends.

mod support;

use std::future::Future;
use std::path::{Path, PathBuf};

use fail::FailScenario;
use kiln_storage::Db;
use kiln_storage::failpoints::{
    COMPACTION_AFTER_COMMIT, COMPACTION_AFTER_SEGMENT, FLUSH_AFTER_SEGMENTS, MANIFEST_AFTER_WRITE,
};
use support::*;

/// Runs one test alone (as far as fail points go) on a fresh directory.
fn run<F, Fut>(test: F)
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: Future<Output = ()>,
{
    let scenario = FailScenario::setup();
    let tmp = tempfile::tempdir().unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test(tmp.path().to_path_buf()));
    scenario.teardown();
}

/// Runs `step` on its own task, where it must stop at a point set to
/// `panic`; then closes `db` without flushing (a crash, as far as files go).
async fn crash_during<F, Fut>(db: &Db, step: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let stopped = tokio::spawn(step(db.clone())).await;
    assert!(
        stopped.is_err_and(|e| e.is_panic()),
        "the step did not stop at its failpoint"
    );
    db.close().await.unwrap();
}

/// A table with `n` flushed segments of 10 rows each in one partition.
async fn flushed_segments(dir: &Path, n: i64) -> (Db, Totals) {
    let db = open(dir).await;
    create(&db).await;
    let mut want = Totals::default();
    for i in 0..n {
        want = want + write(&db, 0, i * 10..i * 10 + 10).await;
        db.flush_all().await.unwrap();
    }
    assert_eq!(version(&db), n as u64);
    (db, want)
}

#[test]
fn crash_after_a_flush_wrote_its_segments() {
    run(|dir| async move {
        let db = open(&dir).await;
        create(&db).await;
        // A full day (over 131,072 rows) and a thin one: two segments.
        let want = write(&db, 0, 0..300_000).await + write(&db, 1, 300_000..300_020).await;
        fail::cfg(FLUSH_AFTER_SEGMENTS, "panic").unwrap();
        crash_during(&db, |db| async move { db.flush_all().await }).await;
        fail::remove(FLUSH_AFTER_SEGMENTS);
        assert_eq!(parquet_files(&db).await.len(), 2, "both segments written");
        assert!(
            manifest_files(&db).await.is_empty(),
            "no manifest names them"
        );
        drop(db);

        let db = open(&dir).await;
        assert_eq!(version(&db), 0);
        assert_eq!(in_memory(&db), want, "every row replayed from the WAL");
        assert_consistent(&db, want).await;
        db.flush_all().await.unwrap();
        assert_eq!((version(&db), in_segments(&db).await), (1, want));
        db.close().await.unwrap();

        let db = open(&dir).await;
        assert_eq!(in_memory(&db), Totals::default());
        assert_consistent(&db, want).await;
        db.close().await.unwrap();
    });
}

#[test]
fn a_flush_failing_after_its_segments_keeps_the_rows_in_memory() {
    run(|dir| async move {
        let db = open(&dir).await;
        create(&db).await;
        let want = write(&db, 0, 0..100).await + write(&db, 1, 100..120).await;
        fail::cfg(FLUSH_AFTER_SEGMENTS, "return").unwrap();
        let err = db.flush_all().await.unwrap_err();
        assert!(err.to_string().contains(FLUSH_AFTER_SEGMENTS), "{err}");
        assert_eq!((version(&db), in_memory(&db)), (0, want));
        wait_until("the uncommitted segments are deleted", || async {
            parquet_files(&db).await.is_empty()
        })
        .await;

        fail::remove(FLUSH_AFTER_SEGMENTS);
        db.flush_all().await.unwrap();
        assert_eq!(version(&db), 1);
        assert_eq!(
            (in_memory(&db), in_segments(&db).await),
            (Totals::default(), want)
        );
        db.close().await.unwrap();

        let db = open(&dir).await;
        assert_eq!(in_memory(&db), Totals::default());
        assert_consistent(&db, want).await;
        db.close().await.unwrap();
    });
}

#[test]
fn crash_after_a_flush_wrote_its_manifest_version() {
    run(|dir| async move {
        let (db, a) = flushed_segments(&dir, 1).await;
        let b = write(&db, 0, 10..30).await + write(&db, 1, 30..40).await;
        fail::cfg(MANIFEST_AFTER_WRITE, "panic").unwrap();
        crash_during(&db, |db| async move { db.flush_all().await }).await;
        fail::remove(MANIFEST_AFTER_WRITE);
        assert_eq!(version(&db), 1, "not swapped in memory");
        assert_eq!(
            manifest_files(&db).await,
            [1, 2],
            "version 2 written, version 1 not yet deleted"
        );
        drop(db);

        let db = open(&dir).await;
        assert_eq!(version(&db), 2, "the newest version is loaded");
        assert_eq!(
            in_memory(&db),
            Totals::default(),
            "records version 2 covers are not replayed"
        );
        assert_consistent(&db, a + b).await;
        // The next commit deletes the older version left behind.
        let c = write(&db, 0, 40..45).await;
        db.flush_all().await.unwrap();
        assert_eq!(manifest_files(&db).await, [3]);
        db.close().await.unwrap();

        let db = open(&dir).await;
        assert_consistent(&db, a + b + c).await;
        db.close().await.unwrap();
    });
}

#[test]
fn a_flush_failing_after_its_manifest_write_is_redone_in_process() {
    run(|dir| async move {
        let (db, a) = flushed_segments(&dir, 1).await;
        let b = write(&db, 0, 10..30).await;
        fail::cfg(MANIFEST_AFTER_WRITE, "return").unwrap();
        let err = db.flush_all().await.unwrap_err();
        assert!(err.to_string().contains(MANIFEST_AFTER_WRITE), "{err}");
        assert_eq!((version(&db), in_memory(&db)), (1, b));
        assert_eq!(stored(&db).await, a + b);

        fail::remove(MANIFEST_AFTER_WRITE);
        db.flush_all().await.unwrap();
        assert_eq!((version(&db), in_memory(&db)), (2, Totals::default()));
        assert_eq!(manifest_files(&db).await, [2]);
        db.close().await.unwrap();

        let db = open(&dir).await;
        assert_consistent(&db, a + b).await;
        db.close().await.unwrap();
    });
}

/// A commit that fails after its version file is written (an fsync failing
/// after the write) may leave that version on disk, naming the segments the
/// flush wrote. Those files must stay: a restart before the next commit
/// loads that version and skips the WAL records it covers. The next open
/// deletes them only if no manifest names them.
#[test]
fn restart_after_a_flush_failed_past_its_manifest_write_keeps_every_row() {
    run(|dir| async move {
        let (db, a) = flushed_segments(&dir, 1).await;
        let v1_files = referenced(&db);
        let b = write(&db, 0, 10..30).await;
        fail::cfg(MANIFEST_AFTER_WRITE, "return").unwrap();
        db.flush_all().await.unwrap_err();
        fail::remove(MANIFEST_AFTER_WRITE);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            parquet_files(&db).await.len() > v1_files.len(),
            "the failed flush's segments are kept"
        );
        db.close().await.unwrap();

        let db = open(&dir).await;
        assert_consistent(&db, a + b).await;
        db.close().await.unwrap();
    });
}

#[test]
fn crash_after_a_compaction_wrote_the_merged_segment() {
    run(|dir| async move {
        let (db, want) = flushed_segments(&dir, 3).await;
        let small = referenced(&db);
        fail::cfg(COMPACTION_AFTER_SEGMENT, "panic").unwrap();
        crash_during(&db, |db| async move { db.compact_all().await }).await;
        fail::remove(COMPACTION_AFTER_SEGMENT);
        assert_eq!(
            parquet_files(&db).await.len(),
            4,
            "the merged one is written"
        );
        drop(db);

        let db = open(&dir).await;
        assert_eq!(version(&db), 3);
        assert_eq!(referenced(&db), small);
        assert_consistent(&db, want).await;
        assert_eq!(db.compact_all().await.unwrap(), 1, "can be done again");
        assert_eq!(in_segments(&db).await, want);
        db.close().await.unwrap();
    });
}

#[test]
fn a_compaction_failing_before_its_commit_deletes_the_merged_segment() {
    run(|dir| async move {
        let (db, want) = flushed_segments(&dir, 3).await;
        let small = referenced(&db);
        fail::cfg(COMPACTION_AFTER_SEGMENT, "return").unwrap();
        let err = db.compact_all().await.unwrap_err();
        assert!(err.to_string().contains(COMPACTION_AFTER_SEGMENT), "{err}");
        assert_eq!((version(&db), referenced(&db)), (3, small.clone()));
        wait_until("the merged segment is deleted", || async {
            parquet_files(&db).await == small
        })
        .await;
        assert_eq!(stored(&db).await, want);

        fail::remove(COMPACTION_AFTER_SEGMENT);
        assert_eq!(db.compact_all().await.unwrap(), 1);
        db.close().await.unwrap();
        let db = open(&dir).await;
        assert_eq!(version(&db), 4);
        assert_consistent(&db, want).await;
        db.close().await.unwrap();
    });
}

#[test]
fn crash_after_a_compaction_wrote_its_manifest_version() {
    run(|dir| async move {
        let (db, want) = flushed_segments(&dir, 3).await;
        let small = referenced(&db);
        fail::cfg(MANIFEST_AFTER_WRITE, "panic").unwrap();
        crash_during(&db, |db| async move { db.compact_all().await }).await;
        fail::remove(MANIFEST_AFTER_WRITE);
        assert_eq!(manifest_files(&db).await, [3, 4]);
        drop(db);

        let db = open(&dir).await;
        assert_eq!(version(&db), 4);
        assert_eq!(referenced(&db).len(), 1);
        assert!(referenced(&db).is_disjoint(&small));
        assert_consistent(&db, want).await;
        db.close().await.unwrap();
    });
}

#[test]
fn crash_between_a_compaction_commit_and_releasing_what_it_replaced() {
    run(|dir| async move {
        let (db, want) = flushed_segments(&dir, 3).await;
        let small = referenced(&db);
        fail::cfg(COMPACTION_AFTER_COMMIT, "panic").unwrap();
        crash_during(&db, |db| async move { db.compact_all().await }).await;
        fail::remove(COMPACTION_AFTER_COMMIT);
        assert_eq!(version(&db), 4, "swapped in memory");
        assert_eq!(manifest_files(&db).await, [4]);
        let on_disk = parquet_files(&db).await;
        assert!(
            small.is_subset(&on_disk) && on_disk.len() == 4,
            "{on_disk:?}"
        );
        drop(db);

        let db = open(&dir).await;
        assert_eq!(version(&db), 4);
        assert!(referenced(&db).is_disjoint(&small));
        assert_consistent(&db, want).await;
        db.close().await.unwrap();
    });
}

/// Parts of one cube with no dimension and one measure, the rows of the
/// segment: what the query layer's builder would keep for `count(*)`.
struct RowCount;

impl kiln_storage::CubeBuilder for RowCount {
    fn build(
        &self,
        _: &kiln_storage::Table,
        _: &kiln_storage::CubeDef,
        rows: arrow::array::RecordBatch,
    ) -> Option<futures::future::BoxFuture<'static, kiln_storage::Result<arrow::array::RecordBatch>>>
    {
        let n = rows.num_rows() as i64;
        Some(Box::pin(async move {
            let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new("n", arrow::datatypes::DataType::Int64, false),
            ]));
            let col = std::sync::Arc::new(arrow::array::Int64Array::from(vec![n]));
            Ok(arrow::array::RecordBatch::try_new(schema, vec![col])?)
        }))
    }
}

/// Opens with the part builder installed and the cube created if missing.
async fn open_with_cube(dir: &Path) -> Db {
    let db = open(dir).await;
    db.set_cube_builder(std::sync::Arc::new(RowCount));
    if db.table(TABLE).is_none() {
        create(&db).await;
    }
    create_count_cube(&db).await;
    db
}

/// Part files on disk, and those the manifest names.
async fn parts(db: &Db) -> (Vec<String>, Vec<String>) {
    let on_disk = parquet_files(db)
        .await
        .into_iter()
        .filter(|p| p.contains(".cube"))
        .collect();
    let t = db.table(TABLE).unwrap();
    let mut named: Vec<String> = t
        .segments()
        .iter()
        .flat_map(|s| {
            s.parts()
                .iter()
                .map(|p| p.meta.path.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    named.sort();
    (on_disk, named)
}

#[test]
fn crash_during_a_flush_with_cubes_leaves_each_segment_with_its_part_or_neither() {
    run(|dir| async move {
        let db = open_with_cube(&dir).await;
        // A full day (over 131,072 rows) and a thin one: two segments.
        let a = write(&db, 0, 0..300_000).await + write(&db, 1, 300_000..300_020).await;
        fail::cfg(FLUSH_AFTER_SEGMENTS, "panic").unwrap();
        crash_during(&db, |db| async move { db.flush_all().await }).await;
        fail::remove(FLUSH_AFTER_SEGMENTS);
        assert_eq!(
            parts(&db).await.0.len(),
            2,
            "each new segment's part written"
        );
        drop(db);

        // Nothing committed: segments and parts both gone, rows replayed.
        let db = open_with_cube(&dir).await;
        assert_eq!(parts(&db).await, (vec![], vec![]));
        assert_eq!(in_memory(&db), a);
        db.flush_all().await.unwrap();
        let (on_disk, named) = parts(&db).await;
        assert_eq!(on_disk, named);
        assert_eq!(named.len(), 2, "every segment has its part");

        // Crash once the version naming the next segments and parts is written.
        let b = write(&db, 0, 300_020..300_030).await;
        fail::cfg(MANIFEST_AFTER_WRITE, "panic").unwrap();
        crash_during(&db, |db| async move { db.flush_all().await }).await;
        fail::remove(MANIFEST_AFTER_WRITE);
        drop(db);
        let db = open_with_cube(&dir).await;
        let (on_disk, named) = parts(&db).await;
        assert_eq!(on_disk, named, "the parts the new version names are there");
        assert_eq!(named.len(), 3);
        let t = db.table(TABLE).unwrap();
        assert!(t.segments().iter().all(|s| s.part(1).is_some()));
        assert_eq!(stored(&db).await, a + b);
        db.close().await.unwrap();
    });
}
