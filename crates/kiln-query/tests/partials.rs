//! Partial aggregates kept per held segment (`kiln_query::partials`): a
//! prepared statement run with a generic plan answers the same as the
//! statement planned with its values (which never uses kept partials),
//! whatever the values, ranges and rows written since; and repeated or
//! overlapping ranges reuse what earlier runs computed.

use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::DataType;
use arrow::util::pretty::pretty_format_batches;
use datafusion::common::ScalarValue;
use kiln_query::{Engine, Origin, Output, PlanCacheMode, QueryConfig};
use kiln_storage::{ByteSize, Db, StorageConfig};
use rand::{Rng, SeedableRng};

const DAY_NS: i64 = 86_400 * 1_000_000_000;
/// 2026-11-01 00:00:00 UTC.
const START_NS: i64 = 1_793_491_200 * 1_000_000_000;
const DAYS: i64 = 4;
const HOUR_NS: i64 = 3_600 * 1_000_000_000;

const QUERIES: &[&str] = &[
    // Distinct count (split by DataFusion into two group-bys) and plain
    // aggregates per arm.
    "SELECT arm, count(DISTINCT user_id) AS users, count(*) AS n, sum(amount) AS s \
     FROM ev WHERE exp = $1 AND ts >= $2 AND ts < $3 GROUP BY arm ORDER BY arm",
    // A computed key.
    "SELECT date_trunc('day', ts) AS d, arm, count(DISTINCT user_id) AS users, count(*) AS n \
     FROM ev WHERE exp = $1 AND ts >= $2 AND ts < $3 GROUP BY 1, 2 ORDER BY 1, 2",
    // A parameter inside an aggregate: part of the key.
    "SELECT arm, sum(CASE WHEN amount > $4 THEN 1 ELSE 0 END) AS big, max(amount) AS top \
     FROM ev WHERE exp = $1 AND ts >= $2 AND ts < $3 GROUP BY arm ORDER BY arm",
];

fn ts(ns: i64) -> ScalarValue {
    ScalarValue::TimestampNanosecond(Some(ns), None)
}

fn rows(seed: u64, n: usize) -> Vec<(i64, i64, &'static str, i64, Option<f64>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let t = START_NS + rng.random_range(0..DAYS * DAY_NS);
            let exp = rng.random_range(1..=3);
            let arm = ["control", "treatment"][rng.random_range(0..2)];
            let user = rng.random_range(0..400);
            let amount = rng
                .random_bool(0.3)
                .then(|| rng.random_range(0..1000) as f64);
            (t, exp, arm, user, amount)
        })
        .collect()
}

async fn write(db: &Db, rows: &[(i64, i64, &'static str, i64, Option<f64>)]) {
    let schema = db.table("ev").unwrap().schema.clone();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.0),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.4))),
        ],
    )
    .unwrap();
    db.write("ev", &[batch]).await.unwrap();
}

/// An engine that always runs prepared statements with generic plans, over
/// a table of `DAYS` day segments, all held decoded.
async fn engine(dir: &std::path::Path) -> Engine {
    engine_with(dir, QueryConfig::default(), DAYS as usize).await
}

/// [`engine`] with `cfg`, waiting until `held` segments are decoded.
async fn engine_with(dir: &std::path::Path, mut config: QueryConfig, held: usize) -> Engine {
    config.plan_cache_mode = PlanCacheMode::ForceGeneric;
    let mut storage = StorageConfig::for_dir(dir);
    storage.segment_pack_rows = 0; // a segment per day
    let db = Db::open(storage).await.unwrap();
    let engine = Engine::with_config(db, &config).unwrap();
    engine
        .execute(
            "CREATE TABLE ev (ts TIMESTAMP NOT NULL, exp BIGINT NOT NULL, arm VARCHAR NOT NULL, \
             user_id BIGINT NOT NULL, amount DOUBLE) WITH (sort_key = 'exp,user_id')",
        )
        .await
        .unwrap();
    let db = engine.db().clone();
    write(&db, &rows(7, 40_000)).await;
    db.flush_all().await.unwrap();
    let cache = &engine.caches().segments;
    assert_eq!(cache.prewarm(&db), held);
    for _ in 0..500 {
        if cache.entries() == held {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(cache.entries(), held, "segments held decoded");
    engine
}

fn text(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches).unwrap().to_string()
}

/// `sql` as a prepared statement with `params` (generic plan).
async fn prepared(engine: &Engine, sql: &str, params: &[ScalarValue]) -> String {
    let logical = engine
        .session()
        .state()
        .create_logical_plan(sql)
        .await
        .unwrap();
    let types: Vec<DataType> = params.iter().map(ScalarValue::data_type).collect();
    let query = engine.begin(Origin::EMBEDDED, sql).await.unwrap();
    let streamed = engine
        .run_prepared(&query, sql, &logical, &types, params)
        .await
        .unwrap();
    let Output::Rows { batches, .. } = streamed.collect().await.unwrap() else {
        panic!("rows expected")
    };
    text(&batches)
}

/// `sql` with the values written in, planned with them.
fn with_values(sql: &str, params: &[ScalarValue]) -> String {
    let mut sql = sql.to_string();
    for (i, p) in params.iter().enumerate().rev() {
        let value = match p {
            ScalarValue::TimestampNanosecond(Some(ns), _) => {
                format!("arrow_cast({ns}, 'Timestamp(Nanosecond, None)')")
            }
            v => v.to_string(),
        };
        sql = sql.replace(&format!("${}", i + 1), &value);
    }
    sql
}

async fn rows_of(engine: &Engine, sql: &str) -> String {
    match engine.execute(sql).await.unwrap().pop().unwrap() {
        Output::Rows { batches, .. } => text(&batches),
        other => panic!("not rows: {other:?}"),
    }
}

/// The answer computed without kept partials: the table read through a
/// `LIMIT` (no filter passes it, and a scan with a limit keeps nothing).
async fn literal(engine: &Engine, sql: &str, params: &[ScalarValue]) -> String {
    let sql = with_values(sql, params)
        .replace("FROM ev", "FROM (SELECT * FROM ev LIMIT 1000000000) AS ev");
    rows_of(engine, &sql).await
}

/// Every query, with each of `ranges`, each experiment, two thresholds:
/// the generic plan's answer equals the literal one.
async fn check_all(engine: &Engine, ranges: &[(i64, i64)]) {
    for sql in QUERIES {
        for &(from, to) in ranges {
            for exp in 1..=3i64 {
                for threshold in [100.0, 700.0] {
                    let mut params = vec![ScalarValue::from(exp), ts(from), ts(to)];
                    if sql.contains("$4") {
                        params.push(ScalarValue::from(threshold));
                    }
                    let got = prepared(engine, sql, &params).await;
                    let want = literal(engine, sql, &params).await;
                    assert_eq!(got, want, "{sql} with {params:?}");
                    assert!(got.lines().count() > 4, "{sql} with {params:?} found rows");
                }
            }
        }
    }
}

#[tokio::test]
async fn kept_partials_answer_as_planned_with_values() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let partials = || engine.caches().partials.lookups();
    let day = |d: i64| START_NS + d * DAY_NS;
    // Whole days, then ranges that cut a day (its conjuncts stay in the key).
    let ranges = [
        (day(0), day(4)),
        (day(1), day(3)),
        (day(0) + 3 * HOUR_NS, day(2) + 2 * HOUR_NS),
        (day(0) + 5 * HOUR_NS, day(2) + 9 * HOUR_NS),
    ];
    check_all(&engine, &ranges).await;
    let (hits, misses) = partials();
    assert!(misses > 0, "segments computed and kept");
    assert!(
        hits > 0,
        "days 1 and 2 of the second range were kept by the first"
    );
    assert!(engine.caches().partials.usage() > 0);

    // The same again: every read is seen again, so each held segment is
    // looked up whole first (missed: kept by its slices only), then found
    // by its slices, and kept whole too.
    check_all(&engine, &ranges).await;
    let (hits2, misses2) = partials();
    assert!(hits2 > hits);
    // Once more: each held segment found whole, and nothing computed or
    // missed (exact counts: `a_repeated_read_finds_each_segment_whole`).
    check_all(&engine, &ranges).await;
    let (hits3, misses3) = partials();
    assert_eq!(misses3, misses2, "nothing missed");
    assert!(hits3 > hits2);

    // Rows written since are read from the memstore, next to kept partials.
    write(engine.db(), &rows(8, 5_000)).await;
    check_all(&engine, &ranges).await;
    assert!(partials().0 > hits3, "kept partials used next to new rows");
}

#[tokio::test]
async fn off_with_no_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let config = QueryConfig {
        partial_cache_bytes: ByteSize::ZERO,
        ..QueryConfig::default()
    };
    let engine = engine_with(tmp.path(), config, DAYS as usize).await;
    check_all(&engine, &[(START_NS, START_NS + DAYS * DAY_NS)]).await;
    assert_eq!(engine.caches().partials.lookups(), (0, 0));
}

/// Over segments read from Parquet (not held), and a cache too small for
/// every segment's rows: the same answers, within its bytes.
#[tokio::test]
async fn parquet_segments_and_a_small_cache() {
    let tmp = tempfile::tempdir().unwrap();
    // Room for one decoded day (~0.4 MB each) and a few kept partials.
    let config = QueryConfig {
        segment_cache_bytes: ByteSize::mib(1),
        partial_cache_bytes: ByteSize::kib(64),
        ..QueryConfig::default()
    };
    let engine = engine_with(tmp.path(), config, 1).await;
    let day = |d: i64| START_NS + d * DAY_NS;
    let partials = &engine.caches().partials;
    // The queries' misses decode other days in the background, and a
    // decode may evict the held day (its partials are found only through
    // it): repeat until the held days settle and a kept partial is found.
    for _ in 0..5 {
        check_all(&engine, &[(day(0), day(4)), (day(2), day(4))]).await;
        if partials.lookups().0 > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (hits, misses) = partials.lookups();
    assert!(misses > 0 && hits > 0, "{hits} hits, {misses} misses");
    assert!(partials.entries() > 0);
    assert!(partials.usage() <= 64 << 10, "{} bytes", partials.usage());
}

/// A query planned with its values (simple query protocol, HTTP) over
/// held segments keeps and finds partials too.
#[tokio::test]
async fn queries_with_values_keep_partials_too() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let day = |d: i64| START_NS + d * DAY_NS;
    let lookups = || engine.caches().partials.lookups();
    for round in 0..2 {
        for sql in QUERIES {
            for (from, to) in [(day(0), day(4)), (day(1), day(3) + 5 * HOUR_NS)] {
                let params = [
                    ScalarValue::from(2i64),
                    ts(from),
                    ts(to),
                    ScalarValue::from(300.0),
                ];
                let got = rows_of(&engine, &with_values(sql, &params)).await;
                let before = lookups();
                let want = literal(&engine, sql, &params).await;
                assert_eq!(lookups(), before, "the reference keeps nothing");
                assert_eq!(got, want, "{sql}");
            }
        }
        let (hits, misses) = lookups();
        match round {
            0 => assert!(misses > 0, "computed and kept"),
            _ => assert!(hits > 0, "the second round found what the first kept"),
        }
    }
}

/// A plan in one partition aggregates in one step, which is split so that
/// the partial step is kept.
#[tokio::test]
async fn one_partition_plans_keep_partials_too() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    // A server-wide change (SET changes only its own query's options).
    engine
        .session()
        .state_ref()
        .write()
        .config_mut()
        .options_mut()
        .set("datafusion.execution.target_partitions", "1")
        .unwrap();
    let day = |d: i64| START_NS + d * DAY_NS;
    let ranges = [(day(0), day(4)), (day(1), day(3))];
    check_all(&engine, &ranges).await;
    let (hits, misses) = engine.caches().partials.lookups();
    assert!(hits > 0 && misses > 0, "{hits} hits, {misses} misses");
}

/// A cube answers a range that cuts its buckets from its parts and reads
/// the cut buckets' rows raw. When a range repeats, those rows' states are
/// kept per held segment too, under the slices read and under the whole
/// read, so it then finds them without planning a read, and reads no row; a
/// range read once keeps nothing; other values and rows written since are
/// computed afresh, and every answer stays the table's.
#[tokio::test]
async fn a_cubes_cut_buckets_are_kept_too() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine
        .execute(
            "CREATE CUBE by_hour ON ev DIMENSIONS (exp, arm, date_trunc('hour', ts) AS h) \
             MEASURES (count(DISTINCT user_id) AS users, count(*) AS n, sum(amount) AS s)",
        )
        .await
        .unwrap();
    engine.db().build_cube_parts().await.unwrap();
    let sql = QUERIES[0];
    let explain = rows_of(
        &engine,
        &format!(
            "EXPLAIN {}",
            with_values(sql, &[1.into(), ts(START_NS), ts(START_NS + HOUR_NS)])
        ),
    )
    .await;
    assert!(explain.contains("cube=by_hour"), "{explain}");
    let lookups = || engine.caches().partials.lookups();
    let day = |d: i64| START_NS + d * DAY_NS;
    // Both ends cut an hour (on days 0 and 2): two segments have edges.
    let cut = (
        day(0) + 90 * 60 * 1_000_000_000 + 17,
        day(2) + 5 * HOUR_NS + 1_234,
    );
    let params = |exp: i64, (from, to): (i64, i64)| [ScalarValue::from(exp), ts(from), ts(to)];
    let run = async |exp: i64, range: (i64, i64)| {
        let params = params(exp, range);
        let got = prepared(&engine, sql, &params).await;
        assert_eq!(got, literal(&engine, sql, &params).await, "{params:?}");
        assert!(got.lines().count() > 4, "rows found");
    };
    // Read once: in one plan, nothing looked up or kept.
    let before = lookups();
    run(2, cut).await;
    assert_eq!(lookups(), before, "a range read once keeps nothing");
    // Read again: the two cut days looked up whole (missed), then planned,
    // their slices looked up (missed), computed and kept under both keys.
    run(2, cut).await;
    let second = lookups();
    assert_eq!(second, (before.0, before.1 + 4), "the two cut days kept");
    assert_eq!(engine.caches().partials.entries(), 4, "kept twice each");
    // Found whole: nothing planned, so no slice looked up.
    run(2, cut).await;
    let third = lookups();
    assert_eq!(third, (second.0 + 2, second.1), "the same range found both");
    // Another experiment: other keys, first read once.
    run(3, cut).await;
    assert_eq!(lookups(), third);
    run(3, cut).await;
    assert_eq!(lookups(), (third.0, third.1 + 4));
    // Another upper end, twice: another whole read for both days; by its
    // slices, another key on its day, while the lower end's day finds its
    // own (a conjunct every row of a slice passes is left out of the key),
    // and keeps it whole under the new read.
    let later = (cut.0, cut.1 + 1);
    run(2, later).await;
    run(2, later).await;
    let other = lookups();
    assert_eq!(other, (third.0 + 1, third.1 + 4 + 3));
    run(2, later).await;
    assert_eq!(lookups(), (other.0 + 2, other.1), "both days found whole");
    // An experiment without rows: the cut days' slices are all pruned, so
    // nothing is computed, but each day is kept whole, empty, and then
    // found without planning.
    let empty = async || {
        let params = params(99, cut);
        let got = prepared(&engine, sql, &params).await;
        assert_eq!(got, literal(&engine, sql, &params).await, "{params:?}");
    };
    empty().await;
    empty().await;
    let pruned = lookups();
    assert_eq!(pruned, (other.0 + 2, other.1 + 2), "looked up whole once");
    empty().await;
    assert_eq!(lookups(), (pruned.0 + 2, pruned.1), "found whole, empty");
    let other = lookups();
    // Rows written since are read from the memstore beside kept states.
    write(engine.db(), &rows(9, 5_000)).await;
    run(2, cut).await;
    assert_eq!(lookups().0, other.0 + 2);
}

/// A table read raw (no cube) by a kept plan: a read seen before looks up
/// each held segment whole before pruning any slice, so a repeated range
/// finds each segment it reaches by one lookup (those its statistics rule
/// out are not looked up), from any plan that reads it alike; other values
/// and rows written since are read afresh.
#[tokio::test]
async fn a_repeated_read_finds_each_segment_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let sql = "SELECT arm, count(*) AS n, sum(amount) AS s FROM ev \
               WHERE exp = $1 AND ts >= $2 AND ts < $3 GROUP BY arm ORDER BY arm";
    let lookups = || engine.caches().partials.lookups();
    let day = |d: i64| START_NS + d * DAY_NS;
    // Day 1 cut, day 2 whole; days 0 and 3 outside.
    let range = (day(1) + 3 * HOUR_NS + 17, day(3));
    let run = async |exp: i64| {
        let params = [ScalarValue::from(exp), ts(range.0), ts(range.1)];
        let got = prepared(&engine, sql, &params).await;
        assert_eq!(got, literal(&engine, sql, &params).await, "{params:?}");
        assert!(got.lines().count() > 4, "rows found");
    };
    // First read: the two days in range computed by their slices, kept.
    let before = lookups();
    run(2).await;
    let first = lookups();
    assert_eq!(first, (before.0, before.1 + 2), "two days computed");
    // Seen before: the two days in range looked up whole (missed), then
    // found by their slices and kept whole too.
    run(2).await;
    let second = lookups();
    assert_eq!(second, (first.0 + 2, first.1 + 2));
    // Found whole: one lookup per day, no slice pruned or looked up.
    run(2).await;
    let third = lookups();
    assert_eq!(third, (second.0 + 2, second.1), "each day found whole");
    // The same read planned with its values finds them too.
    let params = [ScalarValue::from(2i64), ts(range.0), ts(range.1)];
    let want = prepared(&engine, sql, &params).await;
    let fourth = lookups();
    assert_eq!(rows_of(&engine, &with_values(sql, &params)).await, want);
    let fifth = lookups();
    assert_eq!(fifth, (fourth.0 + 2, fourth.1), "planned with values");
    // Another experiment: read as new.
    run(3).await;
    assert_eq!(lookups(), (fifth.0, fifth.1 + 2));
    // Rows written since are read from the memstore beside kept rows.
    write(engine.db(), &rows(9, 5_000)).await;
    let before = lookups();
    run(2).await;
    assert_eq!(lookups(), (before.0 + 2, before.1), "found whole again");
}
