//! The manifest: an immutable, versioned list of a table's segments.
//!
//! A change (flush, compaction, import) writes version N+1 as a new object,
//! durably, and only then swaps it in memory. Queries pin one
//! `Arc<Manifest>` for their whole life; each [`Segment`] deletes its file
//! when it has been removed from the current version *and* the last pinned
//! version referring to it is dropped, so no query ever sees a missing file.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use object_store::path::Path;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

use crate::cube::{Part, PartMeta};
use crate::error::{Error, Result};
use crate::failpoints::{MANIFEST_AFTER_WRITE, failpoint};
use crate::store::Store;

/// A min or max value of a column in a segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// Statistics of one column in one segment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ColumnStats {
    pub null_count: u64,
    pub min: Option<StatValue>,
    pub max: Option<StatValue>,
}

/// What the manifest records about a segment file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentMeta {
    /// Object path relative to the store root.
    pub path: String,
    /// The first day of its rows, in days since the Unix epoch (UTC) of the
    /// time column: a segment holds that day's rows, or those of
    /// consecutive thin days up to `max_time`'s ([`crate::segment::pack_days`]).
    pub day: i32,
    pub rows: u64,
    pub bytes: u64,
    pub min_time: i64,
    pub max_time: i64,
    /// One entry per table column, in table order.
    pub columns: Vec<ColumnStats>,
}

/// Deletes the files of segments that no version refers to any more.
#[derive(Debug, Clone)]
pub struct Reaper(UnboundedSender<Path>);

impl Reaper {
    /// Starts the background task that deletes files sent to it, each `delay`
    /// after it was sent. Files left behind at exit are removed at the next start.
    pub fn start(store: Store, delay: std::time::Duration) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Path>();
        tokio::spawn(async move {
            while let Some(path) = rx.recv().await {
                let store = store.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Err(e) = store.delete(&path).await {
                        tracing::warn!(%path, error = %e, "could not delete obsolete segment");
                    }
                });
            }
        });
        Self(tx)
    }

    /// Deletes `path` after the delay.
    pub(crate) fn delete(&self, path: Path) {
        let _ = self.0.send(path);
    }
}

/// A live segment. Dropping the last reference to an obsolete segment deletes its file.
#[derive(Debug)]
pub struct Segment {
    pub meta: SegmentMeta,
    /// Its cube parts ([`crate::cube`]): set before the segment is
    /// committed, added to by the background build, removed by DROP CUBE.
    parts: ArcSwap<Vec<Arc<Part>>>,
    obsolete: AtomicBool,
    reaper: Reaper,
}

impl Segment {
    pub fn new(meta: SegmentMeta, reaper: &Reaper) -> Arc<Self> {
        Self::with_parts(meta, vec![], reaper)
    }

    pub fn with_parts(meta: SegmentMeta, parts: Vec<Arc<Part>>, reaper: &Reaper) -> Arc<Self> {
        Arc::new(Self {
            meta,
            parts: ArcSwap::from_pointee(parts),
            obsolete: AtomicBool::new(false),
            reaper: reaper.clone(),
        })
    }

    /// Marks the file, and its parts' files, for deletion once no pinned
    /// version uses them.
    pub fn retire(&self) {
        self.obsolete.store(true, Ordering::Release);
        self.parts.load().iter().for_each(|p| p.retire());
    }

    /// Its cube parts now.
    pub fn parts(&self) -> Arc<Vec<Arc<Part>>> {
        self.parts.load_full()
    }

    /// Its part of cube `cube_id`, if built.
    pub fn part(&self, cube_id: u64) -> Option<Arc<Part>> {
        self.parts
            .load()
            .iter()
            .find(|p| p.meta.cube_id == cube_id)
            .cloned()
    }

    /// Adds (or replaces) a part; the caller commits a manifest version.
    pub(crate) fn add_part(&self, part: Arc<Part>) {
        self.parts.rcu(|parts| {
            let mut parts: Vec<_> = parts
                .iter()
                .filter(|p| p.meta.cube_id != part.meta.cube_id)
                .cloned()
                .collect();
            parts.push(part.clone());
            parts
        });
    }

    /// Removes the part of cube `cube_id`, returning it.
    pub(crate) fn remove_part(&self, cube_id: u64) -> Option<Arc<Part>> {
        let part = self.part(cube_id)?;
        self.parts.rcu(|parts| {
            parts
                .iter()
                .filter(|p| p.meta.cube_id != cube_id)
                .cloned()
                .collect::<Vec<_>>()
        });
        Some(part)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.reaper.delete(Path::from(self.meta.path.as_str()));
        }
    }
}

/// One immutable version of a table's segment list.
#[derive(Debug, Default)]
pub struct Manifest {
    pub version: u64,
    /// Every WAL record of this table with a sequence number up to this one is in `segments`.
    pub flushed_seq: u64,
    pub segments: Vec<Arc<Segment>>,
}

#[derive(Serialize, Deserialize)]
struct ManifestFile {
    table_id: u64,
    version: u64,
    flushed_seq: u64,
    segments: Vec<SegmentEntry>,
}

/// A segment as the manifest file names it, with its cube parts.
#[derive(Serialize, Deserialize)]
struct SegmentEntry {
    #[serde(flatten)]
    meta: SegmentMeta,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<PartMeta>,
}

/// Prefix of a table's objects.
pub fn table_prefix(table_id: u64) -> Path {
    Path::from(format!("tables/{table_id}"))
}

fn manifest_dir(table_id: u64) -> Path {
    Path::from(format!("tables/{table_id}/manifest"))
}

fn manifest_path(table_id: u64, version: u64) -> Path {
    Path::from(format!("tables/{table_id}/manifest/{version:020}.json"))
}

impl Manifest {
    /// The next version: `self` minus `removed` paths plus `added`.
    pub fn next(
        &self,
        added: Vec<Arc<Segment>>,
        removed: &[Arc<Segment>],
        flushed_seq: u64,
    ) -> Manifest {
        let mut segments: Vec<_> = self
            .segments
            .iter()
            .filter(|s| !removed.iter().any(|r| Arc::ptr_eq(r, s)))
            .cloned()
            .collect();
        segments.extend(added);
        Manifest {
            version: self.version + 1,
            flushed_seq,
            segments,
        }
    }

    /// Persists this version durably, unless another writer persisted this
    /// version number first ([`Error::CommitConflict`]: nothing of this
    /// version is visible). Call before swapping it in.
    pub async fn persist(&self, store: &Store, table_id: u64) -> Result<()> {
        let file = ManifestFile {
            table_id,
            version: self.version,
            flushed_seq: self.flushed_seq,
            segments: self
                .segments
                .iter()
                .map(|s| SegmentEntry {
                    meta: s.meta.clone(),
                    parts: s.parts().iter().map(|p| p.meta.clone()).collect(),
                })
                .collect(),
        };
        let bytes = serde_json::to_vec(&file).expect("manifest serializes");
        let path = manifest_path(table_id, self.version);
        if !store.put_new(&path, bytes.into()).await? {
            return Err(Error::CommitConflict {
                table_id,
                version: self.version,
                location: store.location().to_string(),
            });
        }
        failpoint!(MANIFEST_AFTER_WRITE, error);
        // A writer more than one version behind can create version N after
        // the newest writer deleted it; readers load the highest version, so
        // a higher one there means this version is shadowed: refused. The
        // listing is of this table's few manifest keys.
        let dir = manifest_dir(table_id);
        let versions: Vec<(u64, Path)> = store
            .list(&dir)
            .await?
            .into_iter()
            .filter_map(|p| parse_version(&p).map(|v| (v, p)))
            .collect();
        if versions.iter().any(|(v, _)| *v > self.version) {
            return Err(Error::CommitConflict {
                table_id,
                version: self.version,
                location: store.location().to_string(),
            });
        }
        // Older versions are no longer needed for recovery. The commit is
        // done: failing to delete them only leaves files the next commit
        // deletes, so it is logged, not returned.
        for (_, old) in versions.iter().filter(|(v, _)| *v < self.version) {
            if let Err(e) = store.delete(old).await {
                tracing::warn!(
                    table_id,
                    version = self.version,
                    "deleting older manifest versions: {e}"
                );
                break;
            }
        }
        Ok(())
    }

    /// Loads the newest version of a table's manifest (version 0, empty, if none).
    pub async fn load(store: &Store, table_id: u64, reaper: &Reaper) -> Result<Manifest> {
        let newest = store
            .list(&manifest_dir(table_id))
            .await?
            .into_iter()
            .filter_map(|p| parse_version(&p).map(|v| (v, p)))
            .max_by_key(|(v, _)| *v);
        let Some((_, path)) = newest else {
            return Ok(Manifest::default());
        };
        let bytes = store.get(&path).await?;
        let file: ManifestFile = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
            what: "manifest",
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Manifest {
            version: file.version,
            flushed_seq: file.flushed_seq,
            segments: file
                .segments
                .into_iter()
                .map(|e| {
                    let parts = e.parts.into_iter().map(|p| Part::new(p, reaper)).collect();
                    Segment::with_parts(e.meta, parts, reaper)
                })
                .collect(),
        })
    }
}

fn parse_version(p: &Path) -> Option<u64> {
    p.filename()?.strip_suffix(".json")?.parse().ok()
}

#[cfg(test)]
mod tests;
