//! One module per subcommand.

mod bench;
mod generate;
mod import;
mod load;
mod serve;
mod sql;

use crate::config::{BenchCommand, Command, Config, GenCommand};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub async fn run(config: Config) -> Result<(), BoxError> {
    match config.command {
        Command::Sql(args) => sql::run(args).await,
        Command::Import(args) => import::run(args).await,
        Command::Gen(GenCommand::Abtest(args)) => generate::run(args).await,
        Command::Bench(BenchCommand::WriteEmbedded(args)) => bench::write_embedded(args).await,
        Command::Bench(BenchCommand::ScanVsParquet(args)) => bench::scan_vs_parquet(args).await,
        Command::Bench(BenchCommand::Query(args)) => load::query(args).await,
        Command::Bench(BenchCommand::Write(args)) => load::write(args).await,
        Command::Serve(args) => serve::run(*args).await,
    }
}
