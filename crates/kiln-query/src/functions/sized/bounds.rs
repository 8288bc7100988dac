//! How many bytes a sized function's results can take: for one row from
//! its arguments (`Size::bytes`), exact where that is cheap, else an upper
//! bound that a real result can reach, made closer before a call is
//! refused for it; for all of a call's rows at once from the arguments'
//! total lengths (`Size::all_rows`), which needs no pass over the values.

use std::borrow::Cow;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int64Type, IntervalMonthDayNanoType, TimeUnit};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::ColumnarValue;
use regex::Regex;

use super::MAX_VALUE_BYTES;

const NS_PER_DAY: i128 = 86_400_000_000_000;
/// The shortest day with a time zone (a change to summer time).
const NS_PER_SHORT_DAY: i128 = 23 * 3_600_000_000_000;

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Size {
    /// `repeat(s, n)`: `len(s) * n` bytes.
    RepeatString,
    /// `lpad(s, n [, fill])`: `s` cut to `n` characters, or padded to them
    /// with `fill`'s widest character (a space without `fill`).
    Pad,
    /// `array_repeat(x, n)`: `n` copies of `x`, at least 8 bytes each.
    RepeatElement,
    /// `array_resize(a, n [, x])`: `a` and `n` elements of at least 8 bytes.
    Resize,
    /// `range(start, stop [, step])` as an array, with `stop` itself when
    /// `inclusive` (`generate_series`): 8 bytes an element.
    Range { inclusive: bool },
    /// `replace(s, from, to)`: `s` with each match of `from` made `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement [, flags])`.
    RegexpReplace,
    /// `concat(a, b, ...)`: the arguments' lengths together. A scalar
    /// argument counts once for each row it is joined to.
    Concat,
    /// `concat_ws(sep, a, b, ...)`: the arguments' lengths and a separator
    /// between each two of them.
    ConcatWs,
}

impl Size {
    /// A bound on the bytes of all `rows` results together, from the
    /// arguments' total lengths, where the parameters other than the first
    /// argument are scalars (as written in most queries); `None` where it
    /// takes rows one by one. It costs no pass over the rows' values.
    pub fn all_rows(self, args: &[Arg], rows: usize) -> Option<i128> {
        let scalar = |i: usize| match args.get(i) {
            Some(Arg::Scalar(s)) => Some(s.as_ref()),
            _ => None,
        };
        let n = |i: usize| {
            let v = scalar(i)?.cast_to(&DataType::Int64).ok()?;
            Some(v.try_into().unwrap_or(0i64).max(0) as i128)
        };
        let text = |i: usize| scalar(i).map(|s| s.try_as_str().flatten().unwrap_or(""));
        let rows = rows as i128;
        let first = args.first()?.total_len(rows);
        Some(match self {
            Size::RepeatString => first * n(1)?,
            Size::Pad => {
                let widest = match args.get(2) {
                    Some(_) => widest_char(text(2)?),
                    None => 1,
                };
                first + rows * n(1)? * widest as i128
            }
            Size::RepeatElement => n(1)? * (first + 8 * rows),
            Size::Resize => {
                let fill = args.get(2).map_or(0, |a| a.total_len(rows));
                first + n(1)? * (fill + 8 * rows)
            }
            Size::Range { .. } => return None,
            Size::Replace => {
                let (from, to) = (text(1)?.len() as i128, text(2)?.len() as i128);
                match to <= from || from == 0 {
                    true => first,
                    false => first + first / from * (to - from),
                }
            }
            Size::RegexpReplace => {
                let with = text(2)?;
                let refs = with.matches(['$', '\\']).count() as i128;
                let all = match args.get(3) {
                    Some(_) => text(3)?.contains('g'),
                    None => false,
                };
                let matches = if all { first + rows } else { rows };
                first * (1 + refs) + matches * with.len() as i128
            }
            Size::Concat => args.iter().map(|a| a.total_len(rows)).sum(),
            Size::ConcatWs => {
                let parts = args[1..].iter().map(|a| a.total_len(rows)).sum::<i128>();
                parts + first * args.len().saturating_sub(2) as i128
            }
        })
    }

    /// The bytes row `row`'s result can take (0 for a NULL argument). With
    /// `exact`, no shortcut is taken where a closer bound costs a search
    /// (the matches of `replace` and `regexp_replace`).
    #[cfg(test)]
    pub fn bytes(self, name: &str, args: &[Arg], row: usize, exact: bool) -> Result<i64> {
        self.bytes_with(name, args, row, exact, &mut Patterns::default())
    }

    /// [`Size::bytes`], compiling a pattern once for all the rows that
    /// share it (`patterns` lives as long as one pass over a call's rows).
    pub fn bytes_with(
        self,
        name: &str,
        args: &[Arg],
        row: usize,
        exact: bool,
        patterns: &mut Patterns,
    ) -> Result<i64> {
        let n = |i: usize| args.get(i).and_then(|a| a.int(row)).unwrap_or(0).max(0) as i128;
        let len = |i: usize| args.get(i).and_then(|a| a.len(row)).unwrap_or(0) as i128;
        let bytes: i128 = match self {
            Size::RepeatString => len(0) * n(1),
            Size::Pad => {
                let widest = match args.get(2) {
                    Some(fill) => fill.str(row).map_or(0, widest_char),
                    None => 1,
                };
                let chars = args[0].str(row).map_or(0, |s| s.chars().count()) as i128;
                len(0) + (n(1) - chars).max(0) * widest as i128
            }
            Size::RepeatElement => n(1) * len(0).max(8),
            Size::Resize => len(0) + n(1) * len(2).max(8),
            Size::Range { inclusive } => range_elements(name, args, row, inclusive)? * 8,
            Size::Replace => replaced(args, row, exact),
            Size::RegexpReplace => regexp_replaced(args, row, exact, patterns),
            Size::Concat => (0..args.len()).map(len).sum(),
            Size::ConcatWs if args.first().is_none_or(|sep| sep.len(row).is_none()) => 0,
            Size::ConcatWs => {
                let parts = (1..args.len()).map(len).sum::<i128>();
                parts + len(0) * args.len().saturating_sub(2) as i128
            }
        };
        Ok(i64::try_from(bytes).unwrap_or(i64::MAX))
    }
}

/// One argument of one call, read row by row: a scalar is not copied into
/// an array (a large one would be copied a batch's rows times).
pub enum Arg<'a> {
    Scalar(Cow<'a, ScalarValue>),
    Array(&'a ArrayRef),
}

impl<'a> Arg<'a> {
    pub fn of(value: &'a ColumnarValue) -> Arg<'a> {
        match value {
            ColumnarValue::Scalar(s) => Arg::Scalar(Cow::Borrowed(s)),
            ColumnarValue::Array(a) => Arg::Array(a),
        }
    }

    pub fn is_scalar(&self) -> bool {
        matches!(self, Arg::Scalar(_))
    }

    fn value(&self, row: usize) -> Result<ScalarValue> {
        match self {
            Arg::Scalar(s) => Ok(s.as_ref().clone()),
            Arg::Array(a) => ScalarValue::try_from_array(a, row),
        }
    }

    /// An integer argument's value.
    pub fn int(&self, row: usize) -> Option<i64> {
        match self {
            Arg::Scalar(s) => match s.cast_to(&DataType::Int64).ok()? {
                ScalarValue::Int64(v) => v,
                _ => None,
            },
            Arg::Array(a) if a.data_type() == &DataType::Int64 => {
                let a = a.as_primitive::<Int64Type>();
                a.is_valid(row).then(|| a.value(row))
            }
            Arg::Array(a) => {
                let one = arrow::compute::cast(&a.slice(row, 1), &DataType::Int64).ok()?;
                let one = one.as_primitive::<Int64Type>();
                one.is_valid(0).then(|| one.value(0))
            }
        }
    }

    /// A text argument's value.
    fn str(&self, row: usize) -> Option<&str> {
        match self {
            Arg::Scalar(s) => s.try_as_str().flatten(),
            Arg::Array(a) if a.is_null(row) => None,
            Arg::Array(a) => match a.data_type() {
                DataType::Utf8 => Some(a.as_string::<i32>().value(row)),
                DataType::LargeUtf8 => Some(a.as_string::<i64>().value(row)),
                DataType::Utf8View => Some(a.as_string_view().value(row)),
                _ => None,
            },
        }
    }

    /// The bytes of all `rows` values together (a scalar's for each row):
    /// texts' lengths, else what their data takes in memory.
    fn total_len(&self, rows: i128) -> i128 {
        match self {
            Arg::Scalar(_) => self.len(0).unwrap_or(0) as i128 * rows,
            Arg::Array(a) => match a.data_type() {
                DataType::Utf8 => {
                    let offsets = a.as_string::<i32>().value_offsets();
                    (offsets[offsets.len() - 1] - offsets[0]) as i128
                }
                DataType::LargeUtf8 => {
                    let offsets = a.as_string::<i64>().value_offsets();
                    (offsets[offsets.len() - 1] - offsets[0]) as i128
                }
                // A view's low 32 bits are its length.
                DataType::Utf8View => a
                    .as_string_view()
                    .views()
                    .iter()
                    .map(|v| *v as u32 as i128)
                    .sum(),
                _ => a.to_data().get_slice_memory_size().unwrap_or(usize::MAX) as i128,
            },
        }
    }

    /// The bytes of a value: a text's or binary's length, else what its
    /// data takes in memory.
    fn len(&self, row: usize) -> Option<usize> {
        if let Some(s) = self.str(row) {
            return Some(s.len());
        }
        match self {
            Arg::Scalar(s) if s.is_null() => None,
            Arg::Scalar(s) => Some(s.size() - size_of::<ScalarValue>()),
            Arg::Array(a) if a.is_null(row) => None,
            Arg::Array(a) => Some(a.slice(row, 1).to_data().get_slice_memory_size().ok()?),
        }
    }
}

/// The last pattern a pass compiled, and what it gave (`None`: it does not
/// compile). Rows of a call nearly always share one pattern.
#[derive(Default)]
pub struct Patterns(Option<(String, Option<Regex>)>);

impl Patterns {
    fn compiled(&mut self, pattern: String) -> Option<&Regex> {
        if self.0.as_ref().is_none_or(|(kept, _)| *kept != pattern) {
            let re = Regex::new(&pattern).ok();
            self.0 = Some((pattern, re));
        }
        self.0.as_ref()?.1.as_ref()
    }
}

/// The widest UTF-8 character of `s`, in bytes (0 if it is empty).
fn widest_char(s: &str) -> usize {
    s.chars().map(char::len_utf8).max().unwrap_or(0)
}

/// `replace(s, from, to)`. When `to` is the longer, unless `exact`, a
/// bound from the lengths alone (`from` at every place it fits) is taken
/// when it is small; else the matches are counted (the same search
/// DataFusion makes), until the result is past the limit on one value.
/// An empty `from` replaces nothing (as in PostgreSQL).
fn replaced(args: &[Arg], row: usize, exact: bool) -> i128 {
    let part = |i: usize| args.get(i).and_then(|a| a.str(row));
    let (Some(s), Some(from), Some(to)) = (part(0), part(1), part(2)) else {
        return 0;
    };
    if to.len() <= from.len() || from.is_empty() {
        return s.len() as i128;
    }
    let grow = (to.len() - from.len()) as i128;
    let mut bytes = s.len() as i128;
    let rough = bytes + (s.len() / from.len()) as i128 * grow;
    if !exact && rough <= MAX_VALUE_BYTES as i128 / 4 {
        return rough;
    }
    for _ in memchr::memmem::find_iter(s.as_bytes(), from.as_bytes()) {
        bytes += grow;
        if bytes > MAX_VALUE_BYTES as i128 {
            break;
        }
    }
    bytes
}

/// `regexp_replace(s, pattern, replacement [, flags])`. Each match gives
/// the replacement, whose group references (`$n`, `${n}`, `\n`) copy at
/// most the match itself. Unless `exact`, a bound from `s`'s length alone
/// (a match at every offset) is taken when it is small; else the matches
/// are found, as DataFusion will find them, until the result is past the
/// limit on one value.
fn regexp_replaced(args: &[Arg], row: usize, exact: bool, patterns: &mut Patterns) -> i128 {
    let part = |i: usize| args.get(i).and_then(|a| a.str(row));
    let (Some(s), Some(pattern), Some(replacement)) = (part(0), part(1), part(2)) else {
        return 0;
    };
    let flags = part(3).unwrap_or("");
    let all = flags.contains('g');
    let refs = replacement.matches(['$', '\\']).count() as i128;
    let (len, with) = (s.len() as i128, replacement.len() as i128);
    let matches = match all {
        true => len + 1,
        false => 1,
    };
    let rough = len * (1 + refs) + matches * with;
    if !exact && rough <= MAX_VALUE_BYTES as i128 / 4 {
        return rough;
    }
    let pattern = crate::shape::patterns::with_flags(pattern, flags);
    let Some(re) = patterns.compiled(pattern) else {
        // DataFusion refuses it too.
        return 0;
    };
    let mut bytes = len;
    for m in re.find_iter(s).take(if all { usize::MAX } else { 1 }) {
        bytes += with + (refs - 1) * m.len() as i128;
        if bytes > MAX_VALUE_BYTES as i128 {
            break;
        }
    }
    bytes
}

/// The elements of row `row`'s `range` or `generate_series`, or at most
/// that many. A step whose parts have different signs (`1 month - 31
/// days`) is refused: it may not move at all, and then the range never
/// ends.
fn range_elements(name: &str, args: &[Arg], row: usize, inclusive: bool) -> Result<i128> {
    let (start, stop, step) = match args {
        [stop] => (ScalarValue::Int64(Some(0)), stop.value(row)?, None),
        [start, stop] => (start.value(row)?, stop.value(row)?, None),
        [start, stop, step] => (start.value(row)?, stop.value(row)?, Some(step.value(row)?)),
        _ => return Ok(0),
    };
    // Both ends in one unit, and the smallest step in it.
    let (from, to, step) = match (&start, &stop) {
        (ScalarValue::Int64(Some(a)), ScalarValue::Int64(Some(b))) => {
            let step = match step {
                None => 1,
                Some(ScalarValue::Int64(Some(s))) => s as i128,
                Some(_) => return Ok(0),
            };
            (*a as i128, *b as i128, step)
        }
        (ScalarValue::Date32(_) | ScalarValue::Date64(_), _) => {
            let (Some(a), Some(b)) = (days(&start), days(&stop)) else {
                return Ok(0);
            };
            let Some((months, days, _)) = interval(step) else {
                return Ok(0);
            };
            (a, b, step_of(name, months as i128 * 28, days as i128, 0)?)
        }
        (ScalarValue::TimestampSecond(..), _)
        | (ScalarValue::TimestampMillisecond(..), _)
        | (ScalarValue::TimestampMicrosecond(..), _)
        | (ScalarValue::TimestampNanosecond(..), _) => {
            let (Some(a), Some(b)) = (nanos(&start), nanos(&stop)) else {
                return Ok(0);
            };
            let Some((months, days, ns)) = interval(step) else {
                return Ok(0);
            };
            let step = step_of(
                name,
                months as i128 * 28 * NS_PER_DAY,
                days as i128 * NS_PER_SHORT_DAY,
                ns as i128,
            )?;
            (a, b, step)
        }
        _ => return Ok(0),
    };
    if step == 0 || (step > 0 && to < from) || (step < 0 && to > from) {
        // DataFusion refuses a zero step; the rest are empty.
        return Ok(0);
    }
    let (span, step) = ((to - from).abs(), step.abs());
    Ok(match inclusive {
        true => span / step + 1,
        false => (span + step - 1) / step,
    })
}

/// A step from its parts (in the range's unit), refused if they have
/// different signs.
fn step_of(name: &str, months: i128, days: i128, ns: i128) -> Result<i128> {
    let parts = [months, days, ns];
    if parts.iter().any(|p| *p > 0) && parts.iter().any(|p| *p < 0) {
        return exec_err!(
            "{name}(): a step whose months, days and time have different signs may never reach the end; give it one sign"
        );
    }
    Ok(parts.iter().sum())
}

fn interval(step: Option<ScalarValue>) -> Option<(i32, i32, i64)> {
    match step? {
        ScalarValue::IntervalMonthDayNano(Some(v)) => Some(IntervalMonthDayNanoType::to_parts(v)),
        _ => None,
    }
}

fn days(v: &ScalarValue) -> Option<i128> {
    match v {
        ScalarValue::Date32(Some(d)) => Some(*d as i128),
        ScalarValue::Date64(Some(ms)) => Some(ms.div_euclid(86_400_000) as i128),
        _ => None,
    }
}

fn nanos(v: &ScalarValue) -> Option<i128> {
    let (value, unit) = match v {
        ScalarValue::TimestampSecond(Some(v), _) => (*v, TimeUnit::Second),
        ScalarValue::TimestampMillisecond(Some(v), _) => (*v, TimeUnit::Millisecond),
        ScalarValue::TimestampMicrosecond(Some(v), _) => (*v, TimeUnit::Microsecond),
        ScalarValue::TimestampNanosecond(Some(v), _) => (*v, TimeUnit::Nanosecond),
        _ => return None,
    };
    let scale: i128 = match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    };
    Some(value as i128 * scale)
}
