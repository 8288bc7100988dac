//! Counters of the requests Kiln sends its backend: how many, how long
//! they took, how many failed, and how many bytes came back. They answer
//! "what does a query cost in requests and bytes" for S3, and feed
//! `/metrics` and `system.cache`.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use kiln_wal::LatencyHistogram;

/// Requests to the backend, by kind.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    pub gets: AtomicU64,
    pub puts: AtomicU64,
    pub lists: AtomicU64,
    pub deletes: AtomicU64,
    /// Requests that returned an error (after the client's own retries).
    pub errors: AtomicU64,
    /// Bytes of object data returned by gets.
    pub bytes_fetched: AtomicU64,
    /// Bytes of object data written by puts.
    pub bytes_put: AtomicU64,
    /// Latency of every request (for a get, until its data started).
    pub latency: LatencyHistogram,
}

impl StoreMetrics {
    /// All requests of every kind.
    pub fn requests(&self) -> u64 {
        [&self.gets, &self.puts, &self.lists, &self.deletes]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Counts a put made outside object_store (local disk writes).
    pub(super) fn record_put(&self, started: Instant, bytes: u64, ok: bool) {
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.latency.record(started.elapsed());
        match ok {
            true => self.bytes_put.fetch_add(bytes, Ordering::Relaxed),
            false => self.errors.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn done<T>(&self, counter: &AtomicU64, started: Instant, r: &Result<T>) {
        counter.fetch_add(1, Ordering::Relaxed);
        self.latency.record(started.elapsed());
        if r.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A backend with its requests counted.
#[derive(Debug)]
pub(super) struct Metered<T> {
    inner: T,
    metrics: Arc<StoreMetrics>,
}

impl<T> Metered<T> {
    pub fn new(inner: T, metrics: Arc<StoreMetrics>) -> Self {
        Self { inner, metrics }
    }
}

impl<T: std::fmt::Display> std::fmt::Display for Metered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Metered({})", self.inner)
    }
}

#[async_trait]
impl<T: ObjectStore> ObjectStore for Metered<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let (started, len) = (Instant::now(), payload.content_length() as u64);
        let r = self.inner.put_opts(location, payload, opts).await;
        self.metrics.done(&self.metrics.puts, started, &r);
        if r.is_ok() {
            self.metrics.bytes_put.fetch_add(len, Ordering::Relaxed);
        }
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let started = Instant::now();
        let r = self.inner.put_multipart_opts(location, opts).await;
        self.metrics.done(&self.metrics.puts, started, &r);
        r
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let (started, head) = (Instant::now(), options.head);
        let r = self.inner.get_opts(location, options).await;
        self.metrics.done(&self.metrics.gets, started, &r);
        if let (Ok(g), false) = (&r, head) {
            let n = g.range.end - g.range.start;
            self.metrics.bytes_fetched.fetch_add(n, Ordering::Relaxed);
        }
        r
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let started = Instant::now();
        let r = self.inner.get_ranges(location, ranges).await;
        self.metrics.done(&self.metrics.gets, started, &r);
        if let Ok(parts) = &r {
            let n: usize = parts.iter().map(Bytes::len).sum();
            self.metrics
                .bytes_fetched
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        use futures::StreamExt;
        let metrics = self.metrics.clone();
        self.inner
            .delete_stream(locations)
            .inspect(move |r| {
                metrics.deletes.fetch_add(1, Ordering::Relaxed);
                if r.is_err() {
                    metrics.errors.fetch_add(1, Ordering::Relaxed);
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.lists.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let started = Instant::now();
        let r = self.inner.list_with_delimiter(prefix).await;
        self.metrics.done(&self.metrics.lists, started, &r);
        r
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let started = Instant::now();
        let r = self.inner.copy_opts(from, to, options).await;
        self.metrics.done(&self.metrics.puts, started, &r);
        r
    }
}
