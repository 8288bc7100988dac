//! Kiln's one configuration struct. Every flag has a `KILN_*` environment
//! variable, a default and a doc comment, shown by `kiln <command> --help`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kiln_query::QueryConfig;
use kiln_storage::StorageConfig;

/// Kiln: a real-time analytical database.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about)]
pub struct Config {
    /// Log filter when RUST_LOG is unset (tracing EnvFilter syntax).
    #[arg(long, global = true, env = "KILN_LOG", default_value = "warn")]
    pub log: String,

    /// A TOML file of settings: each key is a flag's name (`http-addr` or
    /// `http_addr`), each value its setting. Flags and `KILN_*` variables
    /// override the file; the file overrides the defaults.
    #[arg(long, global = true, env = "KILN_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run SQL statements against a data directory and print the results.
    Sql(SqlArgs),
    /// Load CSV (header row), NDJSON or Parquet files into a table; each file is atomic.
    Import(ImportArgs),
    /// Generate benchmark data.
    #[command(subcommand)]
    Gen(GenCommand),
    /// Benchmarks: of an embedded database, and load drivers against a server.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Serve the HTTP API and the PostgreSQL wire protocol until SIGTERM/SIGINT.
    Serve(Box<ServeArgs>),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
    #[command(flatten)]
    pub query: QueryConfig,
    #[command(flatten)]
    pub server: kiln_server::ServerConfig,
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

#[derive(Debug, Args)]
pub struct SqlArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
    #[command(flatten)]
    pub query: QueryConfig,
    /// Run against a server (`http://HOST:PORT`) instead of opening the
    /// data directory; the storage settings are then unused.
    #[arg(long, env = "KILN_URL")]
    pub url: Option<String>,
    /// Output format.
    #[arg(long, env = "KILN_FORMAT", value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// SQL text: one or more statements separated by ';'.
    pub sql: String,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Table to load into (must exist).
    #[arg(long, env = "KILN_TABLE")]
    pub table: String,
    /// File format (csv, ndjson, parquet); default: from each file's extension.
    #[arg(long, env = "KILN_IMPORT_FORMAT")]
    pub format: Option<String>,
    /// Files to load, each all or nothing.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum GenCommand {
    /// A/B experiment events (the `abtest` table of bench/sql/abtest.sql), deterministic for a seed.
    Abtest(GenArgs),
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// Number of rows.
    #[arg(long, env = "KILN_GEN_ROWS", default_value_t = 1_000_000)]
    pub rows: u64,
    /// Random seed: the same seed gives the same bytes.
    #[arg(long, env = "KILN_GEN_SEED", default_value_t = 42)]
    pub seed: u64,
    /// Output file; format from the extension (.parquet, .csv, .ndjson).
    #[arg(
        long,
        env = "KILN_GEN_OUT",
        required_unless_present = "load",
        conflicts_with = "load"
    )]
    pub out: Option<PathBuf>,
    /// Instead of a file, stream the rows into a running server
    /// (`http://HOST:PORT`), creating table `abtest` if missing.
    #[arg(long, env = "KILN_GEN_LOAD")]
    pub load: Option<String>,
    /// With `--load`: write requests in flight at once.
    #[arg(long, env = "KILN_GEN_PARALLEL", default_value_t = 4)]
    pub parallel: usize,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable writes from concurrent writers into an embedded database:
    /// commits/s and latency percentiles per second and overall.
    WriteEmbedded(WriteEmbeddedArgs),
    /// The same SQL against a Kiln table and against plain DataFusion reading
    /// one Parquet file, alternating, in one process: medians and ratio.
    ScanVsParquet(ScanVsParquetArgs),
    /// Closed-loop query clients against a server, one table row per
    /// concurrency level (clients, queries, q/s, mean and tail latency).
    Query(BenchQueryArgs),
    /// YCSB-style HTTP writes against a server: throughput and latency
    /// percentiles for every second and overall.
    Write(BenchWriteArgs),
}

/// Protocol of `kiln bench query`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchProtocol {
    /// PostgreSQL wire with prepared statements.
    Pg,
    /// PostgreSQL wire, simple query protocol, values written into the SQL.
    PgSimple,
    /// The same with the range's bounds typed (`TIMESTAMP '...'`), as
    /// Tableau and Looker write them.
    PgTyped,
    /// `POST /v1/sql` with JSON parameters.
    Http,
}

#[derive(Debug, Args)]
pub struct BenchQueryArgs {
    /// Server: `postgres://HOST:PORT` for `--protocol pg`, `http://HOST:PORT` for http.
    #[arg(long, env = "KILN_URL", default_value = "postgres://127.0.0.1:5433")]
    pub url: String,
    /// Protocol the clients speak.
    #[arg(long, env = "KILN_BENCH_PROTOCOL", value_enum, default_value = "pg")]
    pub protocol: BenchProtocol,
    /// Concurrency levels, run in order.
    #[arg(
        long,
        env = "KILN_BENCH_CLIENTS",
        value_delimiter = ',',
        default_value = "1,15,25,50,75,100,150"
    )]
    pub clients: Vec<usize>,
    /// How long each level runs.
    #[arg(long, env = "KILN_DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: std::time::Duration,
    /// Queries to draw from (see bench/workload/README.md).
    #[arg(long, env = "KILN_BENCH_WORKLOAD", default_value = "dashboard")]
    pub workload: String,
    /// Seed of the parameter generator (client i uses seed * 1000003 + i).
    #[arg(long, env = "KILN_BENCH_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long, env = "KILN_BENCH_JSON", default_value_t = false)]
    pub json: bool,
}

/// Body format of `kiln bench write`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WriteFormat {
    Ndjson,
    Arrow,
}

#[derive(Debug, Args)]
pub struct BenchWriteArgs {
    /// Server: `http://HOST:PORT`, or `https://HOST:PORT` (see --ca-cert).
    #[arg(long, env = "KILN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// PEM CA certificate to trust for an `https://` --url instead of the
    /// system's roots. Default: none.
    #[arg(long, env = "KILN_CA_CERT")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Table written (`abtest`, created if missing).
    #[arg(long, env = "KILN_TABLE", default_value = "abtest")]
    pub table: String,
    /// Concurrent writers, each one request at a time.
    #[arg(long, env = "KILN_BENCH_CLIENTS", default_value_t = 64)]
    pub clients: usize,
    /// Rows per request.
    #[arg(long, env = "KILN_BATCH", default_value_t = 1)]
    pub batch: usize,
    /// How long to write.
    #[arg(long, env = "KILN_DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: std::time::Duration,
    /// `durable` (answer after fsync) or `memory` (answer once queued).
    #[arg(long, env = "KILN_ACK", default_value = "durable", value_parser = ["durable", "memory"])]
    pub ack: String,
    /// Body format.
    #[arg(long, env = "KILN_WRITE_FORMAT", value_enum, default_value = "ndjson")]
    pub format: WriteFormat,
    /// Seed of the generated rows.
    #[arg(long, env = "KILN_BENCH_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Rows per second to send at most, spread evenly over the writers (a
    /// steady stream); 0: as fast as the server answers.
    #[arg(long, env = "KILN_BENCH_RATE", default_value_t = 0)]
    pub rate: u64,
    /// Days the rows' times fall in: the last N of the generated 14-day
    /// window (14: all of it; 1: a stream of recent events).
    #[arg(long, env = "KILN_BENCH_DAYS", default_value_t = kiln_bench::load::WINDOW_DAYS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(kiln_bench::load::WINDOW_DAYS)))]
    pub days: u32,
    /// Print one JSON object on stdout instead of the tables.
    #[arg(long, env = "KILN_BENCH_JSON", default_value_t = false)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WriteEmbeddedArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Concurrent writers.
    #[arg(long, env = "KILN_WRITERS", default_value_t = 8)]
    pub writers: u64,
    /// Stop after this long.
    #[arg(long, env = "KILN_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: std::time::Duration,
    /// Rows per write.
    #[arg(long, env = "KILN_BATCH", default_value_t = 1)]
    pub batch: u64,
    /// First id; writer w writes ids id_base + w * 10^9 + i.
    #[arg(long, env = "KILN_ID_BASE", default_value_t = 0)]
    pub id_base: i64,
    /// Print `ack <id>` on stdout after each acknowledged write (crash tests).
    #[arg(long, env = "KILN_PRINT_ACKS", default_value_t = false)]
    pub print_acks: bool,
}

#[derive(Debug, Args)]
pub struct ScanVsParquetArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Table name; `{table}` in each query is replaced by it.
    #[arg(long, env = "KILN_TABLE", default_value = "abtest")]
    pub table: String,
    /// The Parquet file plain DataFusion reads as `{table}`.
    #[arg(long, env = "KILN_PARQUET")]
    pub file: PathBuf,
    /// Runs of each query on each side (median reported).
    #[arg(long, env = "KILN_REPEAT", default_value_t = 7)]
    pub repeat: usize,
    /// Queries to run (repeat the flag).
    #[arg(long = "query", required = true)]
    pub queries: Vec<String>,
}
