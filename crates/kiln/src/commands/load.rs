//! `kiln bench query` and `kiln bench write`: load drivers against a
//! running server (the work is in `kiln_bench::load`); this prints a live
//! progress line on stderr and the result tables (or JSON) on stdout.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kiln_bench::load::{self, LevelReport, Progress, Protocol, QueryLoad, WriteLoad};

use super::BoxError;
use crate::config::{BenchProtocol, BenchQueryArgs, BenchWriteArgs, WriteFormat};

pub async fn query(args: BenchQueryArgs) -> Result<(), BoxError> {
    if args.clients.is_empty() || args.clients.contains(&0) {
        return Err("--clients needs one or more levels above 0, e.g. 1,15,25".into());
    }
    let cfg = QueryLoad {
        url: args.url.clone(),
        protocol: match args.protocol {
            BenchProtocol::Pg => Protocol::Pg,
            BenchProtocol::PgSimple => Protocol::PgSimple,
            BenchProtocol::PgTyped => Protocol::PgTyped,
            BenchProtocol::Http => Protocol::Http,
        },
        clients: args.clients.clone(),
        duration: args.duration,
        seed: args.seed,
        queries: load::workload(&args.workload)?,
    };
    let progress = Arc::new(Progress::default());
    let ticker = tokio::spawn(show_progress(progress.clone(), args.duration));
    let levels = load::query::run(&cfg, progress).await;
    ticker.abort();
    let levels = levels?;
    if args.json {
        let out = serde_json::json!({
            "system": "kiln",
            "protocol": format!("{:?}", args.protocol).to_ascii_lowercase(),
            "workload": args.workload,
            "duration_s": args.duration.as_secs_f64(),
            "seed": args.seed,
            "levels": levels,
        });
        println!("{out}");
    } else {
        println!(
            "workload {} over {:?}, {}s per level, seed {}",
            args.workload,
            args.protocol,
            args.duration.as_secs_f64(),
            args.seed
        );
        let levels: Vec<LevelReport> = levels.into_iter().map(|l| l.level).collect();
        print!("{}", load::level_table(&levels));
    }
    Ok(())
}

/// One live line per second on a terminal (every 10 s otherwise).
async fn show_progress(p: Arc<Progress>, level: Duration) {
    let tty = std::io::stderr().is_terminal();
    let every = if tty { 1 } else { 10 };
    let mut clients = 0;
    let mut since = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    for n in 1u64.. {
        tick.tick().await;
        let c = p.clients.load(Ordering::Relaxed);
        if c != clients {
            clients = c;
            since = Instant::now();
        }
        if n % every != 0 {
            continue;
        }
        let secs = since
            .elapsed()
            .as_secs_f64()
            .min(level.as_secs_f64())
            .max(1e-3);
        let done = p.done.load(Ordering::Relaxed);
        let line = format!(
            "clients {c:>4}  {:>3.0}/{:.0}s  queries {done:>8}  q/s {:>8.1}  errors {}",
            secs,
            level.as_secs_f64(),
            done as f64 / secs,
            p.errors.load(Ordering::Relaxed)
        );
        if tty {
            eprint!("\r{line}   ");
        } else {
            eprintln!("{line}");
        }
    }
}

pub async fn write(args: BenchWriteArgs) -> Result<(), BoxError> {
    let cfg = WriteLoad {
        url: args.url.clone(),
        ca_cert: args.ca_cert.clone(),
        table: args.table.clone(),
        clients: args.clients.max(1),
        batch: args.batch.max(1),
        duration: args.duration,
        ack: args.ack.clone(),
        format: match args.format {
            WriteFormat::Ndjson => load::BodyFormat::Ndjson,
            WriteFormat::Arrow => load::BodyFormat::Arrow,
        },
        seed: args.seed,
        rate: args.rate,
        days: args.days,
    };
    let json = args.json;
    if !json {
        eprintln!(
            "{:>4} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6}",
            "sec", "writes/s", "rows/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors"
        );
    }
    let mut second = 0;
    let batch = cfg.batch as f64;
    let report = load::write::run(&cfg, &mut |r: &LevelReport| {
        second += 1;
        if !json {
            eprintln!(
                "{second:>4} {:>10} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6}",
                r.queries,
                r.queries as f64 * batch,
                r.p50_ms,
                r.p99_ms,
                r.p999_ms,
                r.max_ms,
                r.errors
            );
        }
    })
    .await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let t = &report.total;
        println!(
            "clients={} batch={} ack={} format={:?} writes={} writes/s={:.0} rows/s={:.0} \
             p50={:.2}ms p99={:.2}ms p99.9={:.2}ms p99.99={:.2}ms max={:.2}ms errors={}",
            report.clients,
            report.batch,
            report.ack,
            report.format,
            t.queries,
            t.qps,
            report.rows_per_sec,
            t.p50_ms,
            t.p99_ms,
            t.p999_ms,
            t.p9999_ms,
            t.max_ms,
            t.errors
        );
    }
    Ok(())
}
