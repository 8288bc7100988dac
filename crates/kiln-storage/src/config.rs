//! Storage settings. Each is a flag with a `KILN_*` environment variable and
//! a default; the binary flattens this group into its one config struct.

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::size::ByteSize;

/// When the WAL fsyncs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WalSync {
    /// Fsync before acknowledging: an acknowledged row survives power loss.
    Always,
    /// Fsync every `--wal-sync-interval`: survives a process crash, may lose that much on power loss.
    Interval,
}

/// How segment pages are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SegmentCompression {
    /// LZ4 (Parquet's `LZ4_RAW`): decodes several times faster than zstd,
    /// files ~1.2x larger; ClickHouse's default for the same reason.
    Lz4,
    /// zstd level 1: smallest files, slowest scans.
    Zstd,
    /// No compression.
    None,
}

/// Settings of the storage engine.
#[derive(Clone, Debug, Args)]
pub struct StorageConfig {
    /// Directory holding the catalog, WAL and segments.
    #[arg(long, env = "KILN_DATA_DIR", default_value = "./kiln-data")]
    pub data_dir: std::path::PathBuf,

    /// WAL fsync policy.
    #[arg(long, env = "KILN_WAL_SYNC", value_enum, default_value = "always")]
    pub wal_sync: WalSync,

    /// Fsync period when --wal-sync=interval.
    #[arg(long, env = "KILN_WAL_SYNC_INTERVAL", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub wal_sync_interval: Duration,

    /// How long a group commit waits for more writers before writing (0: only those already queued).
    #[arg(long, env = "KILN_WAL_LINGER", default_value = "0ms", value_parser = humantime::parse_duration)]
    pub wal_linger: Duration,

    /// Largest group commit, in payload bytes.
    #[arg(long, env = "KILN_WAL_MAX_BATCH_BYTES", default_value = "8MiB")]
    pub wal_max_batch_bytes: ByteSize,

    /// Size at which the WAL starts a new segment file.
    #[arg(long, env = "KILN_WAL_SEGMENT_BYTES", default_value = "64MiB")]
    pub wal_segment_bytes: ByteSize,

    /// Payload bytes the WAL's commit queue may hold before `?ack=memory`
    /// writes wait for room (bounds memory when writers outpace the disk).
    #[arg(long, env = "KILN_WAL_MAX_QUEUED_BYTES", default_value = "64MiB")]
    pub wal_max_queued_bytes: ByteSize,

    /// Skip WAL records that fail their CRC during recovery instead of refusing to start.
    #[arg(long, env = "KILN_WAL_SKIP_CORRUPT", default_value_t = false)]
    pub wal_skip_corrupt: bool,

    /// Size at which a partition's active buffer is frozen into an immutable batch.
    #[arg(long, env = "KILN_MEMSTORE_FREEZE_BYTES", default_value = "4MiB")]
    pub memstore_freeze_bytes: ByteSize,

    /// A table's memstore is flushed to Parquet once it holds this much:
    /// its rows, the string views queries read them through, and cubes'
    /// states kept with them.
    #[arg(long, env = "KILN_FLUSH_BYTES", default_value = "96MiB")]
    pub flush_bytes: ByteSize,

    /// A table's memstore is flushed once its oldest row is this old.
    #[arg(long, env = "KILN_FLUSH_AGE", default_value = "60s", value_parser = humantime::parse_duration)]
    pub flush_age: Duration,

    /// Minimum pause between the starts of two flushes, so many tables never flush at once.
    #[arg(long, env = "KILN_FLUSH_GAP", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub flush_gap: Duration,

    /// How often the background task looks for tables to flush or compact.
    #[arg(long, env = "KILN_BACKGROUND_INTERVAL", default_value = "200ms", value_parser = humantime::parse_duration)]
    pub background_interval: Duration,

    /// Flush everything in memory when the database closes.
    #[arg(long, env = "KILN_FLUSH_ON_CLOSE", default_value_t = true, action = clap::ArgAction::Set)]
    pub flush_on_close: bool,

    /// Merge small segments of a partition in the background.
    #[arg(long, env = "KILN_COMPACTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub compaction: bool,

    /// Compression of new segments (flushes and compactions). Scans of a
    /// hot table spend most of their time decompressing pages: lz4 decodes
    /// several times faster than zstd. Existing segments keep theirs.
    #[arg(
        long,
        env = "KILN_SEGMENT_COMPRESSION",
        value_enum,
        default_value = "lz4"
    )]
    pub segment_compression: SegmentCompression,

    /// Target size of a compacted segment.
    #[arg(long, env = "KILN_COMPACTION_TARGET_BYTES", default_value = "128MiB")]
    pub compaction_target_bytes: ByteSize,

    /// A day is compacted once it has this many segments below half the
    /// target size; so are this many thin segments of any days, in time
    /// order (under `--segment-pack-rows` rows together).
    #[arg(long, env = "KILN_COMPACTION_MIN_SEGMENTS", default_value_t = 4)]
    pub compaction_min_segments: usize,

    /// A segment holds one day's rows, except that consecutive days of
    /// fewer rows than this share one while together they hold at most
    /// this many (at flush, import and compaction): a table spread thin
    /// over years keeps a few files, not one a day. The default is one
    /// Parquet row group, the unit a scan prunes within a file; below it a
    /// file costs a scan more to open than its rows to read. 0 gives every
    /// day its own segments.
    #[arg(long, env = "KILN_SEGMENT_PACK_ROWS", default_value_t = crate::segment::ROW_GROUP_ROWS)]
    pub segment_pack_rows: usize,

    /// How long a segment file removed from the manifest is kept after the last
    /// query pinning it let go (a margin for readers still streaming it).
    #[arg(long, env = "KILN_SEGMENT_DELETE_DELAY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub segment_delete_delay: Duration,

    /// How long a write's idempotency key (HTTP `Idempotency-Key`) is
    /// remembered: a retry with the same key within this window gets the
    /// first answer instead of writing again. Keys survive restarts (they are
    /// logged in the WAL and saved before WAL files are deleted).
    #[arg(long, env = "KILN_IDEMPOTENCY_WINDOW", default_value = "10m", value_parser = humantime::parse_duration)]
    pub idempotency_window: Duration,

    /// Most idempotency keys remembered at once (all tables); beyond it the
    /// oldest are forgotten early (logged), so memory stays bounded.
    #[arg(long, env = "KILN_IDEMPOTENCY_MAX_KEYS", default_value_t = 100_000)]
    pub idempotency_max_keys: usize,

    /// Largest row accepted, in bytes of string data.
    #[arg(long, env = "KILN_MAX_ROW_BYTES", default_value = "1MiB")]
    pub max_row_bytes: ByteSize,

    /// Rows held in memory before they are flushed, with the cube states
    /// kept with them, all tables together (a size such as 4GiB or a
    /// share of memory such as 25%). Past it a write waits for flushes to
    /// make room, up to 2 s, then is refused with 503 and Retry-After
    /// (SQLSTATE 53000): writers slow down instead of the server running
    /// out of memory when flushes fall behind. Before that, writes to a
    /// table holding more than four flushes' worth of rows (at least
    /// 64 MiB, at most half of this) each wait first, up to 1 s at twice
    /// that, so its flushes catch up.
    #[arg(long, env = "KILN_MEMSTORE_MAX_BYTES", default_value = "25%")]
    pub memstore_max_bytes: ByteSize,

    /// Memory writes in flight may take together while they are cast,
    /// logged and copied into the memstore (a size or a share of memory).
    /// A write reserves four times its rows' size in the table's types
    /// (a dictionary's values counted for each row); past the limit it
    /// waits, first come first served, up to 30 s, then is refused with
    /// 503 and Retry-After (SQLSTATE 53200). A write larger than the limit
    /// runs alone.
    #[arg(long, env = "KILN_WRITE_MEMORY_LIMIT", default_value = "10%")]
    pub write_memory_limit: ByteSize,

    #[command(flatten)]
    pub object_store: ObjectStoreConfig,

    #[command(flatten)]
    pub cache: CacheConfig,
}

/// Where segments, cube parts, manifests and the catalog live. The WAL,
/// the lock and the idempotency keys always stay in `--data-dir`.
#[derive(Clone, Debug, Args)]
pub struct ObjectStoreConfig {
    /// Object storage for segments, cube parts, manifests and the catalog:
    /// empty for the data directory itself, `file:///path` for another local
    /// directory, or `s3://bucket/prefix` for S3 or an S3-compatible server.
    #[arg(long, env = "KILN_STORAGE", default_value = "")]
    pub storage: String,

    /// S3 endpoint URL (empty: AWS, or `AWS_ENDPOINT_URL`); set it for
    /// MinIO, Ceph or another S3-compatible server.
    #[arg(long, env = "KILN_S3_ENDPOINT", default_value = "")]
    pub s3_endpoint: String,

    /// S3 region (empty: `AWS_REGION` / `AWS_DEFAULT_REGION`, else us-east-1).
    #[arg(long, env = "KILN_S3_REGION", default_value = "")]
    pub s3_region: String,

    /// S3 access key id (empty: `AWS_ACCESS_KEY_ID`, or the instance's role).
    #[arg(long, env = "KILN_S3_ACCESS_KEY_ID", default_value = "")]
    pub s3_access_key_id: String,

    /// S3 secret access key (empty: `AWS_SECRET_ACCESS_KEY`).
    #[arg(
        long,
        env = "KILN_S3_SECRET_ACCESS_KEY",
        default_value = "",
        hide_env_values = true
    )]
    pub s3_secret_access_key: String,

    /// Allow plain-HTTP S3 endpoints (a local test server).
    #[arg(long, env = "KILN_S3_ALLOW_HTTP", default_value_t = false)]
    pub s3_allow_http: bool,

    /// How long one object-store request may keep being retried (network
    /// errors, 5xx, 503 Slow Down, with backoff) before it fails.
    #[arg(long, env = "KILN_S3_RETRY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub s3_retry_timeout: Duration,

    /// Longest one object-store request may take before it is abandoned
    /// (and retried): a stalled store costs this, not a hung query.
    #[arg(long, env = "KILN_S3_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub s3_request_timeout: Duration,

    /// How old an object no manifest names must be before an opening
    /// process deletes it from object storage: a younger one may be another
    /// writer's segment between its write and its commit. (A local data
    /// directory is owned by one process and swept at once.)
    #[arg(long, env = "KILN_ORPHAN_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub orphan_grace: Duration,
}

/// The local cache in front of object storage (not used when the store is
/// local disk, which the page cache already serves).
#[derive(Clone, Debug, Args)]
pub struct CacheConfig {
    /// Directory of the disk tier of the object cache (empty: `cache` in
    /// `--data-dir`). It survives restarts, so a restarted node is warm.
    #[arg(long, env = "KILN_CACHE_DIR", default_value = "")]
    pub cache_dir: String,

    /// Memory tier of the object cache.
    #[arg(long, env = "KILN_CACHE_MEMORY", default_value = "512MiB")]
    pub cache_memory: ByteSize,

    /// Disk tier of the object cache (0 turns it off).
    #[arg(long, env = "KILN_CACHE_DISK", default_value = "8GiB")]
    pub cache_disk: ByteSize,

    /// Size of the aligned byte ranges the cache holds and fetches.
    #[arg(long, env = "KILN_CACHE_CHUNK", default_value = "4MiB")]
    pub cache_chunk: ByteSize,
}

impl StorageConfig {
    /// Defaults with another data directory (tests, embedded use).
    pub fn for_dir(dir: impl Into<std::path::PathBuf>) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            s: StorageConfig,
        }
        let mut s = P::parse_from(["kiln"]).s;
        s.data_dir = dir.into();
        s
    }
}
