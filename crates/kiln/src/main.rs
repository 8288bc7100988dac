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

/// Positions in mimalloc's `mi_option_e` (mimalloc.h of v3, the version
/// the `mimalloc` crate builds by default).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
const MI_OPTION_PAGE_FULL_RETAIN: std::ffi::c_int = 36;
const MI_OPTION_PAGE_CROSS_THREAD_MAX_RECLAIM: std::ffi::c_int = 42;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Sets a mimalloc option unless its `MIMALLOC_*` variable is set.
fn allocator_option(env: &str, option: std::ffi::c_int, value: std::ffi::c_long) {
    if std::env::var_os(env).is_none() {
        // SAFETY: sets an allocator option; no allocation depends on it.
        unsafe { mi_option_set(option, value) };
    }
}

fn main() -> std::process::ExitCode {
    // Resident memory should follow the heap, which the query memory pool
    // watches. Freed pages go back to the system at once rather than 10 ms
    // later on the thread's next allocation (otherwise idle execution
    // threads keep them, and resident memory stayed up to 40% above the
    // heap after a burst of queries); a thread keeps no empty pages for
    // reuse and takes back no pages freed by others once it has enough of
    // a size (200 heavy queries under a 1 GiB limit peaked at 1,211 MiB
    // median instead of 1,256 MiB, the dashboard's throughput unchanged;
    // docs/reliability.md).
    allocator_option("MIMALLOC_PURGE_DELAY", MI_OPTION_PURGE_DELAY, 0);
    allocator_option("MIMALLOC_PAGE_FULL_RETAIN", MI_OPTION_PAGE_FULL_RETAIN, 0);
    allocator_option(
        "MIMALLOC_PAGE_CROSS_THREAD_MAX_RECLAIM",
        MI_OPTION_PAGE_CROSS_THREAD_MAX_RECLAIM,
        0,
    );
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
