//! A table: its definition, its memstore, and the lock that serializes
//! changes to its manifest (flush, compaction, import, cube parts). Queries
//! never take that lock; they only pin a [`TableSnapshot`].
//!
//! A manifest commit can fail with its outcome unknown: the version may be
//! stored although the call failed (a response lost on the network, an
//! fsync failing after the write). Such a commit is kept under the lock
//! ([`Commit`]) and settled before any other version is written, by
//! committing the same bytes again: a store that already holds them counts
//! that as success. Writing a different version N instead would collide
//! with the stored one forever, and a flush's rows would be written twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use arrow::datatypes::SchemaRef;

use crate::cube::CubeDef;
use crate::error::{ErrorKind, Result};
use crate::manifest::{Manifest, Segment};
use crate::memstore::{FlushSet, MemStore, TableSnapshot};
use crate::schema::TableDef;
use crate::store::Store;

/// A manifest version to commit, and what to do once its fate is known.
pub(crate) struct Commit {
    pub next: Manifest,
    /// The memstore chunks whose rows `next` persists (a flush), which
    /// leave memory when it is published.
    pub flushed: Option<FlushSet>,
    /// Called once, after `next` is published (`true`) or refused by a
    /// conflict (`false`): retires the files that version replaced or the
    /// files that were written for nothing.
    pub settled: Box<dyn FnOnce(bool) + Send + Sync>,
}

impl std::fmt::Debug for Commit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commit")
            .field("version", &self.next.version)
            .field("flush", &self.flushed.is_some())
            .finish()
    }
}

/// What the manifest lock guards: a commit whose outcome is unknown.
pub(crate) type InDoubt = Option<Commit>;

/// One table of the database.
#[derive(Debug)]
pub struct Table {
    pub def: TableDef,
    pub schema: SchemaRef,
    pub mem: MemStore,
    /// Its cubes, replaced whole by CREATE and DROP CUBE.
    cubes: ArcSwap<Vec<Arc<CubeDef>>>,
    /// Serializes manifest changes of this table only, and holds a commit
    /// left in doubt until it is settled.
    pub(crate) manifest_lock: tokio::sync::Mutex<InDoubt>,
    dropped: AtomicBool,
}

impl Table {
    pub(crate) fn new(
        def: TableDef,
        manifest: Manifest,
        freeze_bytes: usize,
        cubes: Vec<Arc<CubeDef>>,
    ) -> Arc<Self> {
        let schema = def.arrow_schema();
        let mem = MemStore::new(&def, schema.clone(), manifest, freeze_bytes);
        Arc::new(Self {
            def,
            schema,
            mem,
            cubes: ArcSwap::from_pointee(cubes),
            manifest_lock: tokio::sync::Mutex::new(None),
            dropped: AtomicBool::new(false),
        })
    }

    /// Commits `c` as this table's next manifest version and publishes it.
    /// `doubt` is the manifest lock's content, settled first by the caller
    /// ([`Table::settle`]). A conflict runs `c.settled(false)` (and a
    /// flush's rows stay in memory); any other error keeps `c` in `doubt`.
    pub(crate) async fn commit(&self, store: &Store, doubt: &mut InDoubt, c: Commit) -> Result<()> {
        match c.next.persist(store, self.def.id).await {
            Ok(()) => {
                self.mem.publish(c.next, c.flushed.as_ref());
                (c.settled)(true);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::CommitConflict => {
                if c.flushed.is_some() {
                    self.mem.abort_flush();
                }
                (c.settled)(false);
                Err(e)
            }
            Err(e) => {
                *doubt = Some(c);
                Err(e)
            }
        }
    }

    /// Settles a commit left in doubt by committing it again; an error
    /// means it is still in doubt (or was refused), and no other version
    /// may be written yet.
    pub(crate) async fn settle(&self, store: &Store, doubt: &mut InDoubt) -> Result<()> {
        match doubt.take() {
            Some(c) => {
                tracing::info!(
                    table = self.name(),
                    version = c.next.version,
                    "settling a commit left in doubt"
                );
                self.commit(store, doubt, c).await
            }
            None => Ok(()),
        }
    }

    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// Everything acknowledged so far: pinned segments plus memory.
    pub fn snapshot(&self) -> TableSnapshot {
        self.mem.snapshot()
    }

    /// Segments of the current manifest version.
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.mem.manifest().segments.clone()
    }

    /// Its cubes now, lock-free.
    pub fn cubes(&self) -> Arc<Vec<Arc<CubeDef>>> {
        self.cubes.load_full()
    }

    pub(crate) fn set_cubes(&self, cubes: Vec<Arc<CubeDef>>) {
        self.cubes.store(Arc::new(cubes));
    }

    pub(crate) fn mark_dropped(&self) {
        self.dropped.store(true, Ordering::Release);
        for s in self.segments() {
            s.retire();
        }
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }
}
