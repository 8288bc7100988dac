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
    /// Tools for tests: concurrent acknowledged writes (crash tests).
    #[command(subcommand, hide = true)]
    Debug(DebugCommand),
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
pub enum DebugCommand {
    /// Writes rows from concurrent writers and prints `ack <id>` after each
    /// acknowledged write, for crash tests that kill the process at random.
    WriteLoad(WriteLoadArgs),
}

#[derive(Debug, Args)]
pub struct WriteLoadArgs {
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Concurrent writers.
    #[arg(long, env = "KILN_WRITERS", default_value_t = 8)]
    pub writers: u64,
    /// Writes per writer (each one row unless --batch).
    #[arg(long, env = "KILN_WRITES", default_value_t = 1_000_000)]
    pub writes: u64,
    /// Rows per write.
    #[arg(long, env = "KILN_BATCH", default_value_t = 1)]
    pub batch: u64,
    /// First id; writer w writes ids id_base + w * 10^9 + i.
    #[arg(long, env = "KILN_ID_BASE", default_value_t = 0)]
    pub id_base: i64,
}
