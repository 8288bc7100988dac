//! Query answers are the same from memory, after a flush, after compaction,
//! after a restart and from the segment cache, and equal to a computation made here in plain Rust
//! from the rows the test generated.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, AsArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow::datatypes::{Float64Type, Int64Type};
use kiln_query::cache::segment::PREWARM_EXPANSION;
use kiln_query::{Engine, Output, QueryConfig, SegmentCache};
use kiln_storage::{ByteSize, Db, NANOS_PER_DAY, StorageConfig};
use rand::{Rng, SeedableRng};

const DAY0: i64 = 20_500 * NANOS_PER_DAY;

#[derive(Clone)]
struct Row {
    ts: i64,
    user: i64,
    region: Option<String>,
    amount: Option<f64>,
}

fn gen_rows(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<Row> {
    let regions = ["eu", "us", "ap", "sa"];
    (0..n)
        .map(|_| Row {
            ts: DAY0 + rng.random_range(0..5 * NANOS_PER_DAY),
            user: rng.random_range(0..500),
            region: rng
                .random_bool(0.9)
                .then(|| regions[rng.random_range(0..4)].to_string()),
            amount: rng
                .random_bool(0.7)
                .then(|| (rng.random_range(0..100_000) as f64) / 100.0),
        })
        .collect()
}

fn batch(db: &Db, rows: &[Row]) -> RecordBatch {
    let schema = db.table("sales").unwrap().schema.clone();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(
                rows.iter().map(|r| r.ts).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.user).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.region.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.amount).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

/// (region, rows, sum of amounts in cents, distinct users) for rows in [lo, hi).
type Answer = Vec<(String, i64, i64, i64)>;

fn expected(rows: &[Row], lo: i64, hi: i64) -> Answer {
    let mut m: BTreeMap<String, (i64, i64, std::collections::BTreeSet<i64>)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.ts >= lo && r.ts < hi) {
        let e = m
            .entry(r.region.clone().unwrap_or_else(|| "NULL".into()))
            .or_default();
        e.0 += 1;
        e.1 += r.amount.map_or(0, |a| (a * 100.0).round() as i64);
        e.2.insert(r.user);
    }
    m.into_iter()
        .map(|(k, (n, s, u))| (k, n, s, u.len() as i64))
        .collect()
}

async fn actual(engine: &Engine, lo: i64, hi: i64) -> Answer {
    let sql = format!(
        "SELECT coalesce(region, 'NULL') AS r, count(*), CAST(round(coalesce(sum(amount), 0) * 100) AS BIGINT), count(DISTINCT user_id) \
         FROM sales WHERE ts >= to_timestamp_nanos({lo}) AND ts < to_timestamp_nanos({hi}) GROUP BY r ORDER BY r"
    );
    let mut out = engine.execute(&sql).await.unwrap();
    let Some(Output::Rows { batches, .. }) = out.pop() else {
        panic!("no rows")
    };
    let mut res = vec![];
    for b in batches {
        let r = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
        let r = r.as_string::<i32>();
        let n = b.column(1).as_primitive::<Int64Type>();
        let s = b.column(2).as_primitive::<Int64Type>();
        let u = b.column(3).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            res.push((r.value(i).to_string(), n.value(i), s.value(i), u.value(i)));
        }
    }
    res
}

async fn rows_of(engine: &Engine, sql: &str) -> Vec<RecordBatch> {
    match engine.execute(sql).await.unwrap().pop() {
        Some(Output::Rows { batches, .. }) => batches,
        _ => panic!("no rows: {sql}"),
    }
}

async fn check(engine: &Engine, rows: &[Row], stage: &str) {
    for (lo, hi) in [
        (i64::MIN / 2, i64::MAX / 2),
        (DAY0 + NANOS_PER_DAY, DAY0 + 3 * NANOS_PER_DAY),
        (DAY0 + 7_200_000_000_000, DAY0 + 9_000_000_000_000),
    ] {
        let want = expected(rows, lo, hi);
        let got = actual(engine, lo, hi).await;
        assert_eq!(got, want, "{stage}: range [{lo}, {hi})");
    }
    // A filter on nullable columns, and one cut by a LIMIT: the scan
    // applies them itself (pushed down as exact), after pruning.
    let (lo, hi) = (DAY0 + NANOS_PER_DAY / 2, DAY0 + 4 * NANOS_PER_DAY);
    let sql = format!(
        "SELECT count(*), count(DISTINCT user_id) FROM sales WHERE region = 'eu' AND amount > 500 \
         AND ts >= to_timestamp_nanos({lo}) AND ts < to_timestamp_nanos({hi})"
    );
    let hits: Vec<&Row> = rows
        .iter()
        .filter(|r| r.region.as_deref() == Some("eu") && r.amount.is_some_and(|a| a > 500.0))
        .filter(|r| r.ts >= lo && r.ts < hi)
        .collect();
    let users: std::collections::BTreeSet<i64> = hits.iter().map(|r| r.user).collect();
    let b = &rows_of(engine, &sql).await[0];
    let got = (
        b.column(0).as_primitive::<Int64Type>().value(0),
        b.column(1).as_primitive::<Int64Type>().value(0),
    );
    assert_eq!(
        got,
        (hits.len() as i64, users.len() as i64),
        "{stage}: {sql}"
    );
    assert!(!hits.is_empty());
    let sql = "SELECT amount FROM sales WHERE amount > 990 LIMIT 7";
    let got: Vec<f64> = rows_of(engine, sql)
        .await
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Float64Type>().values().to_vec())
        .collect();
    let over = rows
        .iter()
        .filter(|r| r.amount.is_some_and(|a| a > 990.0))
        .count();
    assert_eq!(got.len(), over.min(7), "{stage}: {sql}");
    assert!(got.iter().all(|a| *a > 990.0), "{stage}: {got:?}");
    // Sum of amounts as doubles, compared with a tolerance.
    let mut out = engine
        .execute("SELECT sum(amount), count(amount) FROM sales")
        .await
        .unwrap();
    let Some(Output::Rows { batches, .. }) = out.pop() else {
        panic!()
    };
    let s = batches[0].column(0).as_primitive::<Float64Type>().value(0);
    let want: f64 = rows.iter().filter_map(|r| r.amount).sum();
    assert!(
        (s - want).abs() < 1e-6 * want.max(1.0),
        "{stage}: {s} vs {want}"
    );
    assert_eq!(
        batches[0].column(1).as_primitive::<Int64Type>().value(0),
        rows.iter().filter(|r| r.amount.is_some()).count() as i64
    );
    assert!(!batches[0].column(0).is_null(0));
}

async fn open(dir: &std::path::Path) -> Engine {
    Engine::new(Db::open(config(dir)).await.unwrap()).unwrap()
}

fn config(dir: &std::path::Path) -> StorageConfig {
    let mut cfg = StorageConfig::for_dir(dir);
    cfg.memstore_freeze_bytes = ByteSize::kib(16); // many frozen batches
    cfg.compaction_min_segments = 2;
    cfg.compaction = false; // the test compacts explicitly
    kiln_storage::testing::use_test_store(&mut cfg);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_answers_from_memory_segments_compaction_and_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let engine = open(tmp.path()).await;
    engine
        .execute("CREATE TABLE sales (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, region VARCHAR, amount DOUBLE) WITH (sort_key = 'region')")
        .await
        .unwrap();
    let db = engine.db().clone();
    let mut all = vec![];
    for round in 0..3 {
        for _ in 0..20 {
            let rows = gen_rows(&mut rng, 150);
            db.write("sales", &[batch(&db, &rows)]).await.unwrap();
            all.extend(rows);
        }
        check(&engine, &all, &format!("round {round}, in memory")).await;
        db.flush_all().await.unwrap();
        check(&engine, &all, &format!("round {round}, flushed")).await;
        // Some rows in memory on top of segments.
        let rows = gen_rows(&mut rng, 300);
        db.write("sales", &[batch(&db, &rows)]).await.unwrap();
        all.extend(rows);
        check(&engine, &all, &format!("round {round}, mixed")).await;
    }
    db.flush_all().await.unwrap();
    let before = db.table("sales").unwrap().segments().len();
    check(&engine, &all, "flushed, before compaction").await;
    wait_for_entries(&engine.caches().segments, before).await;
    let merged = db.compact_all().await.unwrap();
    let after = db.table("sales").unwrap().segments().len();
    assert!(
        merged > 0 && after < before,
        "compaction merged {merged}: {before} -> {after} segments"
    );
    check(&engine, &all, "compacted").await;
    // The merged segments are decoded; the entries of the ones compaction
    // replaced are dropped then, not left to age out.
    wait_for_entries(&engine.caches().segments, after).await;

    db.close().await.unwrap();
    drop(engine);
    let engine = open(tmp.path()).await;
    check(&engine, &all, "restarted").await;
    // The queries above queued every segment for decoding; once all are
    // held, the same answers come from the segment cache.
    let segments = engine.db().table("sales").unwrap().segments().len();
    wait_for_entries(&engine.caches().segments, segments).await;
    check(&engine, &all, "from the segment cache").await;
    // Obsolete segment files were deleted; only live ones remain stored.
    let live: usize = engine.db().table("sales").unwrap().segments().len();
    let stored = engine.db().store().list(&"tables".into()).await.unwrap();
    let on_disk = stored
        .iter()
        .filter(|p| p.as_ref().ends_with(".parquet"))
        .count();
    assert_eq!(on_disk, live);
}

/// After a restart, the newest segments that fit are decoded before any
/// query asks for them, newest day first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_decodes_the_newest_segments_that_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = config(tmp.path());
    cfg.segment_pack_rows = 0; // a segment per day
    let engine = Engine::new(Db::open(cfg).await.unwrap()).unwrap();
    engine
        .execute("CREATE TABLE sales (ts TIMESTAMP NOT NULL, user_id BIGINT NOT NULL, region VARCHAR, amount DOUBLE)")
        .await
        .unwrap();
    let db = engine.db().clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let rows = gen_rows(&mut rng, 3_000);
    db.write("sales", &[batch(&db, &rows)]).await.unwrap();
    db.flush_all().await.unwrap();
    let mut segments = db.table("sales").unwrap().segments();
    assert!(segments.len() >= 3, "rows span several days");
    segments.sort_by_key(|s| std::cmp::Reverse(s.meta.max_time));
    let newest = segments[0].meta.clone();
    db.close().await.unwrap();
    drop(engine);

    // Room for the newest segment only, by the prewarm's estimate.
    let config = QueryConfig {
        segment_cache_bytes: ByteSize::b(newest.bytes * PREWARM_EXPANSION),
        ..QueryConfig::default()
    };
    let mut storage = StorageConfig::for_dir(tmp.path());
    kiln_storage::testing::use_test_store(&mut storage);
    let db = Db::open(storage).await.unwrap();
    let engine = Engine::with_config(db, &config).unwrap();
    let cache = &engine.caches().segments;
    assert_eq!(cache.entries(), 0);
    assert_eq!(cache.prewarm(engine.db()), 1);
    wait_for_entries(cache, 1).await;
    assert!(cache.get(&newest.path).is_some(), "newest segment decoded");

    // With room for all of them, every segment is queued and decoded.
    let db = engine.db();
    let all = Arc::new(SegmentCache::new(db.store().clone(), 1 << 30));
    let n = segments.len();
    assert_eq!(all.prewarm(db), n);
    wait_for_entries(&all, n).await;
}

/// Waits (up to 5 s) until `cache` holds `n` decoded segments.
async fn wait_for_entries(cache: &SegmentCache, n: usize) {
    for _ in 0..500 {
        if cache.entries() == n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(cache.entries(), n, "segments decoded into the cache");
}
