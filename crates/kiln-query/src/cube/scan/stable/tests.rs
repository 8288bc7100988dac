use std::sync::Arc;

use arrow::util::pretty::pretty_format_batches;
use datafusion::arrow::array::TimestampNanosecondArray;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use kiln_storage::{Db, NANOS_PER_DAY, StorageConfig};

use super::STABLE_ROWS;
use crate::{Engine, Output};

async fn rows_of(engine: &Engine, sql: &str) -> String {
    match engine.execute(sql).await.unwrap().pop().unwrap() {
        Output::Rows { batches, .. } => pretty_format_batches(&batches).unwrap().to_string(),
        other => panic!("not rows: {other:?}"),
    }
}

/// Rows `ids` of `t (ts, k, v, u)`, spread over one day.
fn day_rows(ids: std::ops::Range<i64>) -> RecordBatch {
    let day = 20_394 * NANOS_PER_DAY; // 2025-11-02
    let ts: Vec<i64> = ids
        .clone()
        .map(|i| day + i * 37 % 86_400 * 1_000_000_000)
        .collect();
    let k: Vec<&str> = ids
        .clone()
        .map(|i| ["a", "b", "c"][(i % 3) as usize])
        .collect();
    let v: Vec<i64> = ids.clone().map(|i| i % 101 - 50).collect();
    let u: Vec<i64> = ids.map(|i| i * 7 % 1_009).collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("ts", Arc::new(TimestampNanosecondArray::from(ts))),
        ("k", Arc::new(StringArray::from(k))),
        ("v", Arc::new(Int64Array::from(v))),
        ("u", Arc::new(Int64Array::from(u))),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

/// A day's parts and its large in-memory batch are read merged, kept
/// under their names: the same sets find the merge again, a small batch
/// written after does not change it, and a flush (a new part) names a new
/// one. Every answer is the rows' read raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_days_parts_and_large_batches_are_read_merged_under_their_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mut storage = StorageConfig::for_dir(tmp.path());
    storage.background_interval = std::time::Duration::from_secs(3600);
    let engine = Engine::new(Db::open(storage).await.unwrap()).unwrap();
    for sql in [
        "CREATE TABLE t (ts TIMESTAMP NOT NULL, k VARCHAR, v BIGINT, u BIGINT)",
        "CREATE CUBE c ON t DIMENSIONS (date_trunc('hour', ts) AS h, k) \
         MEASURES (count(*) AS n, sum(v) AS s, min(v) AS lo, count(DISTINCT u) AS users)",
    ] {
        engine.execute(sql).await.unwrap();
    }
    let db = engine.db().clone();
    let mut next = 0i64;
    let mut write = async |rows: i64| {
        next += rows;
        db.write("t", &[day_rows(next - rows..next)]).await.unwrap();
    };
    // Every dimension read (`11`), and none (`00`).
    let queries = [
        (
            "SELECT date_trunc('hour', ts) AS h, k, count(*), sum(v), min(v), \
             count(DISTINCT u) FROM t GROUP BY 1, 2 ORDER BY 1, 2",
            "11",
        ),
        ("SELECT count(*), sum(v), count(DISTINCT u) FROM t", "00"),
    ];
    let t = engine.db().table("t").unwrap();
    let cube = t.cubes()[0].id;
    // The key of the day's sets merged: parts, then in-memory batches.
    let key = |used: &str| {
        let snapshot = t.snapshot();
        let mut key = format!("merged#{cube}#{used}");
        for s in &snapshot.version.manifest.segments {
            key.push_str(&format!("|{}", s.part(cube).unwrap().meta.path));
        }
        for (_, b) in snapshot.mem_by_days() {
            if b.rows() >= STABLE_ROWS {
                key.push_str(&format!("|m{}", b.id()));
            }
        }
        key
    };
    let check = async |what: &str| {
        let mut keys = vec![];
        for (query, used) in queries {
            let plan = rows_of(&engine, &format!("EXPLAIN {query}")).await;
            assert!(plan.contains("CubeScan"), "{plan}");
            let raw = query.replace("FROM t", "FROM (SELECT * FROM t LIMIT 1000000000) AS t");
            let got = rows_of(&engine, query).await;
            assert_eq!(got, rows_of(&engine, &raw).await, "{what}: {query}");
            let key = key(used);
            assert!(engine.cubes().parts.contains(&key), "{what}: {key}");
            keys.push(key);
        }
        keys
    };
    write(3_000).await;
    engine.db().flush_all().await.unwrap();
    write(2_000).await;
    engine.db().flush_all().await.unwrap();
    write(STABLE_ROWS as i64 + 500).await;
    let merged = check("two parts and a large batch").await;
    assert_eq!(merged[0].matches('|').count(), 3, "{}", merged[0]);
    // A small batch after the large one: read apart, the merge unchanged.
    write(100).await;
    assert_eq!(check("a small batch after").await, merged);
    // A flush: three parts, a new merge.
    engine.db().flush_all().await.unwrap();
    let flushed = check("three parts").await;
    assert_eq!(flushed[0].matches('|').count(), 3, "{}", flushed[0]);
    assert_ne!(flushed, merged);
}
