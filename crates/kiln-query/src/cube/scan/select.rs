//! Selecting a scan's rows: the range's bounds computed at execution,
//! the cut of a sorted part or batch to the rows its keys, whole buckets
//! and filter select and to the columns the plan reads ([`Cut`]), and the
//! filter of the rows outside those buckets, read raw.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray, RecordBatch, RecordBatchOptions,
    make_comparator,
};
use datafusion::arrow::compute::kernels::cmp::{gt_eq, lt};
use datafusion::arrow::compute::{SortOptions, and, filter_record_batch};
use datafusion::arrow::datatypes::{Schema, SchemaRef, TimestampNanosecondType};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_plan::ColumnarValue;

use kiln_storage::NANOS_PER_DAY;

use super::PhysicalRange;

/// A range's bound as the query gives it.
#[derive(Clone, Copy)]
pub(super) enum Bound {
    /// No bound on that side.
    Open,
    /// A NULL bound: no row passes.
    Null,
    /// An instant in nanoseconds, possibly beyond the timestamps' range.
    At(i128),
}

impl Bound {
    pub(super) fn or(self, open: i128) -> i128 {
        match self {
            Bound::At(v) => v,
            _ => open,
        }
    }
}

/// The bucket boundary `round` gives for instant `v`, or `none` where that
/// is out of range; an instant beyond the timestamps' range is its own
/// boundary (no timestamp lies between them).
pub(super) fn boundary(v: i128, round: impl Fn(i64) -> Option<i64>, none: i128) -> i128 {
    match i64::try_from(v) {
        Ok(v) => round(v).map_or(none, i128::from),
        Err(_) => v,
    }
}

/// The greatest lower (or least upper) of the limits, evaluated.
pub(super) fn bound(limits: &[(Arc<dyn PhysicalExpr>, bool)], lower: bool) -> Result<Bound> {
    let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
    let mut out = Bound::Open;
    for (e, after) in limits {
        // The value's first instant and its length: i128, so no date
        // overflows.
        let (first, length) = match e.evaluate(&empty)? {
            ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some(v), None)) => {
                (i128::from(v), 1)
            }
            ColumnarValue::Scalar(ScalarValue::Date32(Some(d))) => {
                let day = i128::from(NANOS_PER_DAY);
                (i128::from(d) * day, day)
            }
            ColumnarValue::Scalar(s) if s.is_null() => return Ok(Bound::Null),
            other => return internal_err!("cube time limit is not a timestamp or date: {other:?}"),
        };
        let v = if *after { first + length } else { first };
        out = Bound::At(match (out, lower) {
            (Bound::At(o), true) => o.max(v),
            (Bound::At(o), false) => o.min(v),
            _ => v,
        });
    }
    Ok(out)
}

/// The keys' values, in dimension order, each as a one-row array of its
/// dimension's type in `schema`, computed once per execution. A key whose
/// value is not a single non-NULL value, or one the dimension's type cannot
/// hold exactly, is left out: it narrows nothing.
pub(super) fn key_values(
    keys: &[(usize, Arc<dyn PhysicalExpr>)],
    schema: &Schema,
) -> Result<Vec<(usize, ArrayRef)>> {
    let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
    let mut out = vec![];
    for (d, e) in keys {
        let ColumnarValue::Scalar(v) = e.evaluate(&empty)? else {
            continue;
        };
        let exact = v.cast_to(schema.field(*d).data_type()).ok().filter(|c| {
            !v.is_null() && !c.is_null() && c.cast_to(&v.data_type()).is_ok_and(|back| back == v)
        });
        if let Some(value) = exact {
            out.push((*d, value.to_array()?));
        }
    }
    out.sort_by_key(|(d, _)| *d);
    Ok(out)
}

/// How one execution cuts each batch of states it reads (a part's, an
/// in-memory batch's), worked out once per execution: a batch then costs
/// a binary search per key, one for the range, a slice of the columns
/// kept and its filter. Only the columns the output, the filter and the
/// range read are sliced: a cube's states take many more columns than a
/// query reads (a state per measure, several for a variance), and slicing
/// every one of them for each batch was most of what selecting it cost.
pub(super) struct Cut {
    /// [`key_values`]: the leading dimensions' values.
    keys: Vec<(usize, ArrayRef)>,
    /// The scan schema's columns kept, ascending.
    kept: Vec<usize>,
    kept_schema: SchemaRef,
    /// The filter over dimensions, over `kept_schema`.
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// The time dimension: its index in the scan schema and in `kept`.
    time: Option<(usize, usize)>,
    /// The output's columns, as indexes into `kept` (None: all, in order).
    output: Option<Vec<usize>>,
    out_schema: SchemaRef,
}

impl Cut {
    /// The cut of batches in `scan_schema` to the rows matching `keys`
    /// and `filter` (over the scan schema), returning the columns of
    /// `projection` (all: `None`) as `out_schema`; `time` is the time
    /// dimension, when the query has a range over it.
    pub(super) fn new(
        scan_schema: &SchemaRef,
        keys: Vec<(usize, ArrayRef)>,
        filter: Option<&Arc<dyn PhysicalExpr>>,
        time: Option<usize>,
        projection: Option<&[usize]>,
        out_schema: SchemaRef,
    ) -> Result<Self> {
        let all: Vec<usize> = (0..scan_schema.fields().len()).collect();
        let out = projection.unwrap_or(&all);
        let mut kept: BTreeSet<usize> = out.iter().copied().collect();
        if let Some(f) = filter {
            kept.extend(collect_columns(f).iter().map(Column::index));
        }
        kept.extend(time);
        let kept: Vec<usize> = kept.into_iter().collect();
        let at = |i: usize| kept.binary_search(&i).ok();
        let filter = match filter {
            Some(f) => Some(
                f.clone()
                    .transform(|e| match e.downcast_ref::<Column>() {
                        Some(c) => match at(c.index()) {
                            Some(i) => Ok(Transformed::yes(
                                Arc::new(Column::new(c.name(), i)) as Arc<dyn PhysicalExpr>
                            )),
                            None => internal_err!("cube filter column {} not kept", c.name()),
                        },
                        None => Ok(Transformed::no(e)),
                    })?
                    .data,
            ),
            None => None,
        };
        let time = time.and_then(|t| Some((t, at(t)?)));
        let output = out.iter().map(|&i| at(i)).collect::<Option<Vec<_>>>();
        let Some(output) = output else {
            return internal_err!("cube scan output column not kept");
        };
        // Output of every column kept, in order: the cut is the output,
        // under the output's schema (the same fields).
        let identity = output.iter().copied().eq(0..kept.len());
        let kept_schema = match identity {
            true => out_schema.clone(),
            false => Arc::new(scan_schema.project(&kept)?),
        };
        Ok(Self {
            keys,
            kept_schema,
            kept,
            filter,
            time,
            output: (!identity).then_some(output),
            out_schema,
        })
    }

    /// The rows of `batch` (sorted by its dimensions, [`super::Cubes`])
    /// whose keys match, whose time dimension is in `[lo, hi)` when
    /// `buckets` is given (open ends are beyond any timestamp), and that
    /// pass the filter, in the output's columns.
    pub(super) fn apply(
        &self,
        batch: &RecordBatch,
        buckets: Option<(i128, i128)>,
    ) -> Result<RecordBatch> {
        let (mut start, mut end, next) = self.key_range(batch);
        // Rows sorted by the time dimension within the keys' slice are cut
        // by two more searches; otherwise they are filtered.
        let mut unsorted = None;
        if let Some((lo, hi)) = buckets {
            let Some((t, kept_t)) = self.time else {
                return internal_err!("a cube range without its time dimension");
            };
            let ts = timestamps(batch, t)?;
            match t == next && ts.null_count() == 0 {
                true => {
                    let values = &ts.values()[start..end];
                    let a = values.partition_point(|v| i128::from(*v) < lo);
                    let b = values.partition_point(|v| i128::from(*v) < hi);
                    (start, end) = (start + a, start + b.max(a));
                }
                false => unsorted = Some((kept_t, lo, hi)),
            }
        }
        let rows = end - start;
        let columns = (self.kept.iter())
            .map(|&i| batch.column(i).slice(start, rows))
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let mut cut =
            RecordBatch::try_new_with_options(self.kept_schema.clone(), columns, &options)?;
        // The range's rows (unsorted) and the filter's, kept by one mask.
        let mut keep = match unsorted {
            Some((t, lo, hi)) => in_buckets(&cut, t, lo, hi)?,
            None => None,
        };
        if let Some(f) = &self.filter
            && cut.num_rows() > 0
        {
            let mask = f.evaluate(&cut)?.into_array(cut.num_rows())?;
            keep = Some(match keep {
                Some(k) => and(&k, mask.as_boolean())?,
                None => mask.as_boolean().clone(),
            });
        }
        if let Some(k) = keep {
            cut = filter_record_batch(&cut, &k)?;
        }
        let Some(output) = &self.output else {
            return Ok(cut);
        };
        let columns = output.iter().map(|&i| cut.column(i).clone()).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(cut.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.out_schema.clone(),
            columns,
            &options,
        )?)
    }

    /// The rows of `batch` whose leading dimensions equal the keys, as far
    /// as keys cover them, and the first dimension not narrowed (those
    /// rows are sorted by it).
    fn key_range(&self, batch: &RecordBatch) -> (usize, usize, usize) {
        let (mut lo, mut hi) = (0, batch.num_rows());
        let mut next = 0;
        for (d, (i, v)) in self.keys.iter().enumerate() {
            if *i != d {
                break;
            }
            let col = batch.column(d);
            let Ok(cmp) = make_comparator(col.as_ref(), v.as_ref(), SortOptions::default()) else {
                break;
            };
            let first = |after: &dyn Fn(Ordering) -> bool| {
                let (mut a, mut b) = (lo, hi);
                while a < b {
                    let m = a + (b - a) / 2;
                    match after(cmp(m, 0)) {
                        true => b = m,
                        false => a = m + 1,
                    }
                }
                a
            };
            (lo, hi) = (
                first(&|o| o != Ordering::Less),
                first(&|o| o == Ordering::Greater),
            );
            next = d + 1;
        }
        (lo, hi, next)
    }
}

/// `batch`'s time dimension, `dimension`: its timestamps.
fn timestamps(
    batch: &RecordBatch,
    dimension: usize,
) -> Result<&PrimitiveArray<TimestampNanosecondType>> {
    match batch.column(dimension).as_primitive_opt() {
        Some(ts) => Ok(ts),
        None => internal_err!("cube time dimension is not a nanosecond timestamp"),
    }
}

/// Which rows of `batch` have their time dimension in `[lo, hi)` (open
/// ends are beyond any timestamp; `None`: every row).
fn in_buckets(
    batch: &RecordBatch,
    dimension: usize,
    lo: i128,
    hi: i128,
) -> Result<Option<BooleanArray>> {
    let col = batch.column(dimension);
    let ts = timestamps(batch, dimension)?;
    let tz: Option<Arc<str>> = ts.timezone().map(Arc::from);
    let at = |v: i128| ScalarValue::TimestampNanosecond(Some(v as i64), tz.clone()).to_scalar();
    let mut keep = None;
    if let Ok(lo) = i64::try_from(lo) {
        keep = Some(gt_eq(col, &at(i128::from(lo))?)?);
    }
    if let Ok(hi) = i64::try_from(hi) {
        let below = lt(col, &at(i128::from(hi))?)?;
        keep = Some(match keep {
            Some(k) => and(&k, &below)?,
            None => below,
        });
    }
    Ok(keep)
}

/// `column < lo OR column >= hi`: the rows outside the whole buckets
/// (`None`: every row, when there is no whole bucket).
pub(super) fn outside_buckets(
    r: &PhysicalRange,
    lo: i128,
    hi: i128,
) -> Option<Arc<dyn PhysicalExpr>> {
    if lo >= hi {
        return None;
    }
    let cmp = |op, v: i128| -> Option<Arc<dyn PhysicalExpr>> {
        let v = i64::try_from(v).ok()?;
        let lit = Arc::new(Literal::new(ScalarValue::TimestampNanosecond(
            Some(v),
            None,
        )));
        Some(Arc::new(BinaryExpr::new(r.column.clone(), op, lit)))
    };
    match (cmp(Operator::Lt, lo), cmp(Operator::GtEq, hi)) {
        (Some(l), Some(h)) => Some(Arc::new(BinaryExpr::new(l, Operator::Or, h))),
        (l, h) => l.or(h),
    }
}

#[cfg(test)]
mod tests;
