//! [`CpuPool`]: where the engine's CPU-bound background work runs —
//! sorting, encoding and decoding segments and cube parts for flushes,
//! compactions and cube builds, and packing in-memory batches.
//!
//! Why: that work is throughput work, while queries wait on theirs. On
//! tokio's blocking pool it ran at the priority of the threads that serve
//! connections, above the query layer's execution threads, which run at
//! a lower one. The query layer installs runtimes of its own for it
//! ([`crate::Db::set_cpu_runtimes`]), apart from the execution threads:
//! one whose threads run only on cores nothing else wants (the idle
//! scheduling class), and one at the execution threads' priority. Work
//! goes to the first while the tables keep up, so a flush or compaction
//! takes no CPU a waiting query could use: at the execution threads'
//! priority, a second with a flush served 40% fewer queries of a live
//! dashboard and its p99 went from about 30 ms to 100. Once a table holds
//! [`URGENT`] flushes' worth of rows, the write or background round that
//! finds it so marks the work urgent ([`Urgency`]) and it goes to the
//! second, so flushes under a load that leaves no core idle still keep up
//! (and writes are paced only past that, [`crate::pace`]); the round that
//! finds every table below it sends the work back. Until
//! runtimes are installed (embedded use, tests) it runs on the caller's
//! runtime's blocking pool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;

/// How many flushes' worth of rows (`--flush-bytes`) a table holds before
/// background work runs at the execution threads' priority instead of
/// on idle cores only: a flush is due at one, so two means the last one
/// did not keep up.
pub const URGENT: usize = 2;

/// A runtime whose blocking pool runs the storage engine's CPU-bound
/// background work; installed with [`crate::Db::set_cpu_runtimes`].
pub trait CpuRuntime: Send + Sync + 'static {
    /// The runtime. It keeps running while `self` lives.
    fn handle(&self) -> Handle;
}

/// Whether background work is urgent: set by a write or the background
/// round finding a table behind its flushes, read by whatever picks where
/// that work runs (the [`CpuPool`], the query layer's cube builder).
/// Clones share the flag.
#[derive(Clone, Default)]
pub struct Urgency(Arc<AtomicBool>);

impl Urgency {
    /// Whether background work should run at the execution threads'
    /// priority rather than on idle cores only.
    pub fn is_urgent(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, urgent: bool) {
        self.0.store(urgent, Ordering::Relaxed);
    }
}

/// Runs CPU-bound work off the async workers: on an installed
/// [`CpuRuntime`]'s blocking pool (the idle one, or the urgent one while
/// [`Urgency`] says so), else on the caller's runtime's.
#[derive(Default)]
pub struct CpuPool {
    runtimes: OnceLock<Runtimes>,
    urgency: Urgency,
}

/// The runtimes background work runs on: on idle cores only, and at the
/// execution threads' priority.
struct Runtimes {
    idle: Arc<dyn CpuRuntime>,
    urgent: Arc<dyn CpuRuntime>,
}

impl CpuPool {
    /// Sends later work to `idle`, or to `urgent` while it is urgent; the
    /// first installed pair stays.
    pub fn install(&self, idle: Arc<dyn CpuRuntime>, urgent: Arc<dyn CpuRuntime>) {
        let _ = self.runtimes.set(Runtimes { idle, urgent });
    }

    /// Whether background work is urgent now (shared with clones).
    pub fn urgency(&self) -> &Urgency {
        &self.urgency
    }

    /// The result of `work`, run on a blocking thread. A panic in `work`
    /// resumes in the caller.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let task = match self.runtimes.get() {
            Some(r) if self.urgency.is_urgent() => r.urgent.handle().spawn_blocking(work),
            Some(r) => r.idle.handle().spawn_blocking(work),
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
