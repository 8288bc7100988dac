use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::Store;
use crate::config::StorageConfig;

/// A remote store over memory, its cache in `dir` with 64 KiB chunks.
async fn remote(backend: Arc<dyn ObjectStore>, dir: &std::path::Path) -> Store {
    remote_with_disk(backend, dir, "64MiB").await
}

async fn remote_with_disk(
    backend: Arc<dyn ObjectStore>,
    dir: &std::path::Path,
    disk: &str,
) -> Store {
    let mut config = StorageConfig::for_dir(dir);
    config.cache.cache_chunk = "64KiB".parse().unwrap();
    config.cache.cache_memory = "4MiB".parse().unwrap();
    config.cache.cache_disk = disk.parse().unwrap();
    Store::remote(backend, "memory://test".into(), &config)
        .await
        .unwrap()
}

fn data(len: usize) -> Bytes {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn gets(s: &Store) -> u64 {
    s.metrics().gets.load(Ordering::Relaxed)
}

#[tokio::test]
async fn reads_through_the_cache_equal_the_object_and_fetch_each_chunk_once() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let path = Path::from("tables/1/2024-01-01/a.parquet");
    let body = data(300 * 1024 + 17);
    backend.put(&path, body.clone().into()).await.unwrap();
    let store = remote(backend, dir.path()).await;
    let os = store.object_store();

    // Ranges inside one chunk, across chunks, at the end, and the whole.
    for r in [
        0..10,
        65_530..65_550,
        100_000..250_000,
        307_000..307_217,
        0..307_217,
    ] {
        let got = os.get_range(&path, r.clone()).await.unwrap();
        assert_eq!(got, body.slice(r.start as usize..r.end as usize), "{r:?}");
    }
    assert_eq!(store.get(&path).await.unwrap(), body);
    let ranges = os
        .get_ranges(&path, &[5..6, 200_000..200_100])
        .await
        .unwrap();
    assert_eq!(ranges[1], body.slice(200_000..200_100));
    // One HEAD, then each of the 5 chunks fetched once however often read.
    assert_eq!(gets(&store), 1 + 5);
    let stats = store.cache_stats().unwrap();
    assert_eq!(stats.misses, 5);
    assert!(stats.hits > 5, "{stats:?}");
    assert_eq!(
        store.metrics().bytes_fetched.load(Ordering::Relaxed),
        body.len() as u64
    );
}

#[tokio::test]
async fn a_written_file_is_warm_and_mutable_objects_are_never_cached() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let store = remote(backend.clone(), dir.path()).await;
    let seg = Path::from("tables/1/2024-01-01/b.parquet");
    store.put_durable(&seg, data(100_000)).await.unwrap();
    let before = gets(&store);
    assert_eq!(store.get(&seg).await.unwrap(), data(100_000));
    assert_eq!(gets(&store), before, "written through: no request");

    // The catalog is rewritten in place: every read goes to the store.
    let cat = Path::from("catalog.json");
    store.put_durable(&cat, Bytes::from("one")).await.unwrap();
    backend.put(&cat, Bytes::from("two").into()).await.unwrap();
    assert_eq!(store.get(&cat).await.unwrap(), "two");
}

#[tokio::test]
async fn the_disk_tier_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let path = Path::from("tables/1/2024-01-01/c.parquet");
    let body = data(200_000);
    {
        let store = remote(backend.clone(), dir.path()).await;
        store.put_durable(&path, body.clone()).await.unwrap();
        store.close().await;
    }
    let store = remote(backend.clone(), dir.path()).await;
    assert_eq!(store.get(&path).await.unwrap(), body);
    assert_eq!(gets(&store), 0, "size, e-tag and chunks all came from disk");

    // A deleted object is forgotten: reading it again asks the store.
    store.delete(&path).await.unwrap();
    let err = store.get(&path).await.unwrap_err();
    assert!(err.to_string().contains("c.parquet"), "{err}");
}

#[tokio::test]
async fn put_new_lets_exactly_one_writer_create_an_object() {
    let dir = tempfile::tempdir().unwrap();
    let local = Store::local(dir.path().join("local")).unwrap();
    let remote = remote(Arc::new(InMemory::new()), dir.path()).await;
    for store in [local, remote] {
        let path = Path::from("tables/1/manifest/00000000000000000001.json");
        assert!(store.put_new(&path, Bytes::from("mine")).await.unwrap());
        // The same bytes again: a retry of a write that landed.
        assert!(store.put_new(&path, Bytes::from("mine")).await.unwrap());
        assert!(!store.put_new(&path, Bytes::from("theirs")).await.unwrap());
        assert_eq!(store.get(&path).await.unwrap(), "mine");
    }
}

#[tokio::test]
async fn a_prefixed_backend_is_read_by_the_names_kiln_gives() {
    let dir = tempfile::tempdir().unwrap();
    let memory = Arc::new(InMemory::new());
    let body = data(150_000);
    let full = Path::from("node/tables/1/2024-01-01/d.parquet");
    memory.put(&full, body.clone().into()).await.unwrap();
    let prefixed = Arc::new(object_store::prefix::PrefixStore::new(memory, "node"));
    let store = remote(prefixed, dir.path()).await;
    let path = Path::from("tables/1/2024-01-01/d.parquet");
    let got = store.object_store().get_range(&path, 70_000..140_000).await;
    assert_eq!(got.unwrap(), body.slice(70_000..140_000));
}

#[tokio::test]
async fn a_one_off_read_uses_the_cache_but_does_not_fill_it() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let cold = Path::from("tables/1/2024-01-01/cold.parquet");
    backend.put(&cold, data(150_000).into()).await.unwrap();
    let store = remote(backend, dir.path()).await;

    // Cold: one HEAD and its 3 chunks fetched, none kept.
    assert_eq!(store.get_once(&cold).await.unwrap(), data(150_000));
    assert_eq!(gets(&store), 1 + 3);
    assert_eq!(store.get_once(&cold).await.unwrap(), data(150_000));
    assert_eq!(gets(&store), 1 + 3 + 3, "not kept: fetched again");

    // Warm (written through): served from the cache, no request.
    let warm = Path::from("tables/1/2024-01-01/warm.parquet");
    store.put_durable(&warm, data(150_000)).await.unwrap();
    let before = gets(&store);
    assert_eq!(store.get_once(&warm).await.unwrap(), data(150_000));
    assert_eq!(gets(&store), before);
}

#[tokio::test]
async fn ranges_past_the_end_are_refused_naming_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let path = Path::from("tables/1/2024-01-01/c.parquet");
    backend.put(&path, data(1000).into()).await.unwrap();
    let store = remote(backend, dir.path()).await;
    let os = store.object_store();
    let backwards = std::ops::Range { start: 20, end: 10 };
    for bad in [[0..10, 990..1001], [0..10, backwards]] {
        let err = os.get_ranges(&path, &bad).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("memory://test/tables/1/2024-01-01/c.parquet"),
            "{err}"
        );
    }
    let ok = os.get_ranges(&path, &[0..10, 990..1000]).await.unwrap();
    assert_eq!(ok[1], data(1000).slice(990..1000));
}

/// Files written through from many threads at once are all on disk after a
/// restart: the disk tier's recovery drops every entry of a block after one
/// whose sequence is out of order, so inserts must reach it in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_written_through_concurrently_all_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let (tasks, files) = (8, 150);
    let path = |t: usize, i: usize| Path::from(format!("tables/1/2024-01-01/{t}-{i}.parquet"));
    {
        let store = Arc::new(remote(backend.clone(), dir.path()).await);
        let writers = (0..tasks).map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..files {
                    store
                        .put_durable(&path(t, i), data(1000 + i))
                        .await
                        .unwrap();
                }
            })
        });
        for w in futures::future::join_all(writers).await {
            w.unwrap();
        }
        store.close().await;
    }
    let store = remote(backend, dir.path()).await;
    let mut missing = 0;
    for t in 0..tasks {
        for i in 0..files {
            let before = gets(&store);
            assert_eq!(store.get(&path(t, i)).await.unwrap(), data(1000 + i));
            missing += usize::from(gets(&store) != before);
        }
    }
    assert_eq!(missing, 0, "files read from the store after a restart");
}

/// A file larger than the disk tier's write buffer (one 16 MiB block here)
/// is on disk whole after a restart: the disk tier drops what its buffer
/// has no room for, so a write-through waits for it batch by batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_larger_than_the_disk_write_buffer_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let path = Path::from("tables/1/2024-01-01/big.parquet");
    let body = data(40 << 20);
    {
        let store = remote_with_disk(backend.clone(), dir.path(), "256MiB").await;
        store.put_durable(&path, body.clone()).await.unwrap();
        store.close().await;
    }
    let store = remote_with_disk(backend, dir.path(), "256MiB").await;
    let before = gets(&store);
    assert_eq!(store.get(&path).await.unwrap(), body);
    assert_eq!(gets(&store), before, "chunks fetched again after a restart");
    assert_eq!(store.cache_stats().unwrap().misses, 0);
}

/// Readers missing the same chunks at once share one fetch of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_on_a_chunk_fetch_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let path = Path::from("tables/1/2024-01-01/d.parquet");
    let body = data(5 * 64 * 1024);
    backend.put(&path, body.clone().into()).await.unwrap();
    let store = Arc::new(remote(backend, dir.path()).await);
    let readers = (0..16).map(|_| {
        let (store, path) = (store.clone(), path.clone());
        tokio::spawn(async move { store.get(&path).await.unwrap() })
    });
    for r in futures::future::join_all(readers).await {
        assert_eq!(r.unwrap(), body);
    }
    let stats = store.cache_stats().unwrap();
    assert_eq!(stats.misses, 5, "{stats:?}");
    assert_eq!(stats.lookups, 16 * 5, "{stats:?}");
}

/// A read the cache answers writes nothing to disk: only fills and
/// write-throughs reach the disk tier.
#[tokio::test]
async fn warm_reads_write_nothing_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(InMemory::new());
    let path = Path::from("tables/1/2024-01-01/e.parquet");
    let body = data(5 * 64 * 1024);
    backend.put(&path, body.clone().into()).await.unwrap();
    let store = remote(backend, dir.path()).await;
    let cache = store.cache.clone().unwrap();
    assert_eq!(store.get(&path).await.unwrap(), body);
    cache.settled().await;
    let filled = store.cache_stats().unwrap().disk_written;
    assert!(
        filled >= body.len() as u64,
        "the fill was written: {filled}"
    );
    for _ in 0..20 {
        assert_eq!(store.get(&path).await.unwrap(), body);
    }
    cache.settled().await;
    assert_eq!(store.cache_stats().unwrap().disk_written, filled);
}

/// A store whose next `panics` ranged reads panic.
#[derive(Debug, Default)]
struct Panicky {
    inner: InMemory,
    panics: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Display for Panicky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Panicky")
    }
}

#[async_trait::async_trait]
impl ObjectStore for Panicky {
    async fn put_opts(
        &self,
        location: &Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let panics = &self.panics;
        if options.range.is_some() && panics.load(Ordering::Relaxed) > 0 {
            panics.fetch_sub(1, Ordering::Relaxed);
            panic!("a store that panics");
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A fetch that panics fails the read that waited for it, and is not
/// shared afterwards: the next read fetches again.
#[tokio::test]
async fn a_fetch_that_panics_is_not_shared_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(Panicky::default());
    let path = Path::from("tables/1/2024-01-01/f.parquet");
    backend.inner.put(&path, data(1000).into()).await.unwrap();
    let store = remote(backend.clone(), dir.path()).await;
    backend.panics.store(1, Ordering::Relaxed);
    let err = store.get(&path).await.unwrap_err();
    assert!(err.to_string().contains("f.parquet"), "{err}");
    assert_eq!(store.get(&path).await.unwrap(), data(1000));
}
