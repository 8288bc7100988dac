//! `Db::write_with`: `Ack::Memory` writes and idempotency keys, through
//! close and reopen, flush and WAL trimming, and key expiry on an injected
//! clock. (Crashes are covered end to end with SIGKILL in
//! `crates/kiln/tests/http_write.rs`.)

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch, TimestampNanosecondArray};
use kiln_storage::{
    Ack, ColumnDef, ColumnType, CreateTable, Db, Error, IdempotencyKey, ManualClock, StorageConfig,
    WriteOptions, Written,
};

const DAY_NS: i64 = 1_777_680_000_000_000_000; // 2026-05-02T00:00:00Z

fn config(dir: &Path) -> StorageConfig {
    let mut c = StorageConfig::for_dir(dir);
    c.flush_on_close = false;
    c.background_interval = Duration::from_secs(3600);
    c
}

async fn open(dir: &Path, clock: &Arc<ManualClock>) -> Db {
    Db::open_with_clock(config(dir), clock.clone())
        .await
        .unwrap()
}

async fn create(db: &Db) {
    let col = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        nullable: false,
    };
    db.create_table(CreateTable {
        name: "t".into(),
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

fn rows(db: &Db, vs: &[i64]) -> RecordBatch {
    let t = db.table("t").unwrap();
    let ts: Vec<i64> = vs.iter().map(|v| DAY_NS + v).collect();
    RecordBatch::try_new(
        t.schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from(ts)),
            Arc::new(Int64Array::from(vs.to_vec())),
        ],
    )
    .unwrap()
}

/// Rows in the table: segments plus memory.
fn count(db: &Db) -> u64 {
    let snap = db.table("t").unwrap().snapshot();
    let seg: u64 = snap
        .version
        .manifest
        .segments
        .iter()
        .map(|s| s.meta.rows)
        .sum();
    let mem: usize = snap.mem_batches().iter().map(|b| b.num_rows()).sum();
    seg + mem as u64
}

fn keyed(key: &str, body: &str, ack: Ack) -> WriteOptions {
    WriteOptions {
        ack,
        idempotency_key: Some(IdempotencyKey::new(key, &[b"text/csv", body.as_bytes()]).unwrap()),
    }
}

fn fresh(rows: usize, ack: Ack) -> Written {
    Written {
        rows,
        ack,
        replayed: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_ack_validates_first_and_survives_close() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(DAY_NS);
    let db = open(tmp.path(), &clock).await;
    create(&db).await;
    let mem = WriteOptions {
        ack: Ack::Memory,
        idempotency_key: None,
    };
    let w = db
        .write_with("t", &[rows(&db, &[1, 2])], mem.clone())
        .await
        .unwrap();
    assert_eq!(w, fresh(2, Ack::Memory));
    // Validation errors are synchronous even without waiting for the WAL.
    let t = db.table("t").unwrap();
    let bad = RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, false),
        ])),
        vec![Arc::new(Int64Array::from(vec![3]))],
    )
    .unwrap();
    let err = db.write_with("t", &[bad], mem.clone()).await.unwrap_err();
    assert!(matches!(err, Error::NotNull { row: 1, .. }), "{err}");
    let err = db
        .write_with("nope", &[rows(&db, &[1])], mem.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TableNotFound(_)), "{err}");
    drop(t);
    // A durable write queued behind the memory one: both are applied after it.
    db.write("t", &[rows(&db, &[3])]).await.unwrap();
    assert_eq!(count(&db), 3);
    for i in 0..20 {
        db.write_with("t", &[rows(&db, &[10 + i])], mem.clone())
            .await
            .unwrap();
    }
    db.close().await.unwrap();

    let db = open(tmp.path(), &clock).await;
    assert_eq!(count(&db), 23, "close syncs what ack=memory queued");
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_writes_once_across_reopen_flush_and_wal_trim() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(DAY_NS);
    let db = open(tmp.path(), &clock).await;
    create(&db).await;
    let w = db
        .write_with("t", &[rows(&db, &[1, 2])], keyed("k1", "a", Ack::Durable))
        .await;
    assert_eq!(w.unwrap(), fresh(2, Ack::Durable));
    let w = db
        .write_with("t", &[rows(&db, &[1, 2])], keyed("k1", "a", Ack::Memory))
        .await;
    assert_eq!(
        w.unwrap(),
        Written {
            rows: 2,
            ack: Ack::Durable,
            replayed: true
        }
    );
    let err = db
        .write_with("t", &[rows(&db, &[1, 2])], keyed("k1", "b", Ack::Durable))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::IdempotencyConflict { .. }), "{err}");
    let w = db
        .write_with("t", &[rows(&db, &[3])], keyed("k2", "c", Ack::Memory))
        .await;
    assert_eq!(w.unwrap(), fresh(1, Ack::Memory));
    // ack=memory: visible within one group commit, not necessarily yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while count(&db) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "ack=memory row never applied"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(count(&db), 3);
    db.close().await.unwrap();

    // Reopen: the keys come back from the WAL.
    let mut cfg = config(tmp.path());
    cfg.wal_segment_bytes = kiln_storage::ByteSize::b(1); // a new WAL file per group: flushed ones can be deleted
    let db = Db::open_with_clock(cfg.clone(), clock.clone())
        .await
        .unwrap();
    let again = db
        .write_with("t", &[rows(&db, &[3])], keyed("k2", "c", Ack::Durable))
        .await;
    assert!(again.unwrap().replayed);
    let w = db
        .write_with("t", &[rows(&db, &[4])], keyed("k3", "d", Ack::Durable))
        .await;
    assert_eq!(w.unwrap(), fresh(1, Ack::Durable));
    // Flush everything and delete the WAL files: the keys are saved first.
    db.flush_all().await.unwrap();
    let wal_records = std::fs::read_dir(tmp.path().join("wal"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().metadata().unwrap().len() > 0)
        .count();
    assert_eq!(wal_records, 0, "every WAL file holding records was trimmed");
    assert!(tmp.path().join("idempotency.json").exists());
    db.close().await.unwrap();

    let db = Db::open_with_clock(cfg, clock.clone()).await.unwrap();
    for (k, body, v) in [("k1", "a", 1), ("k2", "c", 3), ("k3", "d", 4)] {
        let w = db
            .write_with("t", &[rows(&db, &[v])], keyed(k, body, Ack::Durable))
            .await;
        assert!(w.unwrap().replayed, "{k} forgotten after the WAL trim");
    }
    assert_eq!(count(&db), 4);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_after_the_window_even_across_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(DAY_NS);
    let db = open(tmp.path(), &clock).await;
    create(&db).await;
    db.write_with("t", &[rows(&db, &[1])], keyed("k", "a", Ack::Durable))
        .await
        .unwrap();
    db.close().await.unwrap();
    clock.advance(Duration::from_secs(599).as_nanos() as i64);
    let db = open(tmp.path(), &clock).await;
    let w = db
        .write_with("t", &[rows(&db, &[1])], keyed("k", "a", Ack::Durable))
        .await;
    assert!(w.unwrap().replayed);
    db.close().await.unwrap();
    clock.advance(Duration::from_secs(1).as_nanos() as i64);
    let db = open(tmp.path(), &clock).await;
    let w = db
        .write_with("t", &[rows(&db, &[1])], keyed("k", "a", Ack::Durable))
        .await;
    assert_eq!(
        w.unwrap(),
        fresh(1, Ack::Durable),
        "the 10-minute window is over"
    );
    assert_eq!(count(&db), 2);
    db.close().await.unwrap();
}
