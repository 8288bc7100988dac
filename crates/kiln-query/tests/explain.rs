//! Snapshots of EXPLAIN plans: how a Kiln table is scanned (memory and
//! segments, pruned by time and by column statistics).

use kiln_query::{Engine, Output};
use kiln_storage::{Db, StorageConfig};

async fn explain(engine: &Engine, sql: &str) -> String {
    let mut out = engine.execute(&format!("EXPLAIN {sql}")).await.unwrap();
    let Some(Output::Rows { batches, .. }) = out.pop() else {
        panic!()
    };
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    // Segment file names are random; keep the partition directory.
    let re_uuid = |s: &str| -> String {
        let mut out = String::new();
        for part in s.split(".parquet") {
            match part.rfind('/') {
                Some(i) if part.len() - i == 37 => {
                    out.push_str(&part[..i + 1]);
                    out.push_str("<uuid>");
                }
                _ => out.push_str(part),
            }
            out.push_str(".parquet");
        }
        out.truncate(out.len() - ".parquet".len());
        out
    };
    re_uuid(&text)
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The rows `sql` gives, a line each, values spaced.
async fn rows(engine: &Engine, sql: &str) -> String {
    let mut out = engine.execute(sql).await.unwrap();
    let Some(Output::Rows { batches, .. }) = out.pop() else {
        panic!()
    };
    let mut lines = vec![];
    for b in &batches {
        for r in 0..b.num_rows() {
            let values: Vec<String> = b
                .columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                .collect();
            lines.push(values.join(" "));
        }
    }
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_plans() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = StorageConfig::for_dir(tmp.path());
    cfg.compaction = false;
    cfg.segment_pack_rows = 0; // a segment per day, to prune
    let engine = Engine::new(Db::open(cfg).await.unwrap()).unwrap();
    engine
        .execute(
            "CREATE TABLE ev (ts TIMESTAMP NOT NULL, region VARCHAR NOT NULL, amount DOUBLE) WITH (sort_key = 'region');
             INSERT INTO ev VALUES ('2026-02-01T01:00:00', 'eu', 1.0), ('2026-02-02T01:00:00', 'us', 2.0), ('2026-02-03T01:00:00', 'ap', 3.0);",
        )
        .await
        .unwrap();
    let q = "SELECT region, sum(amount) FROM ev WHERE ts >= '2026-02-02' AND ts < '2026-02-03' GROUP BY region";
    // The day in memory lies inside the range: its rows are not compared
    // with it (filtered=0).
    insta::assert_snapshot!("memory_only", explain(&engine, q).await);
    assert_eq!(rows(&engine, q).await, "us 2.0");
    // A range that cuts the day compares them (filtered=1).
    let cut = "SELECT region, sum(amount) FROM ev WHERE ts >= '2026-02-02T01:30:00' AND ts < '2026-02-03' GROUP BY region";
    insta::assert_snapshot!("memory_day_cut", explain(&engine, cut).await);
    assert_eq!(rows(&engine, cut).await, "");
    // So is a range of days written as BI tools write it.
    let days = "SELECT region, sum(amount) FROM ev WHERE CAST(ts AS DATE) BETWEEN '2026-02-02' AND '2026-02-02' GROUP BY region";
    insta::assert_snapshot!("memory_days", explain(&engine, days).await);
    assert_eq!(rows(&engine, days).await, "us 2.0");
    engine.db().flush_all().await.unwrap();
    // One segment per day; the time filter keeps only 2026-02-02's.
    insta::assert_snapshot!("segments_pruned_by_time", explain(&engine, q).await);
    // That query queued the segment for decoding; once it is held, the
    // same query scans it in memory (no Parquet reader).
    let cache = &engine.caches().segments;
    for _ in 0..500 {
        if cache.entries() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(cache.entries(), 1);
    insta::assert_snapshot!("segment_cached", explain(&engine, q).await);
    // Column statistics prune too: no segment holds region 'zz'.
    insta::assert_snapshot!(
        "segments_pruned_by_stats",
        explain(&engine, "SELECT count(*) FROM ev WHERE region = 'zz'").await
    );
    // A count of distinct values groups twice; the inner group-by, which
    // computes no aggregate, reads past rows that repeat the one before.
    insta::assert_snapshot!(
        "distinct_drops_repeats",
        explain(
            &engine,
            "SELECT region, count(DISTINCT amount) FROM ev GROUP BY region"
        )
        .await
    );
    engine.db().close().await.unwrap();
}
