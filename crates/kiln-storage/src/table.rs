//! A table: its definition, its memstore, and the lock that serializes
//! changes to its manifest (flush, compaction, import). Queries never take
//! that lock; they only pin a [`TableSnapshot`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use arrow::datatypes::SchemaRef;

use crate::cube::CubeDef;
use crate::manifest::{Manifest, Segment};
use crate::memstore::{MemStore, TableSnapshot};
use crate::schema::TableDef;

/// One table of the database.
#[derive(Debug)]
pub struct Table {
    pub def: TableDef,
    pub schema: SchemaRef,
    pub mem: MemStore,
    /// Its cubes, replaced whole by CREATE and DROP CUBE.
    cubes: ArcSwap<Vec<Arc<CubeDef>>>,
    /// Serializes manifest changes of this table only.
    pub(crate) manifest_lock: tokio::sync::Mutex<()>,
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
            manifest_lock: tokio::sync::Mutex::new(()),
            dropped: AtomicBool::new(false),
        })
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
