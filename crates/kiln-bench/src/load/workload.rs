//! The dashboard workload: the 15 queries of an experiment's report page
//! (`bench/workload/dashboard/*.sql`, compiled into the binary so
//! `kiln bench query --workload dashboard` runs anywhere) and the seeded
//! generator of their parameters.
//!
//! Every query takes `$1` = experiment id, `$2` = range start and `$3` =
//! range end (exclusive). The generator is specified in
//! `bench/workload/README.md` and implemented identically by the peers'
//! Python driver, so every system answers the same sequence of calls.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::r#gen::{DAY_NS, DEFAULT_START_NS, NUM_EXPERIMENTS};
use crate::{Error, Result};

/// One query of a workload.
#[derive(Clone, Copy, Debug)]
pub struct Query {
    pub name: &'static str,
    pub sql: &'static str,
}

macro_rules! dashboard {
    ($($name:literal),* $(,)?) => {
        [$(Query {
            name: $name,
            sql: include_str!(concat!("../../../../bench/workload/dashboard/", $name, ".sql")),
        }),*]
    };
}

/// The 15 charts of one experiment's report page.
pub const DASHBOARD: [Query; 15] = dashboard!(
    "01_distinct_users",
    "02_conversion",
    "03_revenue",
    "04_covariance",
    "05_daily_active_users",
    "06_daily_revenue",
    "07_top_regions",
    "08_platform_split",
    "09_url_contains",
    "10_url_prefix",
    "11_funnel",
    "12_ttest_inputs",
    "13_retention_d1",
    "14_retention_d7",
    "15_events_per_hour",
);

/// The dashboard's charts but the two retention ones (13, 14), which group
/// by user: the charts a cube can answer (bench/cubes.sql).
static AGGREGATES: std::sync::LazyLock<Vec<Query>> = std::sync::LazyLock::new(|| {
    DASHBOARD
        .iter()
        .filter(|q| !q.name.contains("retention"))
        .copied()
        .collect()
});

/// A workload by name (`--workload`).
pub fn workload(name: &str) -> Result<&'static [Query]> {
    match name {
        "dashboard" => Ok(&DASHBOARD),
        "aggregates" => Ok(AGGREGATES.as_slice()),
        other => Err(Error::Config(format!(
            "unknown workload '{other}' (known: dashboard, aggregates)"
        ))),
    }
}

/// The SQL text of a query without a trailing `;` (prepared statements take one statement).
pub fn statement(q: &Query) -> &'static str {
    q.sql.trim().trim_end_matches(';').trim_end()
}

/// Days the start of a 7-day range may be after the data's first day.
const START_DAYS: u64 = 8;
const RANGE_DAYS: i64 = 7;

/// One call: which query and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub query: usize,
    pub experiment: i64,
    /// Range start and end, ns since the epoch (naive UTC timestamps).
    pub from_ns: i64,
    pub to_ns: i64,
}

impl Call {
    pub fn from_time(&self) -> SystemTime {
        at(self.from_ns)
    }
    pub fn to_time(&self) -> SystemTime {
        at(self.to_ns)
    }
    /// `YYYY-MM-DD HH:MM:SS`, as the HTTP API takes timestamps.
    pub fn from_text(&self) -> String {
        text(self.from_ns)
    }
    pub fn to_text(&self) -> String {
        text(self.to_ns)
    }

    /// `sql` with `$1`, `$2`, `$3` replaced by this call's values as
    /// literals: the text a BI tool sends over the simple protocol. With
    /// `typed`, the range's bounds are typed (`TIMESTAMP '...'`), as
    /// Tableau and Looker write them.
    pub fn inline(&self, sql: &str, typed: bool) -> String {
        let time = |t: String| match typed {
            true => format!("TIMESTAMP '{t}'"),
            false => format!("'{t}'"),
        };
        sql.replace("$3", &time(self.to_text()))
            .replace("$2", &time(self.from_text()))
            .replace("$1", &self.experiment.to_string())
    }
}

fn at(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns as u64)
}

fn text(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The calls of one client: a SplitMix64 stream whose state starts at
/// `seed * 1_000_003 + client` (see `bench/workload/README.md`).
#[derive(Clone, Debug)]
pub struct CallGen {
    state: u64,
    queries: u64,
}

impl CallGen {
    pub fn new(seed: u64, client: u64, queries: usize) -> Self {
        Self {
            state: seed.wrapping_mul(1_000_003).wrapping_add(client),
            queries: queries as u64,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn next_call(&mut self) -> Call {
        let query = (self.next_u64() % self.queries) as usize;
        let experiment = 1 + (self.next_u64() % NUM_EXPERIMENTS as u64) as i64;
        let start_day = (self.next_u64() % START_DAYS) as i64;
        let from_ns = DEFAULT_START_NS + start_day * DAY_NS;
        Call {
            query,
            experiment,
            from_ns,
            to_ns: from_ns + RANGE_DAYS * DAY_NS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_deterministic_per_seed_and_client() {
        let a: Vec<Call> = (0..50)
            .map({
                let mut g = CallGen::new(7, 3, 15);
                move |_| g.next_call()
            })
            .collect();
        let mut g = CallGen::new(7, 3, 15);
        let b: Vec<Call> = (0..50).map(|_| g.next_call()).collect();
        assert_eq!(a, b);
        let mut other = CallGen::new(7, 4, 15);
        assert_ne!(
            a[..5],
            (0..5).map(|_| other.next_call()).collect::<Vec<_>>()[..]
        );
    }

    #[test]
    fn calls_cover_the_workload_within_the_data() {
        let mut g = CallGen::new(1, 0, 15);
        let mut seen = [0u32; 15];
        for _ in 0..3000 {
            let c = g.next_call();
            seen[c.query] += 1;
            assert!((1..=NUM_EXPERIMENTS).contains(&c.experiment));
            assert!(c.from_ns >= DEFAULT_START_NS);
            assert!(c.to_ns <= DEFAULT_START_NS + 14 * DAY_NS);
            assert_eq!(c.to_ns - c.from_ns, 7 * DAY_NS);
        }
        assert!(seen.iter().all(|&n| n > 100), "{seen:?}");
    }

    /// The first call of seed 1, client 0, pinned so the Python driver of
    /// `bench/peers` can be checked against the same numbers.
    #[test]
    fn first_call_is_pinned() {
        let mut g = CallGen::new(1, 0, 15);
        let c = g.next_call();
        let mut raw = CallGen::new(1, 0, 15);
        let (a, b, d) = (raw.next_u64(), raw.next_u64(), raw.next_u64());
        assert_eq!(c.query as u64, a % 15);
        assert_eq!(c.experiment as u64, 1 + b % 20);
        assert_eq!(c.from_ns, DEFAULT_START_NS + (d % 8) as i64 * DAY_NS);
        assert_eq!(a, 0x5a00_52b9_13b2_1d24, "SplitMix64 from state 1_000_003");
    }

    #[test]
    fn values_written_into_the_sql() {
        let c = Call {
            query: 0,
            experiment: 17,
            from_ns: DEFAULT_START_NS,
            to_ns: DEFAULT_START_NS + DAY_NS,
        };
        let sql = "WHERE e = $1 AND ts >= $2 AND ts < CAST($3 AS TIMESTAMP)";
        assert_eq!(
            c.inline(sql, false),
            "WHERE e = 17 AND ts >= '2026-11-01 00:00:00' AND ts < CAST('2026-11-02 00:00:00' AS TIMESTAMP)"
        );
        assert_eq!(
            c.inline(sql, true),
            "WHERE e = 17 AND ts >= TIMESTAMP '2026-11-01 00:00:00' \
             AND ts < CAST(TIMESTAMP '2026-11-02 00:00:00' AS TIMESTAMP)"
        );
    }

    #[test]
    fn timestamps_as_text() {
        assert_eq!(text(DEFAULT_START_NS), "2026-11-01 00:00:00");
        assert_eq!(
            text(DEFAULT_START_NS + 7 * DAY_NS + 3_723_000_000_000),
            "2026-11-08 01:02:03"
        );
        assert_eq!(text(0), "1970-01-01 00:00:00");
        assert_eq!(text(951_782_400 * 1_000_000_000), "2000-02-29 00:00:00");
    }

    #[test]
    fn every_query_is_one_parameterized_statement() {
        for q in &DASHBOARD {
            let s = statement(q);
            assert!(!s.contains(';'), "{}: more than one statement", q.name);
            for p in ["$1", "$2", "$3"] {
                assert!(s.contains(p), "{}: {p} unused", q.name);
            }
        }
    }
}
