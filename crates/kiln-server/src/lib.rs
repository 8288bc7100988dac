//! Kiln's server: one process serving the HTTP API ([`http`]) and the
//! PostgreSQL wire protocol ([`pg`]) over one [`Db`] and one [`Engine`], so
//! both protocols share the DataFusion session, its caches and the table
//! registry: a row acknowledged on one is visible to the next query on the
//! other.
//!
//! Lifecycle: open the database, bind both listeners, print one
//! `kiln listening http=ADDR pg=ADDR` line on stderr (scripts and tests wait
//! for it), serve until SIGTERM or SIGINT, stop accepting, give in-flight
//! requests `--shutdown-grace`, then close the database (WAL synced).

pub mod auth;
mod conn;
pub mod error;
pub mod http;
pub mod metrics;
pub mod pg;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::serve::ListenerExt;
use clap::Args;
use kiln_query::{Engine, QueryConfig};
use kiln_storage::budget::MemoryBudget;
use kiln_storage::{ByteSize, Db, StorageConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::ApiError;
pub use metrics::Metrics;
pub use tls::{Tls, TlsConfig};

/// Settings of the server. Each is a flag with a `KILN_*` environment variable.
#[derive(Clone, Debug, Args)]
pub struct ServerConfig {
    /// Address of the HTTP API (port 0: any free port, printed at start).
    #[arg(long, env = "KILN_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,

    /// Address of the PostgreSQL wire protocol (port 0: any free port, printed at start).
    #[arg(long, env = "KILN_PG_ADDR", default_value = "127.0.0.1:5433")]
    pub pg_addr: SocketAddr,

    /// PostgreSQL connections open at once; one more is refused at
    /// startup with FATAL 53300 (PostgreSQL's `max_connections`). Each
    /// holds a session and may hold a COPY's data (`--max-body-bytes`).
    /// Sockets open at once, started or still in startup, are bounded at
    /// twice this (as PostgreSQL's live children); one more is sent the
    /// same FATAL 53300 as it is accepted.
    #[arg(long, env = "KILN_PG_MAX_CONNECTIONS", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub pg_max_connections: u32,

    /// HTTP connections open at once. Past it Kiln accepts no more until
    /// one closes: a new connection waits in the listen backlog.
    #[arg(long, env = "KILN_HTTP_MAX_CONNECTIONS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub http_max_connections: u32,

    /// An HTTP connection is closed when a request's head has not fully
    /// come this long after the connection opened or answered its last
    /// request: an idle keep-alive gives its slot of
    /// `--http-max-connections` back, and a head sent slowly is cut off.
    #[arg(long, env = "KILN_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub http_idle_timeout: Duration,

    /// Largest HTTP request body, compressed or decompressed (413 beyond it).
    #[arg(long, env = "KILN_MAX_BODY_BYTES", default_value = "64MiB")]
    pub max_body_bytes: ByteSize,

    /// Memory the bodies of all HTTP requests in flight and the data of
    /// all PostgreSQL COPYs in progress may take together (a size or a
    /// share of memory). A request reserves its
    /// `Content-Length` (`--max-body-bytes` when it has none) before its
    /// body is read, keeps the body's length once read, and gives it back
    /// when answered; past the limit it waits, first come first served,
    /// for up to `--body-read-timeout`, then is refused with 503 and
    /// Retry-After. A COPY reserves its data as it comes (SQLSTATE 53200
    /// when it waited that long). A body larger than the limit is read
    /// alone.
    #[arg(long, env = "KILN_BODY_MEMORY_LIMIT", default_value = "5%")]
    pub body_memory_limit: ByteSize,

    /// Longest an HTTP request body may take to arrive (408 beyond it),
    /// so a slow sender cannot hold its share of `--body-memory-limit`
    /// and its connection for ever.
    #[arg(long, env = "KILN_BODY_READ_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Duration,

    /// Largest HTTP request head: the request line and all headers
    /// together (431 beyond it).
    #[arg(long, env = "KILN_MAX_HEADER_BYTES", default_value = "64KiB")]
    pub max_header_bytes: ByteSize,

    /// Browser origins (`https://app.example:8443`, comma-separated) whose
    /// pages may call the HTTP API: a request with an `Origin` header not
    /// listed is refused (403), and CORS preflights are answered for these
    /// only. Default: none, no browser page may call it.
    #[arg(long, env = "KILN_HTTP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub http_allowed_origins: Vec<String>,

    /// After SIGTERM/SIGINT, how long in-flight requests and connections may
    /// take before the database is closed anyway.
    #[arg(long, env = "KILN_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Queries slower than this are logged (one line each, with the SQL).
    #[arg(long, env = "KILN_SLOW_QUERY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub slow_query: Duration,

    #[command(flatten)]
    pub auth: auth::AuthConfig,

    #[command(flatten)]
    pub tls: TlsConfig,
}

/// State shared by every HTTP handler.
pub struct AppState {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    pub config: ServerConfig,
    /// `--body-memory-limit`: the bodies of requests in flight (and the
    /// data of COPYs in progress).
    pub bodies: Arc<MemoryBudget>,
    pub shutting_down: AtomicBool,
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `kiln serve` until SIGTERM or SIGINT.
pub async fn run(
    storage: StorageConfig,
    query: QueryConfig,
    config: ServerConfig,
) -> Result<(), BoxError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Handlers are installed before anything is served, so an early signal is not lost.
    let signals = shutdown_signals()?;
    tokio::spawn(async move {
        signals.await;
        tracing::info!("shutdown signal received");
        let _ = stop_tx.send(true);
    });
    serve(storage, query, config, stop_rx).await
}

/// Serves until `stop` turns true, then shuts down gracefully.
pub async fn serve(
    storage: StorageConfig,
    query: QueryConfig,
    config: ServerConfig,
    stop: watch::Receiver<bool>,
) -> Result<(), BoxError> {
    // Certificate errors are found before the database is opened.
    let tls = Tls::from_config(&config.tls)?;
    let db = Db::open(storage).await?;
    let result = serve_db(db.clone(), &query, config, tls, stop).await;
    let closed = db.close().await;
    result?;
    closed?;
    tracing::info!("kiln stopped");
    Ok(())
}

async fn serve_db(
    db: Db,
    query: &QueryConfig,
    config: ServerConfig,
    tls: Option<Arc<Tls>>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BoxError> {
    let engine = Arc::new(Engine::with_config(db, query)?);
    let prewarm = engine.caches().segments.prewarm(engine.db());
    tracing::info!(
        segments = prewarm,
        "segment cache: decoding the newest segments"
    );
    let pg_shared = pg::setup_catalog(&engine, &config)?;
    let auth_on = config
        .auth
        .apply(&engine, &[config.http_addr, config.pg_addr])?;
    tracing::info!(auth = auth_on, "authentication");
    let metrics = Arc::new(Metrics::new());
    observe_queries(&engine, metrics.clone(), config.slow_query);

    let http_listener = TcpListener::bind(config.http_addr)
        .await
        .map_err(|e| format!("binding --http-addr {}: {e}", config.http_addr))?;
    let pg_listener = TcpListener::bind(config.pg_addr)
        .await
        .map_err(|e| format!("binding --pg-addr {}: {e}", config.pg_addr))?;
    let http_addr = http_listener.local_addr()?;
    let pg_addr = pg_listener.local_addr()?;

    let grace = config.shutdown_grace;
    let bodies = Arc::new(MemoryBudget::new(config.body_memory_limit.as_usize()));
    let state = Arc::new(AppState {
        engine: engine.clone(),
        metrics: metrics.clone(),
        bodies: bodies.clone(),
        config: config.clone(),
        shutting_down: AtomicBool::new(false),
    });
    let app = http::router(state.clone());
    let limits = conn::Limits {
        max_connections: config.http_max_connections as usize,
        idle: config.http_idle_timeout,
    };
    let http_task = match &tls {
        Some(tls) => {
            tls.reload_on_sighup(metrics.clone())?;
            let inner = tls::http::TlsListener::new(http_listener, tls, metrics.clone())?;
            let listener = conn::Counted {
                inner,
                metrics: metrics.clone(),
            };
            tokio::spawn(conn::serve(listener, app, limits, stop.clone()))
        }
        None => {
            let listener = conn::Counted {
                inner: http_listener.tap_io(conn::no_delay),
                metrics: metrics.clone(),
            };
            tokio::spawn(conn::serve(listener, app, limits, stop.clone()))
        }
    };
    let handlers = Arc::new(
        pg::Handlers::new(engine.clone(), metrics.clone(), &config, bodies, pg_shared)
            .with_tls(tls.clone()),
    );
    let pg_task = tokio::spawn(pg::accept_loop(pg_listener, handlers, stop.clone()));

    eprintln!("kiln listening http={http_addr} pg={pg_addr}");
    tracing::info!(%http_addr, %pg_addr, "kiln listening");

    let _ = stop.wait_for(|s| *s).await;
    state.shutting_down.store(true, Ordering::Release);
    tracing::info!(grace = ?grace, "shutting down: no new connections");

    // Both listeners stop accepting at once; in-flight work shares one grace period.
    let deadline = tokio::time::Instant::now() + grace;
    let mut pg_conns = pg_task.await?;
    let drained = tokio::time::timeout_at(deadline, async {
        let http = http_task.await;
        while pg_conns.join_next().await.is_some() {}
        http
    })
    .await;
    match drained {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("http server task: {e}"),
        Err(_) => {
            let n = engine.queries().cancel_all();
            tracing::warn!(
                cancelled = n,
                "shutdown grace period over; cancelling queries, closing connections"
            );
            pg_conns.abort_all();
        }
    }
    Ok(())
}

/// Every finished query, whatever its protocol, is counted and timed (arrival
/// to last row) and, when slow, logged once.
fn observe_queries(engine: &Engine, metrics: Arc<Metrics>, slow: Duration) {
    engine.queries().set_observer(Box::new(move |q| {
        let elapsed = q.elapsed();
        let status = q.status().as_str();
        metrics.query(q.protocol, status, elapsed);
        if elapsed >= slow {
            tracing::warn!(
                query_id = q.id,
                protocol = q.protocol,
                elapsed_ms = elapsed.as_millis() as u64,
                status,
                rows = q.rows(),
                sql = %q.text,
                "slow query"
            );
        }
    }));
}

#[cfg(unix)]
fn shutdown_signals() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signals() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
