//! Rollups: a part merged down to the dimensions a query reads.
//!
//! A part keeps one row per combination of all of its cube's dimensions. A
//! query that groups and filters by a few of them merges every row's states
//! into its groups, and an exact distinct count takes each value once per
//! row it appears in (a user's day split by action, region and platform).
//! The same part merged first to the dimensions the query reads answers it
//! exactly from fewer rows holding fewer repeats; the other dimensions keep
//! a placeholder the query never reads. A rollup depends only on the part
//! and that set of dimensions, never on a query's values, so it is made on
//! first use and kept with the decoded parts ([`super::Cubes`]): like
//! decoding, it is paid once per part and set.

use std::sync::Arc;

use std::cmp::Ordering;

use datafusion::arrow::array::{ArrayRef, RecordBatch, make_comparator};
use datafusion::arrow::compute::{
    SortColumn, SortOptions, concat_batches, interleave_record_batch, lexsort_to_indices,
    take_record_batch,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::{ExecutionPlan, collect};

use super::plan::{CubePlan, states_context};

/// Which dimensions a query reads, as a key: bit `i` set for dimension `i`.
/// `None` when it reads them all (the part itself answers), or when the
/// cube has 64 dimensions or more (no rollups: keys stay below the two
/// an in-memory batch keeps a cube's own states under, `cube/mem.rs`).
pub fn key(used: &[bool]) -> Option<u64> {
    if used.iter().all(|u| *u) || used.len() >= 64 {
        return None;
    }
    Some(
        used.iter()
            .enumerate()
            .filter(|(_, u)| **u)
            .fold(0, |k, (i, _)| k | 1 << i),
    )
}

/// `part` (a decoded part, [`CubePlan::scan_schema`]) with its rows merged
/// by the dimensions in `used`. The other dimensions hold one placeholder
/// value (the part's first row's: a column may not take NULL), which the
/// query does not read. Sorted by the dimensions like the part.
pub async fn rollup(
    cube: &CubePlan,
    part: RecordBatch,
    used: &[bool],
    ctx: Arc<TaskContext>,
) -> Result<RecordBatch> {
    let merges = cube
        .measures
        .iter()
        .map(|m| (m.merge.clone(), m.states.len()));
    merge_to(&cube.scan_schema, merges, part, used, ctx).await
}

/// Parts' rows as they are kept (`states`, [`CubePlan::schema`], of
/// different segments), merged to one row per combination of all the
/// cube's dimensions, sorted: the part of all those segments' rows, as
/// kept. How a compaction merges its inputs' parts.
pub async fn kept(cube: &CubePlan, states: RecordBatch) -> Result<RecordBatch> {
    let every = vec![true; cube.def.dimensions.len()];
    let merges = cube
        .measures
        .iter()
        .map(|m| (m.keep.clone(), m.states.len()));
    merge_to(&cube.schema, merges, states, &every, states_context()).await
}

/// `part` (of `schema`: dimensions, then each measure's states) with its
/// rows merged by the dimensions in `used`, each measure's states by its
/// aggregate in `merges` (with how many state columns it has): what
/// [`rollup`] and [`kept`] do.
async fn merge_to(
    schema: &SchemaRef,
    merges: impl Iterator<Item = (Arc<AggregateUDF>, usize)>,
    part: RecordBatch,
    used: &[bool],
    ctx: Arc<TaskContext>,
) -> Result<RecordBatch> {
    if part.num_rows() == 0 {
        return Ok(part);
    }
    let schema = schema.clone();
    let dims = used.len();
    let column = |i: usize| Arc::new(Column::new(schema.field(i).name(), i));
    let groups: Vec<_> = (0..dims)
        .filter(|i| used[*i])
        .map(|i| (column(i) as _, schema.field(i).name().clone()))
        .collect();
    let mut aggregates = vec![];
    let mut at = dims;
    for (merge, width) in merges {
        let states = (at..at + width).map(|i| column(i) as _).collect();
        at += width;
        let agg = AggregateExprBuilder::new(merge, states)
            .schema(schema.clone())
            .alias(format!("rollup_{at}"))
            .build()?;
        aggregates.push(Arc::new(agg));
    }
    let placeholders: Vec<ScalarValue> = (0..dims)
        .map(|i| ScalarValue::try_from_array(part.column(i), 0))
        .collect::<Result<_>>()?;
    let input = MemorySourceConfig::try_new_exec(&[vec![part]], schema.clone(), None)?;
    let filters = vec![None; aggregates.len()];
    let merge = AggregateExec::try_new(
        AggregateMode::Partial,
        PhysicalGroupBy::new_single(groups),
        aggregates,
        filters,
        input,
        schema.clone(),
    )?;
    let merged: Arc<dyn ExecutionPlan> = Arc::new(merge);
    let out_schema = merged.schema();
    let batches = collect(merged, ctx).await?;
    let merged = concat_batches(&out_schema, &batches)?;
    // Back to the part's columns: the kept dimensions, placeholders for
    // the others, then the states.
    let n = merged.num_rows();
    let mut kept = merged.columns().iter();
    let mut columns: Vec<ArrayRef> = vec![];
    for i in 0..schema.fields().len() {
        match i >= dims || used[i] {
            true => columns.push(kept.next().expect("a column per kept field").clone()),
            false => columns.push(placeholders[i].to_array_of_size(n)?),
        }
    }
    sorted(RecordBatch::try_new(schema, columns)?, dims)
}

/// States of one cube over different rows (`states`, the scan schema),
/// merged to one row per combination of all its dimensions, sorted: what
/// [`CubePlan::states_of`] gives for all those rows together.
pub async fn merged(cube: &CubePlan, states: RecordBatch) -> Result<RecordBatch> {
    let every = vec![true; cube.def.dimensions.len()];
    rollup(cube, states, &every, states_context()).await
}

/// `batch` sorted by its first `dims` columns (the dimensions, in order).
pub fn sorted(batch: RecordBatch, dims: usize) -> Result<RecordBatch> {
    // A cube of no dimension keeps one row: nothing to sort by.
    if dims == 0 {
        return Ok(batch);
    }
    let keys: Vec<SortColumn> = (0..dims)
        .map(|i| SortColumn {
            values: batch.column(i).clone(),
            options: None,
        })
        .collect();
    Ok(take_record_batch(
        &batch,
        &lexsort_to_indices(&keys, None)?,
    )?)
}

/// Two batches of states sorted by their first `dims` columns (as
/// [`sorted`] sorts them) as one, sorted the same way: `newer`'s rows go
/// after `older`'s equal ones. Groups in both stay two rows, which a query
/// merges as it merges any two batches' states; only the rows are placed,
/// each of `newer`'s by a binary search over `older`, so adding a few rows
/// of states to many costs a copy of the many, not a merge of them.
pub fn interleaved(older: &RecordBatch, newer: &RecordBatch, dims: usize) -> Result<RecordBatch> {
    if older.num_rows() == 0 {
        return Ok(newer.clone());
    }
    if newer.num_rows() == 0 {
        return Ok(older.clone());
    }
    let comparators = (0..dims)
        .map(|d| {
            let (o, n) = (older.column(d), newer.column(d));
            make_comparator(o.as_ref(), n.as_ref(), SortOptions::default())
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // Whether `older`'s row `i` sorts after `newer`'s row `j`.
    let after = |i: usize, j: usize| {
        let order = comparators.iter().map(|c| c(i, j));
        order.fold(Ordering::Equal, Ordering::then) == Ordering::Greater
    };
    let mut indices = Vec::with_capacity(older.num_rows() + newer.num_rows());
    let mut at = 0;
    for j in 0..newer.num_rows() {
        let (mut lo, mut hi) = (at, older.num_rows());
        while lo < hi {
            let m = lo + (hi - lo) / 2;
            match after(m, j) {
                true => hi = m,
                false => lo = m + 1,
            }
        }
        indices.extend((at..lo).map(|i| (0, i)));
        indices.push((1, j));
        at = lo;
    }
    indices.extend((at..older.num_rows()).map(|i| (0, i)));
    Ok(interleave_record_batch(&[older, newer], &indices)?)
}
