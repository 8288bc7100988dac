//! `kiln bench`: benchmarks of an embedded database.
//!
//! `write-embedded` drives concurrent durable writers and reports commits/s
//! and latency percentiles every second and overall (so periodic stalls
//! show); with `--print-acks` it is also the crash test's writer.
//! `scan-vs-parquet` runs the same SQL against Kiln and against plain
//! DataFusion on one Parquet file, alternating, and reports medians.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use hdrhistogram::Histogram;
use kiln_query::Engine;
use kiln_storage::{Db, NANOS_PER_DAY};
use parking_lot::Mutex;

use super::BoxError;
use crate::config::{ScanVsParquetArgs, WriteEmbeddedArgs};

/// The table the write benchmark and the crash test write to.
pub const WRITE_DDL: &str = "CREATE TABLE IF NOT EXISTS crash (ts TIMESTAMP NOT NULL, writer BIGINT NOT NULL, id BIGINT NOT NULL, payload VARCHAR)";

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// Latencies in microseconds: the current second and the whole run.
struct Latencies {
    second: Histogram<u64>,
    total: Histogram<u64>,
}

fn pct(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

pub async fn write_embedded(args: WriteEmbeddedArgs) -> Result<(), BoxError> {
    let db = Db::open(args.storage).await?;
    Engine::new(db.clone())?.execute(WRITE_DDL).await?;
    let schema = db
        .table("crash")
        .ok_or("crash table missing")?
        .schema
        .clone();
    let lat = Arc::new(Mutex::new(Latencies {
        second: histogram(),
        total: histogram(),
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = vec![];
    for w in 0..args.writers {
        let (db, schema, lat, stop) = (db.clone(), schema.clone(), lat.clone(), stop.clone());
        let (batch, base, print) = (args.batch, args.id_base, args.print_acks);
        tasks.push(tokio::spawn(async move {
            let day0 = 20_000 * NANOS_PER_DAY;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let ids: Vec<i64> = (0..batch)
                    .map(|k| base + w as i64 * 1_000_000_000 + (i * batch + k) as i64)
                    .collect();
                i += 1;
                // Three days, so several partitions are written and flushed.
                let ts: Vec<i64> = ids
                    .iter()
                    .map(|id| day0 + (id % 3) * NANOS_PER_DAY + id % 1000)
                    .collect();
                let payload: Vec<String> = ids
                    .iter()
                    .map(|id| format!("payload-{id}-{}", "x".repeat((*id % 50) as usize)))
                    .collect();
                let rb = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(TimestampNanosecondArray::from(ts)),
                        Arc::new(Int64Array::from(vec![w as i64; ids.len()])),
                        Arc::new(Int64Array::from(ids.clone())),
                        Arc::new(StringArray::from(payload)),
                    ],
                )?;
                let t0 = Instant::now();
                db.write("crash", &[rb]).await?;
                let us = t0.elapsed().as_micros() as u64;
                {
                    let mut l = lat.lock();
                    let _ = l.second.record(us.max(1));
                    let _ = l.total.record(us.max(1));
                }
                if print {
                    let mut out = std::io::stdout().lock();
                    for id in ids {
                        writeln!(out, "ack {id}")?;
                    }
                    out.flush()?;
                }
            }
            Ok::<_, BoxError>(())
        }));
    }
    let mut second = 0;
    eprintln!(
        "{:>4} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "sec", "commits/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    while started.elapsed() < args.duration {
        tokio::time::sleep(
            Duration::from_secs(1).saturating_sub(started.elapsed() - Duration::from_secs(second)),
        )
        .await;
        second += 1;
        let h = std::mem::replace(&mut lat.lock().second, histogram());
        eprintln!(
            "{second:>4} {:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            h.len(),
            pct(&h, 0.5),
            pct(&h, 0.99),
            pct(&h, 0.999),
            h.max() as f64 / 1000.0
        );
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let total = lat.lock().total.clone();
    let wal = db.wal_stats();
    let flushes = db.metrics().flushes.load(Ordering::Relaxed);
    eprintln!(
        "writers={} batch={} commits={} commits/s={:.0} p50={:.2}ms p99={:.2}ms p99.9={:.2}ms p99.99={:.2}ms max={:.2}ms fsyncs={} flushes={}",
        args.writers,
        args.batch,
        total.len(),
        total.len() as f64 / secs,
        pct(&total, 0.5),
        pct(&total, 0.99),
        pct(&total, 0.999),
        pct(&total, 0.9999),
        total.max() as f64 / 1000.0,
        wal.fsyncs,
        flushes
    );
    db.close().await?;
    Ok(())
}

pub async fn scan_vs_parquet(args: ScanVsParquetArgs) -> Result<(), BoxError> {
    let db = Db::open(args.storage).await?;
    let engine = Engine::new(db.clone())?;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let plain = datafusion::prelude::SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new().with_target_partitions(cores),
    );
    // The same SQL functions on both sides (bitmap_agg, retention, ...).
    kiln_query::functions::register(&plain);
    let file = args.file.to_str().ok_or("file path is not UTF-8")?;
    plain
        .register_parquet(&args.table, file, Default::default())
        .await?;
    println!("| query | kiln median ms | datafusion+parquet median ms | ratio |");
    println!("|---|---|---|---|");
    for q in &args.queries {
        let sql = q.replace("{table}", &args.table);
        let (mut k, mut d) = (vec![], vec![]);
        for _ in 0..args.repeat {
            let t = Instant::now();
            engine.execute(&sql).await?;
            k.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            plain.sql(&sql).await?.collect().await?;
            d.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let (mk, md) = (median(&mut k), median(&mut d));
        println!("| `{sql}` | {mk:.1} | {md:.1} | {:.2}x |", mk / md);
    }
    db.close().await?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
