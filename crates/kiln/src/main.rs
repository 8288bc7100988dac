//! The `kiln` binary: one process, one config struct, one subcommand per job.

use clap::Parser;

mod commands;
mod config;
mod output;
mod settings_file;

// A scalable allocator without a central heap lock.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    if let Err(e) = settings_file::apply() {
        eprintln!("error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let config = config::Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.log.clone())),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(kiln_query::executor::THREAD_STACK_BYTES)
        .build()
        .expect("tokio runtime");
    match runtime.block_on(commands::run(config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
