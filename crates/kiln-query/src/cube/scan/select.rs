//! Selecting a scan's rows: the range's bounds computed at execution,
//! the slice of a sorted part or batch its keys and whole buckets select,
//! and the filter of the rows outside those buckets, read raw.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, make_comparator};
use datafusion::arrow::compute::kernels::cmp::{gt_eq, lt};
use datafusion::arrow::compute::{SortOptions, and, filter_record_batch};
use datafusion::arrow::datatypes::{Schema, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
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

/// The slice of `batch` (sorted by its dimensions, [`super::Cubes`]) whose
/// leading dimensions equal the keys, as far as keys cover them, and the
/// first dimension not narrowed (the slice is sorted by it).
pub(super) fn with_keys(
    batch: &RecordBatch,
    keys: &[(usize, ArrayRef)],
) -> Result<(RecordBatch, usize)> {
    let (mut lo, mut hi) = (0, batch.num_rows());
    let mut next = 0;
    for (d, (i, v)) in keys.iter().enumerate() {
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
    Ok((batch.slice(lo, hi - lo), next))
}

/// [`in_buckets`] of a batch sorted by its time dimension: a slice.
pub(super) fn sorted_buckets(
    batch: &RecordBatch,
    dimension: usize,
    lo: i128,
    hi: i128,
) -> Result<RecordBatch> {
    let col = batch.column(dimension);
    let Some(ts) = col.as_primitive_opt::<TimestampNanosecondType>() else {
        return internal_err!("cube time dimension is not a nanosecond timestamp");
    };
    if ts.null_count() > 0 {
        return in_buckets(batch, dimension, lo, hi);
    }
    let values = ts.values();
    let start = values.partition_point(|v| i128::from(*v) < lo);
    let end = values.partition_point(|v| i128::from(*v) < hi);
    Ok(batch.slice(start, end.max(start) - start))
}

/// Rows of `batch` whose time dimension is in `[lo, hi)` (open ends are
/// beyond any timestamp).
pub(super) fn in_buckets(
    batch: &RecordBatch,
    dimension: usize,
    lo: i128,
    hi: i128,
) -> Result<RecordBatch> {
    let col = batch.column(dimension);
    let Some(ts) = col.as_primitive_opt::<TimestampNanosecondType>() else {
        return internal_err!("cube time dimension is not a nanosecond timestamp");
    };
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
    Ok(match keep {
        Some(k) => filter_record_batch(batch, &k)?,
        None => batch.clone(),
    })
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
