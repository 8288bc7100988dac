//! The `kiln` binary: one process, one config struct, one subcommand per job.

use clap::Parser;

mod commands;
mod config;
mod output;
mod settings_file;

// A scalable allocator without a central heap lock, counted so that the
// query memory pool sees what DataFusion does not account.
#[global_allocator]
static GLOBAL: kiln_query::memory::heap::Counting<mimalloc::MiMalloc> =
    kiln_query::memory::heap::Counting(mimalloc::MiMalloc);

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`,
/// mimalloc.h, v2 and v3 alike).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

fn main() -> std::process::ExitCode {
    // Freed pages go back to the system at once rather than a second later on
    // the thread's next allocation: otherwise idle execution threads keep
    // them resident, and resident memory, which the query memory pool
    // watches, stays up to 40% above the heap after a burst of queries.
    // `MIMALLOC_PURGE_DELAY` still overrides it.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an allocator option; no allocation depends on it.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
    kiln_query::memory::heap::no_transparent_huge_pages();
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
