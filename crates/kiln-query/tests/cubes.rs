//! Cubes answer exactly what the table answers: random cube definitions and
//! random aggregate queries (group keys, filters, conditional aggregates,
//! coarser time units, ranges cutting buckets), each compared with the
//! same query read raw, while rows sit in the memstore (a day's small
//! batches, whose states grow from the last ones' as a stream of writes
//! adds to them, and large ones with states of their own), after flushes,
//! after more writes, after compaction, and for a cube created over
//! existing data before and after its parts are built; also through
//! prepared statements with generic plans.

use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::DataType;
use arrow::util::pretty::pretty_format_batches;
use datafusion::common::ScalarValue;
use kiln_query::cube::MEM_ROLLUPS;
use kiln_query::cube::scan::MEM_STATES_MIN_ROWS;
use kiln_query::{Engine, Origin, Output, PlanCacheMode, QueryConfig};
use kiln_storage::{Db, StorageConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const HOUR_NS: i64 = 3_600 * 1_000_000_000;
const DAY_NS: i64 = 24 * HOUR_NS;
/// 2026-11-02 00:00:00 UTC (a Monday).
const START_NS: i64 = 1_793_577_600 * 1_000_000_000;
const DAYS: i64 = 4;

const TABLE: &str = "CREATE TABLE ev (ts TIMESTAMP NOT NULL, region VARCHAR, \
                     action VARCHAR NOT NULL, amount DOUBLE, qty BIGINT NOT NULL, user_id BIGINT NOT NULL)";

const CUBES: &[&str] = &[
    "CREATE CUBE by_hour ON ev DIMENSIONS (date_trunc('hour', ts) AS h, region, action) \
     MEASURES (count(*) AS n, sum(qty) AS q, min(amount) AS lo, max(amount) AS hi, \
     count(DISTINCT user_id) AS users, avg(qty) AS mean, count(amount) AS priced, sum(amount) AS total)",
    "CREATE CUBE by_day ON ev DIMENSIONS (date_trunc('day', ts) AS d, region) \
     MEASURES (count(*) AS n, sum(qty) AS q, count(DISTINCT user_id) AS users)",
    "CREATE CUBE by_flag ON ev DIMENSIONS (amount > 500 AS big, action) \
     MEASURES (count(*) AS n, sum(qty) AS q, max(amount) AS hi, count(DISTINCT qty) AS qtys)",
    // Leading dimensions a query filters by equality: parts read as slices.
    "CREATE CUBE by_region ON ev DIMENSIONS (region, action, date_trunc('day', ts) AS d) \
     MEASURES (count(*) AS n, sum(qty) AS q, count(DISTINCT user_id) AS users, sum(amount) AS total)",
];

const KEYS: &[&str] = &[
    "region",
    "action",
    "date_trunc('hour', ts)",
    "date_trunc('day', ts)",
    "amount > 500",
    // Functions of a bucket, as BI tools write them.
    "CAST(ts AS DATE)",
    "extract(hour FROM ts)",
    "extract(dow FROM ts)",
    "date_bin(INTERVAL '2 hours', ts)",
    "time_bucket(INTERVAL '1 day', ts)",
    // Bins cutting hours: read raw.
    "date_bin(INTERVAL '90 minutes', ts)",
    // Grafana's `$__timeGroup(ts, '2h')`: bins of whole hours from 1970.
    "floor(extract(epoch FROM ts) / 7200) * 7200",
    // Of a shifted timestamp: weeks from Sunday (Metabase, Superset), days
    // two hours ahead (of hours only), and days from 00:30 (read raw).
    "date_trunc('week', ts + INTERVAL '1 day') - INTERVAL '1 day'",
    "CAST(ts + INTERVAL '2 hours' AS DATE)",
    "date_trunc('day', ts - INTERVAL '30 minutes')",
];

/// Keys and filters of [`BUCKET_FUNCTIONS_ANSWERED`].
const BUCKET_FUNCTIONS: &[&str] = &[
    "CAST(ts AS DATE)",
    "extract(",
    "date_bin(INTERVAL '2",
    "time_bucket(",
    "floor(extract(epoch",
];

const AGGREGATES: &[&str] = &[
    "count(*)",
    "sum(qty)",
    "min(amount)",
    "max(amount)",
    "count(DISTINCT user_id)",
    // Negative values too (a bitmap keeps them apart).
    "count(DISTINCT qty)",
    "avg(qty)",
    "count(amount)",
    "sum(amount)",
    "count(*) FILTER (WHERE action = 'buy')",
    "sum(CASE WHEN region = 'eu' THEN qty END)",
    "count(CASE WHEN action <> 'view' THEN 1 END)",
];

type Row = (
    i64,
    Option<&'static str>,
    &'static str,
    Option<f64>,
    i64,
    i64,
);

fn rows(rng: &mut StdRng, n: usize) -> Vec<Row> {
    (0..n)
        .map(|_| {
            let t = START_NS + rng.random_range(0..DAYS * DAY_NS);
            let region = [Some("eu"), Some("us"), Some("apac"), None][rng.random_range(0..4)];
            let action = ["view", "buy", "click"][rng.random_range(0..3)];
            // Whole amounts: float sums are exact in any order.
            let amount = rng
                .random_bool(0.7)
                .then(|| rng.random_range(0..1000) as f64);
            (
                t,
                region,
                action,
                amount,
                rng.random_range(-5..50),
                rng.random_range(0..300),
            )
        })
        .collect()
}

async fn write(db: &Db, rows: &[Row]) {
    let schema = db.table("ev").unwrap().schema.clone();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.0),
            )),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.3))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.4))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.5))),
        ],
    )
    .unwrap();
    db.write("ev", &[batch]).await.unwrap();
}

fn ts_sql(ns: i64) -> String {
    format!("arrow_cast({ns}, 'Timestamp(Nanosecond, None)')")
}

/// A random time bound: on an hour, on a day, or cutting both.
fn bound(rng: &mut StdRng) -> i64 {
    let t = START_NS + rng.random_range(0..DAYS * DAY_NS);
    match rng.random_range(0..3) {
        0 => t / HOUR_NS * HOUR_NS,
        1 => t / DAY_NS * DAY_NS,
        _ => t,
    }
}

/// How a query's time range is written ([`Range::form`]): on the time
/// column, or on its day (the bounds then dates), as BI tools write them.
const RANGES: &[&str] = &[
    "ts >= $1 AND ts < $2",
    "ts BETWEEN $1 AND $2",
    "ts > $1 AND ts <= $2",
    "CAST(ts AS DATE) BETWEEN $1 AND $2",
    "CAST(ts AS DATE) > $1 AND CAST(ts AS DATE) < $2",
];

/// A query's time range: its bounds in nanoseconds (of dates: their day)
/// and the index of its form in [`RANGES`].
#[derive(Debug, Clone, Copy)]
struct Range {
    a: i64,
    b: i64,
    form: usize,
}

impl Range {
    fn dates(&self) -> bool {
        RANGES[self.form].starts_with("CAST")
    }
}

/// A random query: its SQL with `$1`, `$2` for an optional time range, and
/// that range.
fn query(rng: &mut StdRng) -> (String, Option<Range>) {
    let nkeys = rng.random_range(0..=2);
    let mut keys: Vec<&str> = vec![];
    while keys.len() < nkeys {
        let k = KEYS[rng.random_range(0..KEYS.len())];
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let naggs = rng.random_range(1..=3);
    let aggs: Vec<&str> = (0..naggs)
        .map(|_| AGGREGATES[rng.random_range(0..AGGREGATES.len())])
        .collect();
    let mut filters = vec![];
    if rng.random_bool(0.3) {
        filters.push(["region = 'eu'", "'us' = region"][rng.random_range(0..2)].to_string());
    }
    if rng.random_bool(0.3) {
        filters.push(
            ["action IN ('buy', 'click')", "action = 'buy'"][rng.random_range(0..2)].to_string(),
        );
    }
    if rng.random_bool(0.2) {
        filters.push(
            [
                "CAST(ts AS DATE) BETWEEN DATE '2026-11-03' AND DATE '2026-11-04'",
                "extract(hour FROM ts) >= 12",
            ][rng.random_range(0..2)]
            .to_string(),
        );
    }
    let range = rng.random_bool(0.5).then(|| {
        let (a, b) = (bound(rng), bound(rng));
        let form = rng.random_range(0..RANGES.len());
        Range {
            a: a.min(b),
            b: a.max(b) + HOUR_NS,
            form,
        }
    });
    if let Some(r) = range {
        filters.push(RANGES[r.form].to_string());
    }
    let select: Vec<String> = keys
        .iter()
        .chain(&aggs)
        .enumerate()
        .map(|(i, e)| format!("{e} AS c{i}"))
        .collect();
    let mut sql = format!("SELECT {} FROM ev", select.join(", "));
    if !filters.is_empty() {
        sql += &format!(" WHERE {}", filters.join(" AND "));
    }
    if !keys.is_empty() {
        let n: Vec<String> = (1..=keys.len()).map(|i| i.to_string()).collect();
        sql += &format!(" GROUP BY {} ORDER BY {}", n.join(", "), n.join(", "));
    }
    (sql, range)
}

fn text(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches).unwrap().to_string()
}

async fn rows_of(engine: &Engine, sql: &str) -> String {
    match engine.execute(sql).await.unwrap().pop().unwrap() {
        Output::Rows { batches, .. } => text(&batches),
        other => panic!("not rows: {other:?}"),
    }
}

/// The query with its range written in: a bound on an even hour as a
/// timestamp, on an odd one as BI tools write a range relative to its end,
/// a day after it less a day (a string lifted into the kept plan's
/// placeholders inside its cast); a date as `DATE '...'` or, on an odd
/// day, a string the comparison makes a date.
fn with_range(sql: &str, range: Option<Range>) -> String {
    let dates = range.is_some_and(|r| r.dates());
    let written = |ns: i64| match (ns / HOUR_NS) % 2 {
        _ if dates => {
            let day = chrono::DateTime::from_timestamp_nanos(ns).date_naive();
            match (ns / DAY_NS) % 2 {
                0 => format!("DATE '{day}'"),
                _ => format!("'{day}'"),
            }
        }
        0 => ts_sql(ns),
        _ => {
            let next_day = chrono::DateTime::from_timestamp_nanos(ns + DAY_NS).naive_utc();
            let next_day = next_day.format("%Y-%m-%d %H:%M:%S%.9f");
            format!("CAST('{next_day}' AS TIMESTAMP) - INTERVAL '1 day'")
        }
    };
    match range {
        Some(r) => sql
            .replace("$1", &written(r.a))
            .replace("$2", &written(r.b)),
        None => sql.to_string(),
    }
}

/// The query as a prepared statement (generic plans: the engine forces them).
async fn prepared(engine: &Engine, sql: &str, r: Range) -> String {
    let param = |ns: i64| match r.dates() {
        true => ScalarValue::Date32(Some(ns.div_euclid(DAY_NS) as i32)),
        false => ScalarValue::TimestampNanosecond(Some(ns), None),
    };
    let params = [param(r.a), param(r.b)];
    let logical = engine
        .session()
        .state()
        .create_logical_plan(sql)
        .await
        .unwrap();
    let types: Vec<DataType> = params.iter().map(ScalarValue::data_type).collect();
    let query = engine.begin(Origin::EMBEDDED, sql).await.unwrap();
    let streamed = engine
        .run_prepared(&query, sql, &logical, &types, &params)
        .await
        .unwrap();
    let Output::Rows { batches, .. } = streamed.collect().await.unwrap() else {
        panic!("rows expected")
    };
    text(&batches)
}

/// Queries with a bound written relative to a day later
/// ([`with_range`]) that a cube answered.
static SHIFTED_ANSWERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Queries grouping by a function of a shifted timestamp
/// (`ts + INTERVAL ...`) that a cube answered.
static SHIFTED_BUCKETS_ANSWERED: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Prepared queries with a range whose end is inclusive (`BETWEEN`, `<=`)
/// that a cube answered.
static LIMITS_ANSWERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Queries answered from a cube so far, by `system.cubes`.
async fn cube_answers(engine: &Engine) -> i64 {
    let sql = "SELECT CAST(sum(queries_answered) AS BIGINT) FROM system.cubes";
    let Output::Rows { batches, .. } = engine.execute(sql).await.unwrap().pop().unwrap() else {
        panic!("rows expected")
    };
    let column = batches[0].column(0);
    column
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

/// Queries grouping or filtering by a function of a bucket other than
/// `date_trunc` ([`BUCKET_FUNCTIONS`]) that a cube answered.
static BUCKET_FUNCTIONS_ANSWERED: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Runs `n` random queries; each answer equals the raw one. Returns how
/// many were answered from a cube.
async fn check(engine: &Engine, rng: &mut StdRng, n: usize, phase: &str) -> usize {
    check_until(engine, rng, n, phase, None).await
}

/// [`check`], each query also limited to rows before `until` (rows written
/// after it meanwhile then change no answer).
async fn check_until(
    engine: &Engine,
    rng: &mut StdRng,
    n: usize,
    phase: &str,
    until: Option<i64>,
) -> usize {
    let mut answered = 0;
    for _ in 0..n {
        let (mut sql, range) = query(rng);
        if let Some(t) = until {
            let cut = format!("ts < {}", ts_sql(t));
            sql = match sql.find(" WHERE ") {
                Some(i) => format!("{} WHERE {cut} AND {}", &sql[..i], &sql[i + 7..]),
                None => match sql.find(" GROUP BY ") {
                    Some(i) => format!("{} WHERE {cut}{}", &sql[..i], &sql[i..]),
                    None => format!("{sql} WHERE {cut}"),
                },
            };
        }
        let literal = with_range(&sql, range);
        let raw = literal.replace("FROM ev", "FROM (SELECT * FROM ev LIMIT 1000000000) AS ev");
        let want = rows_of(engine, &raw).await;
        let got = rows_of(engine, &literal).await;
        assert_eq!(got, want, "{phase}: {literal}");
        let explain = rows_of(engine, &format!("EXPLAIN {literal}")).await;
        if explain.contains("CubeScan") {
            answered += 1;
            if literal.contains("AS TIMESTAMP) - INTERVAL") {
                SHIFTED_ANSWERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if BUCKET_FUNCTIONS.iter().any(|f| literal.contains(f)) {
                BUCKET_FUNCTIONS_ANSWERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if literal.contains("ts + INTERVAL") {
                SHIFTED_BUCKETS_ANSWERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if let Some(r) = range {
            let before = cube_answers(engine).await;
            let got = prepared(engine, &sql, r).await;
            assert_eq!(got, want, "{phase}, prepared: {sql} with {r:?}");
            if matches!(r.form, 1 | 2) && cube_answers(engine).await > before {
                LIMITS_ANSWERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    answered
}

async fn engine(dir: &std::path::Path) -> Engine {
    let config = QueryConfig {
        plan_cache_mode: PlanCacheMode::ForceGeneric,
        ..QueryConfig::default()
    };
    let mut storage = StorageConfig::for_dir(dir);
    storage.compaction_min_segments = 2;
    storage.memstore_freeze_bytes = kiln_storage::ByteSize::kib(256);
    // Days of a 3,000-row write (about 750 rows each) share segments two
    // by two, those of a 2,000-row write three and one: parts of one day
    // and of several are read.
    storage.segment_pack_rows = 1_600;
    storage.segment_delete_delay = std::time::Duration::ZERO;
    let db = Db::open(storage).await.unwrap();
    Engine::with_config(db, &config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cube_answers_equal_raw_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine.execute(TABLE).await.unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let db = engine.db().clone();
    for c in [CUBES[0], CUBES[1], CUBES[3]] {
        engine.execute(c).await.unwrap();
    }
    write(&db, &rows(&mut rng, 3_000)).await;
    let mut answered = check(&engine, &mut rng, 40, "memstore only").await;
    db.flush_all().await.unwrap();
    let segments = db.table("ev").unwrap().segments();
    let day = |ns: i64| ns.div_euclid(DAY_NS);
    let spans = |s: &&Arc<kiln_storage::Segment>| day(s.meta.min_time) < day(s.meta.max_time);
    assert_eq!(
        segments.iter().filter(spans).count(),
        2,
        "days share segments"
    );
    write(&db, &rows(&mut rng, 2_000)).await;
    answered += check(&engine, &mut rng, 40, "parts and memstore").await;
    db.flush_all().await.unwrap();
    // By this call or by the background task, which runs too.
    db.compact_all().await.unwrap();
    let compactions = db
        .metrics()
        .compactions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(compactions > 0, "segments compacted");
    let merged = db
        .metrics()
        .parts_merged
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(merged > 0, "compactions merged their inputs' parts");
    answered += check(&engine, &mut rng, 40, "compacted").await;
    // A stream of small writes, read between them: each day's small
    // batches grow and merge, their states made from the last ones'.
    for _ in 0..12 {
        write(&db, &rows(&mut rng, 80)).await;
        answered += check(&engine, &mut rng, 3, "small in-memory batches").await;
    }
    // Rows enough for in-memory batches of their own states, frozen and
    // active, each read between writes (so the active batches merge).
    for _ in 0..4 {
        write(&db, &rows(&mut rng, 6_000)).await;
        answered += check(&engine, &mut rng, 8, "large in-memory batches").await;
    }
    let snapshot = db.table("ev").unwrap().snapshot();
    assert!(!snapshot.version.frozen.is_empty(), "rows frozen");
    let mem = snapshot.mem_by_days();
    let large = mem.iter().filter(|(_, b)| b.rows() >= MEM_STATES_MIN_ROWS);
    let with_states = large.filter(|(_, b)| !b.derived_keys().is_empty()).count();
    assert!(
        with_states > 0,
        "no in-memory batch of {} has states",
        mem.len()
    );
    // Each batch keeps at most a few rollups per cube, whatever queries read.
    for (_, b) in &mem {
        let keys = b.derived_keys();
        for (cube, _) in &keys {
            let rollups = keys.iter().filter(|(c, k)| c == cube && *k != u64::MAX);
            assert!(rollups.count() <= MEM_ROLLUPS, "{keys:?}");
        }
    }
    // The states count in the memstore's bytes while their rows are in
    // it, and leave with them.
    let charged: usize = mem.iter().map(|(_, b)| b.charged()).sum();
    let held = db.table("ev").unwrap().mem.bytes();
    assert!(charged > 0 && held > charged, "{charged} of {held}");
    db.flush_all().await.unwrap();
    assert_eq!(db.table("ev").unwrap().mem.bytes(), 0);
    // A cube over existing data: segments read raw until their parts are built.
    engine.execute(CUBES[2]).await.unwrap();
    answered += check(&engine, &mut rng, 30, "new cube, not built").await;
    // The background may have built some already.
    db.build_cube_parts().await.unwrap();
    answered += check(&engine, &mut rng, 30, "new cube, built").await;
    assert!(
        answered > 60,
        "{answered} of 212 queries answered from cubes"
    );
    let shifted = SHIFTED_ANSWERED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(shifted > 10, "{shifted} shifted ranges answered from cubes");
    let functions = BUCKET_FUNCTIONS_ANSWERED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        functions > 20,
        "{functions} queries by functions of a bucket answered from cubes"
    );
    let shifted = SHIFTED_BUCKETS_ANSWERED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        shifted > 5,
        "{shifted} queries by functions of a shifted timestamp answered from cubes"
    );
    let limits = LIMITS_ANSWERED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        limits > 10,
        "{limits} prepared queries with inclusive ends answered from cubes"
    );
    let cubes = rows_of(&engine, "SELECT name, state, segments = segments_covered AS all_built FROM system.cubes ORDER BY name").await;
    assert!(
        !cubes.contains("building") && !cubes.contains("false"),
        "{cubes}"
    );
}

#[tokio::test]
async fn the_smallest_cube_answers_and_bad_definitions_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine.execute(TABLE).await.unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    write(engine.db(), &rows(&mut rng, 2_000)).await;
    engine.db().flush_all().await.unwrap();
    for c in &CUBES[..2] {
        engine.execute(c).await.unwrap();
    }
    engine.db().build_cube_parts().await.unwrap();
    let explain = rows_of(
        &engine,
        "EXPLAIN SELECT region, count(*) FROM ev GROUP BY region",
    )
    .await;
    assert!(explain.contains("cube=by_day"), "{explain}");
    // Parts are read merged to the dimensions the query reads.
    assert!(explain.contains("rollup=[region]"), "{explain}");
    // The columns the aggregate reads are taken into the scan: no
    // projection runs between them.
    let lines: Vec<&str> = explain.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("CubeScanExec"))
        .unwrap();
    assert!(lines[at].contains("projection=[region, "), "{explain}");
    assert!(!lines[at - 1].contains("ProjectionExec"), "{explain}");
    let explain = rows_of(
        &engine,
        "EXPLAIN SELECT action, count(*) FROM ev GROUP BY action",
    )
    .await;
    assert!(explain.contains("cube=by_hour"), "{explain}");
    // Functions of a bucket: of the finest cube that can answer, or why not.
    for (sql, answer) in [
        (
            "SELECT CAST(ts AS DATE) AS d, count(*) FROM ev GROUP BY 1",
            "cube=by_day",
        ),
        (
            "SELECT extract(hour FROM ts) AS h, count(*) FROM ev \
             WHERE extract(dow FROM ts) IN (0, 6) GROUP BY 1",
            "cube=by_hour",
        ),
        (
            "SELECT time_bucket(INTERVAL '3 hours', ts) AS b, count(*) FROM ev GROUP BY 1",
            "cube=by_hour",
        ),
        (
            "SELECT date_bin(INTERVAL '90 minutes', ts) AS b, count(*) FROM ev GROUP BY 1",
            "group key date_bin(",
        ),
        // Grafana's `$__timeGroupAlias(ts, '1d')` and `'30m'`.
        (
            "SELECT floor(extract(epoch from ts)/86400)*86400 AS \"time\", count(*) FROM ev \
             GROUP BY 1",
            "cube=by_day",
        ),
        (
            "SELECT floor(extract(epoch from ts)/1800)*1800 AS \"time\", count(*) FROM ev \
             GROUP BY 1",
            "group key floor(",
        ),
        // Of a timestamp shifted by whole buckets of the cube's unit.
        (
            "SELECT date_trunc('week', ts + INTERVAL '1 day') - INTERVAL '1 day' AS w, \
             count(*) FROM ev GROUP BY 1",
            "cube=by_day",
        ),
        (
            "SELECT CAST(ts + INTERVAL '2 hours' AS DATE) AS d, count(*) FROM ev GROUP BY 1",
            "cube=by_hour",
        ),
        (
            "SELECT date_trunc('day', ts - INTERVAL '30 minutes') AS d, count(*) FROM ev \
             GROUP BY 1",
            "group key date_trunc(",
        ),
    ] {
        let explain = rows_of(&engine, &format!("EXPLAIN {sql}")).await;
        assert!(explain.contains(answer), "{sql}: {explain}");
    }
    // A range of days narrows the parts read to its own, from cubes of
    // days and of hours; dates beyond the timestamps' years bound nothing
    // or everything.
    for (sql, answer) in [
        (
            "SELECT CAST(ts AS DATE) AS d, count(*) AS n FROM ev \
             WHERE CAST(ts AS DATE) BETWEEN DATE '2026-11-03' AND '2026-11-04' GROUP BY 1",
            "cube=by_day table=ev, buckets=Day of d",
        ),
        (
            "SELECT action, count(*) AS n FROM ev WHERE CAST(ts AS DATE) = DATE '2026-11-03' \
             GROUP BY 1",
            "cube=by_hour table=ev, buckets=Hour of h",
        ),
        (
            "SELECT region, count(*) AS n FROM ev WHERE CAST(ts AS DATE) > DATE '2026-11-03' \
             AND CAST(ts AS DATE) <= DATE '3000-01-01' GROUP BY 1",
            "buckets=Day of d",
        ),
        (
            "SELECT region, count(*) AS n FROM ev WHERE CAST(ts AS DATE) >= DATE '1000-01-01' \
             AND CAST(ts AS DATE) < DATE '2026-11-04' GROUP BY 1",
            "buckets=Day of d",
        ),
        (
            "SELECT region, count(*) AS n FROM ev WHERE CAST(ts AS DATE) >= DATE '3000-01-01' \
             GROUP BY 1",
            "buckets=Day of d",
        ),
        (
            "SELECT region, count(*) AS n FROM ev \
             WHERE ts BETWEEN TIMESTAMP '2026-11-03 10:00:00' AND TIMESTAMP '2026-11-04 10:00:00' \
             GROUP BY 1",
            "cube=by_day table=ev, buckets=Day of d",
        ),
        // A Grafana chart: `$__timeGroupAlias(ts, '1h')` over
        // `$__timeFilter(ts)`, whose ends cut hours.
        (
            "SELECT floor(extract(epoch from ts)/3600)*3600 AS \"time\", count(*) AS n \
             FROM ev WHERE ts BETWEEN '2026-11-03T10:21:33.123Z' AND '2026-11-04T09:59:59.9Z' \
             GROUP BY 1",
            "cube=by_hour table=ev, buckets=Hour of h",
        ),
    ] {
        let explain = rows_of(&engine, &format!("EXPLAIN {sql}")).await;
        assert!(explain.contains(answer), "{sql}: {explain}");
        let sql = format!("{sql} ORDER BY 1");
        let raw = sql.replace("FROM ev", "FROM (SELECT * FROM ev LIMIT 1000000000) AS ev");
        let want = rows_of(&engine, &raw).await;
        assert_eq!(rows_of(&engine, &sql).await, want, "{sql}");
    }
    // Two keys derived from one dimension, one named as the dimension.
    let sql = "SELECT CAST(ts AS DATE) AS a, date_trunc('day', ts) AS b, count(*) AS n \
               FROM ev GROUP BY 1, 2 ORDER BY 1";
    let explain = rows_of(&engine, &format!("EXPLAIN {sql}")).await;
    assert!(explain.contains("cube=by_day"), "{explain}");
    let raw = sql.replace("FROM ev", "FROM (SELECT * FROM ev LIMIT 1000000000) AS ev");
    assert_eq!(rows_of(&engine, sql).await, rows_of(&engine, &raw).await);
    // An equality on a cube's leading dimension reads a slice of each part.
    engine.execute(CUBES[3]).await.unwrap();
    engine.db().build_cube_parts().await.unwrap();
    let sql = "SELECT action, count(*) FROM ev WHERE region = 'eu' GROUP BY action";
    let explain = rows_of(&engine, &format!("EXPLAIN {sql}")).await;
    assert!(explain.contains("cube=by_region"), "{explain}");
    assert!(explain.contains("keys=[region]"), "{explain}");
    assert!(explain.contains("rollup=[region, action]"), "{explain}");
    let raw = sql.replace("FROM ev", "FROM (SELECT * FROM ev LIMIT 1000000000) AS ev");
    assert_eq!(
        rows_of(&engine, &format!("{sql} ORDER BY action")).await,
        rows_of(&engine, &format!("{raw} ORDER BY action")).await,
    );
    let bad = [
        (
            "CREATE CUBE x ON ev DIMENSIONS (nope) MEASURES (count(*))",
            "nope",
        ),
        (
            "CREATE CUBE x ON missing DIMENSIONS (a) MEASURES (count(*))",
            "missing",
        ),
        (
            "CREATE CUBE x ON ev DIMENSIONS (random() > 0.5) MEASURES (count(*))",
            "not deterministic",
        ),
        (
            "CREATE CUBE x ON ev DIMENSIONS (region) MEASURES (string_agg(action, ','))",
            "string_agg",
        ),
        (
            "CREATE CUBE x ON ev DIMENSIONS (region) MEASURES (sum(region))",
            "sum(region)",
        ),
        (
            "CREATE CUBE by_day ON ev DIMENSIONS (region) MEASURES (count(*))",
            "already exists",
        ),
    ];
    for (sql, needle) in bad {
        let e = engine.execute(sql).await.unwrap_err().to_string();
        assert!(e.contains(needle), "{sql}: {e}");
    }
    let cubes = rows_of(&engine, "SELECT count(*) AS n FROM system.cubes").await;
    assert!(cubes.contains("| 3 "), "nothing created: {cubes}");
    // by_day is cube 2: its part files go once nothing reads them.
    let parts = |id: u64| {
        walk(tmp.path())
            .iter()
            .filter(|p| p.ends_with(&format!(".cube{id}.parquet")))
            .count()
    };
    assert!(parts(2) > 0 && parts(1) > 0);
    engine.execute("DROP CUBE by_day").await.unwrap();
    for _ in 0..200 {
        if parts(2) == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(parts(2), 0, "the dropped cube's parts are deleted");
    assert!(parts(1) > 0, "the other cube's parts stay");
    let explain = rows_of(
        &engine,
        "EXPLAIN SELECT region, count(*) FROM ev GROUP BY region",
    )
    .await;
    assert!(explain.contains("cube=by_region"), "{explain}");
    assert!(engine.execute("DROP CUBE by_day").await.is_err());
    engine.execute("DROP CUBE IF EXISTS by_day").await.unwrap();
}

/// Every file under `dir`, as paths.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        match p.is_dir() {
            true => out.extend(walk(&p)),
            false => out.push(p.display().to_string()),
        }
    }
    out
}
