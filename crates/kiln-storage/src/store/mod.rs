//! Object storage under Kiln: the data directory by default, another local
//! directory, or S3 ([`backend`]); in front of a remote store, a memory and
//! disk cache of byte ranges ([`cache`]); under both, request counters
//! ([`metered`]).
//!
//! Writes that must survive power loss go through [`Store::put_durable`],
//! which on local disk also fsyncs the file and its directory
//! (object_store's local backend renames but does not sync). Commits go
//! through [`Store::put_new`], which never overwrites: of two writers of
//! one object, exactly one succeeds.

mod backend;
mod cache;
mod metered;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use crate::config::StorageConfig;
use crate::error::{Error, Result};
use crate::fs_util::{AtomicWriteError, create_dir_durable, create_new, write_atomic};

pub use cache::{CacheStats, Observer, ReadObserver};
pub use metered::StoreMetrics;

/// The URL DataFusion knows Kiln's store by.
pub const STORE_URL: &str = "kiln://store/";

/// A shared handle on the object store holding segments, cube parts,
/// manifests and the catalog.
#[derive(Clone, Debug)]
pub struct Store {
    /// What reads and writes go through: the cache over the backend, when
    /// there is one.
    inner: Arc<dyn ObjectStore>,
    /// The backend alone (metered), for reads that must not fill the cache.
    raw: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
    /// Where the objects are, for messages: a directory or `s3://...`.
    location: String,
    cache: Option<Arc<cache::ObjectCache>>,
    metrics: Arc<StoreMetrics>,
}

impl Store {
    /// The store `config` names (`--storage`), with its cache when remote.
    pub async fn open(config: &StorageConfig) -> Result<Self> {
        match backend::Backend::parse(config)? {
            backend::Backend::Local(root) => Self::local(root),
            backend::Backend::Remote { store, location } => {
                Self::remote(store, location, config).await
            }
        }
    }

    /// A store rooted at a local directory (created if missing).
    pub fn local(root: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(&root)?;
        let metrics = Arc::new(StoreMetrics::default());
        let raw: Arc<dyn ObjectStore> = Arc::new(metered::Metered::new(fs, metrics.clone()));
        Ok(Self {
            inner: raw.clone(),
            raw,
            location: root.display().to_string(),
            local_root: Some(root),
            cache: None,
            metrics,
        })
    }

    /// A store over a remote backend (S3, or any object_store backend such
    /// as a fault-injecting wrapper in tests), behind the cache `config`
    /// describes. `location` names it in messages.
    pub async fn remote(
        backend: Arc<dyn ObjectStore>,
        location: String,
        config: &StorageConfig,
    ) -> Result<Self> {
        let metrics = Arc::new(StoreMetrics::default());
        let raw: Arc<dyn ObjectStore> = Arc::new(metered::Metered::new(backend, metrics.clone()));
        let dir = match config.cache.cache_dir.as_str() {
            "" => config.data_dir.join("cache"),
            d => PathBuf::from(d),
        };
        let cache = Arc::new(cache::ObjectCache::open(&config.cache, &dir).await?);
        let inner: Arc<dyn ObjectStore> = Arc::new(cache::CachedStore::new(
            raw.clone(),
            cache.clone(),
            &location,
        ));
        Ok(Self {
            inner,
            raw,
            local_root: None,
            location,
            cache: Some(cache),
            metrics,
        })
    }

    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.inner.clone()
    }

    /// Where the objects live: a directory, or an `s3://` URL.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Requests to the backend.
    pub fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }

    /// True if reads go through the object cache (a remote store).
    pub fn is_cached(&self) -> bool {
        self.cache.is_some()
    }

    /// The cache's counters and fill, if the store has a cache.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(|c| c.stats())
    }

    /// Writes an object, replacing any object of that name; when this
    /// returns it survives a crash or power loss, and a reader sees the old
    /// object or the new one, whole.
    pub async fn put_durable(&self, path: &Path, bytes: Bytes) -> Result<()> {
        match &self.local_root {
            Some(root) => {
                let file = root.join(path.as_ref());
                self.local_write(file, bytes, |f, b| write_atomic(f, b).map(|()| true))
                    .await?;
            }
            None => {
                self.inner.put(path, PutPayload::from_bytes(bytes)).await?;
            }
        }
        Ok(())
    }

    /// Writes an object that must not exist yet, durably: of two writers of
    /// one path, exactly one gets `Ok(true)`; the other gets `Ok(false)` and
    /// the object is untouched. A retried request whose first attempt landed
    /// finds its own bytes, which count as this call's success.
    pub async fn put_new(&self, path: &Path, bytes: Bytes) -> Result<bool> {
        let created = match &self.local_root {
            Some(root) => {
                let file = root.join(path.as_ref());
                self.local_write(file, bytes.clone(), create_new).await?
            }
            None => {
                let opts = PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                };
                let payload = PutPayload::from_bytes(bytes.clone());
                match self.inner.put_opts(path, payload, opts).await {
                    Ok(_) => true,
                    Err(object_store::Error::AlreadyExists { .. }) => false,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(created || self.get_uncached(path).await? == bytes)
    }

    /// Runs a local-disk write (creating the directory first) off the async
    /// workers, counted as one put.
    async fn local_write(
        &self,
        file: PathBuf,
        bytes: Bytes,
        write: fn(&std::path::Path, &[u8]) -> Result<bool, AtomicWriteError>,
    ) -> Result<bool> {
        let started = std::time::Instant::now();
        let len = bytes.len() as u64;
        let done = tokio::task::spawn_blocking(move || {
            if let Some(dir) = file.parent() {
                create_dir_durable(dir)
                    .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
            }
            write(&file, &bytes)
                .map_err(|e| Error::io(format!("{} {}", e.verb(), e.path.display()), e.source))
        })
        .await
        .map_err(|e| Error::io("writing task", std::io::Error::other(e)))?;
        self.metrics.record_put(started, len, done.is_ok());
        done
    }

    /// The whole object, through the cache.
    pub async fn get(&self, path: &Path) -> Result<Bytes> {
        Ok(self.inner.get(path).await?.bytes().await?)
    }

    /// The whole object, straight from the backend, as it is there now.
    pub async fn get_uncached(&self, path: &Path) -> Result<Bytes> {
        Ok(self.raw.get(path).await?.bytes().await?)
    }

    /// The whole object for a one-off read (compaction's, a cube build's):
    /// from the cache where it holds the bytes, else from the backend
    /// without keeping them, so the hot set stays.
    pub async fn get_once(&self, path: &Path) -> Result<Bytes> {
        let mut options = GetOptions::default();
        options.extensions.insert(cache::NoFill);
        Ok(self.inner.get_opts(path, options).await?.bytes().await?)
    }

    /// The object, or `None` if there is none.
    pub async fn get_opt(&self, path: &Path) -> Result<Option<Bytes>> {
        match self.get(path).await {
            Ok(b) => Ok(Some(b)),
            Err(Error::ObjectStore(object_store::Error::NotFound { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.inner.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every object under `prefix`.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<Path>> {
        Ok(self
            .list_meta(prefix)
            .await?
            .into_iter()
            .map(|m| m.location)
            .collect())
    }

    /// Every object under `prefix`, with its size and time of writing.
    pub async fn list_meta(&self, prefix: &Path) -> Result<Vec<ObjectMeta>> {
        Ok(self.inner.list(Some(prefix)).try_collect().await?)
    }

    /// True if another process may write here too: a remote store, which no
    /// lock file guards (a local directory is owned by the process holding
    /// the data directory's `LOCK`).
    pub fn is_shared(&self) -> bool {
        self.local_root.is_none()
    }

    /// Closes the cache (its disk tier is kept for the next start).
    pub async fn close(&self) {
        if let Some(c) = &self.cache {
            c.close().await;
        }
    }
}

#[cfg(test)]
mod tests;
