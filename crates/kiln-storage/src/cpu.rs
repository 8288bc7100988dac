//! [`CpuPool`]: where the engine's CPU-bound background work runs —
//! sorting, encoding and decoding segments and cube parts for flushes,
//! compactions and cube builds, and packing in-memory batches.
//!
//! Why: that work is throughput work, while queries wait on theirs. On
//! tokio's blocking pool it ran at the priority of the threads that serve
//! connections, above the query layer's execution threads, which run at
//! a lower one. The query layer installs a runtime of its own for it
//! ([`crate::Db::set_cpu_runtime`]), at the execution threads' priority
//! and apart from them; until then (embedded use, tests) it runs on the
//! caller's runtime's blocking pool.

use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;

/// A runtime whose blocking pool runs the storage engine's CPU-bound
/// background work; installed with [`crate::Db::set_cpu_runtime`].
pub trait CpuRuntime: Send + Sync + 'static {
    /// The runtime. It keeps running while `self` lives.
    fn handle(&self) -> Handle;
}

/// Runs CPU-bound work off the async workers: on the installed
/// [`CpuRuntime`]'s blocking pool, else on the caller's runtime's.
#[derive(Default)]
pub struct CpuPool {
    runtime: OnceLock<Arc<dyn CpuRuntime>>,
}

impl CpuPool {
    /// Sends later work to `runtime`; the first installed one stays.
    pub fn install(&self, runtime: Arc<dyn CpuRuntime>) {
        let _ = self.runtime.set(runtime);
    }

    /// The result of `work`, run on a blocking thread. A panic in `work`
    /// resumes in the caller.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let task = match self.runtime.get() {
            Some(runtime) => runtime.handle().spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        };
        match task.await {
            Ok(out) => out,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is kept running while installed, and the
            // caller's while it awaits: a blocking task is never cancelled.
            Err(e) => unreachable!("background work cancelled: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
