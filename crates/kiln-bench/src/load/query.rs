//! `kiln bench query`: closed-loop clients, JMeter-style. Each client owns
//! one connection, prepares every query of the workload once (PostgreSQL
//! wire: Parse at connect, Bind/Execute per call) or posts JSON with
//! parameters (HTTP), and sends its next call as soon as the previous one
//! answered. Each concurrency level runs for a fixed time; its latencies go
//! to per-client histograms merged at the end, and to one histogram of the
//! current second (a lock per call), so a level also reports each second:
//! a flush or compaction shows as the seconds it slows, which the level's
//! percentiles average away. Before the first level every query runs once,
//! unmeasured (as `bench/peers` does for the peers).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;
use tokio_postgres::{Client, NoTls, Statement};

use super::stats::{LevelReport, histogram, record};
use super::workload::{Call, CallGen, Query, statement};
use crate::{Error, Result};

/// How the clients talk to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// PostgreSQL wire, prepared statements.
    Pg,
    /// PostgreSQL wire, simple query protocol with the values written into
    /// the SQL text, as BI tools send it.
    PgSimple,
    /// The same with the range's bounds typed (`TIMESTAMP '...'`), as
    /// Tableau and Looker write them.
    PgTyped,
    /// `POST /v1/sql` with `{"sql", "params"}`.
    Http,
}

/// One `kiln bench query` run.
#[derive(Clone, Debug)]
pub struct QueryLoad {
    /// `postgres://HOST:PORT` (PostgreSQL wire) or `http://HOST:PORT`.
    pub url: String,
    pub protocol: Protocol,
    /// Concurrency levels, run in order.
    pub clients: Vec<usize>,
    pub duration: Duration,
    pub seed: u64,
    pub queries: &'static [Query],
}

/// One level's report: its latencies over the whole level, and each
/// second's (the calls that ended in it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryLevel {
    #[serde(flatten)]
    pub level: LevelReport,
    pub per_second: Vec<LevelReport>,
}

/// Live counters of the level being run, for a progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub clients: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
}

/// Runs every level; `progress` is updated live. The first error of a
/// level is kept (with its query) and returned if no call succeeded.
pub async fn run(load: &QueryLoad, progress: Arc<Progress>) -> Result<Vec<QueryLevel>> {
    warm_up(load).await?;
    let mut out = Vec::with_capacity(load.clients.len());
    for &clients in &load.clients {
        progress.clients.store(clients as u64, Ordering::Relaxed);
        progress.done.store(0, Ordering::Relaxed);
        progress.errors.store(0, Ordering::Relaxed);
        out.push(run_level(load, clients, &progress).await?);
    }
    Ok(out)
}

/// Runs each query once, unmeasured, with the first call's parameters of
/// client 0: the same warm-up `bench/peers` gives every peer, so no system's
/// first level alone pays for cold caches. A failing query is left for the
/// levels to report.
async fn warm_up(load: &QueryLoad) -> Result<()> {
    let t = Instant::now();
    let mut conn = Conn::open(load, 0).await?;
    let first = CallGen::new(load.seed, 0, load.queries.len()).next_call();
    for query in 0..load.queries.len() {
        let _ = conn.call(load.queries, &Call { query, ..first }).await;
    }
    tracing::info!(
        "warm-up (each query once) {:.2}s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What one client measured.
struct ClientResult {
    hist: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

async fn run_level(
    load: &QueryLoad,
    clients: usize,
    progress: &Arc<Progress>,
) -> Result<QueryLevel> {
    // Connect (and prepare) every client first, so connecting is not measured.
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        conns.push(Conn::open(load, i).await?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    // This second's latencies and errors, taken each second.
    let second = Arc::new(Mutex::new((histogram(), 0u64)));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (stop, second) = (stop.clone(), second.clone());
        let mut calls = CallGen::new(load.seed, i as u64, load.queries.len());
        let queries = load.queries;
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut r = ClientResult {
                hist: histogram(),
                errors: 0,
                first_error: None,
            };
            while !stop.load(Ordering::Relaxed) {
                let call = calls.next_call();
                let t = Instant::now();
                match conn.call(queries, &call).await {
                    Ok(()) => {
                        let took = t.elapsed();
                        record(&mut r.hist, took);
                        record(&mut second.lock().expect("not poisoned").0, took);
                        progress.done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        second.lock().expect("not poisoned").1 += 1;
                        r.errors += 1;
                        progress.errors.fetch_add(1, Ordering::Relaxed);
                        r.first_error
                            .get_or_insert_with(|| format!("{}: {e}", queries[call.query].name));
                    }
                }
            }
            r
        }));
    }
    let mut per_second = Vec::new();
    for tick in 1u32.. {
        let end = load.duration.min(Duration::from_secs(u64::from(tick)));
        tokio::time::sleep_until((started + end).into()).await;
        let (h, errors) =
            std::mem::replace(&mut *second.lock().expect("not poisoned"), (histogram(), 0));
        let length = end.saturating_sub(Duration::from_secs(u64::from(tick - 1)));
        per_second.push(LevelReport::new(clients, &h, errors, length));
        if end >= load.duration {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut hist = histogram();
    let (mut errors, mut first_error) = (0, None);
    for t in tasks {
        let r = t
            .await
            .map_err(|e| Error::Config(format!("client task: {e}")))?;
        hist.add(&r.hist).expect("same bounds");
        errors += r.errors;
        first_error = first_error.or(r.first_error);
    }
    let elapsed = started.elapsed();
    if let Some(e) = &first_error {
        if hist.is_empty() {
            return Err(Error::Config(format!("every call failed; first: {e}")));
        }
        tracing::warn!(clients, errors, "level had errors; first: {e}");
    }
    Ok(QueryLevel {
        level: LevelReport::new(clients, &hist, errors, elapsed),
        per_second,
    })
}

/// One client's connection.
enum Conn {
    Pg {
        client: Client,
        statements: Vec<Statement>,
    },
    PgSimple {
        client: Client,
        typed: bool,
    },
    Http {
        client: reqwest::Client,
        url: String,
    },
}

impl Conn {
    async fn open(load: &QueryLoad, i: usize) -> Result<Conn> {
        match load.protocol {
            Protocol::Pg => {
                let client = pg_connect(&load.url).await?;
                let mut statements = Vec::with_capacity(load.queries.len());
                for q in load.queries {
                    let s = client.prepare(statement(q)).await.map_err(|e| {
                        Error::Config(format!(
                            "client {i}: preparing {}: {}",
                            q.name,
                            pg_message(&e)
                        ))
                    })?;
                    statements.push(s);
                }
                Ok(Conn::Pg { client, statements })
            }
            Protocol::PgSimple | Protocol::PgTyped => Ok(Conn::PgSimple {
                client: pg_connect(&load.url).await?,
                typed: load.protocol == Protocol::PgTyped,
            }),
            Protocol::Http => Ok(Conn::Http {
                client: super::http::client(None)?.build()?,
                url: format!("{}/v1/sql?format=ndjson", load.url.trim_end_matches('/')),
            }),
        }
    }

    /// Runs one call and reads its whole result.
    async fn call(&mut self, queries: &[Query], call: &Call) -> Result<()> {
        match self {
            Conn::Pg { client, statements } => {
                let (from, to) = (call.from_time(), call.to_time());
                client
                    .query(&statements[call.query], &[&call.experiment, &from, &to])
                    .await
                    .map_err(|e| Error::Config(pg_message(&e)))?;
                Ok(())
            }
            Conn::PgSimple { client, typed } => {
                let sql = call.inline(statement(&queries[call.query]), *typed);
                client
                    .simple_query(&sql)
                    .await
                    .map_err(|e| Error::Config(pg_message(&e)))?;
                Ok(())
            }
            Conn::Http { client, url } => {
                let body = json!({
                    "sql": statement(&queries[call.query]),
                    "params": [call.experiment, call.from_text(), call.to_text()],
                });
                let resp = client.post(url.as_str()).json(&body).send().await?;
                let status = resp.status();
                let text = resp.bytes().await?;
                if !status.is_success() {
                    return Err(Error::Status {
                        what: queries[call.query].name.into(),
                        status: status.as_u16(),
                        body: String::from_utf8_lossy(&text).into_owned(),
                    });
                }
                Ok(())
            }
        }
    }
}

/// Connects to `postgres://[user@]host:port[/db]` (user `kiln` if none).
pub async fn pg_connect(url: &str) -> Result<Client> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::Config(format!("--url {url}: {e}")))?;
    if config.get_user().is_none() {
        config.user("kiln");
    }
    config.connect_timeout(Duration::from_secs(10));
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("pg connection closed: {e}");
        }
    });
    Ok(client)
}

/// A PostgreSQL error with the server's message and SQLSTATE, if it sent one.
fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
