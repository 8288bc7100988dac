//! Kiln's storage engine.
//!
//! A write is validated, appended to the WAL ([`kiln_wal`]) and applied to
//! its table's [`MemStore`] before it is acknowledged: from then on it is
//! durable (under `--wal-sync=always`) and visible to every new snapshot.
//! Writes in flight share one memory budget ([`budget`]); writes to a table
//! whose flushes fall behind wait a moment first ([`pace`]).
//! In the background, memstores are flushed as sorted Parquet segments and
//! small segments are compacted; each new segment gets its [`cube`] parts
//! (aggregate states) in the same commit; each change is committed by writing a new
//! [`Manifest`] version and swapping one pointer. Queries pin a
//! [`TableSnapshot`] — a manifest version plus the in-memory rows not in it —
//! and never wait for writers, flushes or compactions.
//!
//! Layout of a data directory (with `--storage`, the objects marked `*` are
//! in object storage instead, under the same names, and `cache/` holds the
//! disk tier of the object cache; see [`Store`]):
//! ```text
//! LOCK                                  one process owns the directory
//! catalog.json                        * table definitions
//! wal/{first_seq}.wal                   WAL segments
//! idempotency.json                      live idempotency keys, saved before WAL files are deleted
//! tables/{id}/manifest/{version}.json * the newest manifest of a table
//! tables/{id}/{YYYY-MM-DD}/{uuid}.parquet         * segments, by (first) day
//! tables/{id}/{YYYY-MM-DD}/{uuid}.cube{n}.parquet  * a segment's part of cube n
//! ```

mod background;
pub mod budget;
mod catalog;
pub mod clock;
mod codec;
mod config;
pub mod cpu;
pub mod cube;
mod db;
mod error;
pub mod failpoints;
mod fs_util;
mod idempotency;
pub mod ipc;
pub mod manifest;
pub mod memstore;
pub mod pace;
pub mod schema;
pub mod segment;
pub mod size;
mod store;
pub mod strict;
mod table;
pub mod testing;

pub use clock::{Clock, ManualClock, SystemClock};
pub use codec::decode_payload as decode_wal_payload;
pub use config::{CacheConfig, ObjectStoreConfig, SegmentCompression, StorageConfig, WalSync};
pub use cpu::{CpuPool, CpuRuntime, Urgency};
pub use cube::{CubeBuilder, CubeColumn, CubeDef, Part, PartMeta};
pub use db::{
    Ack, CreateCube, CreateTable, Db, MEMSTORE_WAIT, StorageMetrics, WriteOptions, Written,
};
pub use error::{Error, ErrorKind, Result};
pub use fs_util::replace_file;
pub use idempotency::{IdempotencyKey, MAX_KEY_BYTES, fingerprint};
pub use kiln_wal::{
    LATENCY_BOUNDS_S, LatencyHistogram, LatencySnapshot, MAX_RECORD_BYTES, WalStats,
};
pub use manifest::{Manifest, Segment, SegmentMeta, StatValue};
pub use memstore::{MemStore, TableSnapshot};
pub use schema::{ColumnDef, ColumnType, NANOS_PER_DAY, TableDef};
pub use size::ByteSize;
pub use store::{CacheStats, Observer, ReadObserver, STORE_URL, Store, StoreMetrics};
pub use strict::TimestampUnit;
pub use table::Table;
