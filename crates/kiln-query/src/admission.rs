//! Every query's life: admission, cancellation, timeout, and the record
//! behind `system.queries`.
//!
//! Why here and not in each protocol: HTTP and the PostgreSQL wire must
//! agree on what "too many queries", "timed out" and "cancelled" mean, and
//! `system.queries` must show queries from both. A protocol calls
//! [`QueryRegistry::begin`] and gets a [`QueryHandle`]: it holds an admission
//! permit, a cancellation token and the deadline, and when the last clone of
//! it is dropped the query's final status is recorded.
//!
//! Why few slots: past a few queries per core, admitting more only makes
//! them share the cores. Throughput stays the same, and a long query is
//! stretched by the whole crowd, which sets the tail latency. Queued
//! first-come first-served, the same load ran at the same rate with half
//! the p99 (docs/benchmark-history.md). The slot time bounds how long one heavy
//! query can keep others waiting: past it, the query runs on outside the
//! count and the next one starts.
//!
//! Two more rules keep an overloaded server answering: a heavy query waits
//! while the execution memory pool is nearly spent (queued, not failed),
//! and light queries (no user table) are admitted in a lane of their own.
//!
//! No global lock on the query path: admission is a semaphore, running
//! queries live in sharded maps (one short uncontended lock per begin/end),
//! and finished queries go into a lock-free ring of the most recent ones.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use futures::{Stream, StreamExt};
use kiln_storage::{Clock, SystemClock};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::memory::ServerPool;
use crate::transaction::Transaction;

/// Shards of the running-query map.
const SHARDS: usize = 16;

/// Limits applied to every query, whatever the protocol.
#[derive(Debug, Clone)]
pub struct QueryLimits {
    /// Queries executing at once; more wait for a slot.
    pub max_concurrent: usize,
    /// How long a query keeps its slot; past it the query runs on outside
    /// the count and the next waiting query starts. `None`: until it ends.
    pub slot_time: Option<Duration>,
    /// Queries waiting for a slot; beyond this a query is refused at once
    /// ([`Error::Overloaded`]).
    pub max_queued: usize,
    /// Longest a query may take from arrival (waiting included) to its
    /// last row; `None`: no limit.
    pub timeout: Option<Duration>,
    /// Finished queries remembered for `system.queries`.
    pub history: usize,
    /// Execution memory one query may hold ([`crate::memory::QueryPool`]).
    pub query_memory: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            max_concurrent: 64,
            slot_time: None,
            max_queued: 4096,
            timeout: None,
            history: 1000,
            query_memory: usize::MAX,
        }
    }
}

/// How one query begins.
#[derive(Debug, Clone, Default)]
pub struct Begin {
    /// The client's own timeout (PostgreSQL's `statement_timeout`, HTTP's
    /// `timeout` parameter): the query stops at the sooner of it and
    /// `--query-timeout`.
    pub timeout: Option<Duration>,
    /// A light query (no user table: `SELECT 1`, `system.*`, catalogs,
    /// `KILL`): admitted in its own lane of [`LIGHT_SLOTS`], so health
    /// checks, dashboards' catalog probes and an operator's `KILL` answer
    /// at once however many heavy queries wait.
    pub light: bool,
    /// The explicit transaction the query runs in: its INSERTs are staged
    /// there until COMMIT instead of written.
    pub transaction: Option<Arc<Transaction>>,
    /// DataFusion options the session `SET` (`datafusion.execution.batch_size`
    /// = `1024`): applied to this query only, over the server's.
    pub settings: Vec<(String, String)>,
    /// The user who sent it, when authentication is on: its statements are
    /// checked against that user's privileges ([`crate::auth`]). `None`:
    /// authentication is off, or the embedded engine.
    pub user: Option<Arc<str>>,
    /// Who the session is, as `current_user` and `session_user` answer:
    /// the logged-in user, or with authentication off the name a
    /// PostgreSQL client gave at startup. `None`: [`crate::auth::ADMIN`],
    /// whose privileges every client has while authentication is off.
    pub session_user: Option<Arc<str>>,
}

/// Light queries running at once ([`Begin::light`]).
pub const LIGHT_SLOTS: usize = 16;

/// Where a query is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Queued = 0,
    Running = 1,
    Ok = 2,
    Error = 3,
    Cancelled = 4,
    Timeout = 5,
    /// Refused at admission ([`Error::Overloaded`]).
    Overloaded = 6,
}

impl Status {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Queued,
            1 => Self::Running,
            2 => Self::Ok,
            3 => Self::Error,
            4 => Self::Cancelled,
            5 => Self::Timeout,
            _ => Self::Overloaded,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::Overloaded => "overloaded",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// Why a query was stopped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Cancelled by the client (PostgreSQL CancelRequest) or the server.
    Cancelled,
    /// Its deadline passed.
    Timeout(Duration),
}

impl From<Stop> for Error {
    fn from(s: Stop) -> Self {
        match s {
            Stop::Cancelled => Error::Cancelled,
            Stop::Timeout(d) => Error::Timeout(d),
        }
    }
}

/// What `system.queries` shows about one query.
#[derive(Debug)]
pub struct QueryInfo {
    pub id: u64,
    pub protocol: &'static str,
    pub text: String,
    /// The PostgreSQL backend pid of the connection (cancel requests name it).
    pub session: Option<i32>,
    /// Arrival, ns since the Unix epoch.
    pub started_ns: i64,
    started: Instant,
    status: AtomicU8,
    rows: AtomicU64,
    elapsed_us: AtomicU64,
    error: Mutex<Option<String>>,
    cancel: CancellationToken,
    /// Set before `cancel` fires: the reason it fired.
    stop: AtomicU8,
}

const STOP_NONE: u8 = 0;
const STOP_CANCEL: u8 = 1;
const STOP_TIMEOUT: u8 = 2;

impl QueryInfo {
    pub fn status(&self) -> Status {
        Status::from_u8(self.status.load(Ordering::Acquire))
    }
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }
    /// Time since arrival, or total time once finished.
    pub fn elapsed(&self) -> Duration {
        if self.status().is_finished() {
            Duration::from_micros(self.elapsed_us.load(Ordering::Relaxed))
        } else {
            self.started.elapsed()
        }
    }
    pub fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// Asks the query to stop; it reports [`Stop::Cancelled`] at its next
    /// poll. Returns false if it had already finished.
    pub fn cancel(&self) -> bool {
        if self.status().is_finished() {
            return false;
        }
        let _ =
            self.stop
                .compare_exchange(STOP_NONE, STOP_CANCEL, Ordering::AcqRel, Ordering::Acquire);
        self.cancel.cancel();
        true
    }
}

/// Running and recent queries, and the admission semaphore.
pub struct QueryRegistry {
    limits: QueryLimits,
    clock: Arc<dyn Clock>,
    permits: Arc<Semaphore>,
    /// The light lane's slots ([`Begin::light`]).
    light_permits: Arc<Semaphore>,
    queued: AtomicUsize,
    /// Total time queries spent waiting for a slot, in microseconds.
    waited_us: AtomicU64,
    next_id: AtomicU64,
    running: Vec<Mutex<HashMap<u64, Arc<QueryInfo>>>>,
    recent: Vec<ArcSwapOption<QueryInfo>>,
    recent_next: AtomicU64,
    observer: OnceLock<Observer>,
    /// The execution memory pool heavy queries are admitted against (what
    /// is reserved or, where larger, what the heap holds for queries).
    memory: OnceLock<Arc<ServerPool>>,
}

/// Share of the memory pool in use past which a heavy query waits (with
/// its slot) before it starts: under memory pressure queries queue rather
/// than all start and fail with "out of memory".
const MEMORY_HIGH_WATER: f64 = 0.8;

/// How often a query past its slot time looks again at memory pressure.
const MEMORY_POLL: Duration = Duration::from_millis(50);

/// Called once per finished query (metrics, slow-query log).
pub type Observer = Box<dyn Fn(&QueryInfo) + Send + Sync>;

impl std::fmt::Debug for QueryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryRegistry")
            .field("limits", &self.limits)
            .finish()
    }
}

impl QueryRegistry {
    pub fn new(limits: QueryLimits) -> Arc<Self> {
        Self::with_clock(limits, Arc::new(SystemClock))
    }

    pub fn with_clock(limits: QueryLimits, clock: Arc<dyn Clock>) -> Arc<Self> {
        let max = limits.max_concurrent.max(1);
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(max)),
            light_permits: Arc::new(Semaphore::new(LIGHT_SLOTS)),
            queued: AtomicUsize::new(0),
            waited_us: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            running: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            recent: (0..limits.history.max(1))
                .map(|_| ArcSwapOption::empty())
                .collect(),
            recent_next: AtomicU64::new(0),
            observer: OnceLock::new(),
            memory: OnceLock::new(),
            limits,
            clock,
        })
    }

    pub fn limits(&self) -> &QueryLimits {
        &self.limits
    }

    /// Queries holding an execution slot now (running or streaming rows).
    pub fn running(&self) -> usize {
        self.limits
            .max_concurrent
            .max(1)
            .saturating_sub(self.permits.available_permits())
    }

    /// Queries waiting for a slot now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Total time queries have waited for a slot.
    pub fn waited(&self) -> Duration {
        Duration::from_micros(self.waited_us.load(Ordering::Relaxed))
    }

    /// The memory pool heavy queries are admitted against (once; later
    /// calls are ignored).
    pub fn set_memory_pool(&self, pool: Arc<ServerPool>) {
        let _ = self.memory.set(pool);
    }

    /// The execution memory pool, once the session has set it.
    pub fn memory_pool(&self) -> Option<&Arc<ServerPool>> {
        self.memory.get()
    }

    /// Whether query memory is above the pool's high-water mark.
    fn memory_pressed(&self) -> bool {
        self.memory
            .get()
            .is_some_and(|pool| pool.in_use() as f64 > pool.limit() as f64 * MEMORY_HIGH_WATER)
    }

    /// Waits while the memory pool is above its high-water mark and other
    /// queries run that can free it (a query alone always starts).
    async fn memory_room(&self, handle: &QueryHandle) -> Result<()> {
        handle
            .run(async {
                while self.memory_pressed() && self.running() > 1 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
    }

    /// Installs the function called with every finished query (once; later
    /// calls are ignored). It runs on the query's task: keep it cheap.
    pub fn set_observer(&self, f: Observer) {
        let _ = self.observer.set(f);
    }

    /// Registers a query and waits for an execution slot. Fails at once with
    /// [`Error::Overloaded`] when `max_queued` queries already wait, with
    /// [`Error::Timeout`] if the deadline passes while waiting, and with
    /// [`Error::Cancelled`] if cancelled while waiting. Either way the
    /// query is recorded with its final status.
    pub async fn begin(
        self: &Arc<Self>,
        protocol: &'static str,
        text: &str,
        session: Option<i32>,
    ) -> Result<QueryHandle> {
        self.begin_with(protocol, text, session, Begin::default())
            .await
    }

    /// [`QueryRegistry::begin`] with the query's own options ([`Begin`]).
    pub async fn begin_with(
        self: &Arc<Self>,
        protocol: &'static str,
        text: &str,
        session: Option<i32>,
        opts: Begin,
    ) -> Result<QueryHandle> {
        let mut handle = self.handle(protocol, text, session, opts.timeout);
        handle.light = opts.light;
        handle.transaction = opts.transaction;
        handle.user = opts.user;
        handle.session_user = opts.session_user;
        *handle.settings.get_mut() = opts.settings;
        let info = handle.info.clone();
        self.shard(info.id).lock().insert(info.id, info.clone());
        let permits = match opts.light {
            true => &self.light_permits,
            false => &self.permits,
        };
        // Fast path: a free slot, no waiting, no queue accounting.
        if let Ok(p) = permits.clone().try_acquire_owned() {
            *handle.slot.lock() = Some(p);
        } else {
            if self.queued.fetch_add(1, Ordering::AcqRel) >= self.limits.max_queued {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                handle.fail(&Error::Overloaded(self.overload_message()));
                return Err(Error::Overloaded(self.overload_message()));
            }
            let waiting = Instant::now();
            let acquired = handle.run(permits.clone().acquire_owned()).await;
            self.waited_us
                .fetch_add(waiting.elapsed().as_micros() as u64, Ordering::Relaxed);
            self.queued.fetch_sub(1, Ordering::AcqRel);
            match acquired {
                Ok(Ok(p)) => *handle.slot.lock() = Some(p),
                Ok(Err(_closed)) => return Err(Error::Cancelled),
                Err(e) => return Err(e),
            }
        }
        if !opts.light {
            self.memory_room(&handle).await?;
        }
        handle
            .info
            .status
            .store(Status::Running as u8, Ordering::Release);
        if let Some(t) = self.limits.slot_time {
            let slot = Arc::downgrade(&handle.slot);
            let registry = Arc::downgrade(self);
            tokio::spawn(async move {
                tokio::time::sleep(t).await;
                // Past its slot time a query makes room for the next one,
                // unless memory is under pressure: then it keeps its slot
                // until memory is free or it ends, so the slot count
                // bounds how many queries grow at once.
                while let Some(slot) = slot.upgrade() {
                    if registry.upgrade().is_none_or(|r| !r.memory_pressed()) {
                        slot.lock().take();
                        return;
                    }
                    drop(slot);
                    tokio::time::sleep(MEMORY_POLL).await;
                }
            });
        }
        Ok(handle)
    }

    /// A new query's handle, not yet admitted or listed as running.
    fn handle(
        self: &Arc<Self>,
        protocol: &'static str,
        text: &str,
        session: Option<i32>,
        timeout: Option<Duration>,
    ) -> QueryHandle {
        let timeout = match (timeout, self.limits.timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let info = Arc::new(QueryInfo {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            protocol,
            text: text.to_string(),
            session,
            started_ns: self.clock.now_ns(),
            started: Instant::now(),
            status: AtomicU8::new(Status::Queued as u8),
            rows: AtomicU64::new(0),
            elapsed_us: AtomicU64::new(0),
            error: Mutex::new(None),
            cancel: CancellationToken::new(),
            stop: AtomicU8::new(STOP_NONE),
        });
        QueryHandle {
            info,
            registry: self.clone(),
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
            timeout,
            unfinished: AtomicUsize::new(0),
            slot: Arc::new(Mutex::new(None)),
            light: false,
            transaction: None,
            settings: Mutex::new(vec![]),
            user: None,
            session_user: None,
            short: Mutex::new(None),
        }
    }

    /// Records a query that failed before it was admitted (a statement that
    /// does not parse or plan at the PostgreSQL Parse step), so
    /// `system.queries` and the metrics show it as they show any other.
    pub fn record_failed(
        self: &Arc<Self>,
        protocol: &'static str,
        text: &str,
        session: Option<i32>,
        e: &Error,
    ) {
        self.handle(protocol, text, session, None).fail(e);
    }

    fn overload_message(&self) -> String {
        format!(
            "too many queries: {} running and {} waiting (--max-concurrent-queries, --max-queued-queries); retry later",
            self.limits.max_concurrent, self.limits.max_queued
        )
    }

    fn shard(&self, id: u64) -> &Mutex<HashMap<u64, Arc<QueryInfo>>> {
        &self.running[id as usize % SHARDS]
    }

    /// Running (and queued) queries, then finished ones, newest first.
    pub fn snapshot(&self) -> Vec<Arc<QueryInfo>> {
        let mut out: Vec<Arc<QueryInfo>> = self
            .running
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect();
        let mut seen: std::collections::HashSet<u64> = out.iter().map(|q| q.id).collect();
        for slot in &self.recent {
            if let Some(q) = slot.load_full()
                && seen.insert(q.id)
            {
                out.push(q);
            }
        }
        out.sort_by_key(|q| std::cmp::Reverse(q.id));
        out
    }

    /// Cancels every running query of PostgreSQL session `pid`; returns how many.
    pub fn cancel_session(&self, pid: i32) -> usize {
        self.running
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .filter(|q| q.session == Some(pid))
            .filter(|q| q.cancel())
            .count()
    }

    /// Cancels every running or queued query; returns how many.
    pub fn cancel_all(&self) -> usize {
        self.running
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .filter(|q| q.cancel())
            .count()
    }

    /// Cancels one query by id; false if it is not running.
    pub fn cancel(&self, id: u64) -> bool {
        let q = self.shard(id).lock().get(&id).cloned();
        q.is_some_and(|q| q.cancel())
    }

    fn finish(&self, info: &Arc<QueryInfo>) {
        self.shard(info.id).lock().remove(&info.id);
        if let Some(observe) = self.observer.get() {
            observe(info);
        }
        let slot = self.recent_next.fetch_add(1, Ordering::Relaxed) as usize % self.recent.len();
        self.recent[slot].store(Some(info.clone()));
    }
}

/// One admitted query. Shared (in an `Arc`) by the streams that return its
/// rows; dropping the last clone records the final status: the first error
/// or stop if there was one, `ok` if every guarded stream reached its end,
/// `cancelled` if a stream was dropped early (the client went away).
pub struct QueryHandle {
    info: Arc<QueryInfo>,
    registry: Arc<QueryRegistry>,
    deadline: Option<tokio::time::Instant>,
    /// What the deadline was set from.
    timeout: Option<Duration>,
    /// Runs and guarded streams not yet finished.
    unfinished: AtomicUsize,
    /// The execution slot, until the query ends or its slot time passes
    /// (a timer task holds a weak reference and takes it then).
    slot: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    /// Admitted in the light lane ([`Begin::light`]).
    light: bool,
    /// The transaction its writes are staged in ([`Begin::transaction`]).
    transaction: Option<Arc<Transaction>>,
    /// Who sent it ([`Begin::user`]).
    user: Option<Arc<str>>,
    /// Who its session is ([`Begin::session_user`]).
    session_user: Option<Arc<str>>,
    /// The session's DataFusion options ([`Begin::settings`]) and those
    /// its own `SET` statements changed (an HTTP request's).
    settings: Mutex<Vec<(String, String)>>,
    /// Set when the plan it is about to run is expected to be short: its
    /// stream then starts where it is read
    /// ([`crate::executor::Executor::run_short`]), and this is called if
    /// it had to move.
    short: Mutex<Option<Moved>>,
}

/// Called when a stream expected to be short moved to the executor.
pub(crate) type Moved = Box<dyn FnOnce() + Send>;

impl QueryHandle {
    pub fn info(&self) -> &Arc<QueryInfo> {
        &self.info
    }

    /// Whether the query was admitted as light ([`Begin::light`]).
    pub fn is_light(&self) -> bool {
        self.light
    }

    /// Marks the plan about to start as expected to be short (see the
    /// field `short`).
    pub(crate) fn expect_short(&self, moved: Moved) {
        *self.short.lock() = Some(moved);
    }

    /// Whether the plan just started is expected to be short; clears it.
    pub(crate) fn take_short(&self) -> Option<Moved> {
        self.short.lock().take()
    }

    /// The DataFusion options this query runs with over the server's.
    pub fn settings(&self) -> Vec<(String, String)> {
        self.settings.lock().clone()
    }

    /// Sets a DataFusion option for the rest of this query (`SET` in a
    /// multi-statement HTTP request); `None` returns it to the server's.
    pub fn set(&self, name: &str, value: Option<String>) {
        let mut s = self.settings.lock();
        s.retain(|(n, _)| n != name);
        if let Some(v) = value {
            s.push((name.to_string(), v));
        }
    }

    /// The transaction the query's writes are staged in, if any.
    pub fn transaction(&self) -> Option<&Arc<Transaction>> {
        self.transaction.as_ref()
    }

    /// The user whose privileges its statements need ([`Begin::user`]).
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The registry it was begun in.
    pub fn registry(&self) -> &QueryRegistry {
        &self.registry
    }

    /// Who its session is ([`Begin::session_user`]).
    pub fn session_user(&self) -> Arc<str> {
        self.session_user
            .clone()
            .unwrap_or_else(|| Arc::from(crate::auth::ADMIN))
    }

    /// Records a failure (the first one wins).
    pub fn fail(&self, e: &Error) {
        let status = match e {
            Error::Cancelled => Status::Cancelled,
            Error::Timeout(_) => Status::Timeout,
            Error::Overloaded(_) => Status::Overloaded,
            _ => Status::Error,
        };
        let mut err = self.info.error.lock();
        if err.is_none() {
            *err = Some(e.to_string());
            self.info.status.store(status as u8, Ordering::Release);
            self.info.elapsed_us.store(
                self.info.started.elapsed().as_micros() as u64,
                Ordering::Relaxed,
            );
        }
    }

    pub fn add_rows(&self, n: u64) {
        self.info.rows.fetch_add(n, Ordering::Relaxed);
    }

    /// Why the query must stop now, if it must.
    fn stopped(&self) -> Option<Stop> {
        match self.info.stop.load(Ordering::Acquire) {
            STOP_CANCEL => Some(Stop::Cancelled),
            STOP_TIMEOUT => Some(Stop::Timeout(self.timeout.unwrap_or_default())),
            _ => None,
        }
    }

    /// Waits for the cancellation or the deadline, whichever comes first.
    async fn until_stopped(&self) -> Stop {
        let cancelled = self.info.cancel.cancelled();
        match self.deadline {
            Some(d) => {
                tokio::select! {
                    _ = cancelled => {}
                    _ = tokio::time::sleep_until(d) => {
                        let _ = self.info.stop.compare_exchange(
                            STOP_NONE, STOP_TIMEOUT, Ordering::AcqRel, Ordering::Acquire);
                        self.info.cancel.cancel();
                    }
                }
            }
            None => cancelled.await,
        }
        self.stopped().unwrap_or(Stop::Cancelled)
    }

    /// Runs `fut` until it finishes, the query is cancelled, or its deadline
    /// passes (then `fut` is dropped, which stops DataFusion's work).
    /// A stop is recorded as the query's status; so is `fut` being dropped
    /// unfinished (the caller went away): `cancelled`.
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output> {
        self.unfinished.fetch_add(1, Ordering::AcqRel);
        let out = tokio::select! {
            biased;
            out = fut => Ok(out),
            stop = self.until_stopped() => {
                let e = Error::from(stop);
                self.fail(&e);
                Err(e)
            }
        };
        self.unfinished.fetch_sub(1, Ordering::AcqRel);
        out
    }

    /// Wraps a result stream: counts the rows of each item with `rows`,
    /// records the first error, and ends the stream with `on_stop(stop)` as
    /// its last item when the query is cancelled or times out.
    pub fn guard<S, T, E>(
        self: Arc<Self>,
        stream: S,
        rows: fn(&T) -> u64,
        on_stop: impl Fn(Stop) -> E + Send + Sync + 'static,
    ) -> impl Stream<Item = std::result::Result<T, E>> + Send + 'static
    where
        S: Stream<Item = std::result::Result<T, E>> + Send + Unpin + 'static,
        T: Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        self.unfinished.fetch_add(1, Ordering::AcqRel);
        // One stop future per stream (not per item: rows may be polled one by one).
        let h = self.clone();
        let stop: Pin<Box<dyn Future<Output = Stop> + Send>> =
            Box::pin(async move { h.until_stopped().await });
        let state = Some((stream, self, stop));
        let on_stop = Arc::new(on_stop);
        futures::stream::unfold(state, move |state| {
            let on_stop = on_stop.clone();
            async move {
                let (mut stream, handle, mut stop) = state?;
                let next = tokio::select! {
                    biased;
                    stop = &mut stop => {
                        handle.fail(&Error::from(stop));
                        return Some((Err(on_stop(stop)), None));
                    }
                    next = stream.next() => next,
                };
                match next {
                    None => {
                        handle.unfinished.fetch_sub(1, Ordering::AcqRel);
                        None
                    }
                    Some(Ok(item)) => {
                        handle.add_rows(rows(&item));
                        Some((Ok(item), Some((stream, handle, stop))))
                    }
                    Some(Err(e)) => {
                        handle.fail(&Error::Sql(e.to_string()));
                        Some((Err(e), None))
                    }
                }
            }
        })
    }
}

impl Drop for QueryHandle {
    fn drop(&mut self) {
        let info = &self.info;
        if !info.status().is_finished() {
            let status = if info.status() == Status::Running
                && self.unfinished.load(Ordering::Acquire) == 0
            {
                Status::Ok
            } else {
                Status::Cancelled
            };
            info.elapsed_us
                .store(info.started.elapsed().as_micros() as u64, Ordering::Relaxed);
            info.status.store(status as u8, Ordering::Release);
        }
        self.registry.finish(info);
    }
}

#[cfg(test)]
mod tests;
