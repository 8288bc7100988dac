//! One module per subcommand.

mod debug;
mod generate;
mod import;
mod sql;

use crate::config::{Command, Config, DebugCommand, GenCommand};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub async fn run(config: Config) -> Result<(), BoxError> {
    match config.command {
        Command::Sql(args) => sql::run(args).await,
        Command::Import(args) => import::run(args).await,
        Command::Gen(GenCommand::Abtest(args)) => generate::run(args),
        Command::Debug(DebugCommand::WriteLoad(args)) => debug::write_load(args).await,
    }
}
