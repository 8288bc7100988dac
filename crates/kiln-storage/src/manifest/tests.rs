//! Manifest versions on their own: each commit is the next version and
//! replaces the previous file, older versions in memory keep their segment
//! list, a restart loads the newest file even when an older one was left
//! behind, a damaged file is an error rather than an empty table, and of
//! two writers of one version exactly one commits.

use std::time::Duration;

use bytes::Bytes;

use super::*;

const TABLE: u64 = 7;

fn meta(name: &str, rows: u64) -> SegmentMeta {
    SegmentMeta {
        path: format!("tables/{TABLE}/2026-05-02/{name}.parquet"),
        day: 20_575,
        rows,
        bytes: 100 * rows,
        min_time: 0,
        max_time: 1,
        columns: vec![ColumnStats::default()],
    }
}

fn names(m: &Manifest) -> Vec<String> {
    let name = |s: &Arc<Segment>| s.meta.path.rsplit('/').next().unwrap().to_string();
    m.segments.iter().map(name).collect()
}

async fn versions_on_disk(store: &Store) -> Vec<u64> {
    let files = store.list(&manifest_dir(TABLE)).await.unwrap();
    let mut v: Vec<u64> = files.iter().filter_map(parse_version).collect();
    v.sort();
    v
}

fn setup() -> (tempfile::TempDir, Store, Reaper) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::local(tmp.path().to_path_buf()).unwrap();
    let reaper = Reaper::start(store.clone(), Duration::from_secs(3600));
    (tmp, store, reaper)
}

#[tokio::test]
async fn each_commit_is_the_next_version_and_replaces_the_previous_file() {
    let (_tmp, store, reaper) = setup();
    let empty = Manifest::load(&store, TABLE, &reaper).await.unwrap();
    assert_eq!((empty.version, empty.flushed_seq), (0, 0));
    assert!(empty.segments.is_empty());

    let a = Segment::new(meta("a", 10), &reaper);
    let b = Segment::new(meta("b", 20), &reaper);
    let v1 = empty.next(vec![a.clone(), b], &[], 5);
    v1.persist(&store, TABLE).await.unwrap();
    assert_eq!(versions_on_disk(&store).await, [1]);

    let c = Segment::new(meta("c", 30), &reaper);
    let v2 = v1.next(vec![c], &[a], v1.flushed_seq);
    assert_eq!((v2.version, v2.flushed_seq), (2, 5));
    assert_eq!(names(&v2), ["b.parquet", "c.parquet"]);
    // The older version, as a pinned snapshot holds it, is unchanged.
    assert_eq!(names(&v1), ["a.parquet", "b.parquet"]);
    v2.persist(&store, TABLE).await.unwrap();
    assert_eq!(versions_on_disk(&store).await, [2], "version 1 is deleted");

    let loaded = Manifest::load(&store, TABLE, &reaper).await.unwrap();
    assert_eq!((loaded.version, loaded.flushed_seq), (2, 5));
    let metas = |m: &Manifest| {
        m.segments
            .iter()
            .map(|s| s.meta.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(metas(&loaded), metas(&v2));
}

#[tokio::test]
async fn load_takes_the_newest_version_left_on_disk() {
    let (_tmp, store, reaper) = setup();
    // A crash between writing a version and deleting the older ones leaves
    // both; persisting 10 then 9 leaves both too: 9 is written, then
    // refused as shadowed by 10 (a writer more than one version behind).
    let v10 = Manifest {
        version: 10,
        flushed_seq: 40,
        segments: vec![Segment::new(meta("new", 4), &reaper)],
    };
    let v9 = Manifest {
        version: 9,
        flushed_seq: 30,
        segments: vec![Segment::new(meta("old", 3), &reaper)],
    };
    v10.persist(&store, TABLE).await.unwrap();
    let err = v9.persist(&store, TABLE).await.unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::CommitConflict, "{err}");
    assert_eq!(versions_on_disk(&store).await, [9, 10]);

    let loaded = Manifest::load(&store, TABLE, &reaper).await.unwrap();
    assert_eq!((loaded.version, loaded.flushed_seq), (10, 40));
    assert_eq!(names(&loaded), ["new.parquet"]);
    // The next commit removes both.
    loaded
        .next(vec![], &[], 40)
        .persist(&store, TABLE)
        .await
        .unwrap();
    assert_eq!(versions_on_disk(&store).await, [11]);
}

#[tokio::test]
async fn a_damaged_manifest_is_an_error_not_an_empty_table() {
    let (_tmp, store, reaper) = setup();
    let path = manifest_path(TABLE, 3);
    store
        .put_durable(&path, Bytes::from_static(b"{\"table_id\": 7, \"vers"))
        .await
        .unwrap();
    let err = Manifest::load(&store, TABLE, &reaper).await.unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { what: "manifest", path: p, .. } if *p == path.to_string()),
        "{err}"
    );
}

#[tokio::test]
async fn of_two_writers_of_one_version_exactly_one_commits() {
    let (_tmp, store, reaper) = setup();
    let base = Manifest::default();
    let mine = base.next(vec![Segment::new(meta("mine", 1), &reaper)], &[], 1);
    let theirs = base.next(vec![Segment::new(meta("theirs", 2), &reaper)], &[], 2);
    mine.persist(&store, TABLE).await.unwrap();
    let err = theirs.persist(&store, TABLE).await.unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::CommitConflict, "{err}");
    assert!(err.to_string().contains("version 1 of table 7"), "{err}");
    let loaded = Manifest::load(&store, TABLE, &reaper).await.unwrap();
    assert_eq!(
        names(&loaded),
        ["mine.parquet"],
        "the winner's version stands"
    );
    // Persisting the winner's version again (a retried request) succeeds.
    mine.persist(&store, TABLE).await.unwrap();
}
