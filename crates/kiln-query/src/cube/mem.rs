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
use kiln_storage::memstore::{Days, DerivedKey, MemBatch};
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
                // A run's states it was merged from: not read for a batch
                // this large (its own states are made above).
                batch.drop_inherited((id, TAIL));
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
    /// rows in each query. A run changes only at its end: the memstore adds
    /// a batch of the rows written since, or merges its newest batches
    /// with them into one ([`MemBatch::merged`]). So the run's newest batch
    /// names it, and its states are the last run's (kept with that run's
    /// newest batch, [`base`]) with those of the rows it did not cover
    /// placed among them ([`rollup::interleaved`]): each change aggregates
    /// only the rows written since, not the whole run again. A run whose
    /// other batches are not those kept is aggregated without being kept.
    /// The states count in the memstore's bytes while the newest batch is
    /// there ([`MemBatch::charge_derived`]); the last run's go.
    pub(super) async fn tail_states(
        &self,
        run: &[Arc<MemBatch>],
        days: Days,
        cube: &Arc<CubePlan>,
        time_column: usize,
    ) -> DfResult<Arc<MemStates>> {
        let Some((newest, others)) = run.split_last() else {
            return internal_err!("a run of in-memory batches without a batch");
        };
        let key = (cube.def.id, TAIL);
        let rows: usize = run.iter().map(|b| b.rows()).sum();
        let kept = newest.derived(key, OnceCell::<Tail>::new);
        let tail = kept
            .get_or_try_init(|| async {
                let (base, from) = match base(newest, others, days, key) {
                    Some((states, from)) => (Some(states), from),
                    None => (None, 0),
                };
                // The rows the base leaves out: the newest batch's last ones,
                // or with no base, the whole run's.
                let unread = match &base {
                    Some(_) => vec![newest.viewed().slice(from, newest.rows() - from)],
                    None => run.iter().map(|b| b.viewed().clone()).collect(),
                };
                let states = added_states(base, unread, cube, time_column).await?;
                newest.charge_derived(key, states.rows.get_array_memory_size());
                // What the last run's newest batch kept covers fewer rows:
                // no new snapshot reads it again.
                newest.drop_inherited(key);
                for b in others {
                    b.forget(key);
                }
                let others = others.iter().map(Arc::downgrade).collect();
                Ok::<_, DataFusionError>(Tail {
                    days,
                    others,
                    rows,
                    states,
                })
            })
            .await?;
        match same_batches(&tail.others, others) {
            true => Ok(tail.states.clone()),
            false => {
                let rows = run.iter().map(|b| b.viewed().clone()).collect();
                added_states(None, rows, cube, time_column).await
            }
        }
    }
}

/// `base` (none: no states) with the states of `rows` (in-memory batches'
/// viewed rows) placed among its own, made as a task of its own
/// ([`shared`]).
async fn added_states(
    base: Option<Arc<MemStates>>,
    rows: Vec<RecordBatch>,
    cube: &Arc<CubePlan>,
    time_column: usize,
) -> DfResult<Arc<MemStates>> {
    if let Some(base) = &base
        && rows.iter().all(|r| r.num_rows() == 0)
    {
        return Ok(base.clone());
    }
    let cube = cube.clone();
    shared(async move {
        let rows = concat_batches(rows[0].schema_ref(), &rows)?;
        let time = time_range(&rows, time_column);
        let rows = rows_states(rows, &cube).await?;
        let Some(base) = base else {
            return Ok(Arc::new(MemStates { rows, time }));
        };
        let dims = cube.def.dimensions.len();
        Ok(Arc::new(MemStates {
            rows: rollup::interleaved(&base.rows, &rows, dims)?,
            time: (base.time.0.min(time.0), base.time.1.max(time.1)),
        }))
    })
    .await
}

/// The states of the last run a run grew from, and the first row of the
/// run's newest batch they leave out: kept with the run's batch before
/// its newest (the newest is new), or inherited by the newest (it was
/// merged from the last run's newest batches and the rows written since).
/// Either covers every batch of the run before its newest (the same
/// batches, compared by pointer) and the newest's rows up to the row
/// given: for one inherited, its run's batches after those and its own
/// hold exactly the rows before it. (The memstore merges a run's batches
/// of one day, in order, ending with its newest: those are the batches
/// of the same days after the others, as many rows as the newest's rows
/// before the inherited states' end.)
fn base(
    newest: &MemBatch,
    others: &[Arc<MemBatch>],
    days: Days,
    key: DerivedKey,
) -> Option<(Arc<MemStates>, usize)> {
    let before: usize = others.iter().map(|b| b.rows()).sum();
    if let Some((last, rest)) = others.split_last() {
        let kept = last.derived(key, OnceCell::<Tail>::new);
        if let Some(kept) = kept.get()
            && kept.days == days
            && same_batches(&kept.others, rest)
            && kept.rows == before
        {
            return Some((kept.states.clone(), 0));
        }
    }
    let (rows, inherited) = newest.inherited(key).pop()?;
    let inherited = inherited.downcast::<OnceCell<Tail>>().ok()?;
    let kept = inherited.get()?;
    let covers_others = kept.days == days
        && kept.others.len() >= others.len()
        && same_batches(&kept.others[..others.len()], others);
    (covers_others && kept.rows == before + rows.end).then(|| (kept.states.clone(), rows.end))
}

/// Whether `kept` are the batches `batches`, in order. A weak pointer
/// holds its allocation, so pointers compare batches exactly.
fn same_batches(kept: &[Weak<MemBatch>], batches: &[Arc<MemBatch>]) -> bool {
    kept.len() == batches.len()
        && (kept.iter())
            .zip(batches)
            .all(|(k, b)| std::ptr::eq(k.as_ptr(), Arc::as_ptr(b)))
}

/// The rows of the states `batch` keeps as its run's newest under `key`
/// ([`Cubes::tail_states`]), once made.
#[cfg(test)]
pub(super) fn tail_rows(batch: &MemBatch, key: DerivedKey) -> Option<usize> {
    let kept = batch.derived(key, OnceCell::<Tail>::new);
    kept.get().map(|t| t.states.rows.num_rows())
}

/// Rollups an in-memory batch keeps per cube ([`Cubes::mem_states`]).
pub const MEM_ROLLUPS: usize = 4;

/// The key a run of small batches keeps its states under, with its newest
/// batch ([`Cubes::tail_states`]); rollups' keys are below it
/// ([`rollup::key`]), the whole states' above.
pub(super) const TAIL: u64 = u64::MAX - 1;

/// A run's states, kept with its newest batch ([`Cubes::tail_states`]).
struct Tail {
    /// The days of the run's batches.
    days: Days,
    /// The run's other batches: weak, so the newest batch does not keep
    /// them (or itself) alive.
    others: Vec<Weak<MemBatch>>,
    /// The rows of the run's batches.
    rows: usize,
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
