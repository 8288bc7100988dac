//! Dates and times a result may hold but no door can print: checked as
//! the rows leave the engine ([`Displayable`]), so such a value fails the
//! query with SQLSTATE 22008, naming its column and row, as PostgreSQL's
//! "timestamp out of range" does.
//!
//! Why: Arrow keeps a date or timestamp as a count from 1970 that may lie
//! far past the years the calendar library can show (about 262,000 years
//! either way): `to_timestamp_seconds(9223372036854775807)`,
//! `arrow_cast(2147483647, 'Date32')`. Each door then failed its own way:
//! an HTTP CSV response ended without a word, JSON and `COPY ... TO
//! STDOUT` wrote "ERROR: ..." as the value. Nanosecond timestamps (the
//! years 1677 to 2262) always fit, so most results are not looked at; a
//! column that is looked at costs one min/max pass a batch. Values inside
//! lists, structs, maps and dictionaries are looked at too
//! (`[arrow_cast(2147483647, 'Date32')]` printed "ERROR" inside the
//! list), and the row named is the one holding them.

use arrow::array::{Array, ArrowPrimitiveType, AsArray, PrimitiveArray};
use arrow::compute::{max, min};
use arrow::datatypes::DataType;
use arrow::datatypes::{
    Date32Type, Date64Type, Schema, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampSecondType,
};
use arrow::record_batch::RecordBatch;
use chrono::{NaiveDate, NaiveDateTime};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

use crate::Error;

/// `stream`, failing at the first value no door can print.
pub fn checked(stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let Some(mut check) = Displayable::of(&schema) else {
        return stream;
    };
    let checked = stream.map(move |b| {
        b.and_then(|b| {
            check
                .check(b)
                .map_err(|e| DataFusionError::External(Box::new(e)))
        })
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, checked))
}

/// The columns of a result whose values may not print, and the rows
/// checked so far (to name a row of the whole result).
#[derive(Debug)]
pub struct Displayable {
    columns: Vec<usize>,
    rows: u64,
}

/// The values a column's type can print, as raw counts.
#[derive(Clone, Copy, Debug)]
struct Range {
    what: &'static str,
    low: i64,
    high: i64,
}

impl Displayable {
    /// The check for results of `schema`; `None` when every value of its
    /// types prints.
    pub fn of(schema: &Schema) -> Option<Self> {
        let columns: Vec<usize> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| holds_ranged(f.data_type()))
            .map(|(i, _)| i)
            .collect();
        (!columns.is_empty()).then_some(Self { columns, rows: 0 })
    }

    /// `batch`, or the error naming its first value that does not print.
    pub fn check(&mut self, batch: RecordBatch) -> Result<RecordBatch, Error> {
        for &i in &self.columns {
            if let Some((row, what)) = first_outside(batch.column(i).as_ref()) {
                let name = batch.schema().field(i).name().clone();
                return Err(Error::DatetimeOutOfRange(format!(
                    "{what} out of range in column \"{name}\", row {}: it lies past the years that can be shown",
                    self.rows + row as u64 + 1,
                )));
            }
        }
        self.rows += batch.num_rows() as u64;
        Ok(batch)
    }
}

/// Whether values of type `t`, or values inside them, may not print.
fn holds_ranged(t: &DataType) -> bool {
    Range::of(t).is_some()
        || match t {
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => holds_ranged(f.data_type()),
            DataType::Struct(fields) => fields.iter().any(|f| holds_ranged(f.data_type())),
            DataType::Dictionary(_, v) => holds_ranged(v),
            _ => false,
        }
}

/// The first row of `a` holding a value, at any depth, that does not
/// print, and what kind of value it is.
fn first_outside(a: &dyn Array) -> Option<(usize, &'static str)> {
    if let Some(range) = Range::of(a.data_type()) {
        return range.first_outside(a).map(|row| (row, range.what));
    }
    // The row of each list whose elements run from offsets[row] on.
    fn listed<O: Copy + Into<i64>>(
        offsets: &[O],
        values: &dyn Array,
    ) -> Option<(usize, &'static str)> {
        let (&first, &end) = (offsets.first()?, offsets.last()?);
        let (first, end) = (first.into() as usize, end.into() as usize);
        let (at, what) = first_outside(values.slice(first, end - first).as_ref())?;
        let at = (first + at) as i64;
        Some((offsets.partition_point(|o| (*o).into() <= at) - 1, what))
    }
    match a.data_type() {
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            listed(l.value_offsets(), l.values().as_ref())
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            listed(l.value_offsets(), l.values().as_ref())
        }
        DataType::Map(..) => {
            let m = a.as_map();
            listed(m.value_offsets(), m.entries())
        }
        DataType::FixedSizeList(_, size) => {
            let l = a.as_fixed_size_list();
            let size = (*size).max(1) as usize;
            let values = l.values().slice(l.offset() * size, l.len() * size);
            first_outside(values.as_ref()).map(|(at, what)| (at / size, what))
        }
        DataType::Struct(_) => a
            .as_struct()
            .columns()
            .iter()
            .filter_map(|c| first_outside(c.as_ref()))
            .min_by_key(|(row, _)| *row),
        DataType::Dictionary(..) => {
            let d = a.as_any_dictionary();
            first_outside(d.values().as_ref())?;
            let plain = arrow::compute::cast(a, d.values().data_type()).ok()?;
            first_outside(plain.as_ref())
        }
        _ => None,
    }
}

impl Range {
    fn of(t: &DataType) -> Option<Self> {
        let secs = (
            NaiveDateTime::MIN.and_utc().timestamp(),
            NaiveDateTime::MAX.and_utc().timestamp(),
        );
        // A day in from each end, for a time zone's offset.
        let scaled = |what, per_sec: i64| Range {
            what,
            low: (secs.0 + 86_400) * per_sec,
            high: (secs.1 - 86_400) * per_sec,
        };
        let day = |d: NaiveDate| (d - NaiveDate::default()).num_days();
        let time = |per_sec: i64| Range {
            what: "time",
            low: 0,
            high: 86_400 * per_sec - 1,
        };
        Some(match t {
            DataType::Timestamp(TimeUnit::Second, _) => scaled("timestamp", 1),
            DataType::Timestamp(TimeUnit::Millisecond, _) => scaled("timestamp", 1_000),
            DataType::Timestamp(TimeUnit::Microsecond, _) => scaled("timestamp", 1_000_000),
            DataType::Date32 => Range {
                what: "date",
                low: day(NaiveDate::MIN),
                high: day(NaiveDate::MAX),
            },
            DataType::Date64 => scaled("date", 1_000),
            DataType::Time32(TimeUnit::Second) => time(1),
            DataType::Time32(TimeUnit::Millisecond) => time(1_000),
            DataType::Time64(TimeUnit::Microsecond) => time(1_000_000),
            DataType::Time64(TimeUnit::Nanosecond) => time(1_000_000_000),
            _ => return None,
        })
    }

    /// The first row of `a` whose value lies outside the range.
    fn first_outside(&self, a: &dyn Array) -> Option<usize> {
        match a.data_type() {
            DataType::Timestamp(TimeUnit::Second, _) => {
                self.outside(a.as_primitive::<TimestampSecondType>())
            }
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                self.outside(a.as_primitive::<TimestampMillisecondType>())
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                self.outside(a.as_primitive::<TimestampMicrosecondType>())
            }
            DataType::Date32 => self.outside(a.as_primitive::<Date32Type>()),
            DataType::Date64 => self.outside(a.as_primitive::<Date64Type>()),
            DataType::Time32(TimeUnit::Second) => {
                self.outside(a.as_primitive::<Time32SecondType>())
            }
            DataType::Time32(TimeUnit::Millisecond) => {
                self.outside(a.as_primitive::<Time32MillisecondType>())
            }
            DataType::Time64(TimeUnit::Microsecond) => {
                self.outside(a.as_primitive::<Time64MicrosecondType>())
            }
            DataType::Time64(TimeUnit::Nanosecond) => {
                self.outside(a.as_primitive::<Time64NanosecondType>())
            }
            _ => None,
        }
    }

    /// One min/max pass; the rows only when one lies outside.
    fn outside<T>(&self, a: &PrimitiveArray<T>) -> Option<usize>
    where
        T: ArrowPrimitiveType,
        T::Native: Into<i64>,
    {
        let fits =
            |v: Option<T::Native>| v.is_none_or(|v| (self.low..=self.high).contains(&v.into()));
        if fits(min(a)) && fits(max(a)) {
            return None;
        }
        (0..a.len()).find(|&i| a.is_valid(i) && !fits(Some(a.value(i))))
    }
}

#[cfg(test)]
mod tests;
