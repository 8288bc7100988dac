//! Cubes as the storage engine keeps them.
//!
//! A cube is an aggregating index of one table: the mergeable states of
//! its measures grouped by its dimensions. The storage engine does not
//! know what those are (it knows no SQL): it persists each definition in
//! the catalog as text, and gives each segment one *part* per cube, a
//! small Parquet file of that cube's states over that segment's rows,
//! computed by the [`CubeBuilder`] the query layer installs.
//!
//! Why per segment: a part is derived from one immutable file, so it never
//! goes stale. A flush or compaction writes the parts of its new segments
//! before it commits, so the manifest version that adds a segment also
//! names its parts, and no query sees one without the other. A segment
//! without a part (written before its cube existed, or whose part failed to
//! build) is read raw by queries until the background builds it; adding a
//! part later commits a new manifest version, and queries that pinned the
//! older one may see the part too, which is harmless: the part holds
//! exactly what the segment holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::RecordBatch;
use futures::future::BoxFuture;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::manifest::Reaper;
use crate::table::Table;

/// An expression of a cube definition, as SQL text, and its output name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CubeColumn {
    pub sql: String,
    pub name: String,
}

/// A cube's definition, as persisted in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CubeDef {
    pub id: u64,
    pub name: String,
    pub table_id: u64,
    pub dimensions: Vec<CubeColumn>,
    pub measures: Vec<CubeColumn>,
}

impl CubeDef {
    /// The definition as the statement that creates it.
    pub fn sql(&self, table: &str) -> String {
        let list = |cols: &[CubeColumn]| {
            cols.iter()
                .map(|c| format!("{} AS {}", c.sql, c.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "CREATE CUBE {} ON {table} DIMENSIONS ({}) MEASURES ({})",
            self.name,
            list(&self.dimensions),
            list(&self.measures)
        )
    }
}

/// What the manifest records about a segment's part of one cube.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartMeta {
    pub cube_id: u64,
    /// Object path relative to the store root.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
}

/// A live part. Dropping the last reference to a retired part deletes its
/// file, as for segments: a query that pinned it keeps it readable.
#[derive(Debug)]
pub struct Part {
    pub meta: PartMeta,
    obsolete: AtomicBool,
    reaper: Reaper,
}

impl Part {
    pub fn new(meta: PartMeta, reaper: &Reaper) -> Arc<Self> {
        Arc::new(Self {
            meta,
            obsolete: AtomicBool::new(false),
            reaper: reaper.clone(),
        })
    }

    /// Marks the file for deletion once nothing uses it.
    pub fn retire(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.reaper.delete(Path::from(self.meta.path.as_str()));
        }
    }
}

/// Computes cube parts; installed by the query layer with
/// [`crate::Db::set_cube_builder`].
pub trait CubeBuilder: Send + Sync + 'static {
    /// The part of `cube` over `rows`, one segment's rows in the table's
    /// storage schema: the cube's dimension values and measure states, one
    /// row per group. Nothing is written by this call. `None` when the
    /// cube cannot be built yet (its definition is still being planned):
    /// the segment is built later. An error, or a panic, leaves the segment
    /// without this part until a retry; queries then read that segment raw.
    /// The parts of one segment are awaited together, as many at once as
    /// there are cores: a future that computes where it is polled keeps
    /// them on one thread, one that hands its work to threads of its own
    /// computes them side by side.
    fn build(
        &self,
        table: &Table,
        cube: &CubeDef,
        rows: RecordBatch,
    ) -> Option<BoxFuture<'static, Result<RecordBatch>>>;

    /// The part of `cube` over the rows of several segments, made from
    /// their parts (`parts`: each part's rows as [`Self::build`] made them,
    /// in any order): what [`Self::build`] gives for all those rows
    /// together. A compaction calls it when every segment it merges has
    /// its part, rather than aggregating the merged rows again. `None` (the
    /// default) when the builder cannot: the part is then built from the
    /// rows. Nothing is written by this call; an error also leaves the
    /// part to be built from the rows.
    fn merge(
        &self,
        cube: &CubeDef,
        parts: Vec<RecordBatch>,
    ) -> Option<BoxFuture<'static, Result<RecordBatch>>> {
        let _ = (cube, parts);
        None
    }

    /// Called once `part`, whose rows [`Self::build`] made as `states`, is
    /// durable, and before the manifest that names it is committed: what
    /// queries will read of it can be made here, where no query waits,
    /// rather than by the first queries after the commit. The commit waits
    /// for the returned future; nothing it makes is durable, and a failure
    /// leaves the queries to make it.
    fn written(&self, part: &PartMeta, states: RecordBatch) -> Option<BoxFuture<'static, ()>> {
        let _ = (part, states);
        None
    }
}
