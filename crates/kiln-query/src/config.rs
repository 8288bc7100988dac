//! [`QueryConfig`]: every setting of the query engine, one clap group used
//! by `kiln serve` and the embedded `kiln sql` alike, so both run queries
//! under the same rules.
//!
//! A leaf: it names settings and knows nothing of how they are used.

use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use kiln_storage::ByteSize;

use crate::admission::QueryLimits;

/// Settings of the query engine. Each is a flag with a `KILN_*` environment
/// variable and a default.
#[derive(Clone, Debug, Args)]
pub struct QueryConfig {
    /// Queries executing at once, all protocols together; more wait in a
    /// queue, first come first served. Default: twice the cores, since more
    /// at once only share the cores and lengthen every query.
    #[arg(long, env = "KILN_MAX_CONCURRENT_QUERIES", default_value_t = default_slots())]
    pub max_concurrent_queries: usize,

    /// How long a query keeps its execution slot; past it the query runs on
    /// outside the count and the next queued query starts, so a few heavy
    /// queries cannot hold up the rest. 0s: until the query ends.
    #[arg(long, env = "KILN_QUERY_SLOT_TIME", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub query_slot_time: Duration,

    /// Queries waiting for a slot; beyond this a query is refused at once
    /// (HTTP 503, SQLSTATE 53300) instead of piling up.
    #[arg(long, env = "KILN_MAX_QUEUED_QUERIES", default_value_t = 1024)]
    pub max_queued_queries: usize,

    /// Longest a query may take, queueing included (HTTP 504, SQLSTATE
    /// 57014); 0s: no limit.
    #[arg(long, env = "KILN_QUERY_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub query_timeout: Duration,

    /// Deepest an expression of a statement may nest (`1+1+...` with this
    /// many terms); deeper statements are refused (HTTP 400, SQLSTATE
    /// 54001) before they are planned. Long AND/OR chains are rebalanced
    /// and never reach it.
    #[arg(long, env = "KILN_MAX_EXPRESSION_DEPTH", default_value_t = 1000)]
    pub max_expression_depth: usize,

    /// Largest SQL text accepted in one request or message, a size such as
    /// 1MiB; larger text is refused (SQLSTATE 54001) before it is parsed,
    /// since even a refused statement is a tree that must be taken apart.
    #[arg(long, env = "KILN_MAX_STATEMENT_BYTES", default_value = "1MiB")]
    pub max_statement_bytes: ByteSize,

    /// Memory all running queries together may hold for execution (sorts,
    /// aggregations, joins: what DataFusion accounts), a size such as 8GiB
    /// or a share of memory such as 50%. Queries get nine tenths of it; the
    /// rest is left for pages the allocator keeps. Sorts, aggregations and
    /// joins spill to `--spill-dir` past their share; other queries fail
    /// with SQLSTATE 53200 (HTTP 503) rather than take more.
    #[arg(long, env = "KILN_MEMORY_LIMIT", default_value = "50%")]
    pub memory_limit: ByteSize,

    /// Memory one query may hold of `--memory-limit`, so one query cannot
    /// take it all from the rest.
    #[arg(long, env = "KILN_QUERY_MEMORY_LIMIT", default_value = "25%")]
    pub query_memory_limit: ByteSize,

    /// Directory for the files sorts, aggregations and joins spill to
    /// (created if missing). Default: the system's temporary directory.
    #[arg(long, env = "KILN_SPILL_DIR")]
    pub spill_dir: Option<std::path::PathBuf>,

    /// Threads executing queries that read tables, on a runtime of their
    /// own (0: one per core); connections, planning and light queries
    /// (`SELECT 1`, `system.*`, catalogs) run on the server's runtime.
    #[arg(long, env = "KILN_EXECUTION_THREADS", default_value_t = 0)]
    pub execution_threads: usize,

    /// How much lower the execution threads' scheduling priority is (a
    /// nice increment, 0-19), and the background threads' (flushes',
    /// compactions' and cube parts' CPU work): when the cores are busy, the
    /// kernel runs connections and light queries first, so they answer
    /// within milliseconds under any load; 0 keeps them equal.
    #[arg(long, env = "KILN_EXECUTION_NICE", default_value_t = 10,
          value_parser = clap::value_parser!(i32).range(0..=19))]
    pub execution_nice: i32,

    /// Whether flushes', compactions' and cube parts' CPU work runs only on
    /// cores nothing else wants (Linux's idle scheduling class) while every
    /// table keeps up with its flushes, so it takes no CPU a query waits
    /// for; a table holding two flushes' worth of rows sends it back to
    /// the background threads' `--execution-nice` priority. Off: always
    /// there.
    #[arg(long, env = "KILN_BACKGROUND_IDLE", default_value_t = true, action = clap::ArgAction::Set)]
    pub background_idle: bool,

    /// Finished queries kept in `system.queries`.
    #[arg(long, env = "KILN_QUERY_HISTORY", default_value_t = 1000)]
    pub query_history: usize,

    /// How prepared statements are planned, as PostgreSQL's
    /// `plan_cache_mode`: auto (planned with their values at first, then a
    /// kept generic plan if that proved faster), force-custom or
    /// force-generic. Queries sent with their values written in (simple
    /// protocol, HTTP) are planned the same way by their filters' shape,
    /// the literals as the values, except under force-custom.
    #[arg(long, env = "KILN_PLAN_CACHE_MODE", default_value = "auto")]
    pub plan_cache_mode: PlanCacheMode,

    /// Memory for hot segments kept decoded as Arrow (0: off), a size such
    /// as 2GiB or a share of memory such as 10%. A query scans a held
    /// segment without reading or decoding Parquet; a segment a query
    /// misses is decoded in the background for the next ones.
    #[arg(long, env = "KILN_SEGMENT_CACHE_BYTES", default_value = "2GiB")]
    pub segment_cache_bytes: ByteSize,

    /// Memory for partial aggregates of held segments (0: off). A GROUP BY
    /// keeps the part it computed over each decoded segment; the next query
    /// asking the same of that segment (same aggregate, same values, same
    /// slices) reuses it and reads only what is not kept, such as the
    /// memstore.
    #[arg(long, env = "KILN_PARTIAL_CACHE_BYTES", default_value = "1GiB")]
    pub partial_cache_bytes: ByteSize,

    /// Memory for cube parts kept decoded, and their rollups (a part merged
    /// to the dimensions a query reads); 0: decode each part at every
    /// query, and make no rollup. Parts are small (the groups of a
    /// segment, not its rows); a query answered from a cube reads them
    /// from here.
    #[arg(long, env = "KILN_CUBE_CACHE_BYTES", default_value = "512MiB")]
    pub cube_cache_bytes: ByteSize,

    /// A directory SQL may read and write files in (`COPY ... TO 'path'`,
    /// `COPY ... FROM 'path'`, `CREATE EXTERNAL TABLE ... LOCATION`);
    /// paths are resolved (symlinks, `..`) and must stay inside it, and
    /// never inside the data directory. Default: none, SQL uses no server
    /// file (42501 / HTTP 403).
    #[arg(long, env = "KILN_SQL_FILE_ACCESS", value_name = "DIR")]
    pub sql_file_access: Option<std::path::PathBuf>,
}

impl Default for QueryConfig {
    /// The flags' defaults, with any `KILN_*` variable set in the environment.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            query: QueryConfig,
        }
        <Only as clap::Parser>::parse_from(["kiln"]).query
    }
}

/// Twice the cores this process may use.
fn default_slots() -> usize {
    2 * std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl QueryConfig {
    /// The admission and timeout limits of every query.
    pub fn limits(&self) -> QueryLimits {
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        QueryLimits {
            max_concurrent: self.max_concurrent_queries,
            slot_time: nonzero(self.query_slot_time),
            max_queued: self.max_queued_queries,
            timeout: nonzero(self.query_timeout),
            history: self.query_history,
            query_memory: self.query_memory_limit.as_usize(),
        }
    }
}

/// How prepared statements are planned; PostgreSQL's `plan_cache_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlanCacheMode {
    /// Custom plans for the first trials, then whichever kind was faster.
    #[default]
    Auto,
    /// Every execution planned with its values.
    ForceCustom,
    /// A generic plan whenever the statement's plan can be kept.
    ForceGeneric,
}

impl FromStr for PlanCacheMode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "force-custom" => Ok(Self::ForceCustom),
            "force-generic" => Ok(Self::ForceGeneric),
            _ => Err(format!(
                "unknown plan cache mode {s:?}: use auto, force-custom or force-generic"
            )),
        }
    }
}
