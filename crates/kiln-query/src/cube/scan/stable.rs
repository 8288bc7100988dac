//! A day's stable states, read merged.
//!
//! A live table's day is read from several sets of states: the parts of
//! its segments (a flush adds one a day until compaction merges them) and
//! the states of its large in-memory batches (a frozen buffer's, an active
//! buffer's largest). A query cuts each set and merges their rows, and
//! that work is per set, whatever few rows of it the query reads: under a
//! steady stream a day is about ten sets, a table of weeks over a hundred.
//!
//! The sets that change seldom are therefore read merged: per span of
//! days, the parts and the states of in-memory batches of at least
//! [`STABLE_ROWS`] rows (which the memstore replaces only every that many
//! rows of the day) are merged to the dimensions the query reads, once,
//! and kept in the cube cache under the names of what was merged (part
//! paths, batch numbers: each names rows that never change), so the next
//! query over the same sets finds them by one lookup. A change to any set
//! names a new merge; the old one is no longer read and leaves the cache
//! as it fills. Smaller batches, which change a few times a second, are
//! read as before, each from its own states.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use kiln_storage::memstore::{Days, MemBatch};
use kiln_storage::{Db, NANOS_PER_DAY, Part, Segment};

use super::super::Cubes;
use super::super::plan::CubePlan;
use super::super::rollup;

/// In-memory batches of at least this many rows are read merged with the
/// day's parts: the memstore makes a batch this large only every this
/// many rows of a day (an active buffer's batches double in size), so a
/// merge stays valid for that long.
pub const STABLE_ROWS: usize = 8192;

/// States of one source: a segment's part (decoded and rolled up on
/// read), or an in-memory batch's states, as read.
enum Source {
    Part(Arc<Part>),
    Mem(RecordBatch),
}

/// A source and what names it: its part's path, or its batch's number.
struct Stable {
    name: String,
    source: Source,
    /// The first and last instants of its rows.
    time: (i128, i128),
}

/// The stable sources a query reads, by span of days (first, last).
#[derive(Default)]
pub(super) struct StableDays(BTreeMap<(i32, i32), Vec<Stable>>);

impl StableDays {
    /// Adds a segment's part.
    pub(super) fn part(&mut self, segment: &Segment, part: Arc<Part>) {
        let meta = &segment.meta;
        let last = i32::try_from(meta.max_time.div_euclid(NANOS_PER_DAY)).unwrap_or(i32::MAX);
        self.0.entry((meta.day, last)).or_default().push(Stable {
            name: part.meta.path.clone(),
            source: Source::Part(part),
            time: (i128::from(meta.min_time), i128::from(meta.max_time)),
        });
    }

    /// Adds an in-memory batch's states (rows of `days`, timed within
    /// `time`).
    pub(super) fn mem(
        &mut self,
        days: Days,
        batch: &MemBatch,
        states: RecordBatch,
        time: (i128, i128),
    ) {
        self.0
            .entry((days.first, days.last))
            .or_default()
            .push(Stable {
                name: format!("m{}", batch.id()),
                source: Source::Mem(states),
                time,
            });
    }

    /// Each span's states, with the first and last instants of their rows:
    /// a lone source's own, several merged to the dimensions in `used`
    /// (kept, module docs).
    pub(super) async fn read(
        self,
        cubes: &Cubes,
        db: &Db,
        cube: &CubePlan,
        used: &[bool],
        ctx: &Arc<TaskContext>,
    ) -> Result<Vec<(RecordBatch, (i128, i128))>> {
        let mut out = Vec::with_capacity(self.0.len());
        for (_, sources) in self.0 {
            let time = sources.iter().fold((i128::MAX, i128::MIN), |(a, b), s| {
                (a.min(s.time.0), b.max(s.time.1))
            });
            let rows = match sources.as_slice() {
                [one] => one.rows(cubes, db, cube, used, ctx).await?,
                _ => {
                    let key = merge_key(cube.def.id, used, &sources);
                    cubes
                        .kept(key, async {
                            let mut rows = Vec::with_capacity(sources.len());
                            for s in &sources {
                                rows.push(s.rows(cubes, db, cube, used, ctx).await?);
                            }
                            let all = concat_batches(&cube.scan_schema, &rows)?;
                            rollup::rollup(cube, all, used, ctx.clone()).await
                        })
                        .await?
                }
            };
            out.push((rows, time));
        }
        Ok(out)
    }
}

impl Stable {
    /// The source's states, rolled up to `used`.
    async fn rows(
        &self,
        cubes: &Cubes,
        db: &Db,
        cube: &CubePlan,
        used: &[bool],
        ctx: &Arc<TaskContext>,
    ) -> Result<RecordBatch> {
        match &self.source {
            Source::Part(part) => cubes.rolled_up(db, part, cube, used, ctx).await,
            Source::Mem(rows) => Ok(rows.clone()),
        }
    }
}

/// The cube cache's key of `sources` merged: the cube, the dimensions
/// read and the sources' names, which no other merge shares (a part's
/// path holds a unique file name, `/`s; a batch number is `m` and
/// digits).
fn merge_key(cube: u64, used: &[bool], sources: &[Stable]) -> String {
    let mut key = format!("merged#{cube}#");
    for u in used {
        key.push(if *u { '1' } else { '0' });
    }
    for s in sources {
        let _ = write!(key, "|{}", s.name);
    }
    key
}

#[cfg(test)]
mod tests;
