//! Where a scan's bytes came from, for EXPLAIN ANALYZE: each Parquet read
//! of a scan goes through an [`ObservedStore`], which tags the read with
//! the scan's counters (`bytes_from_cache`, `bytes_from_store` on its
//! `DataSourceExec`). In front of a remote store the object cache says, per
//! chunk, whether it was in the cache or fetched; on local disk every byte
//! is read from the store.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};
use futures::stream::BoxStream;
use kiln_storage::{Observer, ReadObserver};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// A scan's byte counters.
#[derive(Debug)]
struct ScanBytes {
    from_cache: Count,
    from_store: Count,
}

impl ReadObserver for ScanBytes {
    fn read_from_cache(&self, bytes: u64) {
        self.from_cache.add(bytes as usize);
    }
    fn read_from_store(&self, bytes: u64) {
        self.from_store.add(bytes as usize);
    }
}

/// The store as one scan sees it: its reads counted in `metrics`.
#[derive(Debug)]
pub(super) struct ObservedStore {
    inner: Arc<dyn ObjectStore>,
    observer: Observer,
    /// True if the object cache reports where bytes came from; false on
    /// local disk, where every byte is read from the store.
    cached: bool,
}

impl ObservedStore {
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        cached: bool,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Self {
        let counter = |name: &'static str| MetricBuilder::new(metrics).global_counter(name);
        let bytes = ScanBytes {
            from_cache: counter("bytes_from_cache"),
            from_store: counter("bytes_from_store"),
        };
        Self {
            inner,
            observer: Observer(Arc::new(bytes)),
            cached,
        }
    }
}

impl std::fmt::Display for ObservedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Observed({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for ObservedStore {
    async fn get_opts(&self, location: &Path, mut options: GetOptions) -> Result<GetResult> {
        options.extensions.insert(self.observer.clone());
        let head = options.head;
        let got = self.inner.get_opts(location, options).await?;
        if !self.cached && !head {
            self.observer
                .0
                .read_from_store(got.range.end - got.range.start);
        }
        Ok(got)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if !self.cached {
            let got = self.inner.get_ranges(location, ranges).await?;
            let n: usize = got.iter().map(Bytes::len).sum();
            self.observer.0.read_from_store(n as u64);
            return Ok(got);
        }
        let reads = ranges.iter().map(|r| async move {
            let options = GetOptions {
                range: Some(r.clone().into()),
                ..Default::default()
            };
            self.get_opts(location, options).await?.bytes().await
        });
        futures::future::try_join_all(reads).await
    }

    async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
        self.inner.put_opts(l, p, o).await
    }

    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, o).await
    }
}
