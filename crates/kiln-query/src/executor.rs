//! [`Executor`]: a runtime of its own for executing heavy queries.
//!
//! Why: DataFusion's operators are CPU-bound futures. Polled on the runtime
//! that also accepts connections, parses, plans and answers `SELECT 1`,
//! four heavy queries keep every worker busy and a light query waits for
//! one to yield: on 2 cores, `SELECT 1` took 150-330 ms at p99 with 250
//! heavy queries queued. Heavy queries' streams are therefore polled on a
//! dedicated runtime (the pattern of InfluxDB's `DedicatedExecutor`):
//! everything DataFusion spawns while executing (partition tasks, file
//! reads) lands there too, since tokio spawns on the runtime of the task
//! that spawns. Its threads run at a lower scheduling priority (a higher
//! nice value), so when the cores are contended the kernel runs the
//! protocol runtime's threads first: light queries, health checks and
//! result encoding get the CPU within a scheduler tick, heavy queries get
//! the rest, and nothing is left idle.
//!
//! A query expected to be short need not pay for the hand-over (a task
//! spawned on the other runtime, a channel, two cross-thread wake-ups):
//! such a stream starts where it is read ([`Executor::run_short`]) and
//! moves to the dedicated runtime once it has used [`SHORT_CPU`] of its
//! thread's CPU time. The time is checked between polls, so a wrong guess
//! holds a protocol thread for the budget and one more poll (at most a
//! cooperative budget's worth of batches); what the stream spawns goes to
//! the dedicated runtime from the start. A cube-answered dashboard at 50
//! clients served 1.19x the queries over the simple protocol this way.
//!
//! Work that queries share is not any one query's: a cube's states (over
//! rows still in memory, or a part's decoded and rolled up), made by the
//! first query to read them and kept for the others, run as a task of
//! their own ([`shared`]). Polled by a stream
//! started short, that task lands on the dedicated runtime, so its CPU time
//! does not count against the query that happened to ask first, and that
//! query (and its statement's next runs) stays short. While a stream of
//! writes changed those states a few times a second, nearly every chart's
//! statement had a run that made them, moved, and sent its next runs to
//! the dedicated runtime with the hand-over they pay.
//!
//! Planning is synchronous work too, short for the statements dashboards
//! send but long for a long one: DataFusion plans some lists in time that
//! grows with the square of their length, and one such call held a
//! protocol thread for seconds, stalling every connection on it and
//! running past the query's timeout. A statement whose text is at least
//! [`PLAN_APART_BYTES`] long is planned on the dedicated runtime
//! ([`Executor::plan`]), where its caller can stop waiting at the deadline,
//! or beside the protocol runtime's workers where it cannot be awaited
//! from another runtime ([`beside`]).
//!
//! A leaf: it knows streams and runtimes, nothing of queries.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, RecordBatchStream, SendableRecordBatchStream, execute_stream,
};
use futures::{Stream, StreamExt, TryStreamExt};
use tokio::runtime::Handle;
use tokio_util::task::AbortOnDropHandle;

/// Stack of every runtime thread that plans or executes queries (workers
/// and blocking pools). Planning, optimizing and evaluating an expression
/// recurse over its tree: with the statement depth limit
/// (`--max-expression-depth`) and DataFusion's own stack growth this
/// leaves a wide margin, where tokio's 2 MiB default overflowed on a 4 KB
/// query. Only the pages a thread touches are committed, so the
/// reservation costs address space, not memory.
pub const THREAD_STACK_BYTES: usize = 64 << 20;

/// Batches a query's executor task may compute ahead of its reader: enough
/// to overlap computing and sending, few enough that a slow reader holds
/// its query's memory bounded.
const AHEAD: usize = 2;

/// CPU time a stream started by [`Executor::run_short`] may use on the
/// reader's thread before it moves to the dedicated runtime. With 2 ms,
/// `SELECT 1`'s p99 under a saturating cube dashboard went from 7 to
/// 17-25 ms; with 1 ms it stayed at 7-9 ms, and most charts still fit.
pub const SHORT_CPU: Duration = Duration::from_millis(1);

/// Statements whose text is at least this long are planned apart from the
/// protocol runtime ([`Executor::plan`], [`beside`]). Dashboards' queries are
/// shorter and plan where they arrive, without a hand-over; 800 `ORDER BY`
/// terms, which took 2.3 s to plan in a debug build, are 8.7 KB.
pub const PLAN_APART_BYTES: usize = 8 << 10;

/// Where heavy queries execute: a dedicated runtime, or (for tests and
/// embedded use) the caller's own.
#[derive(Clone)]
pub struct Executor {
    inner: Option<Arc<Dedicated>>,
}

/// The dedicated runtime, owned by a thread of its own so that dropping it
/// never happens inside another runtime (which tokio forbids).
struct Dedicated {
    handle: Handle,
    /// Dropped with the last [`Executor`] clone: the owning thread then
    /// shuts the runtime down without waiting for its tasks.
    _shutdown: std::sync::mpsc::SyncSender<()>,
}

/// Keeps the runtime running while the storage engine holds it.
impl kiln_storage::CpuRuntime for Dedicated {
    fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Executor {
    /// Streams are polled by their reader, on its runtime.
    pub fn inline() -> Self {
        Self { inner: None }
    }

    /// A runtime of `threads` workers (0: one per core) with
    /// [`THREAD_STACK_BYTES`] stacks, whose threads (workers and blocking pool alike) run `nice`
    /// levels below normal priority (0: the same; raising a thread's nice
    /// value needs no privilege).
    pub fn dedicated(threads: usize, nice: i32) -> std::io::Result<Self> {
        Self::named(threads, Priority::Nice(nice), "kiln-exec")
    }

    /// A runtime like [`Executor::dedicated`]'s, one worker per core, for
    /// work no query waits for: computing the parts of new segments and
    /// the storage engine's sorting, encoding and decoding for flushes,
    /// compactions and cube builds ([`Executor::cpu_runtime`]), once a
    /// table falls behind its flushes (before that, [`Executor::idle`]'s).
    /// Apart from the queries' runtime, a long piece of it never holds a
    /// worker that a query's task waits for.
    pub fn background(nice: i32) -> std::io::Result<Self> {
        Self::named(0, Priority::Nice(nice), "kiln-background")
    }

    /// A runtime like [`Executor::background`]'s whose threads run only on
    /// cores nothing else wants (Linux's idle scheduling class; elsewhere
    /// normal priority): for that work while the tables keep up with their
    /// flushes ([`kiln_storage::cpu`]).
    pub fn idle() -> std::io::Result<Self> {
        Self::named(0, Priority::Idle, "kiln-idle")
    }

    fn named(threads: usize, priority: Priority, name: &'static str) -> std::io::Result<Self> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        };
        let (handle_tx, handle_rx) = std::sync::mpsc::sync_channel(1);
        let (shutdown_tx, shutdown_rx) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name(format!("{name}-owner"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .thread_name(name)
                    .thread_stack_size(THREAD_STACK_BYTES)
                    .on_thread_start(move || lower_priority(priority))
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        let _ = handle_tx.send(Ok(runtime.handle().clone()));
                        // Returns when every Executor clone is gone.
                        let _ = shutdown_rx.recv();
                        runtime.shutdown_background();
                    }
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                    }
                }
            })?;
        let handle = handle_rx
            .recv()
            .map_err(|_| std::io::Error::other("executor thread ended before its runtime"))??;
        Ok(Self {
            inner: Some(Arc::new(Dedicated {
                handle,
                _shutdown: shutdown_tx,
            })),
        })
    }

    /// Whether streams run on a runtime of their own.
    pub fn is_dedicated(&self) -> bool {
        self.inner.is_some()
    }

    /// The dedicated runtime, for the storage engine's CPU-bound
    /// background work (flushes', compactions' and cube builds' sorting,
    /// encoding and decoding: [`kiln_storage::cpu`]). `None` without one.
    pub fn cpu_runtime(&self) -> Option<Arc<dyn kiln_storage::CpuRuntime>> {
        let dedicated = self.inner.clone()?;
        Some(dedicated)
    }

    /// Polls `stream` on this executor, at most [`AHEAD`] batches ahead of
    /// the returned stream's reader. Dropping the returned stream stops the
    /// task and drops `stream` (which stops DataFusion's work); a panic
    /// while executing ends it with an error, never a silently short result.
    pub fn run(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let Some(dedicated) = &self.inner else {
            return stream;
        };
        let schema = stream.schema();
        let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
        let task = dedicated.handle.spawn(async move {
            let mut stream = stream;
            while let Some(item) = stream.next().await {
                let stop = item.is_err();
                if tx.send(item).await.is_err() || stop {
                    break;
                }
            }
        });
        let state = (rx, Some(AbortOnDropHandle::new(task)));
        let rows = futures::stream::unfold(state, |(mut rx, task)| async move {
            if let Some(item) = rx.recv().await {
                return Some((item, (rx, task)));
            }
            // The task ended: normally, or by a panic, which must not
            // pass for the end of the rows.
            let why = match task?.await {
                Ok(()) => return None,
                Err(e) if e.is_panic() => panic_message(e.into_panic()),
                Err(_) => "the execution runtime shut down".into(),
            };
            let e = DataFusionError::Execution(format!("query execution failed: {why}"));
            Some((Err(e), (rx, None)))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }

    /// Awaits `work` (planning a statement, computing a cube's part), on
    /// this executor if `apart`:
    /// the caller's thread is then free while it runs, and dropping the
    /// returned future (at a deadline or cancel) abandons it at its next
    /// await. Inline when not `apart` or without a dedicated runtime. A
    /// panic goes on in the caller.
    pub async fn plan<T: Send + 'static>(
        &self,
        apart: bool,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, DataFusionError> {
        // Boxed: planning futures are large, and a test thread's stack
        // is small.
        let work = Box::pin(work);
        let dedicated = match &self.inner {
            Some(d) if apart => d,
            _ => return Ok(work.await),
        };
        match AbortOnDropHandle::new(dedicated.handle.spawn(work)).await {
            Ok(t) => Ok(t),
            // On, as if it had run here: the doors catch it as they do
            // any panic while planning.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(DataFusionError::Execution(
                "the execution runtime shut down".into(),
            )),
        }
    }

    /// Polls `stream` where it is read, as long as that has used less
    /// than [`SHORT_CPU`] of the reading thread's CPU time; then the rest
    /// is polled on this executor ([`Executor::run`]) and `moved` is
    /// called. Tasks it spawns (a plan's partitions, buffered sorts, file
    /// reads) go to this executor all along, so only the polling itself
    /// happens where it is read. A panic while polling ends the stream
    /// with an error, as on the executor.
    pub fn run_short(
        &self,
        stream: SendableRecordBatchStream,
        moved: Box<dyn FnOnce() + Send>,
    ) -> SendableRecordBatchStream {
        if self.inner.is_none() {
            return stream;
        }
        Box::pin(Short {
            schema: stream.schema(),
            executor: self.clone(),
            state: ShortState::Here(stream),
            spent: Duration::ZERO,
            moved: Some(moved),
        })
    }
}

/// The stream of [`Executor::run_short`].
struct Short {
    schema: SchemaRef,
    executor: Executor,
    state: ShortState,
    /// CPU time polling it here has used.
    spent: Duration,
    moved: Option<Box<dyn FnOnce() + Send>>,
}

enum ShortState {
    Here(SendableRecordBatchStream),
    Moved(SendableRecordBatchStream),
    Done,
}

impl Stream for Short {
    type Item = datafusion::error::Result<RecordBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let stream = match &mut this.state {
            ShortState::Moved(s) => return s.poll_next_unpin(cx),
            ShortState::Done => return Poll::Ready(None),
            ShortState::Here(s) => s,
        };
        let from = thread_cpu();
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // What it spawns lands on the dedicated runtime.
            let _spawns = this.executor.inner.as_ref().map(|d| d.handle.enter());
            stream.poll_next_unpin(cx)
        }));
        this.spent += thread_cpu().saturating_sub(from);
        let polled = match polled {
            Ok(p) => p,
            Err(panic) => {
                this.state = ShortState::Done;
                let why = panic_message(panic);
                let e = DataFusionError::Execution(format!("query execution failed: {why}"));
                return Poll::Ready(Some(Err(e)));
            }
        };
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.state = ShortState::Done;
        } else if this.spent >= SHORT_CPU {
            let ShortState::Here(stream) = std::mem::replace(&mut this.state, ShortState::Done)
            else {
                unreachable!("matched above")
            };
            this.state = ShortState::Moved(this.executor.run(stream));
            if let Some(moved) = this.moved.take() {
                moved();
            }
            if polled.is_pending() {
                // The executor's task polls it now and wakes this one.
                return Pin::new(this).poll_next(cx);
            }
        }
        polled
    }
}

impl RecordBatchStream for Short {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes the calling thread's CPU clock into `t`.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
            return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        }
    }
    // Elsewhere (or if the clock fails) streams never move: run_short
    // then polls where it is read, as light queries are.
    Duration::ZERO
}

/// Awaits `work` without holding a protocol worker if `apart`: on a
/// multi-threaded runtime the calling worker hands its other tasks to a
/// new one for the duration ([`tokio::task::block_in_place`]). For work
/// that borrows from its caller and so cannot move to another runtime
/// ([`Executor::plan`]); the caller itself waits for it to finish.
pub async fn beside<T>(apart: bool, work: impl Future<Output = T>) -> T {
    let work = Box::pin(work);
    let multi = Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if !(apart && multi) {
        return work.await;
    }
    tokio::task::block_in_place(|| Handle::current().block_on(work))
}

/// Executes `plan` when the returned stream is first polled, not now: so
/// the tasks DataFusion spawns for it (one per partition) are spawned on
/// the runtime that polls it, which [`Executor::run`] chooses.
pub fn deferred(plan: Arc<dyn ExecutionPlan>, task: Arc<TaskContext>) -> SendableRecordBatchStream {
    let schema = plan.schema();
    let rows = futures::stream::once(async move { execute_stream(plan, task) }).try_flatten();
    Box::pin(RecordBatchStreamAdapter::new(schema, rows))
}

/// How far below normal a runtime's threads are scheduled.
#[derive(Clone, Copy)]
enum Priority {
    /// A nice increment (0: normal priority).
    Nice(i32),
    /// Only on cores no other thread wants: Linux's idle scheduling class
    /// (which needs no privilege to enter, but does to leave), or where
    /// that is refused, the lowest priority of the normal class (nice 19).
    Idle,
}

/// Lowers the calling thread's priority to `priority` (Linux schedules
/// threads individually, so this leaves the process's other threads be).
fn lower_priority(priority: Priority) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread; `param` lives
        // across the call that reads it.
        let failed = unsafe {
            let tid = libc::gettid() as libc::id_t;
            match priority {
                Priority::Nice(0) => 0,
                Priority::Nice(nice) => {
                    let current = libc::getpriority(libc::PRIO_PROCESS, tid);
                    libc::setpriority(libc::PRIO_PROCESS, tid, current + nice)
                }
                Priority::Idle => {
                    let param = libc::sched_param { sched_priority: 0 };
                    match libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) {
                        0 => 0,
                        // Refused (a sandbox's filter): the lowest nice
                        // instead, still below the execution threads.
                        _ => {
                            let why = std::io::Error::last_os_error();
                            static SAID: std::sync::Once = std::sync::Once::new();
                            SAID.call_once(|| {
                                tracing::warn!(
                                    "the idle scheduling class was refused ({why}): background threads run at nice 19"
                                )
                            });
                            libc::setpriority(libc::PRIO_PROCESS, tid, 19)
                        }
                    }
                }
            }
        };
        if failed != 0 {
            tracing::warn!(
                "could not lower the priority of a background or execution thread: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = priority;
}

/// Awaits `work` run as a task of its own on the runtime the caller runs
/// on: the dedicated runtime while a query's stream is polled, even where
/// it started short ([`Executor::run_short`] enters it). For work that
/// queries share, made once and kept for every reader (module docs).
/// Dropping the returned future aborts the task; a panic in it is an
/// error, as in a query's own stream.
pub async fn shared<T: Send + 'static>(
    work: impl Future<Output = Result<T, DataFusionError>> + Send + 'static,
) -> Result<T, DataFusionError> {
    match AbortOnDropHandle::new(tokio::spawn(work)).await {
        Ok(made) => made,
        Err(e) => {
            let why = match e.is_panic() {
                true => panic_message(e.into_panic()),
                false => "the execution runtime shut down".into(),
            };
            Err(DataFusionError::Execution(format!(
                "query execution failed: {why}"
            )))
        }
    }
}

/// What a caught panic said (its message, when it gave one).
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

#[cfg(test)]
mod tests;
