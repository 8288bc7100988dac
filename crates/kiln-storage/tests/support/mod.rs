//! Helpers shared by the storage lifecycle and crash-point tests: a database
//! with one table on a temporary directory, rows whose count and sum reveal a
//! lost or duplicated row, and what is actually on disk (segment files read
//! back, manifest version files).

// Each test binary uses only part of this module.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::future::Future;
use std::ops::{Add, Range};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int64Array, RecordBatch, TimestampNanosecondArray};
use arrow::datatypes::Int64Type;
use kiln_storage::{
    ColumnDef, ColumnType, CreateTable, Db, NANOS_PER_DAY, Segment, StorageConfig, TableSnapshot,
    segment,
};
use object_store::path::Path as ObjectPath;

/// 2026-05-02T00:00:00Z: day 0 of the rows written here.
pub const DAY_NS: i64 = 1_777_680_000_000_000_000;
pub const TABLE: &str = "t";

/// Settings under which nothing happens unless a test asks for it.
pub fn config(dir: &Path) -> StorageConfig {
    let mut c = StorageConfig::for_dir(dir);
    // Closing leaves the memstore unflushed, as a crash would.
    c.flush_on_close = false;
    // No background flush or compaction during a test.
    c.background_interval = Duration::from_secs(3600);
    c.compaction_min_segments = 2;
    // Obsolete segment files go as soon as no snapshot pins them.
    c.segment_delete_delay = Duration::ZERO;
    c
}

pub async fn open(dir: &Path) -> Db {
    open_with(config(dir)).await
}

pub async fn open_with(config: StorageConfig) -> Db {
    Db::open(config).await.expect("open the database")
}

/// Creates table `t (ts TIMESTAMP, v BIGINT)`.
pub async fn create(db: &Db) {
    let col = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        nullable: false,
    };
    db.create_table(CreateTable {
        name: TABLE.into(),
        columns: vec![
            col("ts", ColumnType::Timestamp),
            col("v", ColumnType::Bigint),
        ],
        time_column: None,
        sort_key: vec![],
        if_not_exists: false,
    })
    .await
    .unwrap();
}

/// Creates cube `c` on [`TABLE`], of no dimension and `count(*)` (if
/// missing): its parts are whatever the installed builder makes.
pub async fn create_count_cube(db: &Db) {
    create_count_cube_named(db, "c").await
}

/// [`create_count_cube`] under `name`.
pub async fn create_count_cube_named(db: &Db, name: &str) {
    db.create_cube(kiln_storage::CreateCube {
        name: name.into(),
        table: TABLE.into(),
        dimensions: vec![],
        measures: vec![kiln_storage::CubeColumn {
            sql: "count(*)".into(),
            name: "n".into(),
        }],
        if_not_exists: true,
    })
    .await
    .unwrap();
}

/// How many rows and the sum of their `v`: both match only if every row is
/// there exactly once (the values written are distinct).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub rows: u64,
    pub sum: i64,
}

impl Add for Totals {
    type Output = Totals;
    fn add(self, o: Totals) -> Totals {
        Totals {
            rows: self.rows + o.rows,
            sum: self.sum + o.sum,
        }
    }
}

impl Totals {
    pub fn of(batches: &[RecordBatch]) -> Totals {
        let mut t = Totals::default();
        for b in batches {
            let v = b.column(1).as_primitive::<Int64Type>();
            t.rows += b.num_rows() as u64;
            t.sum += v.iter().map(|x| x.expect("v is not null")).sum::<i64>();
        }
        t
    }
}

/// Partition `day` of [`write`] in days since the Unix epoch.
pub fn day_of(day: i64) -> i32 {
    (DAY_NS / NANOS_PER_DAY + day) as i32
}

/// The day since the Unix epoch of instant `ns`.
pub fn day_at(ns: i64) -> i32 {
    ns.div_euclid(NANOS_PER_DAY) as i32
}

/// Writes one row per value of `vs` in partition `day` (0 is [`DAY_NS`]'s
/// day), acknowledged durably as one WAL record; returns their totals.
pub async fn write(db: &Db, day: i64, vs: Range<i64>) -> Totals {
    let t = db.table(TABLE).unwrap();
    let vs: Vec<i64> = vs.collect();
    let ts = vs.iter().map(|v| DAY_NS + day * NANOS_PER_DAY + v);
    let batch = RecordBatch::try_new(
        t.schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(ts)),
            Arc::new(Int64Array::from(vs.clone())),
        ],
    )
    .unwrap();
    assert_eq!(db.write(TABLE, &[batch]).await.unwrap(), vs.len());
    Totals {
        rows: vs.len() as u64,
        sum: vs.iter().sum(),
    }
}

/// Rows of `segments`, read back from their files.
pub async fn read_segments(db: &Db, segments: &[Arc<Segment>]) -> Totals {
    let mut t = Totals::default();
    for s in segments {
        let batches = segment::read(&Default::default(), db.store(), &s.meta.path)
            .await
            .unwrap_or_else(|e| panic!("reading segment {}: {e}", s.meta.path));
        let read = Totals::of(&batches);
        assert_eq!(read.rows, s.meta.rows, "rows of {}", s.meta.path);
        t = t + read;
    }
    t
}

/// Everything `snap` shows: its segments read from disk plus its memory.
pub async fn totals_of(db: &Db, snap: &TableSnapshot) -> Totals {
    read_segments(db, &snap.version.manifest.segments).await + Totals::of(&snap.mem_batches())
}

/// Everything the table holds now.
pub async fn stored(db: &Db) -> Totals {
    totals_of(db, &db.table(TABLE).unwrap().snapshot()).await
}

/// Rows in the current manifest's segments, read from disk.
pub async fn in_segments(db: &Db) -> Totals {
    read_segments(db, &db.table(TABLE).unwrap().segments()).await
}

/// Rows in memory, not yet flushed.
pub fn in_memory(db: &Db) -> Totals {
    Totals::of(&db.table(TABLE).unwrap().snapshot().mem_batches())
}

/// The current manifest version in memory.
pub fn version(db: &Db) -> u64 {
    db.table(TABLE).unwrap().mem.manifest().version
}

/// Segment files present on disk (any table).
pub async fn parquet_files(db: &Db) -> BTreeSet<String> {
    let all = db.store().list(&ObjectPath::from("tables")).await.unwrap();
    all.iter()
        .map(|p| p.to_string())
        .filter(|p| p.ends_with(".parquet"))
        .collect()
}

/// Segment files the current manifest names.
pub fn referenced(db: &Db) -> BTreeSet<String> {
    let t = db.table(TABLE).unwrap();
    t.segments().iter().map(|s| s.meta.path.clone()).collect()
}

/// Versions of table `t`'s manifest that have a file on disk, ascending.
pub async fn manifest_files(db: &Db) -> Vec<u64> {
    let id = db.table(TABLE).unwrap().def.id;
    let dir = ObjectPath::from(format!("tables/{id}/manifest"));
    let mut versions: Vec<u64> = db
        .store()
        .list(&dir)
        .await
        .unwrap()
        .iter()
        .map(|p| {
            let name = p.filename().unwrap();
            name.strip_suffix(".json").unwrap().parse().unwrap()
        })
        .collect();
    versions.sort();
    versions
}

/// What a reopened table must look like: exactly `expected`, every segment
/// file on disk named by the manifest and every named one on disk, and the
/// newest manifest file on disk being the version in memory.
pub async fn assert_consistent(db: &Db, expected: Totals) {
    assert_eq!(
        parquet_files(db).await,
        referenced(db),
        "segment files on disk vs named by manifest version {}",
        version(db)
    );
    assert_eq!(
        manifest_files(db).await.last().copied().unwrap_or(0),
        version(db),
        "newest manifest file vs version in memory"
    );
    assert_eq!(stored(db).await, expected);
}

/// Waits (10 s at most) until `cond` holds: obsolete files are deleted by a
/// background task.
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
