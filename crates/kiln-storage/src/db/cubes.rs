//! Cubes in the database: their definitions in the catalog, and their
//! parts written beside each new segment or built later for the segments
//! that lack them ([`crate::cube`] says why parts are per segment).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;

use super::{Db, Inner};
use crate::cube::{CubeBuilder, CubeColumn, CubeDef, Part, PartMeta};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, Segment};
use crate::segment;
use crate::table::{Commit, Table};

/// How long a part that failed to build is left before it is tried again.
pub(crate) const PART_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How a new cube is declared (the query layer has checked its expressions).
#[derive(Debug, Clone)]
pub struct CreateCube {
    pub name: String,
    pub table: String,
    pub dimensions: Vec<CubeColumn>,
    pub measures: Vec<CubeColumn>,
    pub if_not_exists: bool,
}

impl Db {
    /// Installs what computes cube parts. Until then segments are written
    /// without parts (and built later).
    pub fn set_cube_builder(&self, builder: Arc<dyn CubeBuilder>) {
        let _ = self.inner.cube_builder.set(builder);
    }

    /// Installs the runtimes whose blocking pools sort, encode and decode
    /// for flushes, compactions and cube builds ([`crate::cpu`]): `idle`
    /// while the tables keep up with their flushes, `urgent` once one
    /// falls behind. Until then that work runs on the caller's runtime's
    /// blocking pool.
    pub fn set_cpu_runtimes(
        &self,
        idle: Arc<dyn crate::CpuRuntime>,
        urgent: Arc<dyn crate::CpuRuntime>,
    ) {
        self.inner.cpu.install(idle, urgent);
    }

    /// Whether background work is urgent now ([`crate::cpu::Urgency`]):
    /// for a [`CubeBuilder`] choosing where to compute parts.
    pub fn background_urgency(&self) -> crate::cpu::Urgency {
        self.inner.cpu.urgency().clone()
    }

    /// Every cube with its table, by cube name.
    pub fn cubes(&self) -> Vec<(Arc<Table>, Arc<CubeDef>)> {
        let mut all: Vec<_> = self
            .tables()
            .into_iter()
            .flat_map(|t| {
                let cubes = t.cubes();
                cubes
                    .iter()
                    .map(|c| (t.clone(), c.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        all
    }

    /// The cube of that name and its table.
    pub fn cube(&self, name: &str) -> Option<(Arc<Table>, Arc<CubeDef>)> {
        self.cubes().into_iter().find(|(_, c)| c.name == name)
    }

    /// Creates a cube; durable in the catalog when this returns. The parts
    /// of the table's segments are built in the background; new segments
    /// get theirs as they are written. `None` if it existed and
    /// `if_not_exists` was given.
    pub async fn create_cube(&self, req: CreateCube) -> Result<Option<Arc<CubeDef>>> {
        let mut catalog = self.inner.catalog.lock().await;
        let table = self
            .table(&req.table)
            .ok_or_else(|| Error::TableNotFound(req.table.clone()))?;
        if catalog.cubes.iter().any(|c| c.name == req.name) {
            return match req.if_not_exists {
                true => Ok(None),
                false => Err(Error::CubeExists(req.name)),
            };
        }
        let def = CubeDef {
            id: catalog.next_cube_id.max(1),
            name: req.name,
            table_id: table.def.id,
            dimensions: req.dimensions,
            measures: req.measures,
        };
        catalog.next_cube_id = def.id + 1;
        catalog.cubes.push(def.clone());
        if let Err(e) = catalog.save(&self.inner.store).await {
            catalog.cubes.pop();
            return Err(e);
        }
        table.set_cubes(catalog.cubes_of(table.def.id));
        Ok(table.cubes().iter().find(|c| c.id == def.id).cloned())
    }

    /// Drops a cube: gone from the catalog when this returns, its parts
    /// leave the table's manifest, and their files are deleted once no
    /// running query reads them.
    pub async fn drop_cube(&self, name: &str, if_exists: bool) -> Result<bool> {
        let (table, cube) = {
            let mut catalog = self.inner.catalog.lock().await;
            let Some((table, cube)) = self.cube(name) else {
                return match if_exists {
                    true => Ok(false),
                    false => Err(Error::CubeNotFound(name.into())),
                };
            };
            let old = catalog.cubes.clone();
            catalog.cubes.retain(|c| c.id != cube.id);
            if let Err(e) = catalog.save(&self.inner.store).await {
                catalog.cubes = old;
                return Err(e);
            }
            table.set_cubes(catalog.cubes_of(table.def.id));
            (table, cube)
        };
        let mut doubt = table.manifest_lock.lock().await;
        // The cube is gone from the catalog either way: a failed commit only
        // leaves its parts named in the manifest, ignored and forgotten at
        // the next open.
        if let Err(e) = table.settle(&self.inner.store, &mut doubt).await {
            tracing::warn!(
                cube = name,
                "dropping the cube's parts from the manifest: {e}"
            );
            return Ok(true);
        }
        let current = table.mem.manifest();
        let removed: Vec<Arc<Part>> = current
            .segments
            .iter()
            .filter_map(|s| s.remove_part(cube.id))
            .collect();
        if removed.is_empty() {
            return Ok(true);
        }
        let commit = Commit {
            next: current.next(vec![], &[], current.flushed_seq),
            flushed: None,
            settled: Box::new(move |ok| {
                if ok {
                    removed.iter().for_each(|p| p.retire());
                }
            }),
        };
        if let Err(e) = table.commit(&self.inner.store, &mut doubt, commit).await {
            tracing::warn!(
                cube = name,
                "dropping the cube's parts from the manifest: {e}"
            );
        }
        Ok(true)
    }

    /// Builds every missing cube part now (tests, and `kiln` commands that
    /// want cubes ready). Returns how many segments got parts.
    pub async fn build_cube_parts(&self) -> Result<usize> {
        let mut n = 0;
        for t in self.tables() {
            n += self.inner.build_missing_parts(&t, usize::MAX).await?;
        }
        Ok(n)
    }
}

/// Leaves out of a loaded manifest the parts of cubes the catalog no longer
/// has (a DROP CUBE whose manifest commit failed); their files go as orphans.
pub(super) fn forget_dropped_parts(manifest: &Manifest, cubes: &[Arc<CubeDef>]) {
    for s in &manifest.segments {
        for p in s.parts().iter() {
            if !cubes.iter().any(|c| c.id == p.meta.cube_id) {
                s.remove_part(p.meta.cube_id);
            }
        }
    }
}

impl Inner {
    /// The parts of `cubes` over the rows of the segment at `segment` (its
    /// path), sorted as it keeps them, each merged from the parts of
    /// `inputs` (the segments a compaction merged into it) where they all
    /// have one. A part that fails
    /// to build is left out (logged, and tried again after
    /// [`PART_RETRY_AFTER`]): its segment is then read raw, which is slower
    /// but exact.
    pub(crate) async fn build_parts(
        &self,
        table: &Table,
        segment: &str,
        rows: &RecordBatch,
        cubes: &[Arc<CubeDef>],
        inputs: &[Arc<Segment>],
    ) -> Vec<Arc<Part>> {
        let Some(builder) = self.cube_builder.get() else {
            return vec![];
        };
        // As many parts at once as there are cores: a flush's parts take
        // longer to compute than its segment to encode, and one after the
        // other they left a core idle. Where each is computed is the
        // builder's choice ([`CubeBuilder::build`]).
        let at_once = std::thread::available_parallelism().map_or(1, usize::from);
        let writes: Vec<_> = cubes
            .iter()
            .map(|cube| self.write_part(builder, table, cube, segment, rows, inputs))
            .collect();
        let built: Vec<_> = futures::stream::iter(writes)
            .buffered(at_once)
            .collect()
            .await;
        let mut parts = vec![];
        for (cube, part) in cubes.iter().zip(built) {
            match part {
                Ok(Some(p)) => parts.push(p),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(cube = cube.name, segment, error = %e,
                        "cube part not built; queries read this segment raw");
                    self.failed_parts
                        .lock()
                        .insert((segment.to_string(), cube.id), Instant::now());
                }
            }
        }
        parts
    }

    async fn write_part(
        &self,
        builder: &Arc<dyn CubeBuilder>,
        table: &Table,
        cube: &CubeDef,
        segment: &str,
        rows: &RecordBatch,
        inputs: &[Arc<Segment>],
    ) -> Result<Option<Arc<Part>>> {
        let merged = match self.merge_of(builder, cube, inputs).await {
            Some(merge) => match caught(cube, "merging the inputs' parts", merge).await {
                Ok(states) => Some(states),
                Err(e) => {
                    tracing::warn!(cube = cube.name, segment, error = %e,
                        "merging the inputs' parts failed; building the part from the rows");
                    None
                }
            },
            None => None,
        };
        let states = match merged {
            Some(states) => {
                self.metrics.parts_merged.fetch_add(1, Ordering::Relaxed);
                states
            }
            None => match builder.build(table, cube, rows.clone()) {
                Some(build) => caught(cube, "building its part", build).await?,
                None => return Ok(None),
            },
        };
        let compression = self.config.segment_compression;
        let rows = states.num_rows() as u64;
        let written = states.clone();
        let bytes = self
            .cpu
            .run(move || segment::encode(&states, None, compression))
            .await?;
        let stem = segment.trim_end_matches(".parquet");
        let path = format!("{stem}.cube{}.parquet", cube.id);
        let len = bytes.len() as u64;
        self.store
            .put_durable(&Path::from(path.as_str()), bytes)
            .await?;
        let meta = PartMeta {
            cube_id: cube.id,
            path,
            rows,
            bytes: len,
        };
        if let Some(warm) = builder.written(&meta, written)
            && AssertUnwindSafe(warm).catch_unwind().await.is_err()
        {
            tracing::warn!(
                cube = cube.name,
                part = meta.path,
                "making a part's reads panicked"
            );
        }
        Ok(Some(Part::new(meta, &self.reaper)))
    }

    /// What merges `cube`'s parts of `inputs` into the part of the segment
    /// they are merged into: `None` unless every one of them has its part,
    /// all of which are read, and the builder merges them.
    async fn merge_of(
        &self,
        builder: &Arc<dyn CubeBuilder>,
        cube: &CubeDef,
        inputs: &[Arc<Segment>],
    ) -> Option<BoxFuture<'static, Result<RecordBatch>>> {
        let parts: Vec<Arc<Part>> = inputs
            .iter()
            .map(|s| s.part(cube.id))
            .collect::<Option<_>>()?;
        if parts.is_empty() {
            return None;
        }
        let mut states = vec![];
        for p in &parts {
            match segment::read(&self.cpu, &self.store, &p.meta.path).await {
                Ok(batches) => states.extend(batches),
                Err(e) => {
                    tracing::warn!(cube = cube.name, part = p.meta.path, error = %e,
                        "a part to merge could not be read; building from the rows");
                    return None;
                }
            }
        }
        builder.merge(cube, states)
    }

    /// Builds the parts `table`'s segments lack, for at most `limit`
    /// segments, each committed in a manifest version of its own. Returns
    /// how many segments got parts.
    pub(crate) async fn build_missing_parts(&self, table: &Table, limit: usize) -> Result<usize> {
        if self.cube_builder.get().is_none() {
            return Ok(0);
        }
        let cubes = table.cubes();
        if cubes.is_empty() {
            return Ok(0);
        }
        let todo: Vec<(Arc<Segment>, Vec<Arc<CubeDef>>)> = {
            let mut failed = self.failed_parts.lock();
            failed.retain(|_, at| at.elapsed() < PART_RETRY_AFTER);
            table
                .segments()
                .into_iter()
                .filter_map(|s| {
                    let missing: Vec<_> = cubes
                        .iter()
                        .filter(|c| s.part(c.id).is_none())
                        .filter(|c| !failed.contains_key(&(s.meta.path.clone(), c.id)))
                        .cloned()
                        .collect();
                    (!missing.is_empty()).then_some((s, missing))
                })
                .take(limit)
                .collect()
        };
        let mut built = 0;
        for (segment, missing) in todo {
            let rows = match segment::read(&self.cpu, &self.store, &segment.meta.path).await {
                Ok(batches) => concat_batches(&table.schema, &batches)?,
                Err(e) => {
                    // Read raw by queries until a later try succeeds.
                    tracing::warn!(segment = segment.meta.path, error = %e, "cube parts not built");
                    let mut failed = self.failed_parts.lock();
                    for c in &missing {
                        failed.insert((segment.meta.path.clone(), c.id), Instant::now());
                    }
                    continue;
                }
            };
            let parts = self
                .build_parts(table, &segment.meta.path, &rows, &missing, &[])
                .await;
            if parts.is_empty() {
                continue;
            }
            let mut doubt = table.manifest_lock.lock().await;
            table.settle(&self.store, &mut doubt).await?;
            let current = table.mem.manifest();
            let live = table.cubes();
            let still_there =
                !table.is_dropped() && current.segments.iter().any(|s| Arc::ptr_eq(s, &segment));
            let mut added = vec![];
            for p in parts {
                if still_there && live.iter().any(|c| c.id == p.meta.cube_id) {
                    segment.add_part(p.clone());
                    added.push(p);
                } else {
                    p.retire();
                }
            }
            if added.is_empty() {
                continue;
            }
            let built_on = segment.clone();
            let commit = Commit {
                next: current.next(vec![], &[], current.flushed_seq),
                flushed: None,
                // Refused: the parts leave the segment; their files are
                // orphans the next open deletes.
                settled: Box::new(move |ok| {
                    if !ok {
                        for p in &added {
                            built_on.remove_part(p.meta.cube_id);
                        }
                    }
                }),
            };
            table.commit(&self.store, &mut doubt, commit).await?;
            built += 1;
        }
        Ok(built)
    }
}

/// What `work` returns: the query layer's code computing `cube`'s states,
/// which does `what` (named in the error). A panic in it (a measure's
/// state it cannot hold) is made an error: it fails this part alone,
/// where unwinding through here would fail every later flush of the table.
async fn caught(
    cube: &CubeDef,
    what: &str,
    work: BoxFuture<'static, Result<RecordBatch>>,
) -> Result<RecordBatch> {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(states) => states,
        Err(panic) => {
            let reason = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            Err(Error::CubeBuild {
                cube: cube.name.clone(),
                reason: format!("{what} failed: {reason}"),
            })
        }
    }
}
