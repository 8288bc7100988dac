//! The object cache: a memory tier and a disk tier (foyer's hybrid cache)
//! in front of a remote store, holding aligned byte ranges ("chunks",
//! `--cache-chunk`) of immutable objects.
//!
//! Only Parquet files (segments and cube parts) are cached: they are
//! written once under a unique name and never change, so a chunk is keyed
//! by path, e-tag and index and can never be stale. Manifests and the
//! catalog are read at startup only and always go to the store. Chunks of a
//! new file are written through at put, so a flushed segment is warm before
//! its first query; a file's size and e-tag are cached beside its chunks,
//! so a warm read sends no request at all, even after a restart (the disk
//! tier is recovered, not cleared). Concurrent misses on one chunk share one
//! fetch, which runs as its own task so a cancelled reader does not cancel
//! it. The cache is read with a plain lookup and filled by that fetch, not
//! with foyer's `get_or_fetch`, which queues its entry for the disk tier
//! again on every hit: a warm read writes nothing. Reads that must not
//! disturb the hot set (compaction's, cube builds') carry [`NoFill`]:
//! chunks the cache holds are served from it, the rest are fetched and not
//! kept. The decoded-batch cache of the query layer and DataFusion's footer
//! cache sit above this one.
//!
//! Inserts are serialized ([`ObjectCache::insert`]). The disk tier numbers
//! each entry when it is queued and, on recovery, stops reading a block at
//! the first entry numbered below the one before it; two threads inserting
//! at once can queue their entries out of order, and a restart then loses
//! the rest of that block. Only fills and write-throughs take that lock,
//! never a read the cache answers.
//!
//! The disk tier drops an entry its write buffer has no room for, so a
//! file put in one go would reach disk only in part. A write-through
//! ([`ObjectCache::write_through`]) therefore queues a file in batches of
//! half that buffer and waits for each to be written, one file at a time:
//! when a put returns, its file is on the disk tier whole (unless a burst
//! of fills took the other half at the same time). Fills stay best-effort:
//! the disk tier may drop some, which are then kept in memory only.

use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use foyer::{
    BlockEngineConfig, DeviceBuilder, Event, EventListener, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder, HybridCachePolicy, RecoverMode,
};
use futures::future::{BoxFuture, Shared};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    Result,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::config::CacheConfig;
use crate::error::Error;

/// Told where the bytes of a read came from. A reader that wants to know
/// (a scan, for EXPLAIN ANALYZE) puts an [`Observer`] in its read's
/// `GetOptions::extensions`; a chunk counts as fetched for the read that
/// fetched it.
pub trait ReadObserver: Send + Sync + std::fmt::Debug {
    fn read_from_cache(&self, bytes: u64);
    fn read_from_store(&self, bytes: u64);
}

/// A [`ReadObserver`] as a read's extension.
#[derive(Clone, Debug)]
pub struct Observer(pub Arc<dyn ReadObserver>);

/// A read's extension: serve what the cache holds, but do not keep what
/// had to be fetched (a one-off read of a whole file).
#[derive(Clone, Copy, Debug)]
pub struct NoFill;

/// Counters of the object cache.
#[derive(Debug, Default)]
pub struct CacheMetrics {
    /// Chunk lookups (each read touches one or more chunks).
    pub lookups: AtomicU64,
    /// Lookups found in neither tier, fetched from the store.
    pub misses: AtomicU64,
    /// Bytes handed to readers.
    pub bytes_read: AtomicU64,
    /// Chunks written through when their file was put.
    pub written_through: AtomicU64,
    /// Chunks evicted from the memory tier (still on disk when it has room).
    pub evictions: AtomicU64,
}

/// A snapshot of the cache's counters and fill.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheStats {
    pub lookups: u64,
    pub hits: u64,
    pub misses: u64,
    pub bytes_read: u64,
    pub written_through: u64,
    pub evictions: u64,
    pub memory_used: u64,
    pub memory_capacity: u64,
    pub disk_capacity: u64,
    pub disk_written: u64,
    pub disk_read: u64,
    pub chunk_bytes: u64,
}

/// The hybrid cache of chunks and its counters.
pub(crate) struct ObjectCache {
    chunks: HybridCache<String, Bytes>,
    /// Held while an entry is inserted, so the disk tier queues entries in
    /// the order it numbers them (see the module docs).
    inserting: Mutex<()>,
    /// Held by a write-through for its whole file, so two files do not
    /// share the disk tier's write buffer.
    writing: tokio::sync::Mutex<()>,
    /// Bytes a write-through queues before it waits for the disk tier.
    batch: usize,
    chunk: u64,
    disk_capacity: u64,
    metrics: Arc<CacheMetrics>,
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("chunk", &self.chunk)
            .finish()
    }
}

struct CountEvictions(Arc<CacheMetrics>);

impl EventListener for CountEvictions {
    type Key = String;
    type Value = Bytes;
    fn on_leave(&self, reason: Event, _: &String, _: &Bytes) {
        if matches!(reason, Event::Evict) {
            self.0.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Smallest chunk: below it, per-request latency dominates.
const MIN_CHUNK: u64 = 64 * 1024;

impl ObjectCache {
    /// Opens the cache; the disk tier in `dir` is recovered if present.
    pub async fn open(config: &CacheConfig, dir: &FsPath) -> crate::error::Result<Self> {
        let chunk = config.cache_chunk.bytes();
        if chunk < MIN_CHUNK || !chunk.is_multiple_of(4096) {
            return Err(Error::Config(format!(
                "--cache-chunk {}: must be a multiple of 4KiB and at least 64KiB",
                config.cache_chunk
            )));
        }
        let metrics = Arc::new(CacheMetrics::default());
        let builder = HybridCacheBuilder::new()
            .with_name("kiln-objects")
            .with_policy(HybridCachePolicy::WriteOnInsertion)
            .with_event_listener(Arc::new(CountEvictions(metrics.clone())))
            .memory(config.cache_memory.as_usize())
            .with_weighter(|k: &String, v: &Bytes| k.len() + v.len())
            .storage();
        let disk_capacity = config.cache_disk.bytes();
        // A block holds whole entries: room for a few chunks each. The
        // write buffer is two blocks (held twice: one filling, one being
        // written), so a write-through's batch of one block leaves another
        // to fills; entries waiting for the buffer may reach twice its
        // size before the disk tier drops any.
        let block = (4 * chunk).max(16 << 20);
        let builder = if disk_capacity >= 2 * block {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
            let device = FsDeviceBuilder::new(dir)
                .with_capacity(disk_capacity as usize)
                .build()
                .map_err(|e| cache_error(dir, e))?;
            builder
                .with_engine_config(
                    BlockEngineConfig::new(device)
                        .with_block_size(block as usize)
                        .with_buffer_pool_size(2 * block as usize)
                        .with_submit_queue_size_threshold(4 * block as usize),
                )
                .with_recover_mode(RecoverMode::Quiet)
        } else {
            if disk_capacity > 0 {
                tracing::warn!(
                    cache_disk = disk_capacity,
                    needed = 2 * block,
                    "--cache-disk is below two cache blocks: no disk tier, memory only"
                );
            }
            builder
        };
        let chunks = builder.build().await.map_err(|e| cache_error(dir, e))?;
        let disk_capacity = if chunks.is_hybrid() { disk_capacity } else { 0 };
        Ok(Self {
            chunks,
            inserting: Mutex::new(()),
            writing: tokio::sync::Mutex::new(()),
            batch: block as usize,
            chunk,
            disk_capacity,
            metrics,
        })
    }

    pub fn stats(&self) -> CacheStats {
        let m = &self.metrics;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let disk = self.chunks.statistics();
        let (lookups, misses) = (get(&m.lookups), get(&m.misses));
        CacheStats {
            lookups,
            hits: lookups.saturating_sub(misses),
            misses,
            bytes_read: get(&m.bytes_read),
            written_through: get(&m.written_through),
            evictions: get(&m.evictions),
            memory_used: self.chunks.memory().usage() as u64,
            memory_capacity: self.chunks.memory().capacity() as u64,
            disk_capacity: self.disk_capacity,
            disk_written: disk.disk_write_bytes() as u64,
            disk_read: disk.disk_read_bytes() as u64,
            chunk_bytes: self.chunk,
        }
    }

    /// Puts an entry in both tiers (the disk tier's write is queued).
    fn insert(&self, key: String, value: Bytes) {
        let _queued_in_order = self.inserting.lock();
        self.chunks.insert(key, value);
    }

    /// Puts a new file's entries in both tiers and returns when the disk
    /// tier has written them (see the module docs).
    pub async fn write_through(&self, entries: impl IntoIterator<Item = (String, Bytes)>) {
        let _one_file_at_a_time = self.writing.lock().await;
        let mut queued = 0;
        for (key, value) in entries {
            // On disk an entry has a header and fills whole 4 KiB pages.
            let size = key.len() + value.len() + 4096;
            if queued > 0 && queued + size > self.batch {
                self.chunks.storage().wait().await;
                queued = 0;
            }
            self.insert(key, value);
            queued += size;
        }
        self.chunks.storage().wait().await;
    }

    /// Waits until the disk tier has written what was queued for it.
    #[cfg(test)]
    pub async fn settled(&self) {
        self.chunks.storage().wait().await;
    }

    /// Writes the memory tier's pending entries to disk and closes it.
    pub async fn close(&self) {
        if let Err(e) = self.chunks.close().await {
            tracing::warn!(error = %e, "closing the object cache");
        }
    }
}

fn cache_error(dir: &FsPath, e: foyer::Error) -> Error {
    Error::Config(format!("object cache in {}: {e}", dir.display()))
}

/// Only write-once objects are cached: segments and cube parts.
fn cacheable(location: &Path) -> bool {
    location.as_ref().ends_with(".parquet")
}

/// What identifies one version of an object: its e-tag, else its size.
fn version_of(meta: &ObjectMeta) -> String {
    meta.e_tag
        .clone()
        .or_else(|| meta.version.clone())
        .unwrap_or_else(|| format!("size{}", meta.size))
}

fn chunk_key(meta: &ObjectMeta, index: u64) -> String {
    format!("{}#{}#{index}", meta.location, version_of(meta))
}

fn meta_key(location: &Path) -> String {
    format!("{location}#meta")
}

/// An object's metadata as the cache keeps it.
#[derive(Serialize, Deserialize)]
struct SavedMeta {
    size: u64,
    e_tag: Option<String>,
    version: Option<String>,
    last_modified: chrono::DateTime<chrono::Utc>,
}

/// A fetch of one chunk that concurrent misses share; its error is the
/// store's message.
type Fetch = Shared<BoxFuture<'static, std::result::Result<Bytes, Arc<str>>>>;

/// Removes a chunk's fetch from `fetching` when dropped.
struct Leave {
    fetching: Arc<DashMap<String, Fetch>>,
    key: String,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.fetching.remove(&self.key);
    }
}

/// The cache wrapped around a store, as an `ObjectStore`.
#[derive(Debug)]
pub(super) struct CachedStore {
    inner: Arc<dyn ObjectStore>,
    cache: Arc<ObjectCache>,
    /// Chunks being fetched, by key: a miss joins the fetch under way.
    fetching: Arc<DashMap<String, Fetch>>,
    /// Metadata of objects read or written, so a warm read needs no request.
    /// Sharded: every read of a remote object looks here.
    metas: Arc<DashMap<Path, ObjectMeta>>,
    /// Where the backend is (`s3://bucket/prefix`), so an error names the
    /// object a user can find.
    base: String,
}

impl std::fmt::Display for CachedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cached({})", self.inner)
    }
}

impl CachedStore {
    pub fn new(inner: Arc<dyn ObjectStore>, cache: Arc<ObjectCache>, base: &str) -> Self {
        Self {
            inner,
            cache,
            fetching: Default::default(),
            metas: Default::default(),
            base: base.trim_end_matches('/').to_string(),
        }
    }

    /// The error of fetching bytes `range` of `location`.
    fn fetch_error(
        &self,
        location: &Path,
        range: &Range<u64>,
        e: impl std::fmt::Display,
    ) -> object_store::Error {
        let what = format!(
            "reading bytes {}..{} from the object store: {e}",
            range.start, range.end
        );
        self.error(location, what)
    }

    /// The error of a read of `location`, naming the object in full.
    fn error(&self, location: &Path, what: impl std::fmt::Display) -> object_store::Error {
        object_store::Error::Generic {
            store: "kiln cache",
            source: format!("{}/{location}: {what}", self.base).into(),
        }
    }

    /// Size and e-tag of an immutable object: memory, then the cache's
    /// tiers, then one HEAD request.
    async fn meta(&self, location: &Path) -> Result<ObjectMeta> {
        if let Some(m) = self.metas.get(location) {
            return Ok(m.clone());
        }
        let key = meta_key(location);
        let saved = match self.cache.chunks.get(&key).await {
            Ok(Some(e)) => serde_json::from_slice::<SavedMeta>(e.value()).ok(),
            _ => None,
        };
        let meta = match saved {
            Some(s) => ObjectMeta {
                location: location.clone(),
                last_modified: s.last_modified,
                size: s.size,
                e_tag: s.e_tag,
                version: s.version,
            },
            None => {
                // Some backends (a prefixed store) name the object by its
                // full key: it is known here by the name it was asked for.
                let head = self.inner.head(location).await.map_err(|e| match e {
                    e @ object_store::Error::NotFound { .. } => e,
                    e => self.error(
                        location,
                        format!("reading its size from the object store: {e}"),
                    ),
                })?;
                let m = ObjectMeta {
                    location: location.clone(),
                    ..head
                };
                self.remember(&m);
                m
            }
        };
        self.metas.insert(location.clone(), meta.clone());
        Ok(meta)
    }

    fn remember(&self, m: &ObjectMeta) {
        self.cache.insert(meta_key(&m.location), saved(m));
        self.metas.insert(m.location.clone(), m.clone());
    }

    /// Bytes `range` of the object, chunk by chunk.
    async fn read(
        &self,
        meta: &ObjectMeta,
        range: Range<u64>,
        observer: Option<&Observer>,
        fill: bool,
    ) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let c = self.cache.chunk;
        let (first, last) = (range.start / c, (range.end - 1) / c);
        let chunks =
            futures::future::try_join_all((first..=last).map(|i| self.chunk(meta, i, fill)))
                .await?;
        if let Some(Observer(o)) = observer {
            for (i, (b, fetched)) in chunks.iter().enumerate() {
                let base = (first + i as u64) * c;
                let used = range.end.min(base + b.len() as u64) - range.start.max(base);
                match fetched {
                    true => o.read_from_store(used),
                    false => o.read_from_cache(used),
                }
            }
        }
        let chunks: Vec<Bytes> = chunks.into_iter().map(|(b, _)| b).collect();
        let len = range.end - range.start;
        self.cache
            .metrics
            .bytes_read
            .fetch_add(len, Ordering::Relaxed);
        let slice = |i: usize, b: &Bytes| {
            let base = (first + i as u64) * c;
            let start = range.start.max(base) - base;
            let end = range.end.min(base + b.len() as u64) - base;
            b.slice(start as usize..end as usize)
        };
        if chunks.len() == 1 {
            return Ok(slice(0, &chunks[0]));
        }
        let mut out = BytesMut::with_capacity(len as usize);
        for (i, b) in chunks.iter().enumerate() {
            out.extend_from_slice(&slice(i, b));
        }
        Ok(out.freeze())
    }

    /// Chunk `index` of the object, fetched once however many readers miss
    /// it (and kept, if `fill`); true if this call fetched it.
    async fn chunk(&self, meta: &ObjectMeta, index: u64, fill: bool) -> Result<(Bytes, bool)> {
        let c = self.cache.chunk;
        let range = index * c..((index + 1) * c).min(meta.size);
        let metrics = &self.cache.metrics;
        metrics.lookups.fetch_add(1, Ordering::Relaxed);
        let key = chunk_key(meta, index);
        if let Ok(Some(e)) = self.cache.chunks.get(&key).await {
            return Ok((e.value().clone(), false));
        }
        if !fill {
            metrics.misses.fetch_add(1, Ordering::Relaxed);
            let fetched = self.inner.get_range(&meta.location, range.clone()).await;
            let bytes = fetched.map_err(|e| self.fetch_error(&meta.location, &range, e))?;
            return Ok((bytes, true));
        }
        let (fetch, fetched) = self.fetch_once(key, &meta.location, range.clone());
        let bytes = fetch
            .await
            .map_err(|e| self.fetch_error(&meta.location, &range, e))?;
        Ok((bytes, fetched))
    }

    /// The fetch of chunk `key` under way, or a new one (then true). The
    /// fetch runs as a task: it fills the cache and leaves `fetching` even
    /// if every reader waiting for it is cancelled.
    fn fetch_once(&self, key: String, location: &Path, range: Range<u64>) -> (Fetch, bool) {
        let slot = match self.fetching.entry(key.clone()) {
            dashmap::Entry::Occupied(e) => return (e.get().clone(), false),
            dashmap::Entry::Vacant(slot) => slot,
        };
        // A fetch that finished since this reader missed has filled the
        // memory tier before it left `fetching`.
        if let Some(e) = self.cache.chunks.memory().get(&key) {
            return (
                futures::future::ready(Ok(e.value().clone()))
                    .boxed()
                    .shared(),
                false,
            );
        }
        let (inner, cache, fetching) = (
            self.inner.clone(),
            self.cache.clone(),
            self.fetching.clone(),
        );
        let location = location.clone();
        let task = tokio::spawn(async move {
            // Leaves `fetching` however the task ends (a panic, a runtime
            // shutting down), so a failed fetch is not shared forever.
            let leave = Leave { fetching, key };
            cache.metrics.misses.fetch_add(1, Ordering::Relaxed);
            let got = inner.get_range(&location, range).await;
            if let Ok(bytes) = &got {
                cache.insert(leave.key.clone(), bytes.clone());
            }
            drop(leave);
            got.map_err(|e| Arc::<str>::from(e.to_string()))
        });
        let fetch = task
            .map(|joined| joined.unwrap_or_else(|e| Err(Arc::from(e.to_string()))))
            .boxed()
            .shared();
        slot.insert(fetch.clone());
        (fetch, true)
    }

    /// Puts a new object's chunks and metadata in the cache.
    async fn write_through(&self, meta: &ObjectMeta, data: &Bytes) {
        let c = self.cache.chunk as usize;
        let chunks = (0..data.len()).step_by(c).enumerate().map(|(i, start)| {
            let end = (start + c).min(data.len());
            (chunk_key(meta, i as u64), data.slice(start..end))
        });
        let entry = (meta_key(&meta.location), saved(meta));
        self.cache.write_through(chunks.chain([entry])).await;
        self.cache
            .metrics
            .written_through
            .fetch_add(data.len().div_ceil(c) as u64, Ordering::Relaxed);
        self.metas.insert(meta.location.clone(), meta.clone());
    }
}

/// An object's metadata as the cache stores it.
fn saved(m: &ObjectMeta) -> Bytes {
    let saved = SavedMeta {
        size: m.size,
        e_tag: m.e_tag.clone(),
        version: m.version.clone(),
        last_modified: m.last_modified,
    };
    serde_json::to_vec(&saved)
        .expect("metadata serializes")
        .into()
}

/// Forgets a deleted object: its metadata and every chunk of it, which the
/// saved metadata names when this process never read it (after a restart).
async fn forget(cache: &ObjectCache, metas: &DashMap<Path, ObjectMeta>, location: &Path) {
    let known = metas.remove(location).map(|(_, m)| m);
    let key = meta_key(location);
    let meta = match known {
        Some(m) => Some(m),
        None => match cache.chunks.get(&key).await {
            Ok(Some(e)) => serde_json::from_slice::<SavedMeta>(e.value())
                .ok()
                .map(|s| ObjectMeta {
                    location: location.clone(),
                    last_modified: s.last_modified,
                    size: s.size,
                    e_tag: s.e_tag,
                    version: s.version,
                }),
            _ => None,
        },
    };
    cache.chunks.remove(&key);
    if let Some(m) = meta {
        for i in 0..m.size.div_ceil(cache.chunk) {
            cache.chunks.remove(&chunk_key(&m, i));
        }
    }
}

fn plain(options: &GetOptions) -> bool {
    options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
}

#[async_trait]
impl ObjectStore for CachedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if !cacheable(location) || matches!(opts.mode, PutMode::Update(_)) {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let data = Bytes::from(payload.clone());
        let put = self.inner.put_opts(location, payload, opts).await?;
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: chrono::Utc::now(),
            size: data.len() as u64,
            e_tag: put.e_tag.clone(),
            version: put.version.clone(),
        };
        self.write_through(&meta, &data).await;
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if !cacheable(location) || !plain(&options) {
            return self.inner.get_opts(location, options).await;
        }
        let meta = self.meta(location).await?;
        let range = match &options.range {
            None => 0..meta.size,
            Some(r) => r.as_range(meta.size).map_err(|e| self.error(location, e))?,
        };
        let observer = options.extensions.get::<Observer>();
        let fill = options.extensions.get::<NoFill>().is_none();
        let data = match options.head {
            true => Bytes::new(),
            false => self.read(&meta, range.clone(), observer, fill).await?,
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(futures::stream::once(async { Ok(data) }).boxed()),
            meta,
            range,
            attributes: Default::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if !cacheable(location) {
            return self.inner.get_ranges(location, ranges).await;
        }
        let meta = self.meta(location).await?;
        if let Some(r) = ranges.iter().find(|r| r.start > r.end || r.end > meta.size) {
            let what = format!(
                "range {}..{} is outside its {} bytes",
                r.start, r.end, meta.size
            );
            return Err(self.error(location, what));
        }
        futures::future::try_join_all(
            ranges
                .iter()
                .map(|r| self.read(&meta, r.clone(), None, true)),
        )
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // Forgotten once the store deleted them, so no read refills them.
        let (cache, metas) = (self.cache.clone(), self.metas.clone());
        self.inner
            .delete_stream(locations)
            .then(move |r| {
                let (cache, metas) = (cache.clone(), metas.clone());
                async move {
                    if let Ok(p) = &r {
                        forget(&cache, &metas, p).await;
                    }
                    r
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
