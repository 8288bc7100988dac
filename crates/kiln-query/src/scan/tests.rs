use arrow::util::pretty::pretty_format_batches;
use kiln_storage::{Db, NANOS_PER_DAY, StorageConfig};

use crate::{Engine, Output};

/// 2026-01-01 00:00:00 UTC, in days since 1970.
const FIRST_DAY: i64 = 20_454;
const DAYS: i64 = 400;

async fn rows_of(engine: &Engine, sql: &str) -> String {
    match engine.execute(sql).await.unwrap().pop().unwrap() {
        Output::Rows { batches, .. } => pretty_format_batches(&batches).unwrap().to_string(),
        other => panic!("not rows: {other:?}"),
    }
}

/// A timestamp literal `day` days and `hours` hours after [`FIRST_DAY`].
fn at(day: i64, hours: i64) -> String {
    let ns = (FIRST_DAY + day) * NANOS_PER_DAY + hours * 3_600_000_000_000;
    let ts = chrono::DateTime::from_timestamp_nanos(ns).naive_utc();
    format!("TIMESTAMP '{ts}'")
}

/// Queries over thin days in memory: ranges of whole days and ranges
/// cutting days, by timestamp and by date, raw and answered by a cube.
fn queries() -> Vec<String> {
    let q = |w: &str| format!("SELECT count(*), sum(v) FROM t WHERE {w}");
    let by_day = |w: &str| {
        format!(
            "SELECT date_trunc('day', ts) AS d, k, count(*), sum(v) FROM t \
             WHERE {w} GROUP BY 1, 2 ORDER BY 1, 2"
        )
    };
    vec![
        "SELECT count(*), sum(v) FROM t".into(),
        q(&format!("ts >= {} AND ts < {}", at(100, 12), at(130, 6))),
        q(&format!("ts >= {} AND ts < {}", at(100, 0), at(130, 0))),
        q(&format!(
            "CAST(ts AS DATE) BETWEEN CAST({} AS DATE) AND CAST({} AS DATE)",
            at(7, 0),
            at(9, 0)
        )),
        q(&format!("k = 'b' AND ts < {}", at(10, 0))),
        q(&format!("ts >= {}", at(DAYS + 5, 0))),
        by_day(&format!("ts >= {} AND ts < {}", at(50, 0), at(53, 0))),
        by_day(&format!("ts >= {} AND ts < {}", at(50, 6), at(52, 18))),
    ]
}

/// Each query's answer, checked against the same query over a subquery no
/// cube answers (the rows read raw).
async fn answers(engine: &Engine) -> Vec<String> {
    let mut out = vec![];
    for q in queries() {
        let got = rows_of(engine, &q).await;
        let raw = q.replace("FROM t", "FROM (SELECT * FROM t LIMIT 1000000000) AS t");
        assert_eq!(got, rows_of(engine, &raw).await, "{q}");
        out.push(format!("{q}\n{got}"));
    }
    out
}

/// Rows of many thin days still in memory answer the same when their
/// small batches are packed into one (a range of days), and after the
/// flush: time pruning and the filters left to rows, raw and from a cube,
/// read a packed batch by its range of days.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thin_days_in_memory_answer_the_same_packed_or_not() {
    let tmp = tempfile::tempdir().unwrap();
    let mut storage = StorageConfig::for_dir(tmp.path());
    storage.background_interval = std::time::Duration::from_secs(3600);
    let engine = Engine::new(Db::open(storage).await.unwrap()).unwrap();
    for sql in [
        "CREATE TABLE t (ts TIMESTAMP NOT NULL, k VARCHAR, v BIGINT)",
        "CREATE CUBE c ON t DIMENSIONS (date_trunc('day', ts) AS d, k) \
         MEASURES (count(*) AS n, sum(v) AS s)",
    ] {
        engine.execute(sql).await.unwrap();
    }
    // Three rows a day, at 01:00, 12:00 and 23:00.
    let rows: Vec<String> = (0..DAYS)
        .flat_map(|d| {
            [(1, "a"), (12, "b"), (23, "a")]
                .map(|(h, k)| format!("({}, '{k}', {})", at(d, h), d * 24 + h))
        })
        .collect();
    engine
        .execute(&format!("INSERT INTO t VALUES {}", rows.join(", ")))
        .await
        .unwrap();
    let by_day = queries().pop().unwrap();
    let plan = rows_of(&engine, &format!("EXPLAIN {by_day}")).await;
    assert!(plan.contains("CubeScan"), "{plan}");
    let before = answers(&engine).await;
    // Counted here too: a range cutting days 100 and 130, and days 100 to
    // 129 whole, both 90 rows.
    let v = |d: i64, h: i64| d * 24 + h;
    let whole: i64 = (100..130).flat_map(|d| [1, 12, 23].map(|h| v(d, h))).sum();
    let cut = whole - v(100, 1) + v(130, 1);
    for (i, sum) in [(1, cut), (2, whole)] {
        let text = &before[i];
        assert!(text.contains(&format!("| 90       | {sum} ")), "{text}");
    }
    let db = engine.db().clone();
    let t = db.table("t").unwrap();
    assert_eq!(t.snapshot().mem_by_days().len() as i64, DAYS);
    assert_eq!(
        t.mem.pack_small(kiln_storage::segment::ROW_GROUP_ROWS) as i64,
        DAYS
    );
    assert_eq!(t.snapshot().mem_by_days().len(), 1);
    assert_eq!(answers(&engine).await, before, "packed");
    db.flush_all().await.unwrap();
    assert!(t.snapshot().mem_by_days().is_empty());
    assert_eq!(answers(&engine).await, before, "flushed");
}

#[test]
fn a_filter_building_strings_from_a_large_constant_is_left_above_the_scan() {
    use datafusion::prelude::{col, concat, lit};
    let big = lit("x".repeat(super::LARGE_FROM));
    let small = lit("x".repeat(super::LARGE_FROM - 1));
    let joined = |c: datafusion::prelude::Expr| {
        datafusion::logical_expr::binary_expr(
            col("s"),
            datafusion::logical_expr::Operator::StringConcat,
            c,
        )
    };
    assert!(super::copies_large_constant(
        &joined(big.clone()).eq(lit("a"))
    ));
    assert!(super::copies_large_constant(
        &concat(vec![col("s"), big.clone()]).is_null()
    ));
    assert!(!super::copies_large_constant(&joined(small).eq(lit("a"))));
    // Compared with, it is not copied.
    assert!(!super::copies_large_constant(&col("s").eq(big)));
}
