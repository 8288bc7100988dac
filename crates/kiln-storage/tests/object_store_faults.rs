//! A database on an object store that fails (a wrapper in front of an
//! in-memory store returns errors on demand, as S3 does with 503 Slow Down
//! or an outage once the client's retries are spent): writes keep being
//! acknowledged from the WAL, flushes fail and say so, nothing acknowledged
//! is lost, and flushing resumes by itself when the store recovers. Reads
//! that fail name the object. Writes that outrun the failing flushes wait
//! first, then are refused whole once memory is full.

mod support;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use kiln_storage::{Db, Store, SystemClock};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use support::*;

/// A store that fails every request while `down` is set, every write to
/// a path holding `refuse` while that is set, and loses the reply to a
/// manifest write (which lands) while `lose_commit_replies` is.
#[derive(Debug, Default)]
struct Faulty {
    inner: Arc<InMemory>,
    down: Arc<AtomicBool>,
    refuse: std::sync::Mutex<Option<String>>,
    lose_commit_replies: Arc<AtomicBool>,
}

impl std::fmt::Display for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Faulty")
    }
}

impl Faulty {
    fn check(&self, location: &Path) -> Result<()> {
        match self.down.load(Ordering::SeqCst) {
            false => Ok(()),
            true => Err(object_store::Error::Generic {
                store: "faulty",
                source: format!("503 Slow Down ({location})").into(),
            }),
        }
    }
}

#[async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
        self.check(l)?;
        if let Some(refused) = self.refuse.lock().unwrap().as_deref()
            && l.as_ref().contains(refused)
        {
            return Err(object_store::Error::Generic {
                store: "faulty",
                source: format!("403 Forbidden ({l})").into(),
            });
        }
        let put = self.inner.put_opts(l, p, o).await?;
        if l.as_ref().contains("/manifest/") && self.lose_commit_replies.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "faulty",
                source: format!("connection reset before the reply ({l})").into(),
            });
        }
        Ok(put)
    }
    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.check(l)?;
        self.inner.put_multipart_opts(l, o).await
    }
    async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
        self.check(l)?;
        self.inner.get_opts(l, o).await
    }
    async fn get_ranges(&self, l: &Path, r: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.check(l)?;
        self.inner.get_ranges(l, r).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        match self.check(&Path::from("")) {
            Ok(()) => self.inner.delete_stream(locations),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.check(&Path::from("")) {
            Ok(()) => self.inner.list(prefix),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.check(&Path::from(""))?;
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> Result<()> {
        self.check(to)?;
        self.inner.copy_opts(from, to, o).await
    }
}

async fn open_on(dir: &std::path::Path, backend: Arc<Faulty>) -> Db {
    let mut c = config(dir);
    c.background_interval = Duration::from_millis(50);
    c.flush_age = Duration::from_millis(100);
    on_store(c, backend).await
}

/// A database with config `c` over `backend` (with no background work
/// under the tests' `config`).
async fn on_store(c: kiln_storage::StorageConfig, backend: Arc<Faulty>) -> Db {
    let store = Store::remote(backend, "faulty://bucket".into(), &c)
        .await
        .unwrap();
    Db::open_on(c, Arc::new(SystemClock), Some(store))
        .await
        .unwrap()
}

/// The rows of the current segments, read through the store's cache.
async fn through_cache(db: &Db) -> Totals {
    let mut t = Totals::default();
    for s in db.table(TABLE).unwrap().segments() {
        let bytes = db.store().get(&Path::from(s.meta.path.as_str())).await;
        let bytes = bytes.unwrap_or_else(|e| panic!("{}: {e}", s.meta.path));
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<_> = reader.map(Result::unwrap).collect();
        t = t + Totals::of(&batches);
    }
    t
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_delays_flushes_but_loses_nothing_and_heals_by_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = Arc::new(Faulty::default());
    let down = backend.down.clone();
    let db = open_on(tmp.path(), backend.clone()).await;
    create(&db).await;
    let mut expected = write(&db, 0, 0..100).await;
    wait_for("the first flush", || version(&db) >= 1).await;

    // The store goes down: writes are still acknowledged, and every row is
    // still readable: the flushed ones from the cache, the rest in memory.
    down.store(true, Ordering::SeqCst);
    expected = expected + write(&db, 1, 100..300).await;
    assert_eq!(through_cache(&db).await + in_memory(&db), expected);
    wait_for("the failed flush to be reported", || {
        db.degraded().is_some()
    })
    .await;
    let why = db.degraded().unwrap();
    assert!(why.contains("flushes failing"), "{why}");
    assert!(why.contains("503 Slow Down"), "{why}");
    assert_eq!(version(&db), 1, "nothing was committed");
    let err = db.flush_all().await.unwrap_err();
    assert_eq!(err.kind(), kiln_storage::ErrorKind::Io, "{err}");

    // A read the cache cannot serve names the object it needed.
    let seg = db.table(TABLE).unwrap().segments()[0].meta.path.clone();
    let cold = Store::remote(
        backend.clone(),
        "faulty://bucket".into(),
        &config(&tmp.path().join("cold")),
    )
    .await
    .unwrap();
    let err = cold.get(&Path::from(seg.as_str())).await.unwrap_err();
    assert!(err.to_string().contains(&seg), "{err}");

    // It comes back: flushing resumes without help, and everything is there.
    down.store(false, Ordering::SeqCst);
    wait_for("flushes to resume", || {
        db.degraded().is_none() && in_memory(&db) == Totals::default()
    })
    .await;
    assert_eq!(in_segments(&db).await, expected);
    db.close().await.unwrap();

    // Reopened on the same bucket: every acknowledged row, exactly once.
    let db = open_on(tmp.path(), backend).await;
    assert_consistent(&db, expected).await;
    assert_eq!(stored(&db).await, expected);
}

/// A flush whose segment of one day fails commits nothing and leaves no
/// file behind: the other days' segments, written beside it, go too. The
/// next flush writes every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_with_one_failed_segment_leaves_no_file_and_the_next_writes_all() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = Arc::new(Faulty::default());
    let mut c = config(tmp.path());
    c.segment_pack_rows = 1;
    let db = on_store(c, backend.clone()).await;
    create(&db).await;
    let mut expected = Totals::default();
    for day in 0..4 {
        expected = expected + write(&db, day, day * 10..day * 10 + 10).await;
    }
    let failing = kiln_storage::schema::day_string(day_of(1));
    *backend.refuse.lock().unwrap() = Some(format!("/{failing}/"));
    let err = db.flush_all().await.unwrap_err();
    assert!(err.to_string().contains(&failing), "{err}");
    assert_eq!(version(&db), 0, "nothing was committed");
    assert_eq!(in_memory(&db), expected);
    let files = || async {
        let all: Vec<_> = backend.inner.list(None).collect().await;
        all.into_iter()
            .map(|m| m.unwrap().location.to_string())
            .filter(|p| p.ends_with(".parquet"))
            .collect::<Vec<_>>()
    };
    for _ in 0..100 {
        if files().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(files().await, Vec::<String>::new());
    *backend.refuse.lock().unwrap() = None;
    db.flush_all().await.unwrap();
    assert_eq!(in_segments(&db).await, expected);
    assert_eq!(files().await.len(), 4);
    db.close().await.unwrap();
}

/// A commit whose reply is lost may have landed: the next flush settles it
/// by committing the same version again (the store holds those bytes, so
/// that is a success), rather than writing a different version of the same
/// number, which would collide with it forever, or the same rows twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_reply_is_lost_is_settled_not_redone() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = Arc::new(Faulty::default());
    let db = on_store(config(tmp.path()), backend.clone()).await;
    create(&db).await;
    let a = write(&db, 0, 0..50).await;
    db.flush_all().await.unwrap();
    assert_eq!(version(&db), 1);

    let b = write(&db, 1, 50..120).await;
    backend.lose_commit_replies.store(true, Ordering::SeqCst);
    let err = db.flush_all().await.unwrap_err();
    assert!(err.to_string().contains("connection reset"), "{err}");
    assert_eq!((version(&db), in_memory(&db)), (1, b), "not published yet");
    // The next flush finds version 2 stored with its bytes: settled. Its
    // own version 3 loses its reply in turn and waits.
    let c_rows = write(&db, 2, 120..130).await;
    db.flush_all().await.unwrap_err();
    assert_eq!((version(&db), in_memory(&db)), (2, c_rows));

    backend.lose_commit_replies.store(false, Ordering::SeqCst);
    db.flush_all().await.unwrap();
    assert_eq!(version(&db), 3, "version 3 settled, nothing redone");
    assert_eq!(in_memory(&db), Totals::default());
    assert_eq!(in_segments(&db).await, a + b + c_rows, "each row once");
    db.close().await.unwrap();

    let db = open_on(tmp.path(), backend).await;
    assert_consistent(&db, a + b + c_rows).await;
}

/// A writer two versions behind could create a version the newest writer
/// already deleted; readers load the highest version, so that commit must
/// be refused, and its rows stay in its WAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_two_versions_behind_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = Arc::new(Faulty::default());
    let open = |dir: std::path::PathBuf, backend: Arc<Faulty>| on_store(config(&dir), backend);
    let first = open(tmp.path().join("a"), backend.clone()).await;
    create(&first).await;
    let a = write(&first, 0, 0..10).await;
    first.flush_all().await.unwrap();
    let late = open(tmp.path().join("b"), backend.clone()).await;
    assert_eq!(version(&late), 1);

    let more = write(&first, 0, 10..20).await + write(&first, 1, 20..30).await;
    first.flush_all().await.unwrap();
    let more = more + write(&first, 2, 30..40).await;
    first.flush_all().await.unwrap();
    assert_eq!(version(&first), 3);

    write(&late, 3, 40..50).await;
    let err = late.flush_all().await.unwrap_err();
    assert_eq!(err.kind(), kiln_storage::ErrorKind::CommitConflict, "{err}");
    assert_eq!(version(&late), 1, "nothing published");
    late.close().await.ok();
    first.close().await.unwrap();

    let db = open(tmp.path().join("c"), backend).await;
    assert_eq!(version(&db), 3);
    assert_eq!(stored(&db).await, a + more);
}

/// While flushes fail, writes to a table past its pacing threshold wait
/// first, longer the more it holds, and once it holds more than
/// `--memstore-max-bytes` a write waits for room and is then refused
/// whole. When the store takes segments again, a flush makes room and
/// writes go straight in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outrunning_failing_flushes_wait_then_are_refused_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = Arc::new(Faulty::default());
    let db = on_store(config(tmp.path()), backend.clone()).await;
    create(&db).await;
    let mut want = write(&db, 0, 0..1000).await;
    let one = db.table(TABLE).unwrap().mem.bytes();
    db.close().await.unwrap();

    // Segments are refused from now on; manifests and the WAL's rows
    // still read. Reopened with background flushes and a cap of two and
    // a half writes: writes slow from half of it.
    *backend.refuse.lock().unwrap() = Some(".parquet".into());
    let mut c = config(tmp.path());
    c.background_interval = Duration::from_millis(50);
    c.flush_age = Duration::from_millis(100);
    c.memstore_max_bytes = kiln_storage::ByteSize::b(one as u64 * 5 / 2);
    let (flush, cap) = (c.flush_bytes.as_usize(), c.memstore_max_bytes.as_usize());
    let db = on_store(c, backend.clone()).await;
    wait_for("a failed flush", || db.degraded().is_some()).await;
    let held = || db.table(TABLE).unwrap().mem.bytes();
    let m = db.metrics();
    want = want + write(&db, 0, 1000..2000).await;
    assert_eq!(
        m.writes_paced.load(Ordering::Relaxed),
        0,
        "below the threshold"
    );

    // Past the threshold: the write waits, then is written.
    let wait = kiln_storage::pace::delay(held(), flush, cap);
    assert!(wait > Duration::ZERO, "{} of {cap}", held());
    let started = Instant::now();
    want = want + write(&db, 0, 2000..3000).await;
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    assert_eq!(m.writes_paced.load(Ordering::Relaxed), 1);

    // Past the cap: the longest wait, then the wait for room, then a
    // refusal, and none of its rows applied.
    assert!(held() > cap, "{} of {cap}", held());
    let batch = {
        let t = db.table(TABLE).unwrap();
        let ts = (3000..3010).map(|v| DAY_NS + v);
        arrow::array::RecordBatch::try_new(
            t.schema.clone(),
            vec![
                Arc::new(arrow::array::TimestampNanosecondArray::from_iter_values(ts)),
                Arc::new(arrow::array::Int64Array::from_iter_values(3000..3010)),
            ],
        )
        .unwrap()
    };
    let started = Instant::now();
    let err = db.write(TABLE, &[batch]).await.unwrap_err();
    assert_eq!(err.kind(), kiln_storage::ErrorKind::Backpressure, "{err}");
    let floor = kiln_storage::pace::MAX_DELAY + kiln_storage::MEMSTORE_WAIT;
    assert!(started.elapsed() >= floor, "{:?}", started.elapsed());
    assert_eq!(m.writes_paced.load(Ordering::Relaxed), 2);
    assert_eq!(in_memory(&db), want, "nothing of the refused write");

    // Segments are taken again: a flush makes room, writes go straight in.
    *backend.refuse.lock().unwrap() = None;
    db.flush_all().await.unwrap();
    assert_eq!(through_cache(&db).await + in_memory(&db), want);
    write(&db, 0, 3000..3010).await;
    assert_eq!(m.writes_paced.load(Ordering::Relaxed), 2);
}
