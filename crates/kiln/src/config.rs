//! Kiln's one configuration struct. Every flag has a `KILN_*` environment
//! variable, a default and a doc comment, shown by `kiln <command> --help`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kiln_storage::StorageConfig;

/// Kiln: a real-time analytical database.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about)]
pub struct Config {
    /// Log filter when RUST_LOG is unset (tracing EnvFilter syntax).
    #[arg(long, global = true, env = "KILN_LOG", default_value = "warn")]
    pub log: String,

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
    /// Benchmarks of an embedded database.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Serve the HTTP API and the PostgreSQL wire protocol until SIGTERM/SIGINT.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
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
    /// A/B experiment events (see DESIGN.md), deterministic for a seed.
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
    #[arg(long, env = "KILN_GEN_OUT")]
    pub out: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable writes from concurrent writers into an embedded database:
    /// commits/s and latency percentiles per second and overall.
    WriteEmbedded(WriteEmbeddedArgs),
    /// The same SQL against a Kiln table and against plain DataFusion reading
    /// one Parquet file, alternating, in one process: medians and ratio.
    ScanVsParquet(ScanVsParquetArgs),
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
