//! Object storage under Kiln: local disk by default, any `object_store`
//! backend later. Writes that must survive power loss go through
//! [`Store::put_durable`], which on local disk also fsyncs the file and its
//! directory (object_store's local backend renames but does not sync).

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Error, Result};

/// The URL DataFusion knows Kiln's store by.
pub const STORE_URL: &str = "kiln://store/";

/// A shared handle on the object store holding segments and manifests.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
}

impl Store {
    /// A store rooted at a local directory (created if missing).
    pub fn local(root: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        let fs = LocalFileSystem::new_with_prefix(&root)?;
        Ok(Self {
            inner: Arc::new(fs),
            local_root: Some(root),
        })
    }

    /// A store over any object_store backend (S3, memory...).
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            local_root: None,
        }
    }

    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.inner.clone()
    }

    /// Writes an object; when this returns it survives a crash or power loss.
    pub async fn put_durable(&self, path: &Path, bytes: Bytes) -> Result<()> {
        self.inner.put(path, PutPayload::from_bytes(bytes)).await?;
        if let Some(root) = &self.local_root {
            let file = root.join(path.as_ref());
            tokio::task::spawn_blocking(move || sync_file_and_dir(&file))
                .await
                .map_err(|e| Error::io("fsync task", std::io::Error::other(e)))??;
        }
        Ok(())
    }

    pub async fn get(&self, path: &Path) -> Result<Bytes> {
        Ok(self.inner.get(path).await?.bytes().await?)
    }

    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.inner.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every object under `prefix`.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<Path>> {
        let metas: Vec<_> = self.inner.list(Some(prefix)).try_collect().await?;
        Ok(metas.into_iter().map(|m| m.location).collect())
    }
}

fn sync_file_and_dir(file: &std::path::Path) -> Result<()> {
    let ctx = |e| Error::io(format!("fsync {}", file.display()), e);
    std::fs::File::open(file)
        .and_then(|f| f.sync_all())
        .map_err(ctx)?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(ctx)?;
    }
    Ok(())
}
