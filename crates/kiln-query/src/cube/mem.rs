//! A cube's states over rows still in the memstore, made on first read
//! and kept with the batches they were made from, so queries over a live
//! table merge states instead of aggregating the same raw rows each time.
//! A batch of at least [`super::scan::MEM_STATES_MIN_ROWS`] rows keeps its
//! own states ([`Cubes::mem_states`]); the smaller batches of one day, which
//! a stream of writes replaces a few times a second, keep theirs together
//! with the newest of them ([`Cubes::tail_states`]). The query that finds
//! them missing makes them as a task of its own ([`shared`]): the work is
//! every reader's, not that query's alone.

use std::sync::{Arc, Weak};

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::{concat_batches, max, min};
use datafusion::arrow::datatypes::TimestampNanosecondType;
use datafusion::common::{DataFusionError, Result as DfResult, internal_err};
use datafusion::execution::TaskContext;
use kiln_storage::memstore::MemBatch;
use tokio::sync::OnceCell;

use super::Cubes;
use super::plan::CubePlan;
use super::rollup;
use crate::executor::shared;

impl Cubes {
    /// An in-memory batch's states for `cube`, merged to the dimensions in
    /// `used`: like [`Self::rolled_up`] for a part, but made on first read
    /// (from the batch's rows, or merged from the states it inherited,
    /// [`batch_states`]) and kept with the batch ([`MemBatch::derived`])
    /// until its rows are flushed or merged into a larger batch, which
    /// inherits them; counted in the memstore's bytes meanwhile
    /// ([`MemBatch::charge_derived`]). Queries asking at once wait for one
    /// of them to make it.
    pub(super) async fn mem_states(
        &self,
        batch: &Arc<MemBatch>,
        cube: &Arc<CubePlan>,
        used: &[bool],
        time_column: usize,
        ctx: &Arc<TaskContext>,
    ) -> DfResult<Arc<MemStates>> {
        let id = cube.def.id;
        let whole = (id, u64::MAX);
        let all = batch.derived(whole, OnceCell::<Arc<MemStates>>::new);
        let all = all
            .get_or_try_init(|| async {
                let (b, c) = (batch.clone(), cube.clone());
                let rows = shared(async move { batch_states(&b, &c).await }).await?;
                let time = time_range(&batch.batch, time_column);
                batch.charge_derived(whole, rows.get_array_memory_size());
                batch.drop_inherited(whole);
                Ok::<_, DataFusionError>(Arc::new(MemStates { rows, time }))
            })
            .await?;
        let Some(key) = rollup::key(used) else {
            return Ok(all.clone());
        };
        // A batch keeps a few rollups per cube, so its memory stays a
        // small multiple of its states whatever sets queries read; other
        // sets read the states themselves (a rollup only saves work).
        let rollup = |(c, k): &(u64, u64)| *c == id && *k < TAIL;
        let Some(rolled) = batch.derived_within(
            (id, key),
            OnceCell::<Arc<MemStates>>::new,
            rollup,
            MEM_ROLLUPS,
        ) else {
            return Ok(all.clone());
        };
        let rolled = rolled
            .get_or_try_init(|| async {
                let (c, rows, used, ctx) =
                    (cube.clone(), all.rows.clone(), used.to_vec(), ctx.clone());
                let rows =
                    shared(async move { rollup::rollup(&c, rows, &used, ctx).await }).await?;
                batch.charge_derived((id, key), rows.get_array_memory_size());
                Ok::<_, DataFusionError>(Arc::new(MemStates {
                    rows,
                    time: all.time,
                }))
            })
            .await?;
        Ok(rolled.clone())
    }

    /// The cube's states over `run`: one day's small in-memory batches
    /// (each under [`super::scan::MEM_STATES_MIN_ROWS`] rows), oldest first.
    /// A live stream changes a day's small batches a few times a second
    /// while every query reads them, so states made once per change and
    /// kept with the run's newest batch replace an aggregation of the same
    /// rows in each query. A run changes only at its end (the memstore
    /// merges a buffer's newest batches into a new one), so its newest
    /// batch names it; a run whose other batches are not those kept is
    /// aggregated without being kept. The states count in the memstore's
    /// bytes while the newest batch is there ([`MemBatch::charge_derived`]);
    /// those the run's older batches kept, when each was its newest, go.
    pub(super) async fn tail_states(
        &self,
        run: &[Arc<MemBatch>],
        cube: &Arc<CubePlan>,
        time_column: usize,
    ) -> DfResult<Arc<MemStates>> {
        let Some((newest, others)) = run.split_last() else {
            return internal_err!("a run of in-memory batches without a batch");
        };
        let make = || {
            let rows: Vec<RecordBatch> = run.iter().map(|b| b.viewed().clone()).collect();
            let cube = cube.clone();
            shared(async move {
                let rows = concat_batches(rows[0].schema_ref(), &rows)?;
                let time = time_range(&rows, time_column);
                let rows = rows_states(rows, &cube).await?;
                Ok(Arc::new(MemStates { rows, time }))
            })
        };
        let key = (cube.def.id, TAIL);
        // Kept apart from what merged batches inherit (they make their own
        // states); counting only this key, the bound always lets it in.
        let Some(kept) = newest.derived_within(key, OnceCell::<Tail>::new, |k| *k == key, 1) else {
            return make().await;
        };
        let tail = kept
            .get_or_try_init(|| async {
                let states = make().await?;
                newest.charge_derived(key, states.rows.get_array_memory_size());
                // What the run's older batches kept when each was its
                // newest covers fewer rows: no new snapshot reads it again.
                for b in others {
                    b.forget(key);
                }
                let others = others.iter().map(Arc::downgrade).collect();
                Ok::<_, DataFusionError>(Tail { others, states })
            })
            .await?;
        let same = tail.others.len() == others.len()
            && tail
                .others
                .iter()
                .zip(others)
                .all(|(kept, b)| std::ptr::eq(kept.as_ptr(), Arc::as_ptr(b)));
        match same {
            true => Ok(tail.states.clone()),
            false => make().await,
        }
    }
}

/// Rollups an in-memory batch keeps per cube ([`Cubes::mem_states`]).
pub const MEM_ROLLUPS: usize = 4;

/// The key a run of small batches keeps its states under, with its newest
/// batch ([`Cubes::tail_states`]); rollups' keys are below it
/// ([`rollup::key`]), the whole states' above.
pub(super) const TAIL: u64 = u64::MAX - 1;

/// A run's states, kept with its newest batch, and the run's other
/// batches: weak, so the newest batch does not keep them (or itself)
/// alive, and a weak pointer holds its allocation, so pointers compare
/// batches exactly.
struct Tail {
    others: Vec<Weak<MemBatch>>,
    states: Arc<MemStates>,
}

/// A cube's states over an in-memory batch ([`Cubes::mem_states`]): rows
/// as a part's (scan schema, sorted by the dimensions) and the first and
/// last time of the batch's rows.
pub(super) struct MemStates {
    pub(super) rows: RecordBatch,
    pub(super) time: (i128, i128),
}

/// A cube's states over `batch`'s rows, as [`MemStates::rows`]. A batch
/// the memstore merged from others inherits their states
/// ([`MemBatch::inherited`]): they are merged with the states of the rows
/// they leave out, and only those rows are read. Otherwise every row is,
/// and so it is where the inherited states hold more than half as many
/// rows as they cover: merging them would cost about what reading their
/// rows does, on top of the read of the others (small batches of a live
/// stream, whose groups are mostly one row).
async fn batch_states(batch: &MemBatch, cube: &CubePlan) -> DfResult<RecordBatch> {
    let of_rows =
        |rows: RecordBatch| async move { cube.for_scan(cube.states_of(cube.read(&rows)?).await?) };
    let inherited: Vec<_> = batch
        .inherited((cube.def.id, u64::MAX))
        .into_iter()
        .filter_map(|(rows, v)| {
            let states = v.downcast::<OnceCell<Arc<MemStates>>>().ok()?;
            Some((rows, states.get()?.rows.clone()))
        })
        .collect();
    let covered: usize = inherited.iter().map(|(rows, _)| rows.len()).sum();
    let states: usize = inherited.iter().map(|(_, s)| s.num_rows()).sum();
    if inherited.is_empty() || states * 2 > covered {
        return rows_states(batch.viewed().clone(), cube).await;
    }
    let (mut parts, mut gaps, mut at) = (vec![], vec![], 0);
    for (rows, states) in inherited {
        gaps.push(at..rows.start);
        parts.push(states);
        at = rows.end;
    }
    gaps.push(at..batch.rows());
    for gap in gaps.into_iter().filter(|g| !g.is_empty()) {
        let rows = batch.viewed().slice(gap.start, gap.len());
        parts.push(of_rows(rows).await?);
    }
    let parts = concat_batches(&cube.scan_schema, &parts)?;
    rollup::merged(cube, parts).await
}

/// The first and last instants of `rows`' time column (nanoseconds).
fn time_range(rows: &RecordBatch, time_column: usize) -> (i128, i128) {
    let ts = rows.column(time_column);
    let ts = ts.as_primitive::<TimestampNanosecondType>();
    (
        min(ts).map_or(i128::MAX, i128::from),
        max(ts).map_or(i128::MIN, i128::from),
    )
}

/// A cube's states over `rows` (the table's view schema), sorted by the
/// dimensions as a part's rows are.
async fn rows_states(rows: RecordBatch, cube: &CubePlan) -> DfResult<RecordBatch> {
    let states = cube.for_scan(cube.states_of(cube.read(&rows)?).await?)?;
    rollup::sorted(states, cube.def.dimensions.len())
}
