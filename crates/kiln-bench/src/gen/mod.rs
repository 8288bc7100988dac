//! Deterministic synthetic A/B-experiment event stream (`abtest` table).
//!
//! Why this exists: Kiln's benchmarks need a realistic, *reproducible*
//! real-time analytics workload — time-ordered arrivals (like a live stream),
//! heavy-hitter users (Zipf), skewed dimensions, a conversion funnel with a
//! measurable treatment effect, nullable measures and URL strings for `LIKE`
//! filters — at sizes from thousands to billions of rows, without shipping
//! data files around.
//!
//! Design choices:
//! * Every batch `i` is a pure function of `(seed, i)`: it has its own random
//!   stream and derives row-level time from the *global* row index. Batches
//!   can therefore be produced in any order and on any number of threads and
//!   the output is identical (see [`par_for_each_batch`]).
//! * Per-entity attributes (a user's arm within an experiment, home region,
//!   home platform, favourite experiment) come from hashing ids rather than
//!   from the random stream, so they are consistent across batches.
//! * The random primitives live in `rng.rs` and are specified there (not
//!   delegated to `rand`'s unportable `SmallRng`), so a given `(rows, seed)`
//!   reproduces the same bytes after dependency upgrades.

mod rng;
mod write;

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, Float64Builder, Int64Array, StringBuilder, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;

use rng::{Categorical, SplitMix64, Zipf, mix64, scramble40};

pub use write::{OutFormat, par_for_each_batch, write_file};

/// Kiln's DDL for the generated table (`bench/sql/abtest.kiln.sql`): the
/// portable column list of `bench/sql/abtest.sql`, which the peers use, plus
/// a sort key. Segments (one per day) are sorted by experiment, then user,
/// then time: a dashboard's `experiment_id = $1` reads one experiment's row
/// groups and pages, and a user's rows of one day sit together, so a
/// `count(DISTINCT user_id)` or a `GROUP BY arm, user_id` drops repeats
/// before hashing (`DedupExec`). The peers, which do not split by day, sort
/// by experiment, then time, to skip by time.
pub const ABTEST_DDL: &str = "CREATE TABLE abtest (event_time TIMESTAMP NOT NULL, experiment_id BIGINT NOT NULL, arm VARCHAR NOT NULL, user_id BIGINT NOT NULL, region VARCHAR NOT NULL, platform VARCHAR NOT NULL, action VARCHAR NOT NULL, page_url VARCHAR NOT NULL, amount DOUBLE, dwell_ms BIGINT NOT NULL) WITH (sort_key = 'experiment_id,user_id')";

/// 2026-11-01T00:00:00Z in nanoseconds since the Unix epoch.
pub const DEFAULT_START_NS: i64 = 1_793_491_200_000_000_000;
/// A day in nanoseconds.
pub const DAY_NS: i64 = 86_400 * 1_000_000_000;
/// Length of the generated time window: 14 days.
pub const SPAN_NS: i64 = 14 * DAY_NS;
/// Maximum absolute deviation of an event from its in-order position.
pub const JITTER_NS: i64 = 3 * 60 * 1_000_000_000;
/// Default rows per generated batch.
pub const DEFAULT_BATCH_ROWS: usize = 65_536;
/// Experiment ids are `1..=NUM_EXPERIMENTS`.
pub const NUM_EXPERIMENTS: i64 = 20;
/// Zipf exponent of the user popularity distribution.
pub const USER_ZIPF_S: f64 = 1.1;

/// Region values, most common first.
pub const REGIONS: [&str; 12] = [
    "us-east",
    "us-west",
    "eu-west",
    "eu-central",
    "ap-south",
    "ap-northeast",
    "sa-east",
    "ca-central",
    "eu-north",
    "ap-southeast",
    "me-central",
    "af-south",
];
const REGION_WEIGHTS: [f64; 12] = [
    22.0, 14.0, 13.0, 10.0, 9.0, 8.0, 6.0, 5.0, 4.0, 4.0, 3.0, 2.0,
];

/// Platform values.
pub const PLATFORMS: [&str; 3] = ["ios", "android", "web"];
const PLATFORM_WEIGHTS: [f64; 3] = [36.0, 41.0, 23.0];

/// Funnel actions, in funnel order.
pub const ACTIONS: [&str; 4] = ["view", "click", "add_to_cart", "purchase"];
const ACTION_WEIGHTS_CONTROL: [f64; 4] = [70.0, 18.0, 8.0, 4.0];
/// Treatment converts slightly better at every step (purchase 4.4% vs 4%).
const ACTION_WEIGHTS_TREATMENT: [f64; 4] = [69.2, 18.2, 8.2, 4.4];

const ARMS: [&str; 2] = ["control", "treatment"];

/// Probability (out of 2^32) that a row uses the user's favourite experiment
/// / home region / home platform instead of an independent draw.
const P_HOME_EXPERIMENT: u32 = (0.60 * 4_294_967_296.0) as u32;
const P_HOME_REGION: u32 = (0.85 * 4_294_967_296.0) as u32;
const P_HOME_PLATFORM: u32 = (0.80 * 4_294_967_296.0) as u32;

const SEARCH_TERMS: [&str; 16] = [
    "shoes",
    "jacket",
    "headphones",
    "laptop",
    "coffee",
    "sofa",
    "lamp",
    "watch",
    "backpack",
    "tent",
    "camera",
    "jeans",
    "blender",
    "desk",
    "toys",
    "vitamins",
];
const CATEGORIES: [&str; 8] = [
    "electronics",
    "fashion",
    "home",
    "sports",
    "beauty",
    "books",
    "garden",
    "toys",
];
/// `src=` values on item pages; `None` means no query string.
const ITEM_SOURCES: [Option<&str>; 5] = [
    Some("feed"),
    Some("search"),
    Some("ads"),
    Some("push"),
    None,
];
const ITEM_SOURCE_WEIGHTS: [f64; 5] = [40.0, 22.0, 15.0, 10.0, 13.0];

/// Page kinds visited on 'view' / 'click' rows.
#[derive(Clone, Copy)]
enum Page {
    Item,
    Search,
    Home,
    Category,
    Cart,
    Account,
}
const BROWSE_PAGES: [Page; 6] = [
    Page::Item,
    Page::Search,
    Page::Home,
    Page::Category,
    Page::Cart,
    Page::Account,
];
const BROWSE_PAGE_WEIGHTS: [f64; 6] = [45.0, 18.0, 14.0, 13.0, 5.0, 5.0];

/// Arrow schema of the `abtest` table (matches [`ABTEST_DDL`]).
pub fn abtest_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                Field::new(
                    "event_time",
                    DataType::Timestamp(TimeUnit::Nanosecond, None),
                    false,
                ),
                Field::new("experiment_id", DataType::Int64, false),
                Field::new("arm", DataType::Utf8, false),
                Field::new("user_id", DataType::Int64, false),
                Field::new("region", DataType::Utf8, false),
                Field::new("platform", DataType::Utf8, false),
                Field::new("action", DataType::Utf8, false),
                Field::new("page_url", DataType::Utf8, false),
                Field::new("amount", DataType::Float64, true),
                Field::new("dwell_ms", DataType::Int64, false),
            ]))
        })
        .clone()
}

/// Configuration of one generated dataset. All fields may be adjusted after
/// [`AbTestGen::new`]; the output is a pure function of them.
#[derive(Clone, Debug)]
pub struct AbTestGen {
    /// Total number of rows.
    pub rows: u64,
    /// Seed; different seeds give unrelated datasets.
    pub seed: u64,
    /// Number of distinct user ids to draw from (Zipf-distributed).
    pub users: u64,
    /// Start of the window, ns since epoch (UTC, stored without tz).
    pub start_ns: i64,
    /// Length of the window, ns ([`SPAN_NS`], 14 days, by default).
    pub span_ns: i64,
    /// Rows per batch. Each batch has its own random stream, so this is part
    /// of the dataset's identity (changing it changes the rows), but the
    /// thread count used to produce the batches never does.
    pub batch_rows: usize,
}

impl AbTestGen {
    /// `rows` rows from `seed`, with `users = max(rows / 10, 1000)`, the
    /// window starting at 2026-11-01T00:00:00Z and 65536-row batches.
    pub fn new(rows: u64, seed: u64) -> Self {
        Self {
            rows,
            seed,
            users: (rows / 10).max(1000),
            start_ns: DEFAULT_START_NS,
            span_ns: SPAN_NS,
            batch_rows: DEFAULT_BATCH_ROWS,
        }
    }

    fn batch_rows(&self) -> u64 {
        self.batch_rows.max(1) as u64
    }

    /// Number of batches [`AbTestGen::batch`] produces (the last may be short).
    pub fn num_batches(&self) -> usize {
        self.rows.div_ceil(self.batch_rows()) as usize
    }

    /// Batch `i` (rows `[i * batch_rows, min((i + 1) * batch_rows, rows))`),
    /// generated independently from `(seed, i)` so batches can be made in
    /// parallel and the output is the same regardless of thread count.
    /// Returns an empty batch for `i >= num_batches()`.
    pub fn batch(&self, i: usize) -> RecordBatch {
        let first = (i as u64).saturating_mul(self.batch_rows());
        let n = self.rows.saturating_sub(first).min(self.batch_rows()) as usize;
        if n == 0 {
            return RecordBatch::new_empty(abtest_schema());
        }
        BatchBuilder::new(self, i as u64, n).build(first)
    }

    /// All batches, in order, generated on the calling thread.
    pub fn batches(&self) -> impl Iterator<Item = RecordBatch> + '_ {
        (0..self.num_batches()).map(move |i| self.batch(i))
    }

    /// Hash-derived keys, so per-entity attributes depend on the seed only.
    fn key(&self, purpose: u64) -> u64 {
        mix64(mix64(self.seed) ^ purpose.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
}

/// Which arm `user_id` is in for `experiment_id`, for keys of a given seed:
/// a hash-based 50/50 split, so a user never switches arms.
#[inline]
fn arm_of(arm_key: u64, experiment_id: i64, user_id: i64) -> usize {
    (mix64(mix64(arm_key ^ experiment_id as u64) ^ user_id as u64) & 1) as usize
}

/// Generates the columns of one batch.
struct BatchBuilder<'a> {
    config: &'a AbTestGen,
    rng: SplitMix64,
    n: usize,
    users: Zipf,
    user_key: u64,
    home_key: u64,
    arm_key: u64,
    experiments: Categorical,
    regions: Categorical,
    platforms: Categorical,
    actions: [Categorical; 2],
    browse_pages: Categorical,
    item_sources: Categorical,
}

impl<'a> BatchBuilder<'a> {
    fn new(config: &'a AbTestGen, index: u64, n: usize) -> Self {
        let experiment_weights: Vec<f64> = (1..=NUM_EXPERIMENTS)
            .map(|k| (k as f64).powf(-1.2))
            .collect();
        Self {
            config,
            rng: SplitMix64::new(mix64(config.key(1) ^ mix64(index))),
            n,
            users: Zipf::new(config.users.max(1), USER_ZIPF_S),
            user_key: config.key(2),
            home_key: config.key(3),
            arm_key: config.key(4),
            experiments: Categorical::new(&experiment_weights),
            regions: Categorical::new(&REGION_WEIGHTS),
            platforms: Categorical::new(&PLATFORM_WEIGHTS),
            actions: [
                Categorical::new(&ACTION_WEIGHTS_CONTROL),
                Categorical::new(&ACTION_WEIGHTS_TREATMENT),
            ],
            browse_pages: Categorical::new(&BROWSE_PAGE_WEIGHTS),
            item_sources: Categorical::new(&ITEM_SOURCE_WEIGHTS),
        }
    }

    fn build(mut self, first_row: u64) -> RecordBatch {
        let n = self.n;
        let cfg = self.config;
        let mut event_time = Vec::with_capacity(n);
        let mut experiment_id = Vec::with_capacity(n);
        let mut arm = StringBuilder::with_capacity(n, n * 8);
        let mut user_id = Vec::with_capacity(n);
        let mut region = StringBuilder::with_capacity(n, n * 8);
        let mut platform = StringBuilder::with_capacity(n, n * 6);
        let mut action = StringBuilder::with_capacity(n, n * 5);
        let mut page_url = StringBuilder::with_capacity(n, n * 30);
        let mut amount = Float64Builder::with_capacity(n);
        let mut dwell_ms = Vec::with_capacity(n);

        let start = cfg.start_ns;
        let span = cfg.span_ns.max(1);
        let last = start + span - 1;
        let rows = cfg.rows as u128;
        for r in 0..n as u64 {
            // Time: in-order position of the global row plus bounded jitter.
            let g = (first_row + r) as u128;
            let base = start + (g * span as u128 / rows) as i64;
            let jitter = self.rng.below(2 * JITTER_NS as u64 + 1) as i64 - JITTER_NS;
            event_time.push((base + jitter).clamp(start, last));

            // User first (Zipf rank -> scrambled id), then experiment.
            let rank = self.users.sample(&mut self.rng);
            let user = scramble40(rank, self.user_key) as i64;
            user_id.push(user);
            let home = mix64(self.home_key ^ user as u64);
            let exp_draw = if self.rng.next_u32() < P_HOME_EXPERIMENT {
                home as u32
            } else {
                self.rng.next_u32()
            };
            let exp = self.experiments.pick(exp_draw) as i64 + 1;
            experiment_id.push(exp);
            let a = arm_of(self.arm_key, exp, user);
            arm.append_value(ARMS[a]);

            let region_draw = if self.rng.next_u32() < P_HOME_REGION {
                (home >> 32) as u32
            } else {
                self.rng.next_u32()
            };
            region.append_value(REGIONS[self.regions.pick(region_draw)]);
            let platform_draw = if self.rng.next_u32() < P_HOME_PLATFORM {
                mix64(home) as u32
            } else {
                self.rng.next_u32()
            };
            platform.append_value(PLATFORMS[self.platforms.pick(platform_draw)]);

            let act = self.actions[a].pick(self.rng.next_u32());
            action.append_value(ACTIONS[act]);
            self.write_url(&mut page_url, act);

            if act == 3 {
                let x = (35f64.ln() + 0.85 * self.rng.normal())
                    .exp()
                    .clamp(5.0, 500.0);
                amount.append_value((x * 100.0).round() / 100.0);
            } else {
                amount.append_null();
            }

            // Exponential with mean 20 s, capped at 10 minutes.
            let u = 1.0 - self.rng.unit(); // (0, 1]
            dwell_ms.push(((-u.ln() * 20_000.0) as i64).min(600_000));
        }

        let columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from(event_time)),
            Arc::new(Int64Array::from(experiment_id)),
            Arc::new(arm.finish()),
            Arc::new(Int64Array::from(user_id)),
            Arc::new(region.finish()),
            Arc::new(platform.finish()),
            Arc::new(action.finish()),
            Arc::new(page_url.finish()),
            Arc::new(amount.finish()),
            Arc::new(Int64Array::from(dwell_ms)),
        ];
        RecordBatch::try_new(abtest_schema(), columns)
            .expect("generated columns match abtest_schema")
    }

    /// Appends one `page_url` value for a row with funnel step `act`.
    fn write_url(&mut self, out: &mut StringBuilder, act: usize) {
        let rng = &mut self.rng;
        // `fmt::Write` on `StringBuilder` only appends bytes and never fails.
        let _ = match act {
            // purchase: the order confirmation page.
            3 => write!(
                out,
                "/checkout/confirm?order={}",
                1_000_000 + rng.below(9_000_000)
            ),
            // add_to_cart: mostly from an item page, sometimes from the cart.
            2 if rng.below(100) < 15 => write!(out, "/cart"),
            2 => write_item_url(out, rng, &self.item_sources),
            // view / click: browsing.
            _ => match BROWSE_PAGES[self.browse_pages.pick(rng.next_u32())] {
                Page::Item => write_item_url(out, rng, &self.item_sources),
                Page::Search => {
                    let term = SEARCH_TERMS[rng.below(SEARCH_TERMS.len() as u64) as usize];
                    if rng.below(100) < 30 {
                        write!(out, "/search?q={term}&src=ads")
                    } else {
                        write!(out, "/search?q={term}")
                    }
                }
                Page::Home => {
                    if rng.below(100) < 30 {
                        write!(out, "/home?src=push")
                    } else {
                        write!(out, "/home")
                    }
                }
                Page::Category => {
                    let cat = CATEGORIES[rng.below(CATEGORIES.len() as u64) as usize];
                    let page = 1 + rng.below(10);
                    if rng.below(100) < 20 {
                        write!(out, "/c/{cat}?src=feed&page={page}")
                    } else {
                        write!(out, "/c/{cat}?page={page}")
                    }
                }
                Page::Cart => write!(out, "/cart"),
                Page::Account => write!(out, "/account/orders"),
            },
        };
        out.append_value("");
    }
}

/// `/item/<id>[?src=<src>&pos=<pos>]`, item ids skewed towards popular items.
fn write_item_url(
    out: &mut StringBuilder,
    rng: &mut SplitMix64,
    sources: &Categorical,
) -> std::fmt::Result {
    let u = rng.unit();
    let item = 10_000 + (u * u * u * 90_000.0) as u64;
    match ITEM_SOURCES[sources.pick(rng.next_u32())] {
        Some(src) => write!(out, "/item/{item}?src={src}&pos={}", 1 + rng.below(50)),
        None => write!(out, "/item/{item}"),
    }
}
