//! `system.cache`: the caches and the object store under them, one row per
//! number (`layer`, `metric`, `value`), so a dashboard or a test can ask
//! for one figure with a plain WHERE. Layers, top down: `segments` (decoded
//! batches), `partials` (partial aggregates), `objects` (byte ranges of
//! files, memory and disk, only in front of a remote store) and `store`
//! (the requests that reached the backend).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use arrow::array::{Int64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use kiln_storage::Db;

use crate::cache::Caches;

/// The columns of `system.cache`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("layer", DataType::Utf8, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("value", DataType::Int64, false),
    ]))
}

/// The rows of `system.cache` now.
pub fn batch(db: &Db, caches: &Caches) -> arrow::error::Result<RecordBatch> {
    let mut rows: Vec<(&str, &str, u64)> = vec![];
    let (segments, partials) = (&caches.segments, &caches.partials);
    for (layer, (hits, misses), entries, usage, capacity) in [
        (
            "segments",
            segments.lookups(),
            segments.entries(),
            segments.usage(),
            segments.capacity(),
        ),
        (
            "partials",
            partials.lookups(),
            partials.entries(),
            partials.usage(),
            partials.capacity(),
        ),
    ] {
        rows.extend([
            (layer, "hits", hits),
            (layer, "misses", misses),
            (layer, "entries", entries as u64),
            (layer, "memory_bytes", usage as u64),
            (layer, "memory_capacity", capacity as u64),
        ]);
    }
    if let Some(c) = db.store().cache_stats() {
        rows.extend([
            ("objects", "lookups", c.lookups),
            ("objects", "hits", c.hits),
            ("objects", "misses", c.misses),
            ("objects", "read_bytes", c.bytes_read),
            ("objects", "written_through", c.written_through),
            ("objects", "evictions", c.evictions),
            ("objects", "memory_bytes", c.memory_used),
            ("objects", "memory_capacity", c.memory_capacity),
            ("objects", "disk_capacity", c.disk_capacity),
            ("objects", "disk_written_bytes", c.disk_written),
            ("objects", "disk_read_bytes", c.disk_read),
            ("objects", "chunk_bytes", c.chunk_bytes),
        ]);
    }
    let m = db.store().metrics();
    let latency = m.latency.snapshot();
    rows.extend([
        ("store", "gets", m.gets.load(Relaxed)),
        ("store", "puts", m.puts.load(Relaxed)),
        ("store", "lists", m.lists.load(Relaxed)),
        ("store", "deletes", m.deletes.load(Relaxed)),
        ("store", "errors", m.errors.load(Relaxed)),
        ("store", "fetched_bytes", m.bytes_fetched.load(Relaxed)),
        ("store", "put_bytes", m.bytes_put.load(Relaxed)),
        (
            "store",
            "request_micros",
            (latency.sum_seconds * 1e6) as u64,
        ),
    ]);
    let (mut layer, mut metric, mut value) = (
        StringBuilder::new(),
        StringBuilder::new(),
        Int64Builder::new(),
    );
    for (l, n, v) in rows {
        layer.append_value(l);
        metric.append_value(n);
        value.append_value(v.min(i64::MAX as u64) as i64);
    }
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(layer.finish()),
            Arc::new(metric.finish()),
            Arc::new(value.finish()),
        ],
    )
}
