//! Prometheus metrics served on `GET /metrics`. Counters kept by the server
//! (queries, write latency) live in a registry here; counters kept by the
//! storage engine (rows written, WAL fsyncs, flushes) and per-table sizes are
//! copied from the `Db` at scrape time, so nothing on the write path pays
//! for metrics it does not already keep.

use kiln_query::Engine;
use kiln_storage::budget::MemoryBudget;
use kiln_storage::{LATENCY_BOUNDS_S, LatencySnapshot};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::atomic::Ordering;

pub const QUERIES_TOTAL: &str = "kiln_queries_total";
pub const QUERY_DURATION: &str = "kiln_query_duration_seconds";
pub const HTTP_WRITES_TOTAL: &str = "kiln_http_writes_total";
pub const WRITE_DURATION: &str = "kiln_write_duration_seconds";
pub const ROWS_WRITTEN: &str = "kiln_rows_written_total";
pub const BYTES_WRITTEN: &str = "kiln_bytes_written_total";
pub const WAL_FSYNCS: &str = "kiln_wal_fsyncs_total";
pub const WAL_GROUPS: &str = "kiln_wal_groups_total";
pub const WAL_BYTES: &str = "kiln_wal_bytes_total";
pub const FLUSHES: &str = "kiln_flushes_total";
pub const COMPACTIONS: &str = "kiln_compactions_total";
pub const ROWS_FLUSHED: &str = "kiln_rows_flushed_total";
pub const ROWS_COMPACTED: &str = "kiln_rows_compacted_total";
pub const CUBE_PARTS_MERGED: &str = "kiln_cube_parts_merged_total";
pub const COMPACTION_DURATION: &str = "kiln_compaction_duration_seconds";
pub const MEMSTORE_BYTES: &str = "kiln_memstore_bytes";
pub const SEGMENTS: &str = "kiln_segments";
pub const SEGMENT_BYTES: &str = "kiln_segment_bytes";
pub const WAL_FSYNC_DURATION: &str = "kiln_wal_fsync_duration_seconds";
pub const FLUSH_DURATION: &str = "kiln_flush_duration_seconds";
pub const OPEN_CONNECTIONS: &str = "kiln_open_connections";
pub const SEGMENT_CACHE_BYTES: &str = "kiln_segment_cache_bytes";
pub const SEGMENT_CACHE_SEGMENTS: &str = "kiln_segment_cache_segments";
pub const SEGMENT_CACHE_HITS: &str = "kiln_segment_cache_hits_total";
pub const SEGMENT_CACHE_MISSES: &str = "kiln_segment_cache_misses_total";
pub const PARTIAL_CACHE_BYTES: &str = "kiln_partial_cache_bytes";
pub const PARTIAL_CACHE_HITS: &str = "kiln_partial_cache_hits_total";
pub const PARTIAL_CACHE_MISSES: &str = "kiln_partial_cache_misses_total";
pub const PLAN_GENERIC_RUNS: &str = "kiln_plan_cache_generic_runs_total";
pub const PLAN_UNPARSED_RUNS: &str = "kiln_plan_cache_unparsed_runs_total";
pub const PLAN_CUSTOM_RUNS: &str = "kiln_plan_cache_custom_runs_total";
pub const PLAN_INSTANCES: &str = "kiln_plan_cache_instances_planned_total";
pub const PLAN_SHORT_RUNS: &str = "kiln_plan_cache_short_runs_total";
pub const PLAN_SHORT_MOVED: &str = "kiln_plan_cache_short_moved_total";
pub const QUERIES_RUNNING: &str = "kiln_queries_running";
pub const QUERIES_QUEUED: &str = "kiln_queries_queued";
pub const QUERY_WAIT: &str = "kiln_query_wait_seconds_total";
pub const QUERY_MEMORY: &str = "kiln_query_memory_bytes";
pub const QUERY_MEMORY_LIMIT: &str = "kiln_query_memory_limit_bytes";
pub const QUERY_MEMORY_HEAP: &str = "kiln_query_memory_heap_bytes";
pub const HEAP: &str = "kiln_heap_bytes";
pub const WRITE_MEMORY: &str = "kiln_write_memory_bytes";
pub const WRITE_MEMORY_LIMIT: &str = "kiln_write_memory_limit_bytes";
pub const WRITE_MEMORY_WAITS: &str = "kiln_write_memory_waits_total";
pub const WRITES_PACED: &str = "kiln_writes_paced_total";
pub const WRITE_PACE: &str = "kiln_write_pace_seconds_total";
pub const BODY_MEMORY: &str = "kiln_body_memory_bytes";
pub const BODY_MEMORY_LIMIT: &str = "kiln_body_memory_limit_bytes";
pub const BODY_MEMORY_WAITS: &str = "kiln_body_memory_waits_total";
pub const DEGRADED: &str = "kiln_degraded";
pub const AUTH_FAILURES: &str = "kiln_auth_failures_total";
pub const PERMISSION_DENIED: &str = "kiln_permission_denied_total";
pub const TLS_HANDSHAKES: &str = "kiln_tls_handshakes_total";
pub const TLS_PLAINTEXT_REFUSED: &str = "kiln_tls_plaintext_refused_total";
pub const PG_REFUSED: &str = "kiln_pg_connections_refused_total";
pub const TLS_CERT_RELOADS: &str = "kiln_tls_cert_reloads_total";
pub const STORE_REQUESTS: &str = "kiln_object_store_requests_total";
pub const STORE_ERRORS: &str = "kiln_object_store_errors_total";
pub const STORE_FETCHED_BYTES: &str = "kiln_object_store_fetched_bytes_total";
pub const STORE_PUT_BYTES: &str = "kiln_object_store_put_bytes_total";
pub const STORE_DURATION: &str = "kiln_object_store_request_duration_seconds";
pub const CACHE_LOOKUPS: &str = "kiln_object_cache_lookups_total";
pub const CACHE_HITS: &str = "kiln_object_cache_hits_total";
pub const CACHE_MISSES: &str = "kiln_object_cache_misses_total";
pub const CACHE_READ_BYTES: &str = "kiln_object_cache_read_bytes_total";
pub const CACHE_WRITTEN_THROUGH: &str = "kiln_object_cache_written_through_total";
pub const CACHE_EVICTIONS: &str = "kiln_object_cache_evictions_total";
pub const CACHE_MEMORY_BYTES: &str = "kiln_object_cache_memory_bytes";
pub const CACHE_MEMORY_CAPACITY: &str = "kiln_object_cache_memory_capacity_bytes";
pub const CACHE_DISK_CAPACITY: &str = "kiln_object_cache_disk_capacity_bytes";
pub const CACHE_DISK_WRITTEN: &str = "kiln_object_cache_disk_written_bytes_total";
pub const CACHE_DISK_READ: &str = "kiln_object_cache_disk_read_bytes_total";

/// Protocol labels.
pub const HTTP: &str = "http";
pub const PG: &str = "pg";
/// Write outcome labels: `rejected` is the client's fault (4xx), `error` the server's.
pub const OUTCOMES: [&str; 3] = ["ok", "rejected", "error"];
/// Query outcome labels: the final status of a query in `system.queries`.
pub const QUERY_OUTCOMES: [&str; 5] = ["ok", "error", "cancelled", "timeout", "overloaded"];
/// TLS handshake and certificate reload outcome labels.
pub const TLS_OUTCOMES: [&str; 2] = ["ok", "failed"];
/// Write format labels (`BodyFormat` in lower case).
pub const FORMATS: [&str; 4] = ["ndjson", "csv", "arrowstream", "parquet"];

fn outcome_index(outcome: &str) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(2)
}

/// Children of the labelled metrics, resolved once: recording a query or a
/// write touches atomics only, never the label map's lock.
struct Resolved {
    /// Per protocol (HTTP, PG): counters per outcome and the latency histogram.
    queries: [([IntCounter; 5], Histogram); 2],
    writes: [IntCounter; 3],
    write_duration: [Histogram; 4],
    /// Open connections per protocol (HTTP, PG).
    connections: [IntGauge; 2],
    /// TLS handshakes per protocol (HTTP, PG) and outcome ([`TLS_OUTCOMES`]).
    tls_handshakes: [[IntCounter; 2]; 2],
    /// Plaintext connections refused by `--tls-required`, per protocol.
    tls_refused: [IntCounter; 2],
    /// Certificate reloads per outcome ([`TLS_OUTCOMES`]).
    tls_reloads: [IntCounter; 2],
    /// PostgreSQL connections refused with 53300, per [`PG_REFUSED_AT`].
    pg_refused: [IntCounter; 2],
}

/// Where a PostgreSQL connection past the limits is refused: at its startup
/// message (`--pg-max-connections`), or as it is accepted (sockets open,
/// started or starting, at twice that).
pub const PG_REFUSED_AT: [&str; 2] = ["startup", "accept"];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    rows_written: IntCounter,
    bytes_written: IntCounter,
    wal_fsyncs: IntCounter,
    wal_groups: IntCounter,
    wal_bytes: IntCounter,
    flushes: IntCounter,
    rows_flushed: IntCounter,
    compactions: IntCounter,
    rows_compacted: IntCounter,
    cube_parts_merged: IntCounter,
    memstore_bytes: IntGaugeVec,
    segments: IntGaugeVec,
    segment_bytes: IntGaugeVec,
    cache_bytes: IntGauge,
    cache_segments: IntGauge,
    cache_hits: IntCounter,
    cache_misses: IntCounter,
    partial_bytes: IntGauge,
    partial_hits: IntCounter,
    partial_misses: IntCounter,
    plan_generic_runs: IntCounter,
    plan_unparsed_runs: IntCounter,
    plan_custom_runs: IntCounter,
    plan_instances: IntCounter,
    plan_short_runs: IntCounter,
    plan_short_moved: IntCounter,
    resolved: Resolved,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
            let h = HistogramVec::new(opts, labels).expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let gauge_vec = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["table"]).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let queries = counter_vec(
            QUERIES_TOTAL,
            "SQL queries finished, by protocol and outcome (ok, error, cancelled, timeout, overloaded).",
            &["protocol", "outcome"],
        );
        let query_duration = histogram(
            QUERY_DURATION,
            "SQL query latency, arrival to last row sent.",
            &["protocol"],
        );
        let writes = counter_vec(
            HTTP_WRITES_TOTAL,
            "POST /v1/write requests, by outcome.",
            &["outcome"],
        );
        let write_duration = histogram(
            WRITE_DURATION,
            "POST /v1/write latency (decode, WAL, memstore).",
            &["format"],
        );
        let per_protocol = |p: &str| {
            (
                QUERY_OUTCOMES.map(|o| queries.with_label_values(&[p, o])),
                query_duration.with_label_values(&[p]),
            )
        };
        let connections = IntGaugeVec::new(
            Opts::new(OPEN_CONNECTIONS, "Open client connections, by protocol."),
            &["protocol"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(connections.clone()))
            .expect("unique metric");
        let handshakes = counter_vec(
            TLS_HANDSHAKES,
            "TLS handshakes, by protocol and outcome (ok, failed).",
            &["protocol", "outcome"],
        );
        let refused = counter_vec(
            TLS_PLAINTEXT_REFUSED,
            "Plaintext connections refused because of --tls-required, by protocol.",
            &["protocol"],
        );
        let reloads = counter_vec(
            TLS_CERT_RELOADS,
            "TLS certificate reloads on SIGHUP, by outcome (ok, failed: old certificate kept).",
            &["outcome"],
        );
        let pg_refused = counter_vec(
            PG_REFUSED,
            "PostgreSQL connections refused with 53300, by where (startup: past --pg-max-connections; accept: past twice that many sockets open).",
            &["at"],
        );
        let resolved = Resolved {
            pg_refused: PG_REFUSED_AT.map(|a| pg_refused.with_label_values(&[a])),
            connections: [HTTP, PG].map(|p| connections.with_label_values(&[p])),
            tls_handshakes: [HTTP, PG]
                .map(|p| TLS_OUTCOMES.map(|o| handshakes.with_label_values(&[p, o]))),
            tls_refused: [HTTP, PG].map(|p| refused.with_label_values(&[p])),
            tls_reloads: TLS_OUTCOMES.map(|o| reloads.with_label_values(&[o])),
            queries: [per_protocol(HTTP), per_protocol(PG)],
            writes: OUTCOMES.map(|o| writes.with_label_values(&[o])),
            write_duration: FORMATS.map(|f| write_duration.with_label_values(&[f])),
        };
        Self {
            resolved,
            rows_written: counter(
                ROWS_WRITTEN,
                "Rows written through the WAL (all protocols).",
            ),
            bytes_written: counter(BYTES_WRITTEN, "WAL payload bytes written."),
            wal_fsyncs: counter(WAL_FSYNCS, "fdatasync calls on WAL segment files."),
            wal_groups: counter(WAL_GROUPS, "WAL group commits."),
            wal_bytes: counter(WAL_BYTES, "WAL frame bytes written."),
            flushes: counter(FLUSHES, "Memstore flushes to Parquet segments."),
            rows_flushed: counter(ROWS_FLUSHED, "Rows written to segments by flushes."),
            compactions: counter(COMPACTIONS, "Segment compactions."),
            rows_compacted: counter(ROWS_COMPACTED, "Rows rewritten by compactions."),
            cube_parts_merged: counter(
                CUBE_PARTS_MERGED,
                "Cube parts compactions merged from their inputs' parts.",
            ),
            memstore_bytes: gauge_vec(MEMSTORE_BYTES, "Bytes held in a table's memstore."),
            segments: gauge_vec(SEGMENTS, "Parquet segments in a table's current manifest."),
            segment_bytes: gauge_vec(SEGMENT_BYTES, "Bytes of a table's Parquet segments."),
            cache_bytes: gauge(
                SEGMENT_CACHE_BYTES,
                "Memory held by decoded segments in the segment cache.",
            ),
            cache_segments: gauge(SEGMENT_CACHE_SEGMENTS, "Segments held decoded."),
            cache_hits: counter(
                SEGMENT_CACHE_HITS,
                "Segment scans served from the segment cache.",
            ),
            cache_misses: counter(
                SEGMENT_CACHE_MISSES,
                "Segment scans that read Parquet (and queued the segment for decoding).",
            ),
            partial_bytes: gauge(
                PARTIAL_CACHE_BYTES,
                "Memory held by partial aggregates of held segments.",
            ),
            partial_hits: counter(
                PARTIAL_CACHE_HITS,
                "Segments whose partial aggregate a query found kept.",
            ),
            partial_misses: counter(
                PARTIAL_CACHE_MISSES,
                "Segments whose partial aggregate a query computed (and kept).",
            ),
            plan_generic_runs: counter(
                PLAN_GENERIC_RUNS,
                "Executions that ran a kept generic plan.",
            ),
            plan_unparsed_runs: counter(
                PLAN_UNPARSED_RUNS,
                "Queries run unparsed through the shape their text's template learned: with their values written in, or the same text sent with its values apart (HTTP params).",
            ),
            plan_short_runs: counter(
                PLAN_SHORT_RUNS,
                "Generic runs expected short, started on the protocol runtime instead of the execution runtime.",
            ),
            plan_short_moved: counter(
                PLAN_SHORT_MOVED,
                "Runs expected short that used their CPU time and moved to the execution runtime.",
            ),
            plan_custom_runs: counter(
                PLAN_CUSTOM_RUNS,
                "Executions of kept statements and shapes planned with their values.",
            ),
            plan_instances: counter(
                PLAN_INSTANCES,
                "Generic plan instances planned (none idle, or settings, share of cores or tables changed).",
            ),
            registry,
        }
    }

    /// Records one finished query (`outcome`: one of [`QUERY_OUTCOMES`]).
    pub fn query(&self, protocol: &str, outcome: &str, elapsed: std::time::Duration) {
        let (outcomes, duration) = &self.resolved.queries[usize::from(protocol == PG)];
        let i = QUERY_OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(1);
        outcomes[i].inc();
        duration.observe(elapsed.as_secs_f64());
    }

    /// Counts a connection as open until the guard is dropped.
    pub fn connection(&self, protocol: &str) -> ConnectionGuard {
        let g = self.resolved.connections[usize::from(protocol == PG)].clone();
        g.inc();
        ConnectionGuard(g)
    }

    /// Records one TLS handshake on `protocol` ([`HTTP`] or [`PG`]).
    pub fn tls_handshake(&self, protocol: &str, ok: bool) {
        self.resolved.tls_handshakes[usize::from(protocol == PG)][usize::from(!ok)].inc();
    }

    /// Records a plaintext connection refused by `--tls-required`.
    pub fn tls_plaintext_refused(&self, protocol: &str) {
        self.resolved.tls_refused[usize::from(protocol == PG)].inc();
    }

    /// Records a PostgreSQL connection refused with 53300, at its startup
    /// message or as it was accepted.
    pub fn pg_refused(&self, at_accept: bool) {
        self.resolved.pg_refused[usize::from(at_accept)].inc();
    }

    /// Records one certificate reload.
    pub fn tls_reload(&self, ok: bool) {
        self.resolved.tls_reloads[usize::from(!ok)].inc();
    }

    /// Records one HTTP write request; latency only for successful ones.
    pub fn write(&self, format: &str, outcome: &str, elapsed: std::time::Duration) {
        self.resolved.writes[outcome_index(outcome)].inc();
        if let (0, Some(i)) = (
            outcome_index(outcome),
            FORMATS.iter().position(|f| *f == format),
        ) {
            self.resolved.write_duration[i].observe(elapsed.as_secs_f64());
        }
    }

    /// Prometheus text exposition, with the engine's numbers as of now.
    /// The exposition text; `bodies` is `--body-memory-limit`'s budget.
    pub fn render(&self, engine: &Engine, bodies: &MemoryBudget) -> String {
        let db = engine.db();
        let set = |c: &IntCounter, v: u64| c.inc_by(v.saturating_sub(c.get()));
        let cache = &engine.caches().segments;
        self.cache_bytes.set(cache.usage() as i64);
        self.cache_segments.set(cache.entries() as i64);
        let (hits, misses) = cache.lookups();
        set(&self.cache_hits, hits);
        set(&self.cache_misses, misses);
        let partials = &engine.caches().partials;
        self.partial_bytes.set(partials.usage() as i64);
        let (hits, misses) = partials.lookups();
        set(&self.partial_hits, hits);
        set(&self.partial_misses, misses);
        let plans = engine.plans().counts();
        set(&self.plan_generic_runs, plans.generic_runs);
        set(&self.plan_custom_runs, plans.custom_runs);
        set(&self.plan_unparsed_runs, plans.unparsed_runs);
        set(&self.plan_instances, plans.instances_planned);
        set(&self.plan_short_runs, plans.short_runs);
        set(&self.plan_short_moved, plans.short_moved);
        let m = db.metrics();
        set(&self.rows_written, m.rows_written.load(Ordering::Relaxed));
        set(&self.bytes_written, m.bytes_written.load(Ordering::Relaxed));
        set(&self.flushes, m.flushes.load(Ordering::Relaxed));
        set(&self.rows_flushed, m.rows_flushed.load(Ordering::Relaxed));
        set(&self.compactions, m.compactions.load(Ordering::Relaxed));
        set(
            &self.rows_compacted,
            m.rows_compacted.load(Ordering::Relaxed),
        );
        set(
            &self.cube_parts_merged,
            m.parts_merged.load(Ordering::Relaxed),
        );
        let wal = db.wal_stats();
        set(&self.wal_fsyncs, wal.fsyncs);
        set(&self.wal_groups, wal.groups);
        set(&self.wal_bytes, wal.bytes);
        self.memstore_bytes.reset();
        self.segments.reset();
        self.segment_bytes.reset();
        for t in db.tables() {
            let segments = t.segments();
            self.segment_bytes
                .with_label_values(&[t.name()])
                .set(segments.iter().map(|s| s.meta.bytes).sum::<u64>() as i64);
            self.memstore_bytes
                .with_label_values(&[t.name()])
                .set(t.mem.bytes() as i64);
            self.segments
                .with_label_values(&[t.name()])
                .set(segments.len() as i64);
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!("encoding metrics: {e}");
        }
        let mut text = String::from_utf8(out).unwrap_or_default();
        let histograms = [
            (
                WAL_FSYNC_DURATION,
                "WAL fdatasync latency.",
                wal.fsync_latency,
            ),
            (
                FLUSH_DURATION,
                "Memstore flush duration (sort, encode, write, manifest swap).",
                m.flush_duration.snapshot(),
            ),
            (
                COMPACTION_DURATION,
                "Compaction duration (read, merge, encode, write, manifest swap).",
                m.compaction_duration.snapshot(),
            ),
            (
                STORE_DURATION,
                "Latency of requests to the object store (local disk or S3).",
                db.store().metrics().latency.snapshot(),
            ),
        ];
        for (name, help, h) in histograms {
            render_histogram(&mut text, name, help, &h);
        }
        let queries = engine.queries();
        let pool = &engine.session().runtime_env().memory_pool;
        let limit = match pool.memory_limit() {
            datafusion::execution::memory_pool::MemoryLimit::Finite(n) => n as f64,
            _ => f64::INFINITY,
        };
        let heap_in_queries = queries
            .memory_pool()
            .and_then(|p| p.heap_in_queries())
            .map_or(f64::NAN, |n| n as f64);
        let heap = kiln_query::memory::heap::allocated().map_or(f64::NAN, |n| n as f64);
        let writes = db.write_budget();
        let gauges = [
            (
                QUERIES_RUNNING,
                "gauge",
                "Queries holding an execution slot.",
                queries.running() as f64,
            ),
            (
                QUERIES_QUEUED,
                "gauge",
                "Queries waiting for an execution slot.",
                queries.queued() as f64,
            ),
            (
                QUERY_WAIT,
                "counter",
                "Time queries spent waiting for a slot.",
                queries.waited().as_secs_f64(),
            ),
            (
                QUERY_MEMORY,
                "gauge",
                "Execution memory queries hold (--memory-limit).",
                pool.reserved() as f64,
            ),
            (
                QUERY_MEMORY_LIMIT,
                "gauge",
                "The execution memory limit.",
                limit,
            ),
            (
                QUERY_MEMORY_HEAP,
                "gauge",
                "Heap held for queries, reserved or not: the heap's growth since start less memstores and caches.",
                heap_in_queries,
            ),
            (
                HEAP,
                "gauge",
                "Bytes live on the process heap, counted at the allocator.",
                heap,
            ),
            (
                WRITE_MEMORY,
                "gauge",
                "Memory writes in flight reserved (--write-memory-limit).",
                writes.reserved_bytes() as f64,
            ),
            (
                WRITE_MEMORY_LIMIT,
                "gauge",
                "The memory writes in flight may reserve together.",
                writes.limit_bytes() as f64,
            ),
            (
                WRITE_MEMORY_WAITS,
                "counter",
                "Writes that found the write memory reserved and waited.",
                writes.waits() as f64,
            ),
            (
                WRITES_PACED,
                "counter",
                "Writes that waited first because their table's flushes fell behind.",
                db.metrics().writes_paced.load(Ordering::Relaxed) as f64,
            ),
            (
                WRITE_PACE,
                "counter",
                "Time writes waited because their table's flushes fell behind.",
                db.metrics().pace_micros.load(Ordering::Relaxed) as f64 / 1e6,
            ),
            (
                BODY_MEMORY,
                "gauge",
                "Memory the bodies of HTTP requests in flight and COPY data reserved (--body-memory-limit).",
                bodies.reserved_bytes() as f64,
            ),
            (
                BODY_MEMORY_LIMIT,
                "gauge",
                "The memory HTTP request bodies and COPY data may reserve together.",
                bodies.limit_bytes() as f64,
            ),
            (
                BODY_MEMORY_WAITS,
                "counter",
                "HTTP requests and COPY data that found the body memory reserved and waited.",
                bodies.waits() as f64,
            ),
            (
                DEGRADED,
                "gauge",
                "1 while writes or flushes are failing (see /ready).",
                f64::from(u8::from(db.degraded().is_some())),
            ),
        ];
        for (name, kind, help, v) in gauges {
            use std::fmt::Write as _;
            let _ = writeln!(
                text,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        render_store(&mut text, db.store());
        let c = &engine.auth().counters;
        {
            use std::fmt::Write as _;
            use std::sync::atomic::Ordering::Relaxed;
            let _ = writeln!(
                text,
                "# HELP {AUTH_FAILURES} Logins refused (wrong password, unknown user, bad, expired or revoked token, no credentials).\n# TYPE {AUTH_FAILURES} counter\n{AUTH_FAILURES}{{protocol=\"{PG}\"}} {}\n{AUTH_FAILURES}{{protocol=\"{HTTP}\"}} {}",
                c.pg_failed.load(Relaxed),
                c.http_failed.load(Relaxed),
            );
            let _ = writeln!(
                text,
                "# HELP {PERMISSION_DENIED} Statements and writes refused for want of a privilege.\n# TYPE {PERMISSION_DENIED} counter\n{PERMISSION_DENIED} {}",
                c.denied.load(Relaxed),
            );
        }
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Appends the object store's request counters and its cache's.
fn render_store(out: &mut String, store: &kiln_storage::Store) {
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let m = store.metrics();
    let _ = writeln!(
        out,
        "# HELP {STORE_REQUESTS} Requests to the object store, by operation.\n# TYPE {STORE_REQUESTS} counter"
    );
    for (op, c) in [
        ("get", &m.gets),
        ("put", &m.puts),
        ("list", &m.lists),
        ("delete", &m.deletes),
    ] {
        let _ = writeln!(out, "{STORE_REQUESTS}{{op=\"{op}\"}} {}", c.load(Relaxed));
    }
    let mut line = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    let counters = [
        (
            STORE_ERRORS,
            "Object store requests that failed after retries.",
            m.errors.load(Relaxed),
        ),
        (
            STORE_FETCHED_BYTES,
            "Object bytes read from the store.",
            m.bytes_fetched.load(Relaxed),
        ),
        (
            STORE_PUT_BYTES,
            "Object bytes written to the store.",
            m.bytes_put.load(Relaxed),
        ),
    ];
    for (name, help, v) in counters {
        line(name, "counter", help, v);
    }
    let Some(c) = store.cache_stats() else {
        return;
    };
    let rows = [
        (
            CACHE_LOOKUPS,
            "counter",
            "Chunk lookups in the object cache.",
            c.lookups,
        ),
        (
            CACHE_HITS,
            "counter",
            "Chunk lookups served from memory or disk.",
            c.hits,
        ),
        (
            CACHE_MISSES,
            "counter",
            "Chunk lookups fetched from the object store.",
            c.misses,
        ),
        (
            CACHE_READ_BYTES,
            "counter",
            "Bytes the object cache handed to readers.",
            c.bytes_read,
        ),
        (
            CACHE_WRITTEN_THROUGH,
            "counter",
            "Chunks of newly written files put in the cache.",
            c.written_through,
        ),
        (
            CACHE_EVICTIONS,
            "counter",
            "Chunks evicted from the memory tier.",
            c.evictions,
        ),
        (
            CACHE_MEMORY_BYTES,
            "gauge",
            "Bytes held by the memory tier.",
            c.memory_used,
        ),
        (
            CACHE_MEMORY_CAPACITY,
            "gauge",
            "Capacity of the memory tier (--cache-memory).",
            c.memory_capacity,
        ),
        (
            CACHE_DISK_CAPACITY,
            "gauge",
            "Capacity of the disk tier (--cache-disk; 0: off).",
            c.disk_capacity,
        ),
        (
            CACHE_DISK_WRITTEN,
            "counter",
            "Bytes written to the disk tier.",
            c.disk_written,
        ),
        (
            CACHE_DISK_READ,
            "counter",
            "Bytes read from the disk tier.",
            c.disk_read,
        ),
    ];
    for (name, kind, help, v) in rows {
        line(name, kind, help, v);
    }
}

/// Appends one histogram kept by the storage engine, in the text format.
fn render_histogram(out: &mut String, name: &str, help: &str, h: &LatencySnapshot) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (bound, n) in LATENCY_BOUNDS_S.iter().zip(&h.cumulative) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count());
    let _ = writeln!(
        out,
        "{name}_sum {}\n{name}_count {}",
        h.sum_seconds,
        h.count()
    );
}

/// Decrements the open-connections gauge when dropped.
pub struct ConnectionGuard(IntGauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
