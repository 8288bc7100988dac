//! `date_trunc` units: which ones a coarser one is made of, and the bucket
//! bounds of a nanosecond timestamp (UTC), as DataFusion's `date_trunc`
//! computes them (weeks start on Monday).

use chrono::{DateTime, Datelike, Months, NaiveDate};

const SECOND: i64 = 1_000_000_000;
const DAY: i64 = 86_400 * SECOND;

/// A `date_trunc` unit, finest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

impl Unit {
    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "quarter" => Unit::Quarter,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// Whether each bucket of `self` is a union of whole buckets of
    /// `finer`, so `date_trunc(self, date_trunc(finer, t)) = date_trunc(self, t)`.
    pub fn covers(self, finer: Unit) -> bool {
        use Unit::*;
        match (self, finer) {
            (a, b) if a == b => true,
            (_, f) if f <= Day => self > f,
            (Quarter | Year, Month) | (Year, Quarter) => true,
            _ => false,
        }
    }

    /// The length of a bucket in nanoseconds, for units of fixed length
    /// (a week too: without a time zone it is always 7 days).
    pub fn fixed_ns(self) -> Option<i64> {
        Some(match self {
            Unit::Second => SECOND,
            Unit::Minute => 60 * SECOND,
            Unit::Hour => 3_600 * SECOND,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            _ => return None,
        })
    }

    /// The start of the bucket holding `ns`; `None` if it is out of range.
    pub fn floor(self, ns: i64) -> Option<i64> {
        let fixed = |w: i64| ns.div_euclid(w).checked_mul(w);
        match self {
            Unit::Second => fixed(SECOND),
            Unit::Minute => fixed(60 * SECOND),
            Unit::Hour => fixed(3_600 * SECOND),
            Unit::Day => fixed(DAY),
            // 1970-01-01 was a Thursday: Mondays are 4 days after a multiple of 7.
            Unit::Week => (ns.checked_sub(4 * DAY)?)
                .div_euclid(7 * DAY)
                .checked_mul(7 * DAY)?
                .checked_add(4 * DAY),
            Unit::Month | Unit::Quarter | Unit::Year => {
                let date = DateTime::from_timestamp_nanos(ns).date_naive();
                let month0 = match self {
                    Unit::Month => date.month0(),
                    Unit::Quarter => date.month0() / 3 * 3,
                    _ => 0,
                };
                nanos(NaiveDate::from_ymd_opt(date.year(), month0 + 1, 1)?)
            }
        }
    }

    /// The start of the first bucket at or after `ns`; `None` if it is out
    /// of range.
    pub fn ceil(self, ns: i64) -> Option<i64> {
        let f = self.floor(ns)?;
        if f == ns {
            return Some(ns);
        }
        match self {
            Unit::Second => f.checked_add(SECOND),
            Unit::Minute => f.checked_add(60 * SECOND),
            Unit::Hour => f.checked_add(3_600 * SECOND),
            Unit::Day => f.checked_add(DAY),
            Unit::Week => f.checked_add(7 * DAY),
            Unit::Month | Unit::Quarter | Unit::Year => {
                let months = match self {
                    Unit::Month => 1,
                    Unit::Quarter => 3,
                    _ => 12,
                };
                let start = DateTime::from_timestamp_nanos(f).date_naive();
                nanos(start.checked_add_months(Months::new(months))?)
            }
        }
    }
}

fn nanos(date: NaiveDate) -> Option<i64> {
    date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_nanos_opt()
}
