//! HTTP writes: `kiln bench write`, a YCSB-style load (closed-loop writers,
//! throughput and latency for every second so periodic stalls show), and `kiln gen abtest --load`, which streams generated rows
//! into a running server.
//!
//! Bodies are encoded before the clock starts (a shared pool the writers
//! cycle through), so the benchmark measures the server, not the encoder.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use super::stats::{LevelReport, histogram, record};
use crate::r#gen::{ABTEST_DDL, AbTestGen, DAY_NS, SPAN_NS};
use crate::{Error, Result};

/// Body encoding of the writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    Ndjson,
    Arrow,
}

impl BodyFormat {
    fn content_type(self) -> &'static str {
        match self {
            BodyFormat::Ndjson => "application/x-ndjson",
            BodyFormat::Arrow => "application/vnd.apache.arrow.stream",
        }
    }

    fn encode(self, batch: &RecordBatch) -> Result<Bytes> {
        let mut buf = Vec::new();
        match self {
            BodyFormat::Ndjson => {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut buf);
                w.write(batch)?;
                w.finish()?;
            }
            BodyFormat::Arrow => {
                let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())?;
                w.write(batch)?;
                w.finish()?;
            }
        }
        Ok(buf.into())
    }
}

/// One `kiln bench write` run.
#[derive(Clone, Debug)]
pub struct WriteLoad {
    /// `http://HOST:PORT` or `https://HOST:PORT`.
    pub url: String,
    /// PEM CA certificate trusted for `https://` (instead of the system's).
    pub ca_cert: Option<std::path::PathBuf>,
    pub table: String,
    pub clients: usize,
    /// Rows per request.
    pub batch: usize,
    pub duration: Duration,
    /// `durable` or `memory` (the server's `?ack=`).
    pub ack: String,
    pub format: BodyFormat,
    pub seed: u64,
    /// Rows per second at most, over all writers (0: no limit).
    pub rate: u64,
    /// The rows' times fall in the last `days` days of the generated
    /// window (14 days): 14 spreads them over it all, 1 is a stream of
    /// recent events.
    pub days: u32,
}

/// What a write run measured: one row per second, and the whole run.
#[derive(Debug, Serialize)]
pub struct WriteReport {
    pub clients: usize,
    pub batch: usize,
    pub ack: String,
    pub format: BodyFormat,
    pub rows_per_sec: f64,
    pub per_second: Vec<LevelReport>,
    pub total: LevelReport,
}

/// Creates the `abtest` table unless it exists.
pub async fn create_abtest(client: &reqwest::Client, url: &str) -> Result<()> {
    let ddl = ABTEST_DDL.replacen("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1);
    post(
        client,
        &format!("{url}/v1/sql"),
        "application/sql",
        None,
        Bytes::from(ddl),
        "creating abtest",
    )
    .await?;
    Ok(())
}

/// Posts a body; an error status becomes [`Error::Status`].
async fn post(
    client: &reqwest::Client,
    url: &str,
    content_type: &str,
    idempotency_key: Option<&str>,
    body: Bytes,
    what: &str,
) -> Result<Bytes> {
    let mut req = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .body(body);
    if let Some(k) = idempotency_key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.bytes().await?;
    if !status.is_success() {
        return Err(Error::Status {
            what: what.into(),
            status: status.as_u16(),
            body: String::from_utf8_lossy(&text).into_owned(),
        });
    }
    Ok(text)
}

/// Runs the write load; `on_second` gets each second's figures as it ends.
pub async fn run(load: &WriteLoad, on_second: &mut dyn FnMut(&LevelReport)) -> Result<WriteReport> {
    let url = load.url.trim_end_matches('/').to_string();
    let client = super::http::client(load.ca_cert.as_deref())?
        .pool_max_idle_per_host(load.clients)
        .build()?;
    create_abtest(&client, &url).await?;
    let bodies = Arc::new(body_pool(load)?);
    let target = Arc::new(format!("{url}/v1/write/{}?ack={}", load.table, load.ack));

    let second = Arc::new(Mutex::new((histogram(), 0u64)));
    let stop = Arc::new(AtomicBool::new(false));
    let rows = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(load.clients);
    for c in 0..load.clients {
        let (client, bodies, target) = (client.clone(), bodies.clone(), target.clone());
        let (second, stop, rows) = (second.clone(), stop.clone(), rows.clone());
        let (ct, batch) = (load.format.content_type(), load.batch as u64);
        // Each writer's requests, evenly spaced and staggered between writers.
        let every = (load.rate > 0).then(|| {
            Duration::from_secs_f64((load.clients as u64 * batch) as f64 / load.rate as f64)
        });
        let mut next = every.map(|e| started + e.mul_f64(c as f64 / load.clients as f64));
        tasks.push(tokio::spawn(async move {
            let mut total = histogram();
            let (mut errors, mut first_error) = (0u64, None);
            let mut i = c;
            while !stop.load(Ordering::Relaxed) {
                if let (Some(at), Some(every)) = (next.as_mut(), every) {
                    tokio::time::sleep_until((*at).into()).await;
                    // Behind schedule: no burst to catch up.
                    *at = (*at + every).max(Instant::now());
                }
                let body = bodies[i % bodies.len()].clone();
                i += load_stride(bodies.len());
                let t = Instant::now();
                let res = post(&client, &target, ct, None, body, "write").await;
                let took = t.elapsed();
                let mut s = second.lock().expect("not poisoned");
                match res {
                    Ok(_) => {
                        record(&mut s.0, took);
                        drop(s);
                        record(&mut total, took);
                        rows.fetch_add(batch, Ordering::Relaxed);
                    }
                    Err(e) => {
                        s.1 += 1;
                        errors += 1;
                        first_error.get_or_insert(e.to_string());
                    }
                }
            }
            (total, errors, first_error)
        }));
    }
    let mut per_second = Vec::new();
    let mut tick = 1u32;
    while started.elapsed() < load.duration {
        tokio::time::sleep_until((started + Duration::from_secs(tick as u64)).into()).await;
        tick += 1;
        let (h, errors) =
            std::mem::replace(&mut *second.lock().expect("not poisoned"), (histogram(), 0));
        let r = LevelReport::new(load.clients, &h, errors, Duration::from_secs(1));
        on_second(&r);
        per_second.push(r);
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = histogram();
    let (mut errors, mut first_error) = (0, None);
    for t in tasks {
        let (h, e, first) = t
            .await
            .map_err(|e| Error::Config(format!("writer task: {e}")))?;
        total.add(&h).expect("same bounds");
        errors += e;
        first_error = first_error.or(first);
    }
    let elapsed = started.elapsed();
    if let Some(e) = first_error {
        if total.is_empty() {
            return Err(Error::Config(format!("every write failed; first: {e}")));
        }
        tracing::warn!(errors, "writes failed; first: {e}");
    }
    Ok(WriteReport {
        clients: load.clients,
        batch: load.batch,
        ack: load.ack.clone(),
        format: load.format,
        rows_per_sec: rows.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        per_second,
        total: LevelReport::new(load.clients, &total, errors, elapsed),
    })
}

/// Writers step through the pool by a stride coprime with its length, so
/// concurrent writers rarely send the same body at once.
fn load_stride(len: usize) -> usize {
    if len.is_multiple_of(7) { 1 } else { 7 }
}

/// Days in the generated window ([`SPAN_NS`]).
pub const WINDOW_DAYS: u32 = (SPAN_NS / DAY_NS) as u32;

/// At least 8 bodies, and at least 64k rows in all.
fn body_pool(load: &WriteLoad) -> Result<Vec<Bytes>> {
    let batch = load.batch.max(1);
    let n = (65_536 / batch).clamp(8, 4096);
    let mut generator = AbTestGen::new((n * batch) as u64, load.seed);
    generator.batch_rows = batch;
    let span = DAY_NS * i64::from(load.days.clamp(1, WINDOW_DAYS));
    generator.start_ns += SPAN_NS - span;
    generator.span_ns = span;
    (0..n)
        .map(|i| load.format.encode(&generator.batch(i)))
        .collect()
}

/// Streams `generator`'s rows into `table` of a running server, `parallel`
/// requests at a time, creating the table if missing. Each batch carries an
/// idempotency key, so a retried batch is never written twice. `progress`
/// gets the rows acknowledged so far.
pub async fn load_generated(
    generator: &AbTestGen,
    url: &str,
    parallel: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64> {
    let url = url.trim_end_matches('/');
    let client = super::http::client(None)?.build()?;
    create_abtest(&client, url).await?;
    let target = format!("{url}/v1/write/abtest");
    let done = AtomicU64::new(0);
    let mut results = futures::stream::iter(0..generator.num_batches())
        .map(|i| {
            let (client, target, generator) = (&client, &target, generator.clone());
            async move {
                let key = format!("kiln-gen-{}-{}-{i}", generator.seed, generator.rows);
                let (body, rows) = tokio::task::spawn_blocking(move || {
                    let batch = generator.batch(i);
                    Ok::<_, Error>((BodyFormat::Arrow.encode(&batch)?, batch.num_rows() as u64))
                })
                .await
                .map_err(|e| Error::Config(format!("generator task: {e}")))??;
                for attempt in 0.. {
                    let what = format!("batch {i}");
                    let ct = BodyFormat::Arrow.content_type();
                    let res = post(client, target, ct, Some(&key), body.clone(), &what).await;
                    // Overload or a dropped connection: the key makes a retry safe.
                    let retry = match &res {
                        Err(Error::Status { status, .. }) => matches!(status, 429 | 503),
                        Err(Error::Http(_)) => true,
                        _ => false,
                    };
                    match res {
                        Ok(_) => break,
                        Err(e) if !retry || attempt == 5 => return Err(e),
                        Err(_) => tokio::time::sleep(Duration::from_millis(100 << attempt)).await,
                    }
                }
                Ok::<u64, Error>(rows)
            }
        })
        .buffer_unordered(parallel.max(1));
    while let Some(rows) = results.next().await {
        let rows = rows?;
        progress(done.fetch_add(rows, Ordering::Relaxed) + rows);
    }
    Ok(done.load(Ordering::Relaxed))
}
